-- Stopping, deleting and the supervisor's life events.
--
-- A stop marks the whole subtree STOPPING in one transaction and returns it deepest first; the
-- gateway stops each workload in that order and marks it STOPPED, a parent only once none of
-- its children is live. A delete is a stop plus DELETED; rows stay for audit. A failed
-- workload is ERROR and its descendants stop in the same transaction. A sandbox's files go
-- with a delete, and a stopped or failed one's after the gateway's retention
-- (expired_files).

-- One statement marks the whole subtree STOPPING, so nothing new is admitted under it; the
-- tree's row is taken first (the lock order of sql/limits.sql).
CREATE OR REPLACE FUNCTION os_stop_subtree(s sandboxes, p_delete boolean, p_reason text)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
BEGIN
    PERFORM 1 FROM trees t WHERE t.root_id = s.root_id FOR UPDATE;
    WITH RECURSIVE sub(sid) AS (
        SELECT s.id
        UNION ALL
        SELECT c.id FROM sandboxes c JOIN sub ON c.parent_id = sub.sid
    )
    SELECT array_agg(sub.sid) INTO ids FROM sub;
    -- One statement marks the whole subtree, so nothing new is admitted under it.
    UPDATE sandboxes x SET phase = 'STOPPING',
                           phase_reason = CASE WHEN x.id = s.id THEN p_reason
                                               ELSE format('ancestor %s stopping', s.name) END,
                           delete_requested = x.delete_requested OR p_delete
     WHERE x.id = ANY (ids) AND x.phase IN ('PROVISIONING', 'READY');
    IF p_delete THEN
        UPDATE sandboxes x SET delete_requested = true,
                               phase = CASE WHEN x.phase IN ('STOPPED', 'ERROR') THEN 'DELETED' ELSE x.phase END
         WHERE x.id = ANY (ids) AND x.phase <> 'DELETED';
    END IF;
    RETURN QUERY SELECT x.id, x.name, x.depth, x.phase, x.runner FROM sandboxes x WHERE x.id = ANY (ids)
                  ORDER BY x.depth DESC, x.created_at;
END $$;
COMMENT ON FUNCTION os_stop_subtree(sandboxes, boolean, text) IS
    'Marks a sandbox and its whole subtree STOPPING (DELETED where already stopped, for a delete); returns the subtree deepest first.';

CREATE OR REPLACE FUNCTION begin_stop(p_user bigint, p_sandbox uuid, p_program text, p_ref text, p_delete boolean)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    s sandboxes := resolve_sandbox(p_user, p_sandbox, p_ref, false);
BEGIN
    RETURN QUERY SELECT * FROM os_stop_subtree(s, p_delete,
                                               CASE WHEN p_delete THEN 'delete requested' ELSE 'stop requested' END);
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, details)
    VALUES (CASE WHEN p_delete THEN 'sandbox.delete' ELSE 'sandbox.stop' END, 'done',
            CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox, nullif(p_program, ''), s.owner_id,
            s.id, s.parent_id, s.root_id, jsonb_build_object('name', s.name));
END $$;
COMMENT ON FUNCTION begin_stop(bigint, uuid, text, text, boolean) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A caller stops (or deletes) a sandbox it may act on, with its whole subtree; returns the subtree deepest first for the gateway to stop in that order.';

CREATE OR REPLACE FUNCTION begin_stop(p_caller os_caller, p_ref text, p_delete boolean)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM begin_stop(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                             p_program => (p_caller).program, p_ref => p_ref, p_delete => p_delete)
$$;
COMMENT ON FUNCTION begin_stop(os_caller, text, boolean) IS
    'Marks the subtree STOPPING (DELETED where already stopped, for a delete); returns it deepest first.';

CREATE OR REPLACE FUNCTION system_stop(p_id uuid, p_reason text)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    s sandboxes;
BEGIN
    SELECT * INTO s FROM sandboxes x WHERE x.id = p_id;
    IF FOUND THEN
        RETURN QUERY SELECT * FROM os_stop_subtree(s, false, p_reason);
    END IF;
END $$;
COMMENT ON FUNCTION system_stop(uuid, text) IS
    'The gateway stops a subtree on its own account (main command exited, supervisor lost).';

CREATE OR REPLACE FUNCTION finish_stop(p_id uuid) RETURNS sandboxes
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    s sandboxes;
BEGIN
    PERFORM 1 FROM trees t WHERE t.root_id = (SELECT root_id FROM sandboxes WHERE id = p_id) FOR UPDATE;
    UPDATE sandboxes SET phase = 'STOPPED'
     WHERE id = p_id AND phase = 'STOPPING'
       AND NOT EXISTS (SELECT 1 FROM parents c WHERE c.parent_id = p_id AND c.live_children > 0)
    RETURNING * INTO s;
    IF FOUND THEN
        INSERT INTO audit_log (action, outcome, owner_id, sandbox_id, parent_id, root_id, details)
        VALUES ('sandbox.stopped', 'done', s.owner_id, s.id, s.parent_id, s.root_id,
                jsonb_build_object('name', s.name, 'depth', s.depth));
        IF s.delete_requested THEN
            UPDATE sandboxes SET phase = 'DELETED' WHERE id = p_id RETURNING * INTO s;
        END IF;
    ELSE
        SELECT * INTO s FROM sandboxes WHERE id = p_id;
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION finish_stop(uuid) IS
    'Marks a STOPPING sandbox STOPPED (then DELETED if a delete asked) once its workload is gone.';

-- READY means usable: the supervisor reports it once the main command runs in its full
-- isolation, its proxy serves and its work channel is attached (crates/supervisor/src/main.rs),
-- with what isolation it applied, in one update. A supervisor that only connected leaves its
-- sandbox PROVISIONING, so a create that waits for READY never returns before exec works.
CREATE OR REPLACE FUNCTION mark_ready(p_id uuid, p_isolation jsonb) RETURNS sandboxes LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    s sandboxes;
BEGIN
    UPDATE sandboxes SET phase = 'READY', phase_reason = 'main command running', isolation = p_isolation
     WHERE id = p_id AND phase = 'PROVISIONING' RETURNING * INTO s;
    IF FOUND THEN
        INSERT INTO audit_log (action, outcome, actor_sandbox, owner_id, sandbox_id, parent_id, root_id)
        VALUES ('sandbox.ready', 'done', s.id, s.owner_id, s.id, s.parent_id, s.root_id);
        RETURN s;
    END IF;
    SELECT * INTO s FROM sandboxes WHERE id = p_id;
    IF s.phase IS DISTINCT FROM 'READY' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox is %s', coalesce(s.phase, 'unknown')));
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION mark_ready(uuid, jsonb) IS
    'The main command runs in its isolation (recorded): PROVISIONING becomes READY (idempotent).';

CREATE OR REPLACE FUNCTION record_exit(p_id uuid, p_exit_code integer) RETURNS sandboxes LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    s sandboxes;
BEGIN
    UPDATE sandboxes SET exit_code = p_exit_code,
                         phase_reason = format('main command exited with code %s', p_exit_code)
     WHERE id = p_id AND exit_code IS NULL RETURNING * INTO s;
    IF FOUND THEN
        INSERT INTO audit_log (action, outcome, actor_sandbox, owner_id, sandbox_id, parent_id, root_id, details)
        VALUES ('sandbox.exit', 'done', s.id, s.owner_id, s.id, s.parent_id, s.root_id,
                jsonb_build_object('exit_code', p_exit_code));
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION record_exit(uuid, integer) IS
    'Records the main command''s exit code (first report wins).';

CREATE OR REPLACE FUNCTION mark_error(p_id uuid, p_reason text) RETURNS sandboxes LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    s sandboxes;
BEGIN
    PERFORM 1 FROM trees t WHERE t.root_id = (SELECT root_id FROM sandboxes WHERE id = p_id) FOR UPDATE;
    UPDATE sandboxes SET phase = 'ERROR', phase_reason = left(p_reason, 2000)
     WHERE id = p_id AND phase IN ('PROVISIONING', 'READY') RETURNING * INTO s;
    IF FOUND THEN
        INSERT INTO audit_log (action, outcome, message, owner_id, sandbox_id, parent_id, root_id)
        VALUES ('sandbox.error', 'done', left(p_reason, 2000), s.owner_id, s.id, s.parent_id, s.root_id);
        -- Its descendants stop in the same transaction: no live child under a failed parent.
        PERFORM os_stop_subtree(s, false, p_reason);
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION mark_error(uuid, text) IS
    'The workload failed or was lost: PROVISIONING or READY becomes ERROR, and its descendants STOPPING, in one transaction.';

CREATE OR REPLACE FUNCTION live_rows(p_runner text)
RETURNS TABLE (id uuid, name text, phase text, depth integer, age float8) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT s.id, s.name, s.phase, s.depth, extract(epoch FROM now() - s.updated_at)::float8
      FROM sandboxes s WHERE s.runner = p_runner AND s.phase IN ('PROVISIONING', 'READY', 'STOPPING')
     ORDER BY s.depth DESC
$$;
COMMENT ON FUNCTION live_rows(text) IS
    'Every sandbox of this runner that may have a workload, deepest first, with its age.';

-- Which sandboxes' files on a gateway's host no live row names any more: no row at all (left
-- by a crash, or another database's), DELETED, or STOPPED or ERROR longer than p_keep (the
-- gateway's --keep-stopped-files). The gateway removes what this returns.
CREATE OR REPLACE FUNCTION expired_files(p_ids uuid[], p_keep interval)
RETURNS TABLE (id uuid) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT f.id FROM unnest(p_ids) AS f(id)
     WHERE NOT EXISTS (
         SELECT 1 FROM sandboxes s
          WHERE s.id = f.id
            AND (s.phase IN ('PROVISIONING', 'READY', 'STOPPING')
                 OR (s.phase IN ('STOPPED', 'ERROR') AND s.updated_at > now() - p_keep)))
     ORDER BY f.id
$$;
COMMENT ON FUNCTION expired_files(uuid[], interval) IS
    'Of the sandboxes whose files a gateway still has, those whose files must go: no row, DELETED, or stopped or failed longer than p_keep.';

-- A phase change wakes what waits on it in the gateways (channel openshell_changes); the
-- row itself is read again, the payload names the sandbox and its new phase only. Not on
-- insert: an admission notifies nothing (NOTIFY serializes committing transactions).
CREATE OR REPLACE FUNCTION os_notify_phase() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('openshell_changes',
                      json_build_object('kind', 'phase', 'sandbox', NEW.id, 'phase', NEW.phase)::text);
    RETURN NULL;
END $$;
COMMENT ON FUNCTION os_notify_phase() IS
    'Tells the gateways (channel openshell_changes) that a sandbox''s phase changed: its id and phase.';
CREATE TRIGGER sandboxes_notify_phase AFTER UPDATE OF phase ON sandboxes
    FOR EACH ROW WHEN (OLD.phase IS DISTINCT FROM NEW.phase) EXECUTE FUNCTION os_notify_phase();
COMMENT ON TRIGGER sandboxes_notify_phase ON sandboxes IS
    'Phase changes are pushed to the gateways at commit.';
