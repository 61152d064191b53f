-- The guards around MCP: the door credential (what a supervisor's in-sandbox door
-- authenticates with), the grant's program as the kernel reports it, and the per-sandbox
-- rate of tool calls.

-- ---------------------------------------------------------------- door credentials

CREATE TABLE door_credentials (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    sandbox_id  uuid NOT NULL,
    token_hash  bytea NOT NULL,
    issued_at   timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    CONSTRAINT door_credentials_pkey PRIMARY KEY (id),
    CONSTRAINT door_credentials_sandbox_fkey FOREIGN KEY (sandbox_id) REFERENCES sandboxes (id),
    CONSTRAINT door_credentials_token_hash_key UNIQUE (token_hash),
    CONSTRAINT door_credentials_token_hash_length CHECK (length(token_hash) = 32),
    CONSTRAINT door_credentials_short_lived CHECK (expires_at > issued_at AND expires_at <= issued_at + interval '1 hour'),
    CONSTRAINT door_credentials_revoked_after_issue CHECK (revoked_at IS NULL OR revoked_at >= issued_at)
);
COMMENT ON TABLE door_credentials IS
    'Short-lived credentials of the in-sandbox MCP door (audience urn:openshell:gateway-mcp), each exchanged by a sandbox''s supervisor for its own credential; stored as SHA-256 only. Rows stay for audit; only revoked_at changes.';
COMMENT ON COLUMN door_credentials.id IS 'Order of issue.';
COMMENT ON COLUMN door_credentials.sandbox_id IS 'The sandbox whose supervisor holds it: a door call acts as this sandbox.';
COMMENT ON COLUMN door_credentials.token_hash IS 'SHA-256 of the token (the token itself is never stored).';
COMMENT ON COLUMN door_credentials.issued_at IS 'When the supervisor exchanged for it.';
COMMENT ON COLUMN door_credentials.expires_at IS 'After this instant it authenticates nothing (at most an hour after issue).';
COMMENT ON COLUMN door_credentials.revoked_at IS 'When it was revoked: its sandbox stopped, or a newer one replaced it.';
CREATE INDEX door_credentials_sandbox_idx ON door_credentials (sandbox_id, id);
COMMENT ON INDEX door_credentials_sandbox_idx IS 'A sandbox''s door credentials, newest last.';

CREATE FUNCTION door_credentials_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.sandbox_id, NEW.token_hash, NEW.issued_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.id, OLD.sandbox_id, OLD.token_hash, OLD.issued_at, OLD.expires_at)
       OR (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at) THEN
        RAISE EXCEPTION 'a door credential can only be revoked, once' USING ERRCODE = 'OS001';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER door_credentials_before_update BEFORE UPDATE ON door_credentials
    FOR EACH ROW EXECUTE FUNCTION door_credentials_before_update();
COMMENT ON TRIGGER door_credentials_before_update ON door_credentials IS
    'Only revoked_at may change, once: nobody can extend, move or re-key a door credential.';
CREATE TRIGGER door_credentials_no_delete BEFORE DELETE OR TRUNCATE ON door_credentials
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER door_credentials_no_delete ON door_credentials IS 'Door credentials stay for audit: revoke ends them.';

-- A sandbox that leaves PROVISIONING/READY loses every door credential at once.
CREATE FUNCTION sandboxes_revoke_door() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE door_credentials SET revoked_at = now()
     WHERE sandbox_id = NEW.id AND revoked_at IS NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER sandboxes_revoke_door AFTER UPDATE OF phase ON sandboxes
    FOR EACH ROW WHEN (NEW.phase NOT IN ('PROVISIONING', 'READY') AND OLD.phase IN ('PROVISIONING', 'READY'))
    EXECUTE FUNCTION sandboxes_revoke_door();
COMMENT ON TRIGGER sandboxes_revoke_door ON sandboxes IS
    'A stopping, stopped, failed or deleted sandbox''s door credentials are revoked, whoever changes its phase.';

-- Live credentials one sandbox may hold at once: the newest and the one before it (calls
-- already forwarded with it may still be in flight while the supervisor switches).
CREATE FUNCTION door_credential_issue(p_sandbox uuid, p_token_hash bytea, p_ttl_seconds integer)
RETURNS timestamptz LANGUAGE plpgsql AS $$
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
    UPDATE door_credentials SET revoked_at = now()
     WHERE sandbox_id = s.id AND revoked_at IS NULL
       AND id < (SELECT max(id) FROM door_credentials WHERE sandbox_id = s.id);
    INSERT INTO door_credentials (sandbox_id, token_hash, expires_at)
    VALUES (s.id, p_token_hash, now() + make_interval(secs => p_ttl_seconds))
    RETURNING * INTO d;
    RETURN d.expires_at;
END $$;
COMMENT ON FUNCTION door_credential_issue(uuid, bytea, integer) IS
    'A live sandbox''s supervisor exchanges its credential for a door credential (hash) living p_ttl_seconds; older ones beyond the previous are revoked.';

CREATE FUNCTION authenticate_door(p_hash bytea)
RETURNS TABLE (sandbox_id uuid, sandbox_name text, owner_id bigint, expires_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT s.id, s.name, s.owner_id, d.expires_at
      FROM door_credentials d JOIN sandboxes s ON s.id = d.sandbox_id
     WHERE d.token_hash = p_hash AND d.revoked_at IS NULL AND d.expires_at > now()
       AND s.phase IN ('PROVISIONING', 'READY')
$$;
COMMENT ON FUNCTION authenticate_door(bytea) IS
    'The sandbox behind a live door credential (unrevoked, unexpired, its sandbox live), if any.';

-- ---------------------------------------------------------------- the grant's program, resolved
--
-- V10 (children's work) already gave grants their idle period (tool_idle_seconds) and
-- recreated the grant functions with it; everything below keeps that and adds the resolved
-- program and the rate, so the objects V10 defined are redefined here with both.

ALTER TABLE grants ADD COLUMN program_resolved text,
    ADD CONSTRAINT grants_program_resolved_format
        CHECK (program_resolved IS NULL OR (program_resolved ~ '^/' AND length(program_resolved) <= 4096));
COMMENT ON COLUMN grants.program IS 'The one program allowed to call through the in-sandbox door, as the user wrote it.';
COMMENT ON COLUMN grants.program_resolved IS
    'program with every symlink resolved on the gateway''s host when the grant was written (what the kernel reports as the executable); NULL for grants written before it was kept.';

ALTER TABLE grant_history ADD COLUMN program_resolved text;
COMMENT ON COLUMN grant_history.program_resolved IS 'program_resolved after the change.';

ALTER TABLE grants ADD COLUMN rate_calls integer NOT NULL DEFAULT 10,
    ADD COLUMN rate_period_s integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT grants_rate_calls_range CHECK (rate_calls BETWEEN 1 AND 100000),
    ADD CONSTRAINT grants_rate_period_check CHECK (rate_period_s IN (1, 60));
COMMENT ON COLUMN grants.rate_calls IS 'MCP tool calls each sandbox of the tree may make per rate_period_s (a token bucket of this size).';
COMMENT ON COLUMN grants.rate_period_s IS 'The period of rate_calls: 1 (per second) or 60 (per minute).';
ALTER TABLE grant_history ADD COLUMN rate_calls integer, ADD COLUMN rate_period_s integer;
COMMENT ON COLUMN grant_history.rate_calls IS 'rate_calls after the change.';
COMMENT ON COLUMN grant_history.rate_period_s IS 'rate_period_s after the change.';

-- As V10's, with the resolved program and the rate.
CREATE OR REPLACE FUNCTION grants_record_history() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ev text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ev := 'created';
    ELSIF NEW.end_reason IS NOT NULL AND OLD.end_reason IS NULL THEN
        ev := NEW.end_reason;
    ELSIF OLD.end_reason IS NOT NULL THEN
        RAISE EXCEPTION 'grant % has ended and cannot change', OLD.id USING ERRCODE = 'OS007';
    ELSE
        ev := 'updated';
    END IF;
    INSERT INTO grant_history (grant_id, root_id, event, max_depth, max_breadth, max_total,
                               expires_at, program, by_user, tool_idle_seconds,
                               program_resolved, rate_calls, rate_period_s)
    VALUES (NEW.id, NEW.root_id, ev, NEW.max_depth, NEW.max_breadth, NEW.max_total,
            NEW.expires_at, NEW.program, NEW.changed_by, NEW.tool_idle_seconds,
            NEW.program_resolved, NEW.rate_calls, NEW.rate_period_s);
    RETURN NULL;
END $$;
DROP TRIGGER grants_history_update ON grants;
CREATE TRIGGER grants_history_update AFTER UPDATE ON grants
    FOR EACH ROW
    WHEN ((OLD.max_depth, OLD.max_breadth, OLD.max_total, OLD.expires_at, OLD.program, OLD.ended_at,
           OLD.tool_idle_seconds, OLD.program_resolved, OLD.rate_calls, OLD.rate_period_s)
          IS DISTINCT FROM
          (NEW.max_depth, NEW.max_breadth, NEW.max_total, NEW.expires_at, NEW.program, NEW.ended_at,
           NEW.tool_idle_seconds, NEW.program_resolved, NEW.rate_calls, NEW.rate_period_s))
    EXECUTE FUNCTION grants_record_history();
COMMENT ON TRIGGER grants_history_update ON grants IS
    'Records every change of limits, expiry, program, idle period, rate or end in grant_history (admission counts are not history).';

-- The door's program (the kernel's executable path) matches what the user wrote or what it
-- resolved to; anything else is refused naming the program.
CREATE OR REPLACE FUNCTION os_check_grant(p_root uuid, g grants, p_sandbox uuid, p_program text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    last_grant grants;
BEGIN
    IF g.id IS NULL THEN
        SELECT * INTO last_grant FROM grants WHERE root_id = p_root ORDER BY id DESC LIMIT 1;
        IF FOUND AND last_grant.end_reason = 'revoked' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the tree''s grant was revoked',
                              jsonb_build_object('reason', 'revoked', 'grant_id', last_grant.id));
        END IF;
        PERFORM os_refuse('NOT_ALLOWED', 'the tree has no grant; a user must grant it first',
                          jsonb_build_object('reason', 'no_grant'));
    END IF;
    IF g.expires_at <= now() THEN
        PERFORM os_refuse('NOT_ALLOWED', format('the tree''s grant expired at %s', g.expires_at),
                          jsonb_build_object('reason', 'expired', 'grant_id', g.id, 'expires_at', g.expires_at));
    END IF;
    IF p_sandbox IS NOT NULL AND p_program IS DISTINCT FROM g.program
       AND p_program IS DISTINCT FROM g.program_resolved THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('the calling program %s is not the one the grant allows (%s%s)', coalesce(p_program, 'unknown'),
                   g.program, coalesce(' -> ' || nullif(g.program_resolved, g.program), '')),
            jsonb_build_object('reason', 'program', 'program', p_program, 'grant_program', g.program,
                               'grant_program_resolved', g.program_resolved));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_grant(uuid, grants, uuid, text) IS
    'Refuses unless the tree''s current grant (g; NULL when there is none) is live and, for a call from inside a sandbox, allows the calling program (as written or as resolved).';

CREATE FUNCTION os_check_program_resolved(p_program_resolved text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_program_resolved IS NULL OR p_program_resolved !~ '^/' OR length(p_program_resolved) > 4096 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'program: did not resolve to an absolute path of at most 4096 bytes',
                          jsonb_build_object('field', 'program'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_program_resolved(text) IS 'Names the field when the resolved program is unusable.';


CREATE FUNCTION os_check_rate(p_calls integer, p_period_s integer) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_calls IS NULL OR p_calls NOT BETWEEN 1 AND 100000 OR p_period_s IS NULL OR p_period_s NOT IN (1, 60) THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            format('rate: 1 to 100000 calls per second or per minute, got %s per %s s',
                   coalesce(p_calls::text, 'nothing'), coalesce(p_period_s::text, 'nothing')),
            jsonb_build_object('field', 'rate'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_rate(integer, integer) IS 'Names the field when a grant''s tool-call rate is out of range.';

CREATE FUNCTION os_rate_text(p_calls integer, p_period_s integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT p_calls || CASE WHEN p_period_s = 60 THEN '/min' ELSE '/s' END
$$;
COMMENT ON FUNCTION os_rate_text(integer, integer) IS 'A rate as people write it: 10/s, 600/min.';

-- ---------------------------------------------------------------- grants with both programs and a rate

-- The grant functions keep V10's idle period and gain the resolved program and the rate
-- (after V10's parameters); V10's signatures go.
DROP FUNCTION grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer);
DROP FUNCTION grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer);
DROP FUNCTION os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text, integer);

CREATE FUNCTION os_grant_insert(p_user bigint, s sandboxes, p_max_depth integer, p_max_breadth integer,
                                p_max_total integer, p_expires_at timestamptz, p_program text,
                                p_tool_idle_seconds integer, p_program_resolved text, p_rate_calls integer,
                                p_rate_period_s integer)
RETURNS grants LANGUAGE plpgsql AS $$
DECLARE
    cur grants;
    g grants;
BEGIN
    PERFORM os_check_grant_values(p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program);
    PERFORM os_check_tool_idle(p_tool_idle_seconds);
    PERFORM os_check_program_resolved(p_program_resolved);
    PERFORM os_check_rate(p_rate_calls, p_rate_period_s);
    SELECT * INTO cur FROM grants WHERE root_id = s.id AND ended_at IS NULL FOR UPDATE;
    IF FOUND THEN
        IF cur.expires_at > now() THEN
            PERFORM os_refuse('CONFLICT',
                format('sandbox %s already has a live grant (id %s); update or revoke it first', s.name, cur.id),
                jsonb_build_object('grant_id', cur.id));
        END IF;
        -- An expired grant is replaced by the new one.
        UPDATE grants SET ended_at = now(), end_reason = 'replaced', changed_by = p_user, changed_at = now()
         WHERE id = cur.id;
    END IF;
    INSERT INTO grants (root_id, max_depth, max_breadth, max_total, expires_at, program, created_by, changed_by,
                        tool_idle_seconds, program_resolved, rate_calls, rate_period_s)
    VALUES (s.id, p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program, p_user, p_user,
            p_tool_idle_seconds, p_program_resolved, p_rate_calls, p_rate_period_s)
    RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.create', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id, 'max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                               'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program,
                               'tool_idle_seconds', g.tool_idle_seconds, 'program_resolved', g.program_resolved,
                               'rate', os_rate_text(g.rate_calls, g.rate_period_s), 'replaced_grant_id', cur.id));
    RETURN g;
END $$;
COMMENT ON FUNCTION os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'Creates the tree''s grant, replacing an expired one; refuses while a live one exists.';

CREATE FUNCTION grant_create(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text, p_tool_idle_seconds integer, p_program_resolved text,
                             p_rate_calls integer, p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    g grants;
BEGIN
    g := os_grant_insert(p_user, os_grant_target(p_user, p_sandbox, p_ref), p_max_depth, p_max_breadth,
                         p_max_total, p_expires_at, p_program, coalesce(p_tool_idle_seconds, 300),
                         p_program_resolved, p_rate_calls, p_rate_period_s);
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'A user grants a tree (by its root): limits, expiry, the one program allowed to call (as written and resolved), the tool idle period (NULL: 5 minutes) and the tool-call rate.';

CREATE FUNCTION grant_update(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text, p_tool_idle_seconds integer, p_program_resolved text,
                             p_rate_calls integer, p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes := os_grant_target(p_user, p_sandbox, p_ref);
    old grants;
    g grants;
BEGIN
    SELECT * INTO old FROM grants WHERE root_id = s.id AND ended_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s has no current grant; create one', s.name),
                          jsonb_build_object('sandbox', s.name));
    END IF;
    IF (p_program IS NULL) <> (p_program_resolved IS NULL) OR (p_rate_calls IS NULL) <> (p_rate_period_s IS NULL) THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'program: a new program comes with what it resolved to, a rate with its period',
                          jsonb_build_object('field', CASE WHEN (p_rate_calls IS NULL) <> (p_rate_period_s IS NULL)
                                                           THEN 'rate' ELSE 'program' END));
    END IF;
    PERFORM os_check_grant_values(coalesce(p_max_depth, old.max_depth), coalesce(p_max_breadth, old.max_breadth),
                                  coalesce(p_max_total, old.max_total), coalesce(p_expires_at, old.expires_at),
                                  coalesce(p_program, old.program));
    PERFORM os_check_tool_idle(coalesce(p_tool_idle_seconds, old.tool_idle_seconds));
    IF p_program IS NOT NULL THEN
        PERFORM os_check_program_resolved(p_program_resolved);
    END IF;
    PERFORM os_check_rate(coalesce(p_rate_calls, old.rate_calls), coalesce(p_rate_period_s, old.rate_period_s));
    UPDATE grants SET max_depth = coalesce(p_max_depth, max_depth),
                      max_breadth = coalesce(p_max_breadth, max_breadth),
                      max_total = coalesce(p_max_total, max_total),
                      expires_at = coalesce(p_expires_at, expires_at),
                      program = coalesce(p_program, program),
                      tool_idle_seconds = coalesce(p_tool_idle_seconds, tool_idle_seconds),
                      program_resolved = CASE WHEN p_program IS NULL THEN program_resolved ELSE p_program_resolved END,
                      rate_calls = coalesce(p_rate_calls, rate_calls),
                      rate_period_s = coalesce(p_rate_period_s, rate_period_s),
                      changed_by = p_user, changed_at = now()
     WHERE id = old.id RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.update', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id,
                'before', jsonb_build_object('max_depth', old.max_depth, 'max_breadth', old.max_breadth,
                          'max_total', old.max_total, 'expires_at', old.expires_at, 'program', old.program,
                          'tool_idle_seconds', old.tool_idle_seconds, 'program_resolved', old.program_resolved,
                          'rate', os_rate_text(old.rate_calls, old.rate_period_s)),
                'after', jsonb_build_object('max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                          'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program,
                          'tool_idle_seconds', g.tool_idle_seconds, 'program_resolved', g.program_resolved,
                          'rate', os_rate_text(g.rate_calls, g.rate_period_s))));
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'Changes the current grant (NULL keeps a value; a program comes with its resolution, a rate with its period); applies from the next call (a new idle period from the next check).';

-- As V10's, with the grant's resolved program and rate (p_grant: tool_idle_seconds,
-- program_resolved, rate_calls, rate_period_s), and V9's enable_seqscan = off, which
-- CREATE OR REPLACE would otherwise reset.
CREATE OR REPLACE FUNCTION create_root(p_user bigint, p_name text, p_command text[], p_template jsonb,
                            p_policy jsonb, p_policy_hash bytea, p_credential_hash bytea,
                            p_request_id text, p_args_hash bytea, p_grant jsonb, p_runner text,
                            p_proof jsonb)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    prior uuid;
    s sandboxes;
BEGIN
    IF p_user IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only a user can create a root sandbox');
    END IF;
    prior := os_replay(p_user, NULL, p_request_id, p_args_hash);
    IF prior IS NOT NULL THEN
        RETURN QUERY SELECT prior, true;
        RETURN;
    END IF;
    PERFORM os_check_global_version(p_proof);
    PERFORM os_check_new_name(p_user, p_name);
    INSERT INTO sandboxes (name, owner_id, kind, command, template, created_by_user, credential_hash, runner)
    VALUES (p_name, p_user, 'agent', p_command, coalesce(p_template, '{}'), p_user, p_credential_hash, p_runner)
    RETURNING * INTO s;
    INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user)
    VALUES (s.id, 1, p_policy, p_policy_hash, p_user);
    IF p_request_id IS NOT NULL AND p_request_id <> '' THEN
        INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id)
        VALUES (os_caller_key(p_user, NULL), p_request_id, p_args_hash, s.id);
    END IF;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, request_id, details)
    VALUES ('sandbox.create', 'admitted', p_user, p_user, s.id, s.id, nullif(p_request_id, ''),
            jsonb_build_object('name', s.name, 'policy_hash', encode(p_policy_hash, 'hex'),
                               'verdict', p_proof->>'verdict'));
    IF p_grant IS NOT NULL THEN
        PERFORM os_grant_insert(p_user, s, (p_grant->>'max_depth')::integer, (p_grant->>'max_breadth')::integer,
                                (p_grant->>'max_total')::integer, (p_grant->>'expires_at')::timestamptz,
                                p_grant->>'program', coalesce((p_grant->>'tool_idle_seconds')::integer, 300),
                                p_grant->>'program_resolved',
                                (p_grant->>'rate_calls')::integer, (p_grant->>'rate_period_s')::integer);
    END IF;
    RETURN QUERY SELECT s.id, false;
END $$;

-- As V10's (with tool_idle_seconds), the new columns after it.
CREATE OR REPLACE VIEW grant_view AS
SELECT g.id, g.root_id, r.name AS root_name, r.owner_id, g.max_depth, g.max_breadth, g.max_total,
       g.expires_at, g.program,
       CASE WHEN g.end_reason IS NOT NULL THEN g.end_reason
            WHEN g.expires_at <= now() THEN 'expired' ELSE 'live' END AS state, cu.name AS created_by, g.created_at,
       g.ended_at, g.children_admitted, g.tool_idle_seconds, g.program_resolved, g.rate_calls, g.rate_period_s
  FROM grants g
  JOIN sandboxes r ON r.id = g.root_id
  JOIN users cu ON cu.id = g.created_by;
COMMENT ON COLUMN grant_view.program_resolved IS 'The program with its symlinks resolved when the grant was written.';
COMMENT ON COLUMN grant_view.rate_calls IS 'MCP tool calls per rate_period_s each sandbox of the tree may make.';
COMMENT ON COLUMN grant_view.rate_period_s IS '1 (per second) or 60 (per minute).';

-- As V10's (with tool_idle_seconds), the new history columns after it.
CREATE OR REPLACE VIEW grant_history_view AS
SELECT h.id, h.at, h.grant_id, h.root_id, r.name AS root_name, h.event, h.max_depth, h.max_breadth, h.max_total,
       h.expires_at, h.program, u.name AS by_user, h.db_user, h.tool_idle_seconds,
       h.program_resolved, h.rate_calls, h.rate_period_s
  FROM grant_history h
  JOIN users u ON u.id = h.by_user
  JOIN sandboxes r ON r.id = h.root_id;
COMMENT ON COLUMN grant_history_view.program_resolved IS 'The resolved program after the change.';
COMMENT ON COLUMN grant_history_view.rate_calls IS 'The tool-call rate after the change: calls per rate_period_s.';
COMMENT ON COLUMN grant_history_view.rate_period_s IS 'The period of rate_calls after the change: 1 or 60 seconds.';

-- ---------------------------------------------------------------- tool-call buckets

CREATE TABLE sandbox_call_buckets (
    sandbox_id  uuid NOT NULL,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    CONSTRAINT sandbox_call_buckets_pkey PRIMARY KEY (sandbox_id),
    CONSTRAINT sandbox_call_buckets_sandbox_fkey FOREIGN KEY (sandbox_id) REFERENCES sandboxes (id),
    CONSTRAINT sandbox_call_buckets_tokens_range CHECK (tokens >= 0 AND tokens <= 100000)
);
COMMENT ON TABLE sandbox_call_buckets IS
    'One token bucket per sandbox that made MCP tool calls: every gateway replica takes from the same row (take_call).';
COMMENT ON COLUMN sandbox_call_buckets.sandbox_id IS 'The calling sandbox.';
COMMENT ON COLUMN sandbox_call_buckets.tokens IS 'Calls it may still make at refilled_at (refilled at the grant''s rate, up to one period''s worth).';
COMMENT ON COLUMN sandbox_call_buckets.refilled_at IS 'When tokens was last computed.';

-- The rate when a tree has no live grant: a sandbox without one is refused by every tool
-- that needs it, but even those refusals are bounded.
CREATE FUNCTION take_call(p_sandbox uuid) RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
    g grants;
    v_calls integer := 10;
    v_period integer := 1;
    v_per_s double precision;
    b sandbox_call_buckets;
    v_tokens double precision;
    v_wait_ms bigint;
BEGIN
    SELECT * INTO s FROM sandboxes WHERE id = p_sandbox;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', 'sandbox not found');
    END IF;
    SELECT * INTO g FROM grants WHERE root_id = s.root_id AND ended_at IS NULL;
    IF FOUND THEN
        v_calls := g.rate_calls;
        v_period := g.rate_period_s;
    END IF;
    v_per_s := v_calls::double precision / v_period;
    INSERT INTO sandbox_call_buckets (sandbox_id, tokens, refilled_at) VALUES (s.id, v_calls, now())
    ON CONFLICT (sandbox_id) DO NOTHING;
    SELECT * INTO b FROM sandbox_call_buckets WHERE sandbox_id = s.id FOR UPDATE;
    v_tokens := least(v_calls::double precision,
                      b.tokens + greatest(0, extract(epoch FROM now() - b.refilled_at)) * v_per_s);
    IF v_tokens < 1 THEN
        v_wait_ms := ceil((1 - v_tokens) / v_per_s * 1000)::bigint;
        PERFORM os_refuse('LIMIT_REACHED',
            format('tool-call rate of %s reached for sandbox %s; retry after %s ms',
                   os_rate_text(v_calls, v_period), s.name, v_wait_ms),
            jsonb_build_object('limit', 'rate', 'rate', os_rate_text(v_calls, v_period),
                               'retry_after_ms', v_wait_ms, 'sandbox', s.name));
    END IF;
    UPDATE sandbox_call_buckets SET tokens = v_tokens - 1, refilled_at = now() WHERE sandbox_id = s.id;
    RETURN v_tokens - 1;
END $$;
COMMENT ON FUNCTION take_call(uuid) IS
    'Takes one MCP tool call from a sandbox''s bucket at its tree''s grant rate (10/s without a grant); LIMIT_REACHED with the rate and retry_after_ms when empty. Returns the calls left.';

-- ---------------------------------------------------------------- what the gateway may call

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'door_credential_issue(uuid, bytea, integer)', 'authenticate_door(bytea)',
        'grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer)',
        'grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer)',
        'create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, jsonb)',
        'take_call(uuid)'
    ]::regprocedure[] LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = public, pg_temp', f);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO openshell_gateway', f);
    END LOOP;
END $$;

-- Internal helpers: the owner's, callable by nobody else (the definer functions above run as the owner).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'door_credentials_before_update()', 'sandboxes_revoke_door()', 'grants_record_history()',
        'os_check_grant(uuid, grants, uuid, text)', 'os_check_program_resolved(text)',
        'os_check_rate(integer, integer)', 'os_rate_text(integer, integer)',
        'os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text, integer, text, integer, integer)',
        'door_credential_issue(uuid, bytea, integer)', 'authenticate_door(bytea)',
        'grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer)',
        'grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer)',
        'create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, jsonb)',
        'take_call(uuid)'
    ]::regprocedure[] LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO openshell_owner', f);
    END LOOP;
END $$;
REVOKE EXECUTE ON FUNCTION door_credentials_before_update(), sandboxes_revoke_door(), os_check_program_resolved(text),
    os_check_rate(integer, integer), os_rate_text(integer, integer),
    os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text, integer, text, integer, integer)
    FROM PUBLIC;
ALTER TABLE door_credentials OWNER TO openshell_owner;
ALTER TABLE sandbox_call_buckets OWNER TO openshell_owner;

-- The operator reads the views made for people (CREATE OR REPLACE keeps privileges; said again).
GRANT SELECT ON grant_view, grant_history_view TO openshell_operator;
