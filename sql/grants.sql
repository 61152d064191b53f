-- Grants: the user's one approval per tree.
--
-- A grant sets max_depth, max_breadth, max_total, expires_at, the one program allowed to call
-- through the in-sandbox door, the tool children's idle period and the tree's tool-call rate.
-- At most one grant per tree is not ended (a unique index); an expired one is replaced by the
-- next create, a revoked one ends for good. Only the tree's user changes it, and every state
-- it has had is in grant_history. A change applies from the next call. The limits themselves
-- are enforced where the counts change: sql/limits.sql.

-- The values' forms, each refusal naming its field (the table's CHECKs are the backstop).
CREATE OR REPLACE FUNCTION os_check_grant_values(p_max_depth integer, p_max_breadth integer, p_max_total integer,
                                      p_expires_at timestamptz, p_program text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_max_depth IS NULL OR p_max_depth NOT BETWEEN 0 AND 64 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', format('max_depth: must be between 0 and 64, got %s', coalesce(p_max_depth::text, 'nothing')),
                          jsonb_build_object('field', 'max_depth'));
    END IF;
    IF p_max_breadth IS NULL OR p_max_breadth NOT BETWEEN 0 AND 10000 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', format('max_breadth: must be between 0 and 10000, got %s', coalesce(p_max_breadth::text, 'nothing')),
                          jsonb_build_object('field', 'max_breadth'));
    END IF;
    IF p_max_total IS NULL OR p_max_total NOT BETWEEN 0 AND 100000 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', format('max_total: must be between 0 and 100000, got %s', coalesce(p_max_total::text, 'nothing')),
                          jsonb_build_object('field', 'max_total'));
    END IF;
    IF p_expires_at IS NULL OR p_expires_at <= now() THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'expires: must be in the future',
                          jsonb_build_object('field', 'expires'));
    END IF;
    IF p_expires_at > now() + interval '366 days' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'expires: must be within 366 days',
                          jsonb_build_object('field', 'expires'));
    END IF;
    IF p_program IS NULL OR p_program !~ '^/' OR length(p_program) > 4096 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'program: must be an absolute path of at most 4096 bytes',
                          jsonb_build_object('field', 'program'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_grant_values(integer, integer, integer, timestamptz, text) IS
    'Names the field of a grant value out of range (the table''s CHECKs are the backstop).';

CREATE OR REPLACE FUNCTION os_check_program_resolved(p_program_resolved text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_program_resolved IS NULL OR p_program_resolved !~ '^/' OR length(p_program_resolved) > 4096 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'program: did not resolve to an absolute path of at most 4096 bytes',
                          jsonb_build_object('field', 'program'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_program_resolved(text) IS
    'Names the field when the resolved program is unusable.';

CREATE OR REPLACE FUNCTION os_check_rate(p_calls integer, p_period_s integer) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_calls IS NULL OR p_calls NOT BETWEEN 1 AND 100000 OR p_period_s IS NULL OR p_period_s NOT IN (1, 60) THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            format('rate: 1 to 100000 calls per second or per minute, got %s per %s s',
                   coalesce(p_calls::text, 'nothing'), coalesce(p_period_s::text, 'nothing')),
            jsonb_build_object('field', 'rate'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_rate(integer, integer) IS
    'Names the field when a grant''s tool-call rate is out of range.';

CREATE OR REPLACE FUNCTION os_check_tool_idle(p_seconds integer) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_seconds IS NULL OR p_seconds NOT BETWEEN 1 AND 604800 THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            format('tool_idle: must be between 1 second and 7 days, got %s', coalesce(p_seconds || ' s', 'nothing')),
            jsonb_build_object('field', 'tool_idle'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_tool_idle(integer) IS
    'Names the field when an idle period is out of range.';

CREATE OR REPLACE FUNCTION os_rate_text(p_calls integer, p_period_s integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT p_calls || CASE WHEN p_period_s = 60 THEN '/min' ELSE '/s' END
$$;
COMMENT ON FUNCTION os_rate_text(integer, integer) IS
    'A rate as people write it: 10/s, 600/min.';

CREATE OR REPLACE FUNCTION os_grant_state(g grants) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN g.end_reason IS NOT NULL THEN g.end_reason
                WHEN g.expires_at <= now() THEN 'expired'
                ELSE 'live' END
$$;
COMMENT ON FUNCTION os_grant_state(grants) IS
    'live, expired, revoked or replaced.';

CREATE OR REPLACE FUNCTION os_grant_target(p_user bigint, p_sandbox uuid, p_ref text) RETURNS sandboxes
LANGUAGE plpgsql AS $$
DECLARE
    s sandboxes;
BEGIN
    IF p_sandbox IS NOT NULL OR p_user IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only a user can read or change a grant');
    END IF;
    s := resolve_sandbox(p_user, NULL, p_ref);
    IF s.parent_id IS NOT NULL THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            format('sandbox: %s is not a root; grants belong to the root of its tree (%s)',
                   s.name, (SELECT name FROM sandboxes WHERE id = s.root_id)),
            jsonb_build_object('field', 'sandbox', 'root_id', s.root_id));
    END IF;
    RETURN s;
END $$;
COMMENT ON FUNCTION os_grant_target(bigint, uuid, text) IS
    'The root a grant call is about; refuses sandbox principals (only a user changes a grant).';

-- Who may call a tree's door: the program of its newest grant (the kernel's executable path,
-- matching what the user wrote or what it resolved to), checked on every door call
-- (take_door_call, sql/door.sql) and every admission from inside a sandbox. A revoked or
-- expired grant still names the program (its other calls, such as stopping its children,
-- stay its alone); a tree never granted allows no program, so its door answers no tool.
CREATE OR REPLACE FUNCTION os_check_program(g grants, p_program text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF g.id IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('the tree has no grant, so no program may call its door (the calling program is %s); '
                   'a user must grant it first', coalesce(p_program, 'unknown')),
            jsonb_build_object('reason', 'no_grant', 'program', p_program));
    END IF;
    IF p_program IS DISTINCT FROM g.program AND p_program IS DISTINCT FROM g.program_resolved THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('the calling program %s is not the one the grant allows (%s%s)', coalesce(p_program, 'unknown'),
                   g.program, coalesce(' -> ' || nullif(g.program_resolved, g.program), '')),
            jsonb_build_object('reason', 'program', 'program', p_program, 'grant_program', g.program,
                               'grant_program_resolved', g.program_resolved));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_program(grants, text) IS
    'Refuses NOT_ALLOWED naming the program unless p_program is the grant''s (as written or as resolved); g NULL (never granted) allows none.';

-- What every admission and door call checks: the tree's grant is live, and a call through
-- the door comes from the grant's program (the kernel's executable path), matching what the
-- user wrote or what it resolved to; anything else is refused naming the program.
CREATE OR REPLACE FUNCTION os_check_grant(p_root uuid, g grants, p_sandbox uuid, p_program text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    last_grant grants;
BEGIN
    IF g.id IS NULL THEN
        SELECT * INTO last_grant FROM grants WHERE root_id = p_root ORDER BY id DESC LIMIT 1;
        IF FOUND AND last_grant.end_reason = 'revoked' THEN
            PERFORM os_refuse('NOT_ALLOWED', 'the tree''s grant was revoked',
                              jsonb_build_object('reason', 'revoked', 'grant_id', last_grant.id));
        END IF;
        PERFORM os_refuse('NOT_ALLOWED', 'the tree has no grant; a user must grant it first',
                          jsonb_build_object('reason', 'no_grant'));
    END IF;
    IF g.expires_at <= now() THEN
        PERFORM os_refuse('NOT_ALLOWED', format('the tree''s grant expired at %s', g.expires_at),
                          jsonb_build_object('reason', 'expired', 'grant_id', g.id, 'expires_at', g.expires_at));
    END IF;
    IF p_sandbox IS NOT NULL THEN
        PERFORM os_check_program(g, p_program);
    END IF;
END $$;
COMMENT ON FUNCTION os_check_grant(uuid, grants, uuid, text) IS
    'Refuses unless the tree''s current grant (g; NULL when there is none) is live and, for a call from inside a sandbox, allows the calling program (os_check_program).';

CREATE OR REPLACE FUNCTION os_grant_insert(p_user bigint, s sandboxes, p_max_depth integer, p_max_breadth integer,
                                p_max_total integer, p_expires_at timestamptz, p_program text,
                                p_tool_idle_seconds integer, p_program_resolved text, p_rate_calls integer,
                                p_rate_period_s integer)
RETURNS grants LANGUAGE plpgsql AS $$
DECLARE
    cur grants;
    g grants;
BEGIN
    PERFORM os_check_grant_values(p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program);
    PERFORM os_check_tool_idle(p_tool_idle_seconds);
    PERFORM os_check_program_resolved(p_program_resolved);
    PERFORM os_check_rate(p_rate_calls, p_rate_period_s);
    SELECT * INTO cur FROM grants WHERE root_id = s.id AND ended_at IS NULL FOR UPDATE;
    IF FOUND THEN
        IF cur.expires_at > now() THEN
            PERFORM os_refuse('CONFLICT',
                format('sandbox %s already has a live grant (id %s); update or revoke it first', s.name, cur.id),
                jsonb_build_object('grant_id', cur.id));
        END IF;
        -- An expired grant is replaced by the new one.
        UPDATE grants SET ended_at = now(), end_reason = 'replaced', changed_by = p_user, changed_at = now()
         WHERE id = cur.id;
    END IF;
    INSERT INTO grants (root_id, max_depth, max_breadth, max_total, expires_at, program, created_by, changed_by,
                        tool_idle_seconds, program_resolved, rate_calls, rate_period_s)
    VALUES (s.id, p_max_depth, p_max_breadth, p_max_total, p_expires_at, p_program, p_user, p_user,
            p_tool_idle_seconds, p_program_resolved, p_rate_calls, p_rate_period_s)
    RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.create', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id, 'max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                               'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program,
                               'tool_idle_seconds', g.tool_idle_seconds, 'program_resolved', g.program_resolved,
                               'rate', os_rate_text(g.rate_calls, g.rate_period_s), 'replaced_grant_id', cur.id));
    RETURN g;
END $$;
COMMENT ON FUNCTION os_grant_insert(bigint, sandboxes, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'Creates the tree''s grant, replacing an expired one; refuses while a live one exists.';

-- The entry points: only a user, on their own trees (an admin: on any). A sandbox caller
-- is refused whatever it asks (os_grant_target).
CREATE OR REPLACE FUNCTION grant_create(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text, p_tool_idle_seconds integer, p_program_resolved text,
                             p_rate_calls integer, p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    g grants;
BEGIN
    g := os_grant_insert(p_user, os_grant_target(p_user, p_sandbox, p_ref), p_max_depth, p_max_breadth,
                         p_max_total, p_expires_at, p_program, coalesce(p_tool_idle_seconds, 300),
                         p_program_resolved, p_rate_calls, p_rate_period_s);
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_create(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A user grants a tree (by its root): limits, expiry, the one program allowed to call (as written and resolved), the tool idle period (NULL: 5 minutes) and the tool-call rate.';

CREATE OR REPLACE FUNCTION grant_create(p_caller os_caller, p_ref text, p_max_depth integer, p_max_breadth integer,
                             p_max_total integer, p_expires_at timestamptz, p_program text,
                             p_tool_idle_seconds integer, p_program_resolved text, p_rate_calls integer,
                             p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM grant_create(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                               p_max_depth => p_max_depth, p_max_breadth => p_max_breadth,
                               p_max_total => p_max_total, p_expires_at => p_expires_at, p_program => p_program,
                               p_tool_idle_seconds => p_tool_idle_seconds, p_program_resolved => p_program_resolved,
                               p_rate_calls => p_rate_calls, p_rate_period_s => p_rate_period_s)
$$;
COMMENT ON FUNCTION grant_create(os_caller, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'The tree''s user creates its grant (a sandbox caller is refused).';

CREATE OR REPLACE FUNCTION grant_update(p_user bigint, p_sandbox uuid, p_ref text, p_max_depth integer,
                             p_max_breadth integer, p_max_total integer, p_expires_at timestamptz,
                             p_program text, p_tool_idle_seconds integer, p_program_resolved text,
                             p_rate_calls integer, p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes := os_grant_target(p_user, p_sandbox, p_ref);
    old grants;
    g grants;
BEGIN
    SELECT * INTO old FROM grants WHERE root_id = s.id AND ended_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s has no current grant; create one', s.name),
                          jsonb_build_object('sandbox', s.name));
    END IF;
    IF (p_program IS NULL) <> (p_program_resolved IS NULL) OR (p_rate_calls IS NULL) <> (p_rate_period_s IS NULL) THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'program: a new program comes with what it resolved to, a rate with its period',
                          jsonb_build_object('field', CASE WHEN (p_rate_calls IS NULL) <> (p_rate_period_s IS NULL)
                                                           THEN 'rate' ELSE 'program' END));
    END IF;
    PERFORM os_check_grant_values(coalesce(p_max_depth, old.max_depth), coalesce(p_max_breadth, old.max_breadth),
                                  coalesce(p_max_total, old.max_total), coalesce(p_expires_at, old.expires_at),
                                  coalesce(p_program, old.program));
    PERFORM os_check_tool_idle(coalesce(p_tool_idle_seconds, old.tool_idle_seconds));
    IF p_program IS NOT NULL THEN
        PERFORM os_check_program_resolved(p_program_resolved);
    END IF;
    PERFORM os_check_rate(coalesce(p_rate_calls, old.rate_calls), coalesce(p_rate_period_s, old.rate_period_s));
    UPDATE grants SET max_depth = coalesce(p_max_depth, max_depth),
                      max_breadth = coalesce(p_max_breadth, max_breadth),
                      max_total = coalesce(p_max_total, max_total),
                      expires_at = coalesce(p_expires_at, expires_at),
                      program = coalesce(p_program, program),
                      tool_idle_seconds = coalesce(p_tool_idle_seconds, tool_idle_seconds),
                      program_resolved = CASE WHEN p_program IS NULL THEN program_resolved ELSE p_program_resolved END,
                      rate_calls = coalesce(p_rate_calls, rate_calls),
                      rate_period_s = coalesce(p_rate_period_s, rate_period_s),
                      changed_by = p_user, changed_at = now()
     WHERE id = old.id RETURNING * INTO g;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.update', 'done', p_user, s.owner_id, s.id, s.id,
            jsonb_build_object('grant_id', g.id,
                'before', jsonb_build_object('max_depth', old.max_depth, 'max_breadth', old.max_breadth,
                          'max_total', old.max_total, 'expires_at', old.expires_at, 'program', old.program,
                          'tool_idle_seconds', old.tool_idle_seconds, 'program_resolved', old.program_resolved,
                          'rate', os_rate_text(old.rate_calls, old.rate_period_s)),
                'after', jsonb_build_object('max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                          'max_total', g.max_total, 'expires_at', g.expires_at, 'program', g.program,
                          'tool_idle_seconds', g.tool_idle_seconds, 'program_resolved', g.program_resolved,
                          'rate', os_rate_text(g.rate_calls, g.rate_period_s))));
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_update(bigint, uuid, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Changes the current grant (NULL keeps a value; a program comes with its resolution, a rate with its period); applies from the next call (a new idle period from the next check).';

CREATE OR REPLACE FUNCTION grant_update(p_caller os_caller, p_ref text, p_max_depth integer, p_max_breadth integer,
                             p_max_total integer, p_expires_at timestamptz, p_program text,
                             p_tool_idle_seconds integer, p_program_resolved text, p_rate_calls integer,
                             p_rate_period_s integer)
RETURNS SETOF grant_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM grant_update(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref,
                               p_max_depth => p_max_depth, p_max_breadth => p_max_breadth,
                               p_max_total => p_max_total, p_expires_at => p_expires_at, p_program => p_program,
                               p_tool_idle_seconds => p_tool_idle_seconds, p_program_resolved => p_program_resolved,
                               p_rate_calls => p_rate_calls, p_rate_period_s => p_rate_period_s)
$$;
COMMENT ON FUNCTION grant_update(os_caller, text, integer, integer, integer, timestamptz, text, integer, text, integer, integer) IS
    'The tree''s user changes its live grant (NULL keeps a value; a sandbox caller is refused).';

CREATE OR REPLACE FUNCTION grant_revoke(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF grant_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes := os_grant_target(p_user, p_sandbox, p_ref);
    g grants;
BEGIN
    UPDATE grants SET ended_at = now(), end_reason = 'revoked', changed_by = p_user, changed_at = now()
     WHERE root_id = s.id AND ended_at IS NULL RETURNING * INTO g;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s has no current grant to revoke', s.name),
                          jsonb_build_object('sandbox', s.name));
    END IF;
    INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, root_id, details)
    VALUES ('grant.revoke', 'done', p_user, s.owner_id, s.id, s.id, jsonb_build_object('grant_id', g.id));
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_revoke(bigint, uuid, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Ends the tree''s grant: nothing more is admitted under it.';

CREATE OR REPLACE FUNCTION grant_revoke(p_caller os_caller, p_ref text)
RETURNS SETOF grant_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM grant_revoke(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_revoke(os_caller, text) IS
    'The tree''s user revokes its grant.';

CREATE OR REPLACE FUNCTION grant_current(p_user bigint, p_sandbox uuid, p_ref text) RETURNS SETOF grant_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes := os_grant_target(p_user, p_sandbox, p_ref);
    g grants;
BEGIN
    SELECT * INTO g FROM grants WHERE root_id = s.id ORDER BY (ended_at IS NULL) DESC, id DESC LIMIT 1;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('sandbox %s has no grant', s.name),
                          jsonb_build_object('sandbox', s.name));
    END IF;
    RETURN QUERY SELECT * FROM grant_view WHERE id = g.id;
END $$;
COMMENT ON FUNCTION grant_current(bigint, uuid, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. The tree''s current grant (or its latest ended one).';

CREATE OR REPLACE FUNCTION grant_current(p_caller os_caller, p_ref text)
RETURNS SETOF grant_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM grant_current(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id, p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_current(os_caller, text) IS
    'The tree''s current grant, for its user.';

CREATE OR REPLACE FUNCTION grant_list(p_user bigint, p_ref text) RETURNS SETOF grant_view LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. The grants of one tree (history, newest first), or of every tree the user may see.';

CREATE OR REPLACE FUNCTION grant_list(p_caller os_caller, p_ref text)
RETURNS SETOF grant_view LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM grant_list(p_user => os_caller_user(p_caller, 'read or change a grant'), p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_list(os_caller, text) IS
    'Every grant of the calling user''s trees, or one tree''s history when p_ref is given.';

-- Read-only, for users and sandboxes alike: what is used and what remains, so an agent can
-- plan its delegation (get_grant) without being able to change it.
CREATE OR REPLACE FUNCTION grant_status(p_user bigint, p_sandbox uuid, p_program text, p_ref text)
 RETURNS TABLE(grant_id bigint, root_id uuid, root_name text, sandbox_id uuid, sandbox_name text, sandbox_kind text, state text, max_depth integer, max_breadth integer, max_total integer, expires_at timestamp with time zone, program text, depth integer, live_children integer, live_total integer, remaining_depth integer, remaining_breadth integer, remaining_total integer)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $$
DECLARE
    s sandboxes;
    g grants;
    v_total integer;
    v_children integer;
BEGIN
    -- A sandbox reads its own tree's grant (p_ref empty: from its own place in the tree, else
    -- from a descendant's); a user names a sandbox of theirs. Who sees what is resolve_sandbox's.
    IF p_sandbox IS NOT NULL AND coalesce(p_ref, '') = '' THEN
        s := resolve_sandbox(p_user, p_sandbox, p_sandbox::text);
    ELSE
        s := resolve_sandbox(p_user, p_sandbox, p_ref);
    END IF;
    SELECT * INTO g FROM grants WHERE grants.root_id = s.root_id ORDER BY (ended_at IS NULL) DESC, id DESC LIMIT 1;
    IF NOT FOUND THEN
        PERFORM os_refuse('NOT_FOUND', format('the tree of sandbox %s has no grant; a user must grant it first', s.name),
                          jsonb_build_object('sandbox', s.name, 'reason', 'no_grant'));
    END IF;
    SELECT t.live_total INTO v_total FROM trees t WHERE t.root_id = s.root_id;
    v_total := coalesce(v_total, 0);
    v_children := coalesce((SELECT c.live_children FROM parents c WHERE c.parent_id = s.id), 0);
    RETURN QUERY
    SELECT g.id, s.root_id, r.name, s.id, s.name, s.kind, os_grant_state(g), g.max_depth, g.max_breadth, g.max_total,
           g.expires_at, g.program, s.depth, v_children, v_total,
           -- tool sandboxes cannot have children; depth counts agent levels below this one
           CASE WHEN s.kind = 'tool' THEN 0 ELSE greatest(g.max_depth - s.depth, 0) END,
           CASE WHEN s.kind = 'tool' THEN 0 ELSE greatest(g.max_breadth - v_children, 0) END,
           greatest(g.max_total - v_total, 0)
      FROM sandboxes r WHERE r.id = s.root_id;
END $$;
COMMENT ON FUNCTION grant_status(bigint, uuid, text, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Read-only: the current (or latest) grant of a sandbox''s tree with the limits, what is used (the sandbox''s depth and live children, the tree''s live total) and what remains for creating under that sandbox.';

CREATE OR REPLACE FUNCTION grant_status(p_caller os_caller, p_ref text)
RETURNS TABLE (grant_id bigint, root_id uuid, root_name text, sandbox_id uuid, sandbox_name text, sandbox_kind text,
               state text, max_depth integer, max_breadth integer, max_total integer, expires_at timestamptz,
               program text, depth integer, live_children integer, live_total integer, remaining_depth integer,
               remaining_breadth integer, remaining_total integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM grant_status(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                               p_program => (p_caller).program, p_ref => p_ref)
$$;
COMMENT ON FUNCTION grant_status(os_caller, text) IS
    'The grant over a sandbox''s tree as the caller may read it: limits, used and remaining.';

CREATE OR REPLACE FUNCTION grants_record_history() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ev text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ev := 'created';
    ELSIF NEW.end_reason IS NOT NULL AND OLD.end_reason IS NULL THEN
        ev := NEW.end_reason;
    ELSIF OLD.end_reason IS NOT NULL THEN
        PERFORM os_refuse('CONFLICT', format('grant %s has ended and cannot change', OLD.id));
    ELSE
        ev := 'updated';
    END IF;
    INSERT INTO grant_history (grant_id, root_id, event, max_depth, max_breadth, max_total,
                               expires_at, program, by_user, tool_idle_seconds,
                               program_resolved, rate_calls, rate_period_s)
    VALUES (NEW.id, NEW.root_id, ev, NEW.max_depth, NEW.max_breadth, NEW.max_total,
            NEW.expires_at, NEW.program, NEW.changed_by, NEW.tool_idle_seconds,
            NEW.program_resolved, NEW.rate_calls, NEW.rate_period_s);
    RETURN NULL;
END $$;
COMMENT ON FUNCTION grants_record_history() IS
    'Trigger body: writes the grant''s new state to grant_history (created, updated, revoked, replaced).';
CREATE TRIGGER grants_history_insert AFTER INSERT ON grants
    FOR EACH ROW EXECUTE FUNCTION grants_record_history();
COMMENT ON TRIGGER grants_history_insert ON grants IS
    'Records a created grant in grant_history.';
CREATE TRIGGER grants_history_update AFTER UPDATE ON grants
    FOR EACH ROW
    WHEN ((OLD.max_depth, OLD.max_breadth, OLD.max_total, OLD.expires_at, OLD.program, OLD.ended_at,
           OLD.tool_idle_seconds, OLD.program_resolved, OLD.rate_calls, OLD.rate_period_s)
          IS DISTINCT FROM
          (NEW.max_depth, NEW.max_breadth, NEW.max_total, NEW.expires_at, NEW.program, NEW.ended_at,
           NEW.tool_idle_seconds, NEW.program_resolved, NEW.rate_calls, NEW.rate_period_s))
    EXECUTE FUNCTION grants_record_history();
COMMENT ON TRIGGER grants_history_update ON grants IS
    'Records every change of limits, expiry, program, idle period, rate or end in grant_history (admission counts are not history).';

CREATE OR REPLACE FUNCTION grants_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.root_id, NEW.created_by, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.root_id, OLD.created_by, OLD.created_at) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'a grant''s tree and creator are fixed');
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION grants_before_update() IS
    'Trigger body: refuses a change of a grant''s tree or creator.';
CREATE TRIGGER grants_before_update BEFORE UPDATE ON grants
    FOR EACH ROW EXECUTE FUNCTION grants_before_update();
COMMENT ON TRIGGER grants_before_update ON grants IS
    'A grant''s tree and creator never change.';

CREATE OR REPLACE FUNCTION os_tool_idle_seconds(p_root uuid) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT tool_idle_seconds FROM grants WHERE root_id = p_root ORDER BY id DESC LIMIT 1), 300)
$$;
COMMENT ON FUNCTION os_tool_idle_seconds(uuid) IS
    'The idle period of a tree''s tool children: its latest grant''s.';
