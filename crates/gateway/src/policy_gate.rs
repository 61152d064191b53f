//! Which policy a sandbox gets, and the proof that it fits: child <= parent <= global max.

use std::sync::Arc;
use std::time::Duration;

use openshell_policy::Policy;
use openshell_prover::{Budget, Prover, Verdict};
use openshell_store::{Code, Error};
use serde_json::json;

/// A policy ready for the store: canonical JSON and its hash.
pub struct Decided {
    pub document: serde_json::Value,
    pub hash: [u8; 32],
}

pub fn parse(field: &str, yaml: &str) -> Result<Option<Policy>, Error> {
    if yaml.trim().is_empty() {
        return Ok(None);
    }
    Policy::from_yaml(yaml).map(Some).map_err(|e| {
        let path = if e.path.is_empty() || e.path == "." { field.to_string() } else { format!("{field}.{}", e.path) };
        Error::invalid(&path, e.reason)
    })
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

/// The prover behind this gateway's cap on concurrent proofs: a proof waits at most `wait`
/// for a slot, runs on a blocking thread under its timeout, and stops (inside the
/// checker's loops) when its caller goes away or the timeout passes.
#[derive(Clone)]
pub struct ProofGate {
    pub prover: Arc<Prover>,
    pub slots: Arc<tokio::sync::Semaphore>,
    pub timeout: Duration,
    pub wait: Duration,
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
    let budget = Budget::new(std::time::Instant::now() + gate.timeout);
    let _cancel = CancelOnDrop(budget.clone());
    let p = gate.prover.clone();
    // The permit goes with the thread: a slot frees when the proof has really stopped.
    let task = tokio::task::spawn_blocking(move || {
        let v = p.check_within(&boundary, &candidate, &budget);
        drop(permit);
        v
    });
    // The proof stops at its own deadline; this one also covers a stuck thread pool.
    Ok(match tokio::time::timeout(gate.timeout + Duration::from_secs(1), task).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => Verdict::Inconclusive(format!("the prover failed: {e}")),
        Err(_) => Verdict::Inconclusive(format!("no answer within {:?}", gate.timeout)),
    })
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
    match verdict(gate, boundary, candidate).await? {
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
