-- The in-sandbox door: what a supervisor's MCP door authenticates with, and its rate.
--
-- A running sandbox's supervisor exchanges its credential for short-lived door credentials;
-- every tool call through the door re-checks one (a revocation, an expiry or its sandbox's
-- stop refuses it at once) and takes one call from the sandbox's bucket, at its tree's grant
-- rate, in one SERIALIZABLE call shared by every gateway replica. The gateway may reuse a door
-- credential it verified less than a second ago for MCP requests that act on nothing
-- (initialize, tools/list, the session's stream). Every tool call also checks the calling
-- program against the tree's grant (os_check_program, sql/grants.sql).

-- PL/pgSQL, so its plan is kept: a SQL-language function that cannot be inlined (SECURITY
-- DEFINER) plans its query on every call, which cost a door call about 0.4 ms.
CREATE OR REPLACE FUNCTION authenticate_door(p_hash bytea)
RETURNS TABLE (sandbox_id uuid, sandbox_name text, owner_id bigint, expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT s.id, s.name, s.owner_id, d.expires_at
      FROM door_credentials d JOIN sandboxes s ON s.id = d.sandbox_id
     WHERE d.token_hash = p_hash AND d.revoked_at IS NULL AND d.expires_at > now()
       AND s.phase IN ('PROVISIONING', 'READY');
END $$;
COMMENT ON FUNCTION authenticate_door(bytea) IS
    'The sandbox behind a live door credential (unrevoked, unexpired, its sandbox live), if any.';

-- Live credentials one sandbox may hold at once: the newest and the one before it (calls
-- already forwarded with it may still be in flight while the supervisor switches).
CREATE OR REPLACE FUNCTION door_credential_issue(p_sandbox uuid, p_token_hash bytea, p_ttl_seconds integer)
RETURNS timestamptz LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
    d door_credentials;
BEGIN
    IF p_ttl_seconds IS NULL OR p_ttl_seconds NOT BETWEEN 1 AND 3600 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'ttl: a door credential lives 1 to 3600 seconds',
                          jsonb_build_object('field', 'ttl'));
    END IF;
    SELECT * INTO s FROM sandboxes WHERE id = p_sandbox FOR UPDATE;
    IF NOT FOUND OR s.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only a live sandbox''s supervisor can get a door credential',
                          jsonb_build_object('reason', 'sandbox_not_live', 'phase', s.phase));
    END IF;
    UPDATE door_credentials SET revoked_at = greatest(now(), issued_at)
     WHERE sandbox_id = s.id AND revoked_at IS NULL
       AND id < (SELECT max(id) FROM door_credentials WHERE sandbox_id = s.id);
    INSERT INTO door_credentials (sandbox_id, token_hash, expires_at)
    VALUES (s.id, p_token_hash, now() + make_interval(secs => p_ttl_seconds))
    RETURNING * INTO d;
    RETURN d.expires_at;
END $$;
COMMENT ON FUNCTION door_credential_issue(uuid, bytea, integer) IS
    'A live sandbox''s supervisor exchanges its credential for a door credential (hash) living p_ttl_seconds; older ones beyond the previous are revoked.';

CREATE OR REPLACE FUNCTION door_credentials_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.sandbox_id, NEW.token_hash, NEW.issued_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.id, OLD.sandbox_id, OLD.token_hash, OLD.issued_at, OLD.expires_at)
       OR (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'a door credential can only be revoked, once');
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION door_credentials_before_update() IS
    'Trigger body: a door credential can only be revoked (once).';
CREATE TRIGGER door_credentials_before_update BEFORE UPDATE ON door_credentials
    FOR EACH ROW EXECUTE FUNCTION door_credentials_before_update();
COMMENT ON TRIGGER door_credentials_before_update ON door_credentials IS
    'Only revoked_at may change, once: nobody can extend, move or re-key a door credential.';

-- A sandbox that leaves PROVISIONING/READY loses every door credential at once. A revoke
-- whose transaction began before the credential was issued (it waited for the sandbox's row
-- that the issue locked) records the issue time: now() is when the transaction began.
CREATE OR REPLACE FUNCTION sandboxes_revoke_door() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE door_credentials SET revoked_at = greatest(now(), issued_at)
     WHERE sandbox_id = NEW.id AND revoked_at IS NULL;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION sandboxes_revoke_door() IS
    'Trigger body: revokes the door credentials of a sandbox that stopped being PROVISIONING or READY.';
CREATE TRIGGER sandboxes_revoke_door AFTER UPDATE OF phase ON sandboxes
    FOR EACH ROW WHEN (NEW.phase NOT IN ('PROVISIONING', 'READY') AND OLD.phase IN ('PROVISIONING', 'READY'))
    EXECUTE FUNCTION sandboxes_revoke_door();
COMMENT ON TRIGGER sandboxes_revoke_door ON sandboxes IS
    'A stopping, stopped, failed or deleted sandbox''s door credentials are revoked, whoever changes its phase.';

-- One call taken from a sandbox's bucket at (p_calls per p_period_s) in one INSERT ... ON
-- CONFLICT DO UPDATE ... WHERE <a whole call left> RETURNING; only a refusal reads the
-- bucket again, for retry_after_ms. Two calls racing on the row serialize: the second waits
-- on the row's lock and, under SERIALIZABLE, fails with 40001 and is run again by the
-- gateway, seeing the first call's tokens. The commit does not wait for its WAL flush
-- (synchronous_commit off for this transaction only): a crash can lose the last few hundred
-- milliseconds of bucket updates, giving a sandbox back calls it made; the bucket is a rate,
-- not a count anything is held to, and nothing else is written by the call.
CREATE OR REPLACE FUNCTION os_take_call(p_sandbox uuid, p_name text, p_calls integer, p_period_s integer)
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

-- One query reads the credential, its sandbox and the tree's newest grant: a revoked or
-- expired credential or a stopped sandbox is refused UNAUTHENTICATED, then a program that
-- is not the grant's NOT_ALLOWED naming it (os_check_program, sql/grants.sql), both before
-- the bucket is touched; then os_take_call at the live grant's rate (without one 10/s, so
-- even the refusals of a sandbox without one are bounded). Every door tool call comes here,
-- so no tool answers a program the grant does not allow.
CREATE OR REPLACE FUNCTION take_door_call(p_hash bytea, p_sandbox uuid, p_program text) RETURNS double precision
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_name text;
    g grants;
BEGIN
    SELECT s.name, g0.id, g0.program, g0.program_resolved, g0.ended_at, g0.rate_calls, g0.rate_period_s
      INTO v_name, g.id, g.program, g.program_resolved, g.ended_at, g.rate_calls, g.rate_period_s
      FROM door_credentials d
      JOIN sandboxes s ON s.id = d.sandbox_id
      LEFT JOIN LATERAL (SELECT * FROM grants WHERE root_id = s.root_id ORDER BY id DESC LIMIT 1) g0 ON true
     WHERE d.token_hash = p_hash AND d.sandbox_id = p_sandbox
       AND d.revoked_at IS NULL AND d.expires_at > now()
       AND s.phase IN ('PROVISIONING', 'READY');
    IF NOT FOUND THEN
        PERFORM os_refuse('UNAUTHENTICATED', 'unknown, revoked or expired door credential',
                          jsonb_build_object('reason', 'door_credential'));
    END IF;
    PERFORM os_check_program(g, p_program);
    IF g.ended_at IS NOT NULL THEN
        RETURN os_take_call(p_sandbox, v_name, 10, 1);
    END IF;
    RETURN os_take_call(p_sandbox, v_name, g.rate_calls, g.rate_period_s);
END $$;
COMMENT ON FUNCTION take_door_call(bytea, uuid, text) IS
    'A door tool call: refuses UNAUTHENTICATED unless p_hash is a live door credential of p_sandbox, NOT_ALLOWED unless p_program is the tree''s newest grant''s (os_check_program), then takes one call from the sandbox''s bucket (os_take_call). Returns the calls left.';

-- A door's create_sandbox: its call taken in the same SQL call that reads the parent (one
-- round trip fewer, and nothing read for a call the credential or the bucket refuses). A
-- sandbox's parent is itself.
CREATE OR REPLACE FUNCTION door_parent_snapshot(p_hash bytea, p_caller os_caller, p_ref text)
RETURNS TABLE (id uuid, name text, kind text, policy_version integer, document jsonb, hash bytea,
               global_version integer, global_document jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF (p_caller).sandbox_id IS NULL THEN
        PERFORM os_refuse('UNAUTHENTICATED', 'a door call comes from a sandbox',
                          jsonb_build_object('reason', 'door_credential'));
    END IF;
    PERFORM take_door_call(p_hash, (p_caller).sandbox_id, (p_caller).program);
    RETURN QUERY SELECT * FROM parent_snapshot(p_caller => p_caller, p_ref => p_ref);
END $$;
COMMENT ON FUNCTION door_parent_snapshot(bytea, os_caller, text) IS
    'A create through a sandbox''s door: take_door_call (its refusals first), then parent_snapshot, in one call.';
