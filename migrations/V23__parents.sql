-- A parent's live children move from sandboxes.live_children to a narrow table of their own,
-- parents (issue 10, "Throughput and latency"); every guarantee stays.
--
-- Each admission bumped its parent's counter with an UPDATE of the parent's sandboxes row,
-- and an UPDATE of that wide row costs its 12 CHECK constraints and 5 trigger WHEN clauses,
-- each read (stringToNode) and compiled again for the statement, plus the row's copy:
-- 135 us of an admission's 1.37 ms, measured with pg_stat_statements (track = all). The
-- same bump on a two-column row costs a fifth of that.
--
-- What the parent's row update also did, kept:
-- * the parent must be running when its child is admitted, even against a concurrent stop
--   that does not take the tree's row (a psql UPDATE): the new child's insert now locks the
--   parent's row FOR SHARE (sandboxes_before_insert). A stop that committed after the
--   admission's snapshot makes the lock fail with a serialization failure (retried, then
--   refused: the parent is not running); while both are in progress, whichever touched the
--   parent's row second waits for the other's commit.
-- * breadth is still checked where the count changes, in one statement on one row.
--
-- The guards of trees and parents now skip their call for the counting triggers' own writes
-- (a WHEN clause on the statement's trigger depth, as V20 did for sandboxes), and refuse
-- everyone else's as before.

-- ---------------------------------------------------------------- the table

CREATE TABLE parents (
    parent_id      uuid NOT NULL,
    live_children  integer NOT NULL,
    CONSTRAINT parents_pkey PRIMARY KEY (parent_id),
    CONSTRAINT parents_sandbox_fkey FOREIGN KEY (parent_id) REFERENCES sandboxes (id),
    CONSTRAINT parents_live_children_nonnegative CHECK (live_children >= 0)
) WITH (fillfactor = 50);
COMMENT ON TABLE parents IS
    'One row per sandbox that has had a child: its live children, which max_breadth limits. Kept by the counting '
    'triggers on sandboxes (a sandbox without a row has none).';
COMMENT ON COLUMN parents.parent_id IS 'The parent sandbox.';
COMMENT ON COLUMN parents.live_children IS
    'Its live children (PROVISIONING, READY or STOPPING), kept by the counting triggers; breadth is checked against it.';

INSERT INTO parents (parent_id, live_children)
SELECT id, live_children FROM sandboxes WHERE live_children > 0;

CREATE FUNCTION parents_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NOT os_counting() THEN
        PERFORM os_refuse('NOT_ALLOWED', 'parents rows are kept by the counting triggers on sandboxes');
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION parents_guard() IS 'Refuses a write of parents outside the counting triggers.';

-- pg_trigger_depth() in a WHEN clause is the statement's depth: 0 for what a session or a
-- function runs, 1 inside a counting trigger, whose writes need no call. A delete is refused
-- at any depth.
CREATE TRIGGER parents_guard BEFORE INSERT OR UPDATE ON parents
    FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION parents_guard();
CREATE TRIGGER parents_no_delete BEFORE DELETE ON parents
    FOR EACH ROW EXECUTE FUNCTION parents_guard();
CREATE TRIGGER parents_no_truncate BEFORE TRUNCATE ON parents
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER parents_guard ON parents IS 'Only the counting triggers write parents rows.';
COMMENT ON TRIGGER parents_no_delete ON parents IS 'Counter rows are never deleted.';
COMMENT ON TRIGGER parents_no_truncate ON parents IS 'Counter rows are never deleted.';

DROP TRIGGER trees_guard ON trees;
CREATE TRIGGER trees_guard BEFORE INSERT OR UPDATE ON trees
    FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION trees_guard();
CREATE TRIGGER trees_no_delete BEFORE DELETE ON trees
    FOR EACH ROW EXECUTE FUNCTION trees_guard();
COMMENT ON TRIGGER trees_guard ON trees IS 'Only the counting triggers write tree rows.';
COMMENT ON TRIGGER trees_no_delete ON trees IS 'Tree rows are never deleted.';

-- ---------------------------------------------------------------- the counting triggers

-- As V20's, the parent's count in parents.
CREATE OR REPLACE FUNCTION sandboxes_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g grants;
    total integer;
    children integer;
BEGIN
    -- For the session, not the transaction: a deferred check runs at commit, after the
    -- gateway's function (whose SET clause ends its transaction-local settings) returned. A
    -- rollback undoes it, and rows are never deleted, so it always names a sandbox that exists.
    PERFORM set_config('os.created', NEW.id::text, false);
    IF NEW.parent_id IS NULL THEN
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
    -- The tree's row first (see the lock order in V5), then the parent's count.
    UPDATE trees SET live_total = live_total + 1, admitted_max_total = g.max_total
     WHERE root_id = NEW.root_id AND live_total < g.max_total
    RETURNING live_total INTO total;
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
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION sandboxes_count_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_id IS NOT NULL THEN
        UPDATE trees SET live_total = live_total - 1 WHERE root_id = NEW.root_id;
        UPDATE parents SET live_children = live_children - 1 WHERE parent_id = NEW.parent_id;
    END IF;
    RETURN NULL;
END $$;

-- As V5's, the count from parents.
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

-- As V20's; the parent's row is locked FOR SHARE and must be running (see the top).
CREATE OR REPLACE FUNCTION sandboxes_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
    requested jsonb;
BEGIN
    IF NEW.parent_id IS NULL THEN
        NEW.root_id := NEW.id;
        NEW.depth := 0;
    ELSE
        SELECT * INTO p FROM sandboxes WHERE id = NEW.parent_id FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'parent % does not exist', NEW.parent_id;
        END IF;
        IF p.kind = 'tool' THEN
            RAISE EXCEPTION 'a tool sandbox cannot have children';
        END IF;
        IF p.phase NOT IN ('PROVISIONING', 'READY') THEN
            PERFORM os_refuse('NOT_ALLOWED', format('parent %s is %s', p.name, p.phase),
                jsonb_build_object('reason', 'parent_not_running', 'parent', p.name, 'phase', p.phase));
        END IF;
        -- Lineage comes from the parent row, never from the caller.
        NEW.root_id := p.root_id;
        NEW.depth := p.depth + 1;
        NEW.owner_id := p.owner_id;
        requested := coalesce(nullif(NEW.template, '{}'::jsonb),
                              nullif(current_setting('openshell.child_template', true), '')::jsonb);
        IF requested IS NULL OR requested = '{}'::jsonb THEN
            NEW.template := coalesce(p.template, '{}'::jsonb);
        ELSE
            NEW.template := os_fit_template(p.template, requested);
        END IF;
    END IF;
    NEW.phase := 'PROVISIONING';
    RETURN NEW;
END $$;

-- ---------------------------------------------------------------- the column goes

-- As V17's, without the counter's branch: an admission no longer writes its parent's row,
-- so every update of a sandbox is a change of it (updated_at).
DROP TRIGGER sandboxes_before_update ON sandboxes;
CREATE OR REPLACE FUNCTION sandboxes_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.parent_id, NEW.root_id, NEW.depth, NEW.kind, NEW.owner_id, NEW.created_at,
        NEW.created_by_user, NEW.created_by_sandbox, NEW.created_by_program, NEW.name, NEW.command,
        NEW.template, NEW.runner)
       IS DISTINCT FROM
       (OLD.id, OLD.parent_id, OLD.root_id, OLD.depth, OLD.kind, OLD.owner_id, OLD.created_at,
        OLD.created_by_user, OLD.created_by_sandbox, OLD.created_by_program, OLD.name, OLD.command,
        OLD.template, OLD.runner) THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('lineage, creator, name, command and runner of sandbox %s are fixed at creation', OLD.id));
    END IF;
    -- A policy change is one step to a version that exists.
    IF NEW.policy_version <> OLD.policy_version AND (
           NEW.policy_version <> OLD.policy_version + 1
           OR NOT EXISTS (SELECT 1 FROM sandbox_policies WHERE sandbox_id = NEW.id AND version = NEW.policy_version)) THEN
        PERFORM os_refuse('CONFLICT', format('sandbox %s can only move to the next recorded policy version', OLD.id));
    END IF;
    IF NOT os_phase_transition_ok(OLD.phase, NEW.phase) THEN
        PERFORM os_refuse('CONFLICT', format('sandbox %s cannot go from %s to %s', OLD.id, OLD.phase, NEW.phase));
    END IF;
    -- A stopping sandbox's supervisor loses its credential at once.
    IF NEW.phase NOT IN ('PROVISIONING', 'READY') THEN
        NEW.credential_hash := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;
CREATE TRIGGER sandboxes_before_update BEFORE UPDATE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_before_update();
COMMENT ON TRIGGER sandboxes_before_update ON sandboxes IS
    'Keeps lineage, name, command and runner fixed, policy versions stepwise, enforces the phase machine and revokes '
    'the credential when a sandbox stops.';

ALTER TABLE sandboxes DROP COLUMN live_children;

-- ---------------------------------------------------------------- readers of the count

CREATE OR REPLACE FUNCTION live_children(p_id uuid) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT coalesce((SELECT live_children FROM parents WHERE parent_id = p_id), 0)
$$;

-- As V5's: a parent is STOPPED only once none of its children is live.
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

CREATE OR REPLACE FUNCTION os_recount() RETURNS TABLE(counter text, id uuid, stored integer, counted integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT 'live_children', s.id, coalesce(p.live_children, 0), coalesce(c.n, 0)::integer
      FROM sandboxes s
      LEFT JOIN parents p ON p.parent_id = s.id
      LEFT JOIN (SELECT parent_id, count(*) AS n FROM sandboxes WHERE os_is_live(phase) GROUP BY parent_id) c
        ON c.parent_id = s.id
     WHERE coalesce(p.live_children, 0) <> coalesce(c.n, 0)
    UNION ALL
    SELECT 'live_total', r.id, t.live_total, coalesce(c.n, 0)::integer
      FROM sandboxes r
      LEFT JOIN trees t ON t.root_id = r.id
      LEFT JOIN (SELECT root_id, count(*) AS n FROM sandboxes WHERE os_is_live(phase) AND parent_id IS NOT NULL
                  GROUP BY root_id) c ON c.root_id = r.id
     WHERE r.parent_id IS NULL AND t.live_total IS DISTINCT FROM coalesce(c.n, 0)
$$;

-- As V12's, the parent's count from parents.
CREATE OR REPLACE FUNCTION public.grant_status(p_user bigint, p_sandbox uuid, p_program text, p_ref text)
 RETURNS TABLE(grant_id bigint, root_id uuid, root_name text, sandbox_id uuid, sandbox_name text, sandbox_kind text, state text, max_depth integer, max_breadth integer, max_total integer, expires_at timestamp with time zone, program text, depth integer, live_children integer, live_total integer, remaining_depth integer, remaining_breadth integer, remaining_total integer)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    s sandboxes;
    g grants;
    v_total integer;
    v_children integer;
BEGIN
    -- A sandbox reads its own tree's grant (p_ref empty: from its own place in the tree, else
    -- from a descendant's); a user names a sandbox of theirs. Who sees what is resolve_sandbox's.
    IF p_sandbox IS NOT NULL AND coalesce(p_ref, '') = '' THEN
        s := resolve_sandbox(p_user, p_sandbox, p_sandbox::text);
    ELSE
        s := resolve_sandbox(p_user, p_sandbox, p_ref);
    END IF;
    SELECT * INTO g FROM grants WHERE grants.root_id = s.root_id ORDER BY (ended_at IS NULL) DESC, id DESC LIMIT 1;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('the tree of sandbox %s has no grant; a user must grant it first', s.name),
                          jsonb_build_object('sandbox', s.name, 'reason', 'no_grant'));
    END IF;
    SELECT t.live_total INTO v_total FROM trees t WHERE t.root_id = s.root_id;
    v_total := coalesce(v_total, 0);
    v_children := coalesce((SELECT c.live_children FROM parents c WHERE c.parent_id = s.id), 0);
    RETURN QUERY
    SELECT g.id, s.root_id, r.name, s.id, s.name, s.kind, os_grant_state(g), g.max_depth, g.max_breadth, g.max_total,
           g.expires_at, g.program, s.depth, v_children, v_total,
           -- tool sandboxes cannot have children; depth counts agent levels below this one
           CASE WHEN s.kind = 'tool' THEN 0 ELSE greatest(g.max_depth - s.depth, 0) END,
           CASE WHEN s.kind = 'tool' THEN 0 ELSE greatest(g.max_breadth - v_children, 0) END,
           greatest(g.max_total - v_total, 0)
      FROM sandboxes r WHERE r.id = s.root_id;
END $function$;

-- As V20's; the receipt's live_children from parents, read under the tree's row lock.
CREATE OR REPLACE FUNCTION public.admit_child(p_user bigint, p_sandbox uuid, p_program text, p_parent text, p_name text, p_kind text, p_command text[], p_policy jsonb, p_policy_hash bytea, p_proof jsonb, p_credential_hash bytea, p_request_id text, p_args_hash bytea, p_runner text)
 RETURNS TABLE(sandbox_id uuid, replayed boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    parent sandboxes;
    g grants;
    v_id uuid;
    v_proved uuid := (p_proof->>'parent_id')::uuid;
    v_caller text := CASE WHEN p_sandbox IS NOT NULL THEN 'sandbox:' || p_sandbox ELSE 'user:' || p_user END;
    v_creator bigint := CASE WHEN p_sandbox IS NULL THEN p_user END;
    prior create_requests;
    claimed boolean;
    v_total integer;
    v_depth integer;
    v_children integer;
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
    SELECT live_total INTO v_total FROM trees WHERE root_id = parent.root_id FOR UPDATE;
    v_children := coalesce((SELECT c.live_children FROM parents c WHERE c.parent_id = parent.id), 0);
    -- Expiry, revocation and (through the door) the program; the counting trigger checks
    -- the grant again for any insert, with the limits.
    SELECT * INTO g FROM grants WHERE root_id = parent.root_id AND ended_at IS NULL;
    IF g.id IS NULL OR g.expires_at <= now() OR (p_sandbox IS NOT NULL AND p_program IS DISTINCT FROM g.program) THEN
        PERFORM os_check_grant(parent.root_id, g, p_sandbox, p_program);
    END IF;
    IF parent.id IS DISTINCT FROM v_proved
       OR parent.policy_version IS DISTINCT FROM (p_proof->>'parent_version')::integer THEN
        PERFORM os_refuse('POLICY_CHANGED',
            format('the parent %s or its policy changed since the proof (now %s version %s, proved against %s version %s)',
                   parent.name, parent.id, parent.policy_version, p_proof->>'parent_id', p_proof->>'parent_version'),
            jsonb_build_object('reason', 'policy_changed'));
    END IF;
    IF (SELECT coalesce(max(version), 0) FROM global_max_policies) IS DISTINCT FROM (p_proof->>'global_version')::integer THEN
        PERFORM os_check_global_version(p_proof);
    END IF;

    IF p_name IS NULL OR p_name = '' THEN
        p_name := left(parent.name, 54) || '-' || left(replace(gen_random_uuid()::text, '-', ''), 8);
    ELSIF p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'
          OR p_name ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
        PERFORM os_check_name_format(p_name);
    END IF;
    v_id := os_new_id(true);

    -- The request id is claimed first: a repeat finds the claim and answers with its child.
    IF p_request_id IS NOT NULL AND p_request_id <> '' THEN
        IF p_request_id !~ '^[A-Za-z0-9._:-]{1,128}$' THEN
            PERFORM os_check_request_id(p_request_id);
        END IF;
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
            v_creator, p_sandbox, nullif(p_program, ''), p_credential_hash, p_runner)
    ON CONFLICT (owner_id, name) WHERE phase <> 'DELETED' DO NOTHING
    RETURNING depth INTO v_depth;
    IF v_depth IS NULL THEN
        PERFORM os_refuse('CONFLICT', format('a sandbox named %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
    INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user, set_by_sandbox)
    VALUES (v_id, 1, p_policy, p_policy_hash, v_creator, p_sandbox);
    -- The counters as the counting trigger left them: nothing else changes them while this
    -- transaction holds the tree's row. The limits are the grant's as read above, in this
    -- snapshot: the ones the counting trigger checked (audit_log_admission_limits skips
    -- a receipt that has them).
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, request_id, details)
    VALUES ('sandbox.create_child', 'admitted', v_creator, p_sandbox,
            nullif(p_program, ''), parent.owner_id, v_id, parent.id, parent.root_id, nullif(p_request_id, ''),
            jsonb_build_object('name', p_name, 'kind', p_kind, 'depth', v_depth,
                               'grant_id', g.id, 'live_children', v_children + 1, 'live_total', v_total + 1,
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', p_proof->>'verdict',
                               'max_depth', g.max_depth, 'max_breadth', g.max_breadth, 'max_total', g.max_total));
    RETURN QUERY SELECT v_id, false;
END $function$;
