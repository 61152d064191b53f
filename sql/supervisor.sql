-- What a running sandbox's supervisor reports: its proxy's denials (its isolation comes with
-- READY, sql/lifecycle.sql).
--
-- Written only through these functions; a sandbox's denials are read by those who may see it.

CREATE OR REPLACE FUNCTION record_denials(p_id uuid, p_denials jsonb) RETURNS integer
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

CREATE OR REPLACE FUNCTION sandbox_denials(p_user bigint, p_sandbox uuid, p_ref text, p_limit integer)
RETURNS SETOF proxy_denials LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
BEGIN
    s := resolve_sandbox(p_user, p_sandbox, p_ref);
    RETURN QUERY SELECT * FROM proxy_denials WHERE sandbox_id = s.id
                  ORDER BY id DESC LIMIT least(greatest(coalesce(p_limit, 50), 1), 1000);
END $$;
COMMENT ON FUNCTION sandbox_denials(bigint, uuid, text, integer) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. The latest proxy denials of a sandbox the caller may see, newest first.';

CREATE OR REPLACE FUNCTION sandbox_denials(p_caller os_caller, p_ref text, p_limit integer)
RETURNS SETOF proxy_denials LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM sandbox_denials(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                                  p_limit => p_limit)
$$;
COMMENT ON FUNCTION sandbox_denials(os_caller, text, integer) IS
    'The latest proxy denials of a sandbox the caller may see, newest first.';
