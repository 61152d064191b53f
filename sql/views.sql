-- The views people (psql, as the operator role) and the gateway read: names instead of ids,
--
-- and never a secret (no credential or token hash). The gateway's functions that return rows
-- return these views' rows, so they come first. Who may read them: sql/roles.sql.

-- Who created a sandbox, as every read shows it (sandbox_view, and create_child's answer).
CREATE OR REPLACE FUNCTION os_created_by(p_user_name text, p_sandbox_name text, p_program text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_user_name IS NOT NULL THEN 'user:' || p_user_name
                ELSE 'sandbox:' || p_sandbox_name || coalesce(' program:' || p_program, '') END
$$;
COMMENT ON FUNCTION os_created_by(text, text, text) IS
    'user:NAME for a sandbox a user created, else sandbox:NAME with the calling program when known.';

CREATE OR REPLACE VIEW sandbox_view AS
SELECT s.id, s.name, s.owner_id, o.name AS owner_name, s.parent_id, p.name AS parent_name,
       s.root_id, r.name AS root_name, s.depth, s.kind, s.phase, s.phase_reason, s.command,
       s.template, s.policy_version, encode(sp.hash, 'hex') AS policy_hash, s.exit_code,
       s.delete_requested, s.created_at, s.updated_at,
       os_created_by(cu.name, cs.name, s.created_by_program) AS created_by,
       s.isolation
  FROM sandboxes s
  JOIN users o ON o.id = s.owner_id
  JOIN sandboxes r ON r.id = s.root_id
  LEFT JOIN sandboxes p ON p.id = s.parent_id
  LEFT JOIN users cu ON cu.id = s.created_by_user
  LEFT JOIN sandboxes cs ON cs.id = s.created_by_sandbox
  LEFT JOIN sandbox_policies sp ON sp.sandbox_id = s.id AND sp.version = s.policy_version;
COMMENT ON VIEW sandbox_view IS
    'Sandboxes with owner, parent, root and creator names and the current policy hash; never the credential.';
COMMENT ON COLUMN sandbox_view.owner_name IS 'Name of the user who owns the tree.';
COMMENT ON COLUMN sandbox_view.parent_name IS 'Name of the parent (NULL for a root).';
COMMENT ON COLUMN sandbox_view.root_name IS 'Name of the tree''s root.';
COMMENT ON COLUMN sandbox_view.policy_hash IS 'Hex SHA-256 of the current policy''s canonical form.';
COMMENT ON COLUMN sandbox_view.created_by IS 'user:NAME, or sandbox:NAME with the calling program when known.';
COMMENT ON COLUMN sandbox_view.isolation IS 'What isolation its supervisor applied at start (see sandboxes.isolation).';

CREATE OR REPLACE VIEW grant_view AS
SELECT g.id, g.root_id, r.name AS root_name, r.owner_id, g.max_depth, g.max_breadth, g.max_total,
       g.expires_at, g.program,
       CASE WHEN g.end_reason IS NOT NULL THEN g.end_reason
            WHEN g.expires_at <= now() THEN 'expired' ELSE 'live' END AS state, cu.name AS created_by, g.created_at,
       g.ended_at,
       (SELECT count(*) FROM audit_log a
         WHERE a.root_id = g.root_id AND a.action = 'sandbox.create_child' AND a.outcome = 'admitted'
           AND a.details->'grant_id' = to_jsonb(g.id)) AS children_admitted,
       g.tool_idle_seconds, g.program_resolved, g.rate_calls, g.rate_period_s
  FROM grants g
  JOIN sandboxes r ON r.id = g.root_id
  JOIN users cu ON cu.id = g.created_by;
COMMENT ON VIEW grant_view IS
    'Grants with their root''s name and their state (live, expired, revoked, replaced).';
COMMENT ON COLUMN grant_view.root_name IS 'Name of the root sandbox the grant governs.';
COMMENT ON COLUMN grant_view.owner_id IS 'The user who owns the tree.';
COMMENT ON COLUMN grant_view.state IS 'live, expired, revoked or replaced.';
COMMENT ON COLUMN grant_view.created_by IS 'Name of the user who created it.';
COMMENT ON COLUMN grant_view.children_admitted IS 'Children admitted under this grant: the admission receipts naming it (details grant_id).';
COMMENT ON COLUMN grant_view.tool_idle_seconds IS 'Idle period after which a tool child of the tree is stopped.';
COMMENT ON COLUMN grant_view.program_resolved IS 'The program with its symlinks resolved when the grant was written.';
COMMENT ON COLUMN grant_view.rate_calls IS 'MCP tool calls per rate_period_s each sandbox of the tree may make.';
COMMENT ON COLUMN grant_view.rate_period_s IS '1 (per second) or 60 (per minute).';

CREATE OR REPLACE VIEW audit_view AS
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
COMMENT ON VIEW audit_view IS
    'The audit log with names: who acted (user, sandbox and program, or the gateway), for whom, on what.';
COMMENT ON COLUMN audit_view.actor IS 'user:NAME, sandbox:NAME program:PATH, or gateway.';
COMMENT ON COLUMN audit_view.owner_name IS 'The user who owns the tree concerned.';
COMMENT ON COLUMN audit_view.sandbox_name IS 'Name of the sandbox concerned.';

CREATE OR REPLACE VIEW tree_view AS
SELECT r.id AS root_id, r.name AS root_name, o.name AS owner_name, r.phase AS root_phase, t.live_total,
       g.id AS grant_id, g.max_depth, g.max_breadth, g.max_total, g.expires_at,
       CASE WHEN g.id IS NULL THEN 'none' WHEN g.expires_at <= now() THEN 'expired' ELSE 'live' END AS grant_state
  FROM trees t
  JOIN sandboxes r ON r.id = t.root_id
  JOIN users o ON o.id = r.owner_id
  LEFT JOIN grants g ON g.root_id = t.root_id AND g.ended_at IS NULL;
COMMENT ON VIEW tree_view IS
    'Every tree: its root, owner, live descendants and current grant.';
COMMENT ON COLUMN tree_view.root_id IS 'The root sandbox.';
COMMENT ON COLUMN tree_view.root_name IS 'Name of the root.';
COMMENT ON COLUMN tree_view.owner_name IS 'The user who owns the tree.';
COMMENT ON COLUMN tree_view.root_phase IS 'Phase of the root.';
COMMENT ON COLUMN tree_view.live_total IS 'Live descendants (the root not counted), the counter max_total limits.';
COMMENT ON COLUMN tree_view.grant_id IS 'The current grant (not ended), if any.';
COMMENT ON COLUMN tree_view.grant_state IS 'none, live or expired.';

CREATE OR REPLACE VIEW grant_history_view AS
SELECT h.id, h.at, h.grant_id, h.root_id, r.name AS root_name, h.event, h.max_depth, h.max_breadth, h.max_total,
       h.expires_at, h.program, u.name AS by_user, h.db_user, h.tool_idle_seconds,
       h.program_resolved, h.rate_calls, h.rate_period_s
  FROM grant_history h
  JOIN users u ON u.id = h.by_user
  JOIN sandboxes r ON r.id = h.root_id;
COMMENT ON VIEW grant_history_view IS
    'Every state a grant has had, with the root''s and the user''s names.';
COMMENT ON COLUMN grant_history_view.root_name IS 'Name of the tree''s root.';
COMMENT ON COLUMN grant_history_view.by_user IS 'Name of the user behind the change.';
COMMENT ON COLUMN grant_history_view.tool_idle_seconds IS 'The idle period after the change.';
COMMENT ON COLUMN grant_history_view.program_resolved IS 'The resolved program after the change.';
COMMENT ON COLUMN grant_history_view.rate_calls IS 'The tool-call rate after the change: calls per rate_period_s.';
COMMENT ON COLUMN grant_history_view.rate_period_s IS 'The period of rate_calls after the change: 1 or 60 seconds.';

CREATE OR REPLACE VIEW proposal_view AS
SELECT p.id, p.sandbox_id, s.name AS sandbox_name, p.owner_id, o.name AS owner_name, p.root_id,
       r.name AS root_name, p.state, p.rules, p.reason, p.created_program, p.created_at, p.expires_at,
       p.decided_at,
       CASE WHEN p.decided_by_user IS NOT NULL THEN 'user:' || u.name
            WHEN p.state <> 'pending' THEN 'system' END AS decided_by,
       p.decision_reason, p.policy_version, p.superseded_by
  FROM policy_proposals p
  JOIN sandboxes s ON s.id = p.sandbox_id
  JOIN sandboxes r ON r.id = p.root_id
  JOIN users o ON o.id = p.owner_id
  LEFT JOIN users u ON u.id = p.decided_by_user;
COMMENT ON VIEW proposal_view IS
    'Policy proposals with names, for people (psql) and the gateway.';
COMMENT ON COLUMN proposal_view.id IS 'The proposal''s number.';
COMMENT ON COLUMN proposal_view.sandbox_id IS 'The sandbox that proposed.';
COMMENT ON COLUMN proposal_view.sandbox_name IS 'Its name.';
COMMENT ON COLUMN proposal_view.owner_id IS 'The user who decides.';
COMMENT ON COLUMN proposal_view.owner_name IS 'Their name.';
COMMENT ON COLUMN proposal_view.root_id IS 'The root of the tree.';
COMMENT ON COLUMN proposal_view.root_name IS 'Its name.';
COMMENT ON COLUMN proposal_view.state IS 'pending, approved, rejected, superseded or expired.';
COMMENT ON COLUMN proposal_view.rules IS 'The proposed network_policies entries.';
COMMENT ON COLUMN proposal_view.reason IS 'Why the sandbox wants them.';
COMMENT ON COLUMN proposal_view.created_program IS 'The program that sent it.';
COMMENT ON COLUMN proposal_view.created_at IS 'When it was proposed.';
COMMENT ON COLUMN proposal_view.expires_at IS 'When it expires if still pending.';
COMMENT ON COLUMN proposal_view.decided_at IS 'When it left pending.';
COMMENT ON COLUMN proposal_view.decided_by IS '"user:NAME" for an approval or rejection, "system" for supersession or expiry.';
COMMENT ON COLUMN proposal_view.decision_reason IS 'The reason of a rejection.';
COMMENT ON COLUMN proposal_view.policy_version IS 'The policy version an approval wrote.';
COMMENT ON COLUMN proposal_view.superseded_by IS 'The proposal that replaced it.';
