//! A file of an agent sandbox read whole into memory (for surfaces without streams, such as
//! an MCP tool call), under the same rules and refusals as the GetFile stream.

use futures::StreamExt;
use openshell_proto::v1 as pb;
use openshell_store::{Error, Principal};

use crate::Gateway;

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
