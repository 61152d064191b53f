//! What a sandbox's supervisor reports (sql/supervisor.sql): the isolation it applied at
//! start and the requests its egress proxy refused.

use uuid::Uuid;

use crate::row::all;
use crate::{Denial, Error, Principal, Store, queries};

impl Store {
    /// What the supervisor of a starting sandbox applied.
    pub async fn record_isolation(&self, id: Uuid, isolation: &serde_json::Value) -> Result<(), Error> {
        self.call(&queries::RECORD_ISOLATION, &[&id, isolation]).await?;
        Ok(())
    }

    /// Appends a batch of proxy denials (a JSON array) for a sandbox.
    pub async fn record_denials(&self, id: Uuid, denials: &serde_json::Value) -> Result<(), Error> {
        self.call(&queries::RECORD_DENIALS, &[&id, denials]).await?;
        Ok(())
    }

    /// The latest proxy denials of a sandbox the caller may see, newest first.
    pub async fn denials(&self, caller: &Principal, reference: &str, limit: i32) -> Result<Vec<Denial>, Error> {
        all(&self.call(&queries::DENIALS, &[caller, &reference, &limit]).await?)
    }
}
