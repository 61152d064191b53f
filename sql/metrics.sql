-- What the gateway's /metrics reads from the database (crates/gateway/src/metrics.rs).

CREATE OR REPLACE FUNCTION os_live_sandboxes()
RETURNS TABLE (phase text, driver text, sandboxes bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    -- The driver is the runner's kind (process:ID, container:ID): a bounded label, no id.
    SELECT s.phase::text, split_part(s.runner, ':', 1), count(*)
      FROM sandboxes s WHERE os_is_live(s.phase::text)
     GROUP BY 1, 2
$$;
COMMENT ON FUNCTION os_live_sandboxes() IS
    'Live sandboxes of every gateway by phase and driver kind, for metrics (the gateway reads it at READ COMMITTED, so a scrape never conflicts with an admission).';
