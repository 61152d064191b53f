//! What the gateway's metrics read from the database (sql/metrics.sql).

use crate::row::RowExt;
use crate::{Error, Store, queries};

impl Store {
    /// Live sandboxes of every gateway: (phase, driver kind, count).
    pub async fn live_sandbox_counts(&self) -> Result<Vec<(String, String, i64)>, Error> {
        let rows = self.read(&queries::LIVE_SANDBOXES, &[]).await?;
        rows.iter().map(|r| Ok((r.col("phase")?, r.col("driver")?, r.col("sandboxes")?))).collect()
    }
}
