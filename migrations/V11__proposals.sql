-- Policy proposals: network rules a sandbox asks for itself through policy.local, and what
-- its user decided. A proposal starts pending and leaves it once: approved (by a user, with
-- the policy version the approval wrote), rejected (by a user, with a reason), superseded
-- (by a newer proposal of the same sandbox for one of the same rule keys) or expired. Every
-- transition is audited with its actor. A sandbox can propose and read its own proposals;
-- only a user decides (the deciding functions take no sandbox principal at all).

CREATE TABLE policy_proposals (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    sandbox_id       uuid NOT NULL,
    owner_id         bigint NOT NULL,
    root_id          uuid NOT NULL,
    state            text NOT NULL DEFAULT 'pending',
    rules            jsonb NOT NULL,
    reason           text NOT NULL,
    created_program  text,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at       timestamptz NOT NULL,
    decided_at       timestamptz,
    decided_by_user  bigint,
    decision_reason  text,
    policy_version   integer,
    superseded_by    bigint,
    CONSTRAINT policy_proposals_pkey PRIMARY KEY (id),
    CONSTRAINT policy_proposals_sandbox_fkey FOREIGN KEY (sandbox_id) REFERENCES sandboxes (id),
    CONSTRAINT policy_proposals_owner_fkey FOREIGN KEY (owner_id) REFERENCES users (id),
    CONSTRAINT policy_proposals_root_fkey FOREIGN KEY (root_id) REFERENCES sandboxes (id),
    CONSTRAINT policy_proposals_decider_fkey FOREIGN KEY (decided_by_user) REFERENCES users (id),
    CONSTRAINT policy_proposals_superseded_by_fkey FOREIGN KEY (superseded_by) REFERENCES policy_proposals (id),
    CONSTRAINT policy_proposals_state_check
        CHECK (state IN ('pending', 'approved', 'rejected', 'superseded', 'expired')),
    CONSTRAINT policy_proposals_rules_shape CHECK (jsonb_typeof(rules) = 'object' AND rules <> '{}'
        AND length(rules::text) <= 65536),
    CONSTRAINT policy_proposals_reason_length CHECK (length(reason) BETWEEN 1 AND 1000),
    CONSTRAINT policy_proposals_program_length CHECK (length(created_program) <= 4096),
    CONSTRAINT policy_proposals_expiry_after_creation CHECK (expires_at > created_at),
    CONSTRAINT policy_proposals_decided_when_not_pending CHECK ((state = 'pending') = (decided_at IS NULL)),
    CONSTRAINT policy_proposals_approved_shape CHECK (
        (state = 'approved') = (policy_version IS NOT NULL)
        AND (state <> 'approved' OR decided_by_user IS NOT NULL)),
    CONSTRAINT policy_proposals_rejected_shape CHECK (
        state <> 'rejected' OR (decided_by_user IS NOT NULL AND length(decision_reason) BETWEEN 1 AND 1000)),
    CONSTRAINT policy_proposals_superseded_shape CHECK ((state = 'superseded') = (superseded_by IS NOT NULL)),
    CONSTRAINT policy_proposals_user_decides CHECK (
        decided_by_user IS NULL OR state IN ('approved', 'rejected'))
);
COMMENT ON TABLE policy_proposals IS
    'Network rules a sandbox proposed for its own policy through policy.local, and the decision; rows are never deleted.';
COMMENT ON COLUMN policy_proposals.id IS 'The proposal''s number (what the sandbox and the user name it by).';
COMMENT ON COLUMN policy_proposals.sandbox_id IS 'The sandbox that proposed the rules for itself.';
COMMENT ON COLUMN policy_proposals.owner_id IS 'The user who owns that sandbox''s tree: the one who decides.';
COMMENT ON COLUMN policy_proposals.root_id IS 'The root of that sandbox''s tree.';
COMMENT ON COLUMN policy_proposals.state IS 'pending, then once: approved, rejected, superseded or expired.';
COMMENT ON COLUMN policy_proposals.rules IS
    'The proposed network_policies entries (key -> rule), canonical JSON, validated by the gateway.';
COMMENT ON COLUMN policy_proposals.reason IS 'Why the sandbox wants them (its own words, at most 1000 characters).';
COMMENT ON COLUMN policy_proposals.created_program IS 'The program inside the sandbox that sent it, as the kernel named it.';
COMMENT ON COLUMN policy_proposals.created_at IS 'When it was proposed.';
COMMENT ON COLUMN policy_proposals.expires_at IS 'A proposal still pending at this time expires.';
COMMENT ON COLUMN policy_proposals.decided_at IS 'When it left pending (NULL while pending).';
COMMENT ON COLUMN policy_proposals.decided_by_user IS 'The user who approved or rejected it (NULL when superseded or expired).';
COMMENT ON COLUMN policy_proposals.decision_reason IS 'The user''s reason for a rejection.';
COMMENT ON COLUMN policy_proposals.policy_version IS 'The policy version the approval wrote.';
COMMENT ON COLUMN policy_proposals.superseded_by IS 'The newer proposal that replaced this one.';
CREATE INDEX policy_proposals_sandbox_idx ON policy_proposals (sandbox_id, id);
COMMENT ON INDEX policy_proposals_sandbox_idx IS 'A sandbox''s proposals.';
CREATE INDEX policy_proposals_owner_idx ON policy_proposals (owner_id, id);
COMMENT ON INDEX policy_proposals_owner_idx IS 'A user''s proposals to decide.';
CREATE INDEX policy_proposals_pending_idx ON policy_proposals (expires_at) WHERE state = 'pending';
COMMENT ON INDEX policy_proposals_pending_idx IS 'Pending proposals by expiry.';

CREATE FUNCTION policy_proposals_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'pending' THEN
        RAISE EXCEPTION 'proposal % is already %: a decision is final', OLD.id, OLD.state USING ERRCODE = 'OS001';
    END IF;
    IF (NEW.sandbox_id, NEW.owner_id, NEW.root_id, NEW.rules, NEW.reason, NEW.created_program, NEW.created_at,
        NEW.expires_at)
       IS DISTINCT FROM
       (OLD.sandbox_id, OLD.owner_id, OLD.root_id, OLD.rules, OLD.reason, OLD.created_program, OLD.created_at,
        OLD.expires_at) THEN
        RAISE EXCEPTION 'what proposal % asks for cannot change', OLD.id USING ERRCODE = 'OS001';
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION policy_proposals_before_update() IS
    'A proposal changes only its decision, and only once (from pending).';
CREATE TRIGGER policy_proposals_decide_once BEFORE UPDATE ON policy_proposals
    FOR EACH ROW EXECUTE FUNCTION policy_proposals_before_update();
COMMENT ON TRIGGER policy_proposals_decide_once ON policy_proposals IS
    'Only the decision columns change, and only from pending.';
CREATE TRIGGER policy_proposals_no_delete BEFORE DELETE OR TRUNCATE ON policy_proposals
    FOR EACH STATEMENT EXECUTE FUNCTION os_forbid_change();
COMMENT ON TRIGGER policy_proposals_no_delete ON policy_proposals IS 'Proposals stay for audit.';

CREATE VIEW proposal_view AS
SELECT p.id, p.sandbox_id, s.name AS sandbox_name, p.owner_id, o.name AS owner_name, p.root_id,
       r.name AS root_name, p.state, p.rules, p.reason, p.created_program, p.created_at, p.expires_at,
       p.decided_at,
       CASE WHEN p.decided_by_user IS NOT NULL THEN 'user:' || u.name
            WHEN p.state <> 'pending' THEN 'system' END AS decided_by,
       p.decision_reason, p.policy_version, p.superseded_by
  FROM policy_proposals p
  JOIN sandboxes s ON s.id = p.sandbox_id
  JOIN sandboxes r ON r.id = p.root_id
  JOIN users o ON o.id = p.owner_id
  LEFT JOIN users u ON u.id = p.decided_by_user;
COMMENT ON VIEW proposal_view IS 'Policy proposals with names, for people (psql) and the gateway.';
COMMENT ON COLUMN proposal_view.id IS 'The proposal''s number.';
COMMENT ON COLUMN proposal_view.sandbox_id IS 'The sandbox that proposed.';
COMMENT ON COLUMN proposal_view.sandbox_name IS 'Its name.';
COMMENT ON COLUMN proposal_view.owner_id IS 'The user who decides.';
COMMENT ON COLUMN proposal_view.owner_name IS 'Their name.';
COMMENT ON COLUMN proposal_view.root_id IS 'The root of the tree.';
COMMENT ON COLUMN proposal_view.root_name IS 'Its name.';
COMMENT ON COLUMN proposal_view.state IS 'pending, approved, rejected, superseded or expired.';
COMMENT ON COLUMN proposal_view.rules IS 'The proposed network_policies entries.';
COMMENT ON COLUMN proposal_view.reason IS 'Why the sandbox wants them.';
COMMENT ON COLUMN proposal_view.created_program IS 'The program that sent it.';
COMMENT ON COLUMN proposal_view.created_at IS 'When it was proposed.';
COMMENT ON COLUMN proposal_view.expires_at IS 'When it expires if still pending.';
COMMENT ON COLUMN proposal_view.decided_at IS 'When it left pending.';
COMMENT ON COLUMN proposal_view.decided_by IS '"user:NAME" for an approval or rejection, "system" for supersession or expiry.';
COMMENT ON COLUMN proposal_view.decision_reason IS 'The reason of a rejection.';
COMMENT ON COLUMN proposal_view.policy_version IS 'The policy version an approval wrote.';
COMMENT ON COLUMN proposal_view.superseded_by IS 'The proposal that replaced it.';

-- ---------------------------------------------------------------- transitions

CREATE FUNCTION os_proposal_audit(pr policy_proposals, p_action text, p_user bigint, p_sandbox uuid,
                                  p_program text, p_details jsonb) RETURNS void LANGUAGE sql AS $$
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, details)
    SELECT p_action, 'done', p_user, p_sandbox, nullif(p_program, ''), pr.owner_id, pr.sandbox_id, s.parent_id,
           pr.root_id, jsonb_build_object('proposal', pr.id, 'state', pr.state) || coalesce(p_details, '{}')
      FROM sandboxes s WHERE s.id = pr.sandbox_id
$$;
COMMENT ON FUNCTION os_proposal_audit(policy_proposals, text, bigint, uuid, text, jsonb) IS
    'The receipt of one proposal transition, with its actor (a user, the sandbox, or none for system.*).';

CREATE FUNCTION os_proposals_expire(p_sandbox uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    pr policy_proposals;
BEGIN
    FOR pr IN UPDATE policy_proposals SET state = 'expired', decided_at = clock_timestamp()
               WHERE state = 'pending' AND expires_at <= clock_timestamp()
                 AND (p_sandbox IS NULL OR sandbox_id = p_sandbox)
           RETURNING * LOOP
        PERFORM os_proposal_audit(pr, 'system.proposal_expire', NULL, NULL, NULL, '{}');
    END LOOP;
END $$;
COMMENT ON FUNCTION os_proposals_expire(uuid) IS
    'Pending proposals past their expiry (of one sandbox, or all) become expired, each with a receipt.';

CREATE FUNCTION proposal_create(p_sandbox uuid, p_program text, p_rules jsonb, p_reason text, p_ttl_seconds integer)
RETURNS SETOF proposal_view LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
    pr policy_proposals;
    old policy_proposals;
    pending integer;
BEGIN
    SELECT * INTO s FROM sandboxes WHERE id = p_sandbox FOR UPDATE;
    IF s.id IS NULL OR s.phase NOT IN ('PROVISIONING', 'READY') THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only a running sandbox proposes rules for itself');
    END IF;
    IF p_rules IS NULL OR jsonb_typeof(p_rules) <> 'object' OR p_rules = '{}' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'network_policies: at least one rule is required',
                          jsonb_build_object('field', 'network_policies'));
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(p_rules)) > 16 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'network_policies: at most 16 rules in one proposal',
                          jsonb_build_object('field', 'network_policies'));
    END IF;
    IF p_reason IS NULL OR length(btrim(p_reason)) = 0 OR length(p_reason) > 1000 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'reason: required, at most 1000 characters',
                          jsonb_build_object('field', 'reason'));
    END IF;
    IF p_ttl_seconds IS NULL OR p_ttl_seconds NOT BETWEEN 60 AND 604800 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'ttl: 60 seconds to 7 days', jsonb_build_object('field', 'ttl'));
    END IF;
    PERFORM os_proposals_expire(s.id);
    -- Superseded proposals do not count as pending: the hourly cap bounds the rows and receipts.
    SELECT count(*) INTO pending FROM policy_proposals p
     WHERE p.sandbox_id = s.id AND p.created_at > clock_timestamp() - interval '1 hour';
    IF pending >= 100 THEN
        PERFORM os_refuse('LIMIT_REACHED', format('sandbox %s made %s proposals in the last hour', s.name, pending),
                          jsonb_build_object('limit', 'proposals_per_hour', 'max', 100, 'current', pending));
    END IF;
    SELECT count(*) INTO pending FROM policy_proposals p WHERE p.sandbox_id = s.id AND p.state = 'pending'
       AND NOT (p.rules ?| ARRAY(SELECT jsonb_object_keys(p_rules)));
    IF pending >= 16 THEN
        PERFORM os_refuse('LIMIT_REACHED', format('sandbox %s already has %s pending proposals', s.name, pending),
                          jsonb_build_object('limit', 'pending_proposals', 'max', 16, 'current', pending));
    END IF;
    INSERT INTO policy_proposals (sandbox_id, owner_id, root_id, rules, reason, created_program, expires_at)
    VALUES (s.id, s.owner_id, s.root_id, p_rules, p_reason, nullif(left(p_program, 4096), ''),
            clock_timestamp() + make_interval(secs => p_ttl_seconds))
    RETURNING * INTO pr;
    PERFORM os_proposal_audit(pr, 'proposal.create', NULL, s.id, p_program,
                              jsonb_build_object('rules', (SELECT jsonb_agg(k) FROM jsonb_object_keys(p_rules) k)));
    -- A newer proposal for one of the same rule keys replaces an older pending one.
    FOR old IN UPDATE policy_proposals SET state = 'superseded', decided_at = clock_timestamp(), superseded_by = pr.id
                WHERE sandbox_id = s.id AND state = 'pending' AND id <> pr.id
                  AND rules ?| ARRAY(SELECT jsonb_object_keys(p_rules))
            RETURNING * LOOP
        PERFORM os_proposal_audit(old, 'proposal.supersede', NULL, s.id, p_program,
                                  jsonb_build_object('superseded_by', pr.id));
    END LOOP;
    RETURN QUERY SELECT * FROM proposal_view WHERE id = pr.id;
END $$;
COMMENT ON FUNCTION proposal_create(uuid, text, jsonb, text, integer) IS
    'A running sandbox proposes network rules for its own policy (pending; at most 16 pending and 100 an hour); a pending proposal of the same sandbox for one of the same keys is superseded.';

CREATE FUNCTION proposal_get_own(p_sandbox uuid, p_id bigint) RETURNS SETOF proposal_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM os_proposals_expire(p_sandbox);
    IF NOT EXISTS (SELECT 1 FROM policy_proposals WHERE id = p_id AND sandbox_id = p_sandbox) THEN
        PERFORM os_refuse('NOT_FOUND', format('proposal %s not found', p_id),
                          jsonb_build_object('field', 'id', 'proposal', p_id));
    END IF;
    RETURN QUERY SELECT * FROM proposal_view WHERE id = p_id;
END $$;
COMMENT ON FUNCTION proposal_get_own(uuid, bigint) IS 'One of the calling sandbox''s own proposals (another''s is not found).';

CREATE FUNCTION proposal_list(p_user bigint, p_ref text, p_state text, p_limit integer) RETURNS SETOF proposal_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    s sandboxes;
BEGIN
    IF p_user IS NULL THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only a user lists proposals');
    END IF;
    IF p_state IS NOT NULL AND p_state NOT IN ('pending', 'approved', 'rejected', 'superseded', 'expired') THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
                          format('state: %s is none of pending, approved, rejected, superseded, expired', p_state),
                          jsonb_build_object('field', 'state'));
    END IF;
    PERFORM os_proposals_expire(NULL);
    IF p_ref IS NOT NULL THEN
        s := resolve_sandbox(p_user, NULL, p_ref);
    END IF;
    RETURN QUERY SELECT v.* FROM proposal_view v
                  WHERE (s.id IS NULL OR v.sandbox_id = s.id)
                    AND (v.owner_id = p_user OR os_is_admin(p_user))
                    AND (p_state IS NULL OR v.state = p_state)
                  ORDER BY v.id DESC LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000);
END $$;
COMMENT ON FUNCTION proposal_list(bigint, text, text, integer) IS
    'Proposals a user decides on (of one sandbox, or all theirs; an admin''s: everyone''s), newest first.';

CREATE FUNCTION os_proposal_to_decide(p_user bigint, p_id bigint) RETURNS policy_proposals
LANGUAGE plpgsql AS $$
DECLARE
    pr policy_proposals;
BEGIN
    -- Only a user: these functions have no sandbox principal to pass.
    IF p_user IS NULL OR NOT EXISTS (SELECT 1 FROM users WHERE id = p_user) THEN
        PERFORM os_refuse('NOT_ALLOWED', 'only the user who owns the sandbox decides on its proposals');
    END IF;
    SELECT * INTO pr FROM policy_proposals WHERE id = p_id;
    IF pr.id IS NULL OR (pr.owner_id <> p_user AND NOT os_is_admin(p_user)) THEN
        PERFORM os_refuse('NOT_FOUND', format('proposal %s not found', p_id),
                          jsonb_build_object('field', 'id', 'proposal', p_id));
    END IF;
    PERFORM os_proposals_expire(pr.sandbox_id);
    SELECT * INTO pr FROM policy_proposals WHERE id = p_id FOR UPDATE;
    IF pr.state <> 'pending' THEN
        PERFORM os_refuse('CONFLICT', format('proposal %s is %s, not pending', p_id, pr.state),
                          jsonb_build_object('proposal', p_id, 'state', pr.state));
    END IF;
    RETURN pr;
END $$;
COMMENT ON FUNCTION os_proposal_to_decide(bigint, bigint) IS
    'A pending proposal the user may decide on, locked; refuses other principals, other users'' proposals and decided ones.';

CREATE FUNCTION proposal_pending(p_user bigint, p_id bigint) RETURNS SETOF proposal_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    pr policy_proposals;
BEGIN
    pr := os_proposal_to_decide(p_user, p_id);
    RETURN QUERY SELECT * FROM proposal_view WHERE id = pr.id;
END $$;
COMMENT ON FUNCTION proposal_pending(bigint, bigint) IS
    'A pending proposal the user may decide on: what an approval merges and proves before proposal_approve.';

CREATE FUNCTION proposal_approve(p_user bigint, p_id bigint, p_keys text[], p_document jsonb, p_hash bytea,
                                 p_proof jsonb) RETURNS SETOF proposal_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    pr policy_proposals;
    old_doc jsonb;
    proposed text[];
    v integer;
BEGIN
    pr := os_proposal_to_decide(p_user, p_id);
    -- Merged into another version than the current one: the gateway merges and proves again.
    IF (SELECT policy_version FROM sandboxes WHERE id = pr.sandbox_id) IS DISTINCT FROM (p_proof->>'version')::integer
    THEN
        PERFORM os_refuse('POLICY_CHANGED', format('the policy changed while proposal %s was proved', p_id),
                          jsonb_build_object('reason', 'policy_changed'));
    END IF;
    -- The merged document is the current policy plus exactly the proposed rules.
    SELECT p.document INTO old_doc FROM sandboxes s
      JOIN sandbox_policies p ON p.sandbox_id = s.id AND p.version = s.policy_version WHERE s.id = pr.sandbox_id;
    proposed := ARRAY(SELECT k FROM jsonb_object_keys(pr.rules) k ORDER BY k COLLATE "C");
    IF p_keys IS NULL OR cardinality(p_keys) <> cardinality(proposed)
       OR (p_document - 'network_policies') IS DISTINCT FROM (old_doc - 'network_policies')
       OR (coalesce(p_document->'network_policies', '{}') - p_keys)
          IS DISTINCT FROM coalesce(old_doc->'network_policies', '{}')
       OR EXISTS (SELECT 1 FROM unnest(proposed, p_keys) AS m(orig, merged)
                   WHERE old_doc->'network_policies' ? m.merged
                      OR p_document->'network_policies'->m.merged IS DISTINCT FROM pr.rules->m.orig) THEN
        PERFORM os_refuse('CONFLICT', format('the merged policy is not the current policy plus proposal %s', p_id),
                          jsonb_build_object('proposal', p_id, 'reason', 'merge_mismatch'));
    END IF;
    v := set_policy(p_user, NULL, NULL, pr.sandbox_id::text, p_document, p_hash, p_proof);
    UPDATE policy_proposals SET state = 'approved', decided_at = clock_timestamp(), decided_by_user = p_user,
                                policy_version = v
     WHERE id = pr.id RETURNING * INTO pr;
    PERFORM os_proposal_audit(pr, 'proposal.approve', p_user, NULL, NULL,
                              jsonb_build_object('version', v, 'keys', to_jsonb(p_keys), 'verdict', p_proof->>'verdict'));
    RETURN QUERY SELECT * FROM proposal_view WHERE id = pr.id;
END $$;
COMMENT ON FUNCTION proposal_approve(bigint, bigint, text[], jsonb, bytea, jsonb) IS
    'A user approves a pending proposal: the current policy plus exactly its rules (under p_keys, in key order) becomes the next version through set_policy (which re-checks the proof), in one transaction.';

CREATE FUNCTION proposal_reject(p_user bigint, p_id bigint, p_reason text) RETURNS SETOF proposal_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    pr policy_proposals;
BEGIN
    IF p_reason IS NULL OR length(btrim(p_reason)) = 0 OR length(p_reason) > 1000 THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'reason: required, at most 1000 characters',
                          jsonb_build_object('field', 'reason'));
    END IF;
    pr := os_proposal_to_decide(p_user, p_id);
    UPDATE policy_proposals SET state = 'rejected', decided_at = clock_timestamp(), decided_by_user = p_user,
                                decision_reason = p_reason
     WHERE id = pr.id RETURNING * INTO pr;
    PERFORM os_proposal_audit(pr, 'proposal.reject', p_user, NULL, NULL, jsonb_build_object('reason', p_reason));
    RETURN QUERY SELECT * FROM proposal_view WHERE id = pr.id;
END $$;
COMMENT ON FUNCTION proposal_reject(bigint, bigint, text) IS 'A user rejects a pending proposal, with a reason.';

-- The gateway may only execute these; operators read the view (see V6).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'proposal_create(uuid, text, jsonb, text, integer)', 'proposal_get_own(uuid, bigint)',
        'proposal_list(bigint, text, text, integer)', 'proposal_pending(bigint, bigint)',
        'proposal_approve(bigint, bigint, text[], jsonb, bytea, jsonb)', 'proposal_reject(bigint, bigint, text)'
    ]::regprocedure[] LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO openshell_gateway', f);
    END LOOP;
END $$;
REVOKE ALL ON policy_proposals, proposal_view FROM PUBLIC;
GRANT SELECT ON proposal_view TO openshell_operator;
