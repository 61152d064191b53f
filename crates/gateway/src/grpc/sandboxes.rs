//! The Sandboxes service: create, read, list, watch, stop, delete, exec in and read files
//! of sandboxes.

use futures::StreamExt;
use openshell_proto::v1 as pb;
use openshell_proto::v1::sandboxes_server;
use openshell_store::{Error, Kind};
use tonic::{Request, Status};

use super::{Api, R, optional, page_out, page_request};
use crate::metrics::Surface;
use crate::ops::{ChildRequest, RootRequest};
use crate::ops::{ExecEntry, GrantSpec, exec_scope};
use crate::ops::{ExecStream, Stdin};
use crate::status::to_status;
use crate::{convert, template};

fn kind_name(kind: i32) -> Result<Kind, Error> {
    match pb::SandboxKind::try_from(kind) {
        Ok(pb::SandboxKind::Agent) | Ok(pb::SandboxKind::Unspecified) => Ok(Kind::Agent),
        Ok(pb::SandboxKind::Tool) => Ok(Kind::Tool),
        Err(_) => Err(Error::invalid("kind", format!("unknown kind {kind}: use agent or tool"))),
    }
}

pub(super) fn grant_spec(g: pb::GrantSpec) -> GrantSpec {
    GrantSpec {
        max_depth: g.max_depth,
        max_breadth: g.max_breadth,
        max_total: g.max_total,
        expires: g.expires,
        program: g.program,
        rate: g.rate,
        tool_idle_seconds: g.tool_idle_seconds,
    }
}

/// The standard input that follows a gRPC exec's first message.
fn grpc_stdin(input: tonic::Streaming<pb::ExecInput>) -> impl futures::Stream<Item = Stdin> + Send + Unpin {
    Box::pin(futures::stream::unfold(input, |mut input| async move {
        loop {
            match input.message().await {
                Ok(Some(pb::ExecInput { input: Some(pb::exec_input::Input::Stdin(data)) })) => {
                    return Some((Stdin::Data(data), input));
                }
                Ok(Some(pb::ExecInput { input: Some(pb::exec_input::Input::StdinEof(_)) })) => {
                    return Some((Stdin::Eof, input));
                }
                Ok(Some(_)) => continue,
                _ => return None,
            }
        }
    }))
}

/// Reads a gRPC exec's first message: what to run.
async fn grpc_start(input: &mut tonic::Streaming<pb::ExecInput>) -> Result<pb::ExecStart, Error> {
    let first = input.message().await.map_err(|s| Error::invalid("start", s.message().to_string()))?;
    let Some(pb::ExecInput { input: Some(pb::exec_input::Input::Start(start)) }) = first else {
        return Err(Error::invalid("start", "the first message must be `start`"));
    };
    Ok(start)
}

fn stopped(rows: Vec<openshell_store::Sandbox>) -> pb::StopSandboxResponse {
    pb::StopSandboxResponse { stopped: rows.into_iter().map(convert::sandbox).collect() }
}

impl Api {
    /// An exec stream through `entry`: who may use it is decided before its first message
    /// (what to run) is read.
    async fn exec_via(&self, entry: ExecEntry, req: Request<tonic::Streaming<pb::ExecInput>>) -> R<ExecStream> {
        self.api(req, |p, mut input| async move {
            let kind = exec_scope(&p, entry)?;
            let start = grpc_start(&mut input).await?;
            self.0.exec(&p, start, grpc_stdin(input), kind).await
        })
        .await
    }
}

#[tonic::async_trait]
impl sandboxes_server::Sandboxes for Api {
    type ExecChildSandboxStream = ExecStream;
    type ExecSandboxStream = ExecStream;
    type GetFileStream = crate::ops::FileStream;
    type WatchSandboxStream = futures::stream::BoxStream<'static, Result<pb::Sandbox, Status>>;

    async fn get_file(&self, req: Request<pb::GetFileRequest>) -> R<Self::GetFileStream> {
        self.api(req, |p, r| async move { self.0.get_file(&p, r).await }).await
    }

    async fn watch_sandbox(&self, req: Request<pb::WatchSandboxRequest>) -> R<Self::WatchSandboxStream> {
        self.api(req, |p, r| async move {
            let phases = self.0.watch_sandbox(p, r.sandbox, r.timeout_seconds).await?;
            Ok(phases.map(|s| s.map(convert::sandbox).map_err(to_status)).boxed())
        })
        .await
    }

    async fn exec_child_sandbox(
        &self,
        req: Request<tonic::Streaming<pb::ExecInput>>,
    ) -> R<Self::ExecChildSandboxStream> {
        self.exec_via(ExecEntry::ToolChild, req).await
    }

    async fn exec_sandbox(&self, req: Request<tonic::Streaming<pb::ExecInput>>) -> R<Self::ExecSandboxStream> {
        self.exec_via(ExecEntry::User, req).await
    }

    async fn create_sandbox(&self, req: Request<pb::CreateSandboxRequest>) -> R<pb::CreateSandboxResponse> {
        self.api(req, |p, r| async move {
            let grant_expires = r.grant.as_ref().map(|g| g.expires.clone());
            let in_image = self.0.driver.needs_image();
            let grant = r.grant.map(|g| grant_spec(g).values(in_image)).transpose()?;
            let root = RootRequest {
                name: r.name,
                command: r.command,
                policy_yaml: r.policy_yaml,
                grant,
                grant_expires,
                request_id: optional(r.request_id),
                template: template::from_request(r.template.as_ref(), self.0.settings.disk)?,
                image: template::requested_image(r.template.as_ref()),
                env: r.env.into_iter().collect(),
            };
            let created = self.0.create_root(&p, root).await;
            self.0.metrics.create("root", Surface::Grpc, &created);
            let c = created?;
            Ok(pb::CreateSandboxResponse {
                sandbox: Some(convert::sandbox(c.sandbox)),
                replayed: c.replayed,
                warnings: c.warnings,
            })
        })
        .await
    }

    async fn create_child_sandbox(&self, req: Request<pb::CreateChildSandboxRequest>) -> R<pb::CreateSandboxResponse> {
        self.api(req, |p, r| async move {
            let child = ChildRequest {
                parent: r.parent,
                name: optional(r.name),
                kind: kind_name(r.kind)?,
                command: r.command,
                policy_yaml: r.policy_yaml,
                request_id: optional(r.request_id),
                template: template::child_request(r.template.as_ref(), self.0.settings.disk)?,
                env: r.env.into_iter().collect(),
            };
            let created = self.0.create_child(&p, child).await;
            self.0.metrics.create("child", Surface::Grpc, &created);
            let c = created?;
            Ok(pb::CreateSandboxResponse {
                sandbox: Some(convert::sandbox(c.sandbox)),
                replayed: c.replayed,
                warnings: c.warnings,
            })
        })
        .await
    }

    async fn get_sandbox(&self, req: Request<pb::GetSandboxRequest>) -> R<pb::Sandbox> {
        self.api(req, |p, r| async move { self.0.get_sandbox(&p, &r.sandbox).await.map(convert::sandbox) }).await
    }

    async fn list_sandboxes(&self, req: Request<pb::ListSandboxesRequest>) -> R<pb::ListSandboxesResponse> {
        self.api(req, |p, r| async move {
            let page = self.0.list_sandboxes(&p, r.all, page_request(r.page_size, r.page_token)).await?;
            let (sandboxes, next_page_token) = page_out(page, convert::sandbox);
            Ok(pb::ListSandboxesResponse { sandboxes, next_page_token })
        })
        .await
    }

    async fn list_children(&self, req: Request<pb::ListChildrenRequest>) -> R<pb::ListChildrenResponse> {
        self.api(req, |p, r| async move {
            let rows = self.0.list_children(&p, Some(&r.sandbox)).await?;
            Ok(pb::ListChildrenResponse { sandboxes: rows.into_iter().map(convert::sandbox).collect() })
        })
        .await
    }

    async fn list_denials(&self, req: Request<pb::ListDenialsRequest>) -> R<pb::ListDenialsResponse> {
        self.api(req, |p, r| async move {
            let rows = self.0.list_denials(&p, &r.sandbox, r.limit).await?;
            Ok(pb::ListDenialsResponse { denials: rows.into_iter().map(convert::denial).collect() })
        })
        .await
    }

    async fn stop_sandbox(&self, req: Request<pb::StopSandboxRequest>) -> R<pb::StopSandboxResponse> {
        self.api(req, |p, r| async move { self.0.stop(&p, &r.sandbox, false).await.map(stopped) }).await
    }

    async fn delete_sandbox(&self, req: Request<pb::DeleteSandboxRequest>) -> R<pb::StopSandboxResponse> {
        self.api(req, |p, r| async move { self.0.stop(&p, &r.sandbox, true).await.map(stopped) }).await
    }
}
