-- Policy proposals (rules sandboxes asked for themselves through policy.local) and their
-- decisions, newest first; optionally of one tree and in one state.
--   psql "$DATABASE_URL" -f sql/reports/proposals.sql
--   psql "$DATABASE_URL" -f sql/reports/proposals.sql -v root=lead -v state=pending
\if :{?root} \else \set root '' \endif
\if :{?state} \else \set state '' \endif
SELECT p.id, p.root_name, p.sandbox_name, p.state,
       (SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(p.rules) k) AS rules,
       p.reason, p.created_program, p.created_at, p.decided_by, p.decided_at, p.decision_reason,
       p.policy_version, p.superseded_by
  FROM proposal_view p
 WHERE (:'root' = '' OR p.root_name = :'root')
   AND (:'state' = '' OR p.state = :'state')
 ORDER BY p.id DESC;
