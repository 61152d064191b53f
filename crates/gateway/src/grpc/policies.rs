//! The Policies service: a sandbox's policy, the global maximum, dry-run proofs and the
//! review of proposals.

use openshell_proto::v1 as pb;
use openshell_proto::v1::policies_server;
use openshell_store::Error;
use tonic::Request;

use super::{Api, R, optional};
use crate::convert;
use crate::ops::{Boundary, CheckPolicy, PolicyView};

fn policy_response(v: PolicyView) -> pb::PolicyResponse {
    pb::PolicyResponse {
        sandbox_id: v.sandbox_id.to_string(),
        sandbox_name: v.sandbox_name,
        version: v.version,
        policy_yaml: v.policy.to_yaml(),
        policy_hash: v.policy.hash_hex(),
        warnings: Vec::new(),
    }
}

fn global_response((version, policy): (i32, Option<openshell_policy::Policy>)) -> pb::GlobalMaxResponse {
    pb::GlobalMaxResponse {
        version,
        policy_yaml: policy.as_ref().map(|p| p.to_yaml()).unwrap_or_default(),
        policy_hash: policy.as_ref().map(|p| p.hash_hex()).unwrap_or_default(),
    }
}

/// A verdict as the CheckPolicy response (also printed by `openshell policy check`).
pub fn check_response(v: openshell_prover::Verdict) -> pb::CheckPolicyResponse {
    use openshell_prover::Verdict;
    match v {
        Verdict::Within => pb::CheckPolicyResponse { verdict: "within".into(), ..Default::default() },
        Verdict::Exceeds(cx) => pb::CheckPolicyResponse {
            verdict: "exceeds".into(),
            counterexample: cx.access,
            hint: cx.hint,
            reason: String::new(),
        },
        Verdict::Unsupported(reason) => {
            pb::CheckPolicyResponse { verdict: "unsupported".into(), reason, ..Default::default() }
        }
        Verdict::Inconclusive(reason) => {
            pb::CheckPolicyResponse { verdict: "inconclusive".into(), reason, ..Default::default() }
        }
    }
}

#[tonic::async_trait]
impl policies_server::Policies for Api {
    async fn get_policy(&self, req: Request<pb::GetPolicyRequest>) -> R<pb::PolicyResponse> {
        self.api(req, |p, r| async move { self.0.get_policy(&p, &r.sandbox).await.map(policy_response) }).await
    }

    async fn set_policy(&self, req: Request<pb::SetPolicyRequest>) -> R<pb::PolicyResponse> {
        self.api(req, |p, r| async move {
            let (view, warnings) = self.0.replace_policy(&p, &r.sandbox, &r.policy_yaml).await?;
            Ok(pb::PolicyResponse { warnings, ..policy_response(view) })
        })
        .await
    }

    async fn get_global_max(&self, req: Request<pb::GetGlobalMaxRequest>) -> R<pb::GlobalMaxResponse> {
        self.api(req, |p, _| async move { self.0.get_global_max(&p).await.map(global_response) }).await
    }

    async fn set_global_max(&self, req: Request<pb::SetGlobalMaxRequest>) -> R<pb::GlobalMaxResponse> {
        self.api(req, |p, r| async move { self.0.set_global_max(&p, &r.policy_yaml).await.map(global_response) }).await
    }

    async fn check_policy(&self, req: Request<pb::CheckPolicyRequest>) -> R<pb::CheckPolicyResponse> {
        self.api(req, |p, r| async move {
            let boundary = match (optional(r.parent), r.boundary_yaml) {
                (Some(_), yaml) if !yaml.is_empty() => {
                    return Err(Error::invalid("boundary_yaml", "give parent or boundary_yaml, not both"));
                }
                (Some(parent), _) => Boundary::ParentOf(parent),
                (None, yaml) => Boundary::Yaml(yaml),
            };
            let check = CheckPolicy { boundary, candidate: r.candidate_yaml };
            self.0.check_policy(&p, check).await.map(check_response)
        })
        .await
    }

    async fn list_proposals(&self, req: Request<pb::ListProposalsRequest>) -> R<pb::ListProposalsResponse> {
        self.api(req, |p, r| async move {
            let (sandbox, state) = (optional(r.sandbox), optional(r.state));
            let rows = self.0.list_proposals(&p, sandbox.as_deref(), state.as_deref(), r.limit).await?;
            Ok(pb::ListProposalsResponse { proposals: rows.into_iter().map(convert::proposal).collect() })
        })
        .await
    }

    async fn approve_proposal(&self, req: Request<pb::ApproveProposalRequest>) -> R<pb::Proposal> {
        self.api(req, |p, r| async move { self.0.approve_proposal(&p, r.id).await.map(convert::proposal) }).await
    }

    async fn reject_proposal(&self, req: Request<pb::RejectProposalRequest>) -> R<pb::Proposal> {
        self.api(req, |p, r| async move { self.0.reject_proposal(&p, r.id, &r.reason).await.map(convert::proposal) })
            .await
    }
}
