-- MCP (issue 8): a tree's grant as its callers may read it, with what is used and what
-- remains, so an agent can plan its delegation (get_grant) without being able to change it.

CREATE FUNCTION grant_status(p_user bigint, p_sandbox uuid, p_program text, p_ref text)
RETURNS TABLE (grant_id bigint, root_id uuid, root_name text, sandbox_id uuid, sandbox_name text, sandbox_kind text,
               state text, max_depth integer, max_breadth integer, max_total integer, expires_at timestamptz,
               program text, depth integer, live_children integer, live_total integer,
               remaining_depth integer, remaining_breadth integer, remaining_total integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
    g grants;
    v_total integer;
BEGIN
    -- A sandbox reads its own tree's grant (p_ref empty: from its own place in the tree, else
    -- from a descendant's); a user names a sandbox of theirs. Who sees what is resolve_sandbox's.
    IF p_sandbox IS NOT NULL AND coalesce(p_ref, '') = '' THEN
        s := resolve_sandbox(p_user, p_sandbox, p_sandbox::text);
    ELSE
        s := resolve_sandbox(p_user, p_sandbox, p_ref);
    END IF;
    SELECT * INTO g FROM grants WHERE grants.root_id = s.root_id ORDER BY (ended_at IS NULL) DESC, id DESC LIMIT 1;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('the tree of sandbox %s has no grant; a user must grant it first', s.name),
                          jsonb_build_object('sandbox', s.name, 'reason', 'no_grant'));
    END IF;
    SELECT t.live_total INTO v_total FROM trees t WHERE t.root_id = s.root_id;
    v_total := coalesce(v_total, 0);
    RETURN QUERY
    SELECT g.id, s.root_id, r.name, s.id, s.name, s.kind, os_grant_state(g), g.max_depth, g.max_breadth, g.max_total,
           g.expires_at, g.program, s.depth, s.live_children, v_total,
           -- tool sandboxes cannot have children; depth counts agent levels below this one
           CASE WHEN s.kind = 'tool' THEN 0 ELSE greatest(g.max_depth - s.depth, 0) END,
           CASE WHEN s.kind = 'tool' THEN 0 ELSE greatest(g.max_breadth - s.live_children, 0) END,
           greatest(g.max_total - v_total, 0)
      FROM sandboxes r WHERE r.id = s.root_id;
END $$;
COMMENT ON FUNCTION grant_status(bigint, uuid, text, text) IS
    'Read-only: the current (or latest) grant of a sandbox''s tree with the limits, what is used (the sandbox''s depth and live children, the tree''s live total) and what remains for creating under that sandbox.';

REVOKE EXECUTE ON FUNCTION grant_status(bigint, uuid, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION grant_status(bigint, uuid, text, text) TO openshell_gateway;
