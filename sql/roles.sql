-- Who may call what. The roles (cluster-wide names) and the schema's ownership come with the
-- migrations:
--
--   openshell_owner     NOLOGIN: owns the schema and everything in it; migrations and these
--                       definitions are applied as it.
--   openshell_gateway   LOGIN: no table privileges; may only EXECUTE the functions below,
--                       which are SECURITY DEFINER with a fixed search_path (a test checks
--                       every one), so it cannot write a table, disable a trigger, set the
--                       replication role or run COPY ... TO PROGRAM.
--   openshell_operator  LOGIN: read-only; SELECT on the views made for people, and the
--                       functions the reports in sql/reports run.
--
-- Functions execute for nobody by default: the owner's default privileges revoke EXECUTE
-- from PUBLIC, so a function not listed here is the owner's alone (the helpers the definer
-- functions call run as the owner already). Everything here is given again on every apply.

-- ---------------------------------------------------------------- the gateway

GRANT EXECUTE ON FUNCTION admin_token_mint(bytea, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION admit_child(os_caller, text, text, os_kind, text[], jsonb, bytea, os_admission_proof, bytea, text, bytea, text, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION audit_heads(os_caller, text, bigint) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION audit_list(os_caller, text, text, timestamptz, timestamptz, boolean, bigint, bigint) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION audit_verify(os_caller, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION authenticate(bytea) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION authenticate_door(bytea) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION begin_stop(os_caller, text, boolean) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION bootstrap_admin(text, bytea) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION create_child(os_caller, bytea, text, uuid, text, os_kind, text[], jsonb, bytea, os_admission_proof, bytea, text, bytea, text, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION create_root(os_caller, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, os_grant_values, text, os_root_proof) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION door_credential_issue(uuid, bytea, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION door_parent_snapshot(bytea, os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION exec_begin(os_caller, text, os_kind) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION exec_end(uuid) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION execs_reset(text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION expired_files(uuid[], interval) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION file_target(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION finish_stop(uuid) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION global_max_current() TO openshell_gateway;
GRANT EXECUTE ON FUNCTION global_max_set(os_caller, jsonb, bytea) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION grant_create(os_caller, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION grant_current(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION grant_list(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION grant_revoke(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION grant_status(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION grant_update(os_caller, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION idle_tools(text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION live_children(uuid) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION live_rows(text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION mark_error(uuid, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION mark_ready(uuid, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION os_live_sandboxes() TO openshell_gateway;
GRANT EXECUTE ON FUNCTION os_replay(os_caller, text, bytea) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION os_schema_version() TO openshell_gateway;
GRANT EXECUTE ON FUNCTION os_sql_revision() TO openshell_gateway;
GRANT EXECUTE ON FUNCTION parent_snapshot(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION policy_children(uuid) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION policy_target(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION proposal_approve(os_caller, bigint, text[], jsonb, bytea, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION proposal_create(uuid, text, jsonb, text, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION proposal_get_own(uuid, bigint) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION proposal_list(os_caller, text, text, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION proposal_pending(os_caller, bigint) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION proposal_reject(os_caller, bigint, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION record_denials(uuid, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION record_exit(uuid, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION record_refusal(os_caller, text, text, text, text, text, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION sandbox_by_id(uuid) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION sandbox_current_policy(uuid, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION sandbox_denials(os_caller, text, integer) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION sandbox_get(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION sandbox_list(os_caller, boolean, timestamptz, uuid, bigint) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION sandbox_subtree(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION set_policy(os_caller, text, jsonb, bytea, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION stop_idle(uuid) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION supervisor_ready(bytea, jsonb) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION supervisor_start(bytea) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION system_stop(uuid, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION take_door_call(bytea, uuid, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION token_create(os_caller, text, bytea, timestamptz, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION token_list(os_caller, text) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION token_revoke(os_caller, bigint) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION user_create(os_caller, text, boolean, bytea) TO openshell_gateway;
GRANT EXECUTE ON FUNCTION work_target(os_caller, text, os_kind) TO openshell_gateway;

-- ---------------------------------------------------------------- operators

GRANT EXECUTE ON FUNCTION os_audit_heads() TO openshell_operator;
GRANT EXECUTE ON FUNCTION os_invariants(interval, uuid[]) TO openshell_operator;
GRANT EXECUTE ON FUNCTION os_recount() TO openshell_operator;
GRANT EXECUTE ON FUNCTION os_verify_audit(jsonb) TO openshell_operator;
GRANT EXECUTE ON FUNCTION sandbox_tree(uuid) TO openshell_operator;

-- os_is_live is pure; both roles may use it in their own queries.
GRANT EXECUTE ON FUNCTION os_is_live(text) TO openshell_gateway, openshell_operator;
-- os_created_by is pure and words sandbox_view's created_by: whoever reads the view runs it.
GRANT EXECUTE ON FUNCTION os_created_by(text, text, text) TO openshell_operator;

-- The operator reads the views made for people, nothing with a secret (no credential or token hash).
GRANT SELECT ON audit_view, grant_history_view, grant_view, proposal_view, sandbox_view, tree_view TO openshell_operator;
