-- Children's work: tool children run commands and stop when idle, agent children's files are read.
--
-- Idle stop: the idle period is the tree's grant's (grants.tool_idle_seconds); each sandbox
-- row carries how many execs run in it and when the last one started or ended, so the timer
-- lives here and survives a gateway restart. The gateway asks idle_tools which tool children
-- are due and stops each through stop_idle, which checks again in the same SERIALIZABLE
-- transaction that marks it STOPPING: an exec that starts concurrently (exec_begin writes the
-- same row) either keeps it alive or finds it stopping.

CREATE OR REPLACE FUNCTION work_target(p_user bigint, p_sandbox uuid, p_ref text, p_kind text) RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
BEGIN
    -- A sandbox works only in its own children, never in itself; a user in any of theirs.
    s := resolve_sandbox(p_user, p_sandbox, p_ref, false);
    IF p_sandbox IS NOT NULL AND s.parent_id IS DISTINCT FROM p_sandbox THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox %s is not a child of the calling sandbox', p_ref),
                          jsonb_build_object('sandbox', p_ref, 'reason', 'not_your_child'));
    END IF;
    IF p_sandbox IS NOT NULL AND p_kind IS NOT NULL AND s.kind <> p_kind THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox %s is a%s %s child; this works only on %s children',
                          p_ref, CASE WHEN s.kind = 'agent' THEN 'n' ELSE '' END, s.kind, p_kind),
                          jsonb_build_object('sandbox', p_ref, 'kind', s.kind, 'reason', 'wrong_kind'));
    END IF;
    IF s.phase <> 'READY' THEN
        PERFORM os_refuse('CONFLICT', format('sandbox %s is %s, not running', p_ref, s.phase),
                          jsonb_build_object('sandbox', p_ref, 'phase', s.phase));
    END IF;
    RETURN s.id;
END $$;
COMMENT ON FUNCTION work_target(bigint, uuid, text, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. The running sandbox a caller may exec in or read files of: a sandbox only its own children of the given kind (tool for exec, agent for files), a user any of theirs.';

CREATE OR REPLACE FUNCTION work_target(p_caller os_caller, p_ref text, p_kind os_kind)
RETURNS uuid LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT work_target(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                       p_kind => p_kind::text)
$$;
COMMENT ON FUNCTION work_target(os_caller, text, os_kind) IS
    'The running sandbox p_ref names, if the caller may work in it (a sandbox: its own children of p_kind).';

CREATE OR REPLACE FUNCTION file_target(p_user bigint, p_sandbox uuid, p_ref text) RETURNS uuid
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
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. The running agent sandbox whose files a caller may read: a sandbox its own agent children, a user any agent sandbox of theirs; never a tool child.';

CREATE OR REPLACE FUNCTION file_target(p_caller os_caller, p_ref text)
RETURNS uuid LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT file_target(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION file_target(os_caller, text) IS
    'The running agent sandbox whose files the caller may read (never a tool child).';

CREATE OR REPLACE FUNCTION exec_begin(p_user bigint, p_sandbox uuid, p_ref text, p_kind text) RETURNS uuid
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
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. An exec starts in a sandbox the caller may work in (see work_target): counts it as running and restarts the idle timer.';

CREATE OR REPLACE FUNCTION exec_begin(p_caller os_caller, p_ref text, p_kind os_kind)
RETURNS uuid LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT exec_begin(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                      p_kind => p_kind::text)
$$;
COMMENT ON FUNCTION exec_begin(os_caller, text, os_kind) IS
    'Starts an exec in a running sandbox the caller may work in (a sandbox: its own children of p_kind).';

CREATE OR REPLACE FUNCTION exec_end(p_id uuid) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    UPDATE sandboxes SET execs_running = greatest(execs_running - 1, 0), last_activity = now() WHERE id = p_id;
$$;
COMMENT ON FUNCTION exec_end(uuid) IS
    'An exec ended (or its relay did): one fewer running, and the idle timer restarts.';

CREATE OR REPLACE FUNCTION execs_reset(p_runner text) RETURNS integer
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

-- The idle timer starts when a sandbox becomes READY.
CREATE OR REPLACE FUNCTION sandboxes_ready_activity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.last_activity := now();
    RETURN NEW;
END $$;
COMMENT ON FUNCTION sandboxes_ready_activity() IS
    'Trigger body: a sandbox that becomes READY starts its idle timer.';
CREATE TRIGGER sandboxes_ready_activity BEFORE UPDATE OF phase ON sandboxes
    FOR EACH ROW WHEN (OLD.phase = 'PROVISIONING' AND NEW.phase = 'READY')
    EXECUTE FUNCTION sandboxes_ready_activity();
COMMENT ON TRIGGER sandboxes_ready_activity ON sandboxes IS
    'A sandbox''s idle timer starts when it becomes READY.';

CREATE OR REPLACE FUNCTION idle_tools(p_runner text) RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT s.id FROM sandboxes s
     WHERE s.runner = p_runner AND s.kind = 'tool' AND s.phase = 'READY' AND s.execs_running = 0
       AND s.last_activity + make_interval(secs => os_tool_idle_seconds(s.root_id)) <= now()
     ORDER BY s.last_activity LIMIT 100
$$;
COMMENT ON FUNCTION idle_tools(text) IS
    'Tool children of this runner whose idle period has passed (at most 100 per call).';

CREATE OR REPLACE FUNCTION stop_idle(p_id uuid)
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
