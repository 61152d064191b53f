//! The command line: every command, flag and its help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  unexpected failure
  2  invalid arguments (INVALID_ARGUMENT, or a usage error)
  3  not found (NOT_FOUND)
  4  not allowed (NOT_ALLOWED, UNAUTHENTICATED)
  5  a limit was reached (LIMIT_REACHED: a grant limit, or a file over --max-bytes)
  6  the policy is refused (POLICY_EXCEEDS_PARENT, POLICY_UNPROVABLE)
  7  conflict (CONFLICT: name taken, request_id reused with other arguments, live grant exists)
  8  the gateway or its database is unavailable
  9  `audit verify` found a broken audit chain

The gateway and token come from --endpoint/--token, OPENSHELL_ENDPOINT/OPENSHELL_TOKEN,
or the config file `openshell gateway start` writes (~/.config/openshell/config.json).";

#[derive(Parser, Debug)]
#[command(
    name = "openshell",
    version,
    about = "Sandboxes that create sandboxes, within one grant",
    long_about = "Run agents in sandboxes. A lead sandbox's grant (max depth, breadth, total, expiry, \
                  the one program allowed to call) bounds every child it creates; the gateway enforces it.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Gateway gRPC endpoint.
    #[arg(long, global = true, env = "OPENSHELL_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Login token (default: from the config file).
    #[arg(long, global = true, env = "OPENSHELL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run or inspect the gateway.
    #[command(subcommand)]
    Gateway(GatewayCommand),
    /// Create, inspect and stop sandboxes.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// A tree's grant: the limits its sandboxes create children within.
    #[command(subcommand)]
    Grant(GrantCommand),
    /// Policies: prove one within another, read and change a sandbox's or the global maximum.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Every create, refusal, grant change and stop.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Users and their login tokens (admin).
    #[command(subcommand)]
    User(UserCommand),
    /// Who the token belongs to.
    Whoami,
}

#[derive(Subcommand, Debug)]
pub enum GatewayCommand {
    /// Run the gateway in the foreground (private PostgreSQL and the process driver by default).
    #[command(after_help = "With no --database-url, a private PostgreSQL cluster is initialized under the \
state directory on first start. The first start also creates the `admin` user and writes the CLI \
config (endpoint and token, mode 0600), so `openshell` then works without flags.")]
    Start(Box<openshell_gateway::startup::Options>),
    /// Endpoint, driver and database (the operator's URL, for psql) of the running gateway.
    Status,
    /// Set up an existing PostgreSQL: with a superuser's URL, migrate and give the gateway and
    /// operator roles their passwords; without one, print the SQL to run.
    InitDb(openshell_gateway::init_db::InitDbOptions),
    /// Lost the CLI config? As the gateway's OS user on its host, mint a new admin token through
    /// the state directory (the embedded cluster's socket) into the config file; audited.
    AdminToken {
        /// The gateway's state directory [default: /var/lib/openshell as root, else ~/.local/state/openshell].
        #[arg(long, env = "OPENSHELL_STATE_DIR")]
        state_dir: Option<std::path::PathBuf>,
        /// The embedded cluster's folder [default: STATE-postgres, beside the state directory].
        #[arg(long, env = "OPENSHELL_POSTGRES_DIR")]
        postgres_dir: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Create a sandbox: a root (with its grant), or with --parent a child within the tree's grant.
    #[command(after_help = "Examples:
  openshell sandbox create --name lead --policy lead.yaml \\
    --grant-max-depth 1 --grant-max-breadth 2 --grant-max-total 3 \\
    --grant-expires 4h --grant-program /usr/bin/python3 -- python3 agent.py
  openshell sandbox create --parent lead --name worker --kind agent --request-id r1 -- sleep 600")]
    Create(Box<CreateArgs>),
    /// Show one sandbox.
    Get { sandbox: String },
    /// Your sandboxes, newest first (an admin sees everyone's).
    List {
        /// Include STOPPED and DELETED sandboxes.
        #[arg(long)]
        all: bool,
        /// Show at most this many (pages are fetched as needed).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// A sandbox and its descendants: depth, kind, phase and creator.
    Children { sandbox: String },
    /// Run a command in a sandbox you own, inside its isolation (its uid, Landlock, seccomp,
    /// proxy). Standard input is forwarded when it is not a terminal; the command's exit code
    /// becomes this command's.
    #[command(after_help = "Examples:
  openshell sandbox exec worker -- ls -la
  echo hello | openshell sandbox exec worker -- cat
  openshell sandbox exec worker --timeout 10 --env MODE=fast -- python3 job.py")]
    Exec {
        sandbox: String,
        /// KEY=VALUE added to the command's environment (repeatable).
        #[arg(long = "env", value_parser = parse_env)]
        env: Vec<(String, String)>,
        /// Working directory inside the sandbox [default: its own].
        #[arg(long)]
        workdir: Option<String>,
        /// Seconds before the command is killed (exit 137) [default: 300, at most 3600].
        #[arg(long, default_value_t = 0)]
        timeout: u32,
        /// Bytes of output (stdout and stderr together) before it is killed [default: 8M].
        #[arg(long, value_parser = parse_size, default_value = "0")]
        output_cap: u64,
        /// Do not forward standard input.
        #[arg(long)]
        no_stdin: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Copy a file out of a running agent sandbox you own (or a child of it): PATH is absolute
    /// or relative to its working directory, and must lie in its working directory or a
    /// read_write path of its policy. DEST `-` is standard output; without DEST, the file's
    /// name in the current directory.
    #[command(after_help = "Examples:
  openshell sandbox download worker report.md
  openshell sandbox download worker /tmp/out/result.json ./result.json
  openshell sandbox download worker notes.txt - | less")]
    Download {
        sandbox: String,
        path: String,
        dest: Option<PathBuf>,
        /// Refuse a file larger than this (bytes, or with K, M, G) [default: 16M].
        #[arg(long, value_parser = parse_size, default_value = "0")]
        max_bytes: u64,
    },
    /// The latest requests the sandbox's egress proxy refused: program, host, port, method,
    /// path and what the policy lacked.
    Denials {
        sandbox: String,
        /// How many, newest first (1-1000).
        #[arg(long, default_value_t = 50)]
        limit: i32,
    },
    /// Stop a sandbox and its descendants (deepest first).
    Stop { sandbox: String },
    /// Stop, then mark DELETED (rows stay for audit).
    Delete { sandbox: String },
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// Name (1-63 of A-Z a-z 0-9 . _ -); generated for a child when omitted.
    #[arg(long)]
    pub name: Option<String>,
    /// Create a child under this sandbox (name or id).
    #[arg(long)]
    pub parent: Option<String>,
    /// A child's kind: agent (may create children) or tool (runs commands for its parent).
    #[arg(long, value_parser = ["agent", "tool"], default_value = "agent")]
    pub kind: String,
    /// Policy YAML file (upstream OpenShell's format); a child without one inherits its
    /// parent's. A policy with network rules also gets upstream's baseline paths (read-only
    /// /usr /lib /etc /app /var/log /proc /dev/urandom, read-write /tmp); deprecated or
    /// ignored fields are accepted with a warning on stderr.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Idempotency key: repeating the command returns the first result.
    #[arg(long)]
    pub request_id: Option<String>,
    /// Return at admission instead of waiting until the sandbox is READY (or failed).
    #[arg(long)]
    pub detach: bool,
    /// A variable for the main command (repeatable). `KEY` alone takes its value from this
    /// shell's environment, which keeps a secret off the command line (where every local
    /// user can read it). Not HOME, USER, proxy or CA bundle variables, or OPENSHELL_*.
    #[arg(long = "env", value_name = "KEY[=VALUE]")]
    pub env: Vec<String>,
    #[command(flatten)]
    pub grant: GrantFlags,
    #[command(flatten)]
    pub resources: ResourceFlags,
    /// The image to run the sandbox from (a gateway started with `--driver container`); it is
    /// resolved once to its digest, and children run exactly that.
    #[arg(long, value_name = "IMAGE")]
    pub from: Option<String>,
    /// The main command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// A root's resources; its children run on the same, or on less when they ask.
#[derive(Args, Debug, Default)]
pub struct ResourceFlags {
    /// CPUs the sandbox may use (1.5 = one and a half) [default: unlimited].
    #[arg(long, value_parser = parse_cpus)]
    pub cpus: Option<u32>,
    /// Memory limit: bytes, or with K, M, G (512M) [default: 2G].
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Most processes and threads at once [default: 1024].
    #[arg(long)]
    pub pids: Option<u64>,
    /// Size of the sandbox's own disk (its working directory and /tmp; a write past it fails
    /// with "No space left on device"): bytes, or with K, M, G [default: the gateway's
    /// --default-disk, 2G; a child: its parent's].
    #[arg(long, value_parser = parse_size)]
    pub disk: Option<u64>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected KEY=VALUE")?;
    if k.is_empty() {
        return Err("the variable name is empty".into());
    }
    Ok((k.to_string(), v.to_string()))
}

/// CPUs as thousandths of a CPU.
fn parse_cpus(s: &str) -> Result<u32, String> {
    let cpus: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of CPUs (e.g. 1.5)"))?;
    if !(0.01..=1024.0).contains(&cpus) {
        return Err("between 0.01 and 1024".into());
    }
    Ok((cpus * 1000.0).round() as u32)
}

/// `512M`, `2G`, `1048576` (the gateway's own reading of a size).
fn parse_size(s: &str) -> Result<u64, String> {
    openshell_disk::parse_size(s)
}

/// An idle period (`30s`, `5m`, `1h`) in whole seconds, 1 second to 7 days.
fn parse_idle(s: &str) -> Result<u32, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| format!("{s:?} is not a duration such as 5m: {e}"))?;
    match d.as_secs() {
        secs @ 1..=604_800 => Ok(secs as u32),
        _ => Err("between 1s and 7 days".into()),
    }
}

/// A root's grant, set at creation (all five or none).
#[derive(Args, Debug, Default)]
pub struct GrantFlags {
    /// Deepest agent depth children may reach (the root is 0).
    #[arg(long, allow_negative_numbers = true)]
    pub grant_max_depth: Option<i32>,
    /// Live children any one sandbox may have.
    #[arg(long, allow_negative_numbers = true)]
    pub grant_max_breadth: Option<i32>,
    /// Live descendants the whole tree may have.
    #[arg(long, allow_negative_numbers = true)]
    pub grant_max_total: Option<i32>,
    /// When the grant ends: a duration (4h, 30m) or an RFC 3339 time.
    #[arg(long)]
    pub grant_expires: Option<String>,
    /// Absolute path of the one program allowed to create children from inside; it must
    /// exist on the gateway's host (a symlink admits what it resolves to).
    #[arg(long)]
    pub grant_program: Option<String>,
    /// A tool child with no exec for this long is stopped (30s, 5m, 1h) [default: 5m].
    #[arg(long, value_parser = parse_idle)]
    pub grant_tool_idle: Option<u32>,
    /// MCP tool calls each sandbox of the tree may make: N/s or N/min [default: 10/s].
    #[arg(long)]
    pub grant_rate: Option<String>,
}

#[derive(Args, Debug)]
pub struct GrantValues {
    /// Deepest agent depth children may reach (the root is 0).
    #[arg(long, allow_negative_numbers = true)]
    pub max_depth: i32,
    /// Live children any one sandbox may have.
    #[arg(long, allow_negative_numbers = true)]
    pub max_breadth: i32,
    /// Live descendants the whole tree may have.
    #[arg(long, allow_negative_numbers = true)]
    pub max_total: i32,
    /// When the grant ends: a duration (4h, 30m) or an RFC 3339 time.
    #[arg(long)]
    pub expires: String,
    /// Absolute path of the one program allowed to create children from inside; it must
    /// exist on the gateway's host (a symlink admits what it resolves to).
    #[arg(long)]
    pub program: String,
    /// A tool child with no exec for this long is stopped (30s, 5m, 1h) [default: 5m].
    #[arg(long, value_parser = parse_idle)]
    pub tool_idle: Option<u32>,
    /// MCP tool calls each sandbox of the tree may make: N/s or N/min [default: 10/s].
    #[arg(long)]
    pub rate: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum GrantCommand {
    /// Grant a tree (by its root); replaces an expired grant, refuses while one is live.
    Create {
        sandbox: String,
        #[command(flatten)]
        values: GrantValues,
    },
    /// The tree's current grant.
    Get { sandbox: String },
    /// Your grants, or one tree's grant history.
    List { sandbox: Option<String> },
    /// Change the current grant; applies from the next call.
    Update {
        sandbox: String,
        #[arg(long, allow_negative_numbers = true)]
        max_depth: Option<i32>,
        #[arg(long, allow_negative_numbers = true)]
        max_breadth: Option<i32>,
        #[arg(long, allow_negative_numbers = true)]
        max_total: Option<i32>,
        /// A duration from now (4h) or an RFC 3339 time.
        #[arg(long)]
        expires: Option<String>,
        #[arg(long)]
        program: Option<String>,
        /// A tool child with no exec for this long is stopped (30s, 5m, 1h).
        #[arg(long, value_parser = parse_idle)]
        tool_idle: Option<u32>,
        /// MCP tool calls each sandbox of the tree may make: N/s or N/min.
        #[arg(long)]
        rate: Option<String>,
    },
    /// End the grant: nothing more is admitted in the tree.
    Revoke { sandbox: String },
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Prove (locally, with z3) that a candidate policy fits inside a boundary policy.
    #[command(after_help = "Prints the verdict; when the candidate exceeds the boundary, a concrete request or \
access the candidate allows and the boundary does not, and a hint. Both are checked as a gateway stores them: \
a policy with network rules gets the baseline paths (see `sandbox create --help`).
Exit codes: 0 within, 1 exceeds, 3 unsupported or inconclusive, 2 a file is unreadable or invalid.")]
    Check {
        /// The policy the candidate must fit in (e.g. the parent's).
        #[arg(long)]
        boundary: PathBuf,
        /// The policy to check (e.g. the child's).
        #[arg(long)]
        candidate: PathBuf,
        /// Give up (inconclusive) after this many milliseconds.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Print a sandbox's current policy, or the global maximum.
    Get {
        /// The sandbox (name or id).
        #[arg(required_unless_present = "global_max", conflicts_with = "global_max")]
        sandbox: Option<String>,
        /// The admin's global maximum policy instead.
        #[arg(long)]
        global_max: bool,
    },
    /// Replace a running sandbox's policy (proved within its parent's; its children within it),
    /// or, as an admin, set the global maximum.
    #[command(after_help = "Examples:
  openshell policy set worker --policy narrower.yaml
  openshell policy set --global-max max.yaml
  openshell policy set --clear-global-max")]
    Set {
        /// The sandbox (name or id).
        #[arg(required_unless_present_any = ["global_max", "clear_global_max"], conflicts_with_all = ["global_max", "clear_global_max"], requires = "policy")]
        sandbox: Option<String>,
        /// The new policy YAML for the sandbox.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Set the global maximum policy from this file (admin).
        #[arg(long, conflicts_with = "clear_global_max")]
        global_max: Option<PathBuf>,
        /// Remove the global maximum (admin).
        #[arg(long)]
        clear_global_max: bool,
    },
    /// List the network rules sandboxes proposed for themselves (through policy.local).
    #[command(after_help = "Examples:
  openshell policy proposals --state pending
  openshell policy proposals --sandbox lead --output json")]
    Proposals {
        /// Only this sandbox's (name or id).
        #[arg(long)]
        sandbox: Option<String>,
        /// Only this state: pending, approved, rejected, superseded or expired.
        #[arg(long)]
        state: Option<String>,
        /// At most this many, newest first (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: i32,
    },
    /// Approve a pending proposal: its rules are merged into the sandbox's current policy, which
    /// is written as the next version only if proved within the sandbox's boundary (its parent's
    /// policy and the global maximum); otherwise the counterexample is printed and it stays pending.
    Approve {
        /// The proposal's number.
        id: i64,
    },
    /// Reject a pending proposal; the sandbox reads the reason.
    Reject {
        /// The proposal's number.
        id: i64,
        /// Why (required).
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Audit entries, newest first.
    List {
        /// The whole tree of this sandbox.
        #[arg(long)]
        sandbox: Option<String>,
        /// Another user's trees (admin).
        #[arg(long)]
        user: Option<String>,
        /// RFC 3339 lower bound.
        #[arg(long)]
        since: Option<String>,
        /// RFC 3339 upper bound (exclusive).
        #[arg(long)]
        until: Option<String>,
        /// Only refusals.
        #[arg(long)]
        refusals: bool,
        /// Show at most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Admin: check every receipt's hash chain (one per tree) and name each broken chain's
    /// first broken link: a changed field, a deleted, reordered or inserted receipt. Exit 0
    /// when intact, 9 when a chain is broken.
    Verify {
        /// Heads saved earlier with `audit head -o json` (a file): each must still be a link
        /// of its chain, which catches a rewrite of a whole chain, heads and all.
        #[arg(long)]
        heads: Option<std::path::PathBuf>,
    },
    /// Admin: the last link of every chain. Keep them somewhere the database's admins cannot
    /// write, and pass them to `audit verify --heads` later.
    Head,
    /// Every receipt you may read, oldest first, one JSON object a line (to stdout).
    Export {
        /// The output format: OCSF 1.8 events, each receipt in the class that fits its action.
        #[arg(long, value_enum, default_value_t = ExportFormat::Ocsf)]
        format: ExportFormat,
        /// The whole tree of this sandbox.
        #[arg(long)]
        sandbox: Option<String>,
        /// Another user's trees (admin).
        #[arg(long)]
        user: Option<String>,
        /// RFC 3339 lower bound.
        #[arg(long)]
        since: Option<String>,
        /// RFC 3339 upper bound (exclusive).
        #[arg(long)]
        until: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Open Cybersecurity Schema Framework events.
    Ocsf,
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a user and print their token once.
    Create {
        name: String,
        /// Make the user an admin.
        #[arg(long)]
        admin: bool,
    },
}
