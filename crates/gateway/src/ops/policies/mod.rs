//! Policies: which policy a sandbox gets and the proof that it fits (`gate`), changing
//! policies after creation (`write`), dry runs of the proof (`check`), and here reading a
//! sandbox's policy and the global maximum.

mod check;
pub(crate) mod gate;
pub(crate) mod write;

pub use check::{Boundary, CheckPolicy};

use openshell_policy::Policy;
use openshell_store::{Error, Principal};

use crate::auth::require_user;
use crate::{Gateway, input};

/// A sandbox's current policy.
pub struct PolicyView {
    pub sandbox_id: uuid::Uuid,
    pub sandbox_name: String,
    pub version: i32,
    pub policy: Policy,
}

impl Gateway {
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
