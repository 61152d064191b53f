//! A command run to completion in a sandbox the caller may work in, its output collected
//! (for surfaces without streams, such as an MCP tool call).

use std::collections::HashMap;

use futures::StreamExt;
use openshell_proto::v1 as pb;
use openshell_store::{Error, Kind, Principal};
use serde::Serialize;

use crate::Gateway;
use crate::auth::{require_sandbox, require_user};
use crate::work::Stdin;

pub struct ExecRequest {
    pub sandbox: String,
    pub command: Vec<String>,
    pub env: HashMap<String, String>,
    pub workdir: String,
    pub timeout_seconds: u32,
    pub stdin: Option<Vec<u8>>,
    /// Bytes of stdout and stderr together kept; the command is stopped beyond it.
    pub output_cap: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExecOutcome {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub output_capped: bool,
    /// Set when the command could not be started.
    pub error: String,
}

/// The ways into exec: a user's (ExecSandbox), a sandbox's (ExecChildSandbox), and either's
/// (the MCP exec tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecEntry {
    User,
    ToolChild,
    /// A user in any of their sandboxes, a sandbox only in its tool children.
    Either,
}

/// Whether `caller` may come in through `entry`, and if so which kind of sandbox it may run
/// commands in (None: any of the user's). Checked before the request's body is read.
pub fn exec_scope(caller: &Principal, entry: ExecEntry) -> Result<Option<Kind>, Error> {
    match entry {
        ExecEntry::User => require_user(caller).map(|()| None),
        ExecEntry::ToolChild => require_sandbox(caller).map(|_| Some(Kind::Tool)),
        ExecEntry::Either => Ok(if caller.is_user() { None } else { Some(Kind::Tool) }),
    }
}

impl Gateway {
    /// Runs `req` in a sandbox (a sandbox caller: only its children of `kind`) and returns
    /// its exit and output (lossy UTF-8).
    pub async fn exec_collected(
        &self,
        caller: &Principal,
        req: ExecRequest,
        kind: Option<Kind>,
    ) -> Result<ExecOutcome, Error> {
        let start = pb::ExecStart {
            sandbox: req.sandbox,
            command: req.command,
            env: req.env,
            workdir: req.workdir,
            timeout_seconds: req.timeout_seconds,
            output_cap: req.output_cap,
            stdin: req.stdin.is_some(),
        };
        let stdin: Vec<Stdin> = match req.stdin {
            Some(data) if !data.is_empty() => vec![Stdin::Data(data), Stdin::Eof],
            Some(_) => vec![Stdin::Eof],
            None => vec![],
        };
        let mut out = self.exec(caller, start, futures::stream::iter(stdin), kind).await?;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(msg) = out.next().await {
            let msg = msg.map_err(|s| Error::unavailable(format!("exec: {}", s.message())))?;
            match msg.output {
                Some(pb::exec_output::Output::Stdout(d)) => stdout.extend_from_slice(&d),
                Some(pb::exec_output::Output::Stderr(d)) => stderr.extend_from_slice(&d),
                Some(pb::exec_output::Output::Exit(x)) => {
                    return Ok(ExecOutcome {
                        exit_code: x.code,
                        stdout: String::from_utf8_lossy(&stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&stderr).into_owned(),
                        timed_out: x.timed_out,
                        output_capped: x.output_capped,
                        error: x.error,
                    });
                }
                None => {}
            }
        }
        Err(Error::unavailable("the sandbox's supervisor went away before the command exited"))
    }
}
