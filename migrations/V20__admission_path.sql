-- Admission's hot path, cheaper (issue 10, "Throughput and latency"); every guarantee stays.
--
-- Measured with pg_stat_statements (track = all) and perf on the backends: PostgreSQL
-- re-reads (stringToNode) and compiles every CHECK constraint of a table and every trigger
-- WHEN clause once per statement, so an UPDATE of a wide row costs its table's whole list of
-- checks, and each plpgsql trigger call costs more than the work it does. Per admission:
--
-- 1. The grant's row is no longer written: children_admitted (11 CHECKs, two triggers and a
--    row version per admission) is counted from the receipts naming the grant, in grant_view.
-- 2. The parent's counter update no longer calls sandboxes_before_update: a WHEN clause
--    keeps it out of the counting triggers' own updates (which it let through unchecked
--    anyway), and still runs it for every other update, whoever makes it.
-- 3. The receipt's limits come from admit_child, which already holds the grant row; the
--    receipt trigger fills them only for a receipt that lacks them (another inserter).
-- 4. The reference checks of a new child skip the calls with nothing to check (WHEN), and
--    the users check is one SECURITY DEFINER call instead of a trigger calling one twice;
--    a child that asks for no template takes its parent's without a call of os_fit_template.
-- 5. users_id_fixed refuses through os_refuse (V17's one raise of a project code).

-- ---------------------------------------------------------------- 1. children_admitted

-- As V14's, children_admitted counted from the receipts (audit_log_root_idx: one tree's rows).
CREATE OR REPLACE VIEW grant_view AS
SELECT g.id, g.root_id, r.name AS root_name, r.owner_id, g.max_depth, g.max_breadth, g.max_total,
       g.expires_at, g.program,
       CASE WHEN g.end_reason IS NOT NULL THEN g.end_reason
            WHEN g.expires_at <= now() THEN 'expired' ELSE 'live' END AS state, cu.name AS created_by, g.created_at,
       g.ended_at,
       (SELECT count(*) FROM audit_log a
         WHERE a.root_id = g.root_id AND a.action = 'sandbox.create_child' AND a.outcome = 'admitted'
           AND a.details->'grant_id' = to_jsonb(g.id)) AS children_admitted,
       g.tool_idle_seconds, g.program_resolved, g.rate_calls, g.rate_period_s
  FROM grants g
  JOIN sandboxes r ON r.id = g.root_id
  JOIN users cu ON cu.id = g.created_by;
COMMENT ON COLUMN grant_view.children_admitted IS
    'Children admitted under this grant: the admission receipts naming it (details grant_id).';

ALTER TABLE grants DROP COLUMN children_admitted;

-- As V9's, without the grant's row update.
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
    -- The tree's row first (see the lock order in V5), then the parent's.
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
    RETURN NULL;
END $$;

-- ---------------------------------------------------------------- 2. the counter update

-- The body let a counting trigger's change of live_children through and refused anyone
-- else's; the same split, decided before the call. pg_trigger_depth() in a WHEN clause is
-- the depth of the statement (0 for any statement a session or function runs, 1 inside a
-- counting trigger); the body sees one more, as os_counting() says.
DROP TRIGGER sandboxes_before_update ON sandboxes;
CREATE TRIGGER sandboxes_before_update BEFORE UPDATE ON sandboxes
    FOR EACH ROW WHEN (NEW.live_children IS NOT DISTINCT FROM OLD.live_children OR pg_trigger_depth() < 1)
    EXECUTE FUNCTION sandboxes_before_update();
COMMENT ON TRIGGER sandboxes_before_update ON sandboxes IS
    'Keeps lineage, name, command and runner fixed, policy versions stepwise, enforces the phase machine and revokes '
    'the credential when a sandbox stops; refuses a change of live_children outside the counting triggers (whose own '
    'counter updates it skips).';

-- ---------------------------------------------------------------- 3. limits on the receipt

-- admit_child writes them from the grant row it checked; any other inserter's receipt gets
-- them from the grant as before.
DROP TRIGGER audit_log_admission_limits ON audit_log;
CREATE TRIGGER audit_log_admission_limits BEFORE INSERT ON audit_log
    FOR EACH ROW WHEN (NEW.action = 'sandbox.create_child' AND NEW.outcome = 'admitted'
                       AND NOT (NEW.details ?& ARRAY['max_depth', 'max_breadth', 'max_total']))
    EXECUTE FUNCTION os_receipt_limits();
COMMENT ON TRIGGER audit_log_admission_limits ON audit_log IS
    'An admitted child''s receipt carries the limits it was admitted under (details max_depth, max_breadth, max_total): '
    'admit_child writes them, and this fills them for a receipt without them.';

-- As V17's, the receipt with the limits of the grant row it read (nothing else changed).
CREATE OR REPLACE FUNCTION admit_child(p_user bigint, p_sandbox uuid, p_program text, p_parent text, p_name text, p_kind text, p_command text[], p_policy jsonb, p_policy_hash bytea, p_proof jsonb, p_credential_hash bytea, p_request_id text, p_args_hash bytea, p_runner text)
 RETURNS TABLE(sandbox_id uuid, replayed boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path = public, pg_temp
 SET enable_seqscan = off
AS $$
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
                               'grant_id', g.id, 'live_children', parent.live_children + 1, 'live_total', v_total + 1,
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', p_proof->>'verdict',
                               'max_depth', g.max_depth, 'max_breadth', g.max_breadth, 'max_total', g.max_total));
    RETURN QUERY SELECT v_id, false;
END $$;

-- ---------------------------------------------------------------- 4. reference checks

-- The sandbox this transaction just inserted exists: the policy row admit_child writes after
-- it needs no call (os_created_here, decided in the WHEN clause). A deferred check's WHEN is
-- evaluated at insert, before the sandbox exists, so create_requests' stays as it is.
DROP TRIGGER sandbox_policies_sandbox_fkey ON sandbox_policies;
CREATE CONSTRAINT TRIGGER sandbox_policies_sandbox_fkey AFTER INSERT OR UPDATE ON sandbox_policies
    FOR EACH ROW WHEN (NEW.sandbox_id::text IS DISTINCT FROM current_setting('os.created', true))
    EXECUTE FUNCTION os_references_sandbox();
COMMENT ON TRIGGER sandbox_policies_sandbox_fkey ON sandbox_policies IS
    'A policy version belongs to an existing sandbox (rows of both tables are never deleted).';

-- One call as the owner (an operator inserting may not read users), checking inline.
CREATE OR REPLACE FUNCTION sandboxes_references_users() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A child's owner is its parent's (sandboxes_before_insert), who already names a user.
    IF NEW.parent_id IS NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = NEW.owner_id) THEN
        PERFORM os_require_user(NEW.owner_id, 'sandboxes_owner_fkey');
    END IF;
    IF NEW.created_by_user IS NOT NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = NEW.created_by_user) THEN
        PERFORM os_require_user(NEW.created_by_user, 'sandboxes_creator_user_fkey');
    END IF;
    RETURN NULL;
END $$;
ALTER FUNCTION sandboxes_references_users() SECURITY DEFINER SET search_path = public, pg_temp;

CREATE OR REPLACE FUNCTION sandbox_policies_references_users() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM users WHERE id = NEW.set_by_user) THEN
        PERFORM os_require_user(NEW.set_by_user, 'sandbox_policies_user_fkey');
    END IF;
    RETURN NULL;
END $$;
ALTER FUNCTION sandbox_policies_references_users() SECURITY DEFINER SET search_path = public, pg_temp;

-- Nothing to check for a child that names no user but its owner (a child's owner is its
-- parent's, set by sandboxes_before_insert: an existing user): a child a sandbox created,
-- or one its owner created.
DROP TRIGGER sandboxes_users_fkey ON sandboxes;
CREATE CONSTRAINT TRIGGER sandboxes_users_fkey AFTER INSERT ON sandboxes
    FOR EACH ROW WHEN (NEW.parent_id IS NULL OR (NEW.created_by_user IS NOT NULL AND NEW.created_by_user <> NEW.owner_id))
    EXECUTE FUNCTION sandboxes_references_users();
COMMENT ON TRIGGER sandboxes_users_fkey ON sandboxes IS
    'The owner and the creating user exist (for sandboxes_owner_fkey and sandboxes_creator_user_fkey, without their lock on the user''s row).';
DROP TRIGGER sandbox_policies_user_fkey ON sandbox_policies;
CREATE CONSTRAINT TRIGGER sandbox_policies_user_fkey AFTER INSERT ON sandbox_policies
    FOR EACH ROW WHEN (NEW.set_by_user IS NOT NULL)
    EXECUTE FUNCTION sandbox_policies_references_users();
COMMENT ON TRIGGER sandbox_policies_user_fkey ON sandbox_policies IS
    'The user who set the version exists (a foreign key''s check without its lock on the user''s row).';

-- As V15's; os_fit_template only when a template was asked for (it returns the parent's
-- unchanged otherwise).
CREATE OR REPLACE FUNCTION sandboxes_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
    requested jsonb;
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
        requested := coalesce(nullif(NEW.template, '{}'::jsonb),
                              nullif(current_setting('openshell.child_template', true), '')::jsonb);
        IF requested IS NULL OR requested = '{}'::jsonb THEN
            NEW.template := coalesce(p.template, '{}'::jsonb);
        ELSE
            NEW.template := os_fit_template(p.template, requested);
        END IF;
    END IF;
    NEW.phase := 'PROVISIONING';
    NEW.live_children := 0;
    RETURN NEW;
END $$;

-- ---------------------------------------------------------------- 5. users_id_fixed

CREATE OR REPLACE FUNCTION users_id_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_refuse('NOT_ALLOWED', 'a user''s id is fixed (rows elsewhere name it)');
END $$;
