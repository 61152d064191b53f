//! One MCP server per session: lists the tools and translates each call to an operation,
//! and the operation's refusal to a tool result with `isError` and `{code, message, details}`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use openshell_proto::v1 as pb;
use openshell_store::{Error, Phase, Principal};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::tools::{self, Limits};
use crate::metrics::Surface;
use crate::ops::{Boundary, ExecEntry, ExecRequest, exec_scope};
use crate::{ChildRequest, Gateway};

/// Bytes of stdout and stderr together an exec tool call returns (its result is one message).
const EXEC_OUTPUT_CAP: u64 = 1 << 20;
/// A get_file call's size cap when it names none, and the most it may name (the result is
/// one message, base64 a third larger).
const FILE_DEFAULT_BYTES: u64 = 1 << 20;
const FILE_MAX_BYTES: u64 = 8 << 20;

#[derive(Clone)]
pub struct McpServer {
    gw: Gateway,
    tools: Arc<Vec<Tool>>,
}

impl McpServer {
    pub fn new(gw: Gateway) -> McpServer {
        static TOOLS: std::sync::OnceLock<Arc<Vec<Tool>>> = std::sync::OnceLock::new();
        McpServer { gw, tools: TOOLS.get_or_init(tools::all).clone() }
    }
}

type Outcome = Result<Value, Error>;

/// A tool's arguments, or INVALID_ARGUMENT naming the field and why.
fn parse<T: DeserializeOwned>(args: Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "arguments".to_string() } else { path };
        // serde quotes the offending value, and `env` values may be secrets.
        if field == "env" || field.starts_with("env.") {
            return Error::invalid(
                "env",
                "must be a list of {\"name\": ..., \"value\": ...} objects whose values are strings",
            );
        }
        Error::invalid(&field, e.into_inner())
    })
}

fn out<T: Serialize>(value: T) -> Outcome {
    serde_json::to_value(value).map_err(Error::unavailable)
}

fn refusal(e: Error) -> CallToolResult {
    // The output schema promises an object.
    let details = match e.details {
        Value::Object(_) => e.details,
        Value::Null => json!({}),
        other => json!({ "detail": other }),
    };
    let r = tools::Refusal { code: e.code.as_str().to_string(), message: e.message, details };
    CallToolResult::structured_error(serde_json::to_value(r).unwrap_or_else(|_| json!({ "code": "UNAVAILABLE" })))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("openshell-gateway", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "OpenShell: create child sandboxes within your tree's grant (get_grant shows what remains), \
                 check a policy first with check_policy, run commands in tool children with exec.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items((*self.tools).clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Put there by the authentication in front of every request (see mcp::authenticate).
        let parts = context.extensions.get::<http::request::Parts>();
        let caller = parts
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request carries no authenticated caller", None))?;
        // A sandbox's tool call is checked again at its door (`Gateway::take_door_call`); a
        // create takes its call in the SQL call that reads its parent
        // (`create_child_through_door`).
        let mut door = None;
        if let Principal::Sandbox { .. } = &caller {
            let hash = parts
                .and_then(|parts| parts.extensions.get::<super::DoorCall>())
                .ok_or_else(|| ErrorData::internal_error("a sandbox's call carries no door credential", None))?
                .0;
            if request.name == "create_sandbox" {
                door = Some(hash);
            } else if let Err(e) = self.gw.take_door_call(&caller, &hash).await {
                self.gw.metrics.door_call::<()>(&Err(e.clone()));
                return Ok(refusal(e).into());
            }
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let gw = &self.gw;
        let result = match request.name.as_ref() {
            "create_sandbox" => match parse(args) {
                Ok(a) => self.create_sandbox(&caller, a, &context, door).await,
                Err(e) => match door {
                    Some(hash) => match self.gw.take_door_call(&caller, &hash).await {
                        Ok(()) => Err(e),
                        Err(refused) => {
                            self.gw.metrics.door_call::<()>(&Err(refused.clone()));
                            return Ok(refusal(refused).into());
                        }
                    },
                    None => Err(e),
                },
            },
            "exec" => match parse::<tools::Exec>(args) {
                Ok(a) => self.exec(&caller, a).await,
                Err(e) => Err(e),
            },
            "get_file" => match parse::<tools::GetFile>(args) {
                Ok(a) => self.get_file(&caller, a).await,
                Err(e) => Err(e),
            },
            "list_children" => match parse::<tools::OptionalSandboxRef>(args) {
                Ok(a) => gw
                    .list_children(&caller, a.sandbox.as_deref())
                    .await
                    .and_then(|rows| out(tools::Sandboxes { sandboxes: rows.into_iter().map(Into::into).collect() })),
                Err(e) => Err(e),
            },
            "get_sandbox" => match parse::<tools::SandboxRef>(args) {
                Ok(a) => {
                    gw.get_sandbox(&caller, &a.sandbox).await.and_then(|s| out(tools::OneSandbox { sandbox: s.into() }))
                }
                Err(e) => Err(e),
            },
            name @ ("stop_sandbox" | "delete_sandbox") => match parse::<tools::SandboxRef>(args) {
                Ok(a) => gw
                    .stop(&caller, &a.sandbox, name == "delete_sandbox")
                    .await
                    .and_then(|rows| out(tools::Stopped { stopped: rows.into_iter().map(Into::into).collect() })),
                Err(e) => Err(e),
            },
            "update_child_policy" => match parse::<tools::UpdateChildPolicy>(args) {
                Ok(a) => gw.update_child_policy(&caller, &a.sandbox, &a.policy).await.and_then(|w| {
                    out(tools::PolicyUpdated { sandbox: a.sandbox, policy_version: w.version, warnings: w.warnings })
                }),
                Err(e) => Err(e),
            },
            "get_grant" => match parse::<tools::OptionalSandboxRef>(args) {
                Ok(a) => gw.grant_status(&caller, a.sandbox.as_deref()).await.and_then(grant_out),
                Err(e) => Err(e),
            },
            "check_policy" => match parse::<tools::CheckPolicy>(args) {
                Ok(a) => self.check_policy(&caller, a).await,
                Err(e) => Err(e),
            },
            other => {
                return Err(ErrorData::invalid_params(format!("unknown tool {other:?}"), None));
            }
        };
        if matches!(caller, Principal::Sandbox { .. }) {
            self.gw.metrics.door_call(&result);
        }
        Ok(match result {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => refusal(e),
        }
        .into())
    }
}

fn grant_out(g: openshell_store::GrantStatus) -> Outcome {
    out(tools::GrantOut {
        grant_id: g.grant_id,
        root: g.root_name,
        sandbox: g.sandbox_name,
        state: g.state.to_string(),
        expires_at: g.expires_at.to_rfc3339(),
        program: g.program,
        limits: Limits { depth: g.max_depth, breadth: g.max_breadth, total: g.max_total },
        used: Limits { depth: g.depth, breadth: g.live_children, total: g.live_total },
        remaining: Limits { depth: g.remaining_depth, breadth: g.remaining_breadth, total: g.remaining_total },
    })
}

impl McpServer {
    async fn create_sandbox(
        &self,
        caller: &Principal,
        a: tools::CreateSandbox,
        context: &RequestContext<RoleServer>,
        door: Option<[u8; 32]>,
    ) -> Outcome {
        let template = a
            .disk
            .as_ref()
            .map(|d| openshell_disk::parse_size(d))
            .transpose()
            .map_err(|why| Error::invalid("disk", why))
            .and_then(|disk| {
                let asked = disk.map(|disk_bytes| pb::Template { disk_bytes, ..Default::default() });
                crate::template::child_request(asked.as_ref(), self.gw.settings.disk)
            });
        let template = match (template, door) {
            (Ok(t), _) => t,
            // A door call refused before any tool is read still takes from its bucket.
            (Err(e), Some(hash)) => {
                self.gw.take_door_call(caller, &hash).await?;
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        let req = ChildRequest {
            parent: a.parent.unwrap_or_default(),
            name: a.name,
            kind: a.kind.unwrap_or_default().into(),
            command: a.command,
            policy_yaml: a.policy.unwrap_or_default(),
            request_id: a.request_id,
            template,
            env: a.env.into_map()?,
        };
        let created = match door {
            Some(hash) => self.gw.create_child_through_door(caller, req, hash).await,
            None => self.gw.create_child(caller, req).await,
        };
        let surface = if door.is_some() { Surface::Door } else { Surface::Mcp };
        self.gw.metrics.create("child", surface, &created);
        let crate::ops::Created { sandbox, replayed, warnings } = created?;
        let sandbox = if a.wait.unwrap_or(true) && !sandbox.phase.is_settled() {
            self.wait_ready(caller, sandbox, context).await?
        } else {
            sandbox
        };
        if sandbox.phase == Phase::Error {
            return Err(Error::unavailable(format!(
                "sandbox {} was admitted but failed to start: {}",
                sandbox.name, sandbox.phase_reason
            ))
            .with_details(json!({ "sandbox": sandbox.name, "phase": sandbox.phase, "reason": sandbox.phase_reason })));
        }
        out(tools::Created { sandbox: sandbox.into(), replayed, warnings })
    }

    /// Follows the new child until it is READY or failed, reporting each phase as MCP
    /// progress when the client asked for it; returns the last state seen.
    async fn wait_ready(
        &self,
        caller: &Principal,
        mut sandbox: openshell_store::Sandbox,
        context: &RequestContext<RoleServer>,
    ) -> Result<openshell_store::Sandbox, Error> {
        let token = context.meta.get_progress_token();
        let deadline = self.gw.settings.provision_timeout + Duration::from_secs(5);
        let mut phases = Box::pin(self.gw.watch(caller.clone(), sandbox.id.to_string(), deadline));
        let mut step = 0.0;
        loop {
            let next = tokio::select! {
                next = phases.next() => next,
                // The client cancelled its call: the child stays, the wait ends.
                _ = context.ct.cancelled() => return Ok(sandbox),
            };
            let Some(next) = next else { return Ok(sandbox) };
            sandbox = next?;
            step += 1.0;
            if let Some(token) = &token {
                let note = ProgressNotificationParam::new(token.clone(), step)
                    .with_message(format!("{}: {}", sandbox.name, sandbox.phase));
                // A client gone away is not the child's failure.
                let _ = context.peer.notify_progress(note).await;
            }
        }
    }

    async fn exec(&self, caller: &Principal, a: tools::Exec) -> Outcome {
        let req = ExecRequest {
            sandbox: a.sandbox,
            command: a.command,
            env: a.env.into_map()?,
            workdir: a.workdir.unwrap_or_default(),
            timeout_seconds: a.timeout_seconds.unwrap_or(0),
            stdin: a.stdin.map(String::into_bytes),
            output_cap: EXEC_OUTPUT_CAP,
        };
        let kind = exec_scope(caller, ExecEntry::Either)?;
        let r = self.gw.exec_collected(caller, req, kind).await?;
        out(tools::ExecOut {
            exit_code: r.exit_code,
            stdout: r.stdout,
            stderr: r.stderr,
            timed_out: r.timed_out,
            output_capped: r.output_capped,
            error: r.error,
        })
    }

    async fn get_file(&self, caller: &Principal, a: tools::GetFile) -> Outcome {
        let max_bytes = match a.max_bytes {
            None | Some(0) => FILE_DEFAULT_BYTES,
            Some(n) if n > FILE_MAX_BYTES => {
                return Err(Error::invalid(
                    "max_bytes",
                    format!("at most {FILE_MAX_BYTES} through MCP (download larger files over gRPC), got {n}"),
                ));
            }
            Some(n) => n,
        };
        let file = self.gw.get_file_collected(caller, a.sandbox, a.path, max_bytes).await?;
        let (encoding, content) = match String::from_utf8(file.data) {
            Ok(text) => ("utf-8", text),
            Err(e) => {
                use base64::Engine;
                ("base64", base64::engine::general_purpose::STANDARD.encode(e.into_bytes()))
            }
        };
        out(tools::FileOut { path: file.path, size: file.size, encoding: encoding.into(), content })
    }

    async fn check_policy(&self, caller: &Principal, a: tools::CheckPolicy) -> Outcome {
        let boundary = match (a.parent, a.boundary) {
            (Some(_), Some(_)) => return Err(Error::invalid("boundary", "give parent or boundary, not both")),
            (Some(parent), None) => Boundary::ParentOf(parent),
            (None, Some(yaml)) => Boundary::Yaml(yaml),
            (None, None) => Boundary::Own,
        };
        let verdict =
            self.gw.check_policy(caller, crate::ops::CheckPolicy { boundary, candidate: a.candidate }).await?;
        use openshell_prover::Verdict;
        let (verdict, counterexample, hint, reason) = match verdict {
            Verdict::Within => ("within", None, None, None),
            Verdict::Exceeds(cx) => ("exceeds", Some(cx.access), Some(cx.hint), None),
            Verdict::Unsupported(r) => ("unsupported", None, None, Some(r)),
            Verdict::Inconclusive(r) => ("inconclusive", None, None, Some(r)),
        };
        out(tools::CheckOut { verdict: verdict.into(), counterexample, hint, reason })
    }
}
