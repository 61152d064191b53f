-- Admission without cross-tree serialization failures.
--
-- SSI tracks reads of B-tree indexes by leaf page, not by key. An admission therefore
-- conflicts with another tree's admission whenever it reads an index page the other
-- inserts into, even though the rows differ. This migration arranges the hot path so that
-- it reads only pages no other tree's admission writes:
--
-- * New ids are time-ordered (UUID version 7 layout), children's in a region of their own
--   (top bit set) and roots' in another: every new child's index entry lands on the newest
--   page of the children's region, which no admission reads, while the parents and roots
--   an admission looks up sit on older pages that no longer receive inserts.
-- * Nothing on the hot path reads the new child's key: the two foreign keys that pointed
--   at it from rows made in the same transaction (the policy's first version and the
--   request-id claim) become triggers that know the sandbox this transaction just created
--   and look any other one up.
-- * Counters, the grant and the tree row are read by primary key on pages whose updates
--   stay HOT (no index entry), as before.
-- * The two partial indexes that served count(*) (replaced by the counters in V5) go: they
--   cost every insert and no query reads them.

-- ---------------------------------------------------------------- ids

CREATE FUNCTION os_new_id(p_child boolean) RETURNS uuid LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    r bytea := uuid_send(gen_random_uuid());
    t bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint & 140737488355327;
BEGIN
    IF p_child THEN
        t := t | 140737488355328;
    END IF;
    -- 48 bits of time, the version nibble 7, then the random bits (their variant kept).
    RETURN encode(substring(int8send(t) FROM 3 FOR 6) || set_byte(substring(r FROM 7 FOR 10), 0, (get_byte(r, 6) & 15) | 112),
                  'hex')::uuid;
END $$;
COMMENT ON FUNCTION os_new_id(boolean) IS
    'A new sandbox id in UUID version 7 layout (48-bit millisecond time, then random bits), children''s with the top bit set: new index entries go to the newest page of their region, which admissions never read, so SSI''s page locks of one tree''s admission do not meet another tree''s insert.';
ALTER TABLE sandboxes ALTER COLUMN id SET DEFAULT os_new_id(false);

-- ---------------------------------------------------------------- no reads of the new key

-- Set by the counting trigger for every sandbox inserted, read by the two checks below.
CREATE FUNCTION os_created_here(p_id uuid) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce(p_id::text = current_setting('os.created', true), false)
$$;
COMMENT ON FUNCTION os_created_here(uuid) IS
    'Whether P_ID is the sandbox this session inserted last (recorded by the counting trigger; a rollback forgets it).';

CREATE FUNCTION os_references_sandbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The sandbox this transaction just made exists; any other is looked up (off the hot path).
    IF NOT os_created_here(NEW.sandbox_id) AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE id = NEW.sandbox_id) THEN
        RAISE EXCEPTION 'insert into % violates its reference to sandboxes: sandbox % does not exist',
                        TG_TABLE_NAME, NEW.sandbox_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_TABLE_NAME || '_sandbox_fkey';
    END IF;
    RETURN NULL;
END $$;
-- As the owner: a deferred check runs at commit as the session's role (the gateway's
-- cannot read sandboxes).
ALTER FUNCTION os_references_sandbox() SECURITY DEFINER SET search_path = public, pg_temp;
COMMENT ON FUNCTION os_references_sandbox() IS
    'Trigger body: the row''s sandbox_id names an existing sandbox (the foreign key, without a read of the new sandbox''s index page).';

ALTER TABLE sandbox_policies DROP CONSTRAINT sandbox_policies_sandbox_fkey;
CREATE CONSTRAINT TRIGGER sandbox_policies_sandbox_fkey AFTER INSERT OR UPDATE ON sandbox_policies
    FOR EACH ROW EXECUTE FUNCTION os_references_sandbox();
COMMENT ON TRIGGER sandbox_policies_sandbox_fkey ON sandbox_policies IS
    'A policy version belongs to an existing sandbox (rows of both tables are never deleted).';

ALTER TABLE create_requests DROP CONSTRAINT create_requests_sandbox_fkey;
-- The claim is made before its child exists (see admit_child): checked at commit.
CREATE CONSTRAINT TRIGGER create_requests_sandbox_fkey AFTER INSERT OR UPDATE ON create_requests
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION os_references_sandbox();
COMMENT ON TRIGGER create_requests_sandbox_fkey ON create_requests IS
    'A request-id claim names an existing sandbox by the end of its transaction.';

-- A parent's counter changes with every admission under it; its new row version must fit on
-- the same page (a HOT update, no index entry) even while the versions that concurrent
-- snapshots still see are kept. Otherwise the update adds an entry to every index of
-- sandboxes, on the pages every admission of the neighbouring trees reads. (From V5's 70.)
ALTER TABLE sandboxes SET (fillfactor = 10);

DROP INDEX sandboxes_live_children_idx;
DROP INDEX sandboxes_live_tree_idx;

-- ---------------------------------------------------------------- the counting trigger

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
    UPDATE grants SET children_admitted = children_admitted + 1 WHERE id = g.id;
    RETURN NULL;
END $$;

-- ---------------------------------------------------------------- the parent's counter

-- Every admission updates its parent's live_children; that update skips the checks of
-- columns it does not change (the row comparison below was a tenth of an admission).
CREATE OR REPLACE FUNCTION sandboxes_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.live_children IS DISTINCT FROM OLD.live_children THEN
        IF NOT os_counting() THEN
            RAISE EXCEPTION 'live_children of sandbox % is kept by the counting triggers', OLD.id
                USING ERRCODE = 'OS001';
        END IF;
        -- The counting triggers change nothing else: every admission passes here, cheaply.
        RETURN NEW;
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

-- ---------------------------------------------------------------- the hot path

-- Same signature and rules as in V5. It reads the parent by primary key (an old page), the
-- tree's row and the grant (HOT-updated rows), claims the request id and the name through
-- their unique indexes (ON CONFLICT reads no page for SSI) and inserts; the counting trigger
-- checks the limits. Everything it writes into an index is a new key no admission reads.
CREATE OR REPLACE FUNCTION admit_child(p_user bigint, p_sandbox uuid, p_program text, p_parent text, p_name text,
                                       p_kind text, p_command text[], p_policy jsonb, p_policy_hash bytea,
                                       p_proof jsonb, p_credential_hash bytea, p_request_id text,
                                       p_args_hash bytea, p_runner text)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
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
    -- transaction holds the tree's row.
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, request_id, details)
    VALUES ('sandbox.create_child', 'admitted', v_creator, p_sandbox,
            nullif(p_program, ''), parent.owner_id, v_id, parent.id, parent.root_id, nullif(p_request_id, ''),
            jsonb_build_object('name', p_name, 'kind', p_kind, 'depth', v_depth,
                               'grant_id', g.id, 'live_children', parent.live_children + 1, 'live_total', v_total + 1,
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', p_proof->>'verdict'));
    RETURN QUERY SELECT v_id, false;
END $$;

-- CREATE OR REPLACE reset what V6 set: the gateway's call runs as the owner again.
ALTER FUNCTION admit_child(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text)
    SECURITY DEFINER SET search_path = public, pg_temp;

REVOKE EXECUTE ON FUNCTION os_new_id(boolean), os_created_here(uuid), os_references_sandbox() FROM PUBLIC;

-- A sequential scan takes SSI's lock on the whole table, which every other writer of it
-- then conflicts with; on small tables (a new database's trees and grants) the planner
-- would choose one. The functions that write read by index only.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'admit_child(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text)',
        'create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, jsonb)',
        'begin_stop(bigint, uuid, text, text, boolean)', 'system_stop(uuid, text)', 'finish_stop(uuid)',
        'mark_ready(uuid)', 'record_exit(uuid, integer)', 'mark_error(uuid, text)'
    ]::regprocedure[] LOOP
        EXECUTE format('ALTER FUNCTION %s SET enable_seqscan = off', f);
    END LOOP;
END $$;
