-- Admissions stop locking their user's row.
--
-- A foreign key check takes FOR KEY SHARE on the referenced row. Every admission referenced
-- its user three times (the child's owner and creator, the policy's author), so every
-- admission of every tree of one user locked the same `users` row: concurrent lockers share
-- it through a MultiXact that each one extends, a tenth of an admission's time and the last
-- row that admissions of different trees all wrote. Users are never deleted (users_no_delete)
-- and, from here, never change id, so a reference that named a user once names one for good:
-- the check becomes a plain read at insert, and a child's owner (copied from its parent by
-- sandboxes_before_insert, and fixed after) needs none.

CREATE FUNCTION users_id_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a user''s id is fixed (rows elsewhere name it)' USING ERRCODE = 'OS001';
END $$;
CREATE TRIGGER users_id_fixed BEFORE UPDATE OF id ON users
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id) EXECUTE FUNCTION users_id_fixed();
COMMENT ON TRIGGER users_id_fixed ON users IS
    'Users keep their id: sandboxes and policy versions reference it without a foreign key''s row lock.';

-- Raises the foreign-key violation a constraint would, naming the constraint it replaces.
CREATE FUNCTION os_require_user(p_user bigint, p_constraint text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_user IS NOT NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = p_user) THEN
        RAISE EXCEPTION 'insert violates % : user % does not exist', p_constraint, p_user
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = p_constraint;
    END IF;
END $$;
COMMENT ON FUNCTION os_require_user(bigint, text) IS
    'A referenced user exists (a foreign key''s check without its row lock; users are never deleted nor renumbered).';

CREATE FUNCTION sandboxes_references_users() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A child's owner is its parent's (sandboxes_before_insert), who already names a user.
    IF NEW.parent_id IS NULL THEN
        PERFORM os_require_user(NEW.owner_id, 'sandboxes_owner_fkey');
    END IF;
    PERFORM os_require_user(NEW.created_by_user, 'sandboxes_creator_user_fkey');
    RETURN NULL;
END $$;
COMMENT ON FUNCTION sandboxes_references_users() IS
    'Trigger body: a new sandbox''s owner and creating user exist.';

CREATE FUNCTION sandbox_policies_references_users() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_require_user(NEW.set_by_user, 'sandbox_policies_user_fkey');
    RETURN NULL;
END $$;
COMMENT ON FUNCTION sandbox_policies_references_users() IS
    'Trigger body: the user who set a policy version exists.';

-- As the owner, with a fixed path: the checks run inside the gateway's calls and any
-- operator's insert alike.
ALTER FUNCTION users_id_fixed() OWNER TO openshell_owner;
ALTER FUNCTION os_require_user(bigint, text) OWNER TO openshell_owner;
ALTER FUNCTION sandboxes_references_users() OWNER TO openshell_owner;
ALTER FUNCTION sandbox_policies_references_users() OWNER TO openshell_owner;
ALTER FUNCTION os_require_user(bigint, text) SECURITY DEFINER SET search_path = public, pg_temp;
REVOKE EXECUTE ON FUNCTION users_id_fixed(), os_require_user(bigint, text), sandboxes_references_users(),
    sandbox_policies_references_users() FROM PUBLIC;

-- Owner and creator are fixed after insert (sandboxes_before_update), policy versions are
-- append-only: an insert is the only time to check.
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_owner_fkey, DROP CONSTRAINT sandboxes_creator_user_fkey;
CREATE CONSTRAINT TRIGGER sandboxes_users_fkey AFTER INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_references_users();
COMMENT ON TRIGGER sandboxes_users_fkey ON sandboxes IS
    'The owner and the creating user exist (for sandboxes_owner_fkey and sandboxes_creator_user_fkey, without their lock on the user''s row).';

ALTER TABLE sandbox_policies DROP CONSTRAINT sandbox_policies_user_fkey;
CREATE CONSTRAINT TRIGGER sandbox_policies_user_fkey AFTER INSERT ON sandbox_policies
    FOR EACH ROW EXECUTE FUNCTION sandbox_policies_references_users();
COMMENT ON TRIGGER sandbox_policies_user_fkey ON sandbox_policies IS
    'The user who set the version exists (a foreign key''s check without its lock on the user''s row).';
