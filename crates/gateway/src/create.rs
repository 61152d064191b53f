//! Creating sandboxes: read a snapshot, decide the policy, admit in one SERIALIZABLE call,
//! then start the workload. A refusal commits its receipt and returns its code.

use openshell_driver::StartSpec;
use openshell_policy::Policy;
use openshell_store::{
    AdmissionProof, Code, Error, GrantValues, Kind, NewChild, NewRoot, ParentSnapshot, Principal, RootProof, Sandbox,
    Verdict,
};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{Gateway, input, policy_gate, tokens};

/// A user's root sandbox request.
pub struct RootRequest {
    pub name: String,
    pub command: Vec<String>,
    pub policy_yaml: String,
    pub grant: Option<GrantValues>,
    /// The grant's expiry as the caller wrote it ("4h"): a repeat hashes equal to the first.
    pub grant_expires: Option<String>,
    pub request_id: Option<String>,
    pub template: openshell_driver::Limits,
    /// The image named by the request (`--from`), resolved to its digest at admission.
    pub image: Option<String>,
    /// Variables for the main command (see [`check_env`]).
    pub env: Env,
}

/// A child request, from a user (naming the parent) or a sandbox (its own child).
pub struct ChildRequest {
    /// The parent's name or id; empty for a sandbox's own child (see `ops::child_parent`).
    pub parent: String,
    pub name: Option<String>,
    pub kind: Kind,
    pub command: Vec<String>,
    pub policy_yaml: String,
    pub request_id: Option<String>,
    /// Less than the parent's resources, or its image by name: only the fields given.
    pub template: Option<serde_json::Value>,
    /// Variables for the main command (see [`check_env`]).
    pub env: Env,
}

/// A creator's variables for a sandbox's main command. Values may be secrets: they are
/// handed to the driver and otherwise kept nowhere (no row, receipt, log or error), so a
/// sandbox that did not start with them (a crash before its driver ran it) fails on its
/// provisioning timeout rather than starting without them. Only a repeat's `request_id`
/// comparison sees them, folded into the SHA-256 of the arguments.
pub type Env = std::collections::BTreeMap<String, String>;

/// Names, count and sizes (INVALID_ARGUMENT on `env`, naming the variable, never a value).
fn check_env(env: &Env) -> Result<(), Error> {
    match openshell_proto::sandbox_env::problem(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Some(why) => Err(Error::invalid("env", why)),
        None => Ok(()),
    }
}

/// The arguments a request_id compares, with the variables when there are any (so a
/// request without them hashes as it did before they existed).
fn with_env(mut args: serde_json::Value, env: &Env) -> serde_json::Value {
    if !env.is_empty()
        && let Some(map) = args.as_object_mut()
    {
        map.insert("env".into(), json!(env));
    }
    args
}

/// How often a proof is redone when the parent's policy changes under it.
const POLICY_RACE_RETRIES: usize = 3;

fn args_hash(value: &serde_json::Value) -> [u8; 32] {
    Sha256::digest(value.to_string().as_bytes()).into()
}

impl Gateway {
    pub async fn create_root(&self, caller: &Principal, req: RootRequest) -> Result<(Sandbox, bool), Error> {
        let result = self.create_root_inner(caller, &req).await;
        self.receipt_on_refusal(caller, "sandbox.create", &req.name, req.request_id.as_deref(), result).await
    }

    async fn create_root_inner(&self, caller: &Principal, req: &RootRequest) -> Result<(Sandbox, bool), Error> {
        // Only a user creates a root: create_root refuses a sandbox (migrations/V17).
        input::command("command", &req.command)?;
        let policy = match policy_gate::parse("policy", &req.policy_yaml)? {
            Some(p) => p,
            None => policy_gate::default_policy(),
        };
        let requested = crate::template::with_image(req.template, req.image.clone())?;
        let grant = req.grant.as_ref().map(|g| {
            json!({"max_depth": g.max_depth, "max_breadth": g.max_breadth, "max_total": g.max_total,
                   "expires": req.grant_expires, "program": g.program, "rate": g.rate.to_string()})
        });
        check_env(&req.env)?;
        let hash = args_hash(&with_env(
            json!({
                "name": req.name, "command": req.command, "policy": policy.hash_hex(), "grant": grant,
                "template": requested,
            }),
            &req.env,
        ));
        // A repeat answers with the first result before anything is proved again.
        if let Some(id) = self.store.replayed(caller, req.request_id.as_deref(), &hash).await? {
            return Ok((self.store.sandbox_by_id(id).await?, true));
        }
        // The image is resolved once: the digest is what this sandbox and its children run.
        let image = match &req.image {
            Some(reference) => Some(crate::template::resolve(self.driver.as_ref(), reference).await?),
            None if self.driver.needs_image() => {
                return Err(Error::invalid(
                    "template.image",
                    format!("the {} driver runs every sandbox from an image: pass --from IMAGE", self.driver.name()),
                ));
            }
            None => None,
        };
        let template = crate::template::with_image(req.template, image)?;
        let (global_version, global) = self.global_max().await?;
        let verdict = match global {
            Some(g) => {
                let boundary = openshell_prover::boundary(&g, None);
                policy_gate::prove(&self.proofs(), boundary, policy.clone(), "the policy", "the global maximum policy")
                    .await?;
                Verdict::Within
            }
            None => Verdict::NoGlobalMax,
        };
        let proof = RootProof { global_version, verdict };
        let decided = policy_gate::decided(&policy);
        let credential = tokens::mint(tokens::SANDBOX_PREFIX).map_err(Error::unavailable)?;
        let (id, replayed) = self
            .store
            .create_root(
                caller,
                &NewRoot {
                    name: &req.name,
                    command: &req.command,
                    policy: &decided.document,
                    policy_hash: &decided.hash,
                    credential_hash: &tokens::hash(&credential),
                    request_id: req.request_id.as_deref(),
                    args_hash: &hash,
                    grant: req.grant.as_ref(),
                    template: &template,
                    runner: &self.settings.runner,
                    proof,
                },
            )
            .await?;
        self.launch(id, &req.command, &req.env, credential, replayed).await
    }

    pub async fn create_child(&self, caller: &Principal, req: ChildRequest) -> Result<(Sandbox, bool), Error> {
        let result = self.create_child_inner(caller, &req, &mut Door::None).await;
        self.receipt_on_refusal(caller, "sandbox.create_child", &req.parent, req.request_id.as_deref(), result).await
    }

    /// A create through a sandbox's door, whose credential is checked again and call taken
    /// from its bucket (`door`: the credential's SHA-256) in the SQL call that reads the
    /// parent, one round trip fewer than checking first. Nothing is read before it but what
    /// the request alone decides; a path that returns before that read takes the call
    /// first, and its refusals (UNAUTHENTICATED, the rate's LIMIT_REACHED) come back as
    /// they are, with no receipt, as a door call refused before any tool.
    pub(crate) async fn create_child_through_door(
        &self,
        caller: &Principal,
        req: ChildRequest,
        door: [u8; 32],
    ) -> Result<(Sandbox, bool), Error> {
        let sandbox = crate::auth::require_sandbox(caller)?;
        // A request_id's replay and an image's resolution come before the parent's read.
        let image = req.template.as_ref().and_then(|t| t.get("image")).is_some();
        let mut state = if req.request_id.is_some() || image {
            self.store.take_door_call(&door, sandbox).await?;
            Door::None
        } else {
            Door::Owed(door)
        };
        let result = self.create_child_inner(caller, &req, &mut state).await;
        match state {
            Door::Owed(door) => self.store.take_door_call(&door, sandbox).await?,
            Door::Refused => return result,
            Door::None => {}
        }
        self.receipt_on_refusal(caller, "sandbox.create_child", &req.parent, req.request_id.as_deref(), result).await
    }

    async fn create_child_inner(
        &self,
        caller: &Principal,
        req: &ChildRequest,
        door: &mut Door,
    ) -> Result<(Sandbox, bool), Error> {
        let parent_ref = crate::ops::child_parent(caller, &req.parent)?;
        input::command("command", &req.command)?;
        let requested = policy_gate::parse("policy", &req.policy_yaml)?;
        check_env(&req.env)?;
        let hash = args_hash(&with_env(
            json!({
                "parent": parent_ref, "name": req.name, "kind": req.kind, "command": req.command,
                "policy": requested.as_ref().map(Policy::hash_hex), "template": req.template,
            }),
            &req.env,
        ));
        // A repeat answers with the first result before anything is proved again.
        if let Some(id) = self.store.replayed(caller, req.request_id.as_deref(), &hash).await? {
            return Ok((self.store.sandbox_by_id(id).await?, true));
        }
        // An image the child names is compared by digest: the database refuses another.
        let mut template = req.template.clone();
        if let Some(reference) = template.as_ref().and_then(|t| t.get("image")).and_then(|i| i.as_str()) {
            let digest = crate::template::resolve(self.driver.as_ref(), reference).await?;
            if let Some(map) = template.as_mut().and_then(|t| t.as_object_mut()) {
                map.insert("image".into(), digest.into());
            }
        }
        let credential = tokens::mint(tokens::SANDBOX_PREFIX).map_err(Error::unavailable)?;
        let credential_hash = tokens::hash(&credential);
        for _ in 0..POLICY_RACE_RETRIES {
            let parent = match std::mem::replace(door, Door::None) {
                Door::Owed(hash) => {
                    self.store.door_parent_snapshot(&hash, caller, &parent_ref).await.inspect_err(|e| {
                        // A sandbox's parent is itself: these refusals are the door's.
                        if e.code == Code::Unauthenticated
                            || (e.code == Code::LimitReached && e.details["limit"] == "rate")
                        {
                            *door = Door::Refused;
                        }
                    })?
                }
                _ => self.store.parent_snapshot(caller, &parent_ref).await?,
            };
            let global =
                parent.global_policy.as_ref().map(|d| policy_gate::stored("the global maximum", d)).transpose()?;
            let (decided, verdict) = self.child_policy(&parent, global.as_ref(), requested.as_ref()).await?;
            let proof = AdmissionProof {
                parent_id: parent.id,
                parent_version: parent.policy_version,
                global_version: parent.global_version,
                verdict,
            };
            let admitted = self
                .store
                .admit_child(
                    caller,
                    &NewChild {
                        parent: &parent_ref,
                        name: req.name.as_deref(),
                        kind: req.kind,
                        command: &req.command,
                        policy: &decided.document,
                        policy_hash: &decided.hash,
                        proof,
                        credential_hash: &credential_hash,
                        request_id: req.request_id.as_deref(),
                        args_hash: &hash,
                        runner: &self.settings.runner,
                        template: template.as_ref(),
                    },
                )
                .await;
            match admitted {
                Ok((id, replayed)) => return self.launch(id, &req.command, &req.env, credential, replayed).await,
                Err(e) if e.is_policy_changed() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::new(Code::Conflict, "the parent's policy kept changing during admission; try again"))
    }

    /// The current global maximum policy and its version (0 when never set).
    pub(crate) async fn global_max(&self) -> Result<(i32, Option<Policy>), Error> {
        let (version, document) = self.store.global_max().await?;
        let policy = document.map(|d| policy_gate::stored("the global maximum", &d)).transpose()?;
        Ok((version, policy))
    }

    /// The child's policy: the parent's when none is given, and either way proved within
    /// the boundary (the parent's policy minus what the prover cannot model, intersected
    /// with the global maximum). Returns the policy and the verdict for the receipt.
    async fn child_policy(
        &self,
        parent: &ParentSnapshot,
        global: Option<&Policy>,
        requested: Option<&Policy>,
    ) -> Result<(policy_gate::Decided, Verdict), Error> {
        let parent_policy = policy_gate::stored(&parent.name, &parent.policy)?;
        let (candidate, verdict) = match requested {
            Some(p) => (p.clone(), Verdict::Within),
            // Inheriting needs no proof unless a global maximum may have narrowed since.
            None if global.is_none() => {
                return Ok((policy_gate::decided(&parent_policy), Verdict::Inherited));
            }
            None => (parent_policy.clone(), Verdict::InheritedWithin),
        };
        let boundary = openshell_prover::boundary(&parent_policy, global);
        let against = format!("the boundary of parent {}", parent.name);
        policy_gate::prove(&self.proofs(), boundary, candidate.clone(), "the child's policy", &against).await?;
        Ok((policy_gate::decided(&candidate), verdict))
    }

    /// Starts an admitted sandbox's workload (not a replay's: it already has one).
    async fn launch(
        &self,
        id: uuid::Uuid,
        command: &[String],
        env: &Env,
        credential: String,
        replayed: bool,
    ) -> Result<(Sandbox, bool), Error> {
        let sandbox = self.store.sandbox_by_id(id).await?;
        if replayed {
            return Ok((sandbox, true));
        }
        let spec = StartSpec {
            id,
            name: sandbox.name.clone(),
            command: command.to_vec(),
            credential,
            gateway: self.settings.endpoint.clone(),
            limits: crate::template::stored(&sandbox.template),
            image: crate::template::image(&sandbox.template),
            env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        self.auth.minted(&spec.credential);
        if let Err(e) = self.driver.start(spec).await {
            tracing::error!(sandbox = %id, "driver failed to start: {e}");
            self.store.mark_error(id, &format!("driver failed to start the workload: {e}")).await?;
            return Err(Error::unavailable(format!(
                "the {} driver could not start the sandbox: {e}",
                self.driver.name()
            )));
        }
        Ok((sandbox, false))
    }

    pub(crate) async fn receipt_on_refusal<T>(
        &self,
        caller: &Principal,
        action: &str,
        target: &str,
        request_id: Option<&str>,
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        if let Err(e) = &result
            && e.code.is_refusal()
            && let Err(fault) = self.store.record_refusal(caller, action, target, request_id, e).await
        {
            tracing::error!("could not record the refusal receipt: {fault}");
        }
        result
    }
}

/// A door call's credential check and bucket take within a create (see
/// [`Gateway::create_child_through_door`]).
enum Door {
    /// Nothing owed: a user's call, or a door call already taken.
    None,
    /// Still to take, with the parent's read (the credential's SHA-256).
    Owed([u8; 32]),
    /// The door check itself refused the call.
    Refused,
}
