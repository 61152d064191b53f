-- What an operator (or a storm test) checks after the fact, in SQL.
--
-- os_recount recounts the counters from the rows; os_invariants returns one row per invariant
-- with its number of violations (none expected) and one example. Operators run them with psql
-- (sql/reports/counters.sql, sql/reports/invariants.sql).

CREATE OR REPLACE FUNCTION os_recount() RETURNS TABLE(counter text, id uuid, stored integer, counted integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT 'live_children', s.id, coalesce(p.live_children, 0), coalesce(c.n, 0)::integer
      FROM sandboxes s
      LEFT JOIN parents p ON p.parent_id = s.id
      LEFT JOIN (SELECT parent_id, count(*) AS n FROM sandboxes WHERE os_is_live(phase) GROUP BY parent_id) c
        ON c.parent_id = s.id
     WHERE coalesce(p.live_children, 0) <> coalesce(c.n, 0)
    UNION ALL
    SELECT 'live_total', r.id, t.live_total, coalesce(c.n, 0)::integer
      FROM sandboxes r
      LEFT JOIN trees t ON t.root_id = r.id
      LEFT JOIN (SELECT root_id, count(*) AS n FROM sandboxes WHERE os_is_live(phase) AND parent_id IS NOT NULL
                  GROUP BY root_id) c ON c.root_id = r.id
     WHERE r.parent_id IS NULL AND t.live_total IS DISTINCT FROM coalesce(c.n, 0)
$$;
COMMENT ON FUNCTION os_recount() IS
    'Counts live children and live descendants from the rows and returns every counter that differs (drift): none is expected. `SELECT * FROM os_recount()`.';

CREATE OR REPLACE FUNCTION os_invariants(p_provision_timeout interval DEFAULT interval '30 seconds',
                              p_workloads uuid[] DEFAULT NULL)
RETURNS TABLE (invariant text, violations bigint, example text) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    -- Events that change a tree's live count, in commit order: every one of them holds the
    -- tree's row (admit_child, finish_stop and mark_error lock it first), so within a tree
    -- audit ids follow commit order.
    WITH ev AS (
        SELECT a.id, s.root_id, s.parent_id, s.id AS sandbox_id, s.kind, s.depth, a.details,
               a.action = 'sandbox.create_child' AS admit,
               CASE WHEN a.action = 'sandbox.create_child' THEN 1 ELSE -1 END AS delta
          FROM audit_log a JOIN sandboxes s ON s.id = a.sandbox_id
         WHERE s.parent_id IS NOT NULL
           AND ((a.action = 'sandbox.create_child' AND a.outcome = 'admitted')
                OR a.action IN ('sandbox.stopped', 'sandbox.error'))
    ),
    run AS (
        SELECT ev.*, sum(delta) OVER (PARTITION BY root_id ORDER BY id) AS live_total,
               sum(delta) OVER (PARTITION BY parent_id ORDER BY id) AS live_children
          FROM ev
    ),
    receipts AS (
        SELECT a.sandbox_id,
               count(*) FILTER (WHERE a.action IN ('sandbox.create', 'sandbox.create_child')
                                  AND a.outcome = 'admitted') AS admitted,
               count(*) FILTER (WHERE a.action IN ('sandbox.stopped', 'sandbox.error')) AS left_live
          FROM audit_log a WHERE a.sandbox_id IS NOT NULL GROUP BY a.sandbox_id
    ),
    admissions AS (
        SELECT a.sandbox_id, a.request_id,
               CASE WHEN a.actor_sandbox IS NOT NULL THEN 'sandbox:' || a.actor_sandbox
                    ELSE 'user:' || a.actor_user END AS caller
          FROM audit_log a
         WHERE a.action IN ('sandbox.create', 'sandbox.create_child') AND a.outcome = 'admitted'
    )
    SELECT 'total_over_limit', count(*), min(sandbox_id::text) FROM run
     WHERE live_total < 0
        OR (admit AND ((details->>'live_total')::bigint IS DISTINCT FROM live_total
                       OR live_total > (details->>'max_total')::bigint))
    UNION ALL
    SELECT 'breadth_over_limit', count(*), min(sandbox_id::text) FROM run
     WHERE live_children < 0
        OR (admit AND ((details->>'live_children')::bigint IS DISTINCT FROM live_children
                       OR live_children > (details->>'max_breadth')::bigint))
    UNION ALL
    SELECT 'depth_over_limit', count(*), min(sandbox_id::text) FROM run
     WHERE admit AND kind = 'agent' AND depth > (details->>'max_depth')::integer
    UNION ALL
    SELECT 'counter_drift', count(*), min(r.counter || ' ' || r.id) FROM os_recount() r
    UNION ALL
    -- Exactly one admission receipt and a first policy; one receipt of leaving live once not live.
    SELECT 'receipts_and_policy', count(*), min(s.id::text)
      FROM sandboxes s
      LEFT JOIN receipts r ON r.sandbox_id = s.id
      LEFT JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = 1
     WHERE coalesce(r.admitted, 0) <> 1 OR p.sandbox_id IS NULL
        OR (s.parent_id IS NOT NULL AND coalesce(r.left_live, 0) <> CASE WHEN os_is_live(s.phase) THEN 0 ELSE 1 END)
    UNION ALL
    SELECT 'rows_naming_no_sandbox', count(*), min(x.id::text) FROM (
        SELECT a.sandbox_id AS id FROM audit_log a
         WHERE a.sandbox_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = a.sandbox_id)
        UNION ALL
        SELECT r.sandbox_id FROM create_requests r WHERE NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = r.sandbox_id)
        UNION ALL
        SELECT p.sandbox_id FROM sandbox_policies p WHERE NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = p.sandbox_id)
    ) x
    UNION ALL
    -- A request id admitted once: one receipt per (caller, request id), and every claim and
    -- every receipt with a request id name the same sandbox.
    SELECT 'request_id_twice', count(*), min(x.request_id) FROM (
        SELECT a.caller, a.request_id FROM admissions a WHERE a.request_id IS NOT NULL
         GROUP BY 1, 2 HAVING count(*) > 1
        UNION ALL
        SELECT c.caller, c.request_id FROM create_requests c
          LEFT JOIN admissions a ON a.caller = c.caller AND a.request_id = c.request_id AND a.sandbox_id = c.sandbox_id
         WHERE a.sandbox_id IS NULL
        UNION ALL
        SELECT a.caller, a.request_id FROM admissions a
          LEFT JOIN create_requests c ON c.caller = a.caller AND c.request_id = a.request_id AND c.sandbox_id = a.sandbox_id
         WHERE a.request_id IS NOT NULL AND c.sandbox_id IS NULL
    ) x
    UNION ALL
    SELECT 'provisioning_overdue', count(*), min(s.id::text) FROM sandboxes s
     WHERE s.phase = 'PROVISIONING' AND s.updated_at < now() - p_provision_timeout
    UNION ALL
    SELECT 'stopping_overdue', count(*), min(s.id::text) FROM sandboxes s
     WHERE s.phase = 'STOPPING' AND s.updated_at < now() - p_provision_timeout
    UNION ALL
    SELECT 'workload_without_live_row', count(*), min(w.id::text)
      FROM unnest(p_workloads) w(id) LEFT JOIN sandboxes s ON s.id = w.id
     WHERE p_workloads IS NOT NULL AND (s.id IS NULL OR NOT os_is_live(s.phase))
    UNION ALL
    SELECT 'ready_without_workload', count(*), min(s.id::text) FROM sandboxes s
     WHERE p_workloads IS NOT NULL AND s.phase = 'READY' AND NOT (s.id = ANY (p_workloads))
$$;
COMMENT ON FUNCTION os_invariants(interval, uuid[]) IS
    'What nothing may ever break, one row per invariant with its violations (none expected) and an example id: receipts replayed per tree in commit order never pass the limits they were admitted under and match the counts they recorded; counters equal a recount; every sandbox has one admission receipt and a first policy, every child that left live one receipt of it; no row names a missing sandbox; no request id admitted twice; nothing PROVISIONING or STOPPING longer than P_PROVISION_TIMEOUT; and, given P_WORKLOADS (the ids of every running workload, from every gateway), no workload without a live row and no READY row without a workload. `SELECT * FROM os_invariants()`.';
