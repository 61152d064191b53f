//! The supervisor's connection to the gateway, authenticated with the sandbox credential
//! (held by the shared client as a sensitive header, never in an error or a log line).

use std::time::Duration;

use openshell_client::{Code, ConnectError, Endpoint, Refusal};
use openshell_proto::v1::supervisor_client::SupervisorClient;
use openshell_proto::v1::{
    ConnectRequest, ConnectResponse, CurrentPolicyRequest, Denial, GetOwnProposalRequest, ListDenialsRequest, Proposal,
    ProposePolicyRequest, ReportDenialsRequest, ReportExitRequest, ReportIsolationRequest, WaitOwnProposalRequest,
};
use tonic::transport::Channel;

use crate::Failure;

#[derive(Clone)]
pub struct Client {
    inner: SupervisorClient<Channel>,
    client: openshell_client::Client,
}

impl Client {
    pub fn new(endpoint: &str, credential: &str) -> Result<Client, Failure> {
        let client = Endpoint::parse(endpoint)
            .and_then(|e| e.timeout(Duration::from_secs(30)).connect_lazy(Some(credential)))
            .map_err(|e| match e {
                ConnectError::Token => Failure::Start("credential is not valid ASCII".into()),
                e => Failure::Start(format!("gateway {e}")),
            })?;
        Ok(Client { inner: client.supervisor(), client })
    }

    /// Calls over `channel` (opened before the credential was known) with `credential`.
    pub fn over(channel: &openshell_client::Client, credential: &str) -> Result<Client, Failure> {
        let client = channel
            .with_token(Some(credential), None)
            .map_err(|_| Failure::Start("credential is not valid ASCII".into()))?;
        Ok(Client { inner: client.supervisor(), client })
    }

    fn request<T>(&self, body: T) -> tonic::Request<T> {
        self.client.request(body)
    }

    /// Retries transport faults for a while, and for a bounded time a refusal of this
    /// address's spent authentication budget (other sandboxes' dead credentials presented
    /// from the same host, say after a gateway restart); any other refusal is final.
    pub async fn connect(&mut self) -> Result<ConnectResponse, Failure> {
        let started = std::time::Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut unreachable = 0;
        loop {
            let req = self.request(ConnectRequest { pid: std::process::id() as i32 });
            match self.inner.supervisor_connect(req).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if budget_spent(&s) && started.elapsed() < BUDGET_RETRY => retrying("connecting", &s),
                Err(s) if refused(&s) => return Err(Failure::Refused(s.message().to_string())),
                Err(s) => {
                    unreachable += 1;
                    if unreachable >= 40 {
                        return Err(Failure::Refused("gateway unreachable".into()));
                    }
                    tracing::warn!("gateway not reachable yet: {}", s.message());
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    pub async fn report_exit(&mut self, exit_code: i32, error: &str) {
        for _ in 0..10 {
            match self.inner.report_exit(self.request(ReportExitRequest { exit_code, error: error.to_string() })).await
            {
                Ok(_) => return,
                // Already stopping: the gateway no longer needs the report.
                Err(s) if refused(&s) => return,
                Err(s) => tracing::warn!("reporting exit: {}", s.message()),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Client {
    /// The sandbox is usable (READY), with what isolation was applied. Retried while the
    /// gateway does not answer: until then the sandbox stays PROVISIONING (and the gateway's
    /// reconciler fails it after the provisioning timeout). False when the gateway refused it:
    /// the sandbox is no longer live (stopped while it started) and must not run.
    pub async fn report_running(&mut self, report: ReportIsolationRequest) -> bool {
        for _ in 0..50 {
            match self.inner.report_isolation(self.request(report.clone())).await {
                Ok(_) => return true,
                Err(s) if not_live(&s) => {
                    tracing::warn!("the gateway refused READY: {}; stopping the sandbox", s.message());
                    return false;
                }
                Err(s) => retrying("reporting READY", &s),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        true
    }

    /// The policy's version and document, when its version is not `known`.
    pub async fn current_policy(&mut self, known: i32) -> Result<Option<(i32, String)>, tonic::Status> {
        let r = self.inner.current_policy(self.request(CurrentPolicyRequest { known_version: known })).await?;
        let r = r.into_inner();
        Ok((r.version != known && !r.policy_json.is_empty()).then_some((r.version, r.policy_json)))
    }

    /// The policy pushed by the gateway: at once when its version is not `known`, then after
    /// every write.
    pub async fn watch_policy(
        &mut self,
        known: i32,
    ) -> Result<tonic::Streaming<openshell_proto::v1::CurrentPolicyResponse>, tonic::Status> {
        let req = self.request(CurrentPolicyRequest { known_version: known });
        Ok(self.inner.watch_policy(req).await?.into_inner())
    }

    /// One of the sandbox's own proposals once it left pending, or after `timeout` (at most
    /// the gateway's 60 s) with whether it is still pending.
    pub async fn wait_own_proposal(&mut self, id: i64, timeout: Duration) -> Result<(Proposal, bool), tonic::Status> {
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let r = self.inner.wait_own_proposal(self.request(WaitOwnProposalRequest { id, timeout_ms })).await?;
        let r = r.into_inner();
        let proposal = r.proposal.ok_or_else(|| tonic::Status::internal("the gateway answered no proposal"))?;
        Ok((proposal, r.timed_out))
    }

    /// Opens the work channel: `events` go up, tasks come down.
    pub async fn attach(
        &mut self,
        events: tokio::sync::mpsc::Receiver<openshell_proto::v1::SupervisorEvent>,
    ) -> Result<tonic::Streaming<openshell_proto::v1::SupervisorTask>, tonic::Status> {
        let stream = tokio_stream::wrappers::ReceiverStream::new(events);
        Ok(self.inner.attach(self.request(stream)).await?.into_inner())
    }

    /// The sandbox's own proposal of rules for itself (policy.local); `program` is the
    /// kernel-resolved program that sent it.
    pub async fn propose(&mut self, document: String, program: &str) -> Result<Proposal, tonic::Status> {
        let req = self.request(ProposePolicyRequest { document, program: program.to_string() });
        Ok(self.inner.propose_policy(req).await?.into_inner())
    }

    pub async fn own_proposal(&mut self, id: i64) -> Result<Proposal, tonic::Status> {
        Ok(self.inner.get_own_proposal(self.request(GetOwnProposalRequest { id })).await?.into_inner())
    }

    /// The sandbox's own latest denials, newest first.
    pub async fn own_denials(&self, sandbox: &str, limit: i32) -> Result<Vec<Denial>, tonic::Status> {
        let mut client = self.client.sandboxes();
        let req = self.request(ListDenialsRequest { sandbox: sandbox.to_string(), limit });
        Ok(client.list_denials(req).await?.into_inner().denials)
    }

    /// A fresh door credential for the in-sandbox MCP door.
    pub async fn exchange_door_credential(&mut self) -> Result<openshell_proto::v1::DoorCredential, tonic::Status> {
        let req = self.request(openshell_proto::v1::ExchangeDoorCredentialRequest {});
        Ok(self.inner.exchange_door_credential(req).await?.into_inner())
    }

    pub async fn report_denials(&mut self, denials: Vec<Denial>) -> Result<(), tonic::Status> {
        self.inner.report_denials(self.request(ReportDenialsRequest { denials })).await.map(|_| ())
    }
}

/// How long connecting keeps retrying a refusal of the address's authentication budget.
const BUDGET_RETRY: Duration = Duration::from_secs(60);

/// The gateway refused this address's spent budget of failed authentications (its
/// `details.reason`), not this supervisor's credential.
fn budget_spent(s: &tonic::Status) -> bool {
    let r = Refusal::from(s);
    r.code == Some(Code::Unauthenticated) && r.details.get("reason").map(String::as_str) == Some(BUDGET_REASON)
}

/// The gateway's `details.reason` for a spent authentication budget (`auth::BUDGET_REASON`).
const BUDGET_REASON: &str = "auth_budget";

/// The gateway refused this sandbox itself (its credential is not live: stopped while it
/// started, or since), not this address's spent budget, which passes.
pub fn not_live(s: &tonic::Status) -> bool {
    refused(s) && !budget_spent(s)
}

/// Logs a failed call that is tried again: `what` failed, or the address's budget is spent.
pub fn retrying(what: &str, s: &tonic::Status) {
    if budget_spent(s) {
        tracing::warn!("the gateway refuses this address for a moment: {}", s.message());
    } else {
        tracing::warn!("{what}: {}", s.message());
    }
}

/// A refusal retrying cannot change (as opposed to the gateway not answering yet).
fn refused(s: &tonic::Status) -> bool {
    matches!(
        Refusal::from(s).code,
        Some(Code::Unauthenticated | Code::NotAllowed | Code::NotFound | Code::InvalidArgument)
    )
}
