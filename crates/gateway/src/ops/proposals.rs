//! Policy proposals: a sandbox asks for network rules for itself (through its supervisor's
//! policy.local), its user approves or rejects. An approval merges the rules into the
//! sandbox's current policy and writes the next version only if the merged policy is proved
//! within the sandbox's boundary, through the same proof as a policy write.

use openshell_policy::Policy;
use openshell_store::{Code, Error, NewProposal, Principal, Proposal};
use serde_json::json;

use super::policies::gate;
use super::policies::write::{RACE_RETRIES, raced};
use crate::Gateway;
use crate::auth::require_sandbox;
use crate::changes::Kind;
use crate::input;

/// Largest proposal document (YAML or JSON), as policy.local bounds its bodies.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// How long a proposal stays pending before it expires.
const TTL_SECONDS: i32 = 24 * 3600;
/// Longest one wait for a decision (policy.local's long-poll waits in several).
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// How long after its expiry a waiting long-poll reads the proposal again.
const EXPIRY_MARGIN: std::time::Duration = std::time::Duration::from_millis(20);

impl Gateway {
    /// Proposals the caller may review (`limit` 0 for 100, at most 1000).
    pub async fn list_proposals(
        &self,
        caller: &Principal,
        sandbox: Option<&str>,
        state: Option<&str>,
        limit: i32,
    ) -> Result<Vec<Proposal>, Error> {
        if let Some(s) = sandbox {
            input::reference("sandbox", s)?;
        }
        if !(0..=1000).contains(&limit) {
            return Err(Error::invalid("limit", "1 to 1000 (0 means 100)"));
        }
        let limit = if limit == 0 { 100 } else { limit };
        // Only a user decides on proposals: proposal_list refuses a sandbox (sql/proposals.sql).
        self.store.proposals(caller, sandbox, state, limit).await
    }

    /// A sandbox proposes rules for its own policy: `{reason, network_policies}`.
    pub async fn propose(&self, caller: &Principal, document: &str) -> Result<Proposal, Error> {
        let id = require_sandbox(caller)?;
        let (reason, rules) = parse_document(document)?;
        let program = match caller {
            Principal::Sandbox { program, .. } => program.as_deref(),
            Principal::User { .. } => None,
        };
        let new = NewProposal { rules: &rules, reason: &reason, program, ttl_seconds: TTL_SECONDS };
        self.store.propose(id, &new).await
    }

    pub async fn own_proposal(&self, caller: &Principal, id: i64) -> Result<Proposal, Error> {
        let sandbox = require_sandbox(caller)?;
        self.store.own_proposal(sandbox, id).await
    }

    /// Waits until one of the caller's own proposals leaves pending, for at most `timeout`
    /// ([`MAX_WAIT`]): woken by the database's notification of its decision, and at its
    /// expiry (which no write announces: reading it expires it). Returns it, and whether it is
    /// still pending at the timeout.
    pub async fn wait_own_proposal(
        &self,
        caller: &Principal,
        id: i64,
        timeout: std::time::Duration,
    ) -> Result<(Proposal, bool), Error> {
        let sandbox = require_sandbox(caller)?;
        if timeout > MAX_WAIT {
            return Err(Error::invalid("timeout_ms", format!("at most {}", MAX_WAIT.as_millis())));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.changes.sandbox(sandbox);
        loop {
            changes.mark();
            let p = self.store.own_proposal(sandbox, id).await?;
            if p.state != "pending" {
                return Ok((p, false));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok((p, true));
            }
            // A moment past the expiry, so the read finds it due.
            let expiry = (p.expires_at - chrono::Utc::now()).to_std().unwrap_or_default() + EXPIRY_MARGIN;
            let wake = deadline.min(now + expiry);
            tokio::select! {
                r = changes.changed(Kind::Proposal) => {
                    r.map_err(|_| Error::unavailable("the gateway is shutting down"))?;
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// The user approves: the merged policy is proved, then written with the approval in one
    /// transaction. Refused (the proposal stays pending) when the proof fails.
    pub async fn approve_proposal(&self, caller: &Principal, id: i64) -> Result<Proposal, Error> {
        let result = self.approve_inner(caller, id).await;
        let target = match &result {
            Err(e) => e.details.get("sandbox_id").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
            Ok(p) => p.sandbox_id.to_string(),
        };
        self.receipt_on_refusal(caller, "proposal.approve", &target, None, result).await
    }

    async fn approve_inner(&self, caller: &Principal, id: i64) -> Result<Proposal, Error> {
        // Only a user decides: the proposal functions refuse a sandbox (sql/proposals.sql).
        let proposal = self.store.pending_proposal(caller, id).await?;
        let sandbox = proposal.sandbox_id.to_string();
        let about = |e: Error| {
            let mut details = e.details.clone();
            if let serde_json::Value::Object(map) = &mut details {
                map.insert("proposal".into(), json!(id));
                map.insert("sandbox_id".into(), json!(sandbox));
            } else {
                details = json!({"proposal": id, "sandbox_id": sandbox});
            }
            e.with_details(details)
        };
        for _ in 0..RACE_RETRIES {
            let target = self.store.policy_target(caller, &sandbox).await.map_err(about)?;
            let current = gate::stored(&target.name, &target.policy).map_err(about)?;
            let (keys, merged) = merge(&current, &proposal).map_err(about)?;
            let proof = self.prove_write(&target, &merged).await.map_err(about)?;
            let decided = gate::decided(&merged);
            match self.store.approve_proposal(caller, id, &keys, &decided.document, &decided.hash, &proof).await {
                Err(e) if e.is_policy_changed() => continue,
                other => return other.map_err(about),
            }
        }
        Err(about(raced()))
    }

    pub async fn reject_proposal(&self, caller: &Principal, id: i64, reason: &str) -> Result<Proposal, Error> {
        let result = async {
            if reason.trim().is_empty() || reason.chars().count() > 1000 {
                return Err(Error::invalid("reason", "required, at most 1000 characters"));
            }
            self.store.reject_proposal(caller, id, reason).await
        }
        .await;
        let target = result.as_ref().map(|p| p.sandbox_id.to_string()).unwrap_or_default();
        self.receipt_on_refusal(caller, "proposal.reject", &target, None, result).await
    }
}

/// The reason and the canonical `network_policies` entries of a proposal document; every
/// other key is refused, and the rules are validated as the policy's own section.
fn parse_document(document: &str) -> Result<(String, serde_json::Value), Error> {
    if document.len() > MAX_DOCUMENT_BYTES {
        return Err(Error::invalid("body", format!("at most {MAX_DOCUMENT_BYTES} bytes")));
    }
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(document)
        .map_err(|e| Error::invalid("body", format!("not a YAML or JSON document: {e}")))?;
    let serde_yaml_ng::Value::Mapping(map) = value else {
        return Err(Error::invalid("body", "an object with reason and network_policies"));
    };
    let mut reason = None;
    let mut rules = None;
    for (k, v) in map {
        match k.as_str() {
            Some("reason") => match v {
                serde_yaml_ng::Value::String(s) => reason = Some(s),
                _ => return Err(Error::invalid("reason", "a string")),
            },
            Some("network_policies") => rules = Some(v),
            Some(other) => {
                return Err(Error::invalid(
                    other,
                    "unknown field: a proposal has only reason and network_policies (network rules only)",
                ));
            }
            None => return Err(Error::invalid("body", "keys must be strings")),
        }
    }
    let reason = reason.ok_or_else(|| Error::invalid("reason", "required: why the sandbox needs these rules"))?;
    if reason.trim().is_empty() || reason.chars().count() > 1000 {
        return Err(Error::invalid("reason", "required, at most 1000 characters"));
    }
    let rules = rules.ok_or_else(|| Error::invalid("network_policies", "required: the rules wanted"))?;
    match &rules {
        serde_yaml_ng::Value::Mapping(m) if !m.is_empty() && m.len() <= 16 => {}
        serde_yaml_ng::Value::Mapping(_) => {
            return Err(Error::invalid("network_policies", "1 to 16 named rules"));
        }
        _ => return Err(Error::invalid("network_policies", "a map of rule name to rule")),
    }
    let mut wrapper = serde_yaml_ng::Mapping::new();
    wrapper.insert("version".into(), 1.into());
    wrapper.insert("network_policies".into(), rules);
    let text = serde_yaml_ng::to_string(&wrapper).map_err(|e| Error::invalid("network_policies", e.to_string()))?;
    let policy = Policy::from_yaml(&text).map_err(|e| {
        let field = if e.path.is_empty() || e.path == "." { "network_policies".to_string() } else { e.path.clone() };
        Error::invalid(&field, e.reason)
    })?;
    let canonical = policy.canonical_json();
    Ok((reason, canonical["network_policies"].clone()))
}

/// The current policy plus the proposal's rules, in key order; a key the policy already uses
/// gets the proposal's number appended (an approval only ever adds rules). Returns the key
/// each rule got, in the proposal's key order.
fn merge(current: &Policy, proposal: &Proposal) -> Result<(Vec<String>, Policy), Error> {
    let mut document = current.canonical_json();
    let rules = proposal.rules.as_object().ok_or_else(|| Error::database("a stored proposal is not an object"))?;
    let mut entries: Vec<(&String, &serde_json::Value)> = rules.iter().collect();
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let network = document
        .as_object_mut()
        .and_then(|d| {
            d.entry("network_policies").or_insert_with(|| json!({}));
            d.get_mut("network_policies")
        })
        .and_then(|n| n.as_object_mut())
        .ok_or_else(|| Error::database("a stored policy has no network_policies object"))?;
    let mut keys = Vec::new();
    for (key, rule) in entries {
        let mut merged = key.clone();
        let mut n = 1;
        while network.contains_key(&merged) {
            merged = if n == 1 {
                format!("{key}-proposal-{}", proposal.id)
            } else {
                format!("{key}-proposal-{}-{n}", proposal.id)
            };
            n += 1;
        }
        network.insert(merged.clone(), rule.clone());
        keys.push(merged);
    }
    let merged = Policy::from_json(&document).map_err(|e| {
        Error::new(Code::InvalidArgument, format!("the policy with proposal {} merged is invalid: {e}", proposal.id))
            .with_details(json!({"field": "network_policies", "reason": "merged_invalid"}))
    })?;
    Ok((keys, merged))
}
