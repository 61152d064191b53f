-- A door tool call in fewer statements (issue 8, "Benchmark": the door adding under 1 ms).
--
-- take_door_call was: authenticate_door (door credential ⋈ sandbox), then take_call, which
-- read the sandbox and the grant again and made three statements on the bucket row (INSERT
-- ... ON CONFLICT DO NOTHING, SELECT ... FOR UPDATE, UPDATE). Now: one query reads the
-- credential, its sandbox and the tree's live grant; one INSERT ... ON CONFLICT DO UPDATE
-- ... WHERE <a whole call left> RETURNING takes the call; only a refusal reads the bucket
-- again (for retry_after_ms). The rules are the same: a revoked or expired credential or a
-- stopped sandbox is refused UNAUTHENTICATED before the bucket is touched, and the bucket is
-- one row in PostgreSQL that every gateway replica takes from. Two calls racing on the row
-- still serialize: the second waits on the row's lock and, under SERIALIZABLE, fails with
-- 40001 and is run again by the gateway, seeing the first call's tokens.
--
-- A door's create_sandbox takes its call in the same SQL call that reads the parent
-- (door_parent_snapshot): one round trip fewer, and still nothing read or written for a
-- call the credential or the bucket refuses.
--
-- The bucket's commit does not wait for its WAL flush (synchronous_commit off for this
-- transaction only): a crash can lose at most the last few hundred milliseconds of bucket
-- updates, which gives a sandbox back a few calls it already made; the bucket is a rate,
-- not a count anything is held to, and nothing else is written by the call.

-- One call taken from a sandbox's bucket at (p_calls per p_period_s); refuses
-- LIMIT_REACHED with the rate and retry_after_ms when less than one call is left.
CREATE FUNCTION os_take_call(p_sandbox uuid, p_name text, p_calls integer, p_period_s integer)
RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE
    v_per_s double precision := p_calls::double precision / p_period_s;
    v_left double precision;
    v_tokens double precision;
    v_wait_ms bigint;
BEGIN
    -- Not in the SET clause of the callers, so it lasts until this transaction commits.
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO sandbox_call_buckets AS b (sandbox_id, tokens, refilled_at)
    VALUES (p_sandbox, p_calls - 1, now())
    ON CONFLICT (sandbox_id) DO UPDATE
       SET tokens = least(p_calls::double precision,
                          b.tokens + greatest(0, extract(epoch FROM now() - b.refilled_at)) * v_per_s) - 1,
           refilled_at = now()
     WHERE least(p_calls::double precision,
                 b.tokens + greatest(0, extract(epoch FROM now() - b.refilled_at)) * v_per_s) >= 1
    RETURNING b.tokens INTO v_left;
    IF FOUND THEN
        RETURN v_left;
    END IF;
    -- Refused: the row exists (the conflict found it) and is locked by this transaction.
    SELECT least(p_calls::double precision,
                 b.tokens + greatest(0, extract(epoch FROM now() - b.refilled_at)) * v_per_s)
      INTO v_tokens FROM sandbox_call_buckets b WHERE b.sandbox_id = p_sandbox;
    v_wait_ms := greatest(1, ceil((1 - v_tokens) / v_per_s * 1000))::bigint;
    PERFORM os_refuse('LIMIT_REACHED',
        format('tool-call rate of %s reached for sandbox %s; retry after %s ms',
               os_rate_text(p_calls, p_period_s), p_name, v_wait_ms),
        jsonb_build_object('limit', 'rate', 'rate', os_rate_text(p_calls, p_period_s),
                           'retry_after_ms', v_wait_ms, 'sandbox', p_name));
    RETURN NULL;
END $$;
COMMENT ON FUNCTION os_take_call(uuid, text, integer, integer) IS
    'Takes one call from a sandbox''s bucket at p_calls per p_period_s in one upsert (commit not waiting for the WAL flush); LIMIT_REACHED with the rate and retry_after_ms when less than one call is left. Returns the calls left.';

-- As V14's (same rule, same refusals), through os_take_call.
CREATE OR REPLACE FUNCTION take_call(p_sandbox uuid) RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_calls integer;
    v_period integer;
BEGIN
    -- The rate when a tree has no live grant: 10/s (see V14).
    SELECT s.name, coalesce(g.rate_calls, 10), coalesce(g.rate_period_s, 1)
      INTO v_name, v_calls, v_period
      FROM sandboxes s
      LEFT JOIN grants g ON g.root_id = s.root_id AND g.ended_at IS NULL
     WHERE s.id = p_sandbox;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', 'sandbox not found');
    END IF;
    RETURN os_take_call(p_sandbox, v_name, v_calls, v_period);
END $$;

-- As V21's (same rule, same refusals): the credential, its sandbox and the grant's rate
-- in one query, then os_take_call.
CREATE OR REPLACE FUNCTION take_door_call(p_hash bytea, p_sandbox uuid) RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_calls integer;
    v_period integer;
BEGIN
    SELECT s.name, coalesce(g.rate_calls, 10), coalesce(g.rate_period_s, 1)
      INTO v_name, v_calls, v_period
      FROM door_credentials d
      JOIN sandboxes s ON s.id = d.sandbox_id
      LEFT JOIN grants g ON g.root_id = s.root_id AND g.ended_at IS NULL
     WHERE d.token_hash = p_hash AND d.sandbox_id = p_sandbox
       AND d.revoked_at IS NULL AND d.expires_at > now()
       AND s.phase IN ('PROVISIONING', 'READY');
    IF NOT FOUND THEN
        PERFORM os_refuse('UNAUTHENTICATED', 'unknown, revoked or expired door credential',
                          jsonb_build_object('reason', 'door_credential'));
    END IF;
    RETURN os_take_call(p_sandbox, v_name, v_calls, v_period);
END $$;

-- A sandbox's parent is itself (parent_snapshot), read only once the door call was taken.
CREATE FUNCTION door_parent_snapshot(p_hash bytea, p_caller os_caller, p_ref text)
RETURNS TABLE (id uuid, name text, kind text, policy_version integer, document jsonb, hash bytea,
               global_version integer, global_document jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    IF (p_caller).sandbox_id IS NULL THEN
        PERFORM os_refuse('UNAUTHENTICATED', 'a door call comes from a sandbox',
                          jsonb_build_object('reason', 'door_credential'));
    END IF;
    PERFORM take_door_call(p_hash, (p_caller).sandbox_id);
    RETURN QUERY SELECT * FROM parent_snapshot(p_caller => p_caller, p_ref => p_ref);
END $$;
COMMENT ON FUNCTION door_parent_snapshot(bytea, os_caller, text) IS
    'A create through a sandbox''s door: take_door_call (its refusals first), then parent_snapshot, in one call.';
ALTER FUNCTION door_parent_snapshot(bytea, os_caller, text) OWNER TO openshell_owner;
ALTER FUNCTION door_parent_snapshot(bytea, os_caller, text) SECURITY DEFINER SET search_path = public, pg_temp;
REVOKE EXECUTE ON FUNCTION door_parent_snapshot(bytea, os_caller, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION door_parent_snapshot(bytea, os_caller, text) TO openshell_gateway;

-- CREATE OR REPLACE resets SECURITY DEFINER and SET: both are restated (as V14 and V21).
ALTER FUNCTION take_call(uuid) SECURITY DEFINER SET search_path = public, pg_temp;
ALTER FUNCTION take_door_call(bytea, uuid) SECURITY DEFINER SET search_path = public, pg_temp;
ALTER FUNCTION os_take_call(uuid, text, integer, integer) OWNER TO openshell_owner;
REVOKE EXECUTE ON FUNCTION os_take_call(uuid, text, integer, integer) FROM PUBLIC;
