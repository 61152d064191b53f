//! Receipts as OCSF 1.8 events (`audit export --format ocsf`), one JSON object a line, the
//! class that fits each action: sandbox operations are API Activity (6003), grants, policies
//! and proposals Entity Management (3004), users and tokens Account Change (3001). The caller
//! (user, or sandbox and program), the parent and the user who owns the tree are kept, and
//! the receipt's own fields travel in `unmapped`.

use openshell_proto::v1 as pb;
use serde_json::{Value, json};

/// The schema version the events follow (tests/data/ocsf-1.8.0 holds what the test checks).
pub const VERSION: &str = "1.8.0";

const API_ACTIVITY: (i64, i64) = (6, 6003);
const ENTITY_MANAGEMENT: (i64, i64) = (3, 3004);
const ACCOUNT_CHANGE: (i64, i64) = (3, 3001);
const OTHER: i64 = 99;

/// The class (category, class uid) and activity (id, name) of an action.
fn class_of(action: &str) -> ((i64, i64), i64, &'static str) {
    let (class, activity) = match action {
        "sandbox.create" | "sandbox.create_child" => (API_ACTIVITY, 1),
        "sandbox.stop" | "system.stop" => (API_ACTIVITY, 3),
        "sandbox.delete" => (API_ACTIVITY, 4),
        a if a.starts_with("sandbox.") => (API_ACTIVITY, OTHER),
        "grant.create" | "proposal.create" => (ENTITY_MANAGEMENT, 1),
        "grant.update"
        | "policy.set"
        | "policy.global_max"
        | "proposal.approve"
        | "proposal.reject"
        | "proposal.supersede"
        | "system.proposal_expire" => (ENTITY_MANAGEMENT, 3),
        "grant.revoke" => (ENTITY_MANAGEMENT, 9),
        "user.create" | "system.user_create" | "token.create" => (ACCOUNT_CHANGE, 1),
        "token.revoke" => (ACCOUNT_CHANGE, 5),
        a if a.starts_with("user.") || a.starts_with("token.") => (ACCOUNT_CHANGE, OTHER),
        _ => (API_ACTIVITY, OTHER),
    };
    let name = match (class, activity) {
        (_, 1) => "Create",
        (API_ACTIVITY, 3) | (ENTITY_MANAGEMENT, 3) => "Update",
        (_, 4) => "Delete",
        (ENTITY_MANAGEMENT, 9) => "Disable",
        (ACCOUNT_CHANGE, 5) => "Disable",
        _ => "Other",
    };
    (class, activity, name)
}

/// The caller as an OCSF actor: the user, or the sandbox's supervisor and the calling
/// program (the receipt's actor reads `user:NAME`, `sandbox:NAME program:PATH` or `gateway`).
fn actor(a: &pb::AuditEntry) -> Value {
    if let Some(user) = a.actor.strip_prefix("user:") {
        return json!({"user": {"name": user, "type": "User", "type_id": 1}});
    }
    if let Some(rest) = a.actor.strip_prefix("sandbox:") {
        let (sandbox, program) = match rest.split_once(" program:") {
            Some((s, p)) => (s, Some(p)),
            None => (rest, None),
        };
        let mut process = json!({"uid": format!("sandbox:{sandbox}"), "name": sandbox});
        if let Some(p) = program {
            let file = p.rsplit('/').next().unwrap_or(p);
            process["file"] = json!({"name": file, "path": p, "type_id": 1});
        }
        let mut actor = json!({"process": process, "app_name": format!("sandbox:{sandbox}")});
        if !a.owner.is_empty() {
            actor["user"] = json!({"name": a.owner, "type": "User", "type_id": 1});
        }
        return actor;
    }
    json!({"app_name": "openshell-gateway"})
}

/// One receipt as an OCSF event.
pub fn event(a: &pb::AuditEntry) -> Value {
    let ((category, class), activity, activity_name) = class_of(&a.action);
    let refused = a.outcome == "refused";
    let time = chrono::DateTime::parse_from_rfc3339(&a.at).map(|t| t.timestamp_millis()).unwrap_or(0);
    let details: Value = serde_json::from_str(&a.details_json).unwrap_or_else(|_| json!({}));
    let mut e = json!({
        "activity_id": activity,
        "activity_name": activity_name,
        "category_uid": category,
        "class_uid": class,
        "type_uid": class * 100 + activity,
        "severity_id": if refused { 2 } else { 1 },
        "status_id": if refused { 2 } else { 1 },
        "status": if refused { "Failure" } else { "Success" },
        "time": time,
        "message": if a.message.is_empty() { format!("{} {}", a.action, a.outcome) } else { a.message.clone() },
        "metadata": {
            "version": VERSION,
            "uid": a.id.to_string(),
            "log_name": "audit_log",
            "product": {"name": "OpenShell delegation gateway", "vendor_name": "OpenShell",
                        "version": env!("CARGO_PKG_VERSION")},
        },
        "actor": actor(a),
        "unmapped": {
            "action": a.action, "outcome": a.outcome, "caller": a.actor, "owner": a.owner,
            "sandbox_id": a.sandbox_id, "parent_id": a.parent_id, "root_id": a.root_id,
            "request_id": a.request_id, "details": details,
        },
    });
    if refused {
        e["status_code"] = json!(a.code);
        e["status_detail"] = json!(a.message);
    }
    let sandbox = json!({"uid": a.sandbox_id, "name": a.sandbox_name, "type": "sandbox"});
    match class {
        6003 => {
            e["api"] = json!({"operation": a.action, "service": {"name": "openshell"}});
            e["src_endpoint"] = json!({"name": a.actor});
            let mut resources = Vec::new();
            if !a.sandbox_id.is_empty() {
                resources.push(sandbox);
            }
            if !a.parent_id.is_empty() {
                resources.push(json!({"uid": a.parent_id, "type": "parent sandbox"}));
            }
            e["resources"] = Value::from(resources);
        }
        3004 => {
            let kind = a.action.split('.').next().unwrap_or("entity");
            e["entity"] = json!({
                "uid": if a.root_id.is_empty() { a.sandbox_id.clone() } else { a.root_id.clone() },
                "name": if a.sandbox_name.is_empty() { kind.to_string() } else { a.sandbox_name.clone() },
                "type": kind,
            });
        }
        _ => {
            let name = details.get("name").and_then(Value::as_str).unwrap_or(&a.owner);
            e["user"] = json!({"name": if name.is_empty() { "unknown" } else { name }, "type_id": 1});
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_gets_its_class_and_a_type_uid_of_it() {
        let a = |action: &str| pb::AuditEntry {
            action: action.into(),
            outcome: "admitted".into(),
            actor: "sandbox:lead program:/usr/bin/python3".into(),
            owner: "alice".into(),
            at: "2026-01-02T03:04:05.678Z".into(),
            ..Default::default()
        };
        let e = event(&a("sandbox.create_child"));
        assert_eq!((e["class_uid"].as_i64(), e["type_uid"].as_i64()), (Some(6003), Some(600301)));
        assert_eq!(e["actor"]["process"]["file"]["path"], "/usr/bin/python3");
        assert_eq!(e["actor"]["user"]["name"], "alice");
        assert_eq!(e["time"], 1767323045678i64);
        assert_eq!(event(&a("grant.revoke"))["type_uid"], 300409);
        assert_eq!(event(&a("token.create"))["class_uid"], 3001);
    }
}
