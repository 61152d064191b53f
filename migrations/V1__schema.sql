-- The gateway's schema. Every invariant of the delegation tree lives here: lineage,
-- grants, limits, request_id idempotency, phase transitions and the audit log. The
-- gateway calls the functions below inside SERIALIZABLE transactions and retries on
-- SQLSTATE 40001; an operator in psql sees (and is held to) the same rules.
--
-- Refusals raise the project's own SQLSTATEs, with a JSON object as DETAIL:
--   OS001 NOT_ALLOWED   OS002 LIMIT_REACHED   OS004 POLICY_UNPROVABLE
--   OS005 INVALID_ARGUMENT   OS006 NOT_FOUND   OS007 CONFLICT
--   OS009 the parent's policy changed since it was proved against (the gateway re-proves)

-- ---------------------------------------------------------------- helpers

CREATE FUNCTION os_refuse(code text, message text, details jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    state text := CASE code
        WHEN 'NOT_ALLOWED' THEN 'OS001'
        WHEN 'LIMIT_REACHED' THEN 'OS002'
        WHEN 'POLICY_UNPROVABLE' THEN 'OS004'
        WHEN 'INVALID_ARGUMENT' THEN 'OS005'
        WHEN 'NOT_FOUND' THEN 'OS006'
        WHEN 'CONFLICT' THEN 'OS007'
        WHEN 'POLICY_CHANGED' THEN 'OS009'
    END;
BEGIN
    IF state IS NULL THEN
        RAISE EXCEPTION 'os_refuse: unknown code %', code;
    END IF;
    RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = details::text;
END $$;
COMMENT ON FUNCTION os_refuse(text, text, jsonb) IS
    'Raises a refusal with the project SQLSTATE for CODE and DETAIL = the JSON details.';

CREATE FUNCTION os_is_live(phase text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT phase IN ('PROVISIONING', 'READY', 'STOPPING') $$;
COMMENT ON FUNCTION os_is_live(text) IS
    'A live sandbox counts against breadth and total: not STOPPED, DELETED or ERROR.';

CREATE FUNCTION os_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'OS001';
END $$;
COMMENT ON FUNCTION os_forbid_change() IS 'Trigger body for append-only tables.';

-- ---------------------------------------------------------------- users

CREATE TABLE users (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    name        text NOT NULL,
    is_admin    boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_pkey PRIMARY KEY (id),
    CONSTRAINT users_name_key UNIQUE (name),
    CONSTRAINT users_name_format CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$')
);
COMMENT ON TABLE users IS 'People who log in to the gateway; each owns the trees they create.';
COMMENT ON COLUMN users.id IS 'Surrogate key.';
COMMENT ON COLUMN users.name IS 'Login name: lower case letter, then up to 62 of [a-z0-9_-].';
COMMENT ON COLUMN users.is_admin IS 'Admins add users, see every tree and may act on any sandbox.';
COMMENT ON COLUMN users.created_at IS 'When the user was added.';

CREATE TABLE user_tokens (
    token_hash  bytea NOT NULL,
    user_id     bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CONSTRAINT user_tokens_pkey PRIMARY KEY (token_hash),
    CONSTRAINT user_tokens_user_fkey FOREIGN KEY (user_id) REFERENCES users (id),
    CONSTRAINT user_tokens_hash_length CHECK (length(token_hash) = 32)
);
COMMENT ON TABLE user_tokens IS 'Login tokens, stored as SHA-256 hashes only; the token itself is shown once.';
COMMENT ON COLUMN user_tokens.token_hash IS 'SHA-256 of the bearer token.';
COMMENT ON COLUMN user_tokens.user_id IS 'Whose token it is.';
COMMENT ON COLUMN user_tokens.created_at IS 'When the token was minted.';
COMMENT ON COLUMN user_tokens.revoked_at IS 'Set when the token stops being accepted.';

-- ---------------------------------------------------------------- sandboxes

CREATE TABLE sandboxes (
    id                  uuid NOT NULL DEFAULT gen_random_uuid(),
    name                text NOT NULL,
    owner_id            bigint NOT NULL,
    parent_id           uuid,
    root_id             uuid NOT NULL,
    depth               integer NOT NULL,
    kind                text NOT NULL,
    phase               text NOT NULL DEFAULT 'PROVISIONING',
    phase_reason        text NOT NULL DEFAULT '',
    command             text[] NOT NULL,
    template            jsonb NOT NULL DEFAULT '{}',
    policy_version      integer NOT NULL DEFAULT 1,
    created_by_user     bigint,
    created_by_sandbox  uuid,
    created_by_program  text,
    credential_hash     bytea,
    exit_code           integer,
    delete_requested    boolean NOT NULL DEFAULT false,
    runner              text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sandboxes_pkey PRIMARY KEY (id),
    CONSTRAINT sandboxes_owner_fkey FOREIGN KEY (owner_id) REFERENCES users (id),
    CONSTRAINT sandboxes_parent_fkey FOREIGN KEY (parent_id) REFERENCES sandboxes (id),
    CONSTRAINT sandboxes_root_fkey FOREIGN KEY (root_id) REFERENCES sandboxes (id)
        DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT sandboxes_creator_user_fkey FOREIGN KEY (created_by_user) REFERENCES users (id),
    CONSTRAINT sandboxes_creator_sandbox_fkey FOREIGN KEY (created_by_sandbox) REFERENCES sandboxes (id),
    CONSTRAINT sandboxes_credential_key UNIQUE (credential_hash),
    CONSTRAINT sandboxes_name_format CHECK (
        name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'
        AND name !~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'),
    CONSTRAINT sandboxes_kind_check CHECK (kind IN ('agent', 'tool')),
    CONSTRAINT sandboxes_phase_check CHECK (
        phase IN ('PROVISIONING', 'READY', 'STOPPING', 'STOPPED', 'ERROR', 'DELETED')),
    CONSTRAINT sandboxes_lineage_check CHECK (
        (parent_id IS NULL AND root_id = id AND depth = 0 AND kind = 'agent')
        OR (parent_id IS NOT NULL AND root_id <> id AND depth > 0)),
    CONSTRAINT sandboxes_creator_check CHECK (
        (created_by_user IS NULL) <> (created_by_sandbox IS NULL)),
    CONSTRAINT sandboxes_root_created_by_user CHECK (
        parent_id IS NOT NULL OR created_by_user IS NOT NULL),
    CONSTRAINT sandboxes_command_check CHECK (
        cardinality(command) BETWEEN 1 AND 256),
    CONSTRAINT sandboxes_credential_length CHECK (
        credential_hash IS NULL OR length(credential_hash) = 32),
    CONSTRAINT sandboxes_credential_only_live CHECK (
        credential_hash IS NULL OR phase IN ('PROVISIONING', 'READY')),
    CONSTRAINT sandboxes_policy_version_check CHECK (policy_version >= 1)
);
COMMENT ON TABLE sandboxes IS
    'Every sandbox ever created. Lineage (parent_id, root_id, depth) is stored once at creation and never changes; rows are never deleted.';
COMMENT ON COLUMN sandboxes.id IS 'Sandbox id.';
COMMENT ON COLUMN sandboxes.name IS 'Name, unique among the owner''s sandboxes that are not DELETED.';
COMMENT ON COLUMN sandboxes.owner_id IS 'The user who owns the tree (the root''s creator).';
COMMENT ON COLUMN sandboxes.parent_id IS 'The sandbox it was created under; NULL for a root.';
COMMENT ON COLUMN sandboxes.root_id IS 'The root of its tree (itself for a root).';
COMMENT ON COLUMN sandboxes.depth IS 'Distance from the root, fixed at creation: the root is 0, a child is its parent''s depth + 1.';
COMMENT ON COLUMN sandboxes.kind IS 'agent: runs its own task and may create children; tool: runs commands for its parent, ignores depth, cannot create children.';
COMMENT ON COLUMN sandboxes.phase IS 'PROVISIONING, READY, STOPPING, STOPPED, ERROR or DELETED; transitions are checked by a trigger.';
COMMENT ON COLUMN sandboxes.phase_reason IS 'Why it entered its phase (exit code, stop request, driver error).';
COMMENT ON COLUMN sandboxes.command IS 'The main command and its arguments.';
COMMENT ON COLUMN sandboxes.template IS 'What it runs on (resources, image); a child copies its parent''s.';
COMMENT ON COLUMN sandboxes.policy_version IS 'The current version in sandbox_policies.';
COMMENT ON COLUMN sandboxes.created_by_user IS 'The user who created it, when a user did.';
COMMENT ON COLUMN sandboxes.created_by_sandbox IS 'The sandbox that created it, when a sandbox did.';
COMMENT ON COLUMN sandboxes.created_by_program IS 'The calling program inside that sandbox, when known.';
COMMENT ON COLUMN sandboxes.credential_hash IS 'SHA-256 of the credential its supervisor holds; cleared when it stops.';
COMMENT ON COLUMN sandboxes.exit_code IS 'Exit code of the main command (128 + signal), once reported.';
COMMENT ON COLUMN sandboxes.delete_requested IS 'Set by a delete: once STOPPED it becomes DELETED.';
COMMENT ON COLUMN sandboxes.runner IS 'The driver instance that runs its workload (a gateway judges only its own runner''s workloads).';
COMMENT ON COLUMN sandboxes.created_at IS 'When it was admitted.';
COMMENT ON COLUMN sandboxes.updated_at IS 'When its row last changed.';

CREATE UNIQUE INDEX sandboxes_owner_name_key ON sandboxes (owner_id, name) WHERE phase <> 'DELETED';
CREATE INDEX sandboxes_live_children_idx ON sandboxes (parent_id) WHERE os_is_live(phase);
CREATE INDEX sandboxes_live_tree_idx ON sandboxes (root_id) WHERE os_is_live(phase);
CREATE INDEX sandboxes_parent_idx ON sandboxes (parent_id);
CREATE INDEX sandboxes_owner_created_idx ON sandboxes (owner_id, created_at DESC, id);
COMMENT ON INDEX sandboxes_owner_name_key IS 'Names are unique per owner among sandboxes that are not DELETED.';
COMMENT ON INDEX sandboxes_live_children_idx IS 'Counts a parent''s live children (breadth).';
COMMENT ON INDEX sandboxes_live_tree_idx IS 'Counts a tree''s live descendants (total).';

CREATE FUNCTION sandboxes_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
BEGIN
    IF NEW.parent_id IS NULL THEN
        NEW.root_id := NEW.id;
        NEW.depth := 0;
    ELSE
        SELECT * INTO p FROM sandboxes WHERE id = NEW.parent_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'parent % does not exist', NEW.parent_id;
        END IF;
        IF p.kind = 'tool' THEN
            RAISE EXCEPTION 'a tool sandbox cannot have children';
        END IF;
        -- Lineage comes from the parent row, never from the caller.
        NEW.root_id := p.root_id;
        NEW.depth := p.depth + 1;
        NEW.owner_id := p.owner_id;
        NEW.template := p.template;
    END IF;
    NEW.phase := 'PROVISIONING';
    RETURN NEW;
END $$;
CREATE TRIGGER sandboxes_before_insert BEFORE INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_before_insert();
COMMENT ON TRIGGER sandboxes_before_insert ON sandboxes IS
    'Derives root_id, depth, owner and template from the parent; every sandbox starts PROVISIONING.';

CREATE FUNCTION os_phase_transition_ok(from_phase text, to_phase text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT from_phase = to_phase OR (from_phase, to_phase) IN (
        ('PROVISIONING', 'READY'), ('PROVISIONING', 'STOPPING'), ('PROVISIONING', 'ERROR'),
        ('READY', 'STOPPING'), ('READY', 'ERROR'),
        ('STOPPING', 'STOPPED'),
        ('STOPPED', 'DELETED'), ('ERROR', 'DELETED'))
$$;
COMMENT ON FUNCTION os_phase_transition_ok(text, text) IS 'The phase machine of a sandbox.';

CREATE FUNCTION sandboxes_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.parent_id, NEW.root_id, NEW.depth, NEW.kind, NEW.owner_id, NEW.created_at,
        NEW.created_by_user, NEW.created_by_sandbox, NEW.created_by_program, NEW.name, NEW.command,
        NEW.template, NEW.runner)
       IS DISTINCT FROM
       (OLD.id, OLD.parent_id, OLD.root_id, OLD.depth, OLD.kind, OLD.owner_id, OLD.created_at,
        OLD.created_by_user, OLD.created_by_sandbox, OLD.created_by_program, OLD.name, OLD.command,
        OLD.template, OLD.runner) THEN
        RAISE EXCEPTION 'lineage, creator, name, command and runner of sandbox % are fixed at creation', OLD.id
            USING ERRCODE = 'OS001';
    END IF;
    -- A policy change is one step to a version that exists.
    IF NEW.policy_version <> OLD.policy_version AND (
           NEW.policy_version <> OLD.policy_version + 1
           OR NOT EXISTS (SELECT 1 FROM sandbox_policies WHERE sandbox_id = NEW.id AND version = NEW.policy_version)) THEN
        RAISE EXCEPTION 'sandbox % can only move to the next recorded policy version', OLD.id USING ERRCODE = 'OS007';
    END IF;
    IF NOT os_phase_transition_ok(OLD.phase, NEW.phase) THEN
        RAISE EXCEPTION 'sandbox % cannot go from % to %', OLD.id, OLD.phase, NEW.phase
            USING ERRCODE = 'OS007';
    END IF;
    -- A stopping sandbox's supervisor loses its credential at once.
    IF NEW.phase NOT IN ('PROVISIONING', 'READY') THEN
        NEW.credential_hash := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;
CREATE TRIGGER sandboxes_before_update BEFORE UPDATE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_before_update();
COMMENT ON TRIGGER sandboxes_before_update ON sandboxes IS
    'Keeps lineage, name, command and runner fixed, policy versions stepwise, enforces the phase machine and revokes the credential when a sandbox stops.';

CREATE FUNCTION os_forbid_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% rows are kept for audit and cannot be deleted', TG_TABLE_NAME
        USING ERRCODE = 'OS001';
END $$;
CREATE TRIGGER sandboxes_no_delete BEFORE DELETE OR TRUNCATE ON sandboxes
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER sandboxes_no_delete ON sandboxes IS 'Sandbox rows stay for audit: delete marks DELETED.';

-- ---------------------------------------------------------------- policies

CREATE TABLE sandbox_policies (
    sandbox_id      uuid NOT NULL,
    version         integer NOT NULL,
    document        jsonb NOT NULL,
    hash            bytea NOT NULL,
    set_by_user     bigint,
    set_by_sandbox  uuid,
    set_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sandbox_policies_pkey PRIMARY KEY (sandbox_id, version),
    CONSTRAINT sandbox_policies_sandbox_fkey FOREIGN KEY (sandbox_id) REFERENCES sandboxes (id),
    CONSTRAINT sandbox_policies_user_fkey FOREIGN KEY (set_by_user) REFERENCES users (id),
    CONSTRAINT sandbox_policies_by_sandbox_fkey FOREIGN KEY (set_by_sandbox) REFERENCES sandboxes (id),
    CONSTRAINT sandbox_policies_version_check CHECK (version >= 1),
    CONSTRAINT sandbox_policies_hash_length CHECK (length(hash) = 32),
    CONSTRAINT sandbox_policies_document_object CHECK (jsonb_typeof(document) = 'object')
);
COMMENT ON TABLE sandbox_policies IS 'Every version of every sandbox''s policy; the current one is sandboxes.policy_version.';
COMMENT ON COLUMN sandbox_policies.sandbox_id IS 'Whose policy.';
COMMENT ON COLUMN sandbox_policies.version IS '1 at creation, +1 per change.';
COMMENT ON COLUMN sandbox_policies.document IS 'The policy in canonical JSON form.';
COMMENT ON COLUMN sandbox_policies.hash IS 'SHA-256 of the canonical form: equal policies hash equal.';
COMMENT ON COLUMN sandbox_policies.set_by_user IS 'The user who set this version, when a user did.';
COMMENT ON COLUMN sandbox_policies.set_by_sandbox IS 'The sandbox that set this version, when a sandbox did.';
COMMENT ON COLUMN sandbox_policies.set_at IS 'When this version was set.';
CREATE TRIGGER sandbox_policies_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON sandbox_policies
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER sandbox_policies_append_only ON sandbox_policies IS 'A policy change is a new version; old ones stay.';

CREATE TABLE global_max_policies (
    version     integer NOT NULL,
    document    jsonb,
    hash        bytea,
    set_by      bigint NOT NULL,
    set_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT global_max_policies_pkey PRIMARY KEY (version),
    CONSTRAINT global_max_policies_set_by_fkey FOREIGN KEY (set_by) REFERENCES users (id),
    CONSTRAINT global_max_policies_version_check CHECK (version >= 1),
    CONSTRAINT global_max_policies_document_hash CHECK ((document IS NULL) = (hash IS NULL)),
    CONSTRAINT global_max_policies_hash_length CHECK (hash IS NULL OR length(hash) = 32)
);
COMMENT ON TABLE global_max_policies IS
    'Every version of the admin''s global maximum policy; the highest version is current. Every sandbox''s policy, roots included, must be within it.';
COMMENT ON COLUMN global_max_policies.version IS 'Version, +1 per change; 0 (no row) means none was ever set.';
COMMENT ON COLUMN global_max_policies.document IS 'The policy in canonical JSON form; NULL clears the maximum.';
COMMENT ON COLUMN global_max_policies.hash IS 'SHA-256 of the canonical form.';
COMMENT ON COLUMN global_max_policies.set_by IS 'The admin who set it.';
COMMENT ON COLUMN global_max_policies.set_at IS 'When.';
CREATE TRIGGER global_max_policies_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON global_max_policies
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER global_max_policies_append_only ON global_max_policies IS 'A change is a new version.';

-- ---------------------------------------------------------------- grants

CREATE TABLE grants (
    id                  bigint GENERATED ALWAYS AS IDENTITY,
    root_id             uuid NOT NULL,
    max_depth           integer NOT NULL,
    max_breadth         integer NOT NULL,
    max_total           integer NOT NULL,
    expires_at          timestamptz NOT NULL,
    program             text NOT NULL,
    created_by          bigint NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    changed_by          bigint NOT NULL,
    changed_at          timestamptz NOT NULL DEFAULT now(),
    ended_at            timestamptz,
    end_reason          text,
    children_admitted   bigint NOT NULL DEFAULT 0,
    CONSTRAINT grants_pkey PRIMARY KEY (id),
    CONSTRAINT grants_root_fkey FOREIGN KEY (root_id) REFERENCES sandboxes (id),
    CONSTRAINT grants_created_by_fkey FOREIGN KEY (created_by) REFERENCES users (id),
    CONSTRAINT grants_changed_by_fkey FOREIGN KEY (changed_by) REFERENCES users (id),
    CONSTRAINT grants_max_depth_range CHECK (max_depth BETWEEN 0 AND 64),
    CONSTRAINT grants_max_breadth_range CHECK (max_breadth BETWEEN 0 AND 10000),
    CONSTRAINT grants_max_total_range CHECK (max_total BETWEEN 0 AND 100000),
    CONSTRAINT grants_program_format CHECK (program ~ '^/' AND length(program) <= 4096),
    CONSTRAINT grants_end_consistent CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    CONSTRAINT grants_end_reason_check CHECK (end_reason IN ('revoked', 'replaced')),
    CONSTRAINT grants_children_admitted_check CHECK (children_admitted >= 0)
);
COMMENT ON TABLE grants IS
    'The user''s one approval per tree. At most one grant per tree is not ended; it is live until it expires.';
COMMENT ON COLUMN grants.id IS 'Grant id.';
COMMENT ON COLUMN grants.root_id IS 'The root sandbox of the tree it governs.';
COMMENT ON COLUMN grants.max_depth IS 'Deepest agent depth admitted (the root is 0).';
COMMENT ON COLUMN grants.max_breadth IS 'Live children one parent may have.';
COMMENT ON COLUMN grants.max_total IS 'Live descendants the tree may have (root not counted).';
COMMENT ON COLUMN grants.expires_at IS 'After this instant the grant admits nothing.';
COMMENT ON COLUMN grants.program IS 'The one program allowed to call through the in-sandbox door.';
COMMENT ON COLUMN grants.created_by IS 'The user who created the grant.';
COMMENT ON COLUMN grants.created_at IS 'When it was created.';
COMMENT ON COLUMN grants.changed_by IS 'The user behind the latest change.';
COMMENT ON COLUMN grants.changed_at IS 'When it last changed.';
COMMENT ON COLUMN grants.ended_at IS 'When it was revoked or replaced; NULL while current.';
COMMENT ON COLUMN grants.end_reason IS 'revoked, or replaced (an expired grant replaced by a new one).';
COMMENT ON COLUMN grants.children_admitted IS 'Children admitted under this grant; every admission updates it, which serializes admissions within one tree.';

CREATE UNIQUE INDEX grants_one_current_per_tree ON grants (root_id) WHERE ended_at IS NULL;
COMMENT ON INDEX grants_one_current_per_tree IS 'At most one grant per tree is not ended.';

CREATE TABLE grant_history (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    grant_id    bigint NOT NULL,
    root_id     uuid NOT NULL,
    event       text NOT NULL,
    max_depth   integer NOT NULL,
    max_breadth integer NOT NULL,
    max_total   integer NOT NULL,
    expires_at  timestamptz NOT NULL,
    program     text NOT NULL,
    by_user     bigint NOT NULL,
    db_user     text NOT NULL DEFAULT session_user,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT grant_history_pkey PRIMARY KEY (id),
    CONSTRAINT grant_history_grant_fkey FOREIGN KEY (grant_id) REFERENCES grants (id),
    CONSTRAINT grant_history_event_check CHECK (event IN ('created', 'updated', 'revoked', 'replaced'))
);
COMMENT ON TABLE grant_history IS 'Every state a grant has had, written by a trigger on grants; append-only.';
COMMENT ON COLUMN grant_history.id IS 'Order of changes.';
COMMENT ON COLUMN grant_history.grant_id IS 'The grant that changed.';
COMMENT ON COLUMN grant_history.root_id IS 'Its tree.';
COMMENT ON COLUMN grant_history.event IS 'created, updated, revoked or replaced.';
COMMENT ON COLUMN grant_history.max_depth IS 'max_depth after the change.';
COMMENT ON COLUMN grant_history.max_breadth IS 'max_breadth after the change.';
COMMENT ON COLUMN grant_history.max_total IS 'max_total after the change.';
COMMENT ON COLUMN grant_history.expires_at IS 'expires_at after the change.';
COMMENT ON COLUMN grant_history.program IS 'program after the change.';
COMMENT ON COLUMN grant_history.by_user IS 'The gateway user behind the change (grants.changed_by).';
COMMENT ON COLUMN grant_history.db_user IS 'The database role that wrote it: the gateway''s, or an operator''s in psql.';
COMMENT ON COLUMN grant_history.at IS 'When.';
CREATE INDEX grant_history_root_idx ON grant_history (root_id, id);

CREATE FUNCTION grants_record_history() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ev text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ev := 'created';
    ELSIF NEW.end_reason IS NOT NULL AND OLD.end_reason IS NULL THEN
        ev := NEW.end_reason;
    ELSIF OLD.end_reason IS NOT NULL THEN
        RAISE EXCEPTION 'grant % has ended and cannot change', OLD.id USING ERRCODE = 'OS007';
    ELSE
        ev := 'updated';
    END IF;
    INSERT INTO grant_history (grant_id, root_id, event, max_depth, max_breadth, max_total,
                               expires_at, program, by_user)
    VALUES (NEW.id, NEW.root_id, ev, NEW.max_depth, NEW.max_breadth, NEW.max_total,
            NEW.expires_at, NEW.program, NEW.changed_by);
    RETURN NULL;
END $$;
CREATE TRIGGER grants_history_insert AFTER INSERT ON grants
    FOR EACH ROW EXECUTE FUNCTION grants_record_history();
CREATE TRIGGER grants_history_update AFTER UPDATE ON grants
    FOR EACH ROW
    WHEN ((OLD.max_depth, OLD.max_breadth, OLD.max_total, OLD.expires_at, OLD.program, OLD.ended_at)
          IS DISTINCT FROM
          (NEW.max_depth, NEW.max_breadth, NEW.max_total, NEW.expires_at, NEW.program, NEW.ended_at))
    EXECUTE FUNCTION grants_record_history();
COMMENT ON TRIGGER grants_history_insert ON grants IS 'Records a created grant in grant_history.';
COMMENT ON TRIGGER grants_history_update ON grants IS
    'Records every change of limits, expiry, program or end in grant_history (admission counts are not history).';

CREATE FUNCTION grants_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.root_id, NEW.created_by, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.root_id, OLD.created_by, OLD.created_at) THEN
        RAISE EXCEPTION 'a grant''s tree and creator are fixed' USING ERRCODE = 'OS001';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER grants_before_update BEFORE UPDATE ON grants
    FOR EACH ROW EXECUTE FUNCTION grants_before_update();
COMMENT ON TRIGGER grants_before_update ON grants IS 'A grant''s tree and creator never change.';
CREATE TRIGGER grants_no_delete BEFORE DELETE OR TRUNCATE ON grants
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_delete();
COMMENT ON TRIGGER grants_no_delete ON grants IS 'Grants stay for audit: revoke ends them.';

-- ---------------------------------------------------------------- request ids

CREATE TABLE create_requests (
    caller      text NOT NULL,
    request_id  text NOT NULL,
    args_hash   bytea NOT NULL,
    sandbox_id  uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT create_requests_pkey PRIMARY KEY (caller, request_id),
    CONSTRAINT create_requests_sandbox_fkey FOREIGN KEY (sandbox_id) REFERENCES sandboxes (id),
    CONSTRAINT create_requests_request_id_format CHECK (request_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
    CONSTRAINT create_requests_caller_format CHECK (caller ~ '^(user|sandbox):'),
    CONSTRAINT create_requests_args_hash_length CHECK (length(args_hash) = 32)
);
COMMENT ON TABLE create_requests IS
    'Admitted creates that carried a request_id: a repeat with the same arguments returns this sandbox.';
COMMENT ON COLUMN create_requests.caller IS 'user:ID or sandbox:UUID: request ids are scoped per caller.';
COMMENT ON COLUMN create_requests.request_id IS 'The caller''s idempotency key.';
COMMENT ON COLUMN create_requests.args_hash IS 'SHA-256 of the request''s arguments; a repeat with other arguments is refused.';
COMMENT ON COLUMN create_requests.sandbox_id IS 'The sandbox the first request created.';
COMMENT ON COLUMN create_requests.created_at IS 'When the first request was admitted.';
CREATE TRIGGER create_requests_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON create_requests
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER create_requests_append_only ON create_requests IS 'Request ids are remembered for good.';

-- ---------------------------------------------------------------- audit

CREATE TABLE audit_log (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    action          text NOT NULL,
    outcome         text NOT NULL,
    code            text,
    message         text NOT NULL DEFAULT '',
    actor_user      bigint,
    actor_sandbox   uuid,
    actor_program   text,
    owner_id        bigint,
    sandbox_id      uuid,
    parent_id       uuid,
    root_id         uuid,
    request_id      text,
    details         jsonb NOT NULL DEFAULT '{}',
    CONSTRAINT audit_log_pkey PRIMARY KEY (id),
    CONSTRAINT audit_log_outcome_check CHECK (outcome IN ('admitted', 'refused', 'done')),
    CONSTRAINT audit_log_code_check CHECK ((outcome = 'refused') = (code IS NOT NULL)),
    CONSTRAINT audit_log_actor_check CHECK (
        actor_user IS NOT NULL OR actor_sandbox IS NOT NULL OR action LIKE 'system.%'
        OR action IN ('sandbox.ready', 'sandbox.exit', 'sandbox.stopped', 'sandbox.error')),
    CONSTRAINT audit_log_details_object CHECK (jsonb_typeof(details) = 'object')
);
COMMENT ON TABLE audit_log IS
    'Append-only receipts: every create (admitted or refused), grant change, stop and lifecycle event.';
COMMENT ON COLUMN audit_log.id IS 'Order of events.';
COMMENT ON COLUMN audit_log.at IS 'When it was decided.';
COMMENT ON COLUMN audit_log.action IS 'What was asked: sandbox.create, sandbox.create_child, grant.create, grant.update, grant.revoke, sandbox.stop, sandbox.delete, sandbox.ready, sandbox.exit, sandbox.stopped, sandbox.error, user.create.';
COMMENT ON COLUMN audit_log.outcome IS 'admitted, refused or done.';
COMMENT ON COLUMN audit_log.code IS 'The error code of a refusal (NOT_ALLOWED, LIMIT_REACHED, ...).';
COMMENT ON COLUMN audit_log.message IS 'Human-readable reason; never holds a secret.';
COMMENT ON COLUMN audit_log.actor_user IS 'The user who called, when a user did.';
COMMENT ON COLUMN audit_log.actor_sandbox IS 'The sandbox that called, when a sandbox did.';
COMMENT ON COLUMN audit_log.actor_program IS 'The calling program inside that sandbox, when known.';
COMMENT ON COLUMN audit_log.owner_id IS 'The user who owns the tree concerned.';
COMMENT ON COLUMN audit_log.sandbox_id IS 'The sandbox concerned (the child, for a create).';
COMMENT ON COLUMN audit_log.parent_id IS 'Its parent, when there is one.';
COMMENT ON COLUMN audit_log.root_id IS 'The root of its tree.';
COMMENT ON COLUMN audit_log.request_id IS 'The caller''s request_id, when given.';
COMMENT ON COLUMN audit_log.details IS 'The decision''s details as JSON (limit and values, verdict, changes).';
CREATE INDEX audit_log_root_idx ON audit_log (root_id, id);
CREATE INDEX audit_log_owner_idx ON audit_log (owner_id, id);
CREATE INDEX audit_log_at_idx ON audit_log (at);

CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER audit_log_append_only ON audit_log IS 'Receipts are never changed or removed.';
CREATE TRIGGER grant_history_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON grant_history
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER grant_history_append_only ON grant_history IS 'History is never changed or removed.';
