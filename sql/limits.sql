-- The tree limits: depth, breadth and total, enforced where the counts change.
--
-- Every insert into sandboxes (whoever makes it: admit_child, psql, any other path) and every
-- phase change from live to not live goes through the counting triggers below. They keep
-- parents.live_children (a parent's live children) and trees.live_total (a tree's live
-- descendants) and refuse a child that has no live grant or would exceed the grant's depth,
-- breadth or total:
--
--   depth    an agent child's depth (its parent's + 1) is at most max_depth; tool children
--            ignore depth (and have no children).
--   breadth  a parent has fewer than max_breadth live children before one more is admitted.
--   total    the tree has fewer than max_total live descendants (the root not counted).
--
-- The counters change only here (os_counting; the guards refuse anyone else's write), and
-- sql/invariants.sql recounts them from the rows.
--
-- Lock order, everywhere counts change: the tree's row first, then the parent's count. Stops
-- take the tree's row before they mark rows (sql/lifecycle.sql), an insert before it locks its
-- parent's row (sandboxes_before_insert, sql/lineage.sql), so the two never wait on each other
-- in a cycle.

CREATE OR REPLACE FUNCTION os_counting() RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT pg_trigger_depth() > 1 $$;
COMMENT ON FUNCTION os_counting() IS
    'True inside the counting triggers (a statement they run fires this check one level deeper): counters change only there.';

CREATE OR REPLACE FUNCTION trees_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NOT os_counting() THEN
        PERFORM os_refuse('NOT_ALLOWED', 'trees rows are kept by the counting triggers on sandboxes');
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION trees_guard() IS
    'Trigger body: refuses a write of trees outside the counting triggers.';
-- pg_trigger_depth() in a WHEN clause is the statement's depth: 0 for what a session or a
-- function runs, 1 inside a counting trigger, whose writes need no call. A delete is refused
-- at any depth.
CREATE TRIGGER trees_guard BEFORE INSERT OR UPDATE ON trees
    FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION trees_guard();
COMMENT ON TRIGGER trees_guard ON trees IS
    'Only the counting triggers write tree rows.';
CREATE TRIGGER trees_no_delete BEFORE DELETE ON trees
    FOR EACH ROW EXECUTE FUNCTION trees_guard();
COMMENT ON TRIGGER trees_no_delete ON trees IS
    'Tree rows are never deleted.';

CREATE OR REPLACE FUNCTION parents_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NOT os_counting() THEN
        PERFORM os_refuse('NOT_ALLOWED', 'parents rows are kept by the counting triggers on sandboxes');
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION parents_guard() IS
    'Refuses a write of parents outside the counting triggers.';
CREATE TRIGGER parents_guard BEFORE INSERT OR UPDATE ON parents
    FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION parents_guard();
COMMENT ON TRIGGER parents_guard ON parents IS
    'Only the counting triggers write parents rows.';
CREATE TRIGGER parents_no_delete BEFORE DELETE ON parents
    FOR EACH ROW EXECUTE FUNCTION parents_guard();
COMMENT ON TRIGGER parents_no_delete ON parents IS
    'Counter rows are never deleted.';

-- The breadth rule's refusal: a parent that is not running, or has max_breadth live children.
CREATE OR REPLACE FUNCTION os_refuse_breadth(p_parent uuid, g grants) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
    n integer;
BEGIN
    SELECT * INTO p FROM sandboxes WHERE id = p_parent;
    IF p.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', format('parent %s is %s', p.name, p.phase),
            jsonb_build_object('reason', 'parent_not_running', 'parent', p.name, 'phase', p.phase));
    END IF;
    n := coalesce((SELECT live_children FROM parents WHERE parent_id = p_parent), 0);
    IF n >= g.max_breadth THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('breadth limit reached: %s has %s live children, max_breadth is %s', p.name, n, g.max_breadth),
            jsonb_build_object('limit', 'breadth', 'max', g.max_breadth, 'current', n));
    END IF;
END $$;
COMMENT ON FUNCTION os_refuse_breadth(uuid, grants) IS
    'Refuses a child of a parent that is not running or already has max_breadth live children; returns otherwise.';

-- The limits, for every insert. The tree's row is taken first; both counts are upserts that
-- find their row through the unique index with a dirty snapshot (which SSI does not lock) and
-- then lock it: total and breadth are checked on the latest counts under the row locks, and
-- no admission reads an index page of trees or parents, where a counter row that moved to
-- another heap page (an update that was not HOT) adds an entry. The new counts go to
-- admit_child's receipt in the transaction-local settings os.live_children and os.live_total;
-- os.created names the sandbox for the reference checks (sql/references.sql). The
-- set_config calls are one assignment (PL/pgSQL's simple-expression path), not a PERFORM,
-- which starts an executor for a query.
CREATE OR REPLACE FUNCTION sandboxes_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g grants;
    total integer;
    children integer;
    ignored text;
BEGIN
    IF NEW.parent_id IS NULL THEN
        -- For the session, not the transaction: a deferred check runs at commit, after the
        -- gateway's function (whose SET clause ends its transaction-local settings)
        -- returned. A rollback undoes it, and rows are never deleted, so it always names a
        -- sandbox that exists.
        ignored := set_config('os.created', NEW.id::text, false);
        INSERT INTO trees (root_id) VALUES (NEW.id);
        RETURN NULL;
    END IF;
    SELECT * INTO g FROM grants WHERE root_id = NEW.root_id AND ended_at IS NULL;
    IF g.id IS NULL OR g.expires_at <= now() THEN
        PERFORM os_check_grant(NEW.root_id, g, NULL, NULL);
    END IF;
    IF NEW.kind = 'agent' AND NEW.depth > g.max_depth THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('depth limit reached: a child of depth %s, max_depth is %s', NEW.depth, g.max_depth),
            jsonb_build_object('limit', 'depth', 'max', g.max_depth, 'current', NEW.depth));
    END IF;
    -- The tree's row first (the lock order, at the top of this file), then the parent's count.
    -- An upsert finds the row as the parent's below does (sandboxes_before_insert made sure it
    -- exists and locked it): no SIRead lock on trees_pkey, whose one page every tree shares.
    INSERT INTO trees AS t (root_id) VALUES (NEW.root_id)
    ON CONFLICT (root_id) DO UPDATE SET live_total = t.live_total + 1, admitted_max_total = g.max_total
     WHERE t.live_total < g.max_total
    RETURNING t.live_total INTO total;
    IF NOT FOUND THEN
        -- Refused: name the first limit in the documented order (breadth, then total).
        SELECT live_total INTO total FROM trees WHERE root_id = NEW.root_id;
        PERFORM os_refuse_breadth(NEW.parent_id, g);
        PERFORM os_refuse('LIMIT_REACHED',
            format('total limit reached: the tree has %s live descendants, max_total is %s', total, g.max_total),
            jsonb_build_object('limit', 'total', 'max', g.max_total, 'current', total));
    END IF;
    -- A first child makes the parent's row (when max_breadth admits one at all).
    INSERT INTO parents AS p (parent_id, live_children) SELECT NEW.parent_id, 1 WHERE g.max_breadth >= 1
    ON CONFLICT (parent_id) DO UPDATE SET live_children = p.live_children + 1
     WHERE p.live_children < g.max_breadth
    RETURNING live_children INTO children;
    IF NOT FOUND THEN
        PERFORM os_refuse_breadth(NEW.parent_id, g);
        RAISE EXCEPTION 'breadth count of parent % not taken', NEW.parent_id;
    END IF;
    -- os.created as above; os.live_children and os.live_total for admit_child's receipt, this
    -- transaction only.
    ignored := set_config('os.created', NEW.id::text, false) || set_config('os.live_children', children::text, true)
               || set_config('os.live_total', total::text, true);
    RETURN NULL;
END $$;
COMMENT ON FUNCTION sandboxes_count_insert() IS
    'Trigger body: a new child needs its tree''s live grant and fits depth, total and breadth, counted on its tree and parent; a root gets its tree row.';
CREATE TRIGGER sandboxes_count_insert AFTER INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_count_insert();
COMMENT ON TRIGGER sandboxes_count_insert ON sandboxes IS
    'Every new child, whoever inserts it, needs the tree''s live grant and fits its depth, breadth and total; counts it on its parent and tree. A root gets its tree row.';

CREATE OR REPLACE FUNCTION sandboxes_count_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_id IS NOT NULL THEN
        UPDATE trees SET live_total = live_total - 1 WHERE root_id = NEW.root_id;
        UPDATE parents SET live_children = live_children - 1 WHERE parent_id = NEW.parent_id;
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION sandboxes_count_end() IS
    'Trigger body: a child that stops being live is uncounted from its tree and parent.';
CREATE TRIGGER sandboxes_count_end AFTER UPDATE OF phase ON sandboxes
    FOR EACH ROW WHEN (os_is_live(OLD.phase) AND NOT os_is_live(NEW.phase))
    EXECUTE FUNCTION sandboxes_count_end();
COMMENT ON TRIGGER sandboxes_count_end ON sandboxes IS
    'A child that stops being live (STOPPED, ERROR) frees its slot on its parent and tree.';

-- PL/pgSQL to keep its plan: every stop asks (see authenticate, sql/auth.sql).
CREATE OR REPLACE FUNCTION live_children(p_id uuid) RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN coalesce((SELECT p.live_children FROM parents p WHERE p.parent_id = p_id), 0);
END $$;
COMMENT ON FUNCTION live_children(uuid) IS
    'A sandbox''s live children (its counter).';
