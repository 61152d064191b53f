-- What a running sandbox's supervisor reports: how far its isolation was applied, and the
-- egress proxy's denials. Written only through the functions below.

ALTER TABLE sandboxes ADD COLUMN isolation jsonb;
COMMENT ON COLUMN sandboxes.isolation IS
    'What the supervisor applied at start: {"landlock": enforced|partially enforced|not enforced, "detail", "skipped": granted paths absent on the host}; NULL before the start.';

CREATE TABLE proxy_denials (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    sandbox_id  uuid NOT NULL,
    at          timestamptz NOT NULL,
    program     text NOT NULL,
    host        text NOT NULL,
    port        integer NOT NULL,
    method      text,
    path        text,
    reason      text NOT NULL,
    CONSTRAINT proxy_denials_pkey PRIMARY KEY (id),
    CONSTRAINT proxy_denials_sandbox_fkey FOREIGN KEY (sandbox_id) REFERENCES sandboxes (id),
    CONSTRAINT proxy_denials_port_range CHECK (port BETWEEN 0 AND 65535),
    CONSTRAINT proxy_denials_sizes CHECK (length(program) <= 4096 AND length(host) <= 1024
        AND coalesce(length(method), 0) <= 64 AND coalesce(length(path), 0) <= 4096 AND length(reason) <= 2000)
);
COMMENT ON TABLE proxy_denials IS
    'Requests a sandbox''s egress proxy refused, as its supervisor reported them (at most a bounded number per second); append-only.';
COMMENT ON COLUMN proxy_denials.id IS 'Order of arrival.';
COMMENT ON COLUMN proxy_denials.sandbox_id IS 'The sandbox whose agent made the request.';
COMMENT ON COLUMN proxy_denials.at IS 'When the proxy decided.';
COMMENT ON COLUMN proxy_denials.program IS 'The calling program, resolved from the kernel (empty when it could not be).';
COMMENT ON COLUMN proxy_denials.host IS 'Destination host as requested.';
COMMENT ON COLUMN proxy_denials.port IS 'Destination port.';
COMMENT ON COLUMN proxy_denials.method IS 'HTTP method, for inspected requests.';
COMMENT ON COLUMN proxy_denials.path IS 'HTTP path (no query), for inspected requests.';
COMMENT ON COLUMN proxy_denials.reason IS 'What was missing: no rule for the program, host, port, method or path, or a blocked address.';
CREATE INDEX proxy_denials_sandbox_idx ON proxy_denials (sandbox_id, id);
COMMENT ON INDEX proxy_denials_sandbox_idx IS 'A sandbox''s latest denials.';
CREATE TRIGGER proxy_denials_append_only BEFORE UPDATE OR DELETE ON proxy_denials
    FOR EACH ROW EXECUTE FUNCTION os_forbid_change();

CREATE FUNCTION record_isolation(p_id uuid, p_isolation jsonb) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    UPDATE sandboxes SET isolation = p_isolation WHERE id = p_id AND phase IN ('PROVISIONING', 'READY');
$$;
COMMENT ON FUNCTION record_isolation(uuid, jsonb) IS
    'The supervisor of a starting sandbox records what isolation it applied.';

CREATE FUNCTION record_denials(p_id uuid, p_denials jsonb) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    n integer;
BEGIN
    IF jsonb_typeof(p_denials) IS DISTINCT FROM 'array' OR jsonb_array_length(p_denials) > 500 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'denials: an array of at most 500',
                          jsonb_build_object('field', 'denials'));
    END IF;
    INSERT INTO proxy_denials (sandbox_id, at, program, host, port, method, path, reason)
    SELECT p_id, coalesce((d->>'at')::timestamptz, now()), left(coalesce(d->>'program', ''), 4096),
           left(coalesce(d->>'host', ''), 1024), coalesce((d->>'port')::integer, 0),
           left(d->>'method', 64), left(d->>'path', 4096), left(coalesce(d->>'reason', ''), 2000)
      FROM jsonb_array_elements(p_denials) d;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
COMMENT ON FUNCTION record_denials(uuid, jsonb) IS
    'The supervisor of a sandbox appends its proxy''s denials (a JSON array of at most 500).';

CREATE FUNCTION sandbox_denials(p_user bigint, p_sandbox uuid, p_ref text, p_limit integer)
RETURNS SETOF proxy_denials LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
BEGIN
    s := resolve_sandbox(p_user, p_sandbox, p_ref);
    RETURN QUERY SELECT * FROM proxy_denials WHERE sandbox_id = s.id
                  ORDER BY id DESC LIMIT least(greatest(coalesce(p_limit, 50), 1), 1000);
END $$;
COMMENT ON FUNCTION sandbox_denials(bigint, uuid, text, integer) IS
    'The latest proxy denials of a sandbox the caller may see, newest first.';

-- The view people and the gateway read gains the isolation report (a column at the end).
CREATE OR REPLACE VIEW sandbox_view AS
SELECT s.id, s.name, s.owner_id, o.name AS owner_name, s.parent_id, p.name AS parent_name,
       s.root_id, r.name AS root_name, s.depth, s.kind, s.phase, s.phase_reason, s.command,
       s.template, s.policy_version, encode(sp.hash, 'hex') AS policy_hash, s.exit_code,
       s.delete_requested, s.created_at, s.updated_at,
       CASE WHEN s.created_by_user IS NOT NULL THEN 'user:' || cu.name
            ELSE 'sandbox:' || cs.name || coalesce(' program:' || s.created_by_program, '') END AS created_by,
       s.isolation
  FROM sandboxes s
  JOIN users o ON o.id = s.owner_id
  JOIN sandboxes r ON r.id = s.root_id
  LEFT JOIN sandboxes p ON p.id = s.parent_id
  LEFT JOIN users cu ON cu.id = s.created_by_user
  LEFT JOIN sandboxes cs ON cs.id = s.created_by_sandbox
  LEFT JOIN sandbox_policies sp ON sp.sandbox_id = s.id AND sp.version = s.policy_version;
COMMENT ON COLUMN sandbox_view.isolation IS 'What isolation its supervisor applied at start (see sandboxes.isolation).';

CREATE FUNCTION sandbox_current_policy(p_id uuid, p_known integer, OUT version integer, OUT document jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT s.policy_version, CASE WHEN s.policy_version IS DISTINCT FROM p_known THEN p.document END
      FROM sandboxes s JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = s.policy_version
     WHERE s.id = p_id;
$$;
COMMENT ON FUNCTION sandbox_current_policy(uuid, integer) IS
    'A sandbox''s current policy version, and its document when it differs from the one its supervisor knows.';

CREATE FUNCTION work_target(p_user bigint, p_sandbox uuid, p_ref text, p_kind text) RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
BEGIN
    -- A sandbox works only in its own children, never in itself; a user in any of theirs.
    s := resolve_sandbox(p_user, p_sandbox, p_ref, false);
    IF p_sandbox IS NOT NULL AND s.parent_id IS DISTINCT FROM p_sandbox THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox %s is not a child of the calling sandbox', p_ref),
                          jsonb_build_object('sandbox', p_ref, 'reason', 'not_your_child'));
    END IF;
    IF p_sandbox IS NOT NULL AND p_kind IS NOT NULL AND s.kind <> p_kind THEN
        PERFORM os_refuse('NOT_ALLOWED', format('sandbox %s is a%s %s child; this works only on %s children',
                          p_ref, CASE WHEN s.kind = 'agent' THEN 'n' ELSE '' END, s.kind, p_kind),
                          jsonb_build_object('sandbox', p_ref, 'kind', s.kind, 'reason', 'wrong_kind'));
    END IF;
    IF s.phase <> 'READY' THEN
        PERFORM os_refuse('CONFLICT', format('sandbox %s is %s, not running', p_ref, s.phase),
                          jsonb_build_object('sandbox', p_ref, 'phase', s.phase));
    END IF;
    RETURN s.id;
END $$;
COMMENT ON FUNCTION work_target(bigint, uuid, text, text) IS
    'The running sandbox a caller may exec in or read files of: a sandbox only its own children of the given kind (tool for exec, agent for files), a user any of theirs.';

-- Only the gateway calls these (it may only execute functions; see V6).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'record_isolation(uuid, jsonb)', 'record_denials(uuid, jsonb)', 'sandbox_denials(bigint, uuid, text, integer)',
        'sandbox_current_policy(uuid, integer)', 'work_target(bigint, uuid, text, text)'
    ]::regprocedure[] LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO openshell_gateway', f);
    END LOOP;
END $$;
