-- The audit of one tree or one user over a time range, oldest first.
--   psql "$DATABASE_URL" -f sql/reports/audit.sql -v root=lead
--   psql "$DATABASE_URL" -f sql/reports/audit.sql -v user=alice -v since='2026-11-30 00:00' -v until=now
-- Any of root, user, since, until may be left out.
\if :{?root} \else \set root '' \endif
\if :{?user} \else \set user '' \endif
\if :{?since} \else \set since '-infinity' \endif
\if :{?until} \else \set until 'infinity' \endif
SELECT a.at, a.action, a.outcome, a.code, a.actor, a.owner_name AS owner, a.sandbox_name AS sandbox,
       a.request_id, a.message, a.details
  FROM audit_view a
 WHERE (:'root' = '' OR a.root_id = (SELECT root_id FROM sandbox_view
                                      WHERE id::text = :'root' OR (name = :'root' AND phase <> 'DELETED')
                                      ORDER BY created_at DESC LIMIT 1))
   AND (:'user' = '' OR a.owner_name = :'user')
   AND a.at >= :'since'::timestamptz AND a.at < :'until'::timestamptz
 ORDER BY a.id;
