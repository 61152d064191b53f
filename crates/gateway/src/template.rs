//! What a root sandbox runs on (CPU, memory, processes), with defaults; children copy their
//! parent's (the database does, at insert).

use openshell_driver::Limits;
use openshell_proto::v1 as pb;
use openshell_store::Error;

pub const DEFAULT_MEMORY_BYTES: u64 = 2 << 30;
pub const DEFAULT_PIDS: u64 = 1024;
const MIN_MEMORY_BYTES: u64 = 16 << 20;
const MIN_PIDS: u64 = 8;
const MAX_CPU_MILLIS: u32 = 1024 * 1000;

/// A root's resources from its request; zero or unset means the default.
pub fn from_request(t: Option<&pb::Template>) -> Result<Limits, Error> {
    let t = t.cloned().unwrap_or_default();
    let memory = if t.memory_bytes == 0 { DEFAULT_MEMORY_BYTES } else { t.memory_bytes };
    let pids = if t.pids == 0 { DEFAULT_PIDS } else { t.pids };
    if memory < MIN_MEMORY_BYTES {
        return Err(Error::invalid("template.memory_bytes", format!("at least {MIN_MEMORY_BYTES} bytes (16 MiB)")));
    }
    if pids < MIN_PIDS {
        return Err(Error::invalid("template.pids", format!("at least {MIN_PIDS}")));
    }
    if t.cpu_millis > MAX_CPU_MILLIS {
        return Err(Error::invalid("template.cpu_millis", format!("at most {MAX_CPU_MILLIS}")));
    }
    Ok(Limits { cpu_millis: (t.cpu_millis > 0).then_some(t.cpu_millis), memory_bytes: Some(memory), pids: Some(pids) })
}

/// The stored template (`{}` before templates had resources: the defaults).
pub fn stored(value: &serde_json::Value) -> Limits {
    let limits: Limits = serde_json::from_value(value.clone()).unwrap_or_default();
    Limits {
        cpu_millis: limits.cpu_millis,
        memory_bytes: limits.memory_bytes.or(Some(DEFAULT_MEMORY_BYTES)),
        pids: limits.pids.or(Some(DEFAULT_PIDS)),
    }
}

pub fn to_proto(value: &serde_json::Value) -> pb::Template {
    let l = stored(value);
    pb::Template {
        cpu_millis: l.cpu_millis.unwrap_or(0),
        memory_bytes: l.memory_bytes.unwrap_or(0),
        pids: l.pids.unwrap_or(0),
    }
}
