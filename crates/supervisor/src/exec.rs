//! Commands the gateway runs in this sandbox (exec), over the work channel the supervisor
//! opened (`Attach`): the init starts each like the main command (same uid, namespaces,
//! Landlock, seccomp, cgroup and proxy), on pipes the supervisor streams through, with a
//! timeout and an output cap; a cancel or either limit kills its process group.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openshell_proto::v1 as pb;
use pb::supervisor_event::Event;
use pb::supervisor_task::Task;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::gateway;
use crate::protocol::{ToInit, ToSupervisor};
use crate::sandbox::Channel;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
pub const DEFAULT_OUTPUT_CAP: u64 = 8 << 20;
pub const MAX_OUTPUT_CAP: u64 = 64 << 20;
const CHUNK: usize = 32 * 1024;

struct Running {
    exit: oneshot::Sender<(i32, Option<String>)>,
    /// Chunks for the command's stdin, written in order by a task of its own (so a command
    /// that does not read never holds up the work channel); dropping it closes the pipe.
    stdin: Option<mpsc::UnboundedSender<Vec<u8>>>,
}

/// An exec registered and ready to hand to the init.
struct Prepared {
    id: u64,
    start: pb::ExecStart,
    timeout: Duration,
    cap: u64,
    pipes: [OwnedFd; 5],
    exit: oneshot::Receiver<(i32, Option<String>)>,
}

/// The execs running in this sandbox.
pub struct Execs {
    channel: Arc<Channel>,
    running: Mutex<HashMap<u64, Running>>,
    /// File reads in flight (GetFile), to end one whose caller went away.
    reads: Mutex<HashMap<u64, tokio::task::AbortHandle>>,
    events: Mutex<Option<mpsc::Sender<pb::SupervisorEvent>>>,
}

impl Execs {
    pub fn new(channel: Arc<Channel>) -> Arc<Execs> {
        Arc::new(Execs { channel, running: Mutex::default(), reads: Mutex::default(), events: Mutex::default() })
    }

    async fn emit(&self, id: u64, event: Event) {
        let tx = self.events.lock().ok().and_then(|e| e.clone());
        if let Some(tx) = tx {
            let _ = tx.send(pb::SupervisorEvent { id, event: Some(event) }).await;
        }
    }

    /// The init reported an exec's end.
    fn finished(&self, id: u64, code: i32, error: Option<String>) {
        let running = self.running.lock().ok().and_then(|mut r| r.remove(&id));
        if let Some(r) = running {
            let _ = r.exit.send((code, error));
        }
    }

    async fn task(self: &Arc<Self>, id: u64, task: Task) {
        match task {
            // Registered before the next task is read, so its stdin finds it.
            Task::Exec(start) => match self.prepare(id, start) {
                Ok(prepared) => {
                    let me = self.clone();
                    tokio::spawn(async move { me.run(prepared).await });
                }
                Err(error) => {
                    let exit = pb::ExecExit { code: 127, error, ..Default::default() };
                    self.emit(id, Event::Exit(exit)).await;
                }
            },
            Task::Stdin(data) => {
                if let Ok(r) = self.running.lock()
                    && let Some(tx) = r.get(&id).and_then(|e| e.stdin.as_ref())
                {
                    let _ = tx.send(data);
                }
            }
            Task::StdinEof(_) => {
                if let Ok(mut r) = self.running.lock()
                    && let Some(e) = r.get_mut(&id)
                {
                    e.stdin = None;
                }
            }
            Task::Cancel(_) => {
                if let Some(read) = self.reads.lock().ok().and_then(|mut r| r.remove(&id)) {
                    read.abort();
                    return;
                }
                let _ = self.channel.send(&ToInit::Kill { id }, &[]).await;
            }
            Task::ReadFile(r) => {
                let me = self.clone();
                let handle = tokio::spawn(async move {
                    me.read_file(id, r).await;
                    if let Ok(mut reads) = me.reads.lock() {
                        reads.remove(&id);
                    }
                });
                if let Ok(mut reads) = self.reads.lock()
                    && !handle.is_finished()
                {
                    reads.insert(id, handle.abort_handle());
                }
            }
        }
    }

    /// Reads a file as the agent could (see `files`) and streams it: its info, its data (no
    /// more than the size it had when opened), then its end.
    async fn read_file(&self, id: u64, r: pb::ReadFile) {
        let end = |code: String, message: String, details: serde_json::Value| {
            Event::FileEnd(pb::FileEnd { code, message, details_json: details.to_string() })
        };
        let (file, size) = match crate::files::open(&self.channel, id, &r.path, r.max_bytes).await {
            Ok((file, crate::files::Reply::Opened { path, size })) => {
                self.emit(id, Event::FileInfo(pb::FileInfo { path, size })).await;
                (file, size)
            }
            Ok((_, crate::files::Reply::Refused { code, message, details }))
            | Err(crate::files::Reply::Refused { code, message, details }) => {
                return self.emit(id, end(code, message, details)).await;
            }
            Err(crate::files::Reply::Opened { .. }) => return,
        };
        let mut file = tokio::fs::File::from_std(file);
        let mut left = size;
        let mut buf = vec![0u8; CHUNK * 2];
        while left > 0 {
            let want = buf.len().min(left as usize);
            match file.read(&mut buf[..want]).await {
                Ok(0) => break,
                Ok(n) => {
                    left -= n as u64;
                    self.emit(id, Event::FileData(buf[..n].to_vec())).await;
                }
                Err(e) => {
                    let message = format!("path {}: reading: {e}", r.path);
                    return self.emit(id, end("UNAVAILABLE".into(), message, serde_json::json!({}))).await;
                }
            }
        }
        self.emit(id, end(String::new(), String::new(), serde_json::json!({}))).await;
    }

    /// Checks the request, makes the pipes and registers the exec.
    fn prepare(&self, id: u64, start: pb::ExecStart) -> Result<Prepared, String> {
        if start.command.is_empty() || start.command[0].is_empty() {
            return Err("command: a program is required".into());
        }
        if !start.workdir.is_empty() && !start.workdir.starts_with('/') {
            return Err(format!("workdir {}: must be absolute", start.workdir));
        }
        let timeout = match start.timeout_seconds {
            0 => DEFAULT_TIMEOUT,
            s => Duration::from_secs(u64::from(s)).min(MAX_TIMEOUT),
        };
        let cap = match start.output_cap {
            0 => DEFAULT_OUTPUT_CAP,
            c => c.min(MAX_OUTPUT_CAP),
        };
        let flags = nix::fcntl::OFlag::O_CLOEXEC;
        let pipe = || nix::unistd::pipe2(flags).map_err(|e| format!("no pipes for the command: {e}"));
        let ((in_r, in_w), (out_r, out_w), (err_r, err_w)) = (pipe()?, pipe()?, pipe()?);
        // Without stdin the command reads end of file at once.
        let stdin = if start.stdin {
            let mut pipe = tokio::net::unix::pipe::Sender::from_owned_fd(in_w).map_err(|e| format!("stdin: {e}"))?;
            let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
            tokio::spawn(async move {
                while let Some(chunk) = rx.recv().await {
                    if pipe.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
            Some(tx)
        } else {
            drop(in_w);
            None
        };
        let (exit_tx, exit) = oneshot::channel();
        if let Ok(mut r) = self.running.lock() {
            r.insert(id, Running { exit: exit_tx, stdin });
        }
        Ok(Prepared { id, start, timeout, cap, pipes: [in_r, out_w, err_w, out_r, err_r], exit })
    }

    async fn run(self: Arc<Self>, p: Prepared) {
        let Prepared { id, start, timeout, cap, pipes: [in_r, out_w, err_w, out_r, err_r], exit: exit_rx } = p;
        let workdir = (!start.workdir.is_empty()).then(|| std::path::PathBuf::from(&start.workdir));
        let env: Vec<(String, String)> = start.env.into_iter().collect();
        let msg = ToInit::Exec { id, command: start.command, env, workdir };
        let sent = self.channel.send(&msg, &[in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()]).await;
        drop((in_r, out_w, err_w));
        if let Err(e) = sent {
            self.finished(id, 127, Some(format!("handing the command to the sandbox: {e}")));
        }

        let budget = Arc::new(std::sync::atomic::AtomicU64::new(cap));
        let capped = Arc::new(Notify::new());
        let out = tokio::spawn(self.clone().pump(id, out_r, false, budget.clone(), capped.clone()));
        let err = tokio::spawn(self.clone().pump(id, err_r, true, budget, capped.clone()));
        let (mut timed_out, mut output_capped) = (false, false);
        let mut exit_rx = exit_rx;
        let (code, error) = tokio::select! {
            r = &mut exit_rx => r.unwrap_or((255, Some("the sandbox ended".into()))),
            _ = tokio::time::sleep(timeout) => {
                timed_out = true;
                self.kill_and_wait(id, exit_rx).await
            }
            _ = capped.notified() => {
                output_capped = true;
                self.kill_and_wait(id, exit_rx).await
            }
        };
        // Output still in the pipes comes first; a process that left the group and kept
        // them open does not hold the answer for long.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            let _ = out.await;
            let _ = err.await;
        })
        .await;
        let exit = pb::ExecExit { code, timed_out, output_capped, error: error.unwrap_or_default() };
        self.emit(id, Event::Exit(exit)).await;
    }

    async fn kill_and_wait(&self, id: u64, exit: oneshot::Receiver<(i32, Option<String>)>) -> (i32, Option<String>) {
        let _ = self.channel.send(&ToInit::Kill { id }, &[]).await;
        match tokio::time::timeout(Duration::from_secs(5), exit).await {
            Ok(Ok(r)) => r,
            _ => (137, None),
        }
    }

    /// Streams one pipe as events until end of file, within the shared output budget.
    async fn pump(
        self: Arc<Self>,
        id: u64,
        fd: OwnedFd,
        stderr: bool,
        budget: Arc<std::sync::atomic::AtomicU64>,
        capped: Arc<Notify>,
    ) {
        use std::sync::atomic::Ordering;
        let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else { return };
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let left = budget.load(Ordering::Relaxed);
            let take = (n as u64).min(left) as usize;
            budget.fetch_sub(take as u64, Ordering::Relaxed);
            if take > 0 {
                let data = buf[..take].to_vec();
                self.emit(id, if stderr { Event::Stderr(data) } else { Event::Stdout(data) }).await;
            }
            if take < n {
                capped.notify_one();
                return;
            }
        }
    }
}

/// Hands the init's messages on: the main command's exit to `main`, exec exits to theirs.
pub async fn dispatch(channel: Arc<Channel>, execs: Arc<Execs>, main: oneshot::Sender<i32>) {
    let mut main = Some(main);
    loop {
        match channel.recv().await {
            Ok(ToSupervisor::Exited { code }) => {
                if let Some(m) = main.take() {
                    let _ = m.send(code);
                }
            }
            Ok(ToSupervisor::ExecExited { id, code, error }) => execs.finished(id, code, error),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return,
            Err(e) => tracing::warn!("a message from the init: {e}"),
        }
    }
}

/// Keeps the work channel open: opened at once, it takes no task before the sandbox runs
/// (`execs` arrives then; the gateway's tasks wait in the stream meanwhile), and is opened
/// again whenever it ends. `attached` fires on the first channel that takes tasks.
pub async fn attach(client: gateway::Client, execs: oneshot::Receiver<Arc<Execs>>, attached: oneshot::Sender<()>) {
    let mut attached = Some(attached);
    let mut pending = Some(execs);
    let mut execs: Option<Arc<Execs>> = None;
    let mut delay = Duration::from_millis(100);
    loop {
        let (tx, rx) = mpsc::channel(256);
        match client.clone().attach(rx).await {
            Ok(mut tasks) => {
                delay = Duration::from_millis(100);
                let execs = match (&execs, pending.take()) {
                    (Some(e), _) => e.clone(),
                    (None, Some(started)) => match started.await {
                        Ok(e) => execs.insert(e).clone(),
                        // The sandbox did not start: nothing to serve.
                        Err(_) => return,
                    },
                    (None, None) => return,
                };
                if let Ok(mut e) = execs.events.lock() {
                    *e = Some(tx);
                }
                if let Some(a) = attached.take() {
                    let _ = a.send(());
                }
                loop {
                    match tasks.message().await {
                        Ok(Some(t)) => {
                            if let Some(task) = t.task {
                                execs.task(t.id, task).await;
                            }
                        }
                        Ok(None) => break,
                        Err(s) => {
                            tracing::warn!("work channel: {}", s.message());
                            break;
                        }
                    }
                }
            }
            // The sandbox is no longer live (stopped while it started, or since): nothing to
            // serve, and before READY its start ends (crates/supervisor/src/main.rs).
            Err(s) if gateway::not_live(&s) => {
                return tracing::warn!("the gateway refused the work channel: {}", s.message());
            }
            Err(s) => gateway::retrying("attaching the work channel", &s),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}
