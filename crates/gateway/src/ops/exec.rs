//! Commands in running sandboxes: who may come in through which entry (`exec_scope`), the
//! command streamed to the sandbox's supervisor over its work channel and its output and exit
//! streamed back (`exec`), or run to completion and its output collected, for surfaces
//! without streams such as an MCP tool call (`exec_collected`). Which sandbox a caller may
//! work in is decided in SQL (`exec_begin`, sql/work.sql, which also counts the exec for the
//! idle stop).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use openshell_proto::v1 as pb;
use openshell_store::{Error, Kind, Principal};
use pb::supervisor_event::Event;
use pb::supervisor_task::Task;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::auth::{require_sandbox, require_user};
use crate::{Gateway, input};

const MAX_ENV: usize = 256;
/// Standard input one exec may send in all.
const MAX_STDIN_BYTES: usize = 64 << 20;
const MAX_ENV_BYTES: usize = 64 * 1024;

pub type ExecStream = ReceiverStream<Result<pb::ExecOutput, Status>>;

/// What a command reads on its standard input.
pub enum Stdin {
    Data(Vec<u8>),
    Eof,
}

/// Sizes and shapes the supervisor does not need to see.
fn check(start: &pb::ExecStart) -> Result<(), Error> {
    input::command("command", &start.command)?;
    if start.env.len() > MAX_ENV {
        return Err(Error::invalid("env", format!("at most {MAX_ENV} variables")));
    }
    let bytes: usize = start.env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_ENV_BYTES {
        return Err(Error::invalid("env", format!("at most {MAX_ENV_BYTES} bytes in all")));
    }
    if let Some(k) = start.env.keys().find(|k| k.is_empty() || k.contains(['=', '\0'])) {
        return Err(Error::invalid("env", format!("{k:?} is not a variable name")));
    }
    if start.env.values().any(|v| v.contains('\0')) || start.workdir.contains('\0') {
        return Err(Error::invalid("env", "values cannot contain NUL bytes"));
    }
    if !start.workdir.is_empty() && !start.workdir.starts_with('/') {
        return Err(Error::invalid("workdir", "must be an absolute path"));
    }
    if start.timeout_seconds > 3600 {
        return Err(Error::invalid("timeout_seconds", "at most 3600"));
    }
    if start.output_cap > 64 << 20 {
        return Err(Error::invalid("output_cap", "at most 64 MiB"));
    }
    Ok(())
}

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

    /// Runs a command in a sandbox the caller may work in (`kind` limits a sandbox caller to
    /// its children of that kind) and streams its output and exit back; `stdin` is what the
    /// command reads, as it comes.
    pub async fn exec<S>(
        &self,
        caller: &Principal,
        start: pb::ExecStart,
        mut stdin: S,
        kind: Option<Kind>,
    ) -> Result<ExecStream, Error>
    where
        S: futures::Stream<Item = Stdin> + Send + Unpin + 'static,
    {
        let target = async {
            check(&start)?;
            input::reference("sandbox", &start.sandbox)?;
            self.store.exec_begin(caller, &start.sandbox, kind).await
        };
        let target = self.receipt_on_refusal(caller, "sandbox.exec", &start.sandbox, None, target.await).await?;
        let id = self.work.next.fetch_add(1, Ordering::Relaxed);
        let (events_tx, mut events_rx) = mpsc::channel(64);
        if let Ok(mut e) = self.work.execs.lock() {
            e.insert(id, (target, events_tx));
        }
        // The exec is over for the idle timer once its relay ends, however it ends.
        let forget = move |gw: Gateway| async move {
            if let Ok(mut e) = gw.work.execs.lock() {
                e.remove(&id);
            }
            if let Err(e) = gw.store.exec_end(target).await {
                tracing::warn!(sandbox = %target, "recording the end of an exec: {e}");
            }
        };
        if let Err(e) = self.work.send(target, id, Task::Exec(start)).await {
            forget(self.clone()).await;
            return Err(e);
        }
        // The caller's stdin, as it comes.
        let gw = self.clone();
        tokio::spawn(async move {
            let mut sent = 0usize;
            while let Some(msg) = futures::StreamExt::next(&mut stdin).await {
                let task = match msg {
                    // Beyond the cap the command sees end of file.
                    Stdin::Data(data) if sent + data.len() > MAX_STDIN_BYTES => {
                        let _ = gw.work.send(target, id, Task::StdinEof(true)).await;
                        return;
                    }
                    Stdin::Data(data) => {
                        sent += data.len();
                        Task::Stdin(data)
                    }
                    Stdin::Eof => Task::StdinEof(true),
                };
                if gw.work.send(target, id, task).await.is_err() {
                    return;
                }
            }
        });
        let (out_tx, out_rx) = mpsc::channel(64);
        let gw = self.clone();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    e = events_rx.recv() => e,
                    // The caller went away (its stream was dropped): the command goes too.
                    _ = out_tx.closed() => {
                        let _ = gw.work.send(target, id, Task::Cancel(true)).await;
                        break;
                    }
                };
                let output = match event {
                    Some(Event::Stdout(d)) => pb::exec_output::Output::Stdout(d),
                    Some(Event::Stderr(d)) => pb::exec_output::Output::Stderr(d),
                    Some(Event::Exit(x)) => {
                        let _ =
                            out_tx.send(Ok(pb::ExecOutput { output: Some(pb::exec_output::Output::Exit(x)) })).await;
                        break;
                    }
                    Some(_) => continue,
                    None => break,
                };
                // The caller went away: the command goes too.
                if out_tx.send(Ok(pb::ExecOutput { output: Some(output) })).await.is_err() {
                    let _ = gw.work.send(target, id, Task::Cancel(true)).await;
                    break;
                }
            }
            forget(gw).await;
        });
        Ok(ReceiverStream::new(out_rx))
    }
}
