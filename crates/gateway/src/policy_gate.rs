//! Which policy a child gets, and whether it may have it.

use openshell_policy::Policy;
use openshell_store::{Code, Error, ParentSnapshot};

/// A policy ready for the store: canonical JSON and its hash.
pub struct Decided {
    pub document: serde_json::Value,
    pub hash: [u8; 32],
}

pub fn parse(field: &str, yaml: &str) -> Result<Option<Policy>, Error> {
    if yaml.trim().is_empty() {
        return Ok(None);
    }
    Policy::from_yaml(yaml).map(Some).map_err(|e| {
        let path = if e.path.is_empty() || e.path == "." {
            field.to_string()
        } else {
            format!("{field}.{}", e.path)
        };
        Error::invalid(&path, e.reason)
    })
}

pub fn decided(p: &Policy) -> Decided {
    Decided {
        document: p.canonical_json(),
        hash: p.hash(),
    }
}

/// No policy inherits the parent's. Any other policy must be proved within the parent's;
/// until the prover is wired in, only a policy identical to the parent's is admitted, and
/// anything else is refused as unprovable (fail closed).
pub fn child(parent: &ParentSnapshot, requested: Option<&Policy>) -> Result<Decided, Error> {
    let Some(p) = requested else {
        let hash: [u8; 32] = parent.policy_hash.as_slice().try_into().map_err(|_| {
            Error::new(
                Code::PolicyUnprovable,
                "the parent's policy hash is malformed",
            )
        })?;
        return Ok(Decided {
            document: parent.policy.clone(),
            hash,
        });
    };
    let d = decided(p);
    if d.hash.as_slice() == parent.policy_hash.as_slice() {
        return Ok(d);
    }
    Err(Error::new(
        Code::PolicyUnprovable,
        format!(
            "a child may only take its parent's policy unchanged (omit the policy to inherit {}'s)",
            parent.name
        ),
    )
    .with_details(serde_json::json!({"reason": "only_inherit", "parent": parent.name})))
}
