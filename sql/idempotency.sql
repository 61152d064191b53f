-- Request ids: a repeated create returns the first admitted result.
--
-- A request id is scoped to its caller (os_caller_key). A repeat with the same arguments
-- (their hash) returns the sandbox the first request created and creates nothing; with other
-- arguments it is refused (CONFLICT). Only admitted creates are remembered (create_requests,
-- append-only), so a retry after a refusal can succeed. admit_child claims the id with the
-- unique index (ON CONFLICT, which takes no SSI read lock) before its child exists.

CREATE OR REPLACE FUNCTION os_caller_key(p_user bigint, p_sandbox uuid) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_sandbox IS NOT NULL THEN 'sandbox:' || p_sandbox ELSE 'user:' || p_user END
$$;
COMMENT ON FUNCTION os_caller_key(bigint, uuid) IS
    'The scope of a caller''s request ids.';

CREATE OR REPLACE FUNCTION os_check_request_id(p_request_id text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF length(p_request_id) > 128 OR p_request_id !~ '^[A-Za-z0-9._:-]+$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'request_id: 1 to 128 of A-Z, a-z, 0-9, ., _, : or -',
                          jsonb_build_object('field', 'request_id'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_request_id(text) IS
    'Names the problem with a request_id''s form.';

-- A create's look-up before its proof: the form is checked inline first (the function call
-- costs more than the match).
CREATE OR REPLACE FUNCTION os_replay(p_user bigint, p_sandbox uuid, p_request_id text, p_args_hash bytea)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    r create_requests;
BEGIN
    IF p_request_id IS NULL OR p_request_id = '' THEN
        RETURN NULL;
    END IF;
    IF length(p_request_id) > 128 OR p_request_id !~ '^[A-Za-z0-9._:-]+$' THEN
        PERFORM os_check_request_id(p_request_id);
    END IF;
    SELECT * INTO r FROM create_requests
     WHERE caller = os_caller_key(p_user, p_sandbox) AND request_id = p_request_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.args_hash IS DISTINCT FROM p_args_hash THEN
        PERFORM os_refuse('CONFLICT',
            format('request_id %s was already used with different arguments', p_request_id),
            jsonb_build_object('field', 'request_id', 'sandbox_id', r.sandbox_id));
    END IF;
    RETURN r.sandbox_id;
END $$;
COMMENT ON FUNCTION os_replay(bigint, uuid, text, bytea) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. The sandbox a repeated request_id created; refuses a repeat with other arguments.';

CREATE OR REPLACE FUNCTION os_replay(p_caller os_caller, p_request_id text, p_args_hash bytea)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN os_replay(p_user => os_caller_acting_user(p_caller), p_sandbox => (p_caller).sandbox_id,
                     p_request_id => p_request_id, p_args_hash => p_args_hash);
END $$;
COMMENT ON FUNCTION os_replay(os_caller, text, bytea) IS
    'The sandbox a repeated request_id of this caller created; a repeat with other arguments is refused.';
