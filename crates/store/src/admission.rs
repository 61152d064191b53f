//! Creating a sandbox (sql/admission.sql, sql/idempotency.sql): a user's root with its grant,
//! the parent a child is proved against, a child's admission in one SERIALIZABLE
//! transaction, and the look-up of a repeated request id.

use tokio_postgres::Row;
use uuid::Uuid;

use crate::row::{FromRow, RowExt, first};
use crate::{AdmissionProof, Code, Error, GrantValues, Kind, Principal, RootProof, Sandbox, Store, queries};

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

/// A child's create through `create_child` (sql/admission.sql): what [`NewChild`] says,
/// except that the policy may be left to the parent's and the proof may still be owed.
#[derive(Clone, Copy)]
pub struct CreateChild<'a> {
    /// The parent the creator named (a sandbox caller's parent is itself, whatever this says).
    pub parent: &'a str,
    /// Where to look for a user's parent first: its id when this gateway saw the name before
    /// (checked in SQL as a proof's parent is: the name must still name it).
    pub parent_id: Option<Uuid>,
    /// A door call's credential (SHA-256): its check and the call taken from its sandbox's
    /// bucket come first, in the same transaction.
    pub door: Option<&'a [u8; 32]>,
    pub name: Option<&'a str>,
    pub kind: Kind,
    pub command: &'a [String],
    pub policy: ChildPolicy<'a>,
    pub credential_hash: &'a [u8; 32],
    pub request_id: Option<&'a str>,
    pub args_hash: &'a [u8; 32],
    pub runner: &'a str,
    /// As [`NewChild::template`].
    pub template: Option<&'a serde_json::Value>,
}

/// Which policy a created child gets.
#[derive(Clone, Copy)]
pub enum ChildPolicy<'a> {
    /// Its parent's current one: admitted in this one call when no global maximum is set
    /// (nothing to prove); else the parent's snapshot comes back to prove against.
    Inherit,
    /// One still to prove: the parent's snapshot comes back.
    Requested,
    /// Proved against a snapshot: the admission re-checks that it is current.
    Proved { policy: &'a serde_json::Value, hash: &'a [u8; 32], proof: AdmissionProof },
}

/// What a `create_child` call did.
#[derive(Debug)]
pub enum ChildCreated {
    /// Admitted (or, `replayed`, the child a repeated request id created); `inherited` is the
    /// parent's policy an inheriting child was given in this call.
    Admitted { sandbox: Box<Sandbox>, replayed: bool, inherited: Option<serde_json::Value> },
    /// Nothing admitted: prove the child's policy against this snapshot, then call again.
    Prove(ParentSnapshot),
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
    /// Returns the sandbox as the caller may see it, and whether it answers a repeated request_id.
    pub async fn create_root(&self, user: &Principal, new: &NewRoot<'_>) -> Result<(Sandbox, bool), Error> {
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
        Ok((Sandbox::from_row(r)?, r.col("replayed")?))
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

    /// A child's create in as few round trips as it needs (see `create_child` in
    /// sql/admission.sql): one for a child that inherits its parent's policy when no global
    /// maximum is set, else one for the snapshot (or a repeat's answer) and one for the proved
    /// admission. Admissions under one parent take turns in this process first (turns.rs),
    /// when the parent is known before the call.
    pub async fn create_child(&self, caller: &Principal, new: &CreateChild<'_>) -> Result<ChildCreated, Error> {
        let (policy, hash, proof) = match new.policy {
            ChildPolicy::Proved { policy, hash, proof } => (Some(policy), Some(hash.as_slice()), Some(proof)),
            // Any document says "not inherited": the first call only reads the snapshot.
            ChildPolicy::Requested => (Some(&serde_json::Value::Null), None, None),
            ChildPolicy::Inherit => (None, None, None),
        };
        let parent = match (caller, proof) {
            (_, Some(p)) => Some(p.parent_id),
            (Principal::Sandbox { id, .. }, None) => Some(*id),
            (Principal::User { .. }, None) => new.parent_id,
        };
        let admits = proof.is_some() || matches!(new.policy, ChildPolicy::Inherit);
        let _turn = match parent {
            Some(p) if admits => Some(self.turns.take(p).await),
            _ => None,
        };
        let rows = self
            .call(
                &queries::CREATE_CHILD,
                &[
                    caller,
                    &new.door.map(|d| d.as_slice()),
                    &new.parent,
                    &new.parent_id,
                    &new.name,
                    &new.kind,
                    &new.command,
                    &policy,
                    &hash,
                    &proof,
                    &new.credential_hash.as_slice(),
                    &new.request_id,
                    &new.args_hash.as_slice(),
                    &new.runner,
                    &new.template,
                ],
            )
            .await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {} not found", new.parent)))?;
        let outcome: String = r.col("outcome")?;
        match outcome.as_str() {
            "prove" => Ok(ChildCreated::Prove(ParentSnapshot {
                id: r.col("snapshot_id")?,
                name: r.col("snapshot_name")?,
                kind: r.col("snapshot_kind")?,
                policy_version: r.col("snapshot_version")?,
                policy: r.col("snapshot_document")?,
                policy_hash: r.col("snapshot_hash")?,
                global_version: r.col("global_version")?,
                global_policy: r.col("global_document")?,
            })),
            "admitted" | "replayed" => Ok(ChildCreated::Admitted {
                sandbox: Box::new(Sandbox::from_row(r)?),
                replayed: outcome == "replayed",
                inherited: r.col("inherited")?,
            }),
            other => Err(Error::database(format!("create_child answered {other:?}"))),
        }
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
