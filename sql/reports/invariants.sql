-- What nothing may ever break, one row per invariant: violations (0 expected) and an example
-- id. Receipts replayed per tree in commit order never pass the limits they were admitted
-- under; counters equal a recount; one admission receipt and first policy per sandbox; no
-- request id admitted twice; nothing PROVISIONING or STOPPING longer than the timeout.
--   psql "$DATABASE_URL" -f sql/reports/invariants.sql [-v timeout='30 seconds']
-- (The workload checks need the running workloads' ids: os_invariants(timeout, ARRAY[...]::uuid[]).)
\if :{?timeout} \else \set timeout '30 seconds' \endif
SELECT invariant, violations, example FROM os_invariants(:'timeout'::interval, NULL);
