//! A driver that runs nothing: a named fake for benchmarks that measure admission alone.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use uuid::Uuid;

use crate::{Driver, DriverError, StartSpec};

/// Remembers what it was asked to start; starts no process.
#[derive(Default)]
pub struct NullDriver {
    running: Mutex<HashSet<Uuid>>,
}

#[async_trait::async_trait]
impl Driver for NullDriver {
    fn name(&self) -> &'static str {
        "null"
    }

    async fn start(&self, spec: StartSpec) -> Result<(), DriverError> {
        self.running.lock().map_err(|_| DriverError("poisoned".into()))?.insert(spec.id);
        Ok(())
    }

    async fn stop(&self, id: Uuid, _grace: Duration) -> Result<(), DriverError> {
        self.running.lock().map_err(|_| DriverError("poisoned".into()))?.remove(&id);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<Uuid>, DriverError> {
        Ok(self.running.lock().map_err(|_| DriverError("poisoned".into()))?.iter().copied().collect())
    }
}
