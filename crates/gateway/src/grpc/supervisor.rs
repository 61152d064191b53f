//! The Supervisor service: what a sandbox's supervisor calls about its own sandbox, with its
//! sandbox credential only (never a door credential: [`Surface::Supervisor`]).

use openshell_proto::v1 as pb;
use openshell_proto::v1::supervisor_server;
use openshell_store::{Error, Principal};
use tonic::{Request, Status};

use super::{Api, R};
use crate::auth::{Surface, require_sandbox};
use crate::convert;
use crate::status::to_status;
use futures::StreamExt;

impl Api {
    async fn supervisor<T, U, F, Fut>(&self, req: Request<T>, op: F) -> R<U>
    where
        F: FnOnce(Principal, T) -> Fut,
        Fut: std::future::Future<Output = Result<U, Error>>,
    {
        self.call(Surface::Supervisor, req, op).await
    }

    /// A supervisor's call on its sandbox's start path whose database call checks the
    /// credential itself, saving a round trip (see [`crate::auth::supervisor_call`]).
    async fn checked_in_sql<T, U, F, Fut>(&self, req: Request<T>, op: F) -> R<U>
    where
        F: FnOnce([u8; 32], T) -> Fut,
        Fut: std::future::Future<Output = Result<U, Error>>,
    {
        let peer = req.remote_addr();
        let (metadata, _, body) = req.into_parts();
        crate::auth::supervisor_call(&self.0.store, &self.0.auth, metadata.as_ref(), peer, |credential| {
            op(credential, body)
        })
        .await
        .map(tonic::Response::new)
        .map_err(to_status)
    }
}

#[tonic::async_trait]
impl supervisor_server::Supervisor for Api {
    type AttachStream = tokio_stream::wrappers::ReceiverStream<Result<pb::SupervisorTask, Status>>;

    async fn attach(&self, req: Request<tonic::Streaming<pb::SupervisorEvent>>) -> R<Self::AttachStream> {
        self.supervisor(req, |p, events| async move { Ok(self.0.attach(require_sandbox(&p)?, events)) }).await
    }

    async fn supervisor_connect(&self, req: Request<pb::ConnectRequest>) -> R<pb::ConnectResponse> {
        self.checked_in_sql(req, |credential, _| async move { self.0.connect_supervisor(&credential).await }).await
    }

    async fn report_exit(&self, req: Request<pb::ReportExitRequest>) -> R<pb::ReportExitResponse> {
        self.supervisor(req, |p, r| async move {
            self.0.report_exit(&p, r.exit_code, &r.error).await.map(|()| pb::ReportExitResponse {})
        })
        .await
    }

    async fn report_isolation(&self, req: Request<pb::ReportIsolationRequest>) -> R<pb::ReportIsolationResponse> {
        self.checked_in_sql(req, |credential, r| async move {
            self.0.report_isolation(&credential, &r).await.map(|()| pb::ReportIsolationResponse {})
        })
        .await
    }

    async fn current_policy(&self, req: Request<pb::CurrentPolicyRequest>) -> R<pb::CurrentPolicyResponse> {
        self.supervisor(req, |p, r| async move {
            let (version, document) = self.0.own_policy(&p, r.known_version).await?;
            Ok(pb::CurrentPolicyResponse { version, policy_json: document.map(|d| d.to_string()).unwrap_or_default() })
        })
        .await
    }

    type WatchPolicyStream = futures::stream::BoxStream<'static, Result<pb::CurrentPolicyResponse, Status>>;

    async fn watch_policy(&self, req: Request<pb::CurrentPolicyRequest>) -> R<Self::WatchPolicyStream> {
        self.supervisor(req, |p, r| async move {
            let pushed = self.0.watch_own_policy(&p, r.known_version)?;
            Ok(pushed.map(|r| r.map_err(to_status)).boxed())
        })
        .await
    }

    async fn wait_own_proposal(&self, req: Request<pb::WaitOwnProposalRequest>) -> R<pb::WaitOwnProposalResponse> {
        self.supervisor(req, |p, r| async move {
            let timeout = std::time::Duration::from_millis(r.timeout_ms.into());
            let (proposal, timed_out) = self.0.wait_own_proposal(&p, r.id, timeout).await?;
            Ok(pb::WaitOwnProposalResponse { proposal: Some(convert::proposal(proposal)), timed_out })
        })
        .await
    }

    async fn report_denials(&self, req: Request<pb::ReportDenialsRequest>) -> R<pb::ReportDenialsResponse> {
        self.supervisor(req, |p, r| async move {
            self.0.report_denials(&p, r.denials).await.map(|()| pb::ReportDenialsResponse {})
        })
        .await
    }

    async fn propose_policy(&self, req: Request<pb::ProposePolicyRequest>) -> R<pb::Proposal> {
        self.supervisor(req, |p, r| async move {
            self.0.propose_from(&p, r.program, &r.document).await.map(convert::proposal)
        })
        .await
    }

    async fn get_own_proposal(&self, req: Request<pb::GetOwnProposalRequest>) -> R<pb::Proposal> {
        self.supervisor(req, |p, r| async move { self.0.own_proposal(&p, r.id).await.map(convert::proposal) }).await
    }

    async fn exchange_door_credential(&self, req: Request<pb::ExchangeDoorCredentialRequest>) -> R<pb::DoorCredential> {
        self.supervisor(req, |p, _| async move { self.0.issue_door_credential(&p).await }).await
    }
}
