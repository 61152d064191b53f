//! Work in running sandboxes (exec), relayed over each supervisor's own work channel: the
//! supervisor opens `Attach`, the gateway sends tasks down it and routes the events that come
//! back to the caller that started the task. Which sandbox a caller may work in is decided in
//! SQL (`exec_begin`, which also counts the exec for the idle stop); this module only relays.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use openshell_proto::v1 as pb;
use openshell_store::{Error, Kind, Principal};
use pb::supervisor_event::Event;
use pb::supervisor_task::Task;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use uuid::Uuid;

use crate::{Gateway, input};

type TaskSender = mpsc::Sender<Result<pb::SupervisorTask, Status>>;

/// The attached supervisors of this gateway and the execs in flight.
#[derive(Default)]
pub struct Work {
    attached: Mutex<HashMap<Uuid, TaskSender>>,
    /// Where each task's events go (execs and file reads), by task id, with the sandbox it
    /// runs in: only that sandbox's supervisor reports on it.
    pub(crate) execs: Mutex<HashMap<u64, (Uuid, mpsc::Sender<Event>)>>,
    pub(crate) next: AtomicU64,
}

const MAX_ENV: usize = 256;
/// Standard input one exec may send in all.
const MAX_STDIN_BYTES: usize = 64 << 20;
const ATTACH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const MAX_ENV_BYTES: usize = 64 * 1024;

impl Work {
    /// A supervisor's work channel: tasks go down `tx`; the newest attach of a sandbox wins.
    pub fn attach(&self, sandbox: Uuid, tx: TaskSender) {
        if let Ok(mut a) = self.attached.lock() {
            a.insert(sandbox, tx);
        }
    }

    pub fn detach(&self, sandbox: Uuid, tx: &mpsc::WeakSender<Result<pb::SupervisorTask, Status>>) {
        let Some(tx) = tx.upgrade() else { return };
        if let Ok(mut a) = self.attached.lock()
            && a.get(&sandbox).is_some_and(|t| t.same_channel(&tx))
        {
            a.remove(&sandbox);
            // Its tasks will report nothing more: their callers (and the idle count) end.
            if let Ok(mut e) = self.execs.lock() {
                e.retain(|_, (s, _)| *s != sandbox);
            }
        }
    }

    /// Ends every work channel (the gateway is shutting down; supervisors re-attach to the
    /// next one). The map holds the only strong senders, so each stream ends here.
    pub fn close_all(&self) {
        if let Ok(mut a) = self.attached.lock() {
            a.clear();
        }
    }

    /// An event from a sandbox's supervisor, for a task of that sandbox.
    pub async fn event(&self, sandbox: Uuid, e: pb::SupervisorEvent) {
        let tx =
            self.execs.lock().ok().and_then(|m| m.get(&e.id).filter(|(s, _)| *s == sandbox).map(|(_, t)| t.clone()));
        if let (Some(tx), Some(event)) = (tx, e.event) {
            let _ = tx.send(event).await;
        }
    }

    pub(crate) async fn send(&self, sandbox: Uuid, id: u64, task: Task) -> Result<(), Error> {
        // A supervisor attaches right after its sandbox starts, and again after a gateway
        // restart: give it a moment before refusing.
        let deadline = tokio::time::Instant::now() + ATTACH_WAIT;
        let tx = loop {
            match self.attached.lock().ok().and_then(|a| a.get(&sandbox).cloned()) {
                Some(tx) => break tx,
                None if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                None => return Err(Error::unavailable("the sandbox's supervisor is not attached to this gateway")),
            }
        };
        tx.send(Ok(pb::SupervisorTask { id, task: Some(task) }))
            .await
            .map_err(|_| Error::unavailable("the sandbox's supervisor went away"))
    }
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

pub type ExecStream = ReceiverStream<Result<pb::ExecOutput, Status>>;

/// What a command reads on its standard input.
pub enum Stdin {
    Data(Vec<u8>),
    Eof,
}

/// The standard input that follows a gRPC exec's first message.
pub fn grpc_stdin(input: tonic::Streaming<pb::ExecInput>) -> impl futures::Stream<Item = Stdin> + Send + Unpin {
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
pub async fn grpc_start(input: &mut tonic::Streaming<pb::ExecInput>) -> Result<pb::ExecStart, Error> {
    let first = input.message().await.map_err(|s| Error::invalid("start", s.message().to_string()))?;
    let Some(pb::ExecInput { input: Some(pb::exec_input::Input::Start(start)) }) = first else {
        return Err(Error::invalid("start", "the first message must be `start`"));
    };
    Ok(start)
}

impl Gateway {
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

    /// Serves a supervisor's work channel until it closes.
    pub fn attach(
        &self,
        sandbox: Uuid,
        mut events: tonic::Streaming<pb::SupervisorEvent>,
    ) -> ReceiverStream<Result<pb::SupervisorTask, Status>> {
        let (tx, rx) = mpsc::channel(64);
        let weak = tx.downgrade();
        self.work.attach(sandbox, tx);
        let gw = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(e)) = events.message().await {
                gw.work.event(sandbox, e).await;
            }
            gw.work.detach(sandbox, &weak);
        });
        ReceiverStream::new(rx)
    }
}
