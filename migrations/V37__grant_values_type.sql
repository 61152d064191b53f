-- A grant's values as a user sets them, one typed value: what create_root takes for the grant
-- of a new root (sql/admission.sql), where it took a JSON object of the same fields. A field
-- the gateway leaves out is a NULL, never a missing key, and a wrong type fails at the call.
CREATE TYPE os_grant_values AS (
    max_depth          integer,
    max_breadth        integer,
    max_total          integer,
    expires_at         timestamptz,
    program            text,
    program_resolved   text,
    rate_calls         integer,
    rate_period_s      integer,
    tool_idle_seconds  integer
);
COMMENT ON TYPE os_grant_values IS
    'A grant''s values as a user sets them (limits, expiry, the program and what it resolved to, the tool-call rate, '
    'the idle stop of tool children; NULL tool_idle_seconds: the default). The grant rules are sql/grants.sql''s.';
