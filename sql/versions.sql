-- What a gateway that cannot migrate checks: the schema's version and the definitions' revision.
--
-- A gateway whose login has the owner's rights migrates and applies sql/ itself; one that logs
-- in as the gateway role only checks that the database is at its build's migration and
-- definitions revision (crates/store/src/definitions.rs).

CREATE OR REPLACE FUNCTION os_schema_version() RETURNS integer LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = public, pg_temp AS $$
    SELECT coalesce(max(version), 0) FROM refinery_schema_history
$$;
COMMENT ON FUNCTION os_schema_version() IS
    'The latest migration applied: a gateway that logs in as the gateway role (and cannot migrate) checks it.';

CREATE OR REPLACE FUNCTION os_sql_revision(OUT revision integer, OUT checksum bytea) LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT r.revision, r.checksum FROM sql_revisions r ORDER BY r.revision DESC LIMIT 1
$$;
COMMENT ON FUNCTION os_sql_revision() IS
    'The revision and checksum of the definitions in sql/ the database holds (NULL before the first): a gateway that logs in as the gateway role checks it.';
