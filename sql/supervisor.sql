-- What a sandbox's supervisor asks and reports: what it starts with, READY (with its
-- isolation, marked by sql/lifecycle.sql) and its proxy's denials.
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

-- A supervisor's two calls on its sandbox's start path, connect and READY, authenticate in
-- their own round trip: the credential's hash names the caller by authenticate()
-- (sql/auth.sql), so a stopped sandbox's credential is refused here as everywhere.
CREATE OR REPLACE FUNCTION supervisor_caller(p_hash bytea) RETURNS os_caller
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    c os_caller;
BEGIN
    SELECT a.user_id, a.sandbox_id, NULL INTO c.user_id, c.sandbox_id, c.program
      FROM authenticate(p_hash) a WHERE a.kind = 'sandbox';
    IF NOT FOUND THEN
        PERFORM os_refuse('UNAUTHENTICATED', 'unknown, revoked or expired credential');
    END IF;
    RETURN c;
END $$;
COMMENT ON FUNCTION supervisor_caller(bytea) IS
    'The sandbox whose live credential hashes to p_hash, as a caller; UNAUTHENTICATED otherwise.';

CREATE OR REPLACE FUNCTION supervisor_start(p_hash bytea)
RETURNS TABLE (id uuid, name text, policy_version integer, document jsonb, parent_document jsonb,
               global_document jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT t.id, t.name, t.policy_version, t.document, t.parent_document, g.document
      FROM supervisor_caller(p_hash) c
     CROSS JOIN LATERAL policy_target(c, (c).sandbox_id::text) t
     CROSS JOIN global_max_current() g
$$;
COMMENT ON FUNCTION supervisor_start(bytea) IS
    'What the supervisor holding this credential starts with: its sandbox''s current policy and version, its parent''s policy and the global maximum (the boundaries its filesystem rules are cut to).';

CREATE OR REPLACE FUNCTION supervisor_ready(p_hash bytea, p_isolation jsonb) RETURNS sandboxes
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN mark_ready((supervisor_caller(p_hash)).sandbox_id, p_isolation);
END $$;
COMMENT ON FUNCTION supervisor_ready(bytea, jsonb) IS
    'The sandbox of the supervisor holding this credential is READY, with the isolation it applied (mark_ready).';
