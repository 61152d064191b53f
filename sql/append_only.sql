-- What is kept for good: append-only tables, and tables no row ever leaves.
--
-- History, receipts and request ids are append-only; sandboxes, users, tokens, grants and door
-- credentials stay for audit (a delete marks, a revoke ends). The counters' tables have guards
-- of their own (sql/limits.sql).

CREATE OR REPLACE FUNCTION os_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_refuse('NOT_ALLOWED', format('%s is append-only', TG_TABLE_NAME));
END $$;
COMMENT ON FUNCTION os_forbid_change() IS
    'Trigger body for append-only tables.';
-- Append-only: rows are added, never changed or removed (whoever asks, psql included).
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER audit_log_append_only ON audit_log IS
    'Receipts are never changed or removed.';
CREATE TRIGGER create_requests_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON create_requests
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER create_requests_append_only ON create_requests IS
    'Request ids are remembered for good.';
CREATE TRIGGER global_max_policies_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON global_max_policies
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER global_max_policies_append_only ON global_max_policies IS
    'A change is a new version.';
CREATE TRIGGER grant_history_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON grant_history
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER grant_history_append_only ON grant_history IS
    'History is never changed or removed.';
CREATE TRIGGER os_error_codes_fixed BEFORE UPDATE OR DELETE ON os_error_codes
    FOR EACH ROW EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER os_error_codes_fixed ON os_error_codes IS
    'The vocabulary changes only by migration.';
CREATE TRIGGER policy_proposals_no_delete BEFORE DELETE OR TRUNCATE ON policy_proposals
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER policy_proposals_no_delete ON policy_proposals IS
    'Proposals stay for audit.';
CREATE TRIGGER proxy_denials_append_only BEFORE UPDATE OR DELETE ON proxy_denials
    FOR EACH ROW EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER proxy_denials_append_only ON proxy_denials IS
    'Denials are never changed or removed.';
CREATE TRIGGER sql_revisions_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON sql_revisions
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER sql_revisions_append_only ON sql_revisions IS
    'Every revision of these definitions a database was given stays recorded.';
CREATE TRIGGER sandbox_policies_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON sandbox_policies
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER sandbox_policies_append_only ON sandbox_policies IS
    'A policy change is a new version; old ones stay.';

-- Kept for audit: rows change (a phase, a revocation), but none is ever deleted.
CREATE OR REPLACE FUNCTION os_forbid_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_refuse('NOT_ALLOWED', format('%s rows are kept for audit and cannot be deleted', TG_TABLE_NAME));
END $$;
COMMENT ON FUNCTION os_forbid_delete() IS
    'Trigger body for tables whose rows are kept for audit: a row may change, never go.';
CREATE TRIGGER door_credentials_no_delete BEFORE DELETE OR TRUNCATE ON door_credentials
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER door_credentials_no_delete ON door_credentials IS
    'Door credentials stay for audit: revoke ends them.';
CREATE TRIGGER grants_no_delete BEFORE DELETE OR TRUNCATE ON grants
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER grants_no_delete ON grants IS
    'Grants stay for audit: revoke ends them.';
CREATE TRIGGER parents_no_truncate BEFORE TRUNCATE ON parents
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER parents_no_truncate ON parents IS
    'Counter rows are never deleted.';
CREATE TRIGGER sandboxes_no_delete BEFORE DELETE OR TRUNCATE ON sandboxes
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER sandboxes_no_delete ON sandboxes IS
    'Sandbox rows stay for audit: delete marks DELETED.';
CREATE TRIGGER trees_no_truncate BEFORE TRUNCATE ON trees
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER trees_no_truncate ON trees IS
    'Tree rows stay.';
CREATE TRIGGER user_tokens_no_delete BEFORE DELETE OR TRUNCATE ON user_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER user_tokens_no_delete ON user_tokens IS
    'Tokens stay for audit: revoke ends them.';
CREATE TRIGGER users_no_delete BEFORE DELETE OR TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER users_no_delete ON users IS
    'Users stay for audit.';
