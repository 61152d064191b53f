-- Who is calling, and what they may see.
--
-- A token's hash names a user (a live login token) or a sandbox (the live credential its
-- supervisor holds); a door call is authenticated by sql/door.sql. A principal reaches the
-- rules as (p_user, p_sandbox, p_program): exactly one of p_user and p_sandbox is set, and
-- p_program is the calling program when the call came through the in-sandbox door.

-- PL/pgSQL here and in the other calls of a create's hot path: PostgreSQL plans a SQL
-- function's body on every call unless it can inline it, which it never does for SECURITY
-- DEFINER or SET; PL/pgSQL keeps its plans for the session (docs/sql.md).
CREATE OR REPLACE FUNCTION authenticate(p_hash bytea)
RETURNS TABLE (kind text, user_id bigint, user_name text, is_admin boolean,
               sandbox_id uuid, sandbox_name text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT 'user'::text, u.id, u.name, u.is_admin, NULL::uuid, NULL::text
      FROM user_tokens t JOIN users u ON u.id = t.user_id
     WHERE t.token_hash = p_hash AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
    UNION ALL
    SELECT 'sandbox'::text, s.owner_id, NULL::text, false, s.id, s.name
      FROM sandboxes s
     WHERE s.credential_hash = p_hash AND s.phase IN ('PROVISIONING', 'READY');
END $$;
COMMENT ON FUNCTION authenticate(bytea) IS
    'The principal behind a token hash: a user, or a live sandbox (user_id is then its owner).';

CREATE OR REPLACE FUNCTION os_is_admin(p_user bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT coalesce((SELECT is_admin FROM users WHERE id = p_user), false) $$;
COMMENT ON FUNCTION os_is_admin(bigint) IS
    'Whether the user is an admin.';

-- The gateway calls typed entry points: who calls is one os_caller value (the Principal the
-- gateway authenticated). Each entry point decides from it what the caller may do (users
-- only, admins only) and passes on to the function that holds the rule (same name, the
-- caller's parts as arguments), which is the owner's alone.

-- The caller as a user: refused (NOT_ALLOWED, saying what was asked) when it is a sandbox.
CREATE OR REPLACE FUNCTION os_caller_user(p_caller os_caller, p_what text) RETURNS bigint
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
CREATE OR REPLACE FUNCTION os_caller_admin(p_caller os_caller, p_what text) RETURNS bigint
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
CREATE OR REPLACE FUNCTION os_caller_acting_user(p_caller os_caller) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN (p_caller).sandbox_id IS NULL THEN (p_caller).user_id END $$;
COMMENT ON FUNCTION os_caller_acting_user(os_caller) IS
    'The caller''s user id when the caller is a user; NULL for a sandbox.';

CREATE OR REPLACE FUNCTION os_is_descendant(p_descendant uuid, p_ancestor uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE up(id, parent_id) AS (
        SELECT id, parent_id FROM sandboxes WHERE id = p_descendant
        UNION ALL
        SELECT s.id, s.parent_id FROM sandboxes s JOIN up ON s.id = up.parent_id
    )
    SELECT EXISTS (SELECT 1 FROM up WHERE parent_id = p_ancestor)
$$;
COMMENT ON FUNCTION os_is_descendant(uuid, uuid) IS
    'Whether the first sandbox is strictly below the second.';

-- What a caller may see: a user their own sandboxes (an admin every one), a sandbox itself and
-- its descendants. Every function that takes a sandbox by name or id goes through here.
CREATE OR REPLACE FUNCTION resolve_sandbox(p_user bigint, p_sandbox uuid, p_ref text, p_allow_self boolean DEFAULT true)
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
