-- Refusals by reason over a time range: which code, which limit or cause, how often.
--   psql "$DATABASE_URL" -f sql/reports/refusals.sql
--   psql "$DATABASE_URL" -f sql/reports/refusals.sql -v since='2026-11-30' -v until=now
\if :{?since} \else \set since '-infinity' \endif
\if :{?until} \else \set until 'infinity' \endif
SELECT a.code,
       coalesce(a.details->>'limit', a.details->>'reason', a.details->>'field', '') AS reason,
       count(*) AS refusals,
       count(DISTINCT a.root_id) AS trees,
       min(a.at) AS first_at,
       max(a.at) AS last_at
  FROM audit_view a
 WHERE a.outcome = 'refused'
   AND a.at >= :'since'::timestamptz AND a.at < :'until'::timestamptz
 GROUP BY 1, 2
 ORDER BY refusals DESC, a.code;
