//! Parsing entry points, the canonical JSON form and the policy hash.

use sha2::{Digest, Sha256};

use crate::document::PolicyDoc;
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::{Policy, PolicyError, PolicyWarning, validate};

fn too_big(len: usize) -> Option<PolicyError> {
    (len > MAX_DOCUMENT_BYTES).then(|| PolicyError {
        path: ".".into(),
        reason: format!("document is {len} bytes; the limit is {MAX_DOCUMENT_BYTES}"),
    })
}

fn parse_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> PolicyError {
    PolicyError { path: e.path().to_string(), reason: e.inner().to_string() }
}

/// A YAML syntax error or a duplicate key; the library writes the field first
/// (`network_policies.a: duplicate entry with key "x" at line 3 column 5`).
fn yaml_error(e: serde_yaml_ng::Error) -> PolicyError {
    let text = e.to_string();
    match text.split_once(": duplicate entry") {
        Some((path, rest)) if !path.contains(' ') => {
            PolicyError { path: path.to_string(), reason: format!("duplicate entry{rest}") }
        }
        _ => PolicyError { path: ".".into(), reason: text },
    }
}

impl Policy {
    /// Parses and validates a policy written in YAML.
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        Self::from_yaml_with_warnings(text).map(|(p, _)| p)
    }

    /// [`Policy::from_yaml`], with what was accepted but deprecated or ignored.
    pub fn from_yaml_with_warnings(text: &str) -> Result<(Policy, Vec<PolicyWarning>), PolicyError> {
        if let Some(e) = too_big(text.len()) {
            return Err(e);
        }
        // Through a YAML value first: it refuses a key written twice in one map (upstream
        // does too), which deserializing straight into maps would let the last one win.
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(yaml_error)?;
        let doc: PolicyDoc = serde_path_to_error::deserialize(value).map_err(parse_error)?;
        let mut warnings = Vec::new();
        let policy = validate::policy(doc, &mut warnings)?;
        Ok((policy, warnings))
    }

    /// Parses and validates a policy given as JSON (same rules as YAML).
    pub fn from_json(value: &serde_json::Value) -> Result<Policy, PolicyError> {
        let len = serde_json::to_vec(value).map(|v| v.len()).unwrap_or(usize::MAX);
        if let Some(e) = too_big(len) {
            return Err(e);
        }
        let doc: PolicyDoc = serde_path_to_error::deserialize(value).map_err(parse_error)?;
        validate::policy(doc, &mut Vec::new())
    }

    /// The canonical JSON: every default explicit, every list sorted and deduplicated, so
    /// equal policies give equal JSON. It parses back to the same policy.
    pub fn canonical_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a policy always serializes")
    }

    /// SHA-256 of the canonical JSON, written with sorted keys and no whitespace whatever
    /// serde_json features other crates turn on.
    pub fn hash(&self) -> [u8; 32] {
        let mut out = String::new();
        write_sorted(&self.canonical_json(), &mut out);
        Sha256::digest(out.as_bytes()).into()
    }

    /// The hash in lower-case hex.
    pub fn hash_hex(&self) -> String {
        self.hash().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The canonical form as YAML.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("a policy always serializes")
    }
}

impl TryFrom<PolicyDoc> for Policy {
    type Error = PolicyError;
    fn try_from(doc: PolicyDoc) -> Result<Self, Self::Error> {
        validate::policy(doc, &mut Vec::new())
    }
}

fn write_sorted(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_sorted(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_sorted(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}
