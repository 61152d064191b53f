-- A tool call through the in-sandbox door in one round trip: the door credential is
-- re-checked and the calling sandbox's bucket taken in one SERIALIZABLE call. The gateway
-- may then reuse a door credential it verified less than a second ago for the MCP requests
-- that act on nothing (initialize, tools/list, the session's stream), while every tool call
-- still meets a revocation, an expiry or its sandbox's stop at once.

-- authenticate_door as PL/pgSQL, same rule: a SQL-language function that cannot be inlined
-- (SECURITY DEFINER) plans its query on every call, which cost a door call about 0.4 ms;
-- PL/pgSQL keeps the plan for the connection's life.
CREATE OR REPLACE FUNCTION authenticate_door(p_hash bytea)
RETURNS TABLE (sandbox_id uuid, sandbox_name text, owner_id bigint, expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT s.id, s.name, s.owner_id, d.expires_at
      FROM door_credentials d JOIN sandboxes s ON s.id = d.sandbox_id
     WHERE d.token_hash = p_hash AND d.revoked_at IS NULL AND d.expires_at > now()
       AND s.phase IN ('PROVISIONING', 'READY');
END $$;

CREATE FUNCTION take_door_call(p_hash bytea, p_sandbox uuid) RETURNS double precision
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM authenticate_door(p_hash) a WHERE a.sandbox_id = p_sandbox;
    IF NOT FOUND THEN
        PERFORM os_refuse('UNAUTHENTICATED', 'unknown, revoked or expired door credential',
                          jsonb_build_object('reason', 'door_credential'));
    END IF;
    RETURN take_call(p_sandbox);
END $$;
COMMENT ON FUNCTION take_door_call(bytea, uuid) IS
    'A door tool call: refuses UNAUTHENTICATED unless p_hash is a live door credential of p_sandbox (authenticate_door), then takes one call from the sandbox''s bucket (take_call). Returns the calls left.';

ALTER FUNCTION take_door_call(bytea, uuid) OWNER TO openshell_owner;
ALTER FUNCTION take_door_call(bytea, uuid) SECURITY DEFINER SET search_path = public, pg_temp;
REVOKE EXECUTE ON FUNCTION take_door_call(bytea, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION take_door_call(bytea, uuid) TO openshell_gateway;
