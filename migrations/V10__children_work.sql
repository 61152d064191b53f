-- Children's work: tool children stop when idle, agent children's files are read.
--
-- Idle stop: the idle period is part of the tree's grant (grants.tool_idle_seconds); each
-- sandbox row carries how many execs run in it and when the last one started or ended, so
-- the timer lives here and survives a gateway restart. The gateway asks `idle_tools` which
-- tool children are due and stops each through `stop_idle`, which checks again in the same
-- SERIALIZABLE transaction that marks it STOPPING: an exec that starts concurrently
-- (`exec_begin` writes the same row) either keeps it alive or finds it stopping.

-- ---------------------------------------------------------------- the grant's idle period

ALTER TABLE grants ADD COLUMN tool_idle_seconds integer NOT NULL DEFAULT 300;
ALTER TABLE grants ADD CONSTRAINT grants_tool_idle_range CHECK (tool_idle_seconds BETWEEN 1 AND 604800);
COMMENT ON COLUMN grants.tool_idle_seconds IS
    'A tool child with no exec running and none for this many seconds is stopped (1 s to 7 days; default 5 minutes).';

ALTER TABLE grant_history ADD COLUMN tool_idle_seconds integer;
COMMENT ON COLUMN grant_history.tool_idle_seconds IS 'tool_idle_seconds after the change (NULL in rows written before it existed).';

CREATE INDEX grants_root_idx ON grants (root_id, id);
COMMENT ON INDEX grants_root_idx IS 'A tree''s latest grant (whose idle period its tool children keep).';

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
                               expires_at, program, by_user, tool_idle_seconds)
    VALUES (NEW.id, NEW.root_id, ev, NEW.max_depth, NEW.max_breadth, NEW.max_total,
            NEW.expires_at, NEW.program, NEW.changed_by, NEW.tool_idle_seconds);
    RETURN NULL;
END $$;
DROP TRIGGER grants_history_update ON grants;
CREATE TRIGGER grants_history_update AFTER UPDATE ON grants
    FOR EACH ROW
    WHEN ((OLD.max_depth, OLD.max_breadth, OLD.max_total, OLD.expires_at, OLD.program, OLD.ended_at,
           OLD.tool_idle_seconds)
          IS DISTINCT FROM
          (NEW.max_depth, NEW.max_breadth, NEW.max_total, NEW.expires_at, NEW.program, NEW.ended_at,
           NEW.tool_idle_seconds))
    EXECUTE FUNCTION grants_record_history();
COMMENT ON TRIGGER grants_history_update ON grants IS
    'Records every change of limits, expiry, program, idle period or end in grant_history (admission counts are not history).';

CREATE OR REPLACE VIEW grant_view AS
SELECT g.id, g.root_id, r.name AS root_name, r.owner_id, g.max_depth, g.max_breadth, g.max_total,
       g.expires_at, g.program,
       CASE WHEN g.end_reason IS NOT NULL THEN g.end_reason
            WHEN g.expires_at <= now() THEN 'expired' ELSE 'live' END AS state, cu.name AS created_by, g.created_at,
       g.ended_at, g.children_admitted, g.tool_idle_seconds
  FROM grants g
  JOIN sandboxes r ON r.id = g.root_id
  JOIN users cu ON cu.id = g.created_by;
COMMENT ON COLUMN grant_view.tool_idle_seconds IS 'Idle period after which a tool child of the tree is stopped.';

CREATE OR REPLACE VIEW grant_history_view AS
SELECT h.id, h.at, h.grant_id, h.root_id, r.name AS root_name, h.event, h.max_depth, h.max_breadth, h.max_total,
       h.expires_at, h.program, u.name AS by_user, h.db_user, h.tool_idle_seconds
  FROM grant_history h
  JOIN users u ON u.id = h.by_user
  JOIN sandboxes r ON r.id = h.root_id;
COMMENT ON COLUMN grant_history_view.tool_idle_seconds IS 'The idle period after the change.';

CREATE FUNCTION os_check_tool_idle(p_seconds integer) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_seconds IS NULL OR p_seconds NOT BETWEEN 1 AND 604800 THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            format('tool_idle: must be between 1 second and 7 days, got %s', coalesce(p_seconds || ' s', 'nothing')),
            jsonb_build_object('field', 'tool_idle'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_tool_idle(integer) IS 'Names the field when an idle period is out of range.';

-- The grant functions gain the idle period; the old signatures go.
DROP FUNCTION grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text);
DROP FUNCTION grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text);

CREATE OR REPLACE FUNCTION create_root(p_user bigint, p_name text, p_command text[], p_template jsonb,
                            p_policy jsonb, p_policy_hash bytea, p_credential_hash bytea,
                            p_request_id text, p_args_hash bytea, p_grant jsonb, p_runner text,
                            p_proof jsonb)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
                                p_grant->>'program', coalesce((p_grant->>'tool_idle_seconds')::integer, 300));
    END IF;
    RETURN QUERY SELECT s.id, false;
END $$;

-- A grant is inserted with its idle period (the old signature goes).
DROP FUNCTION os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text);
CREATE FUNCTION os_grant_insert(p_user bigint, s sandboxes, p_max_depth integer, p_max_breadth integer,
                                p_max_total integer, p_expires_at timestamptz, p_program text,
                                p_tool_idle_seconds integer)
RETURNS grants LANGUAGE plpgsql AS $$
DECLARE
    cur grants;
    g grants;
BEGIN
    PERFORM os_check_grant_values(p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program);
    PERFORM os_check_tool_idle(p_tool_idle_seconds);
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
                        tool_idle_seconds)
    VALUES (s.id, p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program, p_user, p_user,
            p_tool_idle_seconds)
    RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.create', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id, 'max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                               'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program,
                               'tool_idle_seconds', g.tool_idle_seconds, 'replaced_grant_id', cur.id));
    RETURN g;
END $$;
COMMENT ON FUNCTION os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text, integer) IS
    'Creates the tree''s grant, replacing an expired one; refuses while a live one exists.';

CREATE FUNCTION grant_create(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text, p_tool_idle_seconds integer)
RETURNS SETOF grant_view LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    g grants;
BEGIN
    g := os_grant_insert(p_user, os_grant_target(p_user, p_sandbox, p_ref), p_max_depth, p_max_breadth,
                         p_max_total, p_expires_at, p_program, coalesce(p_tool_idle_seconds, 300));
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer) IS
    'A user grants a tree (by its root): limits, expiry, the one program allowed to call and the tool idle period (NULL: 5 minutes).';

CREATE FUNCTION grant_update(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text, p_tool_idle_seconds integer)
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
    PERFORM os_check_grant_values(coalesce(p_max_depth, old.max_depth), coalesce(p_max_breadth, old.max_breadth),
                                  coalesce(p_max_total, old.max_total), coalesce(p_expires_at, old.expires_at),
                                  coalesce(p_program, old.program));
    PERFORM os_check_tool_idle(coalesce(p_tool_idle_seconds, old.tool_idle_seconds));
    UPDATE grants SET max_depth = coalesce(p_max_depth, max_depth),
                      max_breadth = coalesce(p_max_breadth, max_breadth),
                      max_total = coalesce(p_max_total, max_total),
                      expires_at = coalesce(p_expires_at, expires_at),
                      program = coalesce(p_program, program),
                      tool_idle_seconds = coalesce(p_tool_idle_seconds, tool_idle_seconds),
                      changed_by = p_user, changed_at = now()
     WHERE id = old.id RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.update', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id,
                'before', jsonb_build_object('max_depth', old.max_depth, 'max_breadth', old.max_breadth,
                          'max_total', old.max_total, 'expires_at', old.expires_at, 'program', old.program,
                          'tool_idle_seconds', old.tool_idle_seconds),
                'after', jsonb_build_object('max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                          'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program,
                          'tool_idle_seconds', g.tool_idle_seconds)));
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer) IS
    'Changes the current grant (NULL keeps a value); applies from the next call (a new idle period from the next check).';

-- ---------------------------------------------------------------- exec activity

ALTER TABLE sandboxes ADD COLUMN execs_running integer NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_execs_running_check CHECK (execs_running >= 0);
ALTER TABLE sandboxes ADD COLUMN last_activity timestamptz NOT NULL DEFAULT now();
COMMENT ON COLUMN sandboxes.execs_running IS 'Execs in flight in it, as the gateway relaying them counts (reset when that gateway restarts).';
COMMENT ON COLUMN sandboxes.last_activity IS 'When it became READY or an exec in it last started or ended: a tool child''s idle timer.';
CREATE INDEX sandboxes_idle_tools_idx ON sandboxes (runner, last_activity)
    WHERE kind = 'tool' AND phase = 'READY' AND execs_running = 0;
COMMENT ON INDEX sandboxes_idle_tools_idx IS 'The tool children that may be idle, per runner.';

-- The idle timer starts when a sandbox becomes READY.
CREATE FUNCTION sandboxes_ready_activity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.last_activity := now();
    RETURN NEW;
END $$;
CREATE TRIGGER sandboxes_ready_activity BEFORE UPDATE OF phase ON sandboxes
    FOR EACH ROW WHEN (OLD.phase = 'PROVISIONING' AND NEW.phase = 'READY')
    EXECUTE FUNCTION sandboxes_ready_activity();
COMMENT ON TRIGGER sandboxes_ready_activity ON sandboxes IS 'A sandbox''s idle timer starts when it becomes READY.';

CREATE FUNCTION exec_begin(p_user bigint, p_sandbox uuid, p_ref text, p_kind text) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_id uuid := work_target(p_user, p_sandbox, p_ref, p_kind);
BEGIN
    UPDATE sandboxes SET execs_running = execs_running + 1, last_activity = now()
     WHERE id = v_id AND phase = 'READY';
    IF NOT FOUND THEN
        PERFORM os_refuse('CONFLICT', format('sandbox %s is stopping', p_ref), jsonb_build_object('sandbox', p_ref));
    END IF;
    RETURN v_id;
END $$;
COMMENT ON FUNCTION exec_begin(bigint, uuid, text, text) IS
    'An exec starts in a sandbox the caller may work in (see work_target): counts it as running and restarts the idle timer.';

CREATE FUNCTION exec_end(p_id uuid) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    UPDATE sandboxes SET execs_running = greatest(execs_running - 1, 0), last_activity = now() WHERE id = p_id;
$$;
COMMENT ON FUNCTION exec_end(uuid) IS 'An exec ended (or its relay did): one fewer running, and the idle timer restarts.';

CREATE FUNCTION execs_reset(p_runner text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    n integer;
BEGIN
    -- The execs a gateway was relaying ended with it: their timer restarts from its restart.
    UPDATE sandboxes SET execs_running = 0, last_activity = now()
     WHERE runner = p_runner AND execs_running > 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
COMMENT ON FUNCTION execs_reset(text) IS
    'At a gateway''s start: the execs it relayed before are gone; sandboxes without one keep their timer.';

CREATE FUNCTION os_tool_idle_seconds(p_root uuid) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT tool_idle_seconds FROM grants WHERE root_id = p_root ORDER BY id DESC LIMIT 1), 300)
$$;
COMMENT ON FUNCTION os_tool_idle_seconds(uuid) IS 'The idle period of a tree''s tool children: its latest grant''s.';

CREATE FUNCTION idle_tools(p_runner text) RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT s.id FROM sandboxes s
     WHERE s.runner = p_runner AND s.kind = 'tool' AND s.phase = 'READY' AND s.execs_running = 0
       AND s.last_activity + make_interval(secs => os_tool_idle_seconds(s.root_id)) <= now()
     ORDER BY s.last_activity LIMIT 100
$$;
COMMENT ON FUNCTION idle_tools(text) IS 'Tool children of this runner whose idle period has passed (at most 100 per call).';

CREATE FUNCTION stop_idle(p_id uuid)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
    idle integer;
BEGIN
    SELECT * INTO s FROM sandboxes x WHERE x.id = p_id;
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    idle := os_tool_idle_seconds(s.root_id);
    -- Checked again here: an exec may have started since the gateway asked.
    IF s.kind <> 'tool' OR s.phase <> 'READY' OR s.execs_running > 0
       OR s.last_activity + make_interval(secs => idle) > now() THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM os_stop_subtree(s, false, format('idle: no exec for %s s', idle));
    INSERT INTO audit_log (action, outcome, message, owner_id, sandbox_id, parent_id, root_id, details)
    VALUES ('system.stop', 'done', format('idle: no exec for %s s', idle), s.owner_id, s.id, s.parent_id, s.root_id,
            jsonb_build_object('name', s.name, 'reason', 'idle', 'tool_idle_seconds', idle,
                               'last_activity', s.last_activity));
END $$;
COMMENT ON FUNCTION stop_idle(uuid) IS
    'Marks an idle tool child STOPPING (reason idle, audited as system.stop) if it still is idle; returns what to stop.';

-- ---------------------------------------------------------------- files of agent children

CREATE FUNCTION file_target(p_user bigint, p_sandbox uuid, p_ref text) RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_id uuid := work_target(p_user, p_sandbox, p_ref, 'agent');
BEGIN
    -- work_target holds a sandbox caller to its agent children; a user is held here too.
    IF (SELECT kind FROM sandboxes WHERE id = v_id) <> 'agent' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox %s is a tool child; files are read only from agent sandboxes', p_ref),
                          jsonb_build_object('sandbox', p_ref, 'kind', 'tool', 'reason', 'wrong_kind'));
    END IF;
    RETURN v_id;
END $$;
COMMENT ON FUNCTION file_target(bigint, uuid, text) IS
    'The running agent sandbox whose files a caller may read: a sandbox its own agent children, a user any agent sandbox of theirs; never a tool child.';

-- Only the gateway calls these (it may only execute functions; see V6).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer)',
        'grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer)',
        'create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, jsonb)',
        'exec_begin(bigint, uuid, text, text)', 'exec_end(uuid)', 'execs_reset(text)', 'idle_tools(text)',
        'stop_idle(uuid)', 'file_target(bigint, uuid, text)'
    ]::regprocedure[] LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO openshell_gateway', f);
    END LOOP;
END $$;
