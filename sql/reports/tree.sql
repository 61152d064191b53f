-- The tree under one sandbox: every descendant with depth, kind, phase and creator.
--   psql "$DATABASE_URL" -f sql/reports/tree.sql -v root=lead
-- `root` is a sandbox name (not DELETED) or id; any sandbox, not only a root.
\if :{?root}
\else
  \echo 'usage: psql ... -f sql/reports/tree.sql -v root=NAME_OR_ID'
  \quit
\endif
WITH start AS (
    SELECT id FROM sandbox_view
     WHERE id::text = :'root' OR (name = :'root' AND phase <> 'DELETED')
     ORDER BY created_at DESC LIMIT 1
)
SELECT repeat('  ', v.depth - min(v.depth) OVER ()) || v.name AS sandbox,
       v.depth, v.kind, v.phase, v.exit_code, v.created_by, v.owner_name AS owner,
       v.created_at, v.id
  FROM start
  CROSS JOIN LATERAL sandbox_tree(start.id) t
  JOIN sandbox_view v ON v.id = t.id
 ORDER BY t.tree_path;
