//! Which policy a sandbox gets, and the proof that it fits: child <= parent <= global max.

use std::sync::Arc;
use std::time::Duration;

use openshell_policy::Policy;
use openshell_prover::{Prover, Verdict};
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

/// The prover's verdict, computed on a blocking thread; no answer in time is Inconclusive.
pub async fn verdict(prover: &Arc<Prover>, timeout: Duration, boundary: Policy, candidate: Policy) -> Verdict {
    let p = prover.clone();
    let task = tokio::task::spawn_blocking(move || p.check(&boundary, &candidate));
    // The prover has its own deadline; this one also covers a stuck thread pool.
    match tokio::time::timeout(timeout + Duration::from_secs(1), task).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => Verdict::Inconclusive(format!("the prover failed: {e}")),
        Err(_) => Verdict::Inconclusive(format!("no answer within {timeout:?}")),
    }
}

/// Proves `candidate` within `boundary` with z3 on a blocking thread, under `timeout`;
/// anything but `Within` refuses with its counterexample or reason. `subject` names what
/// is being proved, for the message ("the child's policy", "child w1's policy").
pub async fn prove(
    prover: &Arc<Prover>,
    timeout: Duration,
    boundary: Policy,
    candidate: Policy,
    subject: &str,
    against: &str,
) -> Result<(), Error> {
    match verdict(prover, timeout, boundary, candidate).await {
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
