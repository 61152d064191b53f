-- V26: less CPU per admission, the rules unchanged.
--
-- 1. Name and request_id forms without counted repetition. PostgreSQL's regex engine expands
--    `{0,62}` and `{1,128}` into as many states: matching one name cost 8 us and one
--    request_id 17 us, each matched twice per admission (the function's check for its error
--    message, then the table's CHECK), and the name again on every update of a sandbox. The
--    same forms as a length bound and `*`/`+` cost about 0.3 us. The uuid test runs only
--    on names of a uuid's length.
-- 2. admit_child is one function. The typed entry point called a second, untyped admit_child
--    (the proof as jsonb, the template through admit_child_templated) through a function
--    scan; both inner functions go.
-- 3. os_replay (a create's request_id look-up) in PL/pgSQL, so its plan is kept (as a SQL
--    SECURITY DEFINER function it was planned on every call, see V24).

-- ---------------------------------------------------------------- 1. the forms

ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_name_format,
    ADD CONSTRAINT sandboxes_name_format CHECK (
        length(name) <= 63 AND name ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'
        AND (length(name) <> 36 OR name !~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'));
COMMENT ON CONSTRAINT sandboxes_name_format ON sandboxes IS
    '1 to 63 of A-Z, a-z, 0-9, ., _ or -, starting with a letter or digit, and not shaped like an id.';

ALTER TABLE create_requests DROP CONSTRAINT create_requests_request_id_format,
    ADD CONSTRAINT create_requests_request_id_format CHECK (
        length(request_id) <= 128 AND request_id ~ '^[A-Za-z0-9._:-]+$');
COMMENT ON CONSTRAINT create_requests_request_id_format ON create_requests IS
    '1 to 128 of A-Z, a-z, 0-9, ., _, : or -.';

ALTER TABLE users DROP CONSTRAINT users_name_format,
    ADD CONSTRAINT users_name_format CHECK (length(name) <= 63 AND name ~ '^[a-z][a-z0-9_-]*$');
COMMENT ON CONSTRAINT users_name_format ON users IS
    '1 to 63 of a-z, 0-9, _ or -, starting with a letter.';

CREATE OR REPLACE FUNCTION os_check_name_format(p_name text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR length(p_name) > 63 OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'
       OR (length(p_name) = 36 AND p_name ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$') THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            'name: 1 to 63 of A-Z, a-z, 0-9, ., _ or -, starting with a letter or digit, and not an id',
            jsonb_build_object('field', 'name'));
    END IF;
END $$;

CREATE OR REPLACE FUNCTION os_check_request_id(p_request_id text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF length(p_request_id) > 128 OR p_request_id !~ '^[A-Za-z0-9._:-]+$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'request_id: 1 to 128 of A-Z, a-z, 0-9, ., _, : or -',
                          jsonb_build_object('field', 'request_id'));
    END IF;
END $$;

-- As V3's, the form through os_check_name_format.
CREATE OR REPLACE FUNCTION os_check_new_name(p_owner bigint, p_name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_check_name_format(p_name);
    IF EXISTS (SELECT 1 FROM sandboxes WHERE owner_id = p_owner AND name = p_name AND phase <> 'DELETED') THEN
        PERFORM os_refuse('CONFLICT', format('a sandbox named %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
END $$;

-- As V12's, with the cheaper form.
CREATE OR REPLACE FUNCTION os_replay(p_user bigint, p_sandbox uuid, p_request_id text, p_args_hash bytea)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    r create_requests;
BEGIN
    IF p_request_id IS NULL OR p_request_id = '' THEN
        RETURN NULL;
    END IF;
    IF length(p_request_id) > 128 OR p_request_id !~ '^[A-Za-z0-9._:-]+$' THEN
        PERFORM os_check_request_id(p_request_id);
    END IF;
    SELECT * INTO r FROM create_requests
     WHERE caller = os_caller_key(p_user, p_sandbox) AND request_id = p_request_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.args_hash IS DISTINCT FROM p_args_hash THEN
        PERFORM os_refuse('CONFLICT',
            format('request_id %s was already used with different arguments', p_request_id),
            jsonb_build_object('field', 'request_id', 'sandbox_id', r.sandbox_id));
    END IF;
    RETURN r.sandbox_id;
END $$;

-- ---------------------------------------------------------------- 3. os_replay's entry point

CREATE OR REPLACE FUNCTION os_replay(p_caller os_caller, p_request_id text, p_args_hash bytea)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN os_replay(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id,
                     p_request_id => p_request_id, p_args_hash => p_args_hash);
END $$;

-- ---------------------------------------------------------------- 2. one admit_child

-- As V23's inner admit_child, taking the caller, kind and proof typed, and the template
-- (V15's admit_child_templated) inline; what it read in four statements after the parent it
-- reads in one.
CREATE OR REPLACE FUNCTION admit_child(p_caller os_caller, p_parent text, p_name text, p_kind os_kind, p_command text[],
                                       p_policy jsonb, p_policy_hash bytea, p_proof os_admission_proof,
                                       p_credential_hash bytea, p_request_id text, p_args_hash bytea, p_runner text,
                                       p_template jsonb DEFAULT NULL)
RETURNS TABLE (sandbox_id uuid, replayed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    p_sandbox uuid := (p_caller).sandbox_id;
    p_user bigint := (p_caller).user_id;
    p_program text := (p_caller).program;
    parent sandboxes;
    g grants;
    v_id uuid;
    v_proved uuid := (p_proof).parent_id;
    v_caller text := CASE WHEN p_sandbox IS NOT NULL THEN 'sandbox:' || p_sandbox ELSE 'user:' || p_user END;
    v_creator bigint := CASE WHEN p_sandbox IS NULL THEN p_user END;
    prior create_requests;
    claimed boolean;
    v_total integer;
    v_depth integer;
    v_children integer;
    r record;
BEGIN
    IF p_kind IS NULL THEN
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
    -- loser fails (40001, retried) before it has written anything. With it, in the same
    -- statement, the parent's count, the tree's grant and the global maximum's version.
    SELECT t.live_total AS total, coalesce(c.live_children, 0) AS children, gr AS grant_row,
           coalesce((SELECT max(version) FROM global_max_policies), 0) AS global_version
      INTO r
      FROM trees t
      LEFT JOIN parents c ON c.parent_id = parent.id
      LEFT JOIN grants gr ON gr.root_id = t.root_id AND gr.ended_at IS NULL
     WHERE t.root_id = parent.root_id
       FOR UPDATE OF t;
    v_total := r.total;
    v_children := r.children;
    g := r.grant_row;
    -- Expiry, revocation and (through the door) the program; the counting trigger checks
    -- the grant again for any insert, with the limits.
    IF g.id IS NULL OR g.expires_at <= now() OR (p_sandbox IS NOT NULL AND p_program IS DISTINCT FROM g.program) THEN
        PERFORM os_check_grant(parent.root_id, g, p_sandbox, p_program);
    END IF;
    IF parent.id IS DISTINCT FROM v_proved OR parent.policy_version IS DISTINCT FROM (p_proof).parent_version THEN
        PERFORM os_refuse('POLICY_CHANGED',
            format('the parent %s or its policy changed since the proof (now %s version %s, proved against %s version %s)',
                   parent.name, parent.id, parent.policy_version, v_proved, (p_proof).parent_version),
            jsonb_build_object('reason', 'policy_changed'));
    END IF;
    IF r.global_version IS DISTINCT FROM (p_proof).global_version THEN
        PERFORM os_check_global_version(to_jsonb(p_proof));
    END IF;

    IF p_name IS NULL OR p_name = '' THEN
        p_name := left(parent.name, 54) || '-' || left(replace(gen_random_uuid()::text, '-', ''), 8);
    ELSIF length(p_name) > 63 OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' OR length(p_name) = 36 THEN
        PERFORM os_check_name_format(p_name);
    END IF;
    v_id := os_new_id(true);

    -- The request id is claimed first: a repeat finds the claim and answers with its child.
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
            RETURN QUERY SELECT prior.sandbox_id, true;
            RETURN;
        END IF;
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
    RETURNING depth INTO v_depth;
    IF p_template IS NOT NULL THEN
        PERFORM set_config('openshell.child_template', '', true);
    END IF;
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
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', (p_proof).verdict,
                               'max_depth', g.max_depth, 'max_breadth', g.max_breadth, 'max_total', g.max_total));
    RETURN QUERY SELECT v_id, false;
END $$;

DROP FUNCTION admit_child_templated(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text, jsonb);
DROP FUNCTION admit_child(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text);
