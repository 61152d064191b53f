//! Dry runs of the containment proof (`check_policy`) and policy changes of a child.

use openshell_prover::Verdict;
use openshell_store::{Error, Principal};

use crate::{Gateway, input, policy_gate};

/// What a candidate is checked against.
pub enum Boundary {
    /// A policy document given by the caller.
    Yaml(String),
    /// The boundary a child of this sandbox must fit in (its policy minus what the prover
    /// cannot model, intersected with the global maximum).
    ParentOf(String),
    /// A sandbox caller's own boundary for its children.
    Own,
}

pub struct CheckPolicy {
    pub boundary: Boundary,
    pub candidate: String,
}

impl Gateway {
    /// Proves the candidate within the boundary and returns the verdict; creates nothing.
    /// Bounded by the caller's CheckPolicy rate, the proof slots and the proof timeout.
    pub async fn check_policy(&self, caller: &Principal, req: CheckPolicy) -> Result<Verdict, Error> {
        let candidate = policy_gate::parse("candidate", &req.candidate)?.unwrap_or_default();
        let boundary = match req.boundary {
            Boundary::Yaml(yaml) => policy_gate::parse("boundary", &yaml)?.unwrap_or_default(),
            Boundary::ParentOf(reference) => {
                input::reference("parent", &reference)?;
                self.child_boundary(caller, &reference).await?
            }
            Boundary::Own => match caller {
                Principal::Sandbox { id, .. } => self.child_boundary(caller, &id.to_string()).await?,
                Principal::User { .. } => {
                    return Err(Error::invalid("parent", "required: the sandbox the child would be created under"));
                }
            },
        };
        self.check_rate.take("check_policy", caller)?;
        policy_gate::verdict(&self.proofs(), boundary, candidate).await
    }

    async fn child_boundary(&self, caller: &Principal, parent: &str) -> Result<openshell_policy::Policy, Error> {
        let parent = self.store.parent_snapshot(caller, parent).await?;
        let policy = policy_gate::stored(&parent.name, &parent.policy)?;
        let global = parent.global_policy.as_ref().map(|d| policy_gate::stored("the global maximum", d)).transpose()?;
        Ok(openshell_prover::boundary(&policy, global.as_ref()))
    }

    /// Replaces a child's policy (proved within its boundary, its own live children within
    /// the new one); returns the new version.
    pub async fn update_child_policy(&self, caller: &Principal, reference: &str, yaml: &str) -> Result<i32, Error> {
        self.set_policy(caller, reference, yaml).await
    }
}
