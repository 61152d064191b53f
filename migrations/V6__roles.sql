-- Least privilege. Three roles (cluster-wide names, shared by every database of a server):
--
--   openshell_owner     NOLOGIN: owns the schema; migrations after this one run as it.
--   openshell_gateway   LOGIN: no table privileges; may only EXECUTE the functions the
--                       gateway calls, which are SECURITY DEFINER with a fixed search_path.
--                       It cannot write a table, disable a trigger, set the replication role
--                       or run COPY ... TO PROGRAM.
--   openshell_operator  LOGIN: read-only; SELECT on the views made for people, os_recount()
--                       and the sandbox_tree() the reports use.
--
-- Passwords are set by whoever provisions the server (the embedded cluster at start,
-- `openshell gateway init-db` otherwise), never here.

DO $$
BEGIN
    CREATE ROLE openshell_owner NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- made by another database's migration
END $$;
DO $$
BEGIN
    CREATE ROLE openshell_gateway LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$;
DO $$
BEGIN
    CREATE ROLE openshell_operator LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$;

-- ---------------------------------------------------------------- frozen credentials

-- A credential can be cleared (a stopping sandbox loses it), never set or changed after
-- insert: whoever could write it could mint a working credential for a running sandbox.
CREATE FUNCTION sandboxes_credential_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.credential_hash IS NOT NULL AND NEW.credential_hash IS DISTINCT FROM OLD.credential_hash THEN
        RAISE EXCEPTION 'the credential of sandbox % can only be cleared, never set or changed', OLD.id
            USING ERRCODE = 'OS001';
    END IF;
    RETURN NEW;
END $$;
-- Named to fire before sandboxes_before_update (triggers fire in name order), which clears it on a stop.
CREATE TRIGGER sandboxes_a_credential_frozen BEFORE UPDATE OF credential_hash ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_credential_frozen();
COMMENT ON TRIGGER sandboxes_a_credential_frozen ON sandboxes IS
    'credential_hash can only be cleared after insert, never set or changed.';

-- ---------------------------------------------------------------- what the gateway reads

CREATE FUNCTION bootstrap_admin(p_name text, p_token_hash bytea) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    -- One bootstrap at a time across gateways; the first finds no user and makes the admin.
    PERFORM pg_advisory_xact_lock(7061708);
    IF EXISTS (SELECT 1 FROM users) THEN
        RETURN false;
    END IF;
    PERFORM user_create(NULL, p_name, true, p_token_hash);
    RETURN true;
END $$;
COMMENT ON FUNCTION bootstrap_admin(text, bytea) IS 'Creates the first admin when there is no user; false otherwise.';

CREATE FUNCTION sandbox_get(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF sandbox_view
LANGUAGE sql STABLE AS $$
    SELECT v.* FROM sandbox_view v WHERE v.id = (SELECT id FROM resolve_sandbox(p_user, p_sandbox, p_ref))
$$;
COMMENT ON FUNCTION sandbox_get(bigint, uuid, text) IS 'A sandbox as the caller may see it (see resolve_sandbox).';

CREATE FUNCTION sandbox_by_id(p_id uuid) RETURNS SETOF sandbox_view LANGUAGE sql STABLE AS $$
    SELECT v.* FROM sandbox_view v WHERE v.id = p_id
$$;
COMMENT ON FUNCTION sandbox_by_id(uuid) IS 'A sandbox by id, for the gateway''s own use after it authorized the call.';

CREATE FUNCTION sandbox_list(p_user bigint, p_include_stopped boolean, p_after_at timestamptz, p_after_id uuid,
                             p_limit bigint)
RETURNS SETOF sandbox_view LANGUAGE sql STABLE AS $$
    SELECT v.* FROM sandbox_view v
     WHERE (v.owner_id = p_user OR os_is_admin(p_user))
       AND (p_include_stopped OR v.phase NOT IN ('STOPPED', 'DELETED'))
       AND (p_after_at IS NULL OR (v.created_at, v.id) < (p_after_at, p_after_id))
     ORDER BY v.created_at DESC, v.id DESC LIMIT p_limit
$$;
COMMENT ON FUNCTION sandbox_list(bigint, boolean, timestamptz, uuid, bigint) IS
    'A user''s sandboxes (an admin''s: everyone''s), newest first, one page after (p_after_at, p_after_id).';

CREATE FUNCTION sandbox_subtree(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF sandbox_view
LANGUAGE sql STABLE AS $$
    SELECT v.* FROM sandbox_view v
      JOIN sandbox_tree((SELECT id FROM resolve_sandbox(p_user, p_sandbox, p_ref))) t USING (id)
     ORDER BY t.tree_path
$$;
COMMENT ON FUNCTION sandbox_subtree(bigint, uuid, text) IS 'A sandbox the caller may see and its descendants, in tree order.';

CREATE FUNCTION live_children(p_id uuid) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT live_children FROM sandboxes WHERE id = p_id), 0)
$$;
COMMENT ON FUNCTION live_children(uuid) IS 'A sandbox''s live children (its counter).';

CREATE FUNCTION live_rows(p_runner text)
RETURNS TABLE (id uuid, name text, phase text, depth integer, age float8) LANGUAGE sql STABLE AS $$
    SELECT s.id, s.name, s.phase, s.depth, extract(epoch FROM now() - s.updated_at)::float8
      FROM sandboxes s WHERE s.runner = p_runner AND s.phase IN ('PROVISIONING', 'READY', 'STOPPING')
     ORDER BY s.depth DESC
$$;
COMMENT ON FUNCTION live_rows(text) IS 'Every sandbox of this runner that may have a workload, deepest first, with its age.';

CREATE FUNCTION parent_snapshot(p_user bigint, p_sandbox uuid, p_ref text)
RETURNS TABLE (id uuid, name text, kind text, policy_version integer, document jsonb, hash bytea,
               global_version integer, global_document jsonb)
LANGUAGE sql STABLE AS $$
    SELECT s.id, s.name, s.kind, s.policy_version, p.document, p.hash, g.version, g.document
      FROM resolve_sandbox(p_user, p_sandbox, p_ref) s
      JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = s.policy_version
     CROSS JOIN global_max_current() g
$$;
COMMENT ON FUNCTION parent_snapshot(bigint, uuid, text) IS
    'A parent''s current policy and the global maximum, in one snapshot: what a child is proved against.';

CREATE FUNCTION policy_target(p_user bigint, p_sandbox uuid, p_ref text)
RETURNS TABLE (id uuid, name text, phase text, policy_version integer, document jsonb, parent_id uuid,
               parent_document jsonb, parent_version integer)
LANGUAGE sql STABLE AS $$
    SELECT s.id, s.name, s.phase, s.policy_version, p.document, s.parent_id, pp.document, par.policy_version
      FROM resolve_sandbox(p_user, p_sandbox, p_ref) s
      JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = s.policy_version
      LEFT JOIN sandboxes par ON par.id = s.parent_id
      LEFT JOIN sandbox_policies pp ON pp.sandbox_id = par.id AND pp.version = par.policy_version
$$;
COMMENT ON FUNCTION policy_target(bigint, uuid, text) IS
    'A sandbox''s current policy and its parent''s, as the caller may see them: what a policy write is proved against.';

CREATE FUNCTION policy_children(p_id uuid)
RETURNS TABLE (id uuid, name text, policy_version integer, document jsonb) LANGUAGE sql STABLE AS $$
    SELECT c.id, c.name, c.policy_version, p.document FROM sandboxes c
      JOIN sandbox_policies p ON p.sandbox_id = c.id AND p.version = c.policy_version
     WHERE c.parent_id = p_id AND os_is_live(c.phase) ORDER BY c.id
$$;
COMMENT ON FUNCTION policy_children(uuid) IS 'Live children of a sandbox with their current policies (they must fit a new one).';

CREATE FUNCTION grant_list(p_user bigint, p_ref text) RETURNS SETOF grant_view LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_ref IS NOT NULL THEN
        RETURN QUERY SELECT g.* FROM grant_view g WHERE g.root_id = (SELECT id FROM os_grant_target(p_user, NULL, p_ref))
                      ORDER BY g.id DESC LIMIT 1000;
    ELSE
        RETURN QUERY SELECT g.* FROM grant_view g WHERE g.owner_id = p_user OR os_is_admin(p_user)
                      ORDER BY g.id DESC LIMIT 1000;
    END IF;
END $$;
COMMENT ON FUNCTION grant_list(bigint, text) IS
    'The grants of one tree (history, newest first), or of every tree the user may see.';

CREATE FUNCTION audit_list(p_user bigint, p_sandbox_ref text, p_owner_name text, p_since timestamptz,
                           p_until timestamptz, p_refusals_only boolean, p_before_id bigint, p_limit bigint)
RETURNS SETOF audit_view LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_admin boolean := os_is_admin(p_user);
    v_root uuid;
BEGIN
    IF p_user IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', 'the audit log is for users');
    END IF;
    IF p_owner_name IS NOT NULL AND NOT v_admin THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can read another user''s audit');
    END IF;
    IF p_sandbox_ref IS NOT NULL THEN
        v_root := (resolve_sandbox(p_user, NULL, p_sandbox_ref)).root_id;
    END IF;
    RETURN QUERY SELECT a.* FROM audit_view a
      WHERE (v_admin OR a.owner_id = p_user)
        AND (v_root IS NULL OR a.root_id = v_root)
        AND (p_owner_name IS NULL OR a.owner_id = (SELECT u.id FROM users u WHERE u.name = p_owner_name))
        AND (p_since IS NULL OR a.at >= p_since) AND (p_until IS NULL OR a.at < p_until)
        AND (NOT p_refusals_only OR a.outcome = 'refused') AND (p_before_id IS NULL OR a.id < p_before_id)
      ORDER BY a.id DESC LIMIT p_limit;
END $$;
COMMENT ON FUNCTION audit_list(bigint, text, text, timestamptz, timestamptz, boolean, bigint, bigint) IS
    'The audit entries a user may read (an admin: all, and by owner), newest first, one page before p_before_id.';

-- ---------------------------------------------------------------- views for people

CREATE VIEW tree_view AS
SELECT r.id AS root_id, r.name AS root_name, o.name AS owner_name, r.phase AS root_phase, t.live_total,
       g.id AS grant_id, g.max_depth, g.max_breadth, g.max_total, g.expires_at,
       CASE WHEN g.id IS NULL THEN 'none' WHEN g.expires_at <= now() THEN 'expired' ELSE 'live' END AS grant_state
  FROM trees t
  JOIN sandboxes r ON r.id = t.root_id
  JOIN users o ON o.id = r.owner_id
  LEFT JOIN grants g ON g.root_id = t.root_id AND g.ended_at IS NULL;
COMMENT ON VIEW tree_view IS 'Every tree: its root, owner, live descendants and current grant.';
COMMENT ON COLUMN tree_view.root_id IS 'The root sandbox.';
COMMENT ON COLUMN tree_view.root_name IS 'Name of the root.';
COMMENT ON COLUMN tree_view.owner_name IS 'The user who owns the tree.';
COMMENT ON COLUMN tree_view.root_phase IS 'Phase of the root.';
COMMENT ON COLUMN tree_view.live_total IS 'Live descendants (the root not counted), the counter max_total limits.';
COMMENT ON COLUMN tree_view.grant_id IS 'The current grant (not ended), if any.';
COMMENT ON COLUMN tree_view.grant_state IS 'none, live or expired.';

CREATE VIEW grant_history_view AS
SELECT h.id, h.at, h.grant_id, h.root_id, r.name AS root_name, h.event, h.max_depth, h.max_breadth, h.max_total,
       h.expires_at, h.program, u.name AS by_user, h.db_user
  FROM grant_history h
  JOIN users u ON u.id = h.by_user
  JOIN sandboxes r ON r.id = h.root_id;
COMMENT ON VIEW grant_history_view IS 'Every state a grant has had, with the root''s and the user''s names.';
COMMENT ON COLUMN grant_history_view.root_name IS 'Name of the tree''s root.';
COMMENT ON COLUMN grant_history_view.by_user IS 'Name of the user behind the change.';

-- ---------------------------------------------------------------- ownership and grants

-- Everything this schema made so far now belongs to the owner role (the migrations until
-- now ran as whoever connected: the embedded cluster's superuser, or a test server's).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS name, c.relkind FROM pg_class c
              WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p')
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO openshell_owner',
                       CASE WHEN r.relkind IN ('v') THEN 'VIEW' WHEN r.relkind = 'm' THEN 'MATERIALIZED VIEW'
                            ELSE 'TABLE' END, r.name);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS name FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO openshell_owner', r.name);
    END LOOP;
END $$;
GRANT USAGE, CREATE ON SCHEMA public TO openshell_owner;
GRANT USAGE ON SCHEMA public TO openshell_gateway, openshell_operator;

-- Functions execute for nobody by default (PostgreSQL grants EXECUTE to PUBLIC).
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC;
-- (Without IN SCHEMA: per-schema defaults can only add to the global ones, never revoke.)
ALTER DEFAULT PRIVILEGES FOR ROLE openshell_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- The gateway's calls: SECURITY DEFINER (they run as the owner) with a search_path that a
-- caller cannot redirect to objects of its own.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'authenticate(bytea)', 'bootstrap_admin(text, bytea)', 'user_create(bigint, text, boolean, bytea)',
        'create_root(bigint, text, text[], jsonb, jsonb, bytea, bytea, text, bytea, jsonb, text, jsonb)',
        'admit_child(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text)',
        'record_refusal(bigint, uuid, text, text, text, text, text, text, jsonb)',
        'os_replay(bigint, uuid, text, bytea)',
        'begin_stop(bigint, uuid, text, text, boolean)', 'system_stop(uuid, text)', 'finish_stop(uuid)',
        'mark_ready(uuid)', 'record_exit(uuid, integer)', 'mark_error(uuid, text)',
        'global_max_current()', 'global_max_set(bigint, jsonb, bytea)',
        'set_policy(bigint, uuid, text, text, jsonb, bytea, jsonb)',
        'grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text)',
        'grant_current(bigint, uuid, text)',
        'grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text)',
        'grant_revoke(bigint, uuid, text)',
        'sandbox_get(bigint, uuid, text)', 'sandbox_by_id(uuid)',
        'sandbox_list(bigint, boolean, timestamptz, uuid, bigint)', 'sandbox_subtree(bigint, uuid, text)',
        'live_children(uuid)', 'live_rows(text)', 'parent_snapshot(bigint, uuid, text)',
        'policy_target(bigint, uuid, text)', 'policy_children(uuid)', 'grant_list(bigint, text)',
        'audit_list(bigint, text, text, timestamptz, timestamptz, boolean, bigint, bigint)'
    ]::regprocedure[] LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = public, pg_temp', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO openshell_gateway', f);
    END LOOP;
    -- What operators run: the recount and the tree walk the reports use.
    FOREACH f IN ARRAY ARRAY['os_recount()', 'sandbox_tree(uuid)']::regprocedure[] LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = public, pg_temp', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO openshell_operator', f);
    END LOOP;
END $$;

-- Functions used inside views and by the definer functions run as the owner already; the
-- ones views call must also be executable by whoever queries the view.
GRANT EXECUTE ON FUNCTION os_is_live(text) TO openshell_gateway, openshell_operator;

-- The operator reads views made for people, nothing with a secret (no credential or token hash).
GRANT SELECT ON sandbox_view, grant_view, audit_view, tree_view, grant_history_view TO openshell_operator;

-- Refinery's bookkeeping moves with the schema, so later migrations run as the owner.
DO $$
BEGIN
    IF to_regclass('refinery_schema_history') IS NOT NULL THEN
        ALTER TABLE refinery_schema_history OWNER TO openshell_owner;
    END IF;
END $$;

CREATE FUNCTION os_schema_version() RETURNS integer LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = public, pg_temp AS $$
    SELECT coalesce(max(version), 0) FROM refinery_schema_history
$$;
COMMENT ON FUNCTION os_schema_version() IS
    'The latest migration applied: a gateway that logs in as the gateway role (and cannot migrate) checks it.';
REVOKE EXECUTE ON FUNCTION os_schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION os_schema_version() TO openshell_gateway;
ALTER FUNCTION os_schema_version() OWNER TO openshell_owner;
