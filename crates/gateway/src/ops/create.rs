//! Creating sandboxes: read a snapshot, decide the policy, admit in one SERIALIZABLE call,
//! then start the workload. A child that inherits its parent's policy while no global maximum
//! is set has nothing to prove: it is admitted in the one call that reads the parent. A
//! refusal commits its receipt and returns its code.

use std::sync::atomic::Ordering;

use openshell_driver::StartSpec;
use openshell_policy::Policy;
use openshell_store::{
    AdmissionProof, ChildCreated, ChildPolicy, Code, CreateChild, Error, GrantValues, Kind, NewRoot, ParentSnapshot,
    Phase, Principal, RootProof, Sandbox, Verdict,
};
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::policies::gate;
use super::supervisor::Starts;
use crate::{Gateway, input, tokens};

/// Whether a global maximum is set is not known (never read, or one is set).
pub(crate) const UNKNOWN: i32 = -1;

/// A user's root sandbox request.
pub struct RootRequest {
    pub name: String,
    pub command: Vec<String>,
    pub policy_yaml: String,
    pub grant: Option<GrantValues>,
    /// The grant's expiry as the caller wrote it ("4h"): a repeat hashes equal to the first.
    pub grant_expires: Option<String>,
    pub request_id: Option<String>,
    pub template: crate::template::Resources,
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

/// An admitted (or replayed) create, with what the caller should know about its policy:
/// deprecated or ignored fields, paths the sandbox cannot see.
pub struct Created {
    pub sandbox: Sandbox,
    /// True when this answers a repeated request_id and nothing new was created.
    pub replayed: bool,
    pub warnings: Vec<String>,
}

/// How often a proof is redone when the parent's policy changes under it.
const POLICY_RACE_RETRIES: usize = 3;

fn args_hash(value: &serde_json::Value) -> [u8; 32] {
    Sha256::digest(value.to_string().as_bytes()).into()
}

impl Gateway {
    pub async fn create_root(&self, caller: &Principal, req: RootRequest) -> Result<Created, Error> {
        let result = self.create_root_inner(caller, &req).await;
        let result =
            self.receipt_on_refusal(caller, "sandbox.create", &req.name, req.request_id.as_deref(), result).await;
        self.explain_name_conflict(caller, Some(&req.name), result).await
    }

    async fn create_root_inner(&self, caller: &Principal, req: &RootRequest) -> Result<Created, Error> {
        // Only a user creates a root: create_root refuses a sandbox (sql/admission.sql).
        input::command("command", &req.command)?;
        let (policy, mut warnings) = match gate::parse("policy", &req.policy_yaml)? {
            Some(w) => (gate::effective(&w.policy), w.warnings),
            None => (gate::default_policy(), Vec::new()),
        };
        warnings.extend(gate::private_path_warnings("policy", &policy));
        let requested = crate::template::with_image(req.template, req.image.clone())?;
        let grant = req.grant.as_ref().map(|g| {
            json!({"max_depth": g.max_depth, "max_breadth": g.max_breadth, "max_total": g.max_total,
                   "expires": req.grant_expires, "program": g.program, "rate": g.rate.to_string()})
        });
        check_env(&req.env)?;
        // Hashed once: for the request's identity, the proof's cache key and the stored row.
        let policy_hash = policy.hash();
        let hash = args_hash(&with_env(
            json!({
                "name": req.name, "command": req.command, "policy": hex::encode(policy_hash), "grant": grant,
                "template": requested,
            }),
            &req.env,
        ));
        // A repeat answers with the first result before anything is proved again.
        if let Some(id) = self.store.replayed(caller, req.request_id.as_deref(), &hash).await? {
            return Ok(Created { sandbox: self.store.sandbox_by_id(id).await?, replayed: true, warnings });
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
        // While no global maximum was set when last read, admission assumes none is: the
        // database re-checks its version and refuses POLICY_CHANGED if one was set since.
        let (proof, mut global) = match self.global_unset.load(Ordering::Acquire) {
            UNKNOWN => self.root_proof(&policy, policy_hash).await?,
            version => (RootProof { global_version: version, verdict: Verdict::NoGlobalMax }, None),
        };
        // Room on the host's disk before admission; the driver's start decides under its lock.
        self.driver.room(Some(req.template.disk_bytes)).map_err(no_room)?;
        let decided = gate::decided_with(&policy, policy_hash);
        let credential = tokens::mint(tokens::SANDBOX_PREFIX).map_err(Error::unavailable)?;
        let credential_hash = tokens::hash(&credential);
        let mut root = NewRoot {
            name: &req.name,
            command: &req.command,
            policy: &decided.document,
            policy_hash: &decided.hash,
            credential_hash: &credential_hash,
            request_id: req.request_id.as_deref(),
            args_hash: &hash,
            grant: req.grant.as_ref(),
            template: &template,
            runner: &self.settings.runner,
            proof,
        };
        let admitting = std::time::Instant::now();
        let mut admitted = self.store.create_root(caller, &root).await;
        if matches!(&admitted, Err(e) if e.is_policy_changed()) && root.proof.verdict == Verdict::NoGlobalMax {
            (root.proof, global) = self.root_proof(&policy, policy_hash).await?;
            admitted = self.store.create_root(caller, &root).await;
        }
        self.metrics.admission(admitting.elapsed());
        let (sandbox, replayed) = admitted?;
        if replayed {
            return Ok(Created { sandbox, replayed, warnings });
        }
        // A root's first policy is version 1 (sql/admission.sql).
        let starts = Starts { policy: decided.document.clone(), parent: None, global };
        let line = Some(starts.line(1));
        self.launch(sandbox.id, &req.name, &template, &req.command, &req.env, credential, line).await?;
        Ok(Created { sandbox, replayed, warnings })
    }

    /// What a root's policy is proved against: the global maximum as it is now (remembered
    /// when none is set, see [`Gateway::global_unset`]), returned with the proof.
    async fn root_proof(
        &self,
        policy: &Policy,
        policy_hash: [u8; 32],
    ) -> Result<(RootProof, Option<serde_json::Value>), Error> {
        let (global_version, global) = self.store.global_max().await?;
        self.global_unset.store(if global.is_some() { UNKNOWN } else { global_version }, Ordering::Release);
        let verdict = match &global {
            Some(g) => {
                let key = gate::stored_key(None, global_version, policy_hash);
                let bound = || Ok(openshell_prover::boundary(&gate::stored("the global maximum", g)?, None));
                gate::prove_stored(&self.proofs(), key, bound, policy, "the policy", "the global maximum policy")
                    .await?;
                Verdict::Within
            }
            None => Verdict::NoGlobalMax,
        };
        Ok((RootProof { global_version, verdict }, global))
    }

    pub async fn create_child(&self, caller: &Principal, req: ChildRequest) -> Result<Created, Error> {
        let result = self.create_child_inner(caller, &req, &mut Door::None).await;
        let result = self
            .receipt_on_refusal(caller, "sandbox.create_child", &req.parent, req.request_id.as_deref(), result)
            .await;
        self.explain_name_conflict(caller, req.name.as_deref(), result).await
    }

    /// A create through a sandbox's door, whose credential is checked again and call taken
    /// from its bucket (`door`: the credential's SHA-256) in the SQL call that reads the
    /// parent (and, inheriting, admits), one round trip fewer than checking first. Nothing is
    /// read before it but what the request alone decides; a path that returns before that
    /// read, or whose call is rolled back by a refusal, takes the call on its own, and the
    /// door's refusals (UNAUTHENTICATED, the rate's LIMIT_REACHED) come back as they are,
    /// with no receipt, as a door call refused before any tool.
    pub(crate) async fn create_child_through_door(
        &self,
        caller: &Principal,
        req: ChildRequest,
        door: [u8; 32],
    ) -> Result<Created, Error> {
        let sandbox = crate::auth::require_sandbox(caller)?;
        let program = match caller {
            Principal::Sandbox { program, .. } => program.as_deref(),
            Principal::User { .. } => None,
        };
        // An image's resolution comes before the parent's read (a request_id's replay is
        // answered in the same call, after the door's).
        let image = req.template.as_ref().and_then(|t| t.get("image")).is_some();
        // A program the grant does not allow is a refused create, with its receipt; the
        // credential's and the rate's refusals are the door's, with none.
        let mut state = Door::Owed(door);
        let mut refused = None;
        if image {
            match self.store.take_door_call(&door, sandbox, program).await {
                Ok(()) => state = Door::None,
                Err(e) if e.code == Code::NotAllowed => (state, refused) = (Door::None, Some(e)),
                Err(e) => return Err(e),
            }
        }
        let result = match refused {
            Some(e) => Err(e),
            None => self.create_child_inner(caller, &req, &mut state).await,
        };
        let result = match state {
            Door::Owed(door) => match self.store.take_door_call(&door, sandbox, program).await {
                Ok(()) => result,
                Err(e) if e.code == Code::NotAllowed => Err(e),
                Err(e) => return Err(e),
            },
            Door::Refused => return result,
            Door::None => result,
        };
        let result = self
            .receipt_on_refusal(caller, "sandbox.create_child", &req.parent, req.request_id.as_deref(), result)
            .await;
        self.explain_name_conflict(caller, req.name.as_deref(), result).await
    }

    /// A name held by a stopped or failed sandbox (the SQL refusal says only that it
    /// exists): say so and how to free it, since an agent that stops a child and creates
    /// one of the same name meets this at once. Only for a sandbox the caller may see (a
    /// user's own, a sandbox's descendant); any other refusal is returned as it is.
    async fn explain_name_conflict<T>(
        &self,
        caller: &Principal,
        name: Option<&str>,
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        let Err(e) = result else { return result };
        let about_name = e.code == Code::Conflict && e.details.get("field").and_then(|f| f.as_str()) == Some("name");
        let Some(name) = name.filter(|_| about_name) else { return Err(e) };
        match self.store.sandbox(caller, name).await {
            Ok(held) if matches!(held.phase, Phase::Stopped | Phase::Error) => Err(Error::new(
                Code::Conflict,
                format!(
                    "a sandbox named {name} already exists and is {}: a stopped sandbox keeps its name (its \
                     records stay for audit) until it is deleted; free the name with `openshell sandbox delete \
                     {name}` (MCP: delete_sandbox), or choose another name",
                    held.phase
                ),
            )
            .with_details(json!({ "field": "name", "sandbox": held.name, "phase": held.phase.to_string() }))),
            _ => Err(e),
        }
    }

    async fn create_child_inner(
        &self,
        caller: &Principal,
        req: &ChildRequest,
        door: &mut Door,
    ) -> Result<Created, Error> {
        let parent_ref = crate::ops::child_parent(caller, &req.parent)?;
        input::command("command", &req.command)?;
        // Hashed once (as it would be stored, with the baseline paths): for the request's
        // identity, the proof's cache key and the stored row.
        let (requested, mut warnings) = match gate::parse("policy", &req.policy_yaml)? {
            Some(w) => {
                let p = gate::effective(&w.policy);
                let hash = p.hash();
                (Some((p, hash)), w.warnings)
            }
            None => (None, Vec::new()),
        };
        if let Some((p, _)) = &requested {
            warnings.extend(gate::private_path_warnings("policy", p));
        }
        check_env(&req.env)?;
        let hash = args_hash(&with_env(
            json!({
                "parent": parent_ref, "name": req.name, "kind": req.kind, "command": req.command,
                "policy": requested.as_ref().map(|(_, h)| hex::encode(h)), "template": req.template,
            }),
            &req.env,
        ));
        // An image the child names is compared by digest: the database refuses another.
        let mut template = req.template.clone();
        if let Some(reference) = template.as_ref().and_then(|t| t.get("image")).and_then(|i| i.as_str()) {
            let digest = crate::template::resolve(self.driver.as_ref(), reference).await?;
            if let Some(map) = template.as_mut().and_then(|t| t.as_object_mut()) {
                map.insert("image".into(), digest.into());
            }
        }
        // Room on the host's disk before admission (a child's size is its parent's unless it
        // asks for less, known only to the admission); the driver's start decides.
        let asked = template.as_ref().and_then(crate::template::disk_bytes);
        self.driver.room(asked).map_err(no_room)?;
        let credential = tokens::mint(tokens::SANDBOX_PREFIX).map_err(Error::unavailable)?;
        let credential_hash = tokens::hash(&credential);
        let parent_id = self.parent_ids.hint(caller, &parent_ref);
        let create = CreateChild {
            parent: &parent_ref,
            parent_id,
            door: None,
            name: req.name.as_deref(),
            kind: req.kind,
            command: &req.command,
            policy: if requested.is_some() { ChildPolicy::Requested } else { ChildPolicy::Inherit },
            credential_hash: &credential_hash,
            request_id: req.request_id.as_deref(),
            args_hash: &hash,
            runner: &self.settings.runner,
            template: template.as_ref(),
        };
        for _ in 0..POLICY_RACE_RETRIES {
            // The first call: a repeat's answer, the snapshot to prove against, or (nothing
            // to prove) the admitted child.
            let owed = match std::mem::replace(door, Door::None) {
                Door::Owed(hash) => Some(hash),
                _ => None,
            };
            let admitting = std::time::Instant::now();
            let first = self.store.create_child(caller, &CreateChild { door: owed.as_ref(), ..create }).await;
            // An inheriting call admits: timed as the admitting SQL call it is, once its
            // parent was found (as a proved admission is, after the snapshot found it).
            let admitted_here = match &first {
                Ok(ChildCreated::Prove(_)) => false,
                Ok(ChildCreated::Admitted { .. }) => true,
                Err(e) => matches!(create.policy, ChildPolicy::Inherit) && e.code != Code::NotFound,
            };
            if admitted_here {
                self.metrics.admission(admitting.elapsed());
            }
            let snapshot = match first {
                Ok(ChildCreated::Admitted { sandbox, replayed, inherited }) => {
                    // Admitted in the call that read the parent: no global maximum is set, and
                    // the child's policy is its parent's current one.
                    let starts =
                        inherited.as_ref().map(|p| Starts { policy: p.clone(), parent: Some(p.clone()), global: None });
                    let inherited = inherited.map(Inherited::Stored);
                    return self
                        .admitted(caller, req, *sandbox, replayed, credential, inherited, warnings, starts)
                        .await;
                }
                Ok(ChildCreated::Prove(snapshot)) => snapshot,
                Err(e) if e.is_policy_changed() => continue,
                Err(e) => {
                    // Rolled back with the refusal: the door's own refusals are the door's;
                    // any other still owes the call (taken by the caller).
                    if let Some(hash) = owed {
                        *door = if e.code == Code::Unauthenticated
                            || (e.code == Code::LimitReached && e.details["limit"] == "rate")
                        {
                            Door::Refused
                        } else {
                            Door::Owed(hash)
                        };
                    }
                    return Err(e);
                }
            };
            self.parent_ids.remember(caller, &parent_ref, snapshot.id);
            let (decided, verdict, inherited) = self.child_policy(&snapshot, requested.as_ref()).await?;
            let proof = AdmissionProof {
                parent_id: snapshot.id,
                parent_version: snapshot.policy_version,
                global_version: snapshot.global_version,
                verdict,
            };
            let admitting = std::time::Instant::now();
            let admitted = self
                .store
                .create_child(
                    caller,
                    &CreateChild {
                        door: None,
                        policy: ChildPolicy::Proved { policy: &decided.document, hash: &decided.hash, proof },
                        ..create
                    },
                )
                .await;
            self.metrics.admission(admitting.elapsed());
            match admitted {
                Ok(ChildCreated::Admitted { sandbox, replayed, .. }) => {
                    let starts = Starts {
                        policy: decided.document,
                        parent: Some(snapshot.policy),
                        global: snapshot.global_policy,
                    };
                    let inherited = inherited.map(Inherited::Parsed);
                    return self
                        .admitted(caller, req, *sandbox, replayed, credential, inherited, warnings, Some(starts))
                        .await;
                }
                Ok(ChildCreated::Prove(_)) => {
                    return Err(Error::database("create_child asked for a proof it was given"));
                }
                Err(e) if e.is_policy_changed() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::new(Code::Conflict, "the parent's policy kept changing during admission; try again"))
    }

    /// An admitted child (not a repeat's: its workload already runs) is started with what it
    /// starts with as admitted (`starts`), and the warnings its policy brings: an inherited
    /// one's private paths, which the child cannot see either. An inherited policy that no
    /// longer parses fails the child before it starts (fail closed: it was copied in SQL,
    /// unread).
    #[allow(clippy::too_many_arguments)]
    async fn admitted(
        &self,
        caller: &Principal,
        req: &ChildRequest,
        sandbox: Sandbox,
        replayed: bool,
        credential: String,
        inherited: Option<Inherited>,
        mut warnings: Vec<String>,
        starts: Option<Starts>,
    ) -> Result<Created, Error> {
        if let Some(parent) = sandbox.parent_id {
            self.parent_ids.remember(caller, &req.parent, parent);
        }
        if replayed {
            return Ok(Created { sandbox, replayed, warnings });
        }
        let parsed = match inherited {
            Some(Inherited::Parsed(p)) => Some(p),
            Some(Inherited::Stored(document)) => {
                let parent = sandbox.parent_name.as_deref().unwrap_or(&req.parent);
                match gate::stored(parent, &document) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.store.mark_error(sandbox.id, &e.message).await?;
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        if let Some(parent_policy) = &parsed {
            warnings.extend(gate::private_path_warnings("policy", parent_policy));
        }
        let line = starts.map(|s| s.line(sandbox.policy_version));
        self.launch(sandbox.id, &sandbox.name, &sandbox.template, &req.command, &req.env, credential, line).await?;
        Ok(Created { sandbox, replayed, warnings })
    }

    /// The current global maximum policy and its version (0 when never set).
    pub(crate) async fn global_max(&self) -> Result<(i32, Option<Policy>), Error> {
        let (version, document) = self.store.global_max().await?;
        let policy = document.map(|d| gate::stored("the global maximum", &d)).transpose()?;
        Ok((version, policy))
    }

    /// The child's policy: the parent's when none is given, and either way proved within
    /// the boundary (the parent's policy minus what the prover cannot model, intersected
    /// with the global maximum). Returns the policy and the verdict for the receipt, and the
    /// parent's policy when the child inherits it. The proof is cached under the snapshot's
    /// versions: a repeat is a lookup, with nothing stored parsed and no boundary built.
    async fn child_policy(
        &self,
        parent: &ParentSnapshot,
        requested: Option<&(Policy, [u8; 32])>,
    ) -> Result<(gate::Decided, Verdict, Option<Policy>), Error> {
        let global = parent.global_policy.as_ref();
        // Inheriting needs no proof unless a global maximum may have narrowed since.
        if requested.is_none() && global.is_none() {
            let parent_policy = gate::stored(&parent.name, &parent.policy)?;
            return Ok((gate::decided(&parent_policy), Verdict::Inherited, Some(parent_policy)));
        }
        let stored_parent = || gate::stored(&parent.name, &parent.policy);
        let boundary = |parent_policy: &Policy| -> Result<Policy, Error> {
            let global = global.map(|d| gate::stored("the global maximum", d)).transpose()?;
            Ok(openshell_prover::boundary(parent_policy, global.as_ref()))
        };
        let against = format!("the boundary of parent {}", parent.name);
        let subject = "the child's policy";
        let stored = gate::stored_policy(parent.id, parent.policy_version, &parent.policy_hash);
        match (requested, stored) {
            (Some((candidate, hash)), Some(stored)) => {
                let key = gate::stored_key(Some(stored), parent.global_version, *hash);
                let bound = || boundary(&stored_parent()?);
                gate::prove_stored(&self.proofs(), key, bound, candidate, subject, &against).await?;
                Ok((gate::decided_with(candidate, *hash), Verdict::Within, None))
            }
            // Inheriting under a global maximum: the candidate is the stored parent policy.
            (None, Some(stored)) => {
                let key = gate::stored_key(Some(stored), parent.global_version, stored.hash);
                let parent_policy = stored_parent()?;
                let bound = || boundary(&parent_policy);
                gate::prove_stored(&self.proofs(), key, bound, &parent_policy, subject, &against).await?;
                Ok((gate::decided(&parent_policy), Verdict::InheritedWithin, Some(parent_policy)))
            }
            (requested, None) => {
                let parent_policy = stored_parent()?;
                let candidate = requested.map_or_else(|| parent_policy.clone(), |(p, _)| p.clone());
                gate::prove(&self.proofs(), boundary(&parent_policy)?, candidate.clone(), subject, &against).await?;
                let decided = gate::decided(&candidate);
                match requested {
                    Some(_) => Ok((decided, Verdict::Within, None)),
                    None => Ok((decided, Verdict::InheritedWithin, Some(parent_policy))),
                }
            }
        }
    }

    /// Starts an admitted sandbox's workload (not a replay's: it already has one), with what
    /// its supervisor starts with as admitted (see `Starts::line`).
    #[allow(clippy::too_many_arguments)]
    async fn launch(
        &self,
        id: Uuid,
        name: &str,
        template: &serde_json::Value,
        command: &[String],
        env: &Env,
        credential: String,
        start_data: Option<String>,
    ) -> Result<(), Error> {
        let spec = StartSpec {
            id,
            name: name.to_string(),
            command: command.to_vec(),
            credential,
            gateway: self.settings.endpoint.clone(),
            limits: crate::template::stored(template),
            image: crate::template::image(template),
            disk_bytes: crate::template::disk_bytes(template).unwrap_or(self.settings.disk.default_bytes),
            env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            start_data,
        };
        self.auth.minted(&spec.credential);
        self.metrics.starting(id);
        if let Err(e) = self.driver.start(spec).await {
            tracing::error!(sandbox = %id, "driver failed to start: {e}");
            self.store.mark_error(id, &format!("driver failed to start the workload: {e}")).await?;
            return Err(Error::unavailable(format!(
                "the {} driver could not start the sandbox: {e}",
                self.driver.name()
            )));
        }
        Ok(())
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

/// No room on the host's disk: UNAVAILABLE, naming the disk and its numbers.
fn no_room(s: openshell_driver::Shortage) -> Error {
    Error::unavailable(&s.message).with_details(s.details())
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

/// The parent's policy an admitted child inherited: parsed for its proof, or as the
/// admission copied it (parsed only now, for its warnings).
enum Inherited {
    Parsed(Policy),
    Stored(serde_json::Value),
}

/// Where a user's named parent was last found, so the admission can read it by primary key
/// (an old index page; a lookup by name would SSI-lock the page where its siblings' names
/// are inserted). Only a hint: SQL checks that the name still names it, and looks it up by
/// name if not. A sandbox's parent is itself.
#[derive(Default)]
pub(crate) struct ParentIds {
    ids: std::sync::Mutex<std::collections::HashMap<(i64, String), uuid::Uuid>>,
}

/// Bound on the hints kept: past it, they are all dropped.
const MAX_PARENT_IDS: usize = 10_000;

impl ParentIds {
    fn hint(&self, caller: &Principal, parent: &str) -> Option<uuid::Uuid> {
        let Principal::User { id: user, .. } = caller else { return None };
        if let Ok(id) = uuid::Uuid::try_parse(parent) {
            return Some(id);
        }
        let ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.get(&(*user, parent.to_string())).copied()
    }

    fn remember(&self, caller: &Principal, parent: &str, id: uuid::Uuid) {
        let Principal::User { id: user, .. } = caller else { return };
        if uuid::Uuid::try_parse(parent).is_ok() {
            return;
        }
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if ids.len() >= MAX_PARENT_IDS {
            ids.clear();
        }
        ids.insert((*user, parent.to_string()), id);
    }
}
