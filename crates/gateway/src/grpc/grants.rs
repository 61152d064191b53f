//! The Grants service: the user's one grant over a tree.

use openshell_proto::v1 as pb;
use openshell_proto::v1::grants_server;
use tonic::Request;

use super::sandboxes::grant_spec;
use super::{Api, R, optional};
use crate::convert;
use crate::ops::GrantEdit;

#[tonic::async_trait]
impl grants_server::Grants for Api {
    async fn create_grant(&self, req: Request<pb::CreateGrantRequest>) -> R<pb::Grant> {
        self.api(req, |p, r| async move {
            self.0.create_grant(&p, &r.sandbox, r.grant.map(grant_spec)).await.map(convert::grant)
        })
        .await
    }

    async fn get_grant(&self, req: Request<pb::GetGrantRequest>) -> R<pb::Grant> {
        self.api(req, |p, r| async move { self.0.get_grant(&p, &r.sandbox).await.map(convert::grant) }).await
    }

    async fn list_grants(&self, req: Request<pb::ListGrantsRequest>) -> R<pb::ListGrantsResponse> {
        self.api(req, |p, r| async move {
            let grants = self.0.list_grants(&p, optional(r.sandbox).as_deref()).await?;
            Ok(pb::ListGrantsResponse { grants: grants.into_iter().map(convert::grant).collect() })
        })
        .await
    }

    async fn update_grant(&self, req: Request<pb::UpdateGrantRequest>) -> R<pb::Grant> {
        self.api(req, |p, r| async move {
            let edit = GrantEdit {
                max_depth: r.max_depth,
                max_breadth: r.max_breadth,
                max_total: r.max_total,
                expires: r.expires,
                program: r.program,
                rate: r.rate,
                tool_idle_seconds: r.tool_idle_seconds,
            };
            self.0.update_grant(&p, &r.sandbox, edit).await.map(convert::grant)
        })
        .await
    }

    async fn revoke_grant(&self, req: Request<pb::RevokeGrantRequest>) -> R<pb::Grant> {
        self.api(req, |p, r| async move { self.0.revoke_grant(&p, &r.sandbox).await.map(convert::grant) }).await
    }
}
