//! The Health service: liveness for anyone (the only RPC that does not require a caller).

use openshell_proto::v1 as pb;
use openshell_proto::v1::health_server;
use tonic::{Request, Response};

use super::{Api, R};
use crate::auth::{Surface, principal};

#[tonic::async_trait]
impl health_server::Health for Api {
    async fn get_status(&self, req: Request<pb::GetStatusRequest>) -> R<pb::GetStatusResponse> {
        let caller = principal(&self.0.store, &self.0.auth, &req, Surface::Api).await.ok();
        let s = self.0.status(caller.as_ref()).await;
        Ok(Response::new(pb::GetStatusResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            driver: s.driver,
            database: s.database,
            database_ok: s.database_ok,
            disk: s.disk.map(|(backend, u)| pb::DiskStatus {
                backend: backend.name().into(),
                path: u.path,
                total_bytes: u.total_bytes,
                free_bytes: u.free_bytes,
                used_bytes: u.used_bytes,
                owed_bytes: u.owed_bytes,
                reserve_bytes: u.reserve_bytes,
                running: u.running,
                kept: u.kept,
            }),
        }))
    }
}
