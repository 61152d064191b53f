//! What a sandbox's supervisor reports (sql/supervisor.sql): the requests its egress proxy
//! refused (what it starts with and its READY are `Store::supervisor_start` and
//! `Store::supervisor_ready`).

use uuid::Uuid;

use crate::row::all;
use crate::{Denial, Error, Principal, Store, queries};

impl Store {
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
