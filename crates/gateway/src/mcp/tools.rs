//! The tools: their arguments and results as typed schemas, and how each is described to
//! clients (input and output JSON Schema in the portable subset of `super::schema`,
//! annotations). Always all listed: a caller with no grant or budget is refused at call time.
//!
//! Every optional argument is nullable and `null` means absent: a client that converts a
//! tool to OpenAI's strict mode makes every property required, so its model sends `null`
//! for what it leaves out.

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use rmcp::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Runs its own task; its parent reads its files.
    #[default]
    Agent,
    /// Runs commands for its parent (`exec`); cannot have children.
    Tool,
}

impl From<Kind> for openshell_store::Kind {
    fn from(k: Kind) -> openshell_store::Kind {
        match k {
            Kind::Agent => openshell_store::Kind::Agent,
            Kind::Tool => openshell_store::Kind::Tool,
        }
    }
}

// A list of these rather than a free-form map, which strict schema dialects (OpenAI's
// strict mode) cannot express.
/// One variable: its name and value.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    /// A POSIX name: a letter or `_`, then letters, digits or `_`.
    pub name: String,
    pub value: String,
}

/// Variables as a list of `{name, value}`; the `{NAME: value}` object earlier releases
/// took is still read. A name given twice is refused.
#[derive(Debug, Default)]
pub struct EnvList(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for EnvList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<EnvList, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            List(Vec<EnvVar>),
            Map(std::collections::BTreeMap<String, String>),
        }
        Ok(match Option::<Form>::deserialize(d)? {
            None => EnvList::default(),
            Some(Form::List(vars)) => EnvList(vars.into_iter().map(|v| (v.name, v.value)).collect()),
            Some(Form::Map(map)) => EnvList(map.into_iter().collect()),
        })
    }
}

impl JsonSchema for EnvList {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EnvList".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <Option<Vec<EnvVar>>>::json_schema(generator)
    }
}

impl EnvList {
    /// By name, refusing a name given twice (naming it, never a value).
    pub fn into_map<M: Default + Extend<(String, String)>>(self) -> Result<M, openshell_store::Error> {
        let mut seen = std::collections::BTreeSet::new();
        for (name, _) in &self.0 {
            if !seen.insert(name.as_str()) {
                return Err(openshell_store::Error::invalid("env", format!("{name} is given twice")));
            }
        }
        let mut map = M::default();
        map.extend(self.0);
        Ok(map)
    }
}

/// Creates a child sandbox within the tree's grant, its policy proved within the parent's.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// The parent (name or id). Only for users on the host: a sandbox's children are always
    /// its own.
    #[serde(default)]
    pub parent: Option<String>,
    /// A name for the child (unique among the user's sandboxes); generated when absent.
    #[serde(default)]
    pub name: Option<String>,
    /// agent (runs its own task; the default) or tool (runs commands for its parent).
    #[serde(default)]
    pub kind: Option<Kind>,
    /// The child's main command and its arguments.
    pub command: Vec<String>,
    /// The child's policy (YAML); the parent's when absent. Must fit within the parent's.
    #[serde(default)]
    pub policy: Option<String>,
    /// Variables for the child's main command, as `[{"name": "MODE", "value": "fast"}]`
    /// (POSIX names, at most 64; not HOME, USER, proxy or CA bundle variables, or
    /// OPENSHELL_*). Values may be secrets: they are kept in no record.
    #[serde(default)]
    pub env: EnvList,
    /// Makes a retry safe: a repeat with the same arguments returns the first result.
    #[serde(default)]
    pub request_id: Option<String>,
    /// true (the default): return when the child is READY or failed; false: at once at
    /// admission.
    #[serde(default)]
    pub wait: Option<bool>,
    /// Size of the child's own disk (its working directory, /tmp and read_write paths):
    /// bytes with an optional unit, e.g. "512M" or "1G". At most the parent's, which it
    /// gets when absent.
    #[serde(default)]
    pub disk: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxRef {
    /// A sandbox name or id.
    pub sandbox: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OptionalSandboxRef {
    /// A sandbox name or id; a sandbox caller's own when absent.
    #[serde(default)]
    pub sandbox: Option<String>,
}

/// Runs a command in a tool child and returns its exit code and output.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Exec {
    /// The tool child (name or id).
    pub sandbox: String,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Standard input for the command (UTF-8); end of file when absent.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Extra environment variables, as `[{"name": "MODE", "value": "fast"}]`.
    #[serde(default)]
    pub env: EnvList,
    /// Absolute working directory inside the sandbox; its own when absent.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Seconds before the command is killed (default 300, at most 3600).
    #[serde(default)]
    pub timeout_seconds: Option<u32>,
}

/// Reads a file of an agent child.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetFile {
    /// The agent child (name or id).
    pub sandbox: String,
    /// Absolute, or relative to the child's working directory; must lie in its working
    /// directory or a read_write path of its policy.
    pub path: String,
    /// Largest file accepted (default 1 MiB, at most 8 MiB); a larger one is refused with
    /// LIMIT_REACHED and its size.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateChildPolicy {
    /// The child (name or id).
    pub sandbox: String,
    /// Its new policy (YAML): proved within its parent's, its own live children within it.
    pub policy: String,
}

/// A dry run of the proof a create runs: whether `candidate` fits the boundary.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckPolicy {
    /// The policy to check (YAML).
    pub candidate: String,
    /// Check against the boundary of children of this sandbox (name or id). A sandbox
    /// caller's own boundary when neither this nor `boundary` is given.
    #[serde(default)]
    pub parent: Option<String>,
    /// Check against this policy (YAML) instead.
    #[serde(default)]
    pub boundary: Option<String>,
}

/// A sandbox as tools return it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SandboxOut {
    pub id: String,
    pub name: String,
    pub parent: Option<String>,
    pub root: String,
    pub depth: i32,
    /// agent or tool.
    pub kind: String,
    /// PROVISIONING, READY, STOPPING, STOPPED, ERROR or DELETED.
    pub phase: String,
    pub phase_reason: String,
    pub command: Vec<String>,
    pub policy_version: i32,
    pub policy_hash: String,
    pub exit_code: Option<i32>,
    pub created_by: String,
    pub created_at: String,
}

impl From<openshell_store::Sandbox> for SandboxOut {
    fn from(s: openshell_store::Sandbox) -> SandboxOut {
        SandboxOut {
            id: s.id.to_string(),
            name: s.name,
            parent: s.parent_name,
            root: s.root_name,
            depth: s.depth,
            kind: s.kind.to_string(),
            phase: s.phase.to_string(),
            phase_reason: s.phase_reason,
            command: s.command,
            policy_version: s.policy_version,
            policy_hash: s.policy_hash,
            exit_code: s.exit_code,
            created_by: s.created_by,
            created_at: s.created_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Created {
    pub sandbox: SandboxOut,
    /// True when this answered a repeated request_id with the first result.
    pub replayed: bool,
    /// What the policy says that was accepted but does not do what it reads as, naming
    /// the field: a deprecated upstream alias, a field its protocol ignores, a path beneath
    /// the sandbox's private /tmp or /dev/shm.
    pub warnings: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct OneSandbox {
    pub sandbox: SandboxOut,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Sandboxes {
    /// The sandbox first, then its descendants in tree order.
    pub sandboxes: Vec<SandboxOut>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Stopped {
    /// What was stopped, deepest first.
    pub stopped: Vec<SandboxOut>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecOut {
    /// The exit code, or 128 + signal (137 when killed at the timeout or the output cap).
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub output_capped: bool,
    /// Set when the command could not be started.
    pub error: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct FileOut {
    /// The path as opened inside the sandbox.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// utf-8 (content is the text) or base64 (content is the bytes, base64-encoded).
    pub encoding: String,
    pub content: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PolicyUpdated {
    pub sandbox: String,
    pub policy_version: i32,
    /// What the policy says that was accepted but deprecated or ignored, naming the field.
    pub warnings: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Limits {
    pub depth: i32,
    pub breadth: i32,
    pub total: i32,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct GrantOut {
    pub grant_id: i64,
    /// The root of the tree the grant governs.
    pub root: String,
    /// The sandbox `used` and `remaining` are seen from.
    pub sandbox: String,
    /// live, expired, revoked or replaced.
    pub state: String,
    pub expires_at: String,
    /// The one program allowed to call from inside the tree's sandboxes.
    pub program: String,
    pub limits: Limits,
    /// depth: this sandbox's depth; breadth: its live children; total: the tree's live
    /// descendants.
    pub used: Limits,
    /// What this sandbox may still create: depth levels below it, children, tree total.
    pub remaining: Limits,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckOut {
    /// within, exceeds, unsupported or inconclusive; only within would be admitted.
    pub verdict: String,
    /// For exceeds: a request the candidate allows and the boundary does not.
    pub counterexample: Option<String>,
    /// For exceeds: how to narrow the candidate.
    pub hint: Option<String>,
    /// For unsupported or inconclusive: why.
    pub reason: Option<String>,
}

/// A refusal, as every tool reports it (`isError: true`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct Refusal {
    /// NOT_ALLOWED, LIMIT_REACHED, POLICY_EXCEEDS_PARENT, POLICY_UNPROVABLE,
    /// INVALID_ARGUMENT, NOT_FOUND, CONFLICT, UNAUTHENTICATED or UNAVAILABLE.
    pub code: String,
    pub message: String,
    /// What the refusal is about, by code: the field, the limit and its values, the
    /// counterexample and hint, the reason.
    #[schemars(schema_with = "any_object")]
    pub details: serde_json::Value,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

/// How a tool changes things, for its annotations.
#[derive(Clone, Copy)]
enum Effect {
    ReadOnly,
    Additive { idempotent: bool },
    Destructive { idempotent: bool },
}

fn tool<I: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    effect: Effect,
) -> Tool {
    let input = schema_for_input::<I>().unwrap_or_else(|e| panic!("input schema of {name}: {e}"));
    let input = super::schema::portable(&input);
    let annotations = match effect {
        Effect::ReadOnly => ToolAnnotations::with_title(title).read_only(true).destructive(false).idempotent(true),
        Effect::Additive { idempotent } => {
            ToolAnnotations::with_title(title).read_only(false).destructive(false).idempotent(idempotent)
        }
        Effect::Destructive { idempotent } => {
            ToolAnnotations::with_title(title).read_only(false).destructive(true).idempotent(idempotent)
        }
    }
    .open_world(false);
    Tool::new(name, description, input)
        .with_title(title)
        .with_raw_output_schema(Arc::new(super::schema::portable(&result_or_refusal(
            &schema_for_output::<O>(),
            &schema_for_output::<Refusal>(),
        ))))
        .with_annotations(annotations)
}

/// A tool's output schema: its result, or a refusal (`isError: true`). Clients validate
/// every structuredContent against the schema, error results included (the TypeScript
/// SDK does), so both shapes are in it. Definitions move to the root, where `$ref`s point.
fn result_or_refusal(result: &JsonObject, refusal: &JsonObject) -> JsonObject {
    let mut defs = JsonObject::new();
    let mut branch = |schema: &JsonObject| {
        let mut schema = schema.clone();
        schema.remove("$schema");
        if let Some(serde_json::Value::Object(d)) = schema.remove("$defs") {
            defs.extend(d);
        }
        serde_json::Value::Object(schema)
    };
    let any_of = vec![branch(result), branch(refusal)];
    let mut root = JsonObject::new();
    root.insert("type".into(), "object".into());
    root.insert("anyOf".into(), any_of.into());
    if !defs.is_empty() {
        root.insert("$defs".into(), defs.into());
    }
    root
}

/// Every tool, in the order listed.
pub fn all() -> Arc<Vec<Tool>> {
    Arc::new(vec![
        tool::<CreateSandbox, Created>(
            "create_sandbox",
            "Create a child sandbox",
            "Create a child sandbox (agent or tool) within the tree's grant; its policy must fit within its \
             parent's. Waits until it is READY (or failed) unless wait is false. A repeated request_id returns \
             the first result.",
            Effect::Additive { idempotent: false },
        ),
        tool::<Exec, ExecOut>(
            "exec",
            "Run a command in a tool child",
            "Run a command in one of your tool children and return its exit code and output.",
            Effect::Destructive { idempotent: false },
        ),
        tool::<GetFile, FileOut>(
            "get_file",
            "Read a file of an agent child",
            "Read a file of one of your agent children (its working directory or a read_write path of its \
             policy): text as UTF-8, anything else base64.",
            Effect::ReadOnly,
        ),
        tool::<OptionalSandboxRef, Sandboxes>(
            "list_children",
            "List a sandbox's descendants",
            "A sandbox and its descendants in tree order, with depth, kind and phase (a sandbox caller: its own).",
            Effect::ReadOnly,
        ),
        tool::<SandboxRef, OneSandbox>(
            "get_sandbox",
            "Get a sandbox",
            "One sandbox you may see: phase, lineage, policy version.",
            Effect::ReadOnly,
        ),
        tool::<SandboxRef, Stopped>(
            "stop_sandbox",
            "Stop a sandbox",
            "Stop a sandbox and its descendants (deepest first).",
            Effect::Destructive { idempotent: true },
        ),
        tool::<SandboxRef, Stopped>(
            "delete_sandbox",
            "Delete a sandbox",
            "Stop and delete a sandbox and its descendants (rows stay for audit).",
            Effect::Destructive { idempotent: true },
        ),
        tool::<UpdateChildPolicy, PolicyUpdated>(
            "update_child_policy",
            "Change a child's policy",
            "Replace a child's policy; it must fit within its parent's and its own live children must fit \
             within it.",
            Effect::Destructive { idempotent: true },
        ),
        tool::<OptionalSandboxRef, GrantOut>(
            "get_grant",
            "Read the tree's grant",
            "The grant of the tree (read-only): limits, used and remaining depth, breadth and total, expiry and \
             the allowed program.",
            Effect::ReadOnly,
        ),
        tool::<CheckPolicy, CheckOut>(
            "check_policy",
            "Check a policy before creating",
            "A dry run of the containment proof: whether a candidate policy fits the boundary of your children \
             (or of a parent's, or a given policy), with a counterexample and hint when it does not. Creates \
             nothing.",
            Effect::ReadOnly,
        ),
    ])
}
