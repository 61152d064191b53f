//! The boundary a child must fit in: the parent's policy without the endpoints the prover
//! cannot model (enforced `mcp` and other opaque protocols, so they never block a child),
//! intersected with the global maximum when one is set. The intersection keeps both
//! policies' middlewares, the common `allowed_ips` (exact: CIDR networks nest or are
//! disjoint), the narrower endpoint `path`, and both rules' query constraints.
//!
//! The intersection is exact for filesystem, Landlock and ports. For globs it keeps the
//! narrower of two patterns when one visibly contains the other and drops the pair
//! otherwise: the result may be smaller than the true intersection (a child may be refused
//! that would fit), never larger (no child is admitted beyond either policy).

use std::collections::BTreeMap;

use openshell_policy::glob::{Domain, Glob, Piece};
use openshell_policy::{
    ANY_METHOD, Access, Binary, Endpoint, Enforcement, FileMode, FilesystemPolicy, IpNet, L7Match, L7Rule, Landlock,
    Middleware, NetworkPolicy, Policy, Process, Protocol, ValueMatcher, limits::MAX_NAME_LEN,
};

use crate::hosts::HostIndex;
use crate::rules;

/// What a child of `parent` must fit in, given the admin's global maximum.
pub fn boundary(parent: &Policy, global_max: Option<&Policy>) -> Policy {
    let parent = modelled(parent);
    match global_max {
        None => parent,
        Some(g) => intersect(&parent, &modelled(g)),
    }
}

/// Drops enforced endpoints of protocols the prover does not model.
fn modelled(p: &Policy) -> Policy {
    let mut out = p.clone();
    for np in out.network_policies.values_mut() {
        np.endpoints.retain(|e| !e.is_opaque());
    }
    out.network_policies.retain(|_, np| !np.endpoints.is_empty());
    out
}

fn intersect(a: &Policy, b: &Policy) -> Policy {
    Policy {
        version: 1,
        filesystem_policy: filesystem(a, b),
        landlock: Landlock { compatibility: a.landlock.compatibility.max(b.landlock.compatibility) },
        process: process(a, b),
        network_policies: network(a, b),
        network_middlewares: middlewares(a, b),
    }
}

/// Both policies' middlewares: each blocks its hosts, so the boundary keeps all of them.
fn middlewares(a: &Policy, b: &Policy) -> BTreeMap<String, Middleware> {
    let mut out = a.network_middlewares.clone();
    for (k, m) in &b.network_middlewares {
        let mut key = k.clone();
        while out.contains_key(&key) {
            key.push('\'');
        }
        out.insert(key, m.clone());
    }
    out
}

/// One account both allow, or none: when the parent and the global maximum disagree (the
/// maximum may have changed after the parent was proved), no candidate may run at all.
fn process(a: &Policy, b: &Policy) -> Process {
    if a.process == b.process {
        return a.process.clone();
    }
    let none = "(none: the parent and the global maximum allow different accounts)".to_string();
    Process { run_as_user: none.clone(), run_as_group: none }
}

fn filesystem(a: &Policy, b: &Policy) -> FilesystemPolicy {
    let allows = |p: &Policy, mode, path: &String| p.allows(&Access::File { mode, path: path.clone() });
    // A path allowed by both lies beneath a grant of each; the deeper grant is the one kept.
    let keep = |mode: FileMode, la: Vec<&String>, lb: Vec<&String>| {
        let mut v: Vec<String> = la
            .into_iter()
            .filter(|p| allows(b, mode, p))
            .chain(lb.into_iter().filter(|p| allows(a, mode, p)))
            .cloned()
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let (fa, fb) = (&a.filesystem_policy, &b.filesystem_policy);
    let read_write = keep(FileMode::Write, fa.read_write.iter().collect(), fb.read_write.iter().collect());
    fn all(f: &FilesystemPolicy) -> Vec<&String> {
        f.read_only.iter().chain(&f.read_write).collect()
    }
    let mut read_only = keep(FileMode::Read, all(fa), all(fb));
    read_only.retain(|p| !read_write.contains(p));
    let workdir = Access::Workdir { mode: FileMode::Write };
    FilesystemPolicy { include_workdir: a.allows(&workdir) && b.allows(&workdir), read_only, read_write }
}

/// Every pair of named rules, one from each policy, whose endpoints intersect, in key
/// order. Only endpoints that share a port and a host can ([`endpoint`] needs a port of
/// both and one host glob inside the other), so each endpoint of `a` is paired only with
/// the endpoints of `b` that [`HostIndex::meeting`] finds: pairs left out would give no
/// endpoint, and the result is the same as pairing everything, in far fewer steps.
fn network(a: &Policy, b: &Policy) -> BTreeMap<String, NetworkPolicy> {
    let b_rules: Vec<(&String, &NetworkPolicy)> = b.network_policies.iter().collect();
    let b_eps: Vec<(usize, &Endpoint)> =
        b_rules.iter().enumerate().flat_map(|(j, (_, nb))| nb.endpoints.iter().map(move |e| (j, e))).collect();
    let mut index = HostIndex::default();
    for (k, (_, e)) in b_eps.iter().enumerate() {
        index.insert(&e.host, k);
    }
    let mut out = BTreeMap::new();
    for (ka, na) in &a.network_policies {
        // The endpoint pairs of `na` that may meet, by rule of `b` (in `b`'s key order).
        let mut meeting: BTreeMap<usize, Vec<(&Endpoint, &Endpoint)>> = BTreeMap::new();
        for ea in &na.endpoints {
            for k in index.meeting(&ea.host) {
                let (j, eb) = b_eps[k];
                if eb.ports.iter().any(|p| ea.ports.contains(p)) {
                    meeting.entry(j).or_default().push((ea, eb));
                }
            }
        }
        for (j, pairs) in meeting {
            let (kb, nb) = b_rules[j];
            let binaries = binaries(na, nb);
            if binaries.is_empty() {
                continue;
            }
            let mut endpoints: Vec<Endpoint> = pairs.into_iter().filter_map(|(ea, eb)| endpoint(ea, eb)).collect();
            endpoints.sort();
            endpoints.dedup();
            if endpoints.is_empty() {
                continue;
            }
            let key = unique_key(&out, ka, kb);
            out.insert(key, NetworkPolicy { name: na.name.clone(), endpoints, binaries });
        }
    }
    out
}

fn unique_key(taken: &BTreeMap<String, NetworkPolicy>, ka: &str, kb: &str) -> String {
    let base: String = if ka == kb { ka.to_string() } else { format!("{ka}.{kb}") };
    let base: String = base.chars().take(MAX_NAME_LEN - 4).collect();
    let mut key = base.clone();
    let mut n = 2;
    while taken.contains_key(&key) {
        key = format!("{base}.{n}");
        n += 1;
    }
    key
}

fn binaries(a: &NetworkPolicy, b: &NetworkPolicy) -> Vec<Binary> {
    let mut v: Vec<Binary> = a
        .binaries
        .iter()
        .flat_map(|x| b.binaries.iter().filter_map(move |y| narrower(Domain::Program, &x.path, &y.path)))
        .map(|path| Binary { path })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn endpoint(a: &Endpoint, b: &Endpoint) -> Option<Endpoint> {
    // An empty host (only with `allowed_ips`) is any host.
    let host = match (a.host.as_str(), b.host.as_str()) {
        ("", h) | (h, "") => h.to_string(),
        (x, y) => narrower(Domain::Host, x, y)?,
    };
    let ports: Vec<u16> = a.ports.iter().copied().filter(|p| b.ports.contains(p)).collect();
    if ports.is_empty() {
        return None;
    }
    let allowed_ips = ips(&a.allowed_ips, &b.allowed_ips)?;
    let path = match (&a.path, &b.path) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x.clone()),
        (Some(x), Some(y)) => Some(narrower(Domain::UrlPath, x, y)?),
    };
    let l4 = Endpoint {
        host,
        ports,
        protocol: Protocol::Tcp,
        enforcement: Enforcement::Audit,
        allowed_ips,
        path,
        ..Endpoint::default()
    };
    match (a.is_l4(), b.is_l4()) {
        (true, true) => Some(l4),
        (true, false) => rest_like(l4, b),
        (false, true) => rest_like(l4, a),
        (false, false) => {
            if !a.is_enforced_rest() || !b.is_enforced_rest() {
                return None;
            }
            let mut rules: Vec<L7Rule> = rules::allows(a)
                .into_iter()
                .flat_map(|x| rules::allows(b).into_iter().filter_map(move |y| l7(x, y)))
                .map(|allow| L7Rule { allow })
                .collect();
            rules.sort();
            rules.dedup();
            if rules.is_empty() {
                return None;
            }
            let mut deny_rules: Vec<L7Match> = a.deny_rules.iter().chain(&b.deny_rules).cloned().collect();
            deny_rules.sort();
            deny_rules.dedup();
            Some(Endpoint { protocol: Protocol::Rest, enforcement: Enforcement::Enforce, rules, deny_rules, ..l4 })
        }
    }
}

/// The L4 shape narrowed to an enforced rest endpoint's HTTP rules.
fn rest_like(l4: Endpoint, rest: &Endpoint) -> Option<Endpoint> {
    rest.is_enforced_rest().then(|| Endpoint {
        protocol: Protocol::Rest,
        enforcement: Enforcement::Enforce,
        access: rest.access,
        rules: rest.rules.clone(),
        deny_rules: rest.deny_rules.clone(),
        ..l4
    })
}

/// Addresses both lists allow (an empty list allows any); `None` when they share none.
/// Two CIDR networks are nested or disjoint, so the narrower of each nested pair is exact.
fn ips(a: &[IpNet], b: &[IpNet]) -> Option<Vec<IpNet>> {
    if a.is_empty() || b.is_empty() {
        return Some(if a.is_empty() { b.to_vec() } else { a.to_vec() });
    }
    let within = |x: &IpNet, y: &IpNet| {
        let ((xl, xh), (yl, yh)) = (x.range(), y.range());
        x.addr.is_ipv4() == y.addr.is_ipv4() && yl <= xl && xh <= yh
    };
    let mut v: Vec<IpNet> = a
        .iter()
        .flat_map(|x| b.iter().filter_map(move |y| if within(x, y) { Some(*x) } else { within(y, x).then_some(*y) }))
        .collect();
    v.sort();
    v.dedup();
    (!v.is_empty()).then_some(v)
}

/// Both rules' query constraints at once; `None` when a key has two different matchers
/// (their intersection is not one matcher: the pair is dropped, which only narrows).
fn queries(a: &L7Match, b: &L7Match) -> Option<BTreeMap<String, ValueMatcher>> {
    let mut out = a.query.clone();
    for (k, m) in &b.query {
        match out.get(k) {
            Some(x) if x != m => return None,
            _ => {
                out.insert(k.clone(), m.clone());
            }
        }
    }
    Some(out)
}

/// The methods both rules match, as one rule method: mirrors `openshell_policy::method_matches`
/// (`*` matches all, GET also HEAD), so GET and HEAD share exactly HEAD.
fn l7(a: &L7Match, b: &L7Match) -> Option<L7Match> {
    let method = match (a.method.as_str(), b.method.as_str()) {
        (x, y) if x == y => x,
        (ANY_METHOD, y) => y,
        (x, ANY_METHOD) => x,
        ("GET", "HEAD") | ("HEAD", "GET") => "HEAD",
        _ => return None,
    };
    let query = queries(a, b)?;
    Some(L7Match { query, ..L7Match::http(method, narrower(Domain::UrlPath, &a.path, &b.path)?) })
}

/// The narrower of two globs when one visibly contains the other.
pub(crate) fn narrower(domain: Domain, a: &str, b: &str) -> Option<String> {
    if contains(domain, a, b) {
        Some(b.to_string())
    } else if contains(domain, b, a) {
        Some(a.to_string())
    } else {
        None
    }
}

/// Whether glob `outer` matches everything glob `inner` does (sound, not complete).
fn contains(domain: Domain, outer: &str, inner: &str) -> bool {
    if outer == inner {
        return true;
    }
    let parse = |g: &str| match domain {
        Domain::Host => Glob::host(g),
        d => Glob::path(g, d),
    };
    let (Ok(o), Ok(i)) = (parse(outer), parse(inner)) else {
        return false;
    };
    if let Some(lit) = i.as_literal() {
        return o.matches(lit);
    }
    match (o.pieces.as_slice(), i.pieces.as_slice()) {
        ([Piece::SlashAny], _) => true,
        // `/p/**` holds `/p`, `/p/...` and anything whose literal start is `/p/`.
        ([Piece::Lit(p), Piece::SlashAny], [Piece::Lit(q), rest @ ..]) => {
            q.starts_with(&format!("{p}/")) || (q == p && matches!(rest, [] | [Piece::SlashAny]))
        }
        // `**.s` holds every host that ends in `.s` after a non-empty label.
        ([Piece::Plus, Piece::Lit(s)], [.., Piece::Lit(t)]) => {
            t.ends_with(s.as_str()) && (t.len() > s.len() || i.pieces.len() > 1)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// [`network`] as it was, every pair of named rules and of their endpoints: the index
    /// must change how fast, never what.
    fn all_pairs(a: &Policy, b: &Policy) -> BTreeMap<String, NetworkPolicy> {
        let mut out = BTreeMap::new();
        for (ka, na) in &a.network_policies {
            for (kb, nb) in &b.network_policies {
                let binaries = binaries(na, nb);
                let mut endpoints: Vec<Endpoint> = na
                    .endpoints
                    .iter()
                    .flat_map(|ea| nb.endpoints.iter().filter_map(move |eb| endpoint(ea, eb)))
                    .collect();
                endpoints.sort();
                endpoints.dedup();
                if binaries.is_empty() || endpoints.is_empty() {
                    continue;
                }
                let key = unique_key(&out, ka, kb);
                out.insert(key, NetworkPolicy { name: na.name.clone(), endpoints, binaries });
            }
        }
        out
    }

    fn policy() -> impl Strategy<Value = Policy> {
        const HOSTS: &[&str] = &[
            "a.example.com",
            "x.a.example.com",
            "*.example.com",
            "**.example.com",
            "**.a.example.com",
            "a*.example.com",
            "b.example.org",
            "",
        ];
        let endpoint = (
            prop::sample::select(HOSTS),
            prop::sample::subsequence(vec![80u16, 443, 8080], 1..=2),
            prop::sample::select(&["", ", protocol: rest, enforcement: enforce, access: read-only"][..]),
        )
            .prop_map(|(h, ports, l7)| {
                let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
                let host =
                    if h.is_empty() { "allowed_ips: ['10.0.0.0/8']".to_string() } else { format!("host: '{h}'") };
                format!("{{{host}, ports: [{}]{l7}}}", ports.join(", "))
            });
        let rule = (
            prop::collection::vec(endpoint, 1..4),
            prop::sample::subsequence(vec!["/usr/bin/curl", "/usr/bin/*", "/**"], 1..3),
        );
        // Same keys on both sides sometimes, so the merged names collide.
        let key = prop::sample::select(&["r", "s", "t"][..]);
        prop::collection::btree_map(key, rule, 0..4).prop_map(|rules| {
            let mut y = String::from("version: 1\nnetwork_policies:\n");
            for (k, (eps, bins)) in rules {
                let bins: Vec<String> = bins.iter().map(|b| format!("{{path: '{b}'}}")).collect();
                y.push_str(&format!(
                    "  {k}:\n    endpoints: [{}]\n    binaries: [{}]\n",
                    eps.join(", "),
                    bins.join(", ")
                ));
            }
            Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}\n{y}"))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn indexed_intersection_is_the_all_pairs_one(a in policy(), b in policy()) {
            prop_assert_eq!(network(&a, &b), all_pairs(&a, &b));
        }
    }

    #[test]
    fn containment_of_globs() {
        let p = Domain::UrlPath;
        assert!(contains(p, "/**", "/a/*/b"));
        assert!(contains(p, "/a/**", "/a/b/*"));
        assert!(contains(p, "/a/**", "/a/**"));
        assert!(contains(p, "/a/*", "/a/b"));
        assert!(!contains(p, "/a/**", "/a*"));
        assert!(!contains(p, "/a/*", "/a/**"));
        assert!(contains(Domain::Host, "**.example.com", "*.x.example.com"));
        assert!(contains(Domain::Host, "*.example.com", "api.example.com"));
        assert!(!contains(Domain::Host, "*.example.com", "**.example.com"));
    }
}
