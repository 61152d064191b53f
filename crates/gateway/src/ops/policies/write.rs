//! Changing policies after creation: a sandbox's (proved within its boundary, its live
//! children proved within the new one) and the admin's global maximum.

use openshell_policy::Policy;
use openshell_store::{Code, Error, PolicyTarget, Principal};
use serde_json::json;

use super::gate;
use crate::Gateway;

/// How often a write is re-proved when something it was proved against changes meanwhile.
pub(crate) const RACE_RETRIES: usize = 3;

/// What a write answers when the policies it was proved against kept changing.
pub(crate) fn raced() -> Error {
    Error::new(Code::Conflict, "the policies around this sandbox kept changing; try again")
}

/// A policy write's new version and the warnings about what it says (deprecated or ignored
/// fields).
pub struct Written {
    pub version: i32,
    pub warnings: Vec<String>,
}

impl Gateway {
    pub async fn set_policy(&self, caller: &Principal, reference: &str, yaml: &str) -> Result<Written, Error> {
        let result = self.set_policy_inner(caller, reference, yaml).await;
        self.receipt_on_refusal(caller, "policy.set", reference, None, result).await
    }

    async fn set_policy_inner(&self, caller: &Principal, reference: &str, yaml: &str) -> Result<Written, Error> {
        crate::input::reference("sandbox", reference)?;
        let written = gate::parse("policy", yaml)?
            .ok_or_else(|| Error::invalid("policy", "required (a policy YAML document)"))?;
        for _ in 0..RACE_RETRIES {
            let target = self.store.policy_target(caller, reference).await?;
            // The filesystem was fixed at start: the baseline paths it got stay, whether or
            // not the new document repeats them.
            let current = gate::stored(&target.name, &target.policy)?;
            let new = written.policy.keeping_baseline_of(&current);
            let decided = gate::decided(&new);
            let proof = self.prove_write(&target, &new).await?;
            match self.store.set_policy(caller, reference, &decided.document, &decided.hash, &proof).await {
                Err(e) if e.is_policy_changed() => continue,
                other => return other.map(|version| Written { version, warnings: written.warnings }),
            }
        }
        Err(raced())
    }

    /// Proves `new` as the next policy of `target`: within its parent's policy and the global
    /// maximum, with every live child still within it. Returns what it was proved against,
    /// which the SQL write re-checks.
    pub(crate) async fn prove_write(&self, target: &PolicyTarget, new: &Policy) -> Result<serde_json::Value, Error> {
        let (global_version, global) = self.global_max().await?;
        let gate = self.proofs();
        let boundary = match &target.parent {
            Some(parent) => {
                Some(openshell_prover::boundary(&gate::stored("the parent", &parent.policy)?, global.as_ref()))
            }
            None => global.as_ref().map(|g| openshell_prover::boundary(g, None)),
        };
        let verdict = match boundary {
            Some(b) => {
                let against =
                    if target.parent.is_some() { "the parent's boundary" } else { "the global maximum policy" };
                gate::prove(&gate, b, new.clone(), "the new policy", against).await?;
                "within"
            }
            None => "no_global_max",
        };
        // Access only narrows down the tree: every live child must still fit.
        let child_boundary = openshell_prover::boundary(new, global.as_ref());
        for child in &target.children {
            let policy = gate::stored(&child.name, &child.policy)?;
            let subject = format!("live child {}'s policy", child.name);
            gate::prove(&gate, child_boundary.clone(), policy, &subject, "the new policy").await?;
        }
        let children: Vec<_> = target.children.iter().map(|c| json!([c.id, c.version])).collect();
        Ok(json!({
            "id": target.id,
            "version": target.version,
            "parent_id": target.parent.as_ref().map(|p| p.id),
            "parent_version": target.parent.as_ref().map(|p| p.version),
            "global_version": global_version,
            "children": children,
            "verdict": verdict,
        }))
    }

    pub async fn set_global_max(&self, caller: &Principal, yaml: &str) -> Result<(i32, Option<Policy>), Error> {
        let result = self.set_global_max_inner(caller, yaml).await;
        self.receipt_on_refusal(caller, "policy.global_max", "", None, result).await
    }

    async fn set_global_max_inner(&self, caller: &Principal, yaml: &str) -> Result<(i32, Option<Policy>), Error> {
        // Only an admin sets it: global_max_set decides (sql/policies.sql), after the parse.
        // With the baseline, as every sandbox policy under it (else no policy with network
        // rules could fit).
        let policy = gate::parse("policy", yaml)?.map(|w| gate::effective(&w.policy));
        let decided = policy.as_ref().map(gate::decided);
        let version = self.store.set_global_max(caller, decided.as_ref().map(|d| (&d.document, &d.hash))).await?;
        Ok((version, policy))
    }
}
