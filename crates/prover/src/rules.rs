//! An enforced `rest` endpoint's HTTP rules in the one shape the prover reasons about: its
//! `access` preset spelled out as rules. Every module that reads an endpoint's allow rules
//! (the boundary's intersection, the fast path, the cells, the path folding) reads them here.

use std::sync::LazyLock;

use openshell_policy::{ANY_METHOD, ANY_PATH, AccessPreset, Endpoint, L7Match};

/// Each preset as rules: every one of its methods on every path (`full`: any method).
static PRESETS: LazyLock<[Vec<L7Match>; 3]> = LazyLock::new(|| {
    let spelled = |p: AccessPreset| match p.methods() {
        None => vec![L7Match::http(ANY_METHOD, ANY_PATH)],
        Some(ms) => ms.iter().map(|m| L7Match::http(*m, ANY_PATH)).collect(),
    };
    [spelled(AccessPreset::ReadOnly), spelled(AccessPreset::ReadWrite), spelled(AccessPreset::Full)]
});

/// The endpoint's allow rules: its `access` preset spelled out, else its `rules`. Mirrors
/// the preset branch of `openshell_policy::endpoint_allows_at` (a preset method on any path
/// in the path domain, which `/**` matches whole); a preset carries no query.
pub fn allows(ep: &Endpoint) -> Vec<&L7Match> {
    match ep.access {
        Some(p) => {
            let i = match p {
                AccessPreset::ReadOnly => 0,
                AccessPreset::ReadWrite => 1,
                AccessPreset::Full => 2,
            };
            PRESETS[i].iter().collect()
        }
        None => ep.rules.iter().map(|r| &r.allow).collect(),
    }
}

/// The endpoint's deny rules.
pub fn denies(ep: &Endpoint) -> Vec<&L7Match> {
    ep.deny_rules.iter().collect()
}

#[cfg(test)]
mod tests {
    use openshell_policy::{HttpRequest, endpoint_allows, l7_matches};

    use super::*;

    /// The spelled-out rules allow exactly what the matcher's preset branch allows.
    #[test]
    fn presets_spelled_out_agree_with_the_matcher() {
        for preset in ["read-only", "read-write", "full"] {
            let p = openshell_policy::Policy::from_yaml(&format!(
                "version: 1\nnetwork_policies: {{r: {{endpoints: [{{host: a.example.com, port: 443, protocol: rest, \
                 enforcement: enforce, access: {preset}}}]}}}}\n"
            ))
            .unwrap();
            let ep = &p.network_policies["r"].endpoints[0];
            for method in ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "XOTHER"] {
                for path in ["/", "/a", "/a/b/c"] {
                    let http = HttpRequest { method: method.into(), path: path.into(), ..Default::default() };
                    let by_rules = allows(ep).iter().any(|m| l7_matches(m, &http));
                    assert_eq!(by_rules, endpoint_allows(ep, "a.example.com", 443, Some(&http)), "{preset} {method}");
                }
            }
        }
    }
}
