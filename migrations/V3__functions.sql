-- The operations the gateway calls. Each checks who is calling, enforces its rule and
-- writes its receipt in the same transaction. A principal is (p_user, p_sandbox,
-- p_program): exactly one of p_user and p_sandbox is set; p_program is the calling program
-- when the call came through the in-sandbox door.

-- ---------------------------------------------------------------- principals

CREATE FUNCTION authenticate(p_hash bytea)
RETURNS TABLE (kind text, user_id bigint, user_name text, is_admin boolean,
               sandbox_id uuid, sandbox_name text)
LANGUAGE sql STABLE AS $$
    SELECT 'user', u.id, u.name, u.is_admin, NULL::uuid, NULL::text
      FROM user_tokens t JOIN users u ON u.id = t.user_id
     WHERE t.token_hash = p_hash AND t.revoked_at IS NULL
    UNION ALL
    SELECT 'sandbox', s.owner_id, NULL, false, s.id, s.name
      FROM sandboxes s
     WHERE s.credential_hash = p_hash AND s.phase IN ('PROVISIONING', 'READY')
$$;
COMMENT ON FUNCTION authenticate(bytea) IS
    'The principal behind a token hash: a user, or a live sandbox (user_id is then its owner).';

CREATE FUNCTION os_caller_key(p_user bigint, p_sandbox uuid) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_sandbox IS NOT NULL THEN 'sandbox:' || p_sandbox ELSE 'user:' || p_user END
$$;
COMMENT ON FUNCTION os_caller_key(bigint, uuid) IS 'The scope of a caller''s request ids.';

CREATE FUNCTION os_is_admin(p_user bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT coalesce((SELECT is_admin FROM users WHERE id = p_user), false) $$;
COMMENT ON FUNCTION os_is_admin(bigint) IS 'Whether the user is an admin.';

CREATE FUNCTION os_is_descendant(p_descendant uuid, p_ancestor uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE up(id, parent_id) AS (
        SELECT id, parent_id FROM sandboxes WHERE id = p_descendant
        UNION ALL
        SELECT s.id, s.parent_id FROM sandboxes s JOIN up ON s.id = up.parent_id
    )
    SELECT EXISTS (SELECT 1 FROM up WHERE parent_id = p_ancestor)
$$;
COMMENT ON FUNCTION os_is_descendant(uuid, uuid) IS 'Whether the first sandbox is strictly below the second.';

CREATE FUNCTION resolve_sandbox(p_user bigint, p_sandbox uuid, p_ref text, p_allow_self boolean DEFAULT true)
RETURNS sandboxes LANGUAGE plpgsql STABLE AS $$
DECLARE
    s sandboxes;
    me sandboxes;
    v_owner bigint := p_user;
BEGIN
    IF p_user IS NULL AND p_sandbox IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', 'no principal');
    END IF;
    IF p_ref IS NULL OR p_ref = '' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'sandbox: a name or id is required',
                          jsonb_build_object('field', 'sandbox'));
    END IF;
    IF p_sandbox IS NOT NULL THEN
        SELECT * INTO me FROM sandboxes WHERE id = p_sandbox;
        v_owner := me.owner_id;
    END IF;
    IF p_ref ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
        SELECT * INTO s FROM sandboxes WHERE id = p_ref::uuid;
    ELSE
        SELECT * INTO s FROM sandboxes WHERE owner_id = v_owner AND name = p_ref AND phase <> 'DELETED';
        IF NOT FOUND THEN
            -- a DELETED sandbox is still found by name for audit, newest first
            SELECT * INTO s FROM sandboxes WHERE owner_id = v_owner AND name = p_ref
             ORDER BY created_at DESC LIMIT 1;
        END IF;
    END IF;
    IF s.id IS NULL
       OR (p_sandbox IS NULL AND s.owner_id <> p_user AND NOT os_is_admin(p_user))
       OR (p_sandbox IS NOT NULL AND s.root_id <> me.root_id) THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s not found', p_ref),
                          jsonb_build_object('sandbox', p_ref));
    END IF;
    IF p_sandbox IS NOT NULL AND NOT ((p_allow_self AND s.id = p_sandbox) OR os_is_descendant(s.id, p_sandbox)) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox %s is not a descendant of the calling sandbox', p_ref),
                          jsonb_build_object('sandbox', p_ref));
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION resolve_sandbox(bigint, uuid, text, boolean) IS
    'Finds a sandbox by id or name as the caller may see it: a user sees their own (an admin all), a sandbox itself and its descendants.';

-- ---------------------------------------------------------------- users

CREATE FUNCTION user_create(p_actor bigint, p_name text, p_admin boolean, p_token_hash bytea)
RETURNS users LANGUAGE plpgsql AS $$
DECLARE
    u users;
BEGIN
    IF p_actor IS NOT NULL AND NOT os_is_admin(p_actor) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can add users');
    END IF;
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_-]{0,62}$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            'name: must start with a lower-case letter, then up to 62 of a-z, 0-9, _ or -',
            jsonb_build_object('field', 'name'));
    END IF;
    IF EXISTS (SELECT 1 FROM users WHERE name = p_name) THEN
        PERFORM os_refuse('CONFLICT', format('user %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
    INSERT INTO users (name, is_admin) VALUES (p_name, p_admin) RETURNING * INTO u;
    INSERT INTO user_tokens (token_hash, user_id) VALUES (p_token_hash, u.id);
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, details)
    VALUES (CASE WHEN p_actor IS NULL THEN 'system.bootstrap_admin' ELSE 'user.create' END,
            'done', p_actor, u.id, jsonb_build_object('user', u.name, 'admin', p_admin));
    RETURN u;
END $$;
COMMENT ON FUNCTION user_create(bigint, text, boolean, bytea) IS
    'Adds a user with one login token (hash). p_actor NULL is the gateway''s first-start bootstrap.';

-- ---------------------------------------------------------------- grants

CREATE FUNCTION os_check_grant_values(p_max_depth integer, p_max_breadth integer, p_max_total integer,
                                      p_expires_at timestamptz, p_program text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_max_depth IS NULL OR p_max_depth NOT BETWEEN 0 AND 64 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', format('max_depth: must be between 0 and 64, got %s', coalesce(p_max_depth::text, 'nothing')),
                          jsonb_build_object('field', 'max_depth'));
    END IF;
    IF p_max_breadth IS NULL OR p_max_breadth NOT BETWEEN 0 AND 10000 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', format('max_breadth: must be between 0 and 10000, got %s', coalesce(p_max_breadth::text, 'nothing')),
                          jsonb_build_object('field', 'max_breadth'));
    END IF;
    IF p_max_total IS NULL OR p_max_total NOT BETWEEN 0 AND 100000 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', format('max_total: must be between 0 and 100000, got %s', coalesce(p_max_total::text, 'nothing')),
                          jsonb_build_object('field', 'max_total'));
    END IF;
    IF p_expires_at IS NULL OR p_expires_at <= now() THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'expires: must be in the future',
                          jsonb_build_object('field', 'expires'));
    END IF;
    IF p_expires_at > now() + interval '366 days' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'expires: must be within 366 days',
                          jsonb_build_object('field', 'expires'));
    END IF;
    IF p_program IS NULL OR p_program !~ '^/' OR length(p_program) > 4096 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'program: must be an absolute path of at most 4096 bytes',
                          jsonb_build_object('field', 'program'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_grant_values(integer, integer, integer, timestamptz, text) IS
    'Names the field of a grant value out of range (the table''s CHECKs are the backstop).';

CREATE FUNCTION os_grant_target(p_user bigint, p_sandbox uuid, p_ref text) RETURNS sandboxes
LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
    IF p_sandbox IS NOT NULL OR p_user IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only a user can read or change a grant');
    END IF;
    s := resolve_sandbox(p_user, NULL, p_ref);
    IF s.parent_id IS NOT NULL THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            format('sandbox: %s is not a root; grants belong to the root of its tree (%s)',
                   s.name, (SELECT name FROM sandboxes WHERE id = s.root_id)),
            jsonb_build_object('field', 'sandbox', 'root_id', s.root_id));
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION os_grant_target(bigint, uuid, text) IS
    'The root a grant call is about; refuses sandbox principals (only a user changes a grant).';

CREATE FUNCTION os_grant_state(g grants) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN g.end_reason IS NOT NULL THEN g.end_reason
                WHEN g.expires_at <= now() THEN 'expired'
                ELSE 'live' END
$$;
COMMENT ON FUNCTION os_grant_state(grants) IS 'live, expired, revoked or replaced.';

CREATE FUNCTION os_grant_insert(p_user bigint, s sandboxes, p_max_depth integer, p_max_breadth integer,
                                p_max_total integer, p_expires_at timestamptz, p_program text)
RETURNS grants LANGUAGE plpgsql AS $$
DECLARE
    cur grants;
    g grants;
BEGIN
    PERFORM os_check_grant_values(p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program);
    SELECT * INTO cur FROM grants WHERE root_id = s.id AND ended_at IS NULL FOR UPDATE;
    IF FOUND THEN
        IF cur.expires_at > now() THEN
            PERFORM os_refuse('CONFLICT',
                format('sandbox %s already has a live grant (id %s); update or revoke it first', s.name, cur.id),
                jsonb_build_object('grant_id', cur.id));
        END IF;
        -- An expired grant is replaced by the new one.
        UPDATE grants SET ended_at = now(), end_reason = 'replaced', changed_by = p_user, changed_at = now()
         WHERE id = cur.id;
    END IF;
    INSERT INTO grants (root_id, max_depth, max_breadth, max_total, expires_at, program, created_by, changed_by)
    VALUES (s.id, p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program, p_user, p_user)
    RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.create', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id, 'max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                               'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program,
                               'replaced_grant_id', cur.id));
    RETURN g;
END $$;
COMMENT ON FUNCTION os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text) IS
    'Creates the tree''s grant, replacing an expired one; refuses while a live one exists.';

CREATE FUNCTION grant_create(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text)
RETURNS SETOF grant_view LANGUAGE plpgsql AS $$
DECLARE
    g grants;
BEGIN
    g := os_grant_insert(p_user, os_grant_target(p_user, p_sandbox, p_ref), p_max_depth, p_max_breadth,
                           p_max_total, p_expires_at, p_program);
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text) IS
    'A user grants a tree (by its root): limits, expiry and the one program allowed to call.';

CREATE FUNCTION grant_current(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF grant_view
LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes := os_grant_target(p_user, p_sandbox, p_ref);
    g grants;
BEGIN
    SELECT * INTO g FROM grants WHERE root_id = s.id ORDER BY (ended_at IS NULL) DESC, id DESC LIMIT 1;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s has no grant', s.name),
                          jsonb_build_object('sandbox', s.name));
    END IF;
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_current(bigint, uuid, text) IS
    'The tree''s current grant (or its latest ended one).';

CREATE FUNCTION grant_update(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text)
RETURNS SETOF grant_view LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes := os_grant_target(p_user, p_sandbox, p_ref);
    old grants;
    g grants;
BEGIN
    SELECT * INTO old FROM grants WHERE root_id = s.id AND ended_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s has no current grant; create one', s.name),
                          jsonb_build_object('sandbox', s.name));
    END IF;
    PERFORM os_check_grant_values(coalesce(p_max_depth, old.max_depth), coalesce(p_max_breadth, old.max_breadth),
                                  coalesce(p_max_total, old.max_total), coalesce(p_expires_at, old.expires_at),
                                  coalesce(p_program, old.program));
    UPDATE grants SET max_depth = coalesce(p_max_depth, max_depth),
                      max_breadth = coalesce(p_max_breadth, max_breadth),
                      max_total = coalesce(p_max_total, max_total),
                      expires_at = coalesce(p_expires_at, expires_at),
                      program = coalesce(p_program, program),
                      changed_by = p_user, changed_at = now()
     WHERE id = old.id RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.update', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id,
                'before', jsonb_build_object('max_depth', old.max_depth, 'max_breadth', old.max_breadth,
                          'max_total', old.max_total, 'expires_at', old.expires_at, 'program', old.program),
                'after', jsonb_build_object('max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                          'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program)));
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text) IS
    'Changes the current grant (NULL keeps a value); applies from the next call.';

CREATE FUNCTION grant_revoke(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF grant_view
LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes := os_grant_target(p_user, p_sandbox, p_ref);
    g grants;
BEGIN
    UPDATE grants SET ended_at = now(), end_reason = 'revoked', changed_by = p_user, changed_at = now()
     WHERE root_id = s.id AND ended_at IS NULL RETURNING * INTO g;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s has no current grant to revoke', s.name),
                          jsonb_build_object('sandbox', s.name));
    END IF;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.revoke', 'done', p_user, s.owner_id, s.id, s.id, jsonb_build_object('grant_id', g.id));
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_revoke(bigint, uuid, text) IS 'Ends the tree''s grant: nothing more is admitted under it.';

-- ---------------------------------------------------------------- creating sandboxes

CREATE FUNCTION os_replay(p_user bigint, p_sandbox uuid, p_request_id text, p_args_hash bytea)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    r create_requests;
BEGIN
    IF p_request_id IS NULL OR p_request_id = '' THEN
        RETURN NULL;
    END IF;
    IF p_request_id !~ '^[A-Za-z0-9._:-]{1,128}$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'request_id: 1 to 128 of A-Z, a-z, 0-9, ., _, : or -',
                          jsonb_build_object('field', 'request_id'));
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
COMMENT ON FUNCTION os_replay(bigint, uuid, text, bytea) IS
    'The sandbox a repeated request_id created; refuses a repeat with other arguments.';

CREATE FUNCTION os_check_new_name(p_owner bigint, p_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'
       OR p_name ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            'name: 1 to 63 of A-Z, a-z, 0-9, ., _ or -, starting with a letter or digit, and not an id',
            jsonb_build_object('field', 'name'));
    END IF;
    IF EXISTS (SELECT 1 FROM sandboxes WHERE owner_id = p_owner AND name = p_name AND phase <> 'DELETED') THEN
        PERFORM os_refuse('CONFLICT', format('a sandbox named %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_new_name(bigint, text) IS 'Names the problem with a new sandbox name.';

CREATE FUNCTION os_global_version() RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce(max(version), 0) FROM global_max_policies
$$;
COMMENT ON FUNCTION os_global_version() IS 'The current global maximum policy version (0: never set).';

CREATE FUNCTION os_check_global_version(p_proof jsonb) RETURNS void LANGUAGE plpgsql AS $$
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

CREATE FUNCTION create_root(p_user bigint, p_name text, p_command text[], p_template jsonb,
                            p_policy jsonb, p_policy_hash bytea, p_credential_hash bytea,
                            p_request_id text, p_args_hash bytea, p_grant jsonb, p_runner text,
                            p_proof jsonb)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
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
    IF p_grant IS NOT NULL THEN
        PERFORM os_grant_insert(p_user, s, (p_grant->>'max_depth')::integer, (p_grant->>'max_breadth')::integer,
                                (p_grant->>'max_total')::integer, (p_grant->>'expires_at')::timestamptz,
                                p_grant->>'program');
    END IF;
    RETURN QUERY SELECT s.id, false;
END $$;
COMMENT ON FUNCTION create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, jsonb) IS
    'A user creates a root sandbox (PROVISIONING), optionally with its grant, in one transaction.';

CREATE FUNCTION os_check_grant(p_root uuid, g grants, p_sandbox uuid, p_program text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    last_grant grants;
BEGIN
    IF g.id IS NULL THEN
        SELECT * INTO last_grant FROM grants WHERE root_id = p_root ORDER BY id DESC LIMIT 1;
        IF FOUND AND last_grant.end_reason = 'revoked' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the tree''s grant was revoked',
                              jsonb_build_object('reason', 'revoked', 'grant_id', last_grant.id));
        END IF;
        PERFORM os_refuse('NOT_ALLOWED', 'the tree has no grant; a user must grant it first',
                          jsonb_build_object('reason', 'no_grant'));
    END IF;
    IF g.expires_at <= now() THEN
        PERFORM os_refuse('NOT_ALLOWED', format('the tree''s grant expired at %s', g.expires_at),
                          jsonb_build_object('reason', 'expired', 'grant_id', g.id, 'expires_at', g.expires_at));
    END IF;
    IF p_sandbox IS NOT NULL AND p_program IS DISTINCT FROM g.program THEN
        PERFORM os_refuse('NOT_ALLOWED', 'the calling program is not the one the grant allows',
                          jsonb_build_object('reason', 'program', 'program', p_program));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_grant(uuid, grants, uuid, text) IS
    'Refuses unless the tree''s current grant (g; NULL when there is none) is live and, for a call from inside a sandbox, allows the calling program.';

CREATE FUNCTION admit_child(p_user bigint, p_sandbox uuid, p_program text, p_parent text, p_name text,
                            p_kind text, p_command text[], p_policy jsonb, p_policy_hash bytea,
                            p_proof jsonb, p_credential_hash bytea, p_request_id text,
                            p_args_hash bytea, p_runner text)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
DECLARE
    prior uuid;
    parent sandboxes;
    caller sandboxes;
    g grants;
    live_children integer;
    live_total integer;
    child sandboxes;
    child_depth integer;
BEGIN
    prior := os_replay(p_user, p_sandbox, p_request_id, p_args_hash);
    IF prior IS NOT NULL THEN
        RETURN QUERY SELECT prior, true;
        RETURN;
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('agent', 'tool') THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'kind: must be agent or tool', jsonb_build_object('field', 'kind'));
    END IF;

    -- Who may create under whom: a sandbox only under itself, a user under their own trees.
    IF p_sandbox IS NOT NULL THEN
        SELECT * INTO caller FROM sandboxes WHERE id = p_sandbox;
        IF NOT FOUND OR caller.phase NOT IN ('PROVISIONING', 'READY') THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the calling sandbox is not running',
                              jsonb_build_object('reason', 'caller_not_running'));
        END IF;
        IF caller.kind = 'tool' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'a tool sandbox cannot create children',
                              jsonb_build_object('reason', 'tool'));
        END IF;
        IF p_program IS NULL OR p_program = '' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the calling program is unknown; calls from a sandbox come through its supervisor',
                              jsonb_build_object('reason', 'program_unknown'));
        END IF;
        IF p_parent IS NOT NULL AND p_parent <> '' AND p_parent <> caller.name AND p_parent <> caller.id::text THEN
            PERFORM os_refuse('NOT_ALLOWED', 'a sandbox can only create children under itself',
                              jsonb_build_object('reason', 'not_under_itself', 'field', 'parent'));
        END IF;
        parent := caller;
    ELSE
        IF p_parent IS NULL OR p_parent = '' THEN
            PERFORM os_refuse('INVALID_ARGUMENT', 'parent: required when a user creates a child',
                              jsonb_build_object('field', 'parent'));
        END IF;
        parent := resolve_sandbox(p_user, NULL, p_parent);
    END IF;
    IF parent.kind = 'tool' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('%s is a tool sandbox and cannot have children', parent.name),
                          jsonb_build_object('reason', 'tool', 'parent', parent.name));
    END IF;
    IF parent.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', format('parent %s is %s', parent.name, parent.phase),
                          jsonb_build_object('reason', 'parent_not_running', 'parent', parent.name, 'phase', parent.phase));
    END IF;

    -- The grant row is updated first: it serializes admissions within one tree, so a
    -- contender fails fast with 40001 instead of after all its reads.
    UPDATE grants SET children_admitted = children_admitted + 1
     WHERE root_id = parent.root_id AND ended_at IS NULL
    RETURNING * INTO g;
    PERFORM os_check_grant(parent.root_id, g, p_sandbox, p_program);

    -- The limits, counted here, under SERIALIZABLE.
    child_depth := parent.depth + 1;
    IF p_kind = 'agent' AND child_depth > g.max_depth THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('depth limit reached: a child of %s would have depth %s, max_depth is %s', parent.name, child_depth, g.max_depth),
            jsonb_build_object('limit', 'depth', 'max', g.max_depth, 'current', child_depth));
    END IF;
    SELECT count(*) INTO live_children FROM sandboxes WHERE parent_id = parent.id AND os_is_live(phase);
    IF live_children >= g.max_breadth THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('breadth limit reached: %s has %s live children, max_breadth is %s', parent.name, live_children, g.max_breadth),
            jsonb_build_object('limit', 'breadth', 'max', g.max_breadth, 'current', live_children));
    END IF;
    SELECT count(*) INTO live_total FROM sandboxes
     WHERE root_id = parent.root_id AND id <> parent.root_id AND os_is_live(phase);
    IF live_total >= g.max_total THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('total limit reached: the tree has %s live descendants, max_total is %s', live_total, g.max_total),
            jsonb_build_object('limit', 'total', 'max', g.max_total, 'current', live_total));
    END IF;
    IF parent.id IS DISTINCT FROM (p_proof->>'parent_id')::uuid
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
    PERFORM os_check_new_name(parent.owner_id, p_name);
    INSERT INTO sandboxes (name, owner_id, parent_id, root_id, depth, kind, command, created_by_user,
                           created_by_sandbox, created_by_program, credential_hash, runner)
    VALUES (p_name, parent.owner_id, parent.id, parent.root_id, child_depth, p_kind, p_command,
            CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox, nullif(p_program, ''), p_credential_hash, p_runner)
    RETURNING * INTO child;
    INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user, set_by_sandbox)
    VALUES (child.id, 1, p_policy, p_policy_hash, CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox);
    IF p_request_id IS NOT NULL AND p_request_id <> '' THEN
        INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id)
        VALUES (os_caller_key(p_user, p_sandbox), p_request_id, p_args_hash, child.id);
    END IF;
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, request_id, details)
    VALUES ('sandbox.create_child', 'admitted', CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox,
            nullif(p_program, ''), child.owner_id, child.id, parent.id, child.root_id, nullif(p_request_id, ''),
            jsonb_build_object('name', child.name, 'kind', child.kind, 'depth', child.depth,
                               'grant_id', g.id, 'live_children', live_children + 1, 'live_total', live_total + 1,
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', p_proof->>'verdict'));
    RETURN QUERY SELECT child.id, false;
END $$;
COMMENT ON FUNCTION admit_child(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text) IS
    'Admits a child under the tree''s grant: checks caller, grant (expiry, revocation, program), depth, breadth, total, the proved policy version and the request_id, then inserts it PROVISIONING with its receipt.';

CREATE FUNCTION record_refusal(p_user bigint, p_sandbox uuid, p_program text, p_action text,
                               p_target text, p_request_id text, p_code text, p_message text, p_details jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t sandboxes;
    v_owner bigint;
BEGIN
    -- The target is looked up without raising: a refusal is recorded even for a bad name.
    IF p_action = 'sandbox.create' THEN
        NULL;  -- a root's name says nothing about existing trees
    ELSIF p_sandbox IS NOT NULL THEN
        SELECT * INTO t FROM sandboxes WHERE id = p_sandbox;
        v_owner := t.owner_id;
    ELSIF p_target ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
        SELECT * INTO t FROM sandboxes WHERE id = p_target::uuid
           AND (owner_id = p_user OR os_is_admin(p_user));
    ELSE
        SELECT * INTO t FROM sandboxes WHERE owner_id = p_user AND name = p_target AND phase <> 'DELETED';
    END IF;
    INSERT INTO audit_log (action, outcome, code, message, actor_user, actor_sandbox, actor_program,
                           owner_id, parent_id, root_id, request_id, details)
    VALUES (p_action, 'refused', p_code, left(p_message, 2000), CASE WHEN p_sandbox IS NULL THEN p_user END,
            p_sandbox, nullif(p_program, ''), coalesce(t.owner_id, v_owner, p_user),
            t.id, t.root_id, nullif(left(p_request_id, 128), ''), coalesce(p_details, '{}'));
END $$;
COMMENT ON FUNCTION record_refusal(bigint, uuid, text, text, text, text, text, text, jsonb) IS
    'Commits the receipt of a refused create (the refused transaction itself rolled back).';

-- ---------------------------------------------------------------- lifecycle

CREATE FUNCTION os_stop_subtree(s sandboxes, p_delete boolean, p_reason text)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
BEGIN
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
COMMENT ON FUNCTION os_stop_subtree(sandboxes, boolean, text) IS
    'Marks a sandbox and its whole subtree STOPPING (DELETED where already stopped, for a delete); returns the subtree deepest first.';

CREATE FUNCTION begin_stop(p_user bigint, p_sandbox uuid, p_program text, p_ref text, p_delete boolean)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes := resolve_sandbox(p_user, p_sandbox, p_ref, false);
BEGIN
    RETURN QUERY SELECT * FROM os_stop_subtree(s, p_delete,
                                               CASE WHEN p_delete THEN 'delete requested' ELSE 'stop requested' END);
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, details)
    VALUES (CASE WHEN p_delete THEN 'sandbox.delete' ELSE 'sandbox.stop' END, 'done',
            CASE WHEN p_sandbox IS NULL THEN p_user END, p_sandbox, nullif(p_program, ''), s.owner_id,
            s.id, s.parent_id, s.root_id, jsonb_build_object('name', s.name));
END $$;
COMMENT ON FUNCTION begin_stop(bigint, uuid, text, text, boolean) IS
    'A caller stops (or deletes) a sandbox it may act on, with its whole subtree; returns the subtree deepest first for the gateway to stop in that order.';

CREATE FUNCTION system_stop(p_id uuid, p_reason text)
RETURNS TABLE (id uuid, name text, depth integer, phase text, runner text) LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
    SELECT * INTO s FROM sandboxes x WHERE x.id = p_id;
    IF FOUND THEN
        RETURN QUERY SELECT * FROM os_stop_subtree(s, false, p_reason);
    END IF;
END $$;
COMMENT ON FUNCTION system_stop(uuid, text) IS
    'The gateway stops a subtree on its own account (main command exited, supervisor lost).';

CREATE FUNCTION finish_stop(p_id uuid) RETURNS sandboxes LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
    -- Never before its children: a parent is STOPPED only once none of them is live.
    UPDATE sandboxes SET phase = 'STOPPED'
     WHERE id = p_id AND phase = 'STOPPING'
       AND NOT EXISTS (SELECT 1 FROM sandboxes c WHERE c.parent_id = p_id AND os_is_live(c.phase))
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
COMMENT ON FUNCTION finish_stop(uuid) IS
    'Marks a STOPPING sandbox STOPPED (then DELETED if a delete asked) once its workload is gone.';

CREATE FUNCTION mark_ready(p_id uuid) RETURNS sandboxes LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
    UPDATE sandboxes SET phase = 'READY', phase_reason = 'supervisor connected'
     WHERE id = p_id AND phase = 'PROVISIONING' RETURNING * INTO s;
    IF FOUND THEN
        INSERT INTO audit_log (action, outcome, actor_sandbox, owner_id, sandbox_id, parent_id, root_id)
        VALUES ('sandbox.ready', 'done', s.id, s.owner_id, s.id, s.parent_id, s.root_id);
        RETURN s;
    END IF;
    SELECT * INTO s FROM sandboxes WHERE id = p_id;
    IF s.phase IS DISTINCT FROM 'READY' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox is %s', coalesce(s.phase, 'unknown')));
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION mark_ready(uuid) IS 'The supervisor connected: PROVISIONING becomes READY (idempotent).';

CREATE FUNCTION record_exit(p_id uuid, p_exit_code integer) RETURNS sandboxes LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
    UPDATE sandboxes SET exit_code = p_exit_code,
                         phase_reason = format('main command exited with code %s', p_exit_code)
     WHERE id = p_id AND exit_code IS NULL RETURNING * INTO s;
    IF FOUND THEN
        INSERT INTO audit_log (action, outcome, actor_sandbox, owner_id, sandbox_id, parent_id, root_id, details)
        VALUES ('sandbox.exit', 'done', s.id, s.owner_id, s.id, s.parent_id, s.root_id,
                jsonb_build_object('exit_code', p_exit_code));
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION record_exit(uuid, integer) IS 'Records the main command''s exit code (first report wins).';

CREATE FUNCTION mark_error(p_id uuid, p_reason text) RETURNS sandboxes LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
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
COMMENT ON FUNCTION mark_error(uuid, text) IS 'The workload failed or was lost: PROVISIONING or READY becomes ERROR, and its descendants STOPPING, in one transaction.';
