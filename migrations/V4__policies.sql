-- Policy writes after creation, and the admin's global maximum. The gateway proves the new
-- policy with z3 first; these functions re-check that nothing it proved against changed
-- (the sandbox's version, its parent's, the global maximum's, and the live children whose
-- policies must still fit), then write the new version with its receipt.

CREATE FUNCTION global_max_set(p_user bigint, p_document jsonb, p_hash bytea) RETURNS integer
LANGUAGE plpgsql AS $$
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
    'An admin sets (or, with NULL, clears) the global maximum policy; returns the new version.';

CREATE FUNCTION global_max_current(OUT version integer, OUT document jsonb, OUT hash bytea)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(max(g.version), 0),
           (SELECT document FROM global_max_policies ORDER BY version DESC LIMIT 1),
           (SELECT hash FROM global_max_policies ORDER BY version DESC LIMIT 1)
      FROM global_max_policies g
$$;
COMMENT ON FUNCTION global_max_current() IS 'The current global maximum: version (0 if never set) and document (NULL if none).';

CREATE FUNCTION set_policy(p_user bigint, p_sandbox uuid, p_program text, p_ref text,
                           p_document jsonb, p_hash bytea, p_proof jsonb)
RETURNS integer LANGUAGE plpgsql AS $$
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
    'Writes a new version of a running sandbox''s policy after the gateway proved it within its boundary and its live children within it; refuses if any of those changed since, or if a static section (filesystem, landlock, process) would change.';
