-- V28: no admission reads another tree's index page of parents.
--
-- admit_child read its parent's live_children (for the receipt) by an index scan of
-- parents_pkey, and SSI locks the leaf page such a scan reads, not the key: one page holds
-- the counters of hundreds of parents, all trees' alike. A parent's counter update that
-- found no room on its heap page (HOT pruning needs the page unpinned, which 32 concurrent
-- admissions rarely leave it) adds an index entry to that leaf page, a write into what every
-- concurrent admission had read: each became a pivot candidate, and with fsync off, where
-- transactions overlap most, 1-2% of admissions across 32 trees were rolled back and retried.
--
-- The counting trigger already holds the new count (its upsert's RETURNING) and now leaves
-- it in the transaction-local setting os.live_children; admit_child reads it after its
-- insert, for the receipt. The upsert finds the existing row through the unique index with
-- a dirty snapshot, which SSI does not lock, and then locks the row itself: the breadth check
-- stays on the latest count under the row lock, as before.
--
-- Both set_config calls are one assignment (PL/pgSQL's simple-expression path), not a
-- PERFORM, which starts an executor for a query.

CREATE OR REPLACE FUNCTION sandboxes_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g grants;
    total integer;
    children integer;
    ignored text;
BEGIN
    IF NEW.parent_id IS NULL THEN
        -- For the session, not the transaction: a deferred check runs at commit, after the
        -- gateway's function (whose SET clause ends its transaction-local settings)
        -- returned. A rollback undoes it, and rows are never deleted, so it always names a
        -- sandbox that exists.
        ignored := set_config('os.created', NEW.id::text, false);
        INSERT INTO trees (root_id) VALUES (NEW.id);
        RETURN NULL;
    END IF;
    SELECT * INTO g FROM grants WHERE root_id = NEW.root_id AND ended_at IS NULL;
    IF g.id IS NULL OR g.expires_at <= now() THEN
        PERFORM os_check_grant(NEW.root_id, g, NULL, NULL);
    END IF;
    IF NEW.kind = 'agent' AND NEW.depth > g.max_depth THEN
        PERFORM os_refuse('LIMIT_REACHED',
            format('depth limit reached: a child of depth %s, max_depth is %s', NEW.depth, g.max_depth),
            jsonb_build_object('limit', 'depth', 'max', g.max_depth, 'current', NEW.depth));
    END IF;
    -- The tree's row first (see the lock order in V5), then the parent's count.
    UPDATE trees SET live_total = live_total + 1, admitted_max_total = g.max_total
     WHERE root_id = NEW.root_id AND live_total < g.max_total
    RETURNING live_total INTO total;
    IF NOT FOUND THEN
        -- Refused: name the first limit in the documented order (breadth, then total).
        SELECT live_total INTO total FROM trees WHERE root_id = NEW.root_id;
        PERFORM os_refuse_breadth(NEW.parent_id, g);
        PERFORM os_refuse('LIMIT_REACHED',
            format('total limit reached: the tree has %s live descendants, max_total is %s', total, g.max_total),
            jsonb_build_object('limit', 'total', 'max', g.max_total, 'current', total));
    END IF;
    -- A first child makes the parent's row (when max_breadth admits one at all).
    INSERT INTO parents AS p (parent_id, live_children) SELECT NEW.parent_id, 1 WHERE g.max_breadth >= 1
    ON CONFLICT (parent_id) DO UPDATE SET live_children = p.live_children + 1
     WHERE p.live_children < g.max_breadth
    RETURNING live_children INTO children;
    IF NOT FOUND THEN
        PERFORM os_refuse_breadth(NEW.parent_id, g);
        RAISE EXCEPTION 'breadth count of parent % not taken', NEW.parent_id;
    END IF;
    -- os.created as above; os.live_children for admit_child's receipt, this transaction only.
    ignored := set_config('os.created', NEW.id::text, false) || set_config('os.live_children', children::text, true);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION admit_child(p_caller os_caller, p_parent text, p_name text, p_kind os_kind, p_command text[],
                                       p_policy jsonb, p_policy_hash bytea, p_proof os_admission_proof,
                                       p_credential_hash bytea, p_request_id text, p_args_hash bytea, p_runner text,
                                       p_template jsonb DEFAULT NULL)
RETURNS TABLE (sandbox_id uuid, replayed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
    p_sandbox uuid := (p_caller).sandbox_id;
    p_user bigint := (p_caller).user_id;
    p_program text := (p_caller).program;
    parent sandboxes;
    g grants;
    v_id uuid;
    v_proved uuid := (p_proof).parent_id;
    v_caller text := CASE WHEN p_sandbox IS NOT NULL THEN 'sandbox:' || p_sandbox ELSE 'user:' || p_user END;
    v_creator bigint := CASE WHEN p_sandbox IS NULL THEN p_user END;
    prior create_requests;
    claimed boolean;
    v_total integer;
    v_depth integer;
    v_children integer;
    r record;
BEGIN
    IF p_kind IS NULL THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'kind: must be agent or tool', jsonb_build_object('field', 'kind'));
    END IF;

    -- Who may create under whom: a sandbox only under itself, a user under their own trees.
    IF p_sandbox IS NOT NULL THEN
        SELECT * INTO parent FROM sandboxes WHERE id = p_sandbox;
        IF NOT FOUND OR parent.phase NOT IN ('PROVISIONING', 'READY') THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the calling sandbox is not running',
                              jsonb_build_object('reason', 'caller_not_running'));
        END IF;
        IF parent.kind = 'tool' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'a tool sandbox cannot create children',
                              jsonb_build_object('reason', 'tool'));
        END IF;
        IF p_program IS NULL OR p_program = '' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the calling program is unknown; calls from a sandbox come through its supervisor',
                              jsonb_build_object('reason', 'program_unknown'));
        END IF;
        IF p_parent IS NOT NULL AND p_parent <> '' AND p_parent <> parent.name AND p_parent <> parent.id::text THEN
            PERFORM os_refuse('NOT_ALLOWED', 'a sandbox can only create children under itself',
                              jsonb_build_object('reason', 'not_under_itself', 'field', 'parent'));
        END IF;
    ELSE
        IF p_parent IS NULL OR p_parent = '' THEN
            PERFORM os_refuse('INVALID_ARGUMENT', 'parent: required when a user creates a child',
                              jsonb_build_object('field', 'parent'));
        END IF;
        -- The proved parent, by primary key, when the reference still names it (a name is
        -- unique among the owner's sandboxes that are not DELETED); else by the reference.
        IF v_proved IS NOT NULL THEN
            SELECT * INTO parent FROM sandboxes WHERE id = v_proved;
        END IF;
        IF parent.id IS NULL OR parent.phase = 'DELETED'
           OR NOT (p_parent = parent.id::text OR (p_parent = parent.name AND parent.owner_id = p_user))
           OR (parent.owner_id <> p_user AND NOT os_is_admin(p_user)) THEN
            parent := resolve_sandbox(p_user, NULL, p_parent);
        END IF;
    END IF;
    IF parent.kind = 'tool' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('%s is a tool sandbox and cannot have children', parent.name),
                          jsonb_build_object('reason', 'tool', 'parent', parent.name));
    END IF;
    IF parent.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', format('parent %s is %s', parent.name, parent.phase),
                          jsonb_build_object('reason', 'parent_not_running', 'parent', parent.name, 'phase', parent.phase));
    END IF;
    -- The tree's row first: admissions of one tree queue here, and under SERIALIZABLE a
    -- loser fails (40001, retried) before it has written anything. With it, in the same
    -- statement, the tree's grant and the global maximum's version. The parent's count is
    -- not read here (see V28): the counting trigger reports it.
    SELECT t.live_total AS total, gr AS grant_row,
           coalesce((SELECT max(version) FROM global_max_policies), 0) AS global_version
      INTO r
      FROM trees t
      LEFT JOIN grants gr ON gr.root_id = t.root_id AND gr.ended_at IS NULL
     WHERE t.root_id = parent.root_id
       FOR UPDATE OF t;
    v_total := r.total;
    g := r.grant_row;
    -- Expiry, revocation and (through the door) the program; the counting trigger checks
    -- the grant again for any insert, with the limits.
    IF g.id IS NULL OR g.expires_at <= now() OR (p_sandbox IS NOT NULL AND p_program IS DISTINCT FROM g.program) THEN
        PERFORM os_check_grant(parent.root_id, g, p_sandbox, p_program);
    END IF;
    IF parent.id IS DISTINCT FROM v_proved OR parent.policy_version IS DISTINCT FROM (p_proof).parent_version THEN
        PERFORM os_refuse('POLICY_CHANGED',
            format('the parent %s or its policy changed since the proof (now %s version %s, proved against %s version %s)',
                   parent.name, parent.id, parent.policy_version, v_proved, (p_proof).parent_version),
            jsonb_build_object('reason', 'policy_changed'));
    END IF;
    IF r.global_version IS DISTINCT FROM (p_proof).global_version THEN
        PERFORM os_check_global_version(to_jsonb(p_proof));
    END IF;

    IF p_name IS NULL OR p_name = '' THEN
        p_name := left(parent.name, 54) || '-' || left(replace(gen_random_uuid()::text, '-', ''), 8);
    ELSIF length(p_name) > 63 OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' OR length(p_name) = 36 THEN
        PERFORM os_check_name_format(p_name);
    END IF;
    v_id := os_new_id(true);

    -- The request id is claimed first: a repeat finds the claim and answers with its child.
    IF p_request_id IS NOT NULL AND p_request_id <> '' THEN
        IF length(p_request_id) > 128 OR p_request_id !~ '^[A-Za-z0-9._:-]+$' THEN
            PERFORM os_check_request_id(p_request_id);
        END IF;
        INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id)
        VALUES (v_caller, p_request_id, p_args_hash, v_id)
        ON CONFLICT (caller, request_id) DO NOTHING
        RETURNING true INTO claimed;
        IF claimed IS NULL THEN
            SELECT * INTO prior FROM create_requests WHERE caller = v_caller AND request_id = p_request_id;
            IF prior.args_hash IS DISTINCT FROM p_args_hash THEN
                PERFORM os_refuse('CONFLICT',
                    format('request_id %s was already used with different arguments', p_request_id),
                    jsonb_build_object('field', 'request_id', 'sandbox_id', prior.sandbox_id));
            END IF;
            RETURN QUERY SELECT prior.sandbox_id, true;
            RETURN;
        END IF;
    END IF;

    -- A requested template travels to the insert trigger, which fits it to the parent's (it
    -- can only narrow); this transaction's setting ends with the insert.
    IF p_template IS NOT NULL THEN
        PERFORM set_config('openshell.child_template', p_template::text, true);
    END IF;
    INSERT INTO sandboxes (id, name, owner_id, parent_id, root_id, depth, kind, command, created_by_user,
                           created_by_sandbox, created_by_program, credential_hash, runner)
    VALUES (v_id, p_name, parent.owner_id, parent.id, parent.root_id, parent.depth + 1, p_kind::text, p_command,
            v_creator, p_sandbox, nullif(p_program, ''), p_credential_hash, p_runner)
    ON CONFLICT (owner_id, name) WHERE phase <> 'DELETED' DO NOTHING
    RETURNING depth INTO v_depth;
    IF p_template IS NOT NULL THEN
        PERFORM set_config('openshell.child_template', '', true);
    END IF;
    IF v_depth IS NULL THEN
        PERFORM os_refuse('CONFLICT', format('a sandbox named %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
    v_children := current_setting('os.live_children')::integer;
    INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user, set_by_sandbox)
    VALUES (v_id, 1, p_policy, p_policy_hash, v_creator, p_sandbox);
    -- The counters as the counting trigger left them: nothing else changes them while this
    -- transaction holds the tree's row. The limits are the grant's as read above, in this
    -- snapshot: the ones the counting trigger checked (audit_log_admission_limits skips
    -- a receipt that has them).
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, request_id, details)
    VALUES ('sandbox.create_child', 'admitted', v_creator, p_sandbox,
            nullif(p_program, ''), parent.owner_id, v_id, parent.id, parent.root_id, nullif(p_request_id, ''),
            jsonb_build_object('name', p_name, 'kind', p_kind, 'depth', v_depth,
                               'grant_id', g.id, 'live_children', v_children, 'live_total', v_total + 1,
                               'policy_hash', encode(p_policy_hash, 'hex'), 'verdict', (p_proof).verdict,
                               'max_depth', g.max_depth, 'max_breadth', g.max_breadth, 'max_total', g.max_total));
    RETURN QUERY SELECT v_id, false;
END $$;
