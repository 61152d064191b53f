//! Files of running agent sandboxes (GetFile): who may read which sandbox is decided in SQL
//! (`file_target`); the read itself is done by the sandbox's supervisor, as the sandbox's
//! user, and relayed here over its work channel like an exec. A file can also be read whole
//! into memory (for surfaces without streams, such as an MCP tool call), under the same
//! rules and refusals as the stream.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use openshell_proto::v1 as pb;
use openshell_store::{Code, Error, Principal};
use pb::supervisor_event::Event;
use pb::supervisor_task::Task;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::Gateway;

/// A read's size cap when the caller names none.
pub const DEFAULT_FILE_BYTES: u64 = 16 << 20;
/// The largest cap a caller may ask for, unless the gateway is started with another.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;
const MAX_PATH_BYTES: usize = 4096;
/// How long the supervisor may take to open the file and answer.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

pub type FileStream = ReceiverStream<Result<pb::FileChunk, Status>>;

/// The shape of a path, before any sandbox sees it.
fn check_path(path: &str) -> Result<(), Error> {
    if path.is_empty() {
        return Err(Error::invalid("path", "a file path is required"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(Error::invalid("path", format!("longer than {MAX_PATH_BYTES} bytes")));
    }
    if path.contains('\0') {
        return Err(Error::invalid("path", "cannot contain NUL bytes"));
    }
    Ok(())
}

/// A refusal the supervisor reported, as the gateway's error (only the codes a read can have).
fn refusal(end: pb::FileEnd) -> Error {
    let code = match Code::parse(&end.code) {
        Some(c @ (Code::InvalidArgument | Code::NotFound | Code::NotAllowed | Code::LimitReached)) => c,
        _ => Code::Unavailable,
    };
    let details = serde_json::from_str::<serde_json::Value>(&end.details_json)
        .ok()
        .filter(|d| d.is_object())
        .unwrap_or_else(|| serde_json::json!({}));
    let message: String = end.message.chars().take(2000).collect();
    Error::new(code, message).with_details(details)
}

impl Gateway {
    /// Reads a file of an agent sandbox the caller may read: waits until the supervisor
    /// opened it (or refused), then streams its info and data.
    pub async fn get_file(&self, caller: &Principal, req: pb::GetFileRequest) -> Result<FileStream, Error> {
        let opened = async {
            crate::input::reference("sandbox", &req.sandbox)?;
            check_path(&req.path)?;
            let max_bytes = match req.max_bytes {
                0 => DEFAULT_FILE_BYTES.min(self.settings.max_file_bytes),
                n if n > self.settings.max_file_bytes => {
                    return Err(Error::invalid(
                        "max_bytes",
                        format!("at most {} on this gateway, got {n}", self.settings.max_file_bytes),
                    ));
                }
                n => n,
            };
            let target = self.store.file_target(caller, &req.sandbox).await?;
            self.open_file(target, &req.path, max_bytes).await
        };
        let (info, events, forget) =
            self.receipt_on_refusal(caller, "sandbox.get_file", &req.sandbox, None, opened.await).await?;
        let (out_tx, out_rx) = mpsc::channel(16);
        tokio::spawn(async move { relay(info, events, out_tx, forget).await });
        Ok(ReceiverStream::new(out_rx))
    }

    /// Hands the read to the supervisor and waits for its first answer.
    async fn open_file(
        &self,
        target: uuid::Uuid,
        path: &str,
        max_bytes: u64,
    ) -> Result<(pb::FileInfo, mpsc::Receiver<Event>, Forget), Error> {
        let id = self.work.next.fetch_add(1, Ordering::Relaxed);
        let (tx, mut events) = mpsc::channel(64);
        if let Ok(mut e) = self.work.execs.lock() {
            e.insert(id, (target, tx));
        }
        let forget = Forget { gw: self.clone(), target, id, done: false };
        let task = Task::ReadFile(pb::ReadFile { path: path.to_string(), max_bytes });
        self.work.send(target, id, task).await?;
        match tokio::time::timeout(OPEN_TIMEOUT, events.recv()).await {
            Ok(Some(Event::FileInfo(info))) => Ok((info, events, forget)),
            Ok(Some(Event::FileEnd(end))) => Err(refusal(end)),
            Ok(_) => Err(Error::unavailable("the sandbox's supervisor ended the read without an answer")),
            Err(_) => Err(Error::unavailable("the sandbox's supervisor did not open the file in time")),
        }
    }
}

/// Drops a read's route, and tells the supervisor to stop reading unless it finished.
struct Forget {
    gw: Gateway,
    target: uuid::Uuid,
    id: u64,
    done: bool,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if let Ok(mut e) = self.gw.work.execs.lock() {
            e.remove(&self.id);
        }
        if !self.done {
            let (gw, target, id) = (self.gw.clone(), self.target, self.id);
            tokio::spawn(async move {
                let _ = gw.work.send(target, id, Task::Cancel(true)).await;
            });
        }
    }
}

async fn relay(
    info: pb::FileInfo,
    mut events: mpsc::Receiver<Event>,
    out: mpsc::Sender<Result<pb::FileChunk, Status>>,
    mut forget: Forget,
) {
    use pb::file_chunk::Chunk;
    let size = info.size;
    if out.send(Ok(pb::FileChunk { chunk: Some(Chunk::Info(info)) })).await.is_err() {
        return;
    }
    let mut sent = 0u64;
    loop {
        let chunk = match events.recv().await {
            Some(Event::FileData(d)) => {
                sent += d.len() as u64;
                // Never more than the size announced: the file as it was when opened.
                if sent > size {
                    let _ = out.send(Err(Status::unavailable("the supervisor sent more than the file's size"))).await;
                    return;
                }
                Ok(pb::FileChunk { chunk: Some(Chunk::Data(d)) })
            }
            Some(Event::FileEnd(end)) if end.code.is_empty() => {
                forget.done = true;
                return;
            }
            Some(Event::FileEnd(end)) => {
                forget.done = true;
                Err(crate::to_status(refusal(end)))
            }
            Some(_) => continue,
            None => Err(Status::unavailable("the sandbox's supervisor went away during the read")),
        };
        let last = chunk.is_err();
        // The caller went away: `forget` tells the supervisor to stop.
        if out.send(chunk).await.is_err() || last {
            return;
        }
    }
}

/// A file read whole.
pub struct FileContent {
    /// The path as opened inside the sandbox.
    pub path: String,
    /// Its size when opened.
    pub size: u64,
    pub data: Vec<u8>,
}

impl Gateway {
    /// Reads `path` of an agent sandbox the caller may read, refusing a file larger than
    /// `max_bytes` (LIMIT_REACHED with its size, as GetFile does).
    pub async fn get_file_collected(
        &self,
        caller: &Principal,
        sandbox: String,
        path: String,
        max_bytes: u64,
    ) -> Result<FileContent, Error> {
        let req = pb::GetFileRequest { sandbox, path, max_bytes };
        let mut chunks = self.get_file(caller, req).await?;
        let mut content = FileContent { path: String::new(), size: 0, data: Vec::new() };
        while let Some(chunk) = chunks.next().await {
            match chunk.map_err(crate::status::from_status)?.chunk {
                Some(pb::file_chunk::Chunk::Info(info)) => {
                    content.data.reserve(info.size.min(max_bytes) as usize);
                    content.path = info.path;
                    content.size = info.size;
                }
                Some(pb::file_chunk::Chunk::Data(d)) => content.data.extend_from_slice(&d),
                None => {}
            }
        }
        Ok(content)
    }
}
