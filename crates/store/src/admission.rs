//! Creating a sandbox (sql/admission.sql, sql/idempotency.sql): a user's root with its grant,
//! the parent a child is proved against, a child's admission in one SERIALIZABLE
//! transaction, and the look-up of a repeated request id.

use tokio_postgres::Row;
use uuid::Uuid;

use crate::row::{RowExt, first};
use crate::{AdmissionProof, Code, Error, GrantValues, Kind, Principal, RootProof, Store, queries};

/// A root sandbox to create.
pub struct NewRoot<'a> {
    pub name: &'a str,
    pub command: &'a [String],
    pub policy: &'a serde_json::Value,
    pub policy_hash: &'a [u8; 32],
    pub credential_hash: &'a [u8; 32],
    pub request_id: Option<&'a str>,
    pub args_hash: &'a [u8; 32],
    pub grant: Option<&'a GrantValues>,
    /// What it runs on (resources); its descendants copy it.
    pub template: &'a serde_json::Value,
    /// The driver instance that will run it.
    pub runner: &'a str,
    /// What the policy was proved against.
    pub proof: RootProof,
}

/// A child to admit under a parent.
pub struct NewChild<'a> {
    /// The parent the creator named (a sandbox caller's parent is itself, whatever this says).
    pub parent: &'a str,
    pub name: Option<&'a str>,
    pub kind: Kind,
    pub command: &'a [String],
    pub policy: &'a serde_json::Value,
    pub policy_hash: &'a [u8; 32],
    /// What the policy was proved against.
    pub proof: AdmissionProof,
    pub credential_hash: &'a [u8; 32],
    pub request_id: Option<&'a str>,
    pub args_hash: &'a [u8; 32],
    pub runner: &'a str,
    /// The template the creator asked for: the database fits it to the parent's
    /// (`os_fit_template`), refusing another image or more resources. None: the parent's.
    pub template: Option<&'a serde_json::Value>,
}

/// A parent's current policy, read before the proof.
#[derive(Debug, Clone)]
pub struct ParentSnapshot {
    pub id: Uuid,
    pub name: String,
    pub kind: Kind,
    pub policy: serde_json::Value,
    pub policy_hash: Vec<u8>,
    pub policy_version: i32,
    /// The global maximum read in the same snapshot: its version (0: never set) and document.
    pub global_version: i32,
    pub global_policy: Option<serde_json::Value>,
}

impl Store {
    /// A user creates a root sandbox (`create_root` refuses a sandbox caller); its grant, if
    /// any, goes over as one `os_grant_values`.
    pub async fn create_root(&self, user: &Principal, new: &NewRoot<'_>) -> Result<(Uuid, bool), Error> {
        let rows = self
            .call(
                &queries::CREATE_ROOT,
                &[
                    user,
                    &new.name,
                    &new.command,
                    new.template,
                    new.policy,
                    &new.policy_hash.as_slice(),
                    &new.credential_hash.as_slice(),
                    &new.request_id,
                    &new.args_hash.as_slice(),
                    &new.grant,
                    &new.runner,
                    &new.proof,
                ],
            )
            .await?;
        let r = first(&rows, "create_root")?;
        Ok((r.col("sandbox_id")?, r.col("replayed")?))
    }

    /// The parent a child would be created under, with its current policy. A sandbox
    /// principal's parent is itself, whatever `parent` says (admission checks it).
    pub async fn parent_snapshot(&self, caller: &Principal, parent: &str) -> Result<ParentSnapshot, Error> {
        let rows = self.call(&queries::PARENT_SNAPSHOT, &[caller, &parent]).await?;
        snapshot_of(&rows, parent)
    }

    /// Admits a child in one SERIALIZABLE transaction (see `admit_child` in
    /// sql/admission.sql). Admissions under the same parent take turns in this process first
    /// (see turns.rs).
    pub async fn admit_child(&self, caller: &Principal, new: &NewChild<'_>) -> Result<(Uuid, bool), Error> {
        // The parent admission proved against (a sandbox's own, which SQL checks).
        let _turn = self.turns.take(new.proof.parent_id).await;
        let rows = self
            .call(
                &queries::ADMIT_CHILD,
                &[
                    caller,
                    &new.parent,
                    &new.name,
                    &new.kind,
                    &new.command,
                    new.policy,
                    &new.policy_hash.as_slice(),
                    &new.proof,
                    &new.credential_hash.as_slice(),
                    &new.request_id,
                    &new.args_hash.as_slice(),
                    &new.runner,
                    &new.template,
                ],
            )
            .await?;
        let r = first(&rows, "admit_child")?;
        Ok((r.col("sandbox_id")?, r.col("replayed")?))
    }

    /// The sandbox a repeated request_id created, if this caller already made this request
    /// (a repeat with other arguments is refused).
    pub async fn replayed(
        &self,
        caller: &Principal,
        request_id: Option<&str>,
        args_hash: &[u8; 32],
    ) -> Result<Option<Uuid>, Error> {
        let Some(request_id) = request_id else { return Ok(None) };
        self.value(&queries::REPLAY, &[caller, &request_id, &args_hash.as_slice()]).await
    }
}

pub(crate) fn snapshot_of(rows: &[Row], parent: &str) -> Result<ParentSnapshot, Error> {
    let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {parent} not found")))?;
    Ok(ParentSnapshot {
        id: r.col("id")?,
        name: r.col("name")?,
        kind: r.col("kind")?,
        policy_version: r.col("policy_version")?,
        policy: r.col("document")?,
        policy_hash: r.col("hash")?,
        global_version: r.col("global_version")?,
        global_policy: r.col("global_document")?,
    })
}
