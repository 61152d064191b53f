-- Policies after creation, and the admin's global maximum.
--
-- The gateway proves a new policy with z3 first; these functions re-check that nothing it
-- proved against changed (the sandbox's version, its parent's, the global maximum's, and the
-- live children whose policies must still fit), then write the new version with its receipt.
-- Filesystem, Landlock and process rules are applied once, at start, and cannot change.

-- PL/pgSQL to keep its plan: every admission checks it (see authenticate, sql/auth.sql).
CREATE OR REPLACE FUNCTION os_global_version() RETURNS integer LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(max(version), 0) FROM global_max_policies);
END $$;
COMMENT ON FUNCTION os_global_version() IS
    'The current global maximum policy version (0: never set).';

CREATE OR REPLACE FUNCTION os_check_global_version(p_proof jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF os_global_version() IS DISTINCT FROM (p_proof->>'global_version')::integer THEN
        PERFORM os_refuse('POLICY_CHANGED',
            format('the global maximum policy changed (version %s, proved against %s)', os_global_version(),
                   p_proof->>'global_version'),
            jsonb_build_object('reason', 'policy_changed'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_global_version(jsonb) IS
    'Refuses (to be proved again) when the global maximum changed since the proof.';

CREATE OR REPLACE FUNCTION global_max_current(OUT version integer, OUT document jsonb, OUT hash bytea)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT coalesce(max(g.version), 0),
           (SELECT document FROM global_max_policies ORDER BY version DESC LIMIT 1),
           (SELECT hash FROM global_max_policies ORDER BY version DESC LIMIT 1)
      FROM global_max_policies g
$$;
COMMENT ON FUNCTION global_max_current() IS
    'The current global maximum: version (0 if never set) and document (NULL if none).';

CREATE OR REPLACE FUNCTION global_max_set(p_user bigint, p_document jsonb, p_hash bytea) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v integer := os_global_version() + 1;
BEGIN
    IF p_user IS NULL OR NOT os_is_admin(p_user) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can set the global maximum policy');
    END IF;
    INSERT INTO global_max_policies (version, document, hash, set_by) VALUES (v, p_document, p_hash, p_user);
    INSERT INTO audit_log (action, outcome, actor_user, details)
    VALUES ('policy.global_max', 'done', p_user,
            jsonb_build_object('version', v, 'policy_hash', encode(p_hash, 'hex'), 'cleared', p_document IS NULL));
    RETURN v;
END $$;
COMMENT ON FUNCTION global_max_set(bigint, jsonb, bytea) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. An admin sets (or, with NULL, clears) the global maximum policy; returns the new version.';

CREATE OR REPLACE FUNCTION global_max_set(p_caller os_caller, p_document jsonb, p_hash bytea)
RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT global_max_set(p_user => os_caller_admin(p_caller, 'set the global maximum policy'),
                          p_document => p_document, p_hash => p_hash)
$$;
COMMENT ON FUNCTION global_max_set(os_caller, jsonb, bytea) IS
    'An admin sets (NULL document: clears) the global maximum policy; returns its new version.';

CREATE OR REPLACE FUNCTION set_policy(p_user bigint, p_sandbox uuid, p_program text, p_ref text,
                           p_document jsonb, p_hash bytea, p_proof jsonb)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
    parent sandboxes;
    caller sandboxes;
    old_doc jsonb;
    g grants;
    proved_children jsonb;
    live_children jsonb;
    section text;
BEGIN
    -- A user changes their own sandboxes; a sandbox, its descendants (through the door).
    s := resolve_sandbox(p_user, p_sandbox, p_ref, false);
    IF p_sandbox IS NOT NULL THEN
        SELECT * INTO caller FROM sandboxes WHERE id = p_sandbox;
        IF caller.kind = 'tool' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'a tool sandbox cannot change policies', jsonb_build_object('reason', 'tool'));
        END IF;
        SELECT * INTO g FROM grants WHERE root_id = caller.root_id AND ended_at IS NULL;
        PERFORM os_check_grant(caller.root_id, g, p_sandbox, p_program);
    END IF;
    IF s.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox %s is %s', s.name, s.phase),
                          jsonb_build_object('reason', 'not_running', 'phase', s.phase));
    END IF;

    -- Everything the proof was made against must still be as it was.
    IF s.id IS DISTINCT FROM (p_proof->>'id')::uuid OR s.policy_version IS DISTINCT FROM (p_proof->>'version')::integer THEN
        PERFORM os_refuse('POLICY_CHANGED', format('the policy of %s changed meanwhile', s.name),
                          jsonb_build_object('reason', 'policy_changed'));
    END IF;
    IF s.parent_id IS NOT NULL THEN
        SELECT * INTO parent FROM sandboxes WHERE id = s.parent_id;
        IF parent.id IS DISTINCT FROM (p_proof->>'parent_id')::uuid
           OR parent.policy_version IS DISTINCT FROM (p_proof->>'parent_version')::integer THEN
            PERFORM os_refuse('POLICY_CHANGED', format('the policy of %s changed meanwhile', parent.name),
                              jsonb_build_object('reason', 'policy_changed'));
        END IF;
    END IF;
    PERFORM os_check_global_version(p_proof);
    SELECT coalesce(jsonb_agg(jsonb_build_array(c.id, c.policy_version) ORDER BY c.id), '[]') INTO live_children
      FROM sandboxes c WHERE c.parent_id = s.id AND os_is_live(c.phase);
    SELECT coalesce(jsonb_agg(e ORDER BY e->>0), '[]') INTO proved_children
      FROM jsonb_array_elements(coalesce(p_proof->'children', '[]')) e;
    IF live_children IS DISTINCT FROM proved_children THEN
        PERFORM os_refuse('POLICY_CHANGED', format('the children of %s changed meanwhile', s.name),
                          jsonb_build_object('reason', 'policy_changed'));
    END IF;

    -- Filesystem, Landlock and process rules are applied once, at start.
    SELECT document INTO old_doc FROM sandbox_policies WHERE sandbox_id = s.id AND version = s.policy_version;
    FOREACH section IN ARRAY ARRAY['filesystem_policy', 'landlock', 'process'] LOOP
        IF old_doc->section IS DISTINCT FROM p_document->section THEN
            PERFORM os_refuse('CONFLICT',
                format('%s cannot change on a running sandbox (it is applied at start)', section),
                jsonb_build_object('reason', 'static_section', 'field', 'policy.' || section));
        END IF;
    END LOOP;

    INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user, set_by_sandbox)
    VALUES (s.id, s.policy_version + 1, p_document, p_hash,
            CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox);
    UPDATE sandboxes SET policy_version = policy_version + 1 WHERE id = s.id;
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, details)
    VALUES ('policy.set', 'done', CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox, nullif(p_program, ''),
            s.owner_id, s.id, s.parent_id, s.root_id,
            jsonb_build_object('version', s.policy_version + 1, 'policy_hash', encode(p_hash, 'hex'),
                               'verdict', p_proof->>'verdict'));
    RETURN s.policy_version + 1;
END $$;
COMMENT ON FUNCTION set_policy(bigint, uuid, text, text, jsonb, bytea, jsonb) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Writes a new version of a running sandbox''s policy after the gateway proved it within its boundary and its live children within it; refuses if any of those changed since, or if a static section (filesystem, landlock, process) would change.';

CREATE OR REPLACE FUNCTION set_policy(p_caller os_caller, p_ref text, p_document jsonb, p_hash bytea, p_proof jsonb)
RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT set_policy(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id,
                      p_program => (p_caller).program, p_ref => p_ref, p_document => p_document, p_hash => p_hash,
                      p_proof => p_proof)
$$;
COMMENT ON FUNCTION set_policy(os_caller, text, jsonb, bytea, jsonb) IS
    'Writes the next policy version of a sandbox the caller may change, re-checked against the proof.';

CREATE OR REPLACE FUNCTION policy_target(p_user bigint, p_sandbox uuid, p_ref text)
RETURNS TABLE (id uuid, name text, phase text, policy_version integer, document jsonb, parent_id uuid,
               parent_document jsonb, parent_version integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT s.id, s.name, s.phase, s.policy_version, p.document, s.parent_id, pp.document, par.policy_version
      FROM resolve_sandbox(p_user, p_sandbox, p_ref) s
      JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = s.policy_version
      LEFT JOIN sandboxes par ON par.id = s.parent_id
      LEFT JOIN sandbox_policies pp ON pp.sandbox_id = par.id AND pp.version = par.policy_version
$$;
COMMENT ON FUNCTION policy_target(bigint, uuid, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A sandbox''s current policy and its parent''s, as the caller may see them: what a policy write is proved against.';

CREATE OR REPLACE FUNCTION policy_target(p_caller os_caller, p_ref text)
RETURNS TABLE (id uuid, name text, phase text, policy_version integer, document jsonb, parent_id uuid,
               parent_document jsonb, parent_version integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM policy_target(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION policy_target(os_caller, text) IS
    'A sandbox''s current policy and its parent''s, as the caller may see them: what a policy write is proved against.';

CREATE OR REPLACE FUNCTION policy_children(p_id uuid)
RETURNS TABLE (id uuid, name text, policy_version integer, document jsonb) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT c.id, c.name, c.policy_version, p.document FROM sandboxes c
      JOIN sandbox_policies p ON p.sandbox_id = c.id AND p.version = c.policy_version
     WHERE c.parent_id = p_id AND os_is_live(c.phase) ORDER BY c.id
$$;
COMMENT ON FUNCTION policy_children(uuid) IS
    'Live children of a sandbox with their current policies (they must fit a new one).';

-- PL/pgSQL to keep its plan: each new supervisor asks (see authenticate, sql/auth.sql).
CREATE OR REPLACE FUNCTION sandbox_current_policy(p_id uuid, p_known integer, OUT version integer, OUT document jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    SELECT s.policy_version, CASE WHEN s.policy_version IS DISTINCT FROM p_known THEN p.document END
      INTO version, document
      FROM sandboxes s JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = s.policy_version
     WHERE s.id = p_id;
END $$;
COMMENT ON FUNCTION sandbox_current_policy(uuid, integer) IS
    'A sandbox''s current policy version, and its document when it differs from the one its supervisor knows.';

-- Push instead of polling: a committed policy write wakes the gateways LISTENing on
-- openshell_changes, which push the new version to the sandbox's supervisor
-- (crates/gateway/src/changes.rs). The payload names ids only, never a document.
CREATE OR REPLACE FUNCTION os_notify_policy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('openshell_changes',
                      json_build_object('kind', 'policy', 'sandbox', NEW.id, 'version', NEW.policy_version)::text);
    RETURN NULL;
END $$;
COMMENT ON FUNCTION os_notify_policy() IS
    'Tells the gateways (channel openshell_changes) that a sandbox''s policy version changed: its id and version, nothing else.';
CREATE TRIGGER sandboxes_notify_policy AFTER UPDATE OF policy_version ON sandboxes
    FOR EACH ROW WHEN (OLD.policy_version IS DISTINCT FROM NEW.policy_version) EXECUTE FUNCTION os_notify_policy();
COMMENT ON TRIGGER sandboxes_notify_policy ON sandboxes IS
    'A policy write reaches the supervisor by push (NOTIFY at commit), not by its polling.';
