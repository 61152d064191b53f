-- One place for each rule (issue 10).
--
-- 1. The error-code vocabulary is one table, os_error_codes. Every refusal goes through
--    os_refuse(code, ...), which raises only a code listed there with its SQLSTATE; the
--    trigger functions that raised literal SQLSTATEs are redefined to call it, and audit
--    receipts may only name a listed code (the audit_log_code_fkey trigger).
-- 2. The gateway calls typed entry points: who calls is one os_caller value (the Principal
--    the gateway authenticated), a child's kind is os_kind, what a new sandbox's policy was
--    proved against is os_admission_proof / os_root_proof (verdict os_verdict). Each entry
--    point decides from the caller what it may do (users only, admins only) and passes on to
--    the function that holds the rule; those functions (the earlier signatures) are no longer
--    the gateway's to call. Nothing is checked twice: the Rust copies of these rules are gone.

-- ---------------------------------------------------------------- error codes

CREATE TABLE os_error_codes (
    code      text NOT NULL,
    sqlstate  text NOT NULL,
    meaning   text NOT NULL,
    CONSTRAINT os_error_codes_pkey PRIMARY KEY (code),
    CONSTRAINT os_error_codes_sqlstate_key UNIQUE (sqlstate),
    CONSTRAINT os_error_codes_code_format CHECK (code ~ '^[A-Z][A-Z_]*$'),
    CONSTRAINT os_error_codes_sqlstate_format CHECK (sqlstate ~ '^OS[0-9]{3}$')
);
COMMENT ON TABLE os_error_codes IS
    'The error codes of every surface (DESIGN.md "Error codes"), each with the SQLSTATE a refusal raised in SQL carries. '
    'The gateway maps a SQLSTATE to its code once (crates/store/src/error.rs); a test checks both lists agree.';
COMMENT ON COLUMN os_error_codes.code IS 'The code as every surface names it (NOT_ALLOWED, LIMIT_REACHED, ...).';
COMMENT ON COLUMN os_error_codes.sqlstate IS 'The project SQLSTATE (class OS) os_refuse raises for it.';
COMMENT ON COLUMN os_error_codes.meaning IS 'When it is used.';
INSERT INTO os_error_codes (code, sqlstate, meaning) VALUES
    ('NOT_ALLOWED', 'OS001', 'No grant, revoked, expired, wrong program, not your descendant, tool creating, agent touching a grant, not an admin.'),
    ('LIMIT_REACHED', 'OS002', 'Depth, breadth, total or another grant limit; details name the limit and its values.'),
    ('POLICY_EXCEEDS_PARENT', 'OS003', 'The prover found a request the child allows and the boundary does not.'),
    ('POLICY_UNPROVABLE', 'OS004', 'Unsupported shape, timeout, resource limit, or a proof that names no current version.'),
    ('INVALID_ARGUMENT', 'OS005', 'Malformed input; details name the field.'),
    ('NOT_FOUND', 'OS006', 'No such sandbox, grant, proposal or user, as far as the caller may see.'),
    ('CONFLICT', 'OS007', 'A state that forbids the change, a repeated request_id with other arguments; '
                          'details.reason = policy_changed when the policy changed since it was proved (prove again).'),
    ('UNAUTHENTICATED', 'OS008', 'No valid credential.'),
    ('UNAVAILABLE', 'OS010', 'The database, the driver or the host cannot serve now.');
ALTER TABLE os_error_codes OWNER TO openshell_owner;
GRANT SELECT ON os_error_codes TO openshell_operator;

-- POLICY_CHANGED (OS009 before this migration) is CONFLICT with reason policy_changed.
CREATE OR REPLACE FUNCTION os_refuse(code text, message text, details jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_code text := code;
    v_details jsonb := coalesce(details, '{}');
    v_state text;
BEGIN
    IF v_code = 'POLICY_CHANGED' THEN
        v_code := 'CONFLICT';
        v_details := v_details || '{"reason": "policy_changed"}';
    END IF;
    SELECT e.sqlstate INTO v_state FROM os_error_codes e WHERE e.code = v_code;
    IF v_state IS NULL THEN
        RAISE EXCEPTION 'os_refuse: % is not a code of os_error_codes', v_code;
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = message, DETAIL = v_details::text;
END $$;
COMMENT ON FUNCTION os_refuse(text, text, jsonb) IS
    'Raises a refusal: the SQLSTATE os_error_codes lists for CODE, DETAIL = the JSON details. The only RAISE of a project code.';

-- The list is fixed (a new code comes with a migration), so receipts are held to it by a
-- plain read at insert: a foreign key would lock the code's row (FOR KEY SHARE) and every
-- refusal of every tree would extend one MultiXact.
CREATE TRIGGER os_error_codes_fixed BEFORE UPDATE OR DELETE ON os_error_codes
    FOR EACH ROW EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER os_error_codes_fixed ON os_error_codes IS 'The vocabulary changes only by migration.';

CREATE FUNCTION audit_log_code_known() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM os_error_codes WHERE code = NEW.code) THEN
        RAISE EXCEPTION 'insert violates audit_log_code_fkey: % is not a code of os_error_codes', NEW.code
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'audit_log_code_fkey';
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION audit_log_code_known() IS 'Trigger body: a receipt''s code is one of os_error_codes.';
ALTER FUNCTION audit_log_code_known() OWNER TO openshell_owner;
REVOKE EXECUTE ON FUNCTION audit_log_code_known() FROM PUBLIC;
CREATE TRIGGER audit_log_code_fkey BEFORE INSERT ON audit_log
    FOR EACH ROW WHEN (NEW.code IS NOT NULL) EXECUTE FUNCTION audit_log_code_known();
COMMENT ON TRIGGER audit_log_code_fkey ON audit_log IS
    'Receipts name only codes of os_error_codes (a foreign key''s check without its row lock).';

-- The trigger functions that raised literal SQLSTATEs, now through os_refuse (bodies as
-- before otherwise).
CREATE OR REPLACE FUNCTION os_forbid_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_refuse('NOT_ALLOWED', format('%s rows are kept for audit and cannot be deleted', TG_TABLE_NAME));
END $$;

CREATE OR REPLACE FUNCTION os_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_refuse('NOT_ALLOWED', format('%s is append-only', TG_TABLE_NAME));
END $$;

CREATE OR REPLACE FUNCTION grants_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.root_id, NEW.created_by, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.root_id, OLD.created_by, OLD.created_at) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'a grant''s tree and creator are fixed');
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION grants_record_history() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ev text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ev := 'created';
    ELSIF NEW.end_reason IS NOT NULL AND OLD.end_reason IS NULL THEN
        ev := NEW.end_reason;
    ELSIF OLD.end_reason IS NOT NULL THEN
        PERFORM os_refuse('CONFLICT', format('grant %s has ended and cannot change', OLD.id));
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

CREATE OR REPLACE FUNCTION trees_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NOT os_counting() THEN
        PERFORM os_refuse('NOT_ALLOWED', 'trees rows are kept by the counting triggers on sandboxes');
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION sandboxes_credential_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.credential_hash IS NOT NULL AND NEW.credential_hash IS DISTINCT FROM OLD.credential_hash THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('the credential of sandbox %s can only be cleared, never set or changed', OLD.id));
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION sandboxes_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.live_children IS DISTINCT FROM OLD.live_children THEN
        IF NOT os_counting() THEN
            PERFORM os_refuse('NOT_ALLOWED',
                format('live_children of sandbox %s is kept by the counting triggers', OLD.id));
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
    -- The reconciler ages rows by updated_at: a child's admission is not a change of its parent.
    IF NEW.live_children IS NOT DISTINCT FROM OLD.live_children OR NEW.phase <> OLD.phase THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION user_tokens_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.token_hash, NEW.user_id, NEW.created_at, NEW.id, NEW.label)
       IS DISTINCT FROM (OLD.token_hash, OLD.user_id, OLD.created_at, OLD.id, OLD.label) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('token %s can only be revoked or expire sooner', OLD.id));
    END IF;
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        PERFORM os_refuse('NOT_ALLOWED', format('token %s is revoked for good', OLD.id));
    END IF;
    IF NEW.expires_at IS DISTINCT FROM OLD.expires_at
       AND (NEW.expires_at IS NULL OR (OLD.expires_at IS NOT NULL AND NEW.expires_at > OLD.expires_at)) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('token %s cannot live longer than it was given', OLD.id));
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION policy_proposals_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'pending' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('proposal %s is already %s: a decision is final', OLD.id, OLD.state));
    END IF;
    IF (NEW.sandbox_id, NEW.owner_id, NEW.root_id, NEW.rules, NEW.reason, NEW.created_program, NEW.created_at,
        NEW.expires_at)
       IS DISTINCT FROM
       (OLD.sandbox_id, OLD.owner_id, OLD.root_id, OLD.rules, OLD.reason, OLD.created_program, OLD.created_at,
        OLD.expires_at) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('what proposal %s asks for cannot change', OLD.id));
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION door_credentials_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.sandbox_id, NEW.token_hash, NEW.issued_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.id, OLD.sandbox_id, OLD.token_hash, OLD.issued_at, OLD.expires_at)
       OR (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'a door credential can only be revoked, once');
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION os_fit_template(p_parent jsonb, p_requested jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    fitted jsonb := coalesce(p_parent, '{}');
    field text;
    want numeric;
    have numeric;
BEGIN
    IF p_requested IS NULL OR p_requested = '{}'::jsonb THEN
        RETURN fitted;
    END IF;
    IF jsonb_typeof(p_requested) <> 'object' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'template must be an object', '{"field": "template"}');
    END IF;
    FOR field IN SELECT jsonb_object_keys(p_requested) LOOP
        IF field NOT IN ('image', 'cpu_millis', 'memory_bytes', 'pids') THEN
            PERFORM os_refuse('INVALID_ARGUMENT', format('template.%s: unknown field', field),
                              jsonb_build_object('field', 'template.' || field));
        END IF;
    END LOOP;
    IF p_requested ? 'image' AND (p_requested->>'image') IS DISTINCT FROM (fitted->>'image') THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('template.image: a child runs its parent''s image (%s), not %s',
                   coalesce(fitted->>'image', 'none'), coalesce(p_requested->>'image', 'none')),
            jsonb_build_object('field', 'template.image', 'parent', fitted->'image', 'requested', p_requested->'image'));
    END IF;
    FOREACH field IN ARRAY ARRAY['cpu_millis', 'memory_bytes', 'pids'] LOOP
        CONTINUE WHEN NOT p_requested ? field OR jsonb_typeof(p_requested->field) = 'null';
        IF jsonb_typeof(p_requested->field) <> 'number' OR (p_requested->>field)::numeric <= 0 THEN
            PERFORM os_refuse('INVALID_ARGUMENT', format('template.%s: must be a positive number', field),
                              jsonb_build_object('field', 'template.' || field));
        END IF;
        want := (p_requested->>field)::numeric;
        have := (fitted->>field)::numeric;   -- NULL: the parent has no limit on it
        IF have IS NOT NULL AND want > have THEN
            PERFORM os_refuse('NOT_ALLOWED',
                format('template.%s: %s is more than the parent''s %s', field, want, have),
                jsonb_build_object('field', 'template.' || field, 'parent', have, 'requested', want));
        END IF;
        fitted := jsonb_set(fitted, ARRAY[field], p_requested->field);
    END LOOP;
    RETURN fitted;
END $$;

-- ---------------------------------------------------------------- typed arguments

CREATE TYPE os_caller AS (user_id bigint, sandbox_id uuid, program text);
COMMENT ON TYPE os_caller IS
    'Who calls, as the gateway authenticated it: a user (user_id; sandbox_id and program NULL), or a sandbox '
    '(sandbox_id, user_id = its owner, program = the calling program when the call came through its door).';

CREATE TYPE os_kind AS ENUM ('agent', 'tool');
COMMENT ON TYPE os_kind IS 'A child''s kind: an agent runs its own task; a tool runs commands for its parent.';

CREATE TYPE os_verdict AS ENUM ('within', 'inherited', 'inherited_within', 'no_global_max');
COMMENT ON TYPE os_verdict IS
    'How a new sandbox''s policy was decided: proved within its boundary, its parent''s as is (no global maximum), '
    'its parent''s proved within the global maximum, or a root with no global maximum.';

CREATE TYPE os_admission_proof AS (parent_id uuid, parent_version integer, global_version integer, verdict os_verdict);
COMMENT ON TYPE os_admission_proof IS
    'What a child''s policy was proved against: admission re-checks the parent, its policy version and the global '
    'maximum''s version are current (else CONFLICT policy_changed: prove again).';

CREATE TYPE os_root_proof AS (global_version integer, verdict os_verdict);
COMMENT ON TYPE os_root_proof IS 'What a root''s policy was proved against: the global maximum''s version.';

-- The caller as a user: refused (NOT_ALLOWED, saying what was asked) when it is a sandbox.
CREATE FUNCTION os_caller_user(p_caller os_caller, p_what text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_caller IS NULL OR (p_caller).sandbox_id IS NOT NULL OR (p_caller).user_id IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', format('only a user can %s; a sandbox cannot', p_what));
    END IF;
    RETURN (p_caller).user_id;
END $$;
COMMENT ON FUNCTION os_caller_user(os_caller, text) IS
    'The calling user''s id; refuses a sandbox caller (NOT_ALLOWED naming WHAT).';

-- The caller as an admin user.
CREATE FUNCTION os_caller_admin(p_caller os_caller, p_what text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_user bigint := os_caller_user(p_caller, p_what);
BEGIN
    IF NOT os_is_admin(v_user) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('only an admin can %s', p_what));
    END IF;
    RETURN v_user;
END $$;
COMMENT ON FUNCTION os_caller_admin(os_caller, text) IS
    'The calling admin''s id; refuses a sandbox or a user who is not an admin (NOT_ALLOWED naming WHAT).';

-- The user a sandbox-or-user rule takes: NULL for a sandbox caller (its rules key on the sandbox).
CREATE FUNCTION os_caller_acting_user(p_caller os_caller) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN (p_caller).sandbox_id IS NULL THEN (p_caller).user_id END $$;
COMMENT ON FUNCTION os_caller_acting_user(os_caller) IS
    'The caller''s user id when the caller is a user; NULL for a sandbox.';

-- The bootstrap admin is made without an actor; every other user by an admin. (CREATE OR
-- REPLACE resets SECURITY DEFINER and SET: both are restated.)
CREATE OR REPLACE FUNCTION user_create(p_actor bigint, p_name text, p_admin boolean, p_token_hash bytea)
RETURNS users LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    u users;
BEGIN
    IF p_actor IS NULL AND EXISTS (SELECT 1 FROM users) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can add users');
    END IF;
    IF p_actor IS NOT NULL AND NOT os_is_admin(p_actor) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can add users');
    END IF;
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_-]{0,62}$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            'name: must start with a lower-case letter, then up to 62 of a-z, 0-9, _ or -',
            jsonb_build_object('field', 'name'));
    END IF;
    PERFORM set_config('os.actor', coalesce(p_actor::text, ''), true);
    INSERT INTO users (name, is_admin) VALUES (p_name, p_admin) ON CONFLICT (name) DO NOTHING RETURNING * INTO u;
    IF u.id IS NULL THEN
        PERFORM os_refuse('CONFLICT', format('user %s already exists', p_name), jsonb_build_object('field', 'name'));
    END IF;
    INSERT INTO user_tokens (token_hash, user_id, label) VALUES (p_token_hash, u.id, 'first token');
    RETURN u;
END $$;

-- (user_create is now overloaded: the bootstrap names its NULL actor's type.)
CREATE OR REPLACE FUNCTION bootstrap_admin(p_name text, p_token_hash bytea) RETURNS boolean LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- One bootstrap at a time across gateways; the first finds no user and makes the admin.
    PERFORM pg_advisory_xact_lock(7061708);
    IF EXISTS (SELECT 1 FROM users) THEN
        RETURN false;
    END IF;
    PERFORM user_create(p_actor => NULL::bigint, p_name => p_name, p_admin => true, p_token_hash => p_token_hash);
    RETURN true;
END $$;

-- ---------------------------------------------------------------- the gateway's entry points
-- Each takes the caller as os_caller, decides who may call, and passes on to the function
-- that holds the rule (same name, earlier signature; internal from now on).

CREATE FUNCTION user_create(p_caller os_caller, p_name text, p_admin boolean, p_token_hash bytea)
RETURNS void LANGUAGE sql AS $$
    SELECT FROM user_create(p_actor => os_caller_admin(p_caller, 'add users'), p_name => p_name,
                            p_admin => p_admin, p_token_hash => p_token_hash)
$$;
COMMENT ON FUNCTION user_create(os_caller, text, boolean, bytea) IS
    'An admin adds a user with its first token (stored hashed).';

CREATE FUNCTION global_max_set(p_caller os_caller, p_document jsonb, p_hash bytea)
RETURNS integer LANGUAGE sql AS $$
    SELECT global_max_set(p_user => os_caller_admin(p_caller, 'set the global maximum policy'),
                          p_document => p_document, p_hash => p_hash)
$$;
COMMENT ON FUNCTION global_max_set(os_caller, jsonb, bytea) IS
    'An admin sets (NULL document: clears) the global maximum policy; returns its new version.';

CREATE FUNCTION audit_list(p_caller os_caller, p_sandbox_ref text, p_owner_name text, p_since timestamptz,
                           p_until timestamptz, p_refusals_only boolean, p_before_id bigint, p_limit bigint)
RETURNS SETOF audit_view LANGUAGE sql STABLE AS $$
    SELECT * FROM audit_list(p_user => os_caller_user(p_caller, 'read the audit log'),
                             p_sandbox_ref => p_sandbox_ref, p_owner_name => p_owner_name, p_since => p_since,
                             p_until => p_until, p_refusals_only => p_refusals_only, p_before_id => p_before_id,
                             p_limit => p_limit)
$$;
COMMENT ON FUNCTION audit_list(os_caller, text, text, timestamptz, timestamptz, boolean, bigint, bigint) IS
    'The audit entries a user may read (an admin: everyone''s; others only their own trees).';

CREATE FUNCTION sandbox_list(p_caller os_caller, p_include_stopped boolean, p_after_at timestamptz,
                             p_after_id uuid, p_limit bigint)
RETURNS SETOF sandbox_view LANGUAGE sql STABLE AS $$
    SELECT * FROM sandbox_list(p_user => os_caller_user(p_caller, 'list sandboxes'),
                               p_include_stopped => p_include_stopped, p_after_at => p_after_at,
                               p_after_id => p_after_id, p_limit => p_limit)
$$;
COMMENT ON FUNCTION sandbox_list(os_caller, boolean, timestamptz, uuid, bigint) IS
    'A user''s sandboxes (an admin''s: everyone''s), newest first, a page after (p_after_at, p_after_id).';

CREATE FUNCTION grant_list(p_caller os_caller, p_ref text)
RETURNS SETOF grant_view LANGUAGE sql STABLE AS $$
    SELECT * FROM grant_list(p_user => os_caller_user(p_caller, 'read or change a grant'), p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_list(os_caller, text) IS
    'Every grant of the calling user''s trees, or one tree''s history when p_ref is given.';

CREATE FUNCTION create_root(p_caller os_caller, p_name text, p_command text[], p_template jsonb, p_policy jsonb,
                            p_policy_hash bytea, p_credential_hash bytea, p_request_id text, p_args_hash bytea,
                            p_grant jsonb, p_runner text, p_proof os_root_proof)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE sql AS $$
    SELECT * FROM create_root(p_user => os_caller_user(p_caller, 'create a root sandbox'), p_name => p_name,
                              p_command => p_command, p_template => p_template, p_policy => p_policy,
                              p_policy_hash => p_policy_hash, p_credential_hash => p_credential_hash,
                              p_request_id => p_request_id, p_args_hash => p_args_hash, p_grant => p_grant,
                              p_runner => p_runner, p_proof => to_jsonb(p_proof))
$$;
COMMENT ON FUNCTION create_root(os_caller, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, os_root_proof) IS
    'A user creates a root sandbox (with its grant, if any); a repeated request_id returns the first.';

CREATE FUNCTION proposal_list(p_caller os_caller, p_ref text, p_state text, p_limit integer)
RETURNS SETOF proposal_view LANGUAGE sql AS $$
    SELECT * FROM proposal_list(p_user => os_caller_user(p_caller, 'decide on proposals'), p_ref => p_ref,
                                p_state => p_state, p_limit => p_limit)
$$;
COMMENT ON FUNCTION proposal_list(os_caller, text, text, integer) IS 'Proposals the calling user decides on, newest first.';

CREATE FUNCTION proposal_pending(p_caller os_caller, p_id bigint)
RETURNS SETOF proposal_view LANGUAGE sql AS $$
    SELECT * FROM proposal_pending(p_user => os_caller_user(p_caller, 'decide on proposals'), p_id => p_id)
$$;
COMMENT ON FUNCTION proposal_pending(os_caller, bigint) IS 'A pending proposal the calling user may decide on.';

CREATE FUNCTION proposal_approve(p_caller os_caller, p_id bigint, p_keys text[], p_document jsonb, p_hash bytea,
                                 p_proof jsonb)
RETURNS SETOF proposal_view LANGUAGE sql AS $$
    SELECT * FROM proposal_approve(p_user => os_caller_user(p_caller, 'decide on proposals'), p_id => p_id,
                                   p_keys => p_keys, p_document => p_document, p_hash => p_hash, p_proof => p_proof)
$$;
COMMENT ON FUNCTION proposal_approve(os_caller, bigint, text[], jsonb, bytea, jsonb) IS
    'The calling user approves a proposal: the merged policy becomes the next version, re-checked against the proof.';

CREATE FUNCTION proposal_reject(p_caller os_caller, p_id bigint, p_reason text)
RETURNS SETOF proposal_view LANGUAGE sql AS $$
    SELECT * FROM proposal_reject(p_user => os_caller_user(p_caller, 'decide on proposals'), p_id => p_id,
                                  p_reason => p_reason)
$$;
COMMENT ON FUNCTION proposal_reject(os_caller, bigint, text) IS 'The calling user rejects a proposal, with a reason.';

CREATE FUNCTION token_create(p_caller os_caller, p_user text, p_token_hash bytea, p_expires_at timestamptz,
                             p_label text)
RETURNS bigint LANGUAGE sql AS $$
    SELECT token_create(p_actor => os_caller_user(p_caller, 'manage tokens'), p_user => p_user,
                        p_token_hash => p_token_hash, p_expires_at => p_expires_at, p_label => p_label)
$$;
COMMENT ON FUNCTION token_create(os_caller, text, bytea, timestamptz, text) IS
    'A user adds a token for themself (an admin: for anyone); returns its id.';

CREATE FUNCTION token_list(p_caller os_caller, p_user text)
RETURNS TABLE (id bigint, user_name text, label text, created_at timestamptz, expires_at timestamptz,
               revoked_at timestamptz, state text)
LANGUAGE sql STABLE AS $$
    SELECT * FROM token_list(p_actor => os_caller_user(p_caller, 'manage tokens'), p_user => p_user)
$$;
COMMENT ON FUNCTION token_list(os_caller, text) IS 'The tokens a user may see (their own; an admin: anyone''s).';

CREATE FUNCTION token_revoke(p_caller os_caller, p_id bigint)
RETURNS void LANGUAGE sql AS $$
    SELECT token_revoke(p_actor => os_caller_user(p_caller, 'manage tokens'), p_id => p_id)
$$;
COMMENT ON FUNCTION token_revoke(os_caller, bigint) IS 'A user revokes one of their tokens (an admin: anyone''s).';

-- Sandbox-or-user calls: the rule function takes the caller's parts.

CREATE FUNCTION admit_child(p_caller os_caller, p_parent text, p_name text, p_kind os_kind, p_command text[],
                            p_policy jsonb, p_policy_hash bytea, p_proof os_admission_proof, p_credential_hash bytea,
                            p_request_id text, p_args_hash bytea, p_runner text, p_template jsonb DEFAULT NULL)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
-- Without a template the plain admission: the parent's template, and no set_config.
BEGIN
    IF p_template IS NULL THEN
        RETURN QUERY SELECT a.sandbox_id, a.replayed FROM admit_child(
            p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id,
            p_program => (p_caller).program, p_parent => p_parent, p_name => p_name, p_kind => p_kind::text,
            p_command => p_command, p_policy => p_policy, p_policy_hash => p_policy_hash, p_proof => to_jsonb(p_proof),
            p_credential_hash => p_credential_hash, p_request_id => p_request_id, p_args_hash => p_args_hash,
            p_runner => p_runner) a;
    ELSE
        RETURN QUERY SELECT a.sandbox_id, a.replayed FROM admit_child_templated(
            p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id,
            p_program => (p_caller).program, p_parent => p_parent, p_name => p_name, p_kind => p_kind::text,
            p_command => p_command, p_policy => p_policy, p_policy_hash => p_policy_hash, p_proof => to_jsonb(p_proof),
            p_credential_hash => p_credential_hash, p_request_id => p_request_id, p_args_hash => p_args_hash,
            p_runner => p_runner, p_template => p_template) a;
    END IF;
END $$;
COMMENT ON FUNCTION admit_child(os_caller, text, text, os_kind, text[], jsonb, bytea, os_admission_proof, bytea, text, bytea, text, jsonb) IS
    'Admits a child under p_parent (a sandbox caller: under itself) through its tree''s grant and limits, '
    're-checking the proof; the template the creator asked for is fitted to the parent''s.';

CREATE FUNCTION os_replay(p_caller os_caller, p_request_id text, p_args_hash bytea)
RETURNS uuid LANGUAGE sql AS $$
    SELECT os_replay(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id,
                     p_request_id => p_request_id, p_args_hash => p_args_hash)
$$;
COMMENT ON FUNCTION os_replay(os_caller, text, bytea) IS
    'The sandbox a repeated request_id of this caller created; a repeat with other arguments is refused.';

CREATE FUNCTION record_refusal(p_caller os_caller, p_action text, p_target text, p_request_id text, p_code text,
                               p_message text, p_details jsonb)
RETURNS void LANGUAGE sql AS $$
    SELECT record_refusal(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                          p_program => (p_caller).program, p_action => p_action, p_target => p_target,
                          p_request_id => p_request_id, p_code => p_code, p_message => p_message,
                          p_details => p_details)
$$;
COMMENT ON FUNCTION record_refusal(os_caller, text, text, text, text, text, jsonb) IS
    'Commits the receipt of a refused request (p_code: one of os_error_codes).';

CREATE FUNCTION begin_stop(p_caller os_caller, p_ref text, p_delete boolean)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE sql AS $$
    SELECT * FROM begin_stop(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                             p_program => (p_caller).program, p_ref => p_ref, p_delete => p_delete)
$$;
COMMENT ON FUNCTION begin_stop(os_caller, text, boolean) IS
    'Marks the subtree STOPPING (DELETED where already stopped, for a delete); returns it deepest first.';

CREATE FUNCTION set_policy(p_caller os_caller, p_ref text, p_document jsonb, p_hash bytea, p_proof jsonb)
RETURNS integer LANGUAGE sql AS $$
    SELECT set_policy(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id,
                      p_program => (p_caller).program, p_ref => p_ref, p_document => p_document, p_hash => p_hash,
                      p_proof => p_proof)
$$;
COMMENT ON FUNCTION set_policy(os_caller, text, jsonb, bytea, jsonb) IS
    'Writes the next policy version of a sandbox the caller may change, re-checked against the proof.';

CREATE FUNCTION grant_status(p_caller os_caller, p_ref text)
RETURNS TABLE (grant_id bigint, root_id uuid, root_name text, sandbox_id uuid, sandbox_name text, sandbox_kind text,
               state text, max_depth integer, max_breadth integer, max_total integer, expires_at timestamptz,
               program text, depth integer, live_children integer, live_total integer, remaining_depth integer,
               remaining_breadth integer, remaining_total integer)
LANGUAGE sql STABLE AS $$
    SELECT * FROM grant_status(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                               p_program => (p_caller).program, p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_status(os_caller, text) IS
    'The grant over a sandbox''s tree as the caller may read it: limits, used and remaining.';

CREATE FUNCTION exec_begin(p_caller os_caller, p_ref text, p_kind os_kind)
RETURNS uuid LANGUAGE sql AS $$
    SELECT exec_begin(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                      p_kind => p_kind::text)
$$;
COMMENT ON FUNCTION exec_begin(os_caller, text, os_kind) IS
    'Starts an exec in a running sandbox the caller may work in (a sandbox: its own children of p_kind).';

CREATE FUNCTION work_target(p_caller os_caller, p_ref text, p_kind os_kind)
RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT work_target(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                       p_kind => p_kind::text)
$$;
COMMENT ON FUNCTION work_target(os_caller, text, os_kind) IS
    'The running sandbox p_ref names, if the caller may work in it (a sandbox: its own children of p_kind).';

CREATE FUNCTION file_target(p_caller os_caller, p_ref text)
RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT file_target(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION file_target(os_caller, text) IS
    'The running agent sandbox whose files the caller may read (never a tool child).';

CREATE FUNCTION grant_create(p_caller os_caller, p_ref text, p_max_depth integer, p_max_breadth integer,
                             p_max_total integer, p_expires_at timestamptz, p_program text,
                             p_tool_idle_seconds integer, p_program_resolved text, p_rate_calls integer,
                             p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE sql AS $$
    SELECT * FROM grant_create(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                               p_max_depth => p_max_depth, p_max_breadth => p_max_breadth,
                               p_max_total => p_max_total, p_expires_at => p_expires_at, p_program => p_program,
                               p_tool_idle_seconds => p_tool_idle_seconds, p_program_resolved => p_program_resolved,
                               p_rate_calls => p_rate_calls, p_rate_period_s => p_rate_period_s)
$$;
COMMENT ON FUNCTION grant_create(os_caller, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'The tree''s user creates its grant (a sandbox caller is refused).';

CREATE FUNCTION grant_update(p_caller os_caller, p_ref text, p_max_depth integer, p_max_breadth integer,
                             p_max_total integer, p_expires_at timestamptz, p_program text,
                             p_tool_idle_seconds integer, p_program_resolved text, p_rate_calls integer,
                             p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE sql AS $$
    SELECT * FROM grant_update(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                               p_max_depth => p_max_depth, p_max_breadth => p_max_breadth,
                               p_max_total => p_max_total, p_expires_at => p_expires_at, p_program => p_program,
                               p_tool_idle_seconds => p_tool_idle_seconds, p_program_resolved => p_program_resolved,
                               p_rate_calls => p_rate_calls, p_rate_period_s => p_rate_period_s)
$$;
COMMENT ON FUNCTION grant_update(os_caller, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'The tree''s user changes its live grant (NULL keeps a value; a sandbox caller is refused).';

CREATE FUNCTION grant_current(p_caller os_caller, p_ref text)
RETURNS SETOF grant_view LANGUAGE sql AS $$
    SELECT * FROM grant_current(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_current(os_caller, text) IS 'The tree''s current grant, for its user.';

CREATE FUNCTION grant_revoke(p_caller os_caller, p_ref text)
RETURNS SETOF grant_view LANGUAGE sql AS $$
    SELECT * FROM grant_revoke(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_revoke(os_caller, text) IS 'The tree''s user revokes its grant.';

CREATE FUNCTION parent_snapshot(p_caller os_caller, p_ref text)
RETURNS TABLE (id uuid, name text, kind text, policy_version integer, document jsonb, hash bytea,
               global_version integer, global_document jsonb)
LANGUAGE sql STABLE AS $$
    SELECT * FROM parent_snapshot(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                                  p_ref => coalesce((p_caller).sandbox_id::text, p_ref))
$$;
COMMENT ON FUNCTION parent_snapshot(os_caller, text) IS
    'The parent a child would be created under (a sandbox caller: itself, whatever p_ref says), its current '
    'policy and the global maximum, in one snapshot.';

CREATE FUNCTION policy_target(p_caller os_caller, p_ref text)
RETURNS TABLE (id uuid, name text, phase text, policy_version integer, document jsonb, parent_id uuid,
               parent_document jsonb, parent_version integer)
LANGUAGE sql STABLE AS $$
    SELECT * FROM policy_target(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION policy_target(os_caller, text) IS
    'A sandbox''s current policy and its parent''s, as the caller may see them: what a policy write is proved against.';

CREATE FUNCTION sandbox_denials(p_caller os_caller, p_ref text, p_limit integer)
RETURNS SETOF proxy_denials LANGUAGE sql STABLE AS $$
    SELECT * FROM sandbox_denials(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                                  p_limit => p_limit)
$$;
COMMENT ON FUNCTION sandbox_denials(os_caller, text, integer) IS
    'The latest proxy denials of a sandbox the caller may see, newest first.';

CREATE FUNCTION sandbox_get(p_caller os_caller, p_ref text)
RETURNS SETOF sandbox_view LANGUAGE sql STABLE AS $$
    SELECT * FROM sandbox_get(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION sandbox_get(os_caller, text) IS 'A sandbox the caller may see.';

CREATE FUNCTION sandbox_subtree(p_caller os_caller, p_ref text)
RETURNS SETOF sandbox_view LANGUAGE sql STABLE AS $$
    SELECT * FROM sandbox_subtree(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION sandbox_subtree(os_caller, text) IS 'A sandbox the caller may see and its descendants, in tree order.';

-- ---------------------------------------------------------------- privileges

-- The gateway calls the typed entry points only; the earlier signatures hold the rules and
-- run inside them (as the owner).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'public' AND p.proargtypes::oid[] @> ARRAY['os_caller'::regtype::oid]
           AND p.proname NOT LIKE 'os\_caller%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO openshell_owner', f);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = public, pg_temp', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO openshell_gateway', f);
    END LOOP;
    FOREACH f IN ARRAY ARRAY[
        'user_create(bigint, text, boolean, bytea)', 'global_max_set(bigint, jsonb, bytea)',
        'audit_list(bigint, text, text, timestamptz, timestamptz, boolean, bigint, bigint)',
        'sandbox_list(bigint, boolean, timestamptz, uuid, bigint)', 'grant_list(bigint, text)',
        'create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, jsonb)',
        'proposal_list(bigint, text, text, integer)', 'proposal_pending(bigint, bigint)',
        'proposal_approve(bigint, bigint, text[], jsonb, bytea, jsonb)', 'proposal_reject(bigint, bigint, text)',
        'token_create(bigint, text, bytea, timestamptz, text)', 'token_list(bigint, text)',
        'token_revoke(bigint, bigint)',
        'admit_child(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text)',
        'admit_child_templated(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text, jsonb)',
        'os_replay(bigint, uuid, text, bytea)',
        'record_refusal(bigint, uuid, text, text, text, text, text, text, jsonb)',
        'begin_stop(bigint, uuid, text, text, boolean)', 'set_policy(bigint, uuid, text, text, jsonb, bytea, jsonb)',
        'grant_status(bigint, uuid, text, text)', 'exec_begin(bigint, uuid, text, text)',
        'work_target(bigint, uuid, text, text)', 'file_target(bigint, uuid, text)',
        'grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer)',
        'grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer)',
        'grant_current(bigint, uuid, text)', 'grant_revoke(bigint, uuid, text)',
        'parent_snapshot(bigint, uuid, text)', 'policy_target(bigint, uuid, text)',
        'sandbox_denials(bigint, uuid, text, integer)', 'sandbox_get(bigint, uuid, text)',
        'sandbox_subtree(bigint, uuid, text)'
    ]::regprocedure[] LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM openshell_gateway', f);
        EXECUTE format('COMMENT ON FUNCTION %s IS %L', f,
            'Internal since V17: holds the rule; the gateway calls the os_caller signature of the same name. '
            || coalesce(obj_description(f::oid, 'pg_proc'), ''));
    END LOOP;
    FOREACH f IN ARRAY ARRAY['os_caller_user(os_caller, text)', 'os_caller_admin(os_caller, text)',
                             'os_caller_acting_user(os_caller)']::regprocedure[] LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO openshell_owner', f);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;
ALTER TYPE os_caller OWNER TO openshell_owner;
ALTER TYPE os_kind OWNER TO openshell_owner;
ALTER TYPE os_verdict OWNER TO openshell_owner;
ALTER TYPE os_admission_proof OWNER TO openshell_owner;
ALTER TYPE os_root_proof OWNER TO openshell_owner;
GRANT USAGE ON TYPE os_caller, os_kind, os_verdict, os_admission_proof, os_root_proof TO openshell_gateway;
