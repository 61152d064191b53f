//! Policies: which policy a sandbox gets and the proof that it fits (`gate`), changing
//! policies after creation (`write`), dry runs of the proof (`check_policy`), and reading a
//! sandbox's policy and the global maximum.

pub(crate) mod gate;
pub(crate) mod write;

use openshell_policy::Policy;
use openshell_prover::Verdict;
use openshell_store::{Error, Principal, Proposal};

use crate::auth::require_user;
use crate::{Gateway, input};

/// A sandbox's current policy.
pub struct PolicyView {
    pub sandbox_id: uuid::Uuid,
    pub sandbox_name: String,
    pub version: i32,
    pub policy: Policy,
}

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

    /// A sandbox's current policy, as the caller may see it.
    pub async fn get_policy(&self, caller: &Principal, reference: &str) -> Result<PolicyView, Error> {
        input::reference("sandbox", reference)?;
        let t = self.store.policy_target(caller, reference).await?;
        let policy = gate::stored(&t.name, &t.policy)?;
        Ok(PolicyView { sandbox_id: t.id, sandbox_name: t.name, version: t.version, policy })
    }

    /// Replaces a sandbox's policy (see [`Gateway::set_policy`]) and returns it as stored,
    /// with the warnings about what the document says.
    pub async fn replace_policy(
        &self,
        caller: &Principal,
        reference: &str,
        yaml: &str,
    ) -> Result<(PolicyView, Vec<String>), Error> {
        let written = self.set_policy(caller, reference, yaml).await?;
        Ok((self.get_policy(caller, reference).await?, written.warnings))
    }

    /// The global maximum policy's version and document (None: no maximum set). Users only.
    pub async fn get_global_max(&self, caller: &Principal) -> Result<(i32, Option<Policy>), Error> {
        require_user(caller)?;
        self.global_max().await
    }

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

    /// Replaces a child's policy (proved within its boundary, its own live children within
    /// the new one); returns the new version.
    pub async fn update_child_policy(
        &self,
        caller: &Principal,
        reference: &str,
        yaml: &str,
    ) -> Result<write::Written, Error> {
        self.set_policy(caller, reference, yaml).await
    }
}
