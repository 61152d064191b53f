-- References checked without a foreign key.
--
-- A foreign key check locks the referenced row (FOR KEY SHARE) and reads its index page. Every
-- admission referenced its user three times (so all admissions of one user extended one
-- MultiXact on one users row), and the policy and request-id rows name the child inserted a
-- moment before (whose index page every concurrent admission writes). These triggers check
-- the same references as plain reads at insert, raising the foreign-key violation a
-- constraint would, and know without a read that the sandbox this transaction just made
-- exists. Users are never deleted and never change id (sql/users.sql), sandboxes are never
-- deleted (sql/append_only.sql): a reference that held at insert holds for good.

-- Raises the foreign-key violation a constraint would, naming the constraint it replaces.
CREATE OR REPLACE FUNCTION os_require_user(p_user bigint, p_constraint text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF p_user IS NOT NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = p_user) THEN
        RAISE EXCEPTION 'insert violates % : user % does not exist', p_constraint, p_user
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = p_constraint;
    END IF;
END $$;
COMMENT ON FUNCTION os_require_user(bigint, text) IS
    'A referenced user exists (a foreign key''s check without its row lock; users are never deleted nor renumbered).';

-- One call as the owner (an operator inserting may not read users), checking inline. Owner
-- and creator are fixed after insert (sandboxes_before_update) and policy versions are
-- append-only: an insert is the only time to check.
CREATE OR REPLACE FUNCTION sandboxes_references_users() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- A child's owner is its parent's (sandboxes_before_insert), who already names a user.
    IF NEW.parent_id IS NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = NEW.owner_id) THEN
        PERFORM os_require_user(NEW.owner_id, 'sandboxes_owner_fkey');
    END IF;
    IF NEW.created_by_user IS NOT NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = NEW.created_by_user) THEN
        PERFORM os_require_user(NEW.created_by_user, 'sandboxes_creator_user_fkey');
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION sandboxes_references_users() IS
    'Trigger body: a new sandbox''s owner and creating user exist.';
-- Nothing to check for a child that names no user but its owner (a child's owner is its
-- parent's, set by sandboxes_before_insert: an existing user): a child a sandbox created,
-- or one its owner created.
CREATE CONSTRAINT TRIGGER sandboxes_users_fkey AFTER INSERT ON sandboxes
    FOR EACH ROW WHEN (NEW.parent_id IS NULL OR (NEW.created_by_user IS NOT NULL AND NEW.created_by_user <> NEW.owner_id))
    EXECUTE FUNCTION sandboxes_references_users();
COMMENT ON TRIGGER sandboxes_users_fkey ON sandboxes IS
    'The owner and the creating user exist (for sandboxes_owner_fkey and sandboxes_creator_user_fkey, without their lock on the user''s row).';

CREATE OR REPLACE FUNCTION sandbox_policies_references_users() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM users WHERE id = NEW.set_by_user) THEN
        PERFORM os_require_user(NEW.set_by_user, 'sandbox_policies_user_fkey');
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION sandbox_policies_references_users() IS
    'Trigger body: the user who set a policy version exists.';
CREATE CONSTRAINT TRIGGER sandbox_policies_user_fkey AFTER INSERT ON sandbox_policies
    FOR EACH ROW WHEN (NEW.set_by_user IS NOT NULL)
    EXECUTE FUNCTION sandbox_policies_references_users();
COMMENT ON TRIGGER sandbox_policies_user_fkey ON sandbox_policies IS
    'The user who set the version exists (a foreign key''s check without its lock on the user''s row).';

-- The two rows an admission writes after its child, in the same transaction (the policy's
-- first version and the request-id claim), name it; a foreign key would read its index page
-- (the newest of the children's ids, which every concurrent admission writes). The counting
-- trigger records the sandbox this session inserted last (os.created); any other one is
-- looked up.
CREATE OR REPLACE FUNCTION os_created_here(p_id uuid) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce(p_id::text = current_setting('os.created', true), false)
$$;
COMMENT ON FUNCTION os_created_here(uuid) IS
    'Whether P_ID is the sandbox this session inserted last (recorded by the counting trigger; a rollback forgets it).';

-- As the owner: a deferred check runs at commit as the session's role (the gateway's cannot
-- read sandboxes).
CREATE OR REPLACE FUNCTION os_references_sandbox() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- The sandbox this transaction just made exists; any other is looked up (off the hot path).
    IF NOT os_created_here(NEW.sandbox_id) AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE id = NEW.sandbox_id) THEN
        RAISE EXCEPTION 'insert into % violates its reference to sandboxes: sandbox % does not exist',
                        TG_TABLE_NAME, NEW.sandbox_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_TABLE_NAME || '_sandbox_fkey';
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION os_references_sandbox() IS
    'Trigger body: the row''s sandbox_id names an existing sandbox (the foreign key, without a read of the new sandbox''s index page).';
-- The claim is made before its child exists (see admit_child): checked at commit.
CREATE CONSTRAINT TRIGGER create_requests_sandbox_fkey AFTER INSERT OR UPDATE ON create_requests
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION os_references_sandbox();
COMMENT ON TRIGGER create_requests_sandbox_fkey ON create_requests IS
    'A request-id claim names an existing sandbox by the end of its transaction.';
-- The sandbox this transaction just inserted exists: the policy row admit_child writes after
-- it needs no call (os_created_here, decided in the WHEN clause). A deferred check's WHEN is
-- evaluated at insert, before the sandbox exists, so create_requests' is not deferred-WHEN.
CREATE CONSTRAINT TRIGGER sandbox_policies_sandbox_fkey AFTER INSERT OR UPDATE ON sandbox_policies
    FOR EACH ROW WHEN (NEW.sandbox_id::text IS DISTINCT FROM current_setting('os.created', true))
    EXECUTE FUNCTION os_references_sandbox();
COMMENT ON TRIGGER sandbox_policies_sandbox_fkey ON sandbox_policies IS
    'A policy version belongs to an existing sandbox (rows of both tables are never deleted).';
