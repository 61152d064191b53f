-- Every state a tree's grants have had: created, updated, revoked, replaced, and by whom.
--   psql "$DATABASE_URL" -f sql/reports/grant_history.sql -v root=lead
\if :{?root}
\else
  \echo 'usage: psql ... -f sql/reports/grant_history.sql -v root=NAME_OR_ID'
  \quit
\endif
SELECT h.at, h.grant_id, h.event, h.max_depth, h.max_breadth, h.max_total, h.expires_at, h.program,
       h.by_user
  FROM grant_history_view h
 WHERE h.root_id = (SELECT root_id FROM sandbox_view
                     WHERE id::text = :'root' OR (name = :'root' AND phase <> 'DELETED')
                     ORDER BY created_at DESC LIMIT 1)
 ORDER BY h.id;
