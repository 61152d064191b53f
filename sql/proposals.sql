-- Policy proposals: network rules a sandbox asks for itself through policy.local.
--
-- A proposal starts pending and leaves it once: approved (by a user, with the policy version
-- the approval wrote), rejected (by a user, with a reason), superseded (by a newer proposal of
-- the same sandbox for one of the same rule keys) or expired. Every transition is audited with
-- its actor. A sandbox can propose and read its own proposals; only a user decides (the
-- deciding functions take no sandbox principal at all).

CREATE OR REPLACE FUNCTION policy_proposals_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'pending' THEN
        PERFORM os_refuse('NOT_ALLOWED', format('proposal %s is already %s: a decision is final', OLD.id, OLD.state));
    END IF;
    IF (NEW.sandbox_id, NEW.owner_id, NEW.root_id, NEW.rules, NEW.reason, NEW.created_program, NEW.created_at,
        NEW.expires_at)
       IS DISTINCT FROM
       (OLD.sandbox_id, OLD.owner_id, OLD.root_id, OLD.rules, OLD.reason, OLD.created_program, OLD.created_at,
        OLD.expires_at) THEN
        PERFORM os_refuse('NOT_ALLOWED', format('what proposal %s asks for cannot change', OLD.id));
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION policy_proposals_before_update() IS
    'A proposal changes only its decision, and only once (from pending).';
CREATE TRIGGER policy_proposals_decide_once BEFORE UPDATE ON policy_proposals
    FOR EACH ROW EXECUTE FUNCTION policy_proposals_before_update();
COMMENT ON TRIGGER policy_proposals_decide_once ON policy_proposals IS
    'Only the decision columns change, and only from pending.';

CREATE OR REPLACE FUNCTION os_proposal_audit(pr policy_proposals, p_action text, p_user bigint, p_sandbox uuid,
                                  p_program text, p_details jsonb) RETURNS void LANGUAGE sql AS $$
    INSERT INTO audit_log (action, outcome, actor_user, actor_sandbox, actor_program, owner_id, sandbox_id,
                           parent_id, root_id, details)
    SELECT p_action, 'done', p_user, p_sandbox, nullif(p_program, ''), pr.owner_id, pr.sandbox_id, s.parent_id,
           pr.root_id, jsonb_build_object('proposal', pr.id, 'state', pr.state) || coalesce(p_details, '{}')
      FROM sandboxes s WHERE s.id = pr.sandbox_id
$$;
COMMENT ON FUNCTION os_proposal_audit(policy_proposals, text, bigint, uuid, text, jsonb) IS
    'The receipt of one proposal transition, with its actor (a user, the sandbox, or none for system.*).';

CREATE OR REPLACE FUNCTION os_proposals_expire(p_sandbox uuid) RETURNS void LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION os_proposal_to_decide(p_user bigint, p_id bigint) RETURNS policy_proposals
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

CREATE OR REPLACE FUNCTION proposal_create(p_sandbox uuid, p_program text, p_rules jsonb, p_reason text, p_ttl_seconds integer)
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

CREATE OR REPLACE FUNCTION proposal_get_own(p_sandbox uuid, p_id bigint) RETURNS SETOF proposal_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM os_proposals_expire(p_sandbox);
    IF NOT EXISTS (SELECT 1 FROM policy_proposals WHERE id = p_id AND sandbox_id = p_sandbox) THEN
        PERFORM os_refuse('NOT_FOUND', format('proposal %s not found', p_id),
                          jsonb_build_object('field', 'id', 'proposal', p_id));
    END IF;
    RETURN QUERY SELECT * FROM proposal_view WHERE id = p_id;
END $$;
COMMENT ON FUNCTION proposal_get_own(uuid, bigint) IS
    'One of the calling sandbox''s own proposals (another''s is not found).';

CREATE OR REPLACE FUNCTION proposal_list(p_user bigint, p_ref text, p_state text, p_limit integer) RETURNS SETOF proposal_view
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
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. Proposals a user decides on (of one sandbox, or all theirs; an admin''s: everyone''s), newest first.';

CREATE OR REPLACE FUNCTION proposal_list(p_caller os_caller, p_ref text, p_state text, p_limit integer)
RETURNS SETOF proposal_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM proposal_list(p_user => os_caller_user(p_caller, 'decide on proposals'), p_ref => p_ref,
                                p_state => p_state, p_limit => p_limit)
$$;
COMMENT ON FUNCTION proposal_list(os_caller, text, text, integer) IS
    'Proposals the calling user decides on, newest first.';

CREATE OR REPLACE FUNCTION proposal_pending(p_user bigint, p_id bigint) RETURNS SETOF proposal_view
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    pr policy_proposals;
BEGIN
    pr := os_proposal_to_decide(p_user, p_id);
    RETURN QUERY SELECT * FROM proposal_view WHERE id = pr.id;
END $$;
COMMENT ON FUNCTION proposal_pending(bigint, bigint) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A pending proposal the user may decide on: what an approval merges and proves before proposal_approve.';

CREATE OR REPLACE FUNCTION proposal_pending(p_caller os_caller, p_id bigint)
RETURNS SETOF proposal_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM proposal_pending(p_user => os_caller_user(p_caller, 'decide on proposals'), p_id => p_id)
$$;
COMMENT ON FUNCTION proposal_pending(os_caller, bigint) IS
    'A pending proposal the calling user may decide on.';

CREATE OR REPLACE FUNCTION proposal_approve(p_user bigint, p_id bigint, p_keys text[], p_document jsonb, p_hash bytea,
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
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A user approves a pending proposal: the current policy plus exactly its rules (under p_keys, in key order) becomes the next version through set_policy (which re-checks the proof), in one transaction.';

CREATE OR REPLACE FUNCTION proposal_approve(p_caller os_caller, p_id bigint, p_keys text[], p_document jsonb, p_hash bytea,
                                 p_proof jsonb)
RETURNS SETOF proposal_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM proposal_approve(p_user => os_caller_user(p_caller, 'decide on proposals'), p_id => p_id,
                                   p_keys => p_keys, p_document => p_document, p_hash => p_hash, p_proof => p_proof)
$$;
COMMENT ON FUNCTION proposal_approve(os_caller, bigint, text[], jsonb, bytea, jsonb) IS
    'The calling user approves a proposal: the merged policy becomes the next version, re-checked against the proof.';

CREATE OR REPLACE FUNCTION proposal_reject(p_user bigint, p_id bigint, p_reason text) RETURNS SETOF proposal_view
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
COMMENT ON FUNCTION proposal_reject(bigint, bigint, text) IS
    'Internal: holds the rule; the gateway calls the os_caller signature of the same name. A user rejects a pending proposal, with a reason.';

CREATE OR REPLACE FUNCTION proposal_reject(p_caller os_caller, p_id bigint, p_reason text)
RETURNS SETOF proposal_view LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM proposal_reject(p_user => os_caller_user(p_caller, 'decide on proposals'), p_id => p_id,
                                  p_reason => p_reason)
$$;
COMMENT ON FUNCTION proposal_reject(os_caller, bigint, text) IS
    'The calling user rejects a proposal, with a reason.';

-- A long-poll through policy.local waits in the gateway for this, not by asking again and
-- again (crates/gateway/src/ops/proposals.rs). The payload names ids only.
CREATE OR REPLACE FUNCTION os_notify_proposal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('openshell_changes',
                      json_build_object('kind', 'proposal', 'sandbox', NEW.sandbox_id, 'id', NEW.id)::text);
    RETURN NULL;
END $$;
COMMENT ON FUNCTION os_notify_proposal() IS
    'Tells the gateways (channel openshell_changes) that a proposal was made or left pending: its sandbox and id.';
CREATE TRIGGER policy_proposals_notify AFTER INSERT OR UPDATE ON policy_proposals
    FOR EACH ROW EXECUTE FUNCTION os_notify_proposal();
COMMENT ON TRIGGER policy_proposals_notify ON policy_proposals IS
    'A decision (or expiry, or supersession) wakes the sandbox''s long-polls at commit.';
