//! `openshell sandbox download`: copies a file out of a running agent sandbox (GetFile) to a
//! file or standard output, with progress on stderr for large files.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use openshell_proto::v1 as pb;
use pb::file_chunk::Chunk;

use crate::client::{Client, Failure};

/// Files at least this large show progress.
const PROGRESS_FROM: u64 = 4 << 20;

/// Where the bytes go: standard output, or a file written beside its destination and
/// renamed into place once complete (an interrupted download leaves no partial file).
struct Sink {
    /// The temporary file, its final name and the open file; `None` for standard output.
    file: Option<(PathBuf, PathBuf, std::fs::File)>,
}

fn destination(path: &str, dest: Option<PathBuf>) -> Result<Option<PathBuf>, Failure> {
    let name = || {
        Path::new(path)
            .file_name()
            .map(PathBuf::from)
            .ok_or_else(|| Failure::local(2, format!("path {path}: names no file; give DEST")))
    };
    match dest {
        Some(d) if d.as_os_str() == "-" => Ok(None),
        Some(d) if d.is_dir() => Ok(Some(d.join(name()?))),
        Some(d) => Ok(Some(d)),
        None => Ok(Some(name()?)),
    }
}

impl Sink {
    fn open(dest: Option<PathBuf>) -> Result<Sink, Failure> {
        let Some(dest) = dest else { return Ok(Sink { file: None }) };
        let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let base = dest.file_name().and_then(|n| n.to_str()).unwrap_or("download");
        let tmp = dir.join(format!(".{base}.openshell-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Failure::local(1, format!("{}: {e}", tmp.display())))?;
        Ok(Sink { file: Some((tmp, dest, file)) })
    }

    fn write(&mut self, data: &[u8]) -> Result<(), Failure> {
        let r = match &mut self.file {
            None => std::io::stdout().lock().write_all(data),
            Some((_, _, file)) => file.write_all(data),
        };
        r.map_err(|e| Failure::local(1, format!("writing the download: {e}")))
    }

    fn finish(&mut self) -> Result<(), Failure> {
        match self.file.take() {
            None => std::io::stdout().lock().flush().map_err(|e| Failure::local(1, format!("stdout: {e}"))),
            Some((tmp, dest, file)) => {
                drop(file);
                let r = std::fs::rename(&tmp, &dest).map_err(|e| Failure::local(1, format!("{}: {e}", dest.display())));
                if r.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                r
            }
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some((tmp, _, _)) = &self.file {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

pub async fn run(
    c: &Client,
    sandbox: String,
    path: String,
    dest: Option<PathBuf>,
    max_bytes: u64,
) -> Result<(), Failure> {
    let dest = destination(&path, dest)?;
    let req = pb::GetFileRequest { sandbox, path: path.clone(), max_bytes };
    let mut stream = c.sandboxes().get_file(c.request(req)).await.map_err(Failure::from)?.into_inner();
    let mut sink = Sink::open(dest.clone())?;
    let (mut size, mut got, mut shown) = (0u64, 0u64, 0u64);
    let terminal = std::io::stderr().is_terminal();
    while let Some(chunk) = stream.message().await.map_err(Failure::from)? {
        match chunk.chunk {
            Some(Chunk::Info(i)) => size = i.size,
            Some(Chunk::Data(d)) => {
                got += d.len() as u64;
                sink.write(&d)?;
                // A line per quarter, or a live counter on a terminal.
                let step = if terminal { size / 100 } else { size / 4 };
                if size >= PROGRESS_FROM && got >= shown + step.max(1) {
                    shown = got;
                    let (mib, total) = (got as f64 / 1048576.0, size as f64 / 1048576.0);
                    if terminal {
                        eprint!("\r{path}: {mib:.1} / {total:.1} MiB");
                    } else {
                        eprintln!("{path}: {mib:.1} / {total:.1} MiB");
                    }
                }
            }
            None => {}
        }
    }
    if terminal && size >= PROGRESS_FROM {
        eprintln!();
    }
    sink.finish()?;
    if let Some(d) = dest {
        eprintln!("{path}: {got} bytes to {}", d.display());
    }
    Ok(())
}
