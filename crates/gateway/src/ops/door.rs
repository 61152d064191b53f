//! The door credential: what a sandbox's in-sandbox MCP door authenticates with.
//!
//! A supervisor exchanges its own sandbox credential for one (audience
//! `urn:openshell:gateway-mcp`); it lives `Settings::door_ttl`, is stored only as SHA-256,
//! is accepted only on API and MCP calls (never the Supervisor RPCs), carries the calling
//! program, and dies with its sandbox. See `auth::authenticate` and sql/door.sql.
//!
//! Each MCP tool call through the door is checked again here ([`Gateway::take_door_call`]).

use openshell_proto::v1 as pb;
use openshell_store::{Error, Principal};

use crate::{Gateway, auth, tokens};

impl Gateway {
    /// A fresh door credential for the calling sandbox (a live one: checked in SQL).
    pub async fn issue_door_credential(&self, caller: &Principal) -> Result<pb::DoorCredential, Error> {
        let id = auth::require_sandbox(caller)?;
        let token = tokens::mint(tokens::DOOR_PREFIX).map_err(Error::unavailable)?;
        let ttl = self.settings.door_ttl.as_secs().clamp(1, 3600) as i32;
        let expires = self.store.door_credential_issue(id, &tokens::hash(&token), ttl).await?;
        Ok(pb::DoorCredential {
            token,
            audience: tokens::DOOR_AUDIENCE.into(),
            expires_at: expires.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ttl_seconds: ttl,
            mcp_max_body_bytes: i64::try_from(self.settings.mcp_max_body_bytes).unwrap_or(i64::MAX),
        })
    }

    /// A sandbox's tool call through its door, checked again (the authentication may have
    /// come from the brief cache): its door credential still live, its program the tree's
    /// grant's, and one call taken from its bucket at the grant's rate, in one SQL call
    /// (`take_door_call`, sql/door.sql), so every gateway replica draws on the same bucket. A
    /// user's call has no door and passes.
    pub(crate) async fn take_door_call(&self, caller: &Principal, door: &[u8; 32]) -> Result<(), Error> {
        match caller {
            Principal::Sandbox { id, program, .. } => self.store.take_door_call(door, *id, program.as_deref()).await,
            Principal::User { .. } => Ok(()),
        }
    }
}
