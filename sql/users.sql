-- Users and their login tokens.
--
-- Every change is audited by trigger, whoever makes it; tokens are stored as hashes only,
-- revocable and optionally expiring, refused at once when either. Users and tokens are never
-- deleted (sql/append_only.sql).

-- The audit of users and tokens is written by triggers, so no path (function or psql)
-- changes them unrecorded. The acting user comes from the calling function (os.actor, set
-- for its transaction); a change without one is recorded as made in the database by its
-- session user. Never a token or hash.
CREATE OR REPLACE FUNCTION os_actor() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT nullif(current_setting('os.actor', true), '')::bigint
$$;
COMMENT ON FUNCTION os_actor() IS
    'The gateway user on whose behalf the current transaction changes users or tokens (NULL: none).';

CREATE OR REPLACE FUNCTION users_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_action text;
    v_details jsonb;
BEGIN
    IF TG_TABLE_NAME = 'users' THEN
        v_action := CASE WHEN TG_OP = 'INSERT' THEN 'user.create' ELSE 'user.update' END;
        v_details := jsonb_build_object('user', NEW.name, 'admin', NEW.is_admin);
        IF TG_OP = 'UPDATE' THEN
            v_details := v_details || jsonb_build_object('was_admin', OLD.is_admin, 'old_name', OLD.name);
        END IF;
        INSERT INTO audit_log (action, outcome, actor_user, owner_id, details)
        VALUES (CASE WHEN os_actor() IS NULL AND TG_OP = 'INSERT' THEN 'system.user_create' ELSE v_action END,
                'done', os_actor(), NEW.id, v_details || jsonb_build_object('db_user', session_user::text));
    ELSE
        v_action := CASE WHEN TG_OP = 'INSERT' THEN 'token.create'
                         WHEN NEW.revoked_at IS NOT NULL AND OLD.revoked_at IS NULL THEN 'token.revoke'
                         ELSE 'token.update' END;
        INSERT INTO audit_log (action, outcome, actor_user, owner_id, details)
        VALUES (CASE WHEN os_actor() IS NULL THEN 'system.' || replace(v_action, '.', '_') ELSE v_action END,
                'done', os_actor(), NEW.user_id,
                jsonb_build_object('token_id', NEW.id, 'expires_at', NEW.expires_at, 'label', NEW.label,
                                   'db_user', session_user::text));
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION users_audit() IS
    'Trigger body: the receipt of a user or token added or changed, with the acting user (os_actor) or the database role.';
CREATE TRIGGER user_tokens_audit AFTER INSERT OR UPDATE ON user_tokens FOR EACH ROW EXECUTE FUNCTION users_audit();
COMMENT ON TRIGGER user_tokens_audit ON user_tokens IS
    'Every token made, revoked or shortened is in the audit log (by id, never the token).';
CREATE TRIGGER users_audit AFTER INSERT OR UPDATE ON users FOR EACH ROW EXECUTE FUNCTION users_audit();
COMMENT ON TRIGGER users_audit ON users IS
    'Every user added or changed is in the audit log, whoever changed it.';

-- A user's id never changes: sandboxes and policy versions name users without a foreign
-- key (sql/references.sql), so a reference that named a user once names one for good.
CREATE OR REPLACE FUNCTION users_id_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_refuse('NOT_ALLOWED', 'a user''s id is fixed (rows elsewhere name it)');
END $$;
COMMENT ON FUNCTION users_id_fixed() IS
    'Trigger body: refuses a change of a user''s id.';
CREATE TRIGGER users_id_fixed BEFORE UPDATE OF id ON users
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id) EXECUTE FUNCTION users_id_fixed();
COMMENT ON TRIGGER users_id_fixed ON users IS
    'Users keep their id: sandboxes and policy versions reference it without a foreign key''s row lock.';

-- A token's hash, owner and creation are fixed; it can only be revoked (once) or have its
-- expiry brought forward.
CREATE OR REPLACE FUNCTION user_tokens_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.token_hash, NEW.user_id, NEW.created_at, NEW.id, NEW.label)
       IS DISTINCT FROM (OLD.token_hash, OLD.user_id, OLD.created_at, OLD.id, OLD.label) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('token %s can only be revoked or expire sooner', OLD.id));
    END IF;
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        PERFORM os_refuse('NOT_ALLOWED', format('token %s is revoked for good', OLD.id));
    END IF;
    IF NEW.expires_at IS DISTINCT FROM OLD.expires_at
       AND (NEW.expires_at IS NULL OR (OLD.expires_at IS NOT NULL AND NEW.expires_at > OLD.expires_at)) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('token %s cannot live longer than it was given', OLD.id));
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION user_tokens_before_update() IS
    'Trigger body: a token can only be revoked or expire sooner.';
CREATE TRIGGER user_tokens_before_update BEFORE UPDATE ON user_tokens
    FOR EACH ROW EXECUTE FUNCTION user_tokens_before_update();
COMMENT ON TRIGGER user_tokens_before_update ON user_tokens IS
    'A token can only be revoked or expire sooner.';

CREATE OR REPLACE FUNCTION user_create(p_actor bigint, p_name text, p_admin boolean, p_token_hash bytea)
RETURNS users LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    u users;
BEGIN
    IF p_actor IS NULL AND EXISTS (SELECT 1 FROM users) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can add users');
    END IF;
    IF p_actor IS NOT NULL AND NOT os_is_admin(p_actor) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can add users');
    END IF;
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_-]{0,62}$' THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            'name: must start with a lower-case letter, then up to 62 of a-z, 0-9, _ or -',
            jsonb_build_object('field', 'name'));
    END IF;
    PERFORM set_config('os.actor', coalesce(p_actor::text, ''), true);
    INSERT INTO users (name, is_admin) VALUES (p_name, p_admin) ON CONFLICT (name) DO NOTHING RETURNING * INTO u;
    IF u.id IS NULL THEN
        PERFORM os_refuse('CONFLICT', format('user %s already exists', p_name), jsonb_build_object('field', 'name'));
    END IF;
    INSERT INTO user_tokens (token_hash, user_id, label) VALUES (p_token_hash, u.id, 'first token');
    RETURN u;
END $$;
COMMENT ON FUNCTION user_create(bigint, text, boolean, bytea) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Adds a user with one login token (hash). p_actor NULL is the gateway''s first-start bootstrap.';

-- The bootstrap admin is made without an actor (bootstrap_admin); every other user by an admin.
CREATE OR REPLACE FUNCTION user_create(p_caller os_caller, p_name text, p_admin boolean, p_token_hash bytea)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT FROM user_create(p_actor => os_caller_admin(p_caller, 'add users'), p_name => p_name,
                            p_admin => p_admin, p_token_hash => p_token_hash)
$$;
COMMENT ON FUNCTION user_create(os_caller, text, boolean, bytea) IS
    'An admin adds a user with its first token (stored hashed).';

-- (user_create is overloaded: the bootstrap names its NULL actors type.)
CREATE OR REPLACE FUNCTION bootstrap_admin(p_name text, p_token_hash bytea) RETURNS boolean LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- One bootstrap at a time across gateways; the first finds no user and makes the admin.
    PERFORM pg_advisory_xact_lock(7061708);
    IF EXISTS (SELECT 1 FROM users) THEN
        RETURN false;
    END IF;
    PERFORM user_create(p_actor => NULL::bigint, p_name => p_name, p_admin => true, p_token_hash => p_token_hash);
    RETURN true;
END $$;
COMMENT ON FUNCTION bootstrap_admin(text, bytea) IS
    'Creates the first admin when there is no user; false otherwise.';

CREATE OR REPLACE FUNCTION admin_token_mint(p_token_hash bytea, p_label text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    u users;
BEGIN
    SELECT * INTO u FROM users WHERE is_admin ORDER BY id LIMIT 1;
    IF u.id IS NULL THEN
        PERFORM os_refuse('NOT_FOUND', 'there is no admin user yet: start the gateway once');
    END IF;
    -- No acting user: audited as system.token_create, with the database role that asked.
    PERFORM set_config('os.actor', '', true);
    INSERT INTO user_tokens (token_hash, user_id, label) VALUES (p_token_hash, u.id, left(coalesce(p_label, ''), 200));
    RETURN u.name;
END $$;
COMMENT ON FUNCTION admin_token_mint(bytea, text) IS
    'A new token for the first admin, for `openshell gateway admin-token` on the gateway''s host (the CLI config was lost); audited.';

CREATE OR REPLACE FUNCTION os_token_target(p_actor bigint, p_user text) RETURNS users LANGUAGE plpgsql STABLE AS $$
DECLARE
    u users;
BEGIN
    IF p_actor IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', 'tokens are for users');
    END IF;
    IF p_user IS NULL OR p_user = '' THEN
        SELECT * INTO u FROM users WHERE id = p_actor;
    ELSE
        SELECT * INTO u FROM users WHERE name = p_user;
    END IF;
    IF u.id IS NULL THEN
        PERFORM os_refuse('NOT_FOUND', format('user %s not found', p_user), jsonb_build_object('field', 'user'));
    END IF;
    IF u.id <> p_actor AND NOT os_is_admin(p_actor) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can manage another user''s tokens');
    END IF;
    RETURN u;
END $$;
COMMENT ON FUNCTION os_token_target(bigint, text) IS
    'Whose tokens a call is about: the caller''s own, or (an admin) anyone''s.';

CREATE OR REPLACE FUNCTION token_create(p_actor bigint, p_user text, p_token_hash bytea, p_expires_at timestamptz, p_label text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    u users := os_token_target(p_actor, p_user);
    v_id bigint;
BEGIN
    IF p_expires_at IS NOT NULL AND p_expires_at <= now() THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'expires: must be in the future', jsonb_build_object('field', 'expires'));
    END IF;
    IF length(coalesce(p_label, '')) > 200 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'label: at most 200 characters', jsonb_build_object('field', 'label'));
    END IF;
    PERFORM set_config('os.actor', p_actor::text, true);
    INSERT INTO user_tokens (token_hash, user_id, expires_at, label)
    VALUES (p_token_hash, u.id, p_expires_at, coalesce(p_label, '')) RETURNING id INTO v_id;
    RETURN v_id;
END $$;
COMMENT ON FUNCTION token_create(bigint, text, bytea, timestamptz, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A user (or an admin, for anyone) adds a login token (its hash), optionally expiring; returns its id.';

CREATE OR REPLACE FUNCTION token_create(p_caller os_caller, p_user text, p_token_hash bytea, p_expires_at timestamptz,
                             p_label text)
RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT token_create(p_actor => os_caller_user(p_caller, 'manage tokens'), p_user => p_user,
                        p_token_hash => p_token_hash, p_expires_at => p_expires_at, p_label => p_label)
$$;
COMMENT ON FUNCTION token_create(os_caller, text, bytea, timestamptz, text) IS
    'A user adds a token for themself (an admin: for anyone); returns its id.';

CREATE OR REPLACE FUNCTION token_list(p_actor bigint, p_user text)
RETURNS TABLE (id bigint, user_name text, label text, created_at timestamptz, expires_at timestamptz,
               revoked_at timestamptz, state text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT t.id, u.name, t.label, t.created_at, t.expires_at, t.revoked_at,
           CASE WHEN t.revoked_at IS NOT NULL THEN 'revoked'
                WHEN t.expires_at <= now() THEN 'expired' ELSE 'live' END
      FROM user_tokens t JOIN users u ON u.id = t.user_id
     WHERE t.user_id = (os_token_target(p_actor, p_user)).id
     ORDER BY t.id
$$;
COMMENT ON FUNCTION token_list(bigint, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A user''s tokens by id, with their state; never a token or hash.';

CREATE OR REPLACE FUNCTION token_list(p_caller os_caller, p_user text)
RETURNS TABLE (id bigint, user_name text, label text, created_at timestamptz, expires_at timestamptz,
               revoked_at timestamptz, state text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM token_list(p_actor => os_caller_user(p_caller, 'manage tokens'), p_user => p_user)
$$;
COMMENT ON FUNCTION token_list(os_caller, text) IS
    'The tokens a user may see (their own; an admin: anyone''s).';

CREATE OR REPLACE FUNCTION token_revoke(p_actor bigint, p_id bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t user_tokens;
BEGIN
    SELECT * INTO t FROM user_tokens WHERE id = p_id;
    IF t.id IS NULL OR (t.user_id <> p_actor AND NOT os_is_admin(p_actor)) THEN
        PERFORM os_refuse('NOT_FOUND', format('token %s not found', p_id), jsonb_build_object('field', 'id'));
    END IF;
    IF t.revoked_at IS NULL THEN
        PERFORM set_config('os.actor', p_actor::text, true);
        UPDATE user_tokens SET revoked_at = now() WHERE id = p_id;
    END IF;
END $$;
COMMENT ON FUNCTION token_revoke(bigint, bigint) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Revokes a token (the caller''s own, or an admin: anyone''s): refused from the next call.';

CREATE OR REPLACE FUNCTION token_revoke(p_caller os_caller, p_id bigint)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT token_revoke(p_actor => os_caller_user(p_caller, 'manage tokens'), p_id => p_id)
$$;
COMMENT ON FUNCTION token_revoke(os_caller, bigint) IS
    'A user revokes one of their tokens (an admin: anyone''s).';
