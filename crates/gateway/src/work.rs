//! Each attached supervisor's work channel: the supervisor opens `Attach`, the gateway sends
//! tasks (execs, file reads) down it and routes the events that come back to the caller that
//! started the task. It only relays; the operations that use it are ops/exec.rs and
//! ops/files.rs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use openshell_proto::v1 as pb;
use openshell_store::Error;
use pb::supervisor_event::Event;
use pb::supervisor_task::Task;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use uuid::Uuid;

use crate::Gateway;

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

const ATTACH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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

impl Gateway {
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
