-- What the gateway and operators read: sandboxes with names instead of ids, and no secret.

CREATE VIEW sandbox_view AS
SELECT s.id, s.name, s.owner_id, o.name AS owner_name, s.parent_id, p.name AS parent_name,
       s.root_id, r.name AS root_name, s.depth, s.kind, s.phase, s.phase_reason, s.command,
       s.template, s.policy_version, encode(sp.hash, 'hex') AS policy_hash, s.exit_code,
       s.delete_requested, s.created_at, s.updated_at,
       CASE WHEN s.created_by_user IS NOT NULL THEN 'user:' || cu.name
            ELSE 'sandbox:' || cs.name || coalesce(' program:' || s.created_by_program, '') END AS created_by
  FROM sandboxes s
  JOIN users o ON o.id = s.owner_id
  JOIN sandboxes r ON r.id = s.root_id
  LEFT JOIN sandboxes p ON p.id = s.parent_id
  LEFT JOIN users cu ON cu.id = s.created_by_user
  LEFT JOIN sandboxes cs ON cs.id = s.created_by_sandbox
  LEFT JOIN sandbox_policies sp ON sp.sandbox_id = s.id AND sp.version = s.policy_version;
COMMENT ON VIEW sandbox_view IS 'Sandboxes with owner, parent, root and creator names and the current policy hash; never the credential.';
COMMENT ON COLUMN sandbox_view.owner_name IS 'Name of the user who owns the tree.';
COMMENT ON COLUMN sandbox_view.parent_name IS 'Name of the parent (NULL for a root).';
COMMENT ON COLUMN sandbox_view.root_name IS 'Name of the tree''s root.';
COMMENT ON COLUMN sandbox_view.policy_hash IS 'Hex SHA-256 of the current policy''s canonical form.';
COMMENT ON COLUMN sandbox_view.created_by IS 'user:NAME, or sandbox:NAME with the calling program when known.';

CREATE VIEW grant_view AS
SELECT g.id, g.root_id, r.name AS root_name, r.owner_id, g.max_depth, g.max_breadth, g.max_total,
       g.expires_at, g.program,
       CASE WHEN g.end_reason IS NOT NULL THEN g.end_reason
            WHEN g.expires_at <= now() THEN 'expired' ELSE 'live' END AS state, cu.name AS created_by, g.created_at,
       g.ended_at, g.children_admitted
  FROM grants g
  JOIN sandboxes r ON r.id = g.root_id
  JOIN users cu ON cu.id = g.created_by;
COMMENT ON VIEW grant_view IS 'Grants with their root''s name and their state (live, expired, revoked, replaced).';
COMMENT ON COLUMN grant_view.root_name IS 'Name of the root sandbox the grant governs.';
COMMENT ON COLUMN grant_view.owner_id IS 'The user who owns the tree.';
COMMENT ON COLUMN grant_view.state IS 'live, expired, revoked or replaced.';
COMMENT ON COLUMN grant_view.created_by IS 'Name of the user who created it.';

CREATE VIEW audit_view AS
SELECT a.id, a.at, a.action, a.outcome, a.code, a.message,
       CASE WHEN a.actor_user IS NOT NULL THEN 'user:' || au.name
            WHEN a.actor_sandbox IS NOT NULL THEN 'sandbox:' || asb.name || coalesce(' program:' || a.actor_program, '')
            ELSE 'gateway' END AS actor,
       a.owner_id, o.name AS owner_name, a.sandbox_id, s.name AS sandbox_name, a.parent_id, a.root_id,
       a.request_id, a.details
  FROM audit_log a
  LEFT JOIN users au ON au.id = a.actor_user
  LEFT JOIN sandboxes asb ON asb.id = a.actor_sandbox
  LEFT JOIN users o ON o.id = a.owner_id
  LEFT JOIN sandboxes s ON s.id = a.sandbox_id;
COMMENT ON VIEW audit_view IS 'The audit log with names: who acted (user, sandbox and program, or the gateway), for whom, on what.';
COMMENT ON COLUMN audit_view.actor IS 'user:NAME, sandbox:NAME program:PATH, or gateway.';
COMMENT ON COLUMN audit_view.owner_name IS 'The user who owns the tree concerned.';
COMMENT ON COLUMN audit_view.sandbox_name IS 'Name of the sandbox concerned.';

CREATE FUNCTION sandbox_tree(p_id uuid)
RETURNS TABLE (id uuid, tree_path text) LANGUAGE sql STABLE AS $$
    WITH RECURSIVE t(id, tree_path) AS (
        SELECT s.id, s.name FROM sandboxes s WHERE s.id = p_id
        UNION ALL
        SELECT c.id, t.tree_path || '/' || c.name FROM sandboxes c JOIN t ON c.parent_id = t.id
    )
    SELECT t.id, t.tree_path FROM t
$$;
COMMENT ON FUNCTION sandbox_tree(uuid) IS 'A sandbox and all its descendants with their path from it, following parent_id.';
