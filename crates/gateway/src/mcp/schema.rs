//! The subset of JSON Schema every tool schema is written in, so that each client and model
//! dialect takes it unchanged: the MCP Inspector's `--strict` portability check, OpenAI's
//! strict mode (the Agents SDK's `ensure_strict_json_schema`) and the single-`type` OpenAPI
//! subset of Gemini function declarations (the google-genai SDK's MCP conversion). Tested
//! against all three in tests/e2e/mcp_schemas.rs.
//!
//! schemars writes what Rust types say; this rewrites it:
//! - `$ref`s are inlined and `$defs` dropped (Gemini's dialect has no references);
//! - `type: [T, "null"]` becomes `anyOf: [{type: T, ...}, {type: "null"}]` (one `type` a
//!   schema);
//! - a `oneOf` of constants becomes an `enum`;
//! - formats outside JSON Schema's own (`int32`, `uint64`, ...) are dropped (validators warn
//!   of unknown formats; `minimum` already says unsigned);
//! - `additionalProperties: false` is dropped: the google-genai SDK cannot read a boolean
//!   there, strict mode adds it back itself, and the gateway refuses an unknown argument
//!   anyway, naming it;
//! - `default: null` is dropped (every optional argument is nullable, null meaning absent);
//! - a nullable schema's title and description are copied into its non-null branch too,
//!   since google-genai unwraps that branch and keeps only what is inside it.

use rmcp::model::JsonObject;
use serde_json::Value;

/// Formats JSON Schema 2020-12 defines; any other is dropped.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Keywords that describe a schema rather than constrain it: they stay on the outer schema
/// when a type list is split into branches.
const ANNOTATIONS: &[&str] = &["title", "description", "default", "examples", "deprecated"];

/// How deep `$ref`s are inlined: the tools' types are not recursive, so this only stops a
/// mistake from looping.
const MAX_DEPTH: usize = 32;

/// `schema` in the portable subset (see the module's doc).
pub fn portable(schema: &JsonObject) -> JsonObject {
    let defs = match schema.get("$defs") {
        Some(Value::Object(d)) => d.clone(),
        _ => JsonObject::new(),
    };
    let mut root = schema.clone();
    root.remove("$defs");
    root.remove("$schema");
    rewrite(&mut root, &defs, 0);
    root
}

fn rewrite(node: &mut JsonObject, defs: &JsonObject, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(Value::String(target)) = node.get("$ref").cloned()
        && let Some(Value::Object(def)) = target.strip_prefix("#/$defs/").and_then(|name| defs.get(name))
    {
        node.remove("$ref");
        let siblings = std::mem::take(node);
        *node = def.clone();
        node.extend(siblings);
    }
    if let Some(Value::Array(types)) = node.get("type").cloned() {
        split_types(node, &types);
    }
    if let Some(values) = constants(node.get("oneOf")) {
        node.remove("oneOf");
        node.insert("type".into(), "string".into());
        node.insert("enum".into(), values.into());
    }
    if let Some(Value::String(f)) = node.get("format")
        && !STANDARD_FORMATS.contains(&f.as_str())
    {
        node.remove("format");
    }
    if node.get("default") == Some(&Value::Null) {
        node.remove("default");
    }
    if node.get("additionalProperties") == Some(&Value::Bool(false)) {
        node.remove("additionalProperties");
    }
    annotate_nullable(node);
    for key in ["items", "additionalProperties", "not"] {
        if let Some(Value::Object(sub)) = node.get_mut(key) {
            rewrite(sub, defs, depth + 1);
        }
    }
    if let Some(Value::Object(props)) = node.get_mut("properties") {
        for sub in props.values_mut() {
            if let Value::Object(sub) = sub {
                rewrite(sub, defs, depth + 1);
            }
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = node.get_mut(key) {
            for sub in branches.iter_mut() {
                if let Value::Object(sub) = sub {
                    rewrite(sub, defs, depth + 1);
                }
            }
        }
    }
}

/// `{type: [T, "null"], ...}` as `{anyOf: [{type: T, ...}, {type: "null"}]}`, annotations
/// kept outside.
fn split_types(node: &mut JsonObject, types: &[Value]) {
    node.remove("type");
    let mut outer = JsonObject::new();
    for key in ANNOTATIONS {
        if let Some(v) = node.remove(*key) {
            outer.insert((*key).into(), v);
        }
    }
    let constraints = std::mem::take(node);
    let branches: Vec<Value> = types
        .iter()
        .map(|t| {
            let mut branch = JsonObject::new();
            branch.insert("type".into(), t.clone());
            if t != "null" {
                branch.extend(constraints.clone());
            }
            Value::Object(branch)
        })
        .collect();
    outer.insert("anyOf".into(), branches.into());
    *node = outer;
}

/// `{description, anyOf: [X, {type: "null"}]}`: X gets the description (and title) too.
fn annotate_nullable(node: &mut JsonObject) {
    let outer: Vec<(String, Value)> =
        ["title", "description"].iter().filter_map(|k| node.get(*k).map(|v| (k.to_string(), v.clone()))).collect();
    let Some(Value::Array(branches)) = node.get_mut("anyOf") else { return };
    if outer.is_empty() || !branches.iter().any(|b| b.get("type") == Some(&Value::from("null"))) {
        return;
    }
    for branch in branches.iter_mut() {
        if let Value::Object(b) = branch
            && b.get("type") != Some(&Value::from("null"))
        {
            for (k, v) in &outer {
                b.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
}

/// The values of a `oneOf` whose every branch is a string constant.
fn constants(one_of: Option<&Value>) -> Option<Vec<Value>> {
    let Value::Array(branches) = one_of? else { return None };
    branches
        .iter()
        .map(|b| match (b.get("const"), b.get("type")) {
            (Some(c @ Value::String(_)), Some(t)) if t == "string" => Some(c.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> JsonObject {
        v.as_object().unwrap().clone()
    }

    /// Every schema node, depth first.
    fn nodes(v: &Value, out: &mut Vec<JsonObject>) {
        match v {
            Value::Object(o) => {
                out.push(o.clone());
                o.values().for_each(|c| nodes(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| nodes(c, out)),
            _ => {}
        }
    }

    #[test]
    fn a_nullable_type_list_becomes_branches_with_their_constraints() {
        let got = portable(&obj(json!({
            "type": "object",
            "properties": {"t": {"type": ["integer", "null"], "format": "uint32", "minimum": 0,
                                 "default": null, "description": "seconds"}}
        })));
        assert_eq!(
            Value::Object(got),
            json!({"type": "object", "properties": {"t": {
                "description": "seconds",
                "anyOf": [{"type": "integer", "minimum": 0, "description": "seconds"}, {"type": "null"}]
            }}})
        );
    }

    #[test]
    fn refs_are_inlined_and_constant_unions_become_enums() {
        let got = portable(&obj(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$defs": {"Kind": {"oneOf": [{"const": "agent", "type": "string"}, {"const": "tool", "type": "string"}]}},
            "type": "object",
            "additionalProperties": false,
            "properties": {"kind": {"anyOf": [{"$ref": "#/$defs/Kind"}, {"type": "null"}], "description": "k"}}
        })));
        assert_eq!(
            Value::Object(got),
            json!({"type": "object", "properties": {"kind": {
                "description": "k",
                "anyOf": [{"type": "string", "enum": ["agent", "tool"], "description": "k"}, {"type": "null"}]
            }}})
        );
    }

    #[test]
    fn every_tool_schema_is_in_the_portable_subset() {
        for tool in super::super::tools::all().iter() {
            let schemas = [
                Some(Value::Object((*tool.input_schema).clone())),
                tool.output_schema.as_ref().map(|s| Value::Object((**s).clone())),
            ];
            for schema in schemas.into_iter().flatten() {
                let mut all = Vec::new();
                nodes(&schema, &mut all);
                for n in all {
                    let name = &tool.name;
                    assert!(!n.contains_key("$ref") && !n.contains_key("$defs"), "{name}: {n:?}");
                    assert!(!matches!(n.get("type"), Some(Value::Array(_))), "{name}: {n:?}");
                    assert!(n.get("additionalProperties") != Some(&Value::Bool(false)), "{name}: {n:?}");
                    if let Some(Value::String(f)) = n.get("format") {
                        assert!(STANDARD_FORMATS.contains(&f.as_str()), "{name}: {n:?}");
                    }
                    if let Some(Value::Object(props)) = n.get("properties") {
                        assert!(props.values().all(Value::is_object), "{name}: a boolean schema in {n:?}");
                    }
                }
            }
        }
    }
}
