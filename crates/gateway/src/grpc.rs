//! The gRPC surface: authenticate, translate, call the gateway, translate back.

use openshell_proto::v1 as pb;
use openshell_proto::v1::{
    audit_server, grants_server, health_server, policies_server, sandboxes_server, supervisor_server, users_server,
};
use openshell_store::{AuditFilter, Error, GrantChange, GrantValues, Kind, Principal};
use tonic::{Request, Response, Status};

use crate::auth::{Surface, principal, require_sandbox, require_user};
use crate::create::{ChildRequest, RootRequest};
use crate::status::to_status;
use crate::{Gateway, convert, input, tokens};

/// Every gRPC service, over one gateway.
#[derive(Clone)]
pub struct Api(pub Gateway);

type R<T> = Result<Response<T>, Status>;

impl Api {
    async fn who<T>(&self, req: &Request<T>) -> Result<Principal, Status> {
        principal(&self.0.store, &self.0.auth, req, Surface::Api).await.map_err(to_status)
    }

    /// The caller of a Supervisor RPC: its sandbox credential, never a door credential.
    async fn supervisor<T>(&self, req: &Request<T>) -> Result<Principal, Status> {
        principal(&self.0.store, &self.0.auth, req, Surface::Supervisor).await.map_err(to_status)
    }
}

fn ok<T>(r: Result<T, Error>) -> R<T> {
    r.map(Response::new).map_err(to_status)
}

fn optional(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

fn grant_values(spec: pb::GrantSpec) -> Result<GrantValues, Error> {
    let (program, program_resolved) = crate::program::resolve("grant.program", &spec.program)?;
    Ok(GrantValues {
        max_depth: spec.max_depth,
        max_breadth: spec.max_breadth,
        max_total: spec.max_total,
        expires_at: input::expires("grant.expires", &spec.expires)?,
        program,
        program_resolved,
        rate: crate::program::rate("grant.rate", &spec.rate)?,
        tool_idle_seconds: match spec.tool_idle_seconds {
            0 => None,
            s => Some(input::tool_idle("grant.tool_idle_seconds", s)?),
        },
    })
}

fn kind_name(kind: i32) -> Result<Kind, Error> {
    match pb::SandboxKind::try_from(kind) {
        Ok(pb::SandboxKind::Agent) | Ok(pb::SandboxKind::Unspecified) => Ok(Kind::Agent),
        Ok(pb::SandboxKind::Tool) => Ok(Kind::Tool),
        Err(_) => Err(Error::invalid("kind", format!("unknown kind {kind}: use agent or tool"))),
    }
}

#[tonic::async_trait]
impl sandboxes_server::Sandboxes for Api {
    type ExecChildSandboxStream = crate::work::ExecStream;
    type ExecSandboxStream = crate::work::ExecStream;
    type GetFileStream = crate::files::FileStream;

    async fn get_file(&self, req: Request<pb::GetFileRequest>) -> R<Self::GetFileStream> {
        let p = self.who(&req).await?;
        ok(self.0.get_file(&p, req.into_inner()).await)
    }

    type WatchSandboxStream = futures::stream::BoxStream<'static, Result<pb::Sandbox, Status>>;

    async fn watch_sandbox(&self, req: Request<pb::WatchSandboxRequest>) -> R<Self::WatchSandboxStream> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        if r.timeout_seconds > 3600 {
            return Err(to_status(Error::invalid("timeout_seconds", "at most 3600")));
        }
        // Refused at once when the caller may not see it (the first item is its state now).
        self.0.get_sandbox(&p, &r.sandbox).await.map_err(to_status)?;
        let deadline = match r.timeout_seconds {
            0 => self.0.settings.provision_timeout + std::time::Duration::from_secs(5),
            s => std::time::Duration::from_secs(s.into()),
        };
        use futures::StreamExt;
        let stream = self.0.watch(p, r.sandbox, deadline).map(|s| s.map(convert::sandbox).map_err(to_status));
        Ok(Response::new(stream.boxed()))
    }

    async fn exec_child_sandbox(
        &self,
        req: Request<tonic::Streaming<pb::ExecInput>>,
    ) -> R<Self::ExecChildSandboxStream> {
        let p = self.who(&req).await?;
        ok(async {
            require_sandbox(&p)?;
            let mut input = req.into_inner();
            let start = crate::work::grpc_start(&mut input).await?;
            self.0.exec(&p, start, crate::work::grpc_stdin(input), Some(Kind::Tool)).await
        }
        .await)
    }

    async fn exec_sandbox(&self, req: Request<tonic::Streaming<pb::ExecInput>>) -> R<Self::ExecSandboxStream> {
        let p = self.who(&req).await?;
        ok(async {
            require_user(&p)?;
            let mut input = req.into_inner();
            let start = crate::work::grpc_start(&mut input).await?;
            self.0.exec(&p, start, crate::work::grpc_stdin(input), None).await
        }
        .await)
    }

    async fn create_sandbox(&self, req: Request<pb::CreateSandboxRequest>) -> R<pb::CreateSandboxResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            let grant_expires = r.grant.as_ref().map(|g| g.expires.clone());
            let grant = r.grant.map(grant_values).transpose()?;
            let (s, replayed) = self
                .0
                .create_root(
                    &p,
                    RootRequest {
                        name: r.name,
                        command: r.command,
                        policy_yaml: r.policy_yaml,
                        grant,
                        grant_expires,
                        request_id: optional(r.request_id),
                        template: crate::template::from_request(r.template.as_ref())?,
                        image: crate::template::requested_image(r.template.as_ref()),
                    },
                )
                .await?;
            Ok(pb::CreateSandboxResponse { sandbox: Some(convert::sandbox(s)), replayed })
        }
        .await)
    }

    async fn create_child_sandbox(&self, req: Request<pb::CreateChildSandboxRequest>) -> R<pb::CreateSandboxResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            let (s, replayed) = self
                .0
                .create_child(
                    &p,
                    ChildRequest {
                        parent: r.parent,
                        name: optional(r.name),
                        kind: kind_name(r.kind)?,
                        command: r.command,
                        policy_yaml: r.policy_yaml,
                        request_id: optional(r.request_id),
                        template: crate::template::child_request(r.template.as_ref())?,
                    },
                )
                .await?;
            Ok(pb::CreateSandboxResponse { sandbox: Some(convert::sandbox(s)), replayed })
        }
        .await)
    }

    async fn get_sandbox(&self, req: Request<pb::GetSandboxRequest>) -> R<pb::Sandbox> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            input::reference("sandbox", &r.sandbox)?;
            Ok(convert::sandbox(self.0.store.sandbox(&p, &r.sandbox).await?))
        }
        .await)
    }

    async fn list_sandboxes(&self, req: Request<pb::ListSandboxesRequest>) -> R<pb::ListSandboxesResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            require_user(&p)?;
            let limit = input::page_size(r.page_size)?;
            let after = if r.page_token.is_empty() { None } else { Some(parse_page_token(&r.page_token)?) };
            let mut rows = self.0.store.list_sandboxes(&p, r.all, after, limit + 1).await?;
            let next = if rows.len() as i64 > limit {
                rows.truncate(limit as usize);
                rows.last().map(|s| format!("{}.{}", s.created_at.timestamp_micros(), s.id)).unwrap_or_default()
            } else {
                String::new()
            };
            Ok(pb::ListSandboxesResponse {
                sandboxes: rows.into_iter().map(convert::sandbox).collect(),
                next_page_token: next,
            })
        }
        .await)
    }

    async fn list_children(&self, req: Request<pb::ListChildrenRequest>) -> R<pb::ListChildrenResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            input::reference("sandbox", &r.sandbox)?;
            let rows = self.0.store.tree(&p, &r.sandbox).await?;
            Ok(pb::ListChildrenResponse { sandboxes: rows.into_iter().map(convert::sandbox).collect() })
        }
        .await)
    }

    async fn list_denials(&self, req: Request<pb::ListDenialsRequest>) -> R<pb::ListDenialsResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            input::reference("sandbox", &r.sandbox)?;
            if !(0..=1000).contains(&r.limit) {
                return Err(Error::invalid("limit", "1 to 1000 (0 means 50)"));
            }
            let limit = if r.limit == 0 { 50 } else { r.limit };
            let rows = self.0.store.denials(&p, &r.sandbox, limit).await?;
            Ok(pb::ListDenialsResponse { denials: rows.into_iter().map(convert::denial).collect() })
        }
        .await)
    }

    async fn stop_sandbox(&self, req: Request<pb::StopSandboxRequest>) -> R<pb::StopSandboxResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            let stopped = self.0.stop(&p, &r.sandbox, false).await?;
            Ok(pb::StopSandboxResponse { stopped: stopped.into_iter().map(convert::sandbox).collect() })
        }
        .await)
    }

    async fn delete_sandbox(&self, req: Request<pb::DeleteSandboxRequest>) -> R<pb::StopSandboxResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            let stopped = self.0.stop(&p, &r.sandbox, true).await?;
            Ok(pb::StopSandboxResponse { stopped: stopped.into_iter().map(convert::sandbox).collect() })
        }
        .await)
    }
}

fn parse_page_token(t: &str) -> Result<(chrono::DateTime<chrono::Utc>, uuid::Uuid), Error> {
    let bad = || Error::invalid("page_token", "not a token this gateway issued");
    let (micros, id) = t.split_once('.').ok_or_else(bad)?;
    let at = chrono::DateTime::from_timestamp_micros(micros.parse().map_err(|_| bad())?).ok_or_else(bad)?;
    Ok((at, id.parse().map_err(|_| bad())?))
}

#[tonic::async_trait]
impl grants_server::Grants for Api {
    async fn create_grant(&self, req: Request<pb::CreateGrantRequest>) -> R<pb::Grant> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        let target = r.sandbox.clone();
        let result = async {
            require_user(&p)?;
            input::reference("sandbox", &r.sandbox)?;
            let spec = r.grant.ok_or_else(|| Error::invalid("grant", "required"))?;
            Ok(convert::grant(self.0.store.create_grant(&p, &r.sandbox, &grant_values(spec)?).await?))
        }
        .await;
        ok(self.0.receipt_on_refusal(&p, "grant.create", &target, None, result).await)
    }

    async fn get_grant(&self, req: Request<pb::GetGrantRequest>) -> R<pb::Grant> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            require_user(&p)?;
            input::reference("sandbox", &r.sandbox)?;
            Ok(convert::grant(self.0.store.grant(&p, &r.sandbox).await?))
        }
        .await)
    }

    async fn list_grants(&self, req: Request<pb::ListGrantsRequest>) -> R<pb::ListGrantsResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            require_user(&p)?;
            let root = optional(r.sandbox);
            if let Some(root) = &root {
                input::reference("sandbox", root)?;
            }
            let grants = self.0.store.list_grants(&p, root.as_deref()).await?;
            Ok(pb::ListGrantsResponse { grants: grants.into_iter().map(convert::grant).collect() })
        }
        .await)
    }

    async fn update_grant(&self, req: Request<pb::UpdateGrantRequest>) -> R<pb::Grant> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        let target = r.sandbox.clone();
        let result = async {
            require_user(&p)?;
            input::reference("sandbox", &r.sandbox)?;
            let change = GrantChange {
                max_depth: r.max_depth,
                max_breadth: r.max_breadth,
                max_total: r.max_total,
                expires_at: r.expires.as_deref().map(|e| input::expires("expires", e)).transpose()?,
                program: r.program.as_deref().map(|p| crate::program::resolve("program", p)).transpose()?,
                rate: r.rate.as_deref().map(|v| crate::program::rate("rate", v)).transpose()?,
                tool_idle_seconds: r
                    .tool_idle_seconds
                    .map(|s| u32::try_from(s).map_err(|_| Error::invalid("tool_idle_seconds", "must be positive")))
                    .transpose()?
                    .map(|s| input::tool_idle("tool_idle_seconds", s))
                    .transpose()?,
            };
            if change == GrantChange::default() {
                return Err(Error::invalid(
                    "grant",
                    "nothing to change: set at least one of max_depth, max_breadth, max_total, expires, program, \
                     tool_idle_seconds, rate",
                ));
            }
            Ok(convert::grant(self.0.store.update_grant(&p, &r.sandbox, &change).await?))
        }
        .await;
        ok(self.0.receipt_on_refusal(&p, "grant.update", &target, None, result).await)
    }

    async fn revoke_grant(&self, req: Request<pb::RevokeGrantRequest>) -> R<pb::Grant> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        let target = r.sandbox.clone();
        let result = async {
            require_user(&p)?;
            input::reference("sandbox", &r.sandbox)?;
            Ok(convert::grant(self.0.store.revoke_grant(&p, &r.sandbox).await?))
        }
        .await;
        ok(self.0.receipt_on_refusal(&p, "grant.revoke", &target, None, result).await)
    }
}

#[tonic::async_trait]
impl audit_server::Audit for Api {
    async fn list_audit(&self, req: Request<pb::ListAuditRequest>) -> R<pb::ListAuditResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            require_user(&p)?;
            let limit = input::page_size(r.page_size)?;
            let before_id = if r.page_token.is_empty() {
                None
            } else {
                Some(
                    r.page_token
                        .parse::<i64>()
                        .map_err(|_| Error::invalid("page_token", "not a token this gateway issued"))?,
                )
            };
            let sandbox = optional(r.sandbox);
            if let Some(s) = &sandbox {
                input::reference("sandbox", s)?;
            }
            let filter = AuditFilter {
                sandbox,
                user: optional(r.user),
                since: input::optional_time("since", &r.since)?,
                until: input::optional_time("until", &r.until)?,
                refusals_only: r.refusals_only,
                before_id,
                limit: limit + 1,
            };
            let mut rows = self.0.store.audit(&p, &filter).await?;
            let next = if rows.len() as i64 > limit {
                rows.truncate(limit as usize);
                rows.last().map(|a| a.id.to_string()).unwrap_or_default()
            } else {
                String::new()
            };
            Ok(pb::ListAuditResponse { entries: rows.into_iter().map(convert::audit).collect(), next_page_token: next })
        }
        .await)
    }
}

#[tonic::async_trait]
impl users_server::Users for Api {
    async fn create_user(&self, req: Request<pb::CreateUserRequest>) -> R<pb::CreateUserResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            // Only an admin adds users: user_create decides (migrations/V3, V7).
            require_user(&p)?;
            let token = tokens::mint(tokens::USER_PREFIX).map_err(Error::unavailable)?;
            self.0.store.create_user(&p, &r.name, r.admin, &tokens::hash(&token)).await?;
            Ok(pb::CreateUserResponse { name: r.name, token })
        }
        .await)
    }

    async fn who_am_i(&self, req: Request<pb::WhoAmIRequest>) -> R<pb::WhoAmIResponse> {
        let p = self.who(&req).await?;
        Ok(Response::new(match p {
            Principal::User { name, admin, .. } => {
                pb::WhoAmIResponse { kind: "user".into(), name, admin, sandbox_id: String::new() }
            }
            Principal::Sandbox { id, name, .. } => {
                pb::WhoAmIResponse { kind: "sandbox".into(), name, admin: false, sandbox_id: id.to_string() }
            }
        }))
    }
}

#[tonic::async_trait]
impl supervisor_server::Supervisor for Api {
    type AttachStream = tokio_stream::wrappers::ReceiverStream<Result<pb::SupervisorTask, Status>>;

    async fn attach(&self, req: Request<tonic::Streaming<pb::SupervisorEvent>>) -> R<Self::AttachStream> {
        let p = self.supervisor(&req).await?;
        let id = require_sandbox(&p).map_err(to_status)?;
        Ok(Response::new(self.0.attach(id, req.into_inner())))
    }

    async fn supervisor_connect(&self, req: Request<pb::ConnectRequest>) -> R<pb::ConnectResponse> {
        let p = self.supervisor(&req).await?;
        ok(async {
            let id = require_sandbox(&p)?;
            self.0.supervisor_connected(&p, id).await
        }
        .await)
    }

    async fn report_exit(&self, req: Request<pb::ReportExitRequest>) -> R<pb::ReportExitResponse> {
        let p = self.supervisor(&req).await?;
        let r = req.into_inner();
        ok(async {
            let id = require_sandbox(&p)?;
            self.0.supervisor_exited(id, r.exit_code, &r.error).await?;
            Ok(pb::ReportExitResponse {})
        }
        .await)
    }

    async fn report_isolation(&self, req: Request<pb::ReportIsolationRequest>) -> R<pb::ReportIsolationResponse> {
        let p = self.supervisor(&req).await?;
        let r = req.into_inner();
        ok(async {
            let id = require_sandbox(&p)?;
            let clip = |s: &str| s.chars().take(1000).collect::<String>();
            let skipped: Vec<String> = r.skipped.iter().take(256).map(|s| clip(s)).collect();
            let isolation = serde_json::json!({
                "landlock": clip(&r.landlock), "detail": clip(&r.detail), "skipped": skipped,
            });
            self.0.store.record_isolation(id, &isolation).await?;
            Ok(pb::ReportIsolationResponse {})
        }
        .await)
    }

    async fn current_policy(&self, req: Request<pb::CurrentPolicyRequest>) -> R<pb::CurrentPolicyResponse> {
        let p = self.supervisor(&req).await?;
        let r = req.into_inner();
        ok(async {
            let id = require_sandbox(&p)?;
            let (version, document) = self.0.store.current_policy(id, r.known_version).await?;
            Ok(pb::CurrentPolicyResponse { version, policy_json: document.map(|d| d.to_string()).unwrap_or_default() })
        }
        .await)
    }

    async fn report_denials(&self, req: Request<pb::ReportDenialsRequest>) -> R<pb::ReportDenialsResponse> {
        let p = self.supervisor(&req).await?;
        let r = req.into_inner();
        ok(async {
            let id = require_sandbox(&p)?;
            if r.denials.len() > 500 {
                return Err(Error::invalid("denials", "at most 500 per report"));
            }
            let rows: Vec<serde_json::Value> = r
                .denials
                .into_iter()
                .map(|d| {
                    let at = chrono::DateTime::parse_from_rfc3339(&d.at).ok().map(|t| t.to_rfc3339());
                    serde_json::json!({
                        "at": at, "program": d.program, "host": d.host, "port": d.port.min(65535),
                        "method": optional(d.method), "path": optional(d.path), "reason": d.reason,
                    })
                })
                .collect();
            self.0.store.record_denials(id, &serde_json::Value::from(rows)).await?;
            Ok(pb::ReportDenialsResponse {})
        }
        .await)
    }

    async fn propose_policy(&self, req: Request<pb::ProposePolicyRequest>) -> R<pb::Proposal> {
        let mut p = self.supervisor(&req).await?;
        let r = req.into_inner();
        // The supervisor vouches for the program its proxy resolved from the kernel; it is
        // recorded with the proposal, never used to authorize.
        if let Principal::Sandbox { program, .. } = &mut p {
            *program = Some(r.program).filter(|v| v.starts_with('/') && v.len() <= 4096);
        }
        ok(self.0.propose(&p, &r.document).await.map(crate::proposals::to_pb))
    }

    async fn get_own_proposal(&self, req: Request<pb::GetOwnProposalRequest>) -> R<pb::Proposal> {
        let p = self.supervisor(&req).await?;
        let r = req.into_inner();
        ok(self.0.own_proposal(&p, r.id).await.map(crate::proposals::to_pb))
    }

    async fn exchange_door_credential(&self, req: Request<pb::ExchangeDoorCredentialRequest>) -> R<pb::DoorCredential> {
        let p = self.supervisor(&req).await?;
        ok(self.0.issue_door_credential(&p).await)
    }
}

#[tonic::async_trait]
impl health_server::Health for Api {
    async fn get_status(&self, req: Request<pb::GetStatusRequest>) -> R<pb::GetStatusResponse> {
        // Liveness for anyone; where the database is, only for a signed-in caller.
        let signed_in = self.who(&req).await.is_ok();
        Ok(Response::new(pb::GetStatusResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            driver: self.0.driver.name().into(),
            database: if signed_in { self.0.settings.database_public_url.clone() } else { String::new() },
            database_ok: self.0.store.ping().await,
        }))
    }
}

fn policy_response(
    id: uuid::Uuid,
    name: String,
    version: i32,
    policy: &openshell_policy::Policy,
) -> pb::PolicyResponse {
    pb::PolicyResponse {
        sandbox_id: id.to_string(),
        sandbox_name: name,
        version,
        policy_yaml: policy.to_yaml(),
        policy_hash: policy.hash_hex(),
    }
}

fn global_response(version: i32, policy: Option<openshell_policy::Policy>) -> pb::GlobalMaxResponse {
    pb::GlobalMaxResponse {
        version,
        policy_yaml: policy.as_ref().map(|p| p.to_yaml()).unwrap_or_default(),
        policy_hash: policy.as_ref().map(|p| p.hash_hex()).unwrap_or_default(),
    }
}

#[tonic::async_trait]
impl policies_server::Policies for Api {
    async fn get_policy(&self, req: Request<pb::GetPolicyRequest>) -> R<pb::PolicyResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            input::reference("sandbox", &r.sandbox)?;
            let t = self.0.store.policy_target(&p, &r.sandbox).await?;
            let policy = crate::policy_gate::stored(&t.name, &t.policy)?;
            Ok(policy_response(t.id, t.name, t.version, &policy))
        }
        .await)
    }

    async fn set_policy(&self, req: Request<pb::SetPolicyRequest>) -> R<pb::PolicyResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            self.0.set_policy(&p, &r.sandbox, &r.policy_yaml).await?;
            let t = self.0.store.policy_target(&p, &r.sandbox).await?;
            let policy = crate::policy_gate::stored(&t.name, &t.policy)?;
            Ok(policy_response(t.id, t.name, t.version, &policy))
        }
        .await)
    }

    async fn get_global_max(&self, req: Request<pb::GetGlobalMaxRequest>) -> R<pb::GlobalMaxResponse> {
        let p = self.who(&req).await?;
        ok(async {
            require_user(&p)?;
            let (version, policy) = self.0.global_max().await?;
            Ok(global_response(version, policy))
        }
        .await)
    }

    async fn set_global_max(&self, req: Request<pb::SetGlobalMaxRequest>) -> R<pb::GlobalMaxResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            let (version, policy) = self.0.set_global_max(&p, &r.policy_yaml).await?;
            Ok(global_response(version, policy))
        }
        .await)
    }

    async fn check_policy(&self, req: Request<pb::CheckPolicyRequest>) -> R<pb::CheckPolicyResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        let req = crate::ops::CheckPolicy {
            boundary: crate::ops::Boundary::Yaml(r.boundary_yaml),
            candidate: r.candidate_yaml,
        };
        ok(async { Ok(check_response(self.0.check_policy(&p, req).await?)) }.await)
    }

    async fn list_proposals(&self, req: Request<pb::ListProposalsRequest>) -> R<pb::ListProposalsResponse> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(async {
            require_user(&p)?;
            let sandbox = optional(r.sandbox);
            if let Some(s) = &sandbox {
                input::reference("sandbox", s)?;
            }
            if !(0..=1000).contains(&r.limit) {
                return Err(Error::invalid("limit", "1 to 1000 (0 means 100)"));
            }
            let limit = if r.limit == 0 { 100 } else { r.limit };
            let state = optional(r.state);
            let rows = self.0.store.proposals(&p, sandbox.as_deref(), state.as_deref(), limit).await?;
            Ok(pb::ListProposalsResponse { proposals: rows.into_iter().map(crate::proposals::to_pb).collect() })
        }
        .await)
    }

    async fn approve_proposal(&self, req: Request<pb::ApproveProposalRequest>) -> R<pb::Proposal> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(self.0.approve_proposal(&p, r.id).await.map(crate::proposals::to_pb))
    }

    async fn reject_proposal(&self, req: Request<pb::RejectProposalRequest>) -> R<pb::Proposal> {
        let p = self.who(&req).await?;
        let r = req.into_inner();
        ok(self.0.reject_proposal(&p, r.id, &r.reason).await.map(crate::proposals::to_pb))
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
