-- The audit log: a receipt for every create (admitted or refused), grant change, stop and event.
--
-- Receipts are written in the same transaction as what they record, except a refusal's, which
-- the gateway commits on its own after the refused transaction rolled back (record_refusal).
-- The log is append-only (sql/append_only.sql) and never holds a secret.

-- The code list is fixed (a new code comes with a migration), so receipts are held to it by
-- a plain read at insert: a foreign key would lock the code's row (FOR KEY SHARE) and every
-- refusal of every tree would extend one MultiXact.
CREATE OR REPLACE FUNCTION audit_log_code_known() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM os_error_codes WHERE code = NEW.code) THEN
        RAISE EXCEPTION 'insert violates audit_log_code_fkey: % is not a code of os_error_codes', NEW.code
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'audit_log_code_fkey';
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION audit_log_code_known() IS
    'Trigger body: a receipt''s code is one of os_error_codes.';
CREATE TRIGGER audit_log_code_fkey BEFORE INSERT ON audit_log
    FOR EACH ROW WHEN (NEW.code IS NOT NULL) EXECUTE FUNCTION audit_log_code_known();
COMMENT ON TRIGGER audit_log_code_fkey ON audit_log IS
    'Receipts name only codes of os_error_codes (a foreign key''s check without its row lock).';

-- Every admission's receipt records the limits it was admitted under (the grant as the
-- admitting transaction saw it), so a replay of the receipts can tell whether a tree was
-- ever over the limit in force (sql/invariants.sql). admit_child writes them from the grant
-- row it checked; any other inserter's receipt gets them here.
CREATE OR REPLACE FUNCTION os_receipt_limits() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g grants;
BEGIN
    -- The same row, by the same index and in the same snapshot as the counting trigger read
    -- it: no page SSI tracks beyond what the admission already read (admit_child runs with
    -- enable_seqscan off, which holds here too; no SET clause of its own, which costs a call).
    SELECT * INTO g FROM grants WHERE root_id = NEW.root_id AND ended_at IS NULL;
    IF FOUND THEN
        NEW.details := NEW.details || jsonb_build_object('max_depth', g.max_depth, 'max_breadth', g.max_breadth,
                                                         'max_total', g.max_total);
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION os_receipt_limits() IS
    'Trigger body: an admitted child''s receipt records max_depth, max_breadth and max_total of the grant its admission was checked against.';
CREATE TRIGGER audit_log_admission_limits BEFORE INSERT ON audit_log
    FOR EACH ROW WHEN (NEW.action = 'sandbox.create_child' AND NEW.outcome = 'admitted'
                       AND NOT (NEW.details ?& ARRAY['max_depth', 'max_breadth', 'max_total']))
    EXECUTE FUNCTION os_receipt_limits();
COMMENT ON TRIGGER audit_log_admission_limits ON audit_log IS
    'An admitted child''s receipt carries the limits it was admitted under (details max_depth, max_breadth, max_total): admit_child writes them, and this fills them for a receipt without them.';

CREATE OR REPLACE FUNCTION record_refusal(p_user bigint, p_sandbox uuid, p_program text, p_action text,
                               p_target text, p_request_id text, p_code text, p_message text, p_details jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t sandboxes;
    v_owner bigint;
BEGIN
    -- The target is looked up without raising: a refusal is recorded even for a bad name.
    IF p_action = 'sandbox.create' THEN
        NULL;  -- a root's name says nothing about existing trees
    ELSIF p_sandbox IS NOT NULL THEN
        SELECT * INTO t FROM sandboxes WHERE id = p_sandbox;
        v_owner := t.owner_id;
    ELSIF p_target ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
        SELECT * INTO t FROM sandboxes WHERE id = p_target::uuid
           AND (owner_id = p_user OR os_is_admin(p_user));
    ELSE
        SELECT * INTO t FROM sandboxes WHERE owner_id = p_user AND name = p_target AND phase <> 'DELETED';
    END IF;
    INSERT INTO audit_log (action, outcome, code, message, actor_user, actor_sandbox, actor_program,
                           owner_id, parent_id, root_id, request_id, details)
    VALUES (p_action, 'refused', p_code, left(p_message, 2000), CASE WHEN p_sandbox IS NULL THEN p_user END,
            p_sandbox, nullif(p_program, ''), coalesce(t.owner_id, v_owner, p_user),
            t.id, t.root_id, nullif(left(p_request_id, 128), ''), coalesce(p_details, '{}'));
END $$;
COMMENT ON FUNCTION record_refusal(bigint, uuid, text, text, text, text, text, text, jsonb) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Commits the receipt of a refused create (the refused transaction itself rolled back).';

CREATE OR REPLACE FUNCTION record_refusal(p_caller os_caller, p_action text, p_target text, p_request_id text, p_code text,
                               p_message text, p_details jsonb)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT record_refusal(p_user => (p_caller).user_id, p_sandbox => (p_caller).sandbox_id,
                          p_program => (p_caller).program, p_action => p_action, p_target => p_target,
                          p_request_id => p_request_id, p_code => p_code, p_message => p_message,
                          p_details => p_details)
$$;
COMMENT ON FUNCTION record_refusal(os_caller, text, text, text, text, text, jsonb) IS
    'Commits the receipt of a refused request (p_code: one of os_error_codes).';

CREATE OR REPLACE FUNCTION audit_list(p_user bigint, p_sandbox_ref text, p_owner_name text, p_since timestamptz,
                           p_until timestamptz, p_refusals_only boolean, p_before_id bigint, p_limit bigint)
RETURNS SETOF audit_view LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. The audit entries a user may read (an admin: all, and by owner), newest first, one page before p_before_id.';

CREATE OR REPLACE FUNCTION audit_list(p_caller os_caller, p_sandbox_ref text, p_owner_name text, p_since timestamptz,
                           p_until timestamptz, p_refusals_only boolean, p_before_id bigint, p_limit bigint)
RETURNS SETOF audit_view LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM audit_list(p_user => os_caller_user(p_caller, 'read the audit log'),
                             p_sandbox_ref => p_sandbox_ref, p_owner_name => p_owner_name, p_since => p_since,
                             p_until => p_until, p_refusals_only => p_refusals_only, p_before_id => p_before_id,
                             p_limit => p_limit)
$$;
COMMENT ON FUNCTION audit_list(os_caller, text, text, timestamptz, timestamptz, boolean, bigint, bigint) IS
    'The audit entries a user may read (an admin: everyone''s; others only their own trees).';

-- The hash chain: every receipt is linked into its tree's chain by the trigger below, in the
-- transaction that writes it (SERIALIZABLE for the gateway), so no path that writes a receipt
-- can skip it. A chain per tree keeps unrelated trees' admissions apart: each extends its own
-- head row (audit_chain_heads, updated in place). os_verify_audit walks every chain and names
-- its first broken link; exported heads (os_audit_heads) catch a rewrite of a whole chain.

CREATE OR REPLACE FUNCTION os_audit_chain_key(p_root uuid, p_owner bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    -- Every part immutable (bigint || text is only stable), so the trigger inlines it.
    SELECT coalesce(p_root::text, 'owner:' || p_owner::text, 'system')
$$;
COMMENT ON FUNCTION os_audit_chain_key(uuid, bigint) IS
    'The chain a receipt belongs to: its tree, else its owner''s receipts outside any tree, else system.';

-- The content hashed is every column but the hashes, the place and the id, as one record's
-- text form (each value by its type's output; NULL and '' differ), the time as epoch
-- seconds (independent of TimeZone and DateStyle), after the link before it; the place goes
-- in too. Scalar arguments, so the trigger's UPDATE inlines it (a row argument costs a
-- conversion per call). The id only orders the log: os_verify_audit checks it follows the chain.
CREATE OR REPLACE FUNCTION os_audit_link_hash(p_prev bytea, p_seq bigint, p_chain text, p_at timestamptz,
        p_action text, p_outcome text, p_code text, p_message text, p_actor_user bigint, p_actor_sandbox uuid,
        p_actor_program text, p_owner_id bigint, p_sandbox_id uuid, p_parent_id uuid, p_root_id uuid,
        p_request_id text, p_details jsonb) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT sha256(p_prev || convert_to(ROW(p_seq, p_chain, extract(epoch FROM p_at), p_action, p_outcome, p_code,
        p_message, p_actor_user, p_actor_sandbox, p_actor_program, p_owner_id, p_sandbox_id, p_parent_id, p_root_id,
        p_request_id, p_details)::text, 'UTF8'))
$$;
COMMENT ON FUNCTION os_audit_link_hash(bytea, bigint, text, timestamptz, text, text, text, text, bigint, uuid, text, bigint, uuid, uuid, uuid, text, jsonb) IS
    'A receipt''s link at place p_seq after the link p_prev: SHA-256 of p_prev and of every column of the receipt but id, prev_hash and row_hash.';

CREATE OR REPLACE FUNCTION os_audit_row_hash(a audit_log) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT os_audit_link_hash(a.prev_hash, a.seq, a.chain, a.at, a.action, a.outcome, a.code, a.message, a.actor_user,
                              a.actor_sandbox, a.actor_program, a.owner_id, a.sandbox_id, a.parent_id, a.root_id,
                              a.request_id, a.details)
$$;
COMMENT ON FUNCTION os_audit_row_hash(audit_log) IS
    'What a stored receipt''s row_hash must be.';

CREATE OR REPLACE FUNCTION os_audit_link() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.chain := os_audit_chain_key(NEW.root_id, NEW.owner_id);
    -- Claims the next place and moves the head in one statement: concurrent receipts of one
    -- chain queue on this row (a second SERIALIZABLE writer fails with 40001 and the gateway
    -- retries it). A chain's first receipt makes its head. An upsert finds the head through
    -- the unique index with a dirty snapshot, which SSI does not lock: an UPDATE's scan would
    -- lock the index page many chains share, where a head moved to another heap page (no room
    -- for a HOT update) adds an entry, failing every other tree's admission that read it.
    INSERT INTO audit_chain_heads AS x (chain, seq, prev, head, at)
    VALUES (NEW.chain, 1, ''::bytea,
            os_audit_link_hash(''::bytea, 1, NEW.chain, NEW.at, NEW.action, NEW.outcome, NEW.code, NEW.message,
                               NEW.actor_user, NEW.actor_sandbox, NEW.actor_program, NEW.owner_id, NEW.sandbox_id,
                               NEW.parent_id, NEW.root_id, NEW.request_id, NEW.details), NEW.at)
    ON CONFLICT (chain) DO UPDATE SET seq = x.seq + 1, prev = x.head, at = NEW.at,
           head = os_audit_link_hash(x.head, x.seq + 1, NEW.chain, NEW.at, NEW.action, NEW.outcome, NEW.code,
                                     NEW.message, NEW.actor_user, NEW.actor_sandbox, NEW.actor_program,
                                     NEW.owner_id, NEW.sandbox_id, NEW.parent_id, NEW.root_id, NEW.request_id,
                                     NEW.details)
    RETURNING x.seq, x.prev, x.head INTO NEW.seq, NEW.prev_hash, NEW.row_hash;
    -- The id is drawn again once the place is held, so ids follow each chain's order even
    -- when two writers of one chain took their defaults the other way round.
    NEW.id := nextval('audit_log_id_seq');
    RETURN NEW;
END $$;
COMMENT ON FUNCTION os_audit_link() IS
    'Trigger body: links a new receipt into its chain (chain, seq, prev_hash, row_hash) and moves the chain''s head.';
-- BEFORE triggers run in name order: this one last, once every other has filled the row.
CREATE TRIGGER audit_log_z_link BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION os_audit_link();
COMMENT ON TRIGGER audit_log_z_link ON audit_log IS
    'Every receipt is linked into its tree''s hash chain as it is written (named to run after the other BEFORE triggers).';

-- The first broken link of one chain once its receipts were walked: the chain's head row
-- must name the last receipt walked, else the chain's end was cut off or rewritten.
CREATE OR REPLACE FUNCTION os_audit_chain_end(p_chain text, p_receipts bigint, p_seq bigint, p_hash bytea,
                                              p_bad_seq bigint, p_bad_id bigint, p_problem text, p_detail text)
RETURNS TABLE (chain text, receipts bigint, head_seq bigint, head_hash text, broken_seq bigint, broken_id bigint,
               problem text, detail text)
LANGUAGE plpgsql STABLE SET search_path = public, pg_temp AS $$
DECLARE
    h audit_chain_heads;
BEGIN
    SELECT * INTO h FROM audit_chain_heads x WHERE x.chain = p_chain;
    IF p_problem IS NULL AND NOT FOUND AND p_receipts > 0 THEN
        p_problem := 'inserted';
        p_detail := 'the chain has receipts but no head: they were written around the chain';
    ELSIF p_problem IS NULL AND h.seq > p_seq THEN
        p_problem := 'deleted';
        p_bad_seq := p_seq + 1;
        p_detail := format('receipts %s to %s, the end of the chain, are missing', p_seq + 1, h.seq);
    ELSIF p_problem IS NULL AND h.seq = p_seq AND h.head <> p_hash THEN
        p_problem := 'changed';
        p_bad_seq := p_seq;
        p_detail := 'the chain''s last receipt is not the one its head names';
    END IF;
    RETURN QUERY SELECT p_chain, p_receipts, coalesce(h.seq, p_seq), encode(coalesce(h.head, p_hash), 'hex'),
                        p_bad_seq, p_bad_id, p_problem, p_detail;
END $$;
COMMENT ON FUNCTION os_audit_chain_end(text, bigint, bigint, bytea, bigint, bigint, text, text) IS
    'Internal to os_verify_audit: one chain''s result, its end checked against its head row.';

CREATE OR REPLACE FUNCTION os_verify_audit(p_heads jsonb DEFAULT NULL)
RETURNS TABLE (chain text, receipts bigint, head_seq bigint, head_hash text, broken_seq bigint, broken_id bigint,
               problem text, detail text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    r audit_log;
    k text;
    cur text;
    n bigint;
    last_seq bigint;
    last_id bigint;
    last_hash bytea;
    bad text;
    bad_seq bigint;
    bad_id bigint;
    why text;
    saved jsonb;
    origin bigint := coalesce((SELECT o.before_id FROM audit_chain_origin o), 0);
BEGIN
    -- Each chain in its own order; a receipt carrying no link (written around the trigger)
    -- sorts first in the chain its tree or owner names.
    FOR r IN SELECT * FROM audit_log a WHERE a.id > origin
              ORDER BY coalesce(a.chain, os_audit_chain_key(a.root_id, a.owner_id)), a.seq NULLS FIRST, a.id LOOP
        k := coalesce(r.chain, os_audit_chain_key(r.root_id, r.owner_id));
        IF cur IS DISTINCT FROM k THEN
            IF cur IS NOT NULL THEN
                RETURN QUERY SELECT * FROM os_audit_chain_end(cur, n, last_seq, last_hash, bad_seq, bad_id, bad, why);
            END IF;
            cur := k; n := 0; last_seq := 0; last_id := 0; last_hash := ''::bytea;
            bad := NULL; bad_seq := NULL; bad_id := NULL; why := NULL;
        END IF;
        n := n + 1;
        CONTINUE WHEN bad IS NOT NULL;
        IF r.seq IS NULL THEN
            bad := 'inserted'; why := 'the receipt carries no link: it was written around the chain';
        ELSIF r.seq = last_seq THEN
            bad := 'inserted'; why := format('a second receipt claims place %s of the chain', r.seq);
        ELSIF r.seq > last_seq + 1 THEN
            bad := 'deleted'; why := format('receipts %s to %s of the chain are missing', last_seq + 1, r.seq - 1);
        ELSIF r.id < last_id THEN
            bad := 'reordered'; why := format('receipt %s of the chain comes before receipt %s in the log', r.seq, last_seq);
        ELSIF r.prev_hash <> last_hash THEN
            bad := 'changed'; why := 'its link to the receipt before does not match: one of the two was rewritten';
        ELSIF os_audit_row_hash(r) <> r.row_hash THEN
            bad := 'changed'; why := 'a field differs from what was written';
        END IF;
        IF bad IS NOT NULL THEN
            bad_seq := coalesce(r.seq, last_seq + 1); bad_id := r.id;
        ELSE
            last_seq := r.seq; last_id := r.id; last_hash := r.row_hash;
        END IF;
    END LOOP;
    IF cur IS NOT NULL THEN
        RETURN QUERY SELECT * FROM os_audit_chain_end(cur, n, last_seq, last_hash, bad_seq, bad_id, bad, why);
    END IF;
    -- Chains whose every receipt is gone.
    RETURN QUERY SELECT h.chain, 0::bigint, h.seq, encode(h.head, 'hex'), 1::bigint, NULL::bigint, 'deleted',
                        format('all %s receipts of the chain are missing', h.seq)
      FROM audit_chain_heads h
     WHERE NOT EXISTS (SELECT 1 FROM audit_log a WHERE a.chain = h.chain)
       AND NOT EXISTS (SELECT 1 FROM audit_log a WHERE a.chain IS NULL AND a.id > origin
                          AND os_audit_chain_key(a.root_id, a.owner_id) = h.chain);
    -- Heads kept elsewhere (os_audit_heads' rows as a JSON array): each named link must still
    -- be in its chain, else the chain was rewritten from there on, heads and all.
    FOR saved IN SELECT * FROM jsonb_array_elements(coalesce(p_heads, '[]'::jsonb)) LOOP
        IF NOT EXISTS (SELECT 1 FROM audit_log a WHERE a.chain = saved->>'chain' AND a.seq = (saved->>'seq')::bigint
                          AND a.row_hash = decode(saved->>'head', 'hex')) THEN
            RETURN QUERY SELECT saved->>'chain', NULL::bigint, (saved->>'seq')::bigint, saved->>'head',
                                (saved->>'seq')::bigint, NULL::bigint, 'rewritten',
                                'the chain no longer holds the link its exported head names';
        END IF;
    END LOOP;
END $$;
COMMENT ON FUNCTION os_verify_audit(jsonb) IS
    'Walks every audit chain: one row per chain, with its first broken link (problem: changed, deleted, reordered, inserted; rewritten for an exported head, p_heads, no longer in its chain) or none.';

CREATE OR REPLACE FUNCTION os_audit_heads() RETURNS TABLE (chain text, seq bigint, head text, at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT h.chain, h.seq, encode(h.head, 'hex'), h.at FROM audit_chain_heads h ORDER BY h.chain
$$;
COMMENT ON FUNCTION os_audit_heads() IS
    'The last link of every audit chain, to keep elsewhere and pass to os_verify_audit later.';

CREATE OR REPLACE FUNCTION audit_verify(p_caller os_caller, p_heads jsonb)
RETURNS TABLE (chain text, receipts bigint, head_seq bigint, head_hash text, broken_seq bigint, broken_id bigint,
               problem text, detail text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT os_is_admin(os_caller_user(p_caller, 'verify the audit log')) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can verify the whole audit log');
    END IF;
    RETURN QUERY SELECT * FROM os_verify_audit(p_heads);
END $$;
COMMENT ON FUNCTION audit_verify(os_caller, jsonb) IS
    'os_verify_audit for an admin through the gateway.';

CREATE OR REPLACE FUNCTION audit_heads(p_caller os_caller, p_after text, p_limit bigint)
RETURNS TABLE (chain text, seq bigint, head text, at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT os_is_admin(os_caller_user(p_caller, 'export audit chain heads')) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only an admin can export the audit chain heads');
    END IF;
    RETURN QUERY SELECT h.chain, h.seq, encode(h.head, 'hex'), h.at FROM audit_chain_heads h
                  WHERE p_after IS NULL OR h.chain > p_after ORDER BY h.chain LIMIT p_limit;
END $$;
COMMENT ON FUNCTION audit_heads(os_caller, text, bigint) IS
    'os_audit_heads for an admin through the gateway, one page after the chain p_after.';
