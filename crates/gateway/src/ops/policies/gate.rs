//! Which policy a sandbox gets, and the proof that it fits: child <= parent <= global max.

use std::sync::Arc;
use std::time::Duration;

use openshell_policy::Policy;
use openshell_prover::{BoundaryId, Budget, CacheKey, Prover, StoredPolicy, Verdict};
use openshell_store::{Code, Error};
use serde_json::json;

/// A policy ready for the store: canonical JSON and its hash.
pub struct Decided {
    pub document: serde_json::Value,
    pub hash: [u8; 32],
}

/// A policy as its author wrote it, and what it says that was accepted but deprecated or
/// ignored (`policy.network_policies.x.endpoints[0].tls: ...`), for the caller to show.
pub struct Written {
    pub policy: Policy,
    pub warnings: Vec<String>,
}

fn field_path(field: &str, path: &str) -> String {
    if path.is_empty() || path == "." { field.to_string() } else { format!("{field}.{path}") }
}

pub fn parse(field: &str, yaml: &str) -> Result<Option<Written>, Error> {
    if yaml.trim().is_empty() {
        return Ok(None);
    }
    match Policy::from_yaml_with_warnings(yaml) {
        Ok((policy, warnings)) => Ok(Some(Written {
            policy,
            warnings: warnings.iter().map(|w| format!("{}: {}", field_path(field, &w.path), w.message)).collect(),
        })),
        Err(e) => Err(Error::invalid(&field_path(field, &e.path), e.reason)),
    }
}

/// The policy a new sandbox (or the global maximum) is stored with: as written, plus the
/// baseline paths upstream grants every policy with network rules
/// (`openshell_policy::baseline`). Stored so, they are what every proof, `policy get` and
/// the sandbox's `policy.local` see on both sides.
pub fn effective(p: &Policy) -> Policy {
    p.with_baseline()
}

/// Warnings for the granted paths a sandbox cannot see: beneath its private /tmp and
/// /dev/shm, where the host's files are not (the supervisor skips them at start).
pub fn private_path_warnings(field: &str, p: &Policy) -> Vec<String> {
    p.private_paths()
        .into_iter()
        .map(|(list, path)| {
            let mount = if path.starts_with("/dev/shm/") { "/dev/shm" } else { "/tmp" };
            format!(
                "{}: {path} lies in the sandbox's own {mount}, which starts empty: the host's {path} is not \
                 reachable, and the path is skipped at start",
                field_path(field, &list)
            )
        })
        .collect()
}

/// A policy as stored (canonical JSON); a row that no longer parses refuses (fail closed).
pub fn stored(what: &str, document: &serde_json::Value) -> Result<Policy, Error> {
    Policy::from_json(document).map_err(|e| {
        Error::new(Code::PolicyUnprovable, format!("the stored policy of {what} does not parse ({e})"))
            .with_details(json!({"verdict": "unsupported", "reason": "stored policy unreadable"}))
    })
}

/// The policy of a root created without one: upstream OpenShell's default sandbox policy.
pub const DEFAULT_POLICY_YAML: &str = "version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /app, /etc, /var/log]
  read_write: [/tmp, /dev/null]
landlock: { compatibility: best_effort }
";

pub fn default_policy() -> Policy {
    Policy::from_yaml(DEFAULT_POLICY_YAML).expect("the default policy is valid")
}

pub fn decided(p: &Policy) -> Decided {
    Decided { document: p.canonical_json(), hash: p.hash() }
}

/// [`decided`] when the hash is already known (`hash` must be `p.hash()`).
pub fn decided_with(p: &Policy, hash: [u8; 32]) -> Decided {
    Decided { document: p.canonical_json(), hash }
}

/// The prover behind this gateway's cap on concurrent proofs: a proof waits at most `wait`
/// for a slot, runs on a blocking thread under its timeout, and stops (inside the
/// checker's loops) when its caller goes away or the timeout passes.
#[derive(Clone)]
pub struct ProofGate {
    pub prover: Arc<Prover>,
    pub slots: Arc<tokio::sync::Semaphore>,
    pub timeout: Duration,
    pub wait: Duration,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
}

/// Cancels the proof when the future waiting for it is dropped (the caller went away).
struct CancelOnDrop(Budget);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The prover's verdict; no answer in time is Inconclusive, no free slot in time UNAVAILABLE.
pub async fn verdict(gate: &ProofGate, boundary: Policy, candidate: Policy) -> Result<Verdict, Error> {
    // Hashing a large pair costs as much as proving it and cannot be interrupted, so it
    // happens before a slot is taken: a slot is held only by work a cancel stops, and a
    // cached verdict needs no slot.
    let hashed = tokio::task::spawn_blocking(move || (CacheKey::hashes(&boundary, &candidate), boundary, candidate));
    let (key, boundary, candidate) = match hashed.await {
        Ok(h) => h,
        Err(e) => return Ok(Verdict::Inconclusive(format!("the prover failed: {e}"))),
    };
    if let Some(v) = gate.prover.cached_verdict(&key) {
        return Ok(v);
    }
    verdict_keyed(gate, key, Arc::new(boundary), candidate).await
}

/// [`verdict`] cached under `key`, which must name exactly these two policies.
async fn verdict_keyed(
    gate: &ProofGate,
    key: CacheKey,
    boundary: Arc<Policy>,
    candidate: Policy,
) -> Result<Verdict, Error> {
    let permit = match tokio::time::timeout(gate.wait, gate.slots.clone().acquire_owned()).await {
        Ok(Ok(p)) => p,
        _ => {
            return Err(Error::unavailable(format!(
                "the prover is busy: every proof slot stayed taken for {:?}; try again shortly",
                gate.wait
            ))
            .with_details(json!({"reason": "prover_busy", "wait_ms": gate.wait.as_millis() as u64})));
        }
    };
    let started = std::time::Instant::now();
    let budget = Budget::new(started + gate.timeout);
    let _cancel = CancelOnDrop(budget.clone());
    let p = gate.prover.clone();
    // The permit goes with the thread: a slot frees when the proof has really stopped.
    let task = tokio::task::spawn_blocking(move || {
        let v = p.check_keyed(key, &boundary, &candidate, &budget);
        drop(permit);
        v
    });
    // The proof stops at its own deadline; this one also covers a stuck thread pool.
    let verdict = match tokio::time::timeout(gate.timeout + Duration::from_secs(1), task).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => Verdict::Inconclusive(format!("the prover failed: {e}")),
        Err(_) => Verdict::Inconclusive(format!("no answer within {:?}", gate.timeout)),
    };
    gate.metrics.proof(started.elapsed());
    Ok(verdict)
}

/// Proves `candidate` within `boundary` with z3 on a blocking thread, under `timeout`;
/// anything but `Within` refuses with its counterexample or reason. `subject` names what
/// is being proved, for the message ("the child's policy", "child w1's policy").
pub async fn prove(
    gate: &ProofGate,
    boundary: Policy,
    candidate: Policy,
    subject: &str,
    against: &str,
) -> Result<(), Error> {
    judged(verdict(gate, boundary, candidate).await?, subject, against)
}

/// A proof of `candidate` against a boundary built from stored versions (see
/// `BoundaryId::Stored`): a verdict already cached under `key` is a lookup, without a proof
/// slot, a parse or the boundary; otherwise the boundary is the prover's kept one for
/// `key.boundary`, which `boundary` builds (parsing the stored documents) only when no proof
/// against those versions kept it.
pub async fn prove_stored(
    gate: &ProofGate,
    key: CacheKey,
    boundary: impl FnOnce() -> Result<Policy, Error>,
    candidate: &Policy,
    subject: &str,
    against: &str,
) -> Result<(), Error> {
    if let Some(v) = gate.prover.cached_verdict(&key) {
        return judged(v, subject, against);
    }
    let boundary = gate.prover.boundary_of(key.boundary, boundary)?;
    judged(verdict_keyed(gate, key, boundary, candidate.clone()).await?, subject, against)
}

/// The cache key of a proof against `BoundaryId::Stored` versions: the parent's stored
/// policy (`None` for a root, proved against the global maximum alone) and the global
/// maximum's version.
pub fn stored_key(parent: Option<StoredPolicy>, global_version: i32, candidate: [u8; 32]) -> CacheKey {
    CacheKey { boundary: BoundaryId::Stored { parent, global_version: i64::from(global_version) }, candidate }
}

/// A parent's stored policy version for [`stored_key`]; `None` when its stored hash is no
/// SHA-256 (the row constraints rule that out), and then the proof is keyed by hashes.
pub fn stored_policy(sandbox: uuid::Uuid, version: i32, hash: &[u8]) -> Option<StoredPolicy> {
    Some(StoredPolicy { sandbox: sandbox.into_bytes(), version: i64::from(version), hash: hash.try_into().ok()? })
}

/// A verdict as the caller's answer: anything but `Within` refuses with its counterexample
/// or reason.
fn judged(verdict: Verdict, subject: &str, against: &str) -> Result<(), Error> {
    match verdict {
        Verdict::Within => Ok(()),
        Verdict::Exceeds(cx) => {
            let mut details = serde_json::to_value(&cx).unwrap_or_else(|_| json!({}));
            details["verdict"] = json!("exceeds");
            details["counterexample"] = json!(cx.access);
            Err(Error::new(
                Code::PolicyExceedsParent,
                format!("{subject} allows `{}`, which {against} does not; {}", cx.access, cx.hint),
            )
            .with_details(details))
        }
        Verdict::Unsupported(reason) => {
            Err(Error::new(Code::PolicyUnprovable, format!("{subject} cannot be proved within {against}: {reason}"))
                .with_details(json!({"verdict": "unsupported", "reason": reason})))
        }
        Verdict::Inconclusive(reason) => {
            Err(Error::new(Code::PolicyUnprovable, format!("{subject} could not be proved within {against}: {reason}"))
                .with_details(json!({"verdict": "inconclusive", "reason": reason})))
        }
    }
}
