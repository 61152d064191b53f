-- Live counts kept by triggers, and the limits enforced where the counts change.
--
-- Every insert into sandboxes (whoever makes it: admit_child, psql, any other path) and
-- every phase change from live to not live goes through the triggers below. They keep
-- sandboxes.live_children (a parent's live children) and trees.live_total (a tree's live
-- descendants) and refuse a child that has no live grant or would exceed the grant's
-- depth, breadth or total. Admission reads these rows by primary key instead of counting.
--
-- Lock order, everywhere counts change: the tree's row first, then sandbox rows. Stops
-- take the tree's row before they mark rows, admissions take it before the parent's row,
-- so the two never wait on each other in a cycle.

-- ---------------------------------------------------------------- counters

ALTER TABLE sandboxes ADD COLUMN live_children integer NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_live_children_nonnegative CHECK (live_children >= 0);
COMMENT ON COLUMN sandboxes.live_children IS
    'Its live children (PROVISIONING, READY or STOPPING), kept by the counting triggers; breadth is checked against it.';
-- Room on each page for the counter's new row versions: updates stay HOT (no index entry),
-- so a parent's counter update touches no index page another tree reads.
ALTER TABLE sandboxes SET (fillfactor = 70);

CREATE TABLE trees (
    root_id             uuid NOT NULL,
    live_total          integer NOT NULL DEFAULT 0,
    admitted_max_total  integer NOT NULL DEFAULT 0,
    CONSTRAINT trees_pkey PRIMARY KEY (root_id),
    CONSTRAINT trees_root_fkey FOREIGN KEY (root_id) REFERENCES sandboxes (id),
    CONSTRAINT trees_live_total_nonnegative CHECK (live_total >= 0),
    CONSTRAINT trees_total_limit CHECK (live_total <= admitted_max_total)
) WITH (fillfactor = 10);
COMMENT ON TABLE trees IS
    'One row per tree (made with its root): the live count that max_total limits. Admissions of one tree serialize on this row; different trees share none.';
COMMENT ON COLUMN trees.root_id IS 'The root sandbox of the tree.';
COMMENT ON COLUMN trees.live_total IS 'Live descendants (the root not counted), kept by the counting triggers.';
COMMENT ON COLUMN trees.admitted_max_total IS
    'The grant''s max_total in force at the latest admission: live_total never exceeds it (a lowered limit applies from the next create).';

INSERT INTO trees (root_id, live_total, admitted_max_total)
SELECT r.id, c.n, c.n
  FROM sandboxes r
  CROSS JOIN LATERAL (SELECT count(*)::integer AS n FROM sandboxes d
                       WHERE d.root_id = r.id AND d.id <> r.id AND os_is_live(d.phase)) c
 WHERE r.parent_id IS NULL;
UPDATE sandboxes s SET live_children = c.n
  FROM (SELECT parent_id, count(*)::integer AS n FROM sandboxes WHERE os_is_live(phase) AND parent_id IS NOT NULL
         GROUP BY parent_id) c
 WHERE s.id = c.parent_id;

-- The grant's row is rewritten by every admission (children_admitted): keep those updates HOT.
ALTER TABLE grants SET (fillfactor = 10);

CREATE FUNCTION os_counting() RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT pg_trigger_depth() > 1 $$;
COMMENT ON FUNCTION os_counting() IS
    'True inside the counting triggers (a statement they run fires this check one level deeper): counters change only there.';

CREATE FUNCTION trees_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NOT os_counting() THEN
        RAISE EXCEPTION 'trees rows are kept by the counting triggers on sandboxes' USING ERRCODE = 'OS001';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER trees_guard BEFORE INSERT OR UPDATE OR DELETE ON trees
    FOR EACH ROW EXECUTE FUNCTION trees_guard();
CREATE TRIGGER trees_no_truncate BEFORE TRUNCATE ON trees
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER trees_guard ON trees IS 'Only the counting triggers write tree rows.';
COMMENT ON TRIGGER trees_no_truncate ON trees IS 'Tree rows stay.';

-- ---------------------------------------------------------------- ids

CREATE FUNCTION os_tree_id(p_root uuid) RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(substring(uuid_send(p_root) FROM 1 FOR 8)
                  || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')::uuid
$$;
COMMENT ON FUNCTION os_tree_id(uuid) IS
    'A new id for a sandbox of the tree: the root''s first 64 bits, then 64 random bits (with the v4 variant). A tree''s rows are then adjacent in every id index, so SSI''s page locks of one tree''s admissions do not cover another tree''s inserts.';

-- ---------------------------------------------------------------- the counting triggers

CREATE FUNCTION os_grant_live(p_root uuid) RETURNS grants LANGUAGE plpgsql STABLE AS $$
DECLARE
    g grants;
BEGIN
    SELECT * INTO g FROM grants WHERE root_id = p_root AND ended_at IS NULL;
    PERFORM os_check_grant(p_root, g, NULL, NULL);
    RETURN g;
END $$;
COMMENT ON FUNCTION os_grant_live(uuid) IS 'The tree''s current grant; refuses when there is none, or it was revoked or expired.';

CREATE FUNCTION os_refuse_breadth(p_parent uuid, g grants) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
BEGIN
    SELECT * INTO p FROM sandboxes WHERE id = p_parent;
    IF p.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', format('parent %s is %s', p.name, p.phase),
            jsonb_build_object('reason', 'parent_not_running', 'parent', p.name, 'phase', p.phase));
    END IF;
    IF p.live_children >= g.max_breadth THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('breadth limit reached: %s has %s live children, max_breadth is %s', p.name, p.live_children,
                   g.max_breadth),
            jsonb_build_object('limit', 'breadth', 'max', g.max_breadth, 'current', p.live_children));
    END IF;
END $$;
COMMENT ON FUNCTION os_refuse_breadth(uuid, grants) IS
    'Refuses a child of a parent that is not running or already has max_breadth live children; returns otherwise.';

CREATE FUNCTION sandboxes_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g grants;
    total integer;
    children integer;
BEGIN
    IF NEW.parent_id IS NULL THEN
        INSERT INTO trees (root_id) VALUES (NEW.id);
        RETURN NULL;
    END IF;
    g := os_grant_live(NEW.root_id);
    IF NEW.kind = 'agent' AND NEW.depth > g.max_depth THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('depth limit reached: a child of depth %s, max_depth is %s', NEW.depth, g.max_depth),
            jsonb_build_object('limit', 'depth', 'max', g.max_depth, 'current', NEW.depth));
    END IF;
    -- The tree's row first (see the lock order above), then the parent's.
    UPDATE trees SET live_total = live_total + 1, admitted_max_total = g.max_total
     WHERE root_id = NEW.root_id AND live_total < g.max_total
    RETURNING live_total INTO total;
    IF NOT FOUND THEN
        -- Refused: name the first limit in the documented order (parent running, breadth, total).
        SELECT live_total INTO total FROM trees WHERE root_id = NEW.root_id;
        PERFORM os_refuse_breadth(NEW.parent_id, g);
        PERFORM os_refuse('LIMIT_REACHED',
            format('total limit reached: the tree has %s live descendants, max_total is %s', total, g.max_total),
            jsonb_build_object('limit', 'total', 'max', g.max_total, 'current', total));
    END IF;
    UPDATE sandboxes SET live_children = live_children + 1
     WHERE id = NEW.parent_id AND live_children < g.max_breadth AND phase IN ('PROVISIONING', 'READY')
    RETURNING live_children INTO children;
    IF NOT FOUND THEN
        PERFORM os_refuse_breadth(NEW.parent_id, g);
        RAISE EXCEPTION 'parent % vanished during admission', NEW.parent_id;
    END IF;
    UPDATE grants SET children_admitted = children_admitted + 1 WHERE id = g.id;
    RETURN NULL;
END $$;
CREATE TRIGGER sandboxes_count_insert AFTER INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_count_insert();
COMMENT ON TRIGGER sandboxes_count_insert ON sandboxes IS
    'Every new child, whoever inserts it, needs the tree''s live grant and fits its depth, breadth and total; counts it on its parent and tree. A root gets its tree row.';

CREATE FUNCTION sandboxes_count_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_id IS NOT NULL THEN
        UPDATE trees SET live_total = live_total - 1 WHERE root_id = NEW.root_id;
        UPDATE sandboxes SET live_children = live_children - 1 WHERE id = NEW.parent_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sandboxes_count_end AFTER UPDATE OF phase ON sandboxes
    FOR EACH ROW WHEN (os_is_live(OLD.phase) AND NOT os_is_live(NEW.phase))
    EXECUTE FUNCTION sandboxes_count_end();
COMMENT ON TRIGGER sandboxes_count_end ON sandboxes IS
    'A child that stops being live (STOPPED, ERROR) frees its slot on its parent and tree.';

-- Counters are the triggers' alone, and a counter change is not a change of the sandbox.
CREATE OR REPLACE FUNCTION sandboxes_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
BEGIN
    IF NEW.parent_id IS NULL THEN
        NEW.root_id := NEW.id;
        NEW.depth := 0;
    ELSE
        SELECT * INTO p FROM sandboxes WHERE id = NEW.parent_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'parent % does not exist', NEW.parent_id;
        END IF;
        IF p.kind = 'tool' THEN
            RAISE EXCEPTION 'a tool sandbox cannot have children';
        END IF;
        -- Lineage comes from the parent row, never from the caller.
        NEW.root_id := p.root_id;
        NEW.depth := p.depth + 1;
        NEW.owner_id := p.owner_id;
        NEW.template := p.template;
    END IF;
    NEW.phase := 'PROVISIONING';
    NEW.live_children := 0;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION sandboxes_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.live_children IS DISTINCT FROM OLD.live_children AND NOT os_counting() THEN
        RAISE EXCEPTION 'live_children of sandbox % is kept by the counting triggers', OLD.id
            USING ERRCODE = 'OS001';
    END IF;
    IF (NEW.id, NEW.parent_id, NEW.root_id, NEW.depth, NEW.kind, NEW.owner_id, NEW.created_at,
        NEW.created_by_user, NEW.created_by_sandbox, NEW.created_by_program, NEW.name, NEW.command,
        NEW.template, NEW.runner)
       IS DISTINCT FROM
       (OLD.id, OLD.parent_id, OLD.root_id, OLD.depth, OLD.kind, OLD.owner_id, OLD.created_at,
        OLD.created_by_user, OLD.created_by_sandbox, OLD.created_by_program, OLD.name, OLD.command,
        OLD.template, OLD.runner) THEN
        RAISE EXCEPTION 'lineage, creator, name, command and runner of sandbox % are fixed at creation', OLD.id
            USING ERRCODE = 'OS001';
    END IF;
    -- A policy change is one step to a version that exists.
    IF NEW.policy_version <> OLD.policy_version AND (
           NEW.policy_version <> OLD.policy_version + 1
           OR NOT EXISTS (SELECT 1 FROM sandbox_policies WHERE sandbox_id = NEW.id AND version = NEW.policy_version)) THEN
        RAISE EXCEPTION 'sandbox % can only move to the next recorded policy version', OLD.id USING ERRCODE = 'OS007';
    END IF;
    IF NOT os_phase_transition_ok(OLD.phase, NEW.phase) THEN
        RAISE EXCEPTION 'sandbox % cannot go from % to %', OLD.id, OLD.phase, NEW.phase
            USING ERRCODE = 'OS007';
    END IF;
    -- A stopping sandbox's supervisor loses its credential at once.
    IF NEW.phase NOT IN ('PROVISIONING', 'READY') THEN
        NEW.credential_hash := NULL;
    END IF;
    -- The reconciler ages rows by updated_at: a child's admission is not a change of its parent.
    IF NEW.live_children IS NOT DISTINCT FROM OLD.live_children OR NEW.phase <> OLD.phase THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;

-- ---------------------------------------------------------------- the operator's check

CREATE FUNCTION os_recount()
RETURNS TABLE (counter text, id uuid, stored integer, counted integer) LANGUAGE sql STABLE AS $$
    SELECT 'live_children', s.id, s.live_children, coalesce(c.n, 0)::integer
      FROM sandboxes s
      LEFT JOIN (SELECT parent_id, count(*) AS n FROM sandboxes WHERE os_is_live(phase) GROUP BY parent_id) c
        ON c.parent_id = s.id
     WHERE s.live_children <> coalesce(c.n, 0)
    UNION ALL
    SELECT 'live_total', r.id, t.live_total, coalesce(c.n, 0)::integer
      FROM sandboxes r
      LEFT JOIN trees t ON t.root_id = r.id
      LEFT JOIN (SELECT root_id, count(*) AS n FROM sandboxes WHERE os_is_live(phase) AND parent_id IS NOT NULL
                  GROUP BY root_id) c ON c.root_id = r.id
     WHERE r.parent_id IS NULL AND t.live_total IS DISTINCT FROM coalesce(c.n, 0)
$$;
COMMENT ON FUNCTION os_recount() IS
    'Counts live children and live descendants from the rows and returns every counter that differs (drift): none is expected. `SELECT * FROM os_recount()`.';

-- ---------------------------------------------------------------- the hot path

-- A request id is claimed before the child exists (see admit_child): the claim points at
-- the child's id, which the same transaction inserts before it commits.
ALTER TABLE create_requests ALTER CONSTRAINT create_requests_sandbox_fkey DEFERRABLE INITIALLY DEFERRED;

CREATE FUNCTION os_check_name_format(p_name text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'
       OR p_name ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            'name: 1 to 63 of A-Z, a-z, 0-9, ., _ or -, starting with a letter or digit, and not an id',
            jsonb_build_object('field', 'name'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_name_format(text) IS 'Names the problem with a new sandbox name''s form (uniqueness is the index''s).';

CREATE FUNCTION os_check_request_id(p_request_id text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_request_id !~ '^[A-Za-z0-9._:-]{1,128}$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'request_id: 1 to 128 of A-Z, a-z, 0-9, ., _, : or -',
                          jsonb_build_object('field', 'request_id'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_request_id(text) IS 'Names the problem with a request_id''s form.';

-- Same signature as in V3; the body reads counters by primary key, leaves uniqueness of the
-- name and the request id to their unique indexes (claimed with ON CONFLICT, which takes no
-- SSI read lock) and does no range scan over an index another tree writes.
CREATE OR REPLACE FUNCTION admit_child(p_user bigint, p_sandbox uuid, p_program text, p_parent text, p_name text,
                                       p_kind text, p_command text[], p_policy jsonb, p_policy_hash bytea,
                                       p_proof jsonb, p_credential_hash bytea, p_request_id text,
                                       p_args_hash bytea, p_runner text)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
DECLARE
    parent sandboxes;
    g grants;
    child sandboxes;
    v_id uuid;
    v_proved uuid := (p_proof->>'parent_id')::uuid;
    v_caller text := os_caller_key(p_user, p_sandbox);
    prior create_requests;
    claimed boolean;
    v_children integer;
    v_total integer;
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('agent', 'tool') THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'kind: must be agent or tool', jsonb_build_object('field', 'kind'));
    END IF;

    -- Who may create under whom: a sandbox only under itself, a user under their own trees.
    IF p_sandbox IS NOT NULL THEN
        SELECT * INTO parent FROM sandboxes WHERE id = p_sandbox;
        IF NOT FOUND OR parent.phase NOT IN ('PROVISIONING', 'READY') THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the calling sandbox is not running',
                              jsonb_build_object('reason', 'caller_not_running'));
        END IF;
        IF parent.kind = 'tool' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'a tool sandbox cannot create children',
                              jsonb_build_object('reason', 'tool'));
        END IF;
        IF p_program IS NULL OR p_program = '' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the calling program is unknown; calls from a sandbox come through its supervisor',
                              jsonb_build_object('reason', 'program_unknown'));
        END IF;
        IF p_parent IS NOT NULL AND p_parent <> '' AND p_parent <> parent.name AND p_parent <> parent.id::text THEN
            PERFORM os_refuse('NOT_ALLOWED', 'a sandbox can only create children under itself',
                              jsonb_build_object('reason', 'not_under_itself', 'field', 'parent'));
        END IF;
    ELSE
        IF p_parent IS NULL OR p_parent = '' THEN
            PERFORM os_refuse('INVALID_ARGUMENT', 'parent: required when a user creates a child',
                              jsonb_build_object('field', 'parent'));
        END IF;
        -- The proved parent, by primary key, when the reference still names it (a name is
        -- unique among the owner's sandboxes that are not DELETED); else by the reference.
        IF v_proved IS NOT NULL THEN
            SELECT * INTO parent FROM sandboxes WHERE id = v_proved;
        END IF;
        IF parent.id IS NULL OR parent.phase = 'DELETED'
           OR NOT (p_parent = parent.id::text OR (p_parent = parent.name AND parent.owner_id = p_user))
           OR (parent.owner_id <> p_user AND NOT os_is_admin(p_user)) THEN
            parent := resolve_sandbox(p_user, NULL, p_parent);
        END IF;
    END IF;
    IF parent.kind = 'tool' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('%s is a tool sandbox and cannot have children', parent.name),
                          jsonb_build_object('reason', 'tool', 'parent', parent.name));
    END IF;
    IF parent.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', format('parent %s is %s', parent.name, parent.phase),
                          jsonb_build_object('reason', 'parent_not_running', 'parent', parent.name, 'phase', parent.phase));
    END IF;
    -- The tree's row first: admissions of one tree queue here, and under SERIALIZABLE a
    -- loser fails (40001, retried) before it has written anything.
    PERFORM 1 FROM trees WHERE root_id = parent.root_id FOR UPDATE;
    -- Expiry, revocation and (through the door) the program; the counting trigger checks
    -- the grant again for any insert, with the limits.
    SELECT * INTO g FROM grants WHERE root_id = parent.root_id AND ended_at IS NULL;
    PERFORM os_check_grant(parent.root_id, g, p_sandbox, p_program);
    IF parent.id IS DISTINCT FROM v_proved
       OR parent.policy_version IS DISTINCT FROM (p_proof->>'parent_version')::integer THEN
        PERFORM os_refuse('POLICY_CHANGED',
            format('the parent %s or its policy changed since the proof (now %s version %s, proved against %s version %s)',
                   parent.name, parent.id, parent.policy_version, p_proof->>'parent_id', p_proof->>'parent_version'),
            jsonb_build_object('reason', 'policy_changed'));
    END IF;
    PERFORM os_check_global_version(p_proof);

    IF p_name IS NULL OR p_name = '' THEN
        p_name := left(parent.name, 54) || '-' || left(replace(gen_random_uuid()::text, '-', ''), 8);
    END IF;
    PERFORM os_check_name_format(p_name);
    v_id := os_tree_id(parent.root_id);

    -- The request id is claimed first: a repeat finds the claim and answers with its child.
    IF p_request_id IS NOT NULL AND p_request_id <> '' THEN
        PERFORM os_check_request_id(p_request_id);
        INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id)
        VALUES (v_caller, p_request_id, p_args_hash, v_id)
        ON CONFLICT (caller, request_id) DO NOTHING
        RETURNING true INTO claimed;
        IF claimed IS NULL THEN
            SELECT * INTO prior FROM create_requests WHERE caller = v_caller AND request_id = p_request_id;
            IF prior.args_hash IS DISTINCT FROM p_args_hash THEN
                PERFORM os_refuse('CONFLICT',
                    format('request_id %s was already used with different arguments', p_request_id),
                    jsonb_build_object('field', 'request_id', 'sandbox_id', prior.sandbox_id));
            END IF;
            RETURN QUERY SELECT prior.sandbox_id, true;
            RETURN;
        END IF;
    END IF;

    INSERT INTO sandboxes (id, name, owner_id, parent_id, root_id, depth, kind, command, created_by_user,
                           created_by_sandbox, created_by_program, credential_hash, runner)
    VALUES (v_id, p_name, parent.owner_id, parent.id, parent.root_id, parent.depth + 1, p_kind, p_command,
            CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox, nullif(p_program, ''), p_credential_hash, p_runner)
    ON CONFLICT (owner_id, name) WHERE phase <> 'DELETED' DO NOTHING
    RETURNING * INTO child;
    IF child.id IS NULL THEN
        PERFORM os_refuse('CONFLICT', format('a sandbox named %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
    INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user, set_by_sandbox)
    VALUES (child.id, 1, p_policy, p_policy_hash, CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox);
    SELECT live_children INTO v_children FROM sandboxes WHERE id = parent.id;
    SELECT live_total INTO v_total FROM trees WHERE root_id = parent.root_id;
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, request_id, details)
    VALUES ('sandbox.create_child', 'admitted', CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox,
            nullif(p_program, ''), child.owner_id, child.id, parent.id, child.root_id, nullif(p_request_id, ''),
            jsonb_build_object('name', child.name, 'kind', child.kind, 'depth', child.depth,
                               'grant_id', g.id, 'live_children', v_children, 'live_total', v_total,
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', p_proof->>'verdict'));
    RETURN QUERY SELECT child.id, false;
END $$;

-- ---------------------------------------------------------------- stops take the tree first

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

CREATE OR REPLACE FUNCTION finish_stop(p_id uuid) RETURNS sandboxes LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
    PERFORM 1 FROM trees t WHERE t.root_id = (SELECT root_id FROM sandboxes WHERE id = p_id) FOR UPDATE;
    -- Never before its children: a parent is STOPPED only once none of them is live.
    UPDATE sandboxes SET phase = 'STOPPED'
     WHERE id = p_id AND phase = 'STOPPING' AND live_children = 0
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

CREATE OR REPLACE FUNCTION mark_error(p_id uuid, p_reason text) RETURNS sandboxes LANGUAGE plpgsql AS $$
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
