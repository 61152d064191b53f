//! Tables for people, JSON for scripts.

use std::io::IsTerminal;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use openshell_proto::v1 as pb;
use serde::Serialize;

use crate::args::Output;
use crate::client::Failure;

pub fn json_or<T: Serialize>(out: Output, value: &T, table: impl FnOnce(&T)) {
    match out {
        Output::Json => {
            println!("{}", serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")))
        }
        Output::Table => table(value),
    }
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY).set_header(header.iter().copied());
    t
}

fn kind(k: i32) -> &'static str {
    match pb::SandboxKind::try_from(k) {
        Ok(pb::SandboxKind::Tool) => "tool",
        _ => "agent",
    }
}

pub fn sandboxes(out: Output, rows: &[pb::Sandbox], tree: bool) {
    json_or(out, &rows, |rows| {
        let mut t = table(&["NAME", "DEPTH", "KIND", "PHASE", "PARENT", "CREATED BY", "ID"]);
        let base = rows.first().map(|r| r.depth).unwrap_or(0);
        for s in rows.iter() {
            let name = if tree {
                format!("{}{}", "  ".repeat((s.depth - base).max(0) as usize), s.name)
            } else {
                s.name.clone()
            };
            let phase = match s.exit_code {
                Some(c) => format!("{} (exit {c})", s.phase),
                None => s.phase.clone(),
            };
            t.add_row(vec![
                name,
                s.depth.to_string(),
                kind(s.kind).into(),
                phase,
                s.parent_name.clone(),
                s.created_by.clone(),
                s.id.clone(),
            ]);
        }
        println!("{t}");
    });
}

/// What the gateway accepted but warns about (a deprecated field, a path the sandbox cannot
/// see): on stderr, so a script's JSON on stdout stays whole (it has them too).
pub fn warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

/// One sandbox: its row, then what its supervisor applied at start (Landlock, and granted
/// paths it skipped because they do not exist there).
pub fn sandbox(out: Output, s: &pb::Sandbox) {
    if out == Output::Json {
        return sandboxes(out, std::slice::from_ref(s), false);
    }
    sandboxes(out, std::slice::from_ref(s), false);
    let Ok(iso) = serde_json::from_str::<serde_json::Value>(&s.isolation) else {
        return;
    };
    let landlock = iso["landlock"].as_str().unwrap_or_default();
    match iso["detail"].as_str().filter(|d| !d.is_empty()) {
        Some(detail) => println!("landlock: {landlock} ({detail})"),
        None => println!("landlock: {landlock}"),
    }
    let skipped: Vec<&str> = iso["skipped"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
    if !skipped.is_empty() {
        println!("skipped paths (absent at start, so not granted): {}", skipped.join(", "));
    }
}

pub fn created(out: Output, r: &pb::CreateSandboxResponse) {
    json_or(out, r, |r| {
        if let Some(s) = &r.sandbox {
            let verb = if r.replayed { "already created (same request_id)" } else { "created" };
            println!("{} {verb}: {} depth {} {} ({})", s.name, kind(s.kind), s.depth, s.phase, s.id);
        }
    });
}

pub fn grants(out: Output, rows: &[pb::Grant]) {
    json_or(out, &rows, |rows| {
        let mut t = table(&[
            "ROOT",
            "STATE",
            "MAX DEPTH",
            "MAX BREADTH",
            "MAX TOTAL",
            "EXPIRES",
            "PROGRAM",
            "TOOL IDLE",
            "RESOLVED",
            "RATE",
            "ADMITTED",
            "ID",
        ]);
        for g in rows.iter() {
            t.add_row(vec![
                g.root_name.clone(),
                g.state.clone(),
                g.max_depth.to_string(),
                g.max_breadth.to_string(),
                g.max_total.to_string(),
                g.expires_at.clone(),
                g.program.clone(),
                humantime::format_duration(std::time::Duration::from_secs(g.tool_idle_seconds.max(0) as u64))
                    .to_string(),
                g.program_resolved.clone(),
                g.rate.clone(),
                g.children_admitted.to_string(),
                g.id.to_string(),
            ]);
        }
        println!("{t}");
    });
}

pub fn denials(out: Output, rows: &[pb::Denial]) {
    json_or(out, &rows, |rows| {
        let mut t = table(&["AT", "PROGRAM", "HOST", "PORT", "METHOD", "PATH", "REASON"]);
        for d in rows.iter() {
            t.add_row(vec![
                d.at.clone(),
                d.program.clone(),
                d.host.clone(),
                d.port.to_string(),
                d.method.clone(),
                d.path.clone(),
                d.reason.clone(),
            ]);
        }
        println!("{t}");
    });
}

pub fn proposals(out: Output, rows: &[pb::Proposal]) {
    json_or(out, &rows, |rows| {
        let mut t = table(&["ID", "SANDBOX", "STATE", "RULES", "REASON", "DECIDED BY", "VERSION", "CREATED"]);
        for p in rows.iter() {
            let rules = serde_json::from_str::<serde_json::Value>(&p.rules_json)
                .ok()
                .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>().join(", ")))
                .unwrap_or_default();
            let decided = match (p.decided_by.as_str(), p.decision_reason.as_str()) {
                (by, "") => by.to_string(),
                (by, why) => format!("{by}: {why}"),
            };
            let version = if p.policy_version > 0 { p.policy_version.to_string() } else { String::new() };
            t.add_row(vec![
                p.id.to_string(),
                p.sandbox_name.clone(),
                p.state.clone(),
                rules,
                p.reason.clone(),
                decided,
                version,
                p.created_at.clone(),
            ]);
        }
        println!("{t}");
    });
}

pub fn audit(out: Output, rows: &[pb::AuditEntry]) {
    json_or(out, &rows, |rows| {
        let mut t = table(&["AT", "ACTION", "OUTCOME", "ACTOR", "SANDBOX", "MESSAGE"]);
        for a in rows.iter() {
            let outcome = if a.code.is_empty() { a.outcome.clone() } else { format!("{} {}", a.outcome, a.code) };
            t.add_row(vec![
                a.at.clone(),
                a.action.clone(),
                outcome,
                a.actor.clone(),
                a.sandbox_name.clone(),
                a.message.clone(),
            ]);
        }
        println!("{t}");
    });
}

pub fn audit_verified(out: Output, r: &pb::VerifyAuditResponse) {
    json_or(out, r, |r| {
        if r.broken.is_empty() {
            println!("intact: {} chains, {} receipts", r.chains, r.receipts);
            return;
        }
        let mut t = table(&["CHAIN", "SEQ", "RECEIPT", "PROBLEM", "DETAIL"]);
        for c in &r.broken {
            let id = if c.broken_id == 0 { "-".to_string() } else { c.broken_id.to_string() };
            t.add_row(vec![c.chain.clone(), c.broken_seq.to_string(), id, c.problem.clone(), c.detail.clone()]);
        }
        println!("{t}");
        println!("BROKEN: {} of {} chains ({} receipts checked)", r.broken.len(), r.chains, r.receipts);
    });
}

pub fn audit_heads(out: Output, heads: &[pb::AuditHead]) {
    json_or(out, &heads, |heads| {
        let mut t = table(&["CHAIN", "SEQ", "HEAD", "AT"]);
        for h in heads.iter() {
            t.add_row(vec![h.chain.clone(), h.seq.to_string(), h.head.clone(), h.at.clone()]);
        }
        println!("{t}");
    });
}

pub fn status(out: Output, endpoint: &str, s: &pb::GetStatusResponse) {
    json_or(out, s, |s| {
        println!("endpoint:  {endpoint}");
        println!("version:   {}", s.version);
        println!("driver:    {}", s.driver);
        println!("database:  {} ({})", s.database, if s.database_ok { "reachable" } else { "UNREACHABLE" });
        if let Some(d) = &s.disk {
            let h = openshell_disk::human;
            if d.backend == "memory" {
                println!("disks:     in memory (a tmpfs per sandbox, charged to its memory)");
            } else {
                println!(
                    "disks:     {} running, {} stopped and kept: {} used, running ones may still write {}",
                    d.running,
                    d.kept,
                    h(d.used_bytes),
                    h(d.owed_bytes)
                );
            }
            println!(
                "           {} free of {} on the filesystem of {} ({} kept free: --disk-reserve)",
                h(d.free_bytes),
                h(d.total_bytes),
                d.path,
                h(d.reserve_bytes)
            );
        }
    });
}

pub fn new_user(out: Output, u: &pb::CreateUserResponse) {
    json_or(out, u, |u| {
        println!("created user {}; their token (shown once):", u.name);
        println!("{}", u.token);
    });
}

/// A note on a long wait, for people: on a terminal only.
pub fn progress(out: Output, message: &str) {
    if out == Output::Table && std::io::stderr().is_terminal() {
        eprintln!("{message}");
    }
}

pub fn policy(out: Output, p: &pb::PolicyResponse) {
    json_or(out, p, |p| {
        println!("# {} policy version {} (sha256 {})", p.sandbox_name, p.version, p.policy_hash);
        print!("{}", p.policy_yaml);
    });
}

pub fn global_max(out: Output, g: &pb::GlobalMaxResponse) {
    json_or(out, g, |g| {
        if g.policy_yaml.is_empty() {
            println!("# no global maximum policy (version {})", g.version);
        } else {
            println!("# global maximum policy version {} (sha256 {})", g.version, g.policy_hash);
            print!("{}", g.policy_yaml);
        }
    });
}

pub fn verdict(out: Output, v: &pb::CheckPolicyResponse) {
    json_or(out, v, |v| {
        println!("verdict: {}", v.verdict);
        if !v.counterexample.is_empty() {
            println!("counterexample: {}", v.counterexample);
        }
        if !v.hint.is_empty() {
            println!("hint: {}", v.hint);
        }
        if !v.reason.is_empty() {
            println!("reason: {}", v.reason);
        }
    });
}

pub fn failure(out: Output, f: &Failure) {
    if f.code.is_empty() {
        return;
    }
    match out {
        Output::Json => println!("{}", serde_json::json!({ "error": f })),
        Output::Table => {
            eprintln!("error: {}: {}", f.code, f.message);
            for (k, v) in &f.details {
                eprintln!("  {k}: {v}");
            }
        }
    }
}
