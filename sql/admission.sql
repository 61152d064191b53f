-- Admission: a root or a child enters the tree.
--
-- How a child is created (the design's "Creating a child"): the gateway calls create_child,
-- which for a child that inherits its parent's policy while no global maximum is set admits
-- it at once; otherwise it returns the parent's policy and the global maximum (parent_snapshot),
-- the gateway proves the child's policy within them and calls create_child again with the
-- proof. The admission (os_admit_child, also behind admit_child) re-checks in one
-- SERIALIZABLE transaction the request id (sql/idempotency.sql), who may create under whom,
-- the grant (sql/grants.sql), that the proof names the parent's current policy version and
-- the global maximum's, and the name (sql/names.sql), and inserts the child PROVISIONING with
-- its first policy and its receipt. The limits are the counting trigger's (sql/limits.sql),
-- for this insert and any other.

-- What a child is proved against, read before the proof: the parent's current policy and the
-- global maximum, in one snapshot (PL/pgSQL: its plan is kept for the connection's life).
CREATE OR REPLACE FUNCTION parent_snapshot(p_user bigint, p_sandbox uuid, p_ref text)
RETURNS TABLE(id uuid, name text, kind text, policy_version integer, document jsonb, hash bytea,
              global_version integer, global_document jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT s.id, s.name, s.kind, s.policy_version, p.document, p.hash, g.version, g.document
      FROM resolve_sandbox(p_user, p_sandbox, p_ref) s
      JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = s.policy_version
     CROSS JOIN global_max_current() g;
END $$;
COMMENT ON FUNCTION parent_snapshot(bigint, uuid, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A parent''s current policy and the global maximum, in one snapshot: what a child is proved against.';

CREATE OR REPLACE FUNCTION parent_snapshot(p_caller os_caller, p_ref text)
RETURNS TABLE (id uuid, name text, kind text, policy_version integer, document jsonb, hash bytea,
               global_version integer, global_document jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM parent_snapshot(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                                  p_ref => coalesce((p_caller).sandbox_id::text, p_ref))
$$;
COMMENT ON FUNCTION parent_snapshot(os_caller, text) IS
    'The parent a child would be created under (a sandbox caller: itself, whatever p_ref says), its current policy and the global maximum, in one snapshot.';

-- A root: a user only; its grant, if any, in the same transaction.
CREATE OR REPLACE FUNCTION create_root(p_user bigint, p_name text, p_command text[], p_template jsonb,
                            p_policy jsonb, p_policy_hash bytea, p_credential_hash bytea,
                            p_request_id text, p_args_hash bytea, p_grant os_grant_values, p_runner text,
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
    -- A composite IS NOT NULL only when every field is (tool_idle_seconds may not be): the
    -- grant is absent when the value itself is NULL.
    IF NOT (p_grant IS NULL) THEN
        PERFORM os_grant_insert(p_user, s, (p_grant).max_depth, (p_grant).max_breadth, (p_grant).max_total,
                                (p_grant).expires_at, (p_grant).program, coalesce((p_grant).tool_idle_seconds, 300),
                                (p_grant).program_resolved, (p_grant).rate_calls, (p_grant).rate_period_s);
    END IF;
    RETURN QUERY SELECT s.id, false;
END $$;
COMMENT ON FUNCTION create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, os_grant_values, text, jsonb) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A user creates a root sandbox (PROVISIONING), optionally with its grant, in one transaction.';

-- Answers with the sandbox as sandbox_view shows it, so a create reads nothing after its
-- admission. PL/pgSQL to keep its plans (see authenticate, sql/auth.sql), and no sequential
-- scan for the view's read (see os_admit_child below).
CREATE OR REPLACE FUNCTION create_root(p_caller os_caller, p_name text, p_command text[], p_template jsonb, p_policy jsonb,
                            p_policy_hash bytea, p_credential_hash bytea, p_request_id text, p_args_hash bytea,
                            p_grant os_grant_values, p_runner text, p_proof os_root_proof)
RETURNS TABLE (id uuid, name text, owner_name text, parent_id uuid, parent_name text, root_id uuid,
               root_name text, depth integer, kind text, phase text, phase_reason text, command text[],
               policy_version integer, policy_hash text, exit_code integer, template jsonb, isolation jsonb,
               created_by text, created_at timestamptz, updated_at timestamptz, replayed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    c record;
BEGIN
    SELECT * INTO c
      FROM create_root(p_user => os_caller_user(p_caller, 'create a root sandbox'), p_name => p_name,
                       p_command => p_command, p_template => p_template, p_policy => p_policy,
                       p_policy_hash => p_policy_hash, p_credential_hash => p_credential_hash,
                       p_request_id => p_request_id, p_args_hash => p_args_hash, p_grant => p_grant,
                       p_runner => p_runner, p_proof => to_jsonb(p_proof));
    RETURN QUERY
    SELECT v.id, v.name, v.owner_name, v.parent_id, v.parent_name, v.root_id, v.root_name, v.depth, v.kind, v.phase,
           v.phase_reason, v.command, v.policy_version, coalesce(v.policy_hash, ''), v.exit_code, v.template,
           v.isolation, v.created_by, v.created_at, v.updated_at, c.replayed
      FROM sandbox_view v WHERE v.id = c.sandbox_id;
END $$;
COMMENT ON FUNCTION create_root(os_caller, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, os_grant_values, text, os_root_proof) IS
    'A user creates a root sandbox (with its grant, if any), returned as sandbox_view shows it; a repeated request_id returns the first.';

-- A child. It claims the request id first (a repeat answers with the first child before
-- anything else is checked), reads the parent by primary key (an old page), the tree's grant
-- and the global maximum's version in one statement, claims the name through its unique
-- index (ON CONFLICT reads no page for SSI) and inserts; the insert locks the tree's row
-- first (sql/lineage.sql) and the counting trigger checks the limits (sql/limits.sql).
-- Everything it writes into an index is a new key no admission reads. SET enable_seqscan =
-- off: a sequential scan takes SSI's lock on the whole table, and on small tables (a new
-- database's trees and grants) the planner would choose one.
--
-- p_policy NULL: the child inherits the parent's current policy, read here in the same
-- snapshot as the parent's row (nothing to prove, so no version to re-check), which only
-- holds while no global maximum is set (else POLICY_CHANGED: prove it within the maximum).
-- p_proof's parent_id is then only where to look for the parent.
CREATE OR REPLACE FUNCTION os_admit_child(p_caller os_caller, p_parent text, p_name text, p_kind os_kind,
                                          p_command text[], p_policy jsonb, p_policy_hash bytea,
                                          p_proof os_admission_proof, p_credential_hash bytea, p_request_id text,
                                          p_args_hash bytea, p_runner text, p_template jsonb,
                                          OUT o_child sandboxes, OUT o_parent sandboxes, OUT o_replayed boolean,
                                          OUT o_policy jsonb, OUT o_policy_hash bytea)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    p_sandbox uuid := (p_caller).sandbox_id;
    p_user bigint := (p_caller).user_id;
    p_program text := (p_caller).program;
    parent sandboxes;
    g grants;
    v_id uuid;
    v_proved uuid := (p_proof).parent_id;
    v_inherit boolean := p_policy IS NULL;
    v_caller text := CASE WHEN p_sandbox IS NOT NULL THEN 'sandbox:' || p_sandbox ELSE 'user:' || p_user END;
    v_creator bigint := CASE WHEN p_sandbox IS NULL THEN p_user END;
    prior create_requests;
    claimed boolean;
    v_total integer;
    v_depth integer;
    v_children integer;
    r record;
BEGIN
    o_replayed := false;
    IF p_kind IS NULL THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'kind: must be agent or tool', jsonb_build_object('field', 'kind'));
    END IF;
    v_id := os_new_id(true);

    -- The request id first: a repeat finds the claim and answers with its child, whatever
    -- changed since (the parent stopped, the grant ended); a refusal below rolls the claim back.
    IF p_request_id IS NOT NULL AND p_request_id <> '' THEN
        IF length(p_request_id) > 128 OR p_request_id !~ '^[A-Za-z0-9._:-]+$' THEN
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
            o_child.id := prior.sandbox_id;
            o_replayed := true;
            RETURN;
        END IF;
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
    -- The tree's grant and the global maximum's version, in one statement. The counts are not
    -- read here (an index scan of trees or parents would SSI-lock a page every tree's
    -- counters share): the insert below locks the tree's row (sandboxes_before_insert) and
    -- the counting trigger reports both counts.
    SELECT (SELECT gr FROM grants gr WHERE gr.root_id = parent.root_id AND gr.ended_at IS NULL) AS grant_row,
           coalesce((SELECT max(version) FROM global_max_policies), 0) AS global_version
      INTO r;
    g := r.grant_row;
    -- Expiry, revocation and (through the door) the program; the counting trigger checks
    -- the grant again for any insert, with the limits.
    IF g.id IS NULL OR g.expires_at <= now() OR (p_sandbox IS NOT NULL AND p_program IS DISTINCT FROM g.program) THEN
        PERFORM os_check_grant(parent.root_id, g, p_sandbox, p_program);
    END IF;
    IF v_inherit THEN
        IF r.global_version <> 0
           AND EXISTS (SELECT 1 FROM global_max_policies gm WHERE gm.version = r.global_version AND gm.document IS NOT NULL) THEN
            PERFORM os_refuse('POLICY_CHANGED',
                format('a global maximum policy is set (version %s): the policy %s passes on is proved within it first',
                       r.global_version, parent.name),
                jsonb_build_object('reason', 'policy_changed'));
        END IF;
        SELECT sp.document, sp.hash INTO p_policy, p_policy_hash
          FROM sandbox_policies sp WHERE sp.sandbox_id = parent.id AND sp.version = parent.policy_version;
        IF NOT FOUND THEN
            PERFORM os_refuse('POLICY_UNPROVABLE', format('the parent %s has no policy version %s', parent.name,
                                                          parent.policy_version),
                              jsonb_build_object('reason', 'stored policy unreadable'));
        END IF;
    ELSE
        IF parent.id IS DISTINCT FROM v_proved OR parent.policy_version IS DISTINCT FROM (p_proof).parent_version THEN
            PERFORM os_refuse('POLICY_CHANGED',
                format('the parent %s or its policy changed since the proof (now %s version %s, proved against %s version %s)',
                       parent.name, parent.id, parent.policy_version, v_proved, (p_proof).parent_version),
                jsonb_build_object('reason', 'policy_changed'));
        END IF;
        IF r.global_version IS DISTINCT FROM (p_proof).global_version THEN
            PERFORM os_check_global_version(to_jsonb(p_proof));
        END IF;
    END IF;

    IF p_name IS NULL OR p_name = '' THEN
        p_name := left(parent.name, 54) || '-' || left(replace(gen_random_uuid()::text, '-', ''), 8);
    ELSIF length(p_name) > 63 OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' OR length(p_name) = 36 THEN
        PERFORM os_check_name_format(p_name);
    END IF;

    -- A requested template travels to the insert trigger, which fits it to the parent's (it
    -- can only narrow); this transaction's setting ends with the insert.
    IF p_template IS NOT NULL THEN
        PERFORM set_config('openshell.child_template', p_template::text, true);
    END IF;
    INSERT INTO sandboxes (id, name, owner_id, parent_id, root_id, depth, kind, command, created_by_user,
                           created_by_sandbox, created_by_program, credential_hash, runner)
    VALUES (v_id, p_name, parent.owner_id, parent.id, parent.root_id, parent.depth + 1, p_kind::text, p_command,
            v_creator, p_sandbox, nullif(p_program, ''), p_credential_hash, p_runner)
    ON CONFLICT (owner_id, name) WHERE phase <> 'DELETED' DO NOTHING
    RETURNING * INTO o_child;
    IF p_template IS NOT NULL THEN
        PERFORM set_config('openshell.child_template', '', true);
    END IF;
    v_depth := o_child.depth;
    IF v_depth IS NULL THEN
        PERFORM os_refuse('CONFLICT', format('a sandbox named %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
    v_children := current_setting('os.live_children')::integer;
    v_total := current_setting('os.live_total')::integer;
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
                               'grant_id', g.id, 'live_children', v_children, 'live_total', v_total,
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', (p_proof).verdict,
                               'max_depth', g.max_depth, 'max_breadth', g.max_breadth, 'max_total', g.max_total));
    o_parent := parent;
    o_policy := p_policy;
    o_policy_hash := p_policy_hash;
END $$;
COMMENT ON FUNCTION os_admit_child(os_caller, text, text, os_kind, text[], jsonb, bytea, os_admission_proof, bytea, text, bytea, text, jsonb) IS
    'Internal: holds the rule; the gateway calls admit_child or create_child. Admits a child (p_policy NULL: with its parent''s current policy) and returns its row, its parent''s and the policy it was given; o_replayed with only o_child.id for a repeated request id.';

CREATE OR REPLACE FUNCTION admit_child(p_caller os_caller, p_parent text, p_name text, p_kind os_kind, p_command text[],
                                       p_policy jsonb, p_policy_hash bytea, p_proof os_admission_proof,
                                       p_credential_hash bytea, p_request_id text, p_args_hash bytea, p_runner text,
                                       p_template jsonb DEFAULT NULL)
RETURNS TABLE (sandbox_id uuid, replayed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a record;
BEGIN
    SELECT * INTO a FROM os_admit_child(p_caller, p_parent, p_name, p_kind, p_command, p_policy, p_policy_hash,
                                        p_proof, p_credential_hash, p_request_id, p_args_hash, p_runner, p_template);
    RETURN QUERY SELECT (a.o_child).id, a.o_replayed;
END $$;
COMMENT ON FUNCTION admit_child(os_caller, text, text, os_kind, text[], jsonb, bytea, os_admission_proof, bytea, text, bytea, text, jsonb) IS
    'Admits a child under p_parent (a sandbox caller: under itself) through its tree''s grant and limits, re-checking the proof; the template the creator asked for is fitted to the parent''s.';

-- A child's create in as few calls as it needs, each one SERIALIZABLE transaction: the door's
-- call (p_door: the door credential's hash), then
--   p_proof NULL, p_policy NULL, no global maximum: nothing to prove, so the child is
--     admitted with its parent's current policy (os_admit_child), in this one call;
--   p_proof NULL otherwise (p_policy not NULL: a policy of the child's own, whose value this
--     call does not read): a repeated request id answers with its child (outcome
--     'replayed'), else the parent's snapshot to prove against (outcome 'prove', the
--     snapshot_ columns, as parent_snapshot), and nothing is admitted;
--   p_proof given: the proved admission (os_admit_child).
-- An admitted child comes back as sandbox_view has it (outcome 'admitted', or 'replayed' for
-- a repeated request id), built from the rows the admission wrote: reading the new row
-- through an index would SSI-lock the newest page every admission inserts into. `inherited`
-- is the policy an inheriting child was given. p_parent_id: where to look for a user's
-- parent first (the gateway's last answer for this name), checked as admit_child checks a
-- proof's parent.
CREATE OR REPLACE FUNCTION create_child(p_caller os_caller, p_door bytea, p_parent text, p_parent_id uuid, p_name text,
                                        p_kind os_kind, p_command text[], p_policy jsonb, p_policy_hash bytea,
                                        p_proof os_admission_proof, p_credential_hash bytea, p_request_id text,
                                        p_args_hash bytea, p_runner text, p_template jsonb)
RETURNS TABLE (outcome text, id uuid, name text, owner_name text, parent_id uuid, parent_name text, root_id uuid,
               root_name text, depth integer, kind text, phase text, phase_reason text, command text[],
               policy_version integer, policy_hash text, exit_code integer, template jsonb, isolation jsonb,
               created_by text, created_at timestamptz, updated_at timestamptz, inherited jsonb,
               snapshot_id uuid, snapshot_name text, snapshot_kind text, snapshot_version integer,
               snapshot_document jsonb, snapshot_hash bytea, global_version integer, global_document jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    prior uuid;
    a record;
    c sandboxes;
    pa sandboxes;
BEGIN
    IF p_door IS NOT NULL THEN
        IF (p_caller).sandbox_id IS NULL THEN
            PERFORM os_refuse('UNAUTHENTICATED', 'a door call comes from a sandbox',
                              jsonb_build_object('reason', 'door_credential'));
        END IF;
        PERFORM take_door_call(p_door, (p_caller).sandbox_id, (p_caller).program);
    END IF;
    IF p_proof IS NULL THEN
        IF p_policy IS NOT NULL
           OR (SELECT gm.document IS NOT NULL FROM global_max_policies gm ORDER BY gm.version DESC LIMIT 1) THEN
            prior := os_replay(p_caller, p_request_id, p_args_hash);
            IF prior IS NULL THEN
                RETURN QUERY
                SELECT 'prove'::text, NULL::uuid, NULL::text, NULL::text, NULL::uuid, NULL::text, NULL::uuid,
                       NULL::text, NULL::integer, NULL::text, NULL::text, NULL::text, NULL::text[], NULL::integer,
                       NULL::text, NULL::integer, NULL::jsonb, NULL::jsonb, NULL::text, NULL::timestamptz,
                       NULL::timestamptz, NULL::jsonb, s.id, s.name, s.kind, s.policy_version, s.document, s.hash,
                       s.global_version, s.global_document
                  FROM parent_snapshot(p_caller => p_caller, p_ref => p_parent) s;
                RETURN;
            END IF;
        ELSE
            p_proof := ROW(p_parent_id, NULL, NULL, 'inherited')::os_admission_proof;
        END IF;
    END IF;
    IF prior IS NULL THEN
        SELECT * INTO a FROM os_admit_child(p_caller, p_parent, p_name, p_kind, p_command, p_policy, p_policy_hash,
                                            p_proof, p_credential_hash, p_request_id, p_args_hash, p_runner,
                                            p_template);
        IF a.o_replayed THEN
            prior := (a.o_child).id;
        END IF;
    END IF;
    IF prior IS NOT NULL THEN
        RETURN QUERY
        SELECT 'replayed'::text, v.id, v.name, v.owner_name, v.parent_id, v.parent_name, v.root_id, v.root_name,
               v.depth, v.kind, v.phase, v.phase_reason, v.command, v.policy_version, coalesce(v.policy_hash, ''),
               v.exit_code, v.template, v.isolation, v.created_by, v.created_at, v.updated_at, NULL::jsonb,
               NULL::uuid, NULL::text, NULL::text, NULL::integer, NULL::jsonb, NULL::bytea, NULL::integer,
               NULL::jsonb
          FROM sandbox_view v WHERE v.id = prior;
        RETURN;
    END IF;
    c := a.o_child;
    pa := a.o_parent;
    -- Field by field, not one SELECT with a subquery per name: the names are read only where
    -- the parent's row does not have them, and under SERIALIZABLE every read takes locks.
    outcome := 'admitted';
    id := c.id; name := c.name; parent_id := c.parent_id; parent_name := pa.name; root_id := c.root_id;
    depth := c.depth; kind := c.kind; phase := c.phase; phase_reason := c.phase_reason; command := c.command;
    policy_version := c.policy_version; policy_hash := encode(a.o_policy_hash, 'hex');
    exit_code := c.exit_code; template := c.template; isolation := c.isolation;
    created_at := c.created_at; updated_at := c.updated_at;
    inherited := CASE WHEN p_policy IS NULL THEN a.o_policy END;
    SELECT u.name INTO owner_name FROM users u WHERE u.id = c.owner_id;
    root_name := CASE WHEN pa.id = c.root_id THEN pa.name
                      ELSE (SELECT r.name FROM sandboxes r WHERE r.id = c.root_id) END;
    created_by := os_created_by(
        CASE WHEN c.created_by_user = c.owner_id THEN owner_name
             WHEN c.created_by_user IS NOT NULL THEN (SELECT u.name FROM users u WHERE u.id = c.created_by_user) END,
        CASE WHEN c.created_by_sandbox = pa.id THEN pa.name
             ELSE (SELECT s.name FROM sandboxes s WHERE s.id = c.created_by_sandbox) END,
        c.created_by_program);
    RETURN NEXT;
END $$;
COMMENT ON FUNCTION create_child(os_caller, bytea, text, uuid, text, os_kind, text[], jsonb, bytea, os_admission_proof, bytea, text, bytea, text, jsonb) IS
    'A child''s create: the door''s call, then an inheriting child admitted at once when there is nothing to prove, else the repeat''s answer or the parent''s snapshot to prove against, or the proved admission; an admitted child as sandbox_view has it.';
