//! Policies (sql/policies.sql): a sandbox's current one as its supervisor polls it, the
//! global maximum, what a write is proved against (the parent's and the children's) and the
//! write itself.

use uuid::Uuid;

use crate::row::{RowExt, first};
use crate::{Code, Error, Phase, Principal, Store, queries};

/// A sandbox's policy with everything a write to it is proved against.
#[derive(Debug, Clone)]
pub struct PolicyTarget {
    pub id: Uuid,
    pub name: String,
    pub phase: Phase,
    pub version: i32,
    pub policy: serde_json::Value,
    /// The parent's current policy and version (None for a root).
    pub parent: Option<ParentPolicy>,
    /// Live children, whose policies must still fit after the write.
    pub children: Vec<PolicyChild>,
}

/// See [`Store::supervisor_start`].
#[derive(Debug, Clone)]
pub struct SupervisorStart {
    pub id: Uuid,
    pub name: String,
    pub version: i32,
    pub policy: serde_json::Value,
    pub parent_policy: Option<serde_json::Value>,
    pub global: Option<serde_json::Value>,
}

#[derive(Debug, Clone)]
pub struct ParentPolicy {
    pub id: Uuid,
    pub policy: serde_json::Value,
    pub version: i32,
}

#[derive(Debug, Clone)]
pub struct PolicyChild {
    pub id: Uuid,
    pub name: String,
    pub version: i32,
    pub policy: serde_json::Value,
}

impl Store {
    /// A sandbox's current policy version, and its document when that differs from `known`.
    pub async fn current_policy(&self, id: Uuid, known: i32) -> Result<(i32, Option<serde_json::Value>), Error> {
        let rows = self.call(&queries::CURRENT_POLICY, &[&id, &known]).await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, "sandbox not found"))?;
        Ok((r.col("version")?, r.col("document")?))
    }

    /// The global maximum policy: its version (0 if never set) and document (None if none).
    pub async fn global_max(&self) -> Result<(i32, Option<serde_json::Value>), Error> {
        let rows = self.call(&queries::GLOBAL_MAX, &[]).await?;
        let r = rows.first().ok_or_else(|| Error::database("global_max_current returned nothing"))?;
        Ok((r.col("version")?, r.col("document")?))
    }

    /// An admin sets (None: clears) the global maximum; returns its new version.
    pub async fn set_global_max(
        &self,
        caller: &Principal,
        policy: Option<(&serde_json::Value, &[u8; 32])>,
    ) -> Result<i32, Error> {
        let (doc, hash) = policy.map_or((None, None), |(d, h)| (Some(d), Some(h.as_slice())));
        self.value(&queries::GLOBAL_MAX_SET, &[caller, &doc, &hash]).await
    }

    /// A sandbox's current policy, its parent's, and its live children's, as the caller may
    /// see them: what a policy write is proved against.
    pub async fn policy_target(&self, caller: &Principal, reference: &str) -> Result<PolicyTarget, Error> {
        // A sandbox reads its own policy too, but writes only its descendants' (set_policy).
        let rows = self.call(&queries::POLICY_TARGET, &[caller, &reference]).await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {reference} not found")))?;
        let id: Uuid = r.col("id")?;
        let children = self
            .call(&queries::POLICY_CHILDREN, &[&id])
            .await?
            .iter()
            .map(|c| {
                Ok(PolicyChild {
                    id: c.col("id")?,
                    name: c.col("name")?,
                    version: c.col("policy_version")?,
                    policy: c.col("document")?,
                })
            })
            .collect::<Result<_, Error>>()?;
        let parent_version: Option<i32> = r.col("parent_version")?;
        let parent_document: Option<serde_json::Value> = r.col("parent_document")?;
        let parent_id: Option<Uuid> = r.col("parent_id")?;
        Ok(PolicyTarget {
            id,
            name: r.col("name")?,
            phase: r.col("phase")?,
            version: r.col("policy_version")?,
            policy: r.col("document")?,
            parent: match (parent_id, parent_document, parent_version) {
                (Some(id), Some(doc), Some(v)) => Some(ParentPolicy { id, policy: doc, version: v }),
                (Some(_), _, _) => {
                    return Err(Error::new(Code::PolicyUnprovable, "the parent's current policy version is missing"));
                }
                _ => None,
            },
            children,
        })
    }

    /// What the supervisor holding the credential that hashes to `credential_hash` starts
    /// with, in one round trip that also checks the credential (sql/supervisor.sql): its
    /// sandbox's current policy and version, its parent's policy and the global maximum (the
    /// boundaries its filesystem rules are cut to).
    pub async fn supervisor_start(&self, credential_hash: &[u8; 32]) -> Result<SupervisorStart, Error> {
        let rows = self.call(&queries::SUPERVISOR_START, &[&credential_hash.as_slice()]).await?;
        let r = first(&rows, "supervisor_start")?;
        Ok(SupervisorStart {
            id: r.col("id")?,
            name: r.col("name")?,
            version: r.col("policy_version")?,
            policy: r.col("document")?,
            parent_policy: r.col("parent_document")?,
            global: r.col("global_document")?,
        })
    }

    /// Writes a new policy version (see `set_policy` in sql/policies.sql); returns the version.
    pub async fn set_policy(
        &self,
        caller: &Principal,
        reference: &str,
        policy: &serde_json::Value,
        hash: &[u8; 32],
        proof: &serde_json::Value,
    ) -> Result<i32, Error> {
        let rows = self.call(&queries::SET_POLICY, &[caller, &reference, policy, &hash.as_slice(), proof]).await?;
        first(&rows, "set_policy")?.col(0)
    }
}
