//! Store rows to protobuf messages.

use openshell_proto::v1 as pb;
use openshell_store::{AuditEntry, ChainHead, ChainStatus, Denial, Grant, Kind, Proposal, Sandbox};

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn kind(k: Kind) -> i32 {
    match k {
        Kind::Agent => pb::SandboxKind::Agent as i32,
        Kind::Tool => pb::SandboxKind::Tool as i32,
    }
}

pub fn sandbox(s: Sandbox) -> pb::Sandbox {
    pb::Sandbox {
        id: s.id.to_string(),
        name: s.name,
        owner: s.owner,
        parent_id: s.parent_id.map(|p| p.to_string()).unwrap_or_default(),
        parent_name: s.parent_name.unwrap_or_default(),
        root_id: s.root_id.to_string(),
        root_name: s.root_name,
        depth: s.depth,
        kind: kind(s.kind),
        phase: s.phase.to_string(),
        command: s.command,
        created_by: s.created_by,
        created_at: time(s.created_at),
        policy_version: s.policy_version,
        policy_hash: s.policy_hash,
        exit_code: s.exit_code,
        phase_reason: s.phase_reason,
        template: Some(crate::template::to_proto(&s.template)),
        isolation: s.isolation.map(|i| i.to_string()).unwrap_or_default(),
    }
}

pub fn denial(d: Denial) -> pb::Denial {
    pb::Denial {
        at: time(d.at),
        program: d.program,
        host: d.host,
        port: d.port.clamp(0, 65535) as u32,
        method: d.method.unwrap_or_default(),
        path: d.path.unwrap_or_default(),
        reason: d.reason,
    }
}

pub fn grant(g: Grant) -> pb::Grant {
    pb::Grant {
        id: g.id,
        root_id: g.root_id.to_string(),
        root_name: g.root_name,
        max_depth: g.max_depth,
        max_breadth: g.max_breadth,
        max_total: g.max_total,
        expires_at: time(g.expires_at),
        program: g.program,
        state: g.state.to_string(),
        created_by: g.created_by,
        created_at: time(g.created_at),
        ended_at: g.ended_at.map(time).unwrap_or_default(),
        children_admitted: g.children_admitted,
        tool_idle_seconds: g.tool_idle_seconds,
        program_resolved: g.program_resolved.unwrap_or_default(),
        rate: g.rate.to_string(),
    }
}

pub fn audit(a: AuditEntry) -> pb::AuditEntry {
    pb::AuditEntry {
        id: a.id,
        at: time(a.at),
        action: a.action,
        outcome: a.outcome,
        code: a.code.unwrap_or_default(),
        message: a.message,
        actor: a.actor,
        owner: a.owner.unwrap_or_default(),
        sandbox_id: a.sandbox_id.map(|i| i.to_string()).unwrap_or_default(),
        sandbox_name: a.sandbox_name.unwrap_or_default(),
        parent_id: a.parent_id.map(|i| i.to_string()).unwrap_or_default(),
        root_id: a.root_id.map(|i| i.to_string()).unwrap_or_default(),
        request_id: a.request_id.unwrap_or_default(),
        details_json: a.details.to_string(),
    }
}

pub fn chain_status(c: ChainStatus) -> pb::AuditChainStatus {
    pb::AuditChainStatus {
        chain: c.chain,
        receipts: c.receipts,
        head_seq: c.head_seq,
        head_hash: c.head_hash,
        broken_seq: c.broken_seq.unwrap_or_default(),
        broken_id: c.broken_id.unwrap_or_default(),
        problem: c.problem.unwrap_or_default(),
        detail: c.detail.unwrap_or_default(),
    }
}

pub fn chain_head(h: ChainHead) -> pb::AuditHead {
    pb::AuditHead { chain: h.chain, seq: h.seq, head: h.head, at: h.at.map(time).unwrap_or_default() }
}

pub fn chain_head_in(h: pb::AuditHead) -> ChainHead {
    ChainHead { chain: h.chain, seq: h.seq, head: h.head.to_ascii_lowercase(), at: None }
}

/// A proposal as the gRPC surface (and policy.local) shows it.
pub fn proposal(p: Proposal) -> pb::Proposal {
    pb::Proposal {
        id: p.id,
        sandbox_id: p.sandbox_id.to_string(),
        sandbox_name: p.sandbox_name,
        state: p.state,
        rules_json: p.rules.to_string(),
        reason: p.reason,
        created_at: time(p.created_at),
        expires_at: time(p.expires_at),
        decided_at: p.decided_at.map(time).unwrap_or_default(),
        decided_by: p.decided_by.unwrap_or_default(),
        decision_reason: p.decision_reason.unwrap_or_default(),
        policy_version: p.policy_version.unwrap_or(0),
        superseded_by: p.superseded_by.unwrap_or(0),
    }
}
