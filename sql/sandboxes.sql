-- Reading sandboxes, as the caller may see them (resolve_sandbox, sql/auth.sql).
--
--

-- The reads that serve every create and GetSandbox are PL/pgSQL: a SQL-language function
-- that cannot be inlined (SECURITY DEFINER) is planned on every call, and these read
-- sandbox_view, a join of seven tables (planning was 4.1 ms of a 4.7 ms call); PL/pgSQL keeps
-- the plan for the connection's life.
CREATE OR REPLACE FUNCTION sandbox_get(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF sandbox_view
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT v.* FROM sandbox_view v WHERE v.id = (SELECT r.id FROM resolve_sandbox(p_user, p_sandbox, p_ref) r);
END $$;
COMMENT ON FUNCTION sandbox_get(bigint, uuid, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A sandbox as the caller may see it (see resolve_sandbox).';

-- PL/pgSQL to keep its plan: a create waits on this read (see authenticate, sql/auth.sql).
CREATE OR REPLACE FUNCTION sandbox_get(p_caller os_caller, p_ref text)
RETURNS SETOF sandbox_view LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT * FROM sandbox_get(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref);
END $$;
COMMENT ON FUNCTION sandbox_get(os_caller, text) IS
    'A sandbox the caller may see.';

CREATE OR REPLACE FUNCTION sandbox_by_id(p_id uuid) RETURNS SETOF sandbox_view
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT v.* FROM sandbox_view v WHERE v.id = p_id;
END $$;
COMMENT ON FUNCTION sandbox_by_id(uuid) IS
    'A sandbox by id, for the gateway''s own use after it authorized the call.';

CREATE OR REPLACE FUNCTION sandbox_list(p_user bigint, p_include_stopped boolean, p_after_at timestamptz, p_after_id uuid,
                             p_limit bigint)
RETURNS SETOF sandbox_view LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT v.* FROM sandbox_view v
     WHERE (v.owner_id = p_user OR os_is_admin(p_user))
       AND (p_include_stopped OR v.phase NOT IN ('STOPPED', 'DELETED'))
       AND (p_after_at IS NULL OR (v.created_at, v.id) < (p_after_at, p_after_id))
     ORDER BY v.created_at DESC, v.id DESC LIMIT p_limit
$$;
COMMENT ON FUNCTION sandbox_list(bigint, boolean, timestamptz, uuid, bigint) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A user''s sandboxes (an admin''s: everyone''s), newest first, one page after (p_after_at, p_after_id).';

CREATE OR REPLACE FUNCTION sandbox_list(p_caller os_caller, p_include_stopped boolean, p_after_at timestamptz,
                             p_after_id uuid, p_limit bigint)
RETURNS SETOF sandbox_view LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM sandbox_list(p_user => os_caller_user(p_caller, 'list sandboxes'),
                               p_include_stopped => p_include_stopped, p_after_at => p_after_at,
                               p_after_id => p_after_id, p_limit => p_limit)
$$;
COMMENT ON FUNCTION sandbox_list(os_caller, boolean, timestamptz, uuid, bigint) IS
    'A user''s sandboxes (an admin''s: everyone''s), newest first, a page after (p_after_at, p_after_id).';

CREATE OR REPLACE FUNCTION sandbox_subtree(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF sandbox_view
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT v.* FROM sandbox_view v
      JOIN sandbox_tree((SELECT id FROM resolve_sandbox(p_user, p_sandbox, p_ref))) t USING (id)
     ORDER BY t.tree_path
$$;
COMMENT ON FUNCTION sandbox_subtree(bigint, uuid, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A sandbox the caller may see and its descendants, in tree order.';

CREATE OR REPLACE FUNCTION sandbox_subtree(p_caller os_caller, p_ref text)
RETURNS SETOF sandbox_view LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM sandbox_subtree(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION sandbox_subtree(os_caller, text) IS
    'A sandbox the caller may see and its descendants, in tree order.';
