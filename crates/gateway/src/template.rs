//! What a sandbox runs on: its image (container driver), its CPU, memory and processes, and
//! the size of its own disk, with defaults for a root. A child gets its parent's template,
//! narrowed by what it asked for; the database fits and refuses (`os_fit_template`), so every
//! path meets one rule. No disk is larger than the gateway's `--max-disk`.

use openshell_driver::{Driver, Limits};
use openshell_proto::v1 as pb;
use openshell_store::{Code, Error};
use serde_json::json;

pub const DEFAULT_MEMORY_BYTES: u64 = 2 << 30;
pub const DEFAULT_PIDS: u64 = 1024;
/// A root's limits when its template sets none.
pub const DEFAULT_LIMITS: Limits =
    Limits { cpu_millis: None, memory_bytes: Some(DEFAULT_MEMORY_BYTES), pids: Some(DEFAULT_PIDS) };
const MIN_MEMORY_BYTES: u64 = 16 << 20;
const MIN_PIDS: u64 = 8;
const MAX_CPU_MILLIS: u32 = 1024 * 1000;
const MAX_IMAGE_REF: usize = 255;
pub const DEFAULT_DISK_BYTES: u64 = 2 << 30;

/// A root's resources: its cgroup's limits and the size of its disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    pub limits: Limits,
    pub disk_bytes: u64,
}

/// The gateway's bounds on a sandbox's disk (`--default-disk`, `--max-disk`).
#[derive(Debug, Clone, Copy)]
pub struct DiskBounds {
    pub default_bytes: u64,
    pub max_bytes: u64,
}

fn check_disk(bytes: u64, bounds: DiskBounds) -> Result<(), Error> {
    if bytes != 0 && bytes < openshell_disk::MIN_BYTES {
        return Err(Error::invalid("template.disk_bytes", "at least 16777216 bytes (16 MiB)"));
    }
    if bytes > bounds.max_bytes {
        return Err(Error::new(
            Code::NotAllowed,
            format!(
                "template.disk_bytes: {bytes} is more than this gateway's maximum {} ({}, --max-disk)",
                bounds.max_bytes,
                openshell_disk::human(bounds.max_bytes)
            ),
        )
        .with_details(json!({"field": "template.disk_bytes", "max": bounds.max_bytes, "requested": bytes})));
    }
    Ok(())
}

fn check(t: &pb::Template, bounds: DiskBounds) -> Result<(), Error> {
    check_disk(t.disk_bytes, bounds)?;
    if t.memory_bytes != 0 && t.memory_bytes < MIN_MEMORY_BYTES {
        return Err(Error::invalid("template.memory_bytes", format!("at least {MIN_MEMORY_BYTES} bytes (16 MiB)")));
    }
    if t.pids != 0 && t.pids < MIN_PIDS {
        return Err(Error::invalid("template.pids", format!("at least {MIN_PIDS}")));
    }
    if t.cpu_millis > MAX_CPU_MILLIS {
        return Err(Error::invalid("template.cpu_millis", format!("at most {MAX_CPU_MILLIS}")));
    }
    if t.image.len() > MAX_IMAGE_REF || t.image.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::invalid(
            "template.image",
            format!("an image reference of at most {MAX_IMAGE_REF} printable characters"),
        ));
    }
    Ok(())
}

/// A root's resources from its request; zero or unset means the default.
pub fn from_request(t: Option<&pb::Template>, bounds: DiskBounds) -> Result<Resources, Error> {
    let t = t.cloned().unwrap_or_default();
    check(&t, bounds)?;
    let memory = if t.memory_bytes == 0 { DEFAULT_MEMORY_BYTES } else { t.memory_bytes };
    let pids = if t.pids == 0 { DEFAULT_PIDS } else { t.pids };
    let limits =
        Limits { cpu_millis: (t.cpu_millis > 0).then_some(t.cpu_millis), memory_bytes: Some(memory), pids: Some(pids) };
    // A default above the maximum is the operator's to fix; the maximum wins.
    let disk_bytes = if t.disk_bytes == 0 { bounds.default_bytes.min(bounds.max_bytes) } else { t.disk_bytes };
    Ok(Resources { limits, disk_bytes })
}

/// The image a request names, if any (checked, not yet resolved).
pub fn requested_image(t: Option<&pb::Template>) -> Option<String> {
    t.map(|t| t.image.clone()).filter(|i| !i.is_empty())
}

/// A child's request: only the fields it set (the database fills the rest from the parent).
pub fn child_request(t: Option<&pb::Template>, bounds: DiskBounds) -> Result<Option<serde_json::Value>, Error> {
    let Some(t) = t else { return Ok(None) };
    check(t, bounds)?;
    let mut m = serde_json::Map::new();
    if t.cpu_millis != 0 {
        m.insert("cpu_millis".into(), t.cpu_millis.into());
    }
    if t.memory_bytes != 0 {
        m.insert("memory_bytes".into(), t.memory_bytes.into());
    }
    if t.pids != 0 {
        m.insert("pids".into(), t.pids.into());
    }
    if t.disk_bytes != 0 {
        m.insert("disk_bytes".into(), t.disk_bytes.into());
    }
    if !t.image.is_empty() {
        m.insert("image".into(), t.image.clone().into());
    }
    Ok((!m.is_empty()).then_some(serde_json::Value::Object(m)))
}

/// The digest `reference` names on the driver's host, once: what the template stores.
pub async fn resolve(driver: &dyn Driver, reference: &str) -> Result<String, Error> {
    if !driver.needs_image() {
        return Err(Error::invalid(
            "template.image",
            format!("the {} driver runs no image; start the gateway with --driver container", driver.name()),
        ));
    }
    match driver.resolve_image(reference).await {
        Ok(Some(digest)) => Ok(digest),
        Ok(None) => Err(Error::invalid(
            "template.image",
            format!("no image {reference:?} on the container host (images are not pulled: build or load it first)"),
        )),
        Err(e) => Err(Error::unavailable(format!("the container engine could not resolve {reference:?}: {e}"))),
    }
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

/// The stored image digest, if the sandbox runs from one.
pub fn image(value: &serde_json::Value) -> Option<String> {
    value.get("image").and_then(|i| i.as_str()).map(str::to_string)
}

/// The stored disk size, if the template records one (a sandbox from before disks does not).
pub fn disk_bytes(value: &serde_json::Value) -> Option<u64> {
    value.get("disk_bytes").and_then(|d| d.as_u64())
}

/// The stored template with its disk and image.
pub fn with_image(resources: Resources, image: Option<String>) -> Result<serde_json::Value, Error> {
    let mut value = serde_json::to_value(resources.limits).map_err(Error::unavailable)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("disk_bytes".into(), resources.disk_bytes.into());
        if let Some(image) = image {
            map.insert("image".into(), image.into());
        }
    }
    Ok(value)
}

pub fn to_proto(value: &serde_json::Value) -> pb::Template {
    let l = stored(value);
    pb::Template {
        cpu_millis: l.cpu_millis.unwrap_or(0),
        memory_bytes: l.memory_bytes.unwrap_or(0),
        pids: l.pids.unwrap_or(0),
        image: image(value).unwrap_or_default(),
        disk_bytes: disk_bytes(value).unwrap_or(0),
    }
}
