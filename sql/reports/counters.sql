-- Counter drift: every live-children or live-total counter that differs from a recount of
-- the rows. None is expected; a row here means something bypassed the counting triggers.
--   psql "$DATABASE_URL" -f sql/reports/counters.sql
SELECT counter, id, stored, counted FROM os_recount();
-- And every tree with its live descendants and grant.
SELECT root_name, owner_name, root_phase, live_total, max_total, max_breadth, max_depth, grant_state, expires_at
  FROM tree_view
 ORDER BY root_name;
