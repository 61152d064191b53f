-- The admission benches' fixtures (scripts/bench-admission-*.sh): 32 roots cpu-0 .. cpu-31 of
-- the first admin, with grants large enough that nothing is refused, their ids by number in
-- cpu_roots, and cpu_floor, the table of the bare-insert floor.
DO $$
DECLARE i int;
BEGIN
  FOR i IN 0..31 LOOP
    PERFORM create_root(p_caller => ROW((SELECT min(id) FROM users WHERE is_admin), NULL, NULL)::os_caller,
      p_name => 'cpu-' || i, p_command => ARRAY['true'], p_template => '{}'::jsonb,
      p_policy => '{"version": 1}'::jsonb, p_policy_hash => sha256('p'::bytea),
      p_credential_hash => sha256(('cpu-cred-' || i || random())::bytea), p_request_id => 'cpu-root-' || i,
      p_args_hash => sha256(('cpu-' || i)::bytea),
      -- os_grant_values: max_depth, max_breadth, max_total, expires_at, program, program_resolved,
      -- rate_calls, rate_period_s, tool_idle_seconds
      p_grant => ROW(8, 10000, 100000, now() + interval '4 hours', '/usr/bin/python3', '/usr/bin/python3',
                     10, 1, NULL)::os_grant_values,
      p_runner => 'bench-null', p_proof => ROW(0, 'no_global_max')::os_root_proof);
  END LOOP;
END $$;
CREATE TABLE cpu_roots AS SELECT substring(name FROM 5)::int AS n, id FROM sandboxes WHERE name LIKE 'cpu-%';
ALTER TABLE cpu_roots ADD PRIMARY KEY (n);
CREATE TABLE cpu_floor (id uuid PRIMARY KEY, payload bytea NOT NULL, at timestamptz NOT NULL DEFAULT now());
