//! The openshell command line: sandboxes, grants, policies, audit and the gateway, as tables or JSON.

mod args;
mod client;
mod download;
mod exec;
mod ocsf;
mod render;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use openshell_proto::v1 as pb;

use args::{
    AuditCommand, Cli, Command, GatewayCommand, GrantCommand, Output, PolicyCommand, SandboxCommand, UserCommand,
};
use client::{Client, Failure};

/// Largest policy file the CLI sends (the gateway enforces its own bound too).
const MAX_POLICY_BYTES: u64 = 256 * 1024;

fn main() -> ExitCode {
    // The CLI holds the user's token, and `gateway start` the database password and every
    // sandbox credential: not readable through /proc or ptrace, from the first line.
    if let Err(e) = openshell_gateway::startup::not_dumpable() {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(cli_main()),
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            ExitCode::from(1)
        }
    }
}

async fn cli_main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for warning in openshell_gateway::argv::secret_warnings(&args) {
        eprintln!("warning: {warning}");
    }
    let cli = Cli::parse();
    let output = cli.output;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            render::failure(output, &f);
            ExitCode::from(f.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let out = cli.output;
    match cli.command {
        Command::Gateway(GatewayCommand::Start(opts)) => gateway_start(&opts).await,
        Command::Gateway(GatewayCommand::AdminToken { state_dir, postgres_dir }) => {
            let dir = state_dir.unwrap_or_else(openshell_gateway::startup::default_state_dir);
            let said = openshell_gateway::init_db::admin_token(&dir, postgres_dir.as_deref())
                .await
                .map_err(|e| Failure::local(8, format!("{e:#}")))?;
            println!("{said}");
            Ok(())
        }
        Command::Gateway(GatewayCommand::InitDb(opts)) => {
            let said = openshell_gateway::init_db::run(&opts).await.map_err(|e| Failure::local(8, format!("{e:#}")))?;
            println!("{said}");
            Ok(())
        }
        Command::Gateway(GatewayCommand::Status) => {
            let c = client::connect(cli.endpoint, cli.token, false).await?;
            let s =
                c.health().get_status(c.request(pb::GetStatusRequest {})).await.map_err(Failure::from)?.into_inner();
            render::status(out, c.endpoint(), &s);
            Ok(())
        }
        Command::Sandbox(cmd) => sandbox(client::connect(cli.endpoint, cli.token, true).await?, out, cmd).await,
        Command::Policy(PolicyCommand::Check { boundary, candidate, timeout_ms }) => {
            policy_check(out, &boundary, &candidate, timeout_ms)
        }
        Command::Policy(cmd) => policy(client::connect(cli.endpoint, cli.token, true).await?, out, cmd).await,
        Command::Grant(cmd) => grant(client::connect(cli.endpoint, cli.token, true).await?, out, cmd).await,
        Command::Audit(AuditCommand::List { sandbox, user, since, until, refusals, limit }) => {
            let c = client::connect(cli.endpoint, cli.token, true).await?;
            let mut entries = Vec::new();
            let mut page_token = String::new();
            while entries.len() < limit {
                let req = pb::ListAuditRequest {
                    sandbox: sandbox.clone().unwrap_or_default(),
                    user: user.clone().unwrap_or_default(),
                    since: since.clone().unwrap_or_default(),
                    until: until.clone().unwrap_or_default(),
                    refusals_only: refusals,
                    page_size: (limit - entries.len()).min(1000) as i32,
                    page_token: page_token.clone(),
                };
                let page = c.audit().list_audit(c.request(req)).await.map_err(Failure::from)?.into_inner();
                entries.extend(page.entries);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            render::audit(out, &entries);
            Ok(())
        }
        Command::Audit(AuditCommand::Verify { heads }) => {
            let c = client::connect(cli.endpoint, cli.token, true).await?;
            let heads = match heads {
                Some(path) => read_heads(&path)?,
                None => Vec::new(),
            };
            let r = c.audit().verify_audit(c.request(pb::VerifyAuditRequest { heads })).await.map_err(Failure::from)?;
            let r = r.into_inner();
            render::audit_verified(out, &r);
            if r.broken.is_empty() {
                Ok(())
            } else {
                Err(Failure::local(9, format!("{} broken chain(s)", r.broken.len())))
            }
        }
        Command::Audit(AuditCommand::Head) => {
            let c = client::connect(cli.endpoint, cli.token, true).await?;
            let mut heads = Vec::new();
            let mut page_token = String::new();
            loop {
                let req = pb::ListAuditHeadsRequest { page_size: 1000, page_token: page_token.clone() };
                let page = c.audit().list_audit_heads(c.request(req)).await.map_err(Failure::from)?.into_inner();
                heads.extend(page.heads);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            render::audit_heads(out, &heads);
            Ok(())
        }
        Command::Audit(AuditCommand::Export { format: _, sandbox, user, since, until }) => {
            use std::io::Write;
            let c = client::connect(cli.endpoint, cli.token, true).await?;
            // Pages come newest first; the export is oldest first, so the pages are kept.
            let mut entries = Vec::new();
            let mut page_token = String::new();
            loop {
                let req = pb::ListAuditRequest {
                    sandbox: sandbox.clone().unwrap_or_default(),
                    user: user.clone().unwrap_or_default(),
                    since: since.clone().unwrap_or_default(),
                    until: until.clone().unwrap_or_default(),
                    refusals_only: false,
                    page_size: 1000,
                    page_token: page_token.clone(),
                };
                let page = c.audit().list_audit(c.request(req)).await.map_err(Failure::from)?.into_inner();
                entries.extend(page.entries);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            let mut stdout = std::io::stdout().lock();
            for a in entries.iter().rev() {
                writeln!(stdout, "{}", ocsf::event(a)).map_err(|e| Failure::local(1, format!("stdout: {e}")))?;
            }
            Ok(())
        }
        Command::User(UserCommand::Create { name, admin }) => {
            let c = client::connect(cli.endpoint, cli.token, true).await?;
            let r =
                c.users().create_user(c.request(pb::CreateUserRequest { name, admin })).await.map_err(Failure::from)?;
            render::new_user(out, &r.into_inner());
            Ok(())
        }
        Command::Whoami => {
            let c = client::connect(cli.endpoint, cli.token, true).await?;
            let r = c.users().who_am_i(c.request(pb::WhoAmIRequest {})).await.map_err(Failure::from)?;
            render::json_or(out, &r.into_inner(), |w| {
                println!("{} {}{}", w.kind, w.name, if w.admin { " (admin)" } else { "" })
            });
            Ok(())
        }
    }
}

async fn gateway_start(opts: &openshell_gateway::startup::Options) -> Result<(), Failure> {
    let signals = openshell_gateway::startup::StopSignals::install()
        .map_err(|e| Failure::local(8, format!("cannot catch SIGTERM and SIGINT: {e}")))?;
    openshell_gateway::logging::init(opts.log_format);
    let running = openshell_gateway::startup::start(opts).await.map_err(|e| Failure::local(8, format!("{e:#}")))?;
    // Notes for people; the log says the same, and a JSON log keeps stderr all JSON.
    let say = |note: String| {
        if opts.log_format == openshell_gateway::logging::LogFormat::Text {
            eprintln!("{note}");
        }
    };
    say(format!("gateway listening on {}", running.endpoint));
    say(format!("database: {}", running.database_public_url));
    if running.admin_token.is_some() && !opts.no_client_config {
        say(format!(
            "created user `admin`; its token is in {} (mode 0600)",
            openshell_gateway::client_config::path().display()
        ));
    }
    say("press Ctrl-C to stop (sandboxes keep running and are reconciled at the next start)".into());
    running.serve_until_stopped(signals).await.map_err(|e| Failure::local(1, format!("{e:#}")))
}

/// Heads saved by `audit head -o json`.
fn read_heads(path: &std::path::Path) -> Result<Vec<pb::AuditHead>, Failure> {
    let bad = |why: String| Failure::local(2, format!("--heads {}: {why}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if meta.len() > 64 << 20 {
        return Err(bad(format!("{} bytes; at most 64 MiB", meta.len())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text)
        .map_err(|e| bad(format!("not the JSON array `audit head -o json` writes ({e})")))?;
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let field = |f: &str| r.get(f).ok_or_else(|| bad(format!("entry {i} has no `{f}`")));
            Ok(pb::AuditHead {
                chain: field("chain")?.as_str().ok_or_else(|| bad(format!("entry {i}: chain is not a string")))?.into(),
                seq: field("seq")?.as_i64().ok_or_else(|| bad(format!("entry {i}: seq is not an integer")))?,
                head: field("head")?.as_str().ok_or_else(|| bad(format!("entry {i}: head is not a string")))?.into(),
                at: String::new(),
            })
        })
        .collect()
}

/// `policy check` runs the prover here, with no gateway: exit 0 within, 1 exceeds, 3 neither.
/// Both policies are checked as a gateway would store them (with the baseline paths).
fn policy_check(
    out: Output,
    boundary: &std::path::Path,
    candidate: &std::path::Path,
    timeout_ms: u64,
) -> Result<(), Failure> {
    let load = |flag: &str, path: &std::path::Path| -> Result<openshell_policy::Policy, Failure> {
        let text = read_policy(&Some(path.to_path_buf()))?;
        let (policy, warnings) = openshell_policy::Policy::from_yaml_with_warnings(&text)
            .map_err(|e| Failure::local(2, format!("--{flag} {}: {e}", path.display())))?;
        render::warnings(&warnings.iter().map(|w| format!("--{flag} {}: {w}", path.display())).collect::<Vec<_>>());
        Ok(policy.with_baseline())
    };
    let (b, c) = (load("boundary", boundary)?, load("candidate", candidate)?);
    let prover = openshell_prover::Prover::new(std::time::Duration::from_millis(timeout_ms));
    let verdict = openshell_gateway::check_response(prover.check(&openshell_prover::boundary(&b, None), &c));
    render::verdict(out, &verdict);
    match verdict.verdict.as_str() {
        "within" => Ok(()),
        "exceeds" => Err(Failure::silent(1)),
        _ => Err(Failure::silent(3)),
    }
}

async fn policy(c: Client, out: Output, cmd: PolicyCommand) -> Result<(), Failure> {
    match cmd {
        PolicyCommand::Check { boundary, candidate, timeout_ms } => {
            return policy_check(out, &boundary, &candidate, timeout_ms);
        }
        PolicyCommand::Get { sandbox: Some(sandbox), .. } => {
            let r =
                c.policies().get_policy(c.request(pb::GetPolicyRequest { sandbox })).await.map_err(Failure::from)?;
            render::policy(out, &r.into_inner());
        }
        PolicyCommand::Get { sandbox: None, .. } => {
            let r = c.policies().get_global_max(c.request(pb::GetGlobalMaxRequest {})).await.map_err(Failure::from)?;
            render::global_max(out, &r.into_inner());
        }
        PolicyCommand::Set { sandbox: Some(sandbox), policy, .. } => {
            let policy_yaml = read_policy(&policy)?;
            let r = c
                .policies()
                .set_policy(c.request(pb::SetPolicyRequest { sandbox, policy_yaml }))
                .await
                .map_err(Failure::from)?
                .into_inner();
            render::warnings(&r.warnings);
            render::policy(out, &r);
        }
        PolicyCommand::Set { sandbox: None, global_max, .. } => {
            // Without --global-max this is --clear-global-max: an empty policy clears it.
            let policy_yaml = read_policy(&global_max)?;
            let r = c
                .policies()
                .set_global_max(c.request(pb::SetGlobalMaxRequest { policy_yaml }))
                .await
                .map_err(Failure::from)?;
            render::global_max(out, &r.into_inner());
        }
        PolicyCommand::Proposals { sandbox, state, limit } => {
            let req = pb::ListProposalsRequest {
                sandbox: sandbox.unwrap_or_default(),
                state: state.unwrap_or_default(),
                limit,
            };
            let r = c.policies().list_proposals(c.request(req)).await.map_err(Failure::from)?;
            render::proposals(out, &r.into_inner().proposals);
        }
        PolicyCommand::Approve { id } => {
            let r = c.policies().approve_proposal(c.request(pb::ApproveProposalRequest { id })).await;
            render::proposals(out, &[r.map_err(Failure::from)?.into_inner()]);
        }
        PolicyCommand::Reject { id, reason } => {
            let r = c.policies().reject_proposal(c.request(pb::RejectProposalRequest { id, reason })).await;
            render::proposals(out, &[r.map_err(Failure::from)?.into_inner()]);
        }
    }
    Ok(())
}

fn read_policy(path: &Option<std::path::PathBuf>) -> Result<String, Failure> {
    let Some(path) = path else {
        return Ok(String::new());
    };
    let meta = std::fs::metadata(path).map_err(|e| Failure::local(2, format!("--policy {}: {e}", path.display())))?;
    if meta.len() > MAX_POLICY_BYTES {
        return Err(Failure::local(2, format!("--policy {}: larger than {MAX_POLICY_BYTES} bytes", path.display())));
    }
    std::fs::read_to_string(path).map_err(|e| Failure::local(2, format!("--policy {}: {e}", path.display())))
}

/// `--env KEY=VALUE` or `--env KEY` (from this process's environment). Errors name the
/// variable, never a value; the gateway checks names and sizes.
fn create_env(entries: &[String]) -> Result<std::collections::HashMap<String, String>, Failure> {
    let mut env = std::collections::HashMap::new();
    for entry in entries {
        let (name, value) = match entry.split_once('=') {
            Some((name, value)) => (name.to_string(), value.to_string()),
            None => {
                let value = std::env::var(entry).map_err(|_| {
                    Failure::local(2, format!("--env {entry}: not set in this environment (or not UTF-8)"))
                })?;
                (entry.clone(), value)
            }
        };
        if name.is_empty() {
            return Err(Failure::local(2, "--env: a variable name is empty (KEY=VALUE)"));
        }
        if env.insert(name.clone(), value).is_some() {
            return Err(Failure::local(2, format!("--env {name}: given twice")));
        }
    }
    Ok(env)
}

async fn sandbox(c: Client, out: Output, cmd: SandboxCommand) -> Result<(), Failure> {
    match cmd {
        SandboxCommand::Create(a) => {
            let detach = a.detach;
            let env = create_env(&a.env)?;
            let policy_yaml = read_policy(&a.policy)?;
            let g = &a.grant;
            let any_grant = g.grant_max_depth.is_some()
                || g.grant_max_breadth.is_some()
                || g.grant_max_total.is_some()
                || g.grant_expires.is_some()
                || g.grant_program.is_some()
                || g.grant_tool_idle.is_some()
                || g.grant_rate.is_some();
            let r = if let Some(parent) = a.parent {
                if any_grant {
                    return Err(Failure::local(
                        2,
                        "--grant-* flags set a root's grant; a child is created within its tree's grant",
                    ));
                }
                let r = &a.resources;
                let asked =
                    r.cpus.is_some() || r.memory.is_some() || r.pids.is_some() || r.disk.is_some() || a.from.is_some();
                let template = asked.then(|| pb::Template {
                    cpu_millis: r.cpus.unwrap_or(0),
                    memory_bytes: r.memory.unwrap_or(0),
                    pids: r.pids.unwrap_or(0),
                    image: a.from.clone().unwrap_or_default(),
                    disk_bytes: r.disk.unwrap_or(0),
                });
                let req = pb::CreateChildSandboxRequest {
                    template,
                    parent,
                    name: a.name.unwrap_or_default(),
                    kind: if a.kind == "tool" { pb::SandboxKind::Tool } else { pb::SandboxKind::Agent } as i32,
                    command: a.command,
                    policy_yaml,
                    request_id: a.request_id.unwrap_or_default(),
                    env,
                };
                c.sandboxes().create_child_sandbox(c.request(req)).await
            } else {
                let name = a.name.ok_or_else(|| Failure::local(2, "--name is required for a root sandbox"))?;
                let grant = if any_grant {
                    let missing: Vec<&str> = [
                        ("--grant-max-depth", g.grant_max_depth.is_none()),
                        ("--grant-max-breadth", g.grant_max_breadth.is_none()),
                        ("--grant-max-total", g.grant_max_total.is_none()),
                        ("--grant-expires", g.grant_expires.is_none()),
                        ("--grant-program", g.grant_program.is_none()),
                    ]
                    .into_iter()
                    .filter_map(|(f, m)| m.then_some(f))
                    .collect();
                    if !missing.is_empty() {
                        return Err(Failure::local(
                            2,
                            format!("a grant needs all five --grant-* flags; missing {}", missing.join(", ")),
                        ));
                    }
                    Some(pb::GrantSpec {
                        max_depth: g.grant_max_depth.unwrap_or_default(),
                        max_breadth: g.grant_max_breadth.unwrap_or_default(),
                        max_total: g.grant_max_total.unwrap_or_default(),
                        expires: g.grant_expires.clone().unwrap_or_default(),
                        program: g.grant_program.clone().unwrap_or_default(),
                        tool_idle_seconds: g.grant_tool_idle.unwrap_or_default(),
                        rate: g.grant_rate.clone().unwrap_or_default(),
                    })
                } else {
                    None
                };
                let req = pb::CreateSandboxRequest {
                    name,
                    command: a.command,
                    policy_yaml,
                    grant,
                    request_id: a.request_id.unwrap_or_default(),
                    template: Some(pb::Template {
                        cpu_millis: a.resources.cpus.unwrap_or(0),
                        memory_bytes: a.resources.memory.unwrap_or(0),
                        pids: a.resources.pids.unwrap_or(0),
                        image: a.from.unwrap_or_default(),
                        disk_bytes: a.resources.disk.unwrap_or(0),
                    }),
                    env,
                };
                c.sandboxes().create_sandbox(c.request(req)).await
            };
            let mut r = r.map_err(Failure::from)?.into_inner();
            render::warnings(&r.warnings);
            if !detach && let Some(s) = &r.sandbox {
                r.sandbox = Some(wait_ready(&c, s.clone(), out).await?);
            }
            render::created(out, &r);
            if let Some(s) = r.sandbox.as_ref().filter(|s| s.phase == "ERROR") {
                return Err(Failure::local(
                    8,
                    format!("sandbox {} was admitted but failed to start: {}", s.name, s.phase_reason),
                ));
            }
        }
        SandboxCommand::Get { sandbox } => {
            let s =
                c.sandboxes().get_sandbox(c.request(pb::GetSandboxRequest { sandbox })).await.map_err(Failure::from)?;
            render::sandbox(out, &s.into_inner());
        }
        SandboxCommand::List { all, limit } => {
            let mut rows = Vec::new();
            let mut page_token = String::new();
            while rows.len() < limit {
                let req = pb::ListSandboxesRequest {
                    page_size: (limit - rows.len()).min(1000) as i32,
                    page_token: page_token.clone(),
                    all,
                };
                let page = c.sandboxes().list_sandboxes(c.request(req)).await.map_err(Failure::from)?.into_inner();
                rows.extend(page.sandboxes);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            render::sandboxes(out, &rows, false);
        }
        SandboxCommand::Children { sandbox } => {
            let r = c
                .sandboxes()
                .list_children(c.request(pb::ListChildrenRequest { sandbox }))
                .await
                .map_err(Failure::from)?;
            render::sandboxes(out, &r.into_inner().sandboxes, true);
        }
        SandboxCommand::Exec { sandbox, env, workdir, timeout, output_cap, no_stdin, command } => {
            let args = exec::ExecArgs { sandbox, command, env, workdir, timeout, output_cap, no_stdin };
            let code = exec::run(&c, args).await?;
            std::process::exit(i32::from(code));
        }
        SandboxCommand::Download { sandbox, path, dest, max_bytes } => {
            download::run(&c, sandbox, path, dest, max_bytes).await?;
        }
        SandboxCommand::Denials { sandbox, limit } => {
            let r = c
                .sandboxes()
                .list_denials(c.request(pb::ListDenialsRequest { sandbox, limit }))
                .await
                .map_err(Failure::from)?;
            render::denials(out, &r.into_inner().denials);
        }
        SandboxCommand::Stop { sandbox } => {
            render::progress(out, &format!("stopping {sandbox} and its descendants (deepest first)..."));
            let r = c
                .sandboxes()
                .stop_sandbox(c.request(pb::StopSandboxRequest { sandbox }))
                .await
                .map_err(Failure::from)?;
            render::sandboxes(out, &r.into_inner().stopped, false);
        }
        SandboxCommand::Delete { sandbox } => {
            render::progress(out, &format!("deleting {sandbox} and its descendants (deepest first)..."));
            let r = c
                .sandboxes()
                .delete_sandbox(c.request(pb::DeleteSandboxRequest { sandbox }))
                .await
                .map_err(Failure::from)?;
            render::sandboxes(out, &r.into_inner().stopped, false);
        }
    }
    Ok(())
}

/// Follows a new sandbox's phase (WatchSandbox) until READY or failed, with a progress line
/// on stderr for people; returns its last state.
async fn wait_ready(c: &Client, mut s: pb::Sandbox, out: Output) -> Result<pb::Sandbox, Failure> {
    let req = pb::WatchSandboxRequest { sandbox: s.id.clone(), timeout_seconds: 0 };
    let mut phases = c.sandboxes().watch_sandbox(c.request(req)).await.map_err(Failure::from)?.into_inner();
    // A line redrawn in place: only on a terminal, never in captured output.
    let people = matches!(out, Output::Table) && std::io::stderr().is_terminal();
    while let Some(next) = phases.message().await.map_err(Failure::from)? {
        s = next;
        if people {
            eprint!("\r{}: {:<14}", s.name, s.phase);
        }
    }
    if people {
        eprintln!();
    }
    Ok(s)
}

async fn grant(c: Client, out: Output, cmd: GrantCommand) -> Result<(), Failure> {
    let g = match cmd {
        GrantCommand::Create { sandbox, values: v } => {
            let grant = pb::GrantSpec {
                max_depth: v.max_depth,
                max_breadth: v.max_breadth,
                max_total: v.max_total,
                expires: v.expires,
                program: v.program,
                tool_idle_seconds: v.tool_idle.unwrap_or_default(),
                rate: v.rate.unwrap_or_default(),
            };
            c.grants().create_grant(c.request(pb::CreateGrantRequest { sandbox, grant: Some(grant) })).await
        }
        GrantCommand::Get { sandbox } => c.grants().get_grant(c.request(pb::GetGrantRequest { sandbox })).await,
        GrantCommand::List { sandbox } => {
            let r = c
                .grants()
                .list_grants(c.request(pb::ListGrantsRequest { sandbox: sandbox.unwrap_or_default() }))
                .await
                .map_err(Failure::from)?;
            render::grants(out, &r.into_inner().grants);
            return Ok(());
        }
        GrantCommand::Update { sandbox, max_depth, max_breadth, max_total, expires, program, tool_idle, rate } => {
            let tool_idle_seconds = tool_idle.map(|s| s as i32);
            let req = pb::UpdateGrantRequest {
                sandbox,
                max_depth,
                max_breadth,
                max_total,
                expires,
                program,
                tool_idle_seconds,
                rate,
            };
            c.grants().update_grant(c.request(req)).await
        }
        GrantCommand::Revoke { sandbox } => {
            c.grants().revoke_grant(c.request(pb::RevokeGrantRequest { sandbox })).await
        }
    };
    render::grants(out, &[g.map_err(Failure::from)?.into_inner()]);
    Ok(())
}
