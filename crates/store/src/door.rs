//! The door (sql/door.sql): the credential a sandbox's supervisor holds for the in-sandbox
//! endpoint, and each tool call through it (the caller, the grant's program, the rate).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::admission::snapshot_of;
use crate::row::RowExt;
use crate::{Error, ParentSnapshot, Principal, Store, queries};

impl Store {
    /// The sandbox behind a live door credential's SHA-256 (its `program` is left for the
    /// gateway to fill from the door's header).
    pub async fn authenticate_door(&self, token_hash: &[u8; 32]) -> Result<Option<Principal>, Error> {
        let rows = self.call(&queries::AUTHENTICATE_DOOR, &[&token_hash.as_slice()]).await?;
        let Some(r) = rows.first() else { return Ok(None) };
        Ok(Some(Principal::Sandbox {
            id: r.col("sandbox_id")?,
            name: r.col("sandbox_name")?,
            owner: r.col("owner_id")?,
            program: None,
        }))
    }

    /// Issues a door credential (its hash) to a live sandbox, living `ttl_s` seconds;
    /// returns when it expires. Older ones beyond the previous are revoked.
    pub async fn door_credential_issue(
        &self,
        sandbox: Uuid,
        token_hash: &[u8; 32],
        ttl_s: i32,
    ) -> Result<DateTime<Utc>, Error> {
        self.value(&queries::DOOR_CREDENTIAL_ISSUE, &[&sandbox, &token_hash.as_slice(), &ttl_s]).await
    }

    /// A tool call through a sandbox's door: UNAUTHENTICATED unless `door_hash` is a live door
    /// credential of `sandbox`, NOT_ALLOWED naming `program` unless it is the tree's grant's
    /// (a tree never granted allows none), then one call from its bucket, shared by every
    /// gateway replica (`LIMIT_REACHED` with the rate and `retry_after_ms` when empty), in one
    /// SQL call (see `take_door_call` in sql/door.sql).
    pub async fn take_door_call(
        &self,
        door_hash: &[u8; 32],
        sandbox: Uuid,
        program: Option<&str>,
    ) -> Result<(), Error> {
        self.call(&queries::TAKE_DOOR_CALL, &[&door_hash.as_slice(), &sandbox, &program]).await?;
        Ok(())
    }

    /// [`Store::parent_snapshot`] for a tool call through a sandbox's door, after
    /// [`Store::take_door_call`] in the same SQL call (see `door_parent_snapshot` in
    /// sql/door.sql): its refusals first, and nothing read when it refuses.
    pub async fn door_parent_snapshot(
        &self,
        door_hash: &[u8; 32],
        caller: &Principal,
        parent: &str,
    ) -> Result<ParentSnapshot, Error> {
        let rows = self.call(&queries::DOOR_PARENT_SNAPSHOT, &[&door_hash.as_slice(), caller, &parent]).await?;
        snapshot_of(&rows, parent)
    }
}
