//! What a sandbox's supervisor reports and asks for about its own sandbox: connection, exit,
//! isolation applied, its policy, denials and proposals. Only a sandbox calls these, and
//! always about itself (the id comes from its credential).

use openshell_proto::v1 as pb;
use openshell_store::{Error, Principal, Proposal};
use uuid::Uuid;

use crate::Gateway;
use crate::auth::require_sandbox;
use crate::changes::Kind;

/// Bounds on what one report may store (a supervisor is trusted code, but its sandbox is not).
const MAX_TEXT: usize = 1000;
const MAX_SKIPPED: usize = 256;
const MAX_DENIALS: usize = 500;
const MAX_PROGRAM: usize = 4096;

fn clip(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

fn optional(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

impl Gateway {
    pub async fn report_exit(&self, caller: &Principal, exit_code: i32, error: &str) -> Result<(), Error> {
        let id = require_sandbox(caller)?;
        self.supervisor_exited(id, exit_code, error).await
    }

    /// The main command runs in its isolation, the proxy serves and the work channel is
    /// attached: the sandbox of the supervisor holding the credential that hashes to
    /// `credential` is READY (usable), with what isolation was applied (clipped to bounded
    /// sizes). The credential is checked in the same database call. Creates waiting for READY
    /// on this gateway look at once.
    pub async fn report_isolation(&self, credential: &[u8; 32], r: &pb::ReportIsolationRequest) -> Result<(), Error> {
        let skipped: Vec<String> = r.skipped.iter().take(MAX_SKIPPED).map(|s| clip(s)).collect();
        let isolation = serde_json::json!({
            "landlock": clip(&r.landlock), "detail": clip(&r.detail), "skipped": skipped,
        });
        let _writing = self.phases.writing();
        let change = self.store.supervisor_ready(credential, &isolation).await?;
        self.metrics.ready(change.id);
        self.phases.changed(Some(change));
        Ok(())
    }

    /// The sandbox's own policy version and document (None when `known` is current).
    pub async fn own_policy(&self, caller: &Principal, known: i32) -> Result<(i32, Option<serde_json::Value>), Error> {
        let id = require_sandbox(caller)?;
        self.store.current_policy(id, known).await
    }

    /// The sandbox's own policy, pushed: at once when its version is not `known`, then after
    /// each write the database notifies (changes.rs); between writes it does no work. It ends
    /// with an error (the supervisor opens it again with the version it knows) or when the
    /// gateway shuts down.
    pub fn watch_own_policy(
        &self,
        caller: &Principal,
        known: i32,
    ) -> Result<impl futures::Stream<Item = Result<pb::CurrentPolicyResponse, Error>> + Send + 'static, Error> {
        let id = require_sandbox(caller)?;
        let subscription = self.changes.sandbox(id);
        let state = Some((self.clone(), subscription, known));
        Ok(futures::stream::unfold(state, move |state| async move {
            let (gw, mut sub, mut known) = state?;
            loop {
                // Marked before the read: a write committed after it wakes the wait below.
                sub.mark();
                match gw.store.current_policy(id, known).await {
                    Ok((version, Some(document))) if version != known => {
                        known = version;
                        let r = pb::CurrentPolicyResponse { version, policy_json: document.to_string() };
                        return Some((Ok(r), Some((gw, sub, known))));
                    }
                    Ok(_) => {}
                    Err(e) => return Some((Err(e), None)),
                }
                sub.changed(Kind::Policy).await.ok()?;
            }
        }))
    }

    /// Refusals the sandbox's proxy made (at most 500 per report).
    pub async fn report_denials(&self, caller: &Principal, denials: Vec<pb::Denial>) -> Result<(), Error> {
        let id = require_sandbox(caller)?;
        if denials.len() > MAX_DENIALS {
            return Err(Error::invalid("denials", format!("at most {MAX_DENIALS} per report")));
        }
        let rows: Vec<serde_json::Value> = denials
            .into_iter()
            .map(|d| {
                let at = chrono::DateTime::parse_from_rfc3339(&d.at).ok().map(|t| t.to_rfc3339());
                serde_json::json!({
                    "at": at, "program": d.program, "host": d.host, "port": d.port.min(65535),
                    "method": optional(d.method), "path": optional(d.path), "reason": d.reason,
                })
            })
            .collect();
        self.store.record_denials(id, &serde_json::Value::from(rows)).await
    }

    /// A proposal sent through policy.local: the supervisor vouches for the program its
    /// proxy resolved from the kernel, recorded with the proposal, never used to authorize.
    pub async fn propose_from(&self, caller: &Principal, program: String, document: &str) -> Result<Proposal, Error> {
        let mut caller = caller.clone();
        if let Principal::Sandbox { program: p, .. } = &mut caller {
            *p = Some(program).filter(|v| v.starts_with('/') && v.len() <= MAX_PROGRAM);
        }
        self.propose(&caller, document).await
    }

    /// A supervisor connected with the credential that hashes to `credential` (live only while
    /// its sandbox is): it learns the policy it enforces and what that policy was proved
    /// within. The sandbox stays PROVISIONING until its main command runs
    /// ([`Gateway::report_isolation`]).
    pub async fn connect_supervisor(&self, credential: &[u8; 32]) -> Result<pb::ConnectResponse, Error> {
        // One read, which also checks the credential: the supervisor waits for this answer
        // before its sandbox runs.
        let start = self.store.supervisor_start(credential).await?;
        let starts = Starts { policy: start.policy, parent: start.parent_policy, global: start.global };
        Ok(pb::ConnectResponse {
            sandbox_id: start.id.to_string(),
            name: start.name,
            policy_json: starts.policy.to_string(),
            policy_version: start.version,
            boundaries_json: starts.boundaries(),
        })
    }

    /// The main command exited, or the sandbox failed (`error`): record it, then stop the
    /// sandbox and its subtree.
    pub async fn supervisor_exited(&self, id: Uuid, exit_code: i32, error: &str) -> Result<(), Error> {
        self.store.record_exit(id, exit_code).await?;
        if !error.is_empty() {
            let reason: String = error.chars().take(1000).collect();
            let _writing = self.phases.writing();
            self.store.mark_error(id, &reason).await?;
            self.phases.changed(None);
        }
        let gw = self.clone();
        // The supervisor is waiting for this answer before it exits; stop in the background.
        tokio::spawn(async move {
            let reason = format!("main command exited with code {exit_code}");
            match gw.store.system_stop(id, &reason).await {
                Ok(items) => {
                    if let Err(e) = gw.drain(items).await {
                        tracing::warn!(sandbox = %id, "stopping after exit: {e}");
                    }
                }
                Err(e) => tracing::warn!(sandbox = %id, "stopping after exit: {e}"),
            }
        });
        Ok(())
    }
}

/// What a supervisor starts with: its sandbox's policy and the boundaries its filesystem rules
/// are cut to (its parent's policy, the global maximum). The connect answers it; the process
/// driver's last line carries it for a sandbox just admitted (see [`Starts::line`]).
pub(crate) struct Starts {
    pub policy: serde_json::Value,
    pub parent: Option<serde_json::Value>,
    pub global: Option<serde_json::Value>,
}

impl Starts {
    /// The boundaries' filesystem paths, as JSON: `[{"read_only": .., "read_write": ..}, ..]`.
    fn boundaries(&self) -> String {
        let paths = |doc: &serde_json::Value| {
            let fs = &doc["filesystem_policy"];
            serde_json::json!({"read_only": fs["read_only"], "read_write": fs["read_write"]})
        };
        let boundaries: Vec<serde_json::Value> = self.parent.iter().chain(&self.global).map(paths).collect();
        serde_json::Value::from(boundaries).to_string()
    }

    /// The driver's last line for a sandbox whose policy is at `version`
    /// (crates/supervisor/src/claim.rs).
    pub fn line(&self, version: i32) -> String {
        serde_json::json!({
            "policy_version": version,
            "policy": self.policy.to_string(),
            "boundaries": self.boundaries(),
        })
        .to_string()
    }
}
