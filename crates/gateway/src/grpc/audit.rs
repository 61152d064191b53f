//! The Audit service: the receipts of every decision, paged.

use openshell_proto::v1 as pb;
use openshell_proto::v1::audit_server;
use tonic::Request;

use super::{Api, R, optional, page_out, page_request};
use crate::convert;
use crate::ops::AuditQuery;

#[tonic::async_trait]
impl audit_server::Audit for Api {
    async fn list_audit(&self, req: Request<pb::ListAuditRequest>) -> R<pb::ListAuditResponse> {
        self.api(req, |p, r| async move {
            let query = AuditQuery {
                sandbox: optional(r.sandbox),
                user: optional(r.user),
                since: r.since,
                until: r.until,
                refusals_only: r.refusals_only,
            };
            let page = self.0.list_audit(&p, query, page_request(r.page_size, r.page_token)).await?;
            let (entries, next_page_token) = page_out(page, convert::audit);
            Ok(pb::ListAuditResponse { entries, next_page_token })
        })
        .await
    }

    async fn verify_audit(&self, req: Request<pb::VerifyAuditRequest>) -> R<pb::VerifyAuditResponse> {
        self.api(req, |p, r| async move {
            let heads = r.heads.into_iter().map(convert::chain_head_in).collect();
            let chains = self.0.verify_audit(&p, heads).await?;
            Ok(pb::VerifyAuditResponse {
                chains: chains.len() as i64,
                receipts: chains.iter().map(|c| c.receipts).sum(),
                broken: chains.into_iter().filter(|c| c.problem.is_some()).map(convert::chain_status).collect(),
            })
        })
        .await
    }

    async fn list_audit_heads(&self, req: Request<pb::ListAuditHeadsRequest>) -> R<pb::ListAuditHeadsResponse> {
        self.api(req, |p, r| async move {
            let page = self.0.audit_heads(&p, page_request(r.page_size, r.page_token)).await?;
            let (heads, next_page_token) = page_out(page, convert::chain_head);
            Ok(pb::ListAuditHeadsResponse { heads, next_page_token })
        })
        .await
    }
}
