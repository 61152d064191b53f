-- A sandbox's row: lineage from its parent, fixed for good, and its phase machine.
--
-- Lineage (parent_id, root_id, depth), owner, creator, name, command and runner are set at
-- insert from the parent row, never from the caller, and never change. The phases:
-- PROVISIONING -> READY -> STOPPING -> STOPPED -> DELETED, and ERROR from PROVISIONING or
-- READY. A sandbox is live (counted against breadth and total) while PROVISIONING, READY or
-- STOPPING. Rows are never deleted (sql/append_only.sql).

CREATE OR REPLACE FUNCTION os_is_live(phase text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT phase IN ('PROVISIONING', 'READY', 'STOPPING') $$;
COMMENT ON FUNCTION os_is_live(text) IS
    'A live sandbox counts against breadth and total: not STOPPED, DELETED or ERROR.';

-- Sandbox ids are time-ordered (UUID version 7 layout), children's in a region of their own
-- (top bit set) and roots' in another. SSI tracks reads of B-tree indexes by leaf page, not
-- by key: every new child's index entry lands on the newest page of the children's region,
-- which no admission reads, while the parents and roots an admission looks up sit on older
-- pages that no longer receive inserts. (The id column's default names this function, so it
-- is redefined in place, never dropped.)
CREATE OR REPLACE FUNCTION os_new_id(p_child boolean) RETURNS uuid LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    r bytea := uuid_send(gen_random_uuid());
    t bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint & 140737488355327;
BEGIN
    IF p_child THEN
        t := t | 140737488355328;
    END IF;
    -- 48 bits of time, the version nibble 7, then the random bits (their variant kept).
    RETURN encode(substring(int8send(t) FROM 3 FOR 6) || set_byte(substring(r FROM 7 FOR 10), 0, (get_byte(r, 6) & 15) | 112),
                  'hex')::uuid;
END $$;
COMMENT ON FUNCTION os_new_id(boolean) IS
    'A new sandbox id in UUID version 7 layout (48-bit millisecond time, then random bits), children''s with the top bit set: new index entries go to the newest page of their region, which admissions never read, so SSI''s page locks of one tree''s admission do not meet another tree''s insert.';

CREATE OR REPLACE FUNCTION os_phase_transition_ok(from_phase text, to_phase text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT from_phase = to_phase OR (from_phase, to_phase) IN (
        ('PROVISIONING', 'READY'), ('PROVISIONING', 'STOPPING'), ('PROVISIONING', 'ERROR'),
        ('READY', 'STOPPING'), ('READY', 'ERROR'),
        ('STOPPING', 'STOPPED'),
        ('STOPPED', 'DELETED'), ('ERROR', 'DELETED'))
$$;
COMMENT ON FUNCTION os_phase_transition_ok(text, text) IS
    'The phase machine of a sandbox.';

-- The parent's row is locked FOR SHARE and must be running: a stop that committed after the
-- admission's snapshot makes the lock fail with a serialization failure (retried, then
-- refused: the parent is not running); while both are in progress, whichever touched the
-- parent's row second waits for the other's commit. The tree's row is locked before it (the
-- lock order of sql/limits.sql), so inserts into one tree queue there having written at most
-- admit_child's request-id claim, by an upsert that changes nothing: it finds the row with a
-- dirty snapshot, so SSI locks no page of trees_pkey, which every tree shares and where a tree
-- row's update that is not HOT adds an entry. A requested template travels in the row or in
-- the transaction-local setting openshell.child_template (admit_child's).
CREATE OR REPLACE FUNCTION sandboxes_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
    requested jsonb;
    v_root uuid;
    missing boolean;
BEGIN
    -- The name's form, for every inserter (sql/names.sql holds the rule).
    IF NOT os_sandbox_name_ok(NEW.name) THEN
        PERFORM os_check_name_format(NEW.name);
    END IF;
    IF NEW.parent_id IS NULL THEN
        NEW.root_id := NEW.id;
        NEW.depth := 0;
    ELSE
        -- The parent's tree (lineage never changes), its row locked, then the parent's row,
        -- read again under its lock. A root's tree row is made with the root
        -- (sandboxes_count_insert) and never deleted.
        SELECT s.root_id INTO v_root FROM sandboxes s WHERE s.id = NEW.parent_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'parent % does not exist', NEW.parent_id;
        END IF;
        INSERT INTO trees AS t (root_id) VALUES (v_root)
        ON CONFLICT (root_id) DO UPDATE SET live_total = t.live_total WHERE false
        RETURNING true INTO missing;
        IF missing THEN
            RAISE EXCEPTION 'tree % has no counter row', v_root;
        END IF;
        SELECT * INTO p FROM sandboxes WHERE id = NEW.parent_id FOR SHARE;
        IF p.kind = 'tool' THEN
            RAISE EXCEPTION 'a tool sandbox cannot have children';
        END IF;
        IF p.phase NOT IN ('PROVISIONING', 'READY') THEN
            PERFORM os_refuse('NOT_ALLOWED', format('parent %s is %s', p.name, p.phase),
                jsonb_build_object('reason', 'parent_not_running', 'parent', p.name, 'phase', p.phase));
        END IF;
        -- Lineage comes from the parent row, never from the caller.
        NEW.root_id := p.root_id;
        NEW.depth := p.depth + 1;
        NEW.owner_id := p.owner_id;
        requested := coalesce(nullif(NEW.template, '{}'::jsonb),
                              nullif(current_setting('openshell.child_template', true), '')::jsonb);
        IF requested IS NULL OR requested = '{}'::jsonb THEN
            NEW.template := coalesce(p.template, '{}'::jsonb);
        ELSE
            NEW.template := os_fit_template(p.template, requested);
        END IF;
    END IF;
    NEW.phase := 'PROVISIONING';
    RETURN NEW;
END $$;
COMMENT ON FUNCTION sandboxes_before_insert() IS
    'Trigger body: a new sandbox''s name form, lineage, owner and template from its running parent; it starts PROVISIONING.';
CREATE TRIGGER sandboxes_before_insert BEFORE INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_before_insert();
COMMENT ON TRIGGER sandboxes_before_insert ON sandboxes IS
    'Derives root_id, depth, owner and template from the parent; every sandbox starts PROVISIONING.';

CREATE OR REPLACE FUNCTION sandboxes_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.parent_id, NEW.root_id, NEW.depth, NEW.kind, NEW.owner_id, NEW.created_at,
        NEW.created_by_user, NEW.created_by_sandbox, NEW.created_by_program, NEW.name, NEW.command,
        NEW.template, NEW.runner)
       IS DISTINCT FROM
       (OLD.id, OLD.parent_id, OLD.root_id, OLD.depth, OLD.kind, OLD.owner_id, OLD.created_at,
        OLD.created_by_user, OLD.created_by_sandbox, OLD.created_by_program, OLD.name, OLD.command,
        OLD.template, OLD.runner) THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('lineage, creator, name, command and runner of sandbox %s are fixed at creation', OLD.id));
    END IF;
    -- A policy change is one step to a version that exists.
    IF NEW.policy_version <> OLD.policy_version AND (
           NEW.policy_version <> OLD.policy_version + 1
           OR NOT EXISTS (SELECT 1 FROM sandbox_policies WHERE sandbox_id = NEW.id AND version = NEW.policy_version)) THEN
        PERFORM os_refuse('CONFLICT', format('sandbox %s can only move to the next recorded policy version', OLD.id));
    END IF;
    IF NOT os_phase_transition_ok(OLD.phase, NEW.phase) THEN
        PERFORM os_refuse('CONFLICT', format('sandbox %s cannot go from %s to %s', OLD.id, OLD.phase, NEW.phase));
    END IF;
    -- A stopping sandbox's supervisor loses its credential at once.
    IF NEW.phase NOT IN ('PROVISIONING', 'READY') THEN
        NEW.credential_hash := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;
COMMENT ON FUNCTION sandboxes_before_update() IS
    'Trigger body: fixed lineage, creator, name, command and runner; policy versions one step at a time; the phase machine; a stopping sandbox loses its credential.';
CREATE TRIGGER sandboxes_before_update BEFORE UPDATE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_before_update();
COMMENT ON TRIGGER sandboxes_before_update ON sandboxes IS
    'Keeps lineage, name, command and runner fixed, policy versions stepwise, enforces the phase machine and revokes the credential when a sandbox stops.';

-- A credential can be cleared (a stopping sandbox loses it), never set or changed after
-- insert: whoever could write it could mint a working credential for a running sandbox.
CREATE OR REPLACE FUNCTION sandboxes_credential_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.credential_hash IS NOT NULL AND NEW.credential_hash IS DISTINCT FROM OLD.credential_hash THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('the credential of sandbox %s can only be cleared, never set or changed', OLD.id));
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION sandboxes_credential_frozen() IS
    'Trigger body: refuses setting or changing a sandbox''s credential after insert.';
-- Named to fire before sandboxes_before_update (triggers fire in name order), which clears it on a stop.
CREATE TRIGGER sandboxes_a_credential_frozen BEFORE UPDATE OF credential_hash ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_credential_frozen();
COMMENT ON TRIGGER sandboxes_a_credential_frozen ON sandboxes IS
    'credential_hash can only be cleared after insert, never set or changed.';

CREATE OR REPLACE FUNCTION sandbox_tree(p_id uuid)
RETURNS TABLE (id uuid, tree_path text) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH RECURSIVE t(id, tree_path) AS (
        SELECT s.id, s.name FROM sandboxes s WHERE s.id = p_id
        UNION ALL
        SELECT c.id, t.tree_path || '/' || c.name FROM sandboxes c JOIN t ON c.parent_id = t.id
    )
    SELECT t.id, t.tree_path FROM t
$$;
COMMENT ON FUNCTION sandbox_tree(uuid) IS
    'A sandbox and all its descendants with their path from it, following parent_id.';
