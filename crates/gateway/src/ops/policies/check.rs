//! Dry runs of the containment proof (`check_policy`): whether a candidate policy fits a
//! boundary, answered as the create's proof would answer it; creates nothing.

use openshell_policy::Policy;
use openshell_prover::Verdict;
use openshell_store::{Error, Principal};

use super::gate;
use crate::{Gateway, input};

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
        // Both as they would be stored (with the baseline paths), so the answer is the
        // create's.
        let written = |field: &str, yaml: &str| -> Result<Policy, Error> {
            Ok(gate::parse(field, yaml)?.map(|w| gate::effective(&w.policy)).unwrap_or_default())
        };
        let candidate = written("candidate", &req.candidate)?;
        let boundary = match req.boundary {
            Boundary::Yaml(yaml) => written("boundary", &yaml)?,
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
        gate::verdict(&self.proofs(), boundary, candidate).await
    }

    async fn child_boundary(&self, caller: &Principal, parent: &str) -> Result<openshell_policy::Policy, Error> {
        let parent = self.store.parent_snapshot(caller, parent).await?;
        let policy = gate::stored(&parent.name, &parent.policy)?;
        let global = parent.global_policy.as_ref().map(|d| gate::stored("the global maximum", d)).transpose()?;
        Ok(openshell_prover::boundary(&policy, global.as_ref()))
    }
}
