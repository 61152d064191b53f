//! The network section's fast path: settles, without z3, the candidate endpoints that single
//! boundary endpoints cover part by part.
//!
//! A candidate endpoint allows the product (programs of its rule) x (its host glob) x (its
//! ports) x (its HTTP traffic). Split it into one piece per (program glob, port); a piece is
//! covered when one boundary endpoint has
//! - that port,
//! - a host glob containing the candidate's host glob,
//! - program globs whose union contains the piece's program glob, and
//! - HTTP authority containing the candidate's (L4 contains everything; enforced `rest`
//!   contains, method by method, the candidate's allowed-and-not-denied paths).
//!
//! Each containment is exact ([`crate::automaton`]) or a literal match; a search that gives
//! up counts as "not contained". If every piece is covered, every request the candidate
//! endpoint allows is allowed by the boundary (a request's program, or ancestor, that
//! matches the candidate glob also matches the boundary rule's globs), so the endpoint is
//! within. Anything else, including a candidate that only a union of boundary endpoints
//! covers, goes to z3. Results are cached per glob pair, per (program glob, boundary rule)
//! and per pair of HTTP rule sets within one check.

use std::collections::{BTreeMap, HashMap};

use openshell_policy::glob::Domain;
use openshell_policy::{
    ANY_METHOD, ANY_PATH, Access, AccessPreset, Endpoint, HttpRequest, L7Match, L7Rule, NetworkPolicy, NetworkRequest,
    Policy,
};

use crate::automaton::{Found, GlobId, Globs};

/// Requests [`Checker::witness`] tries before leaving an endpoint to z3.
const MAX_WITNESS_TRIES: usize = 24;
/// Boundary endpoints [`Checker::kind_witness`] sorts requests against.
const MAX_KIND_BOUNDS: usize = 32;
/// Kind combinations [`Checker::kind_witness`] looks through for one piece.
const MAX_KIND_COMBINATIONS: usize = 4096;
/// Boundary globs one witness search may take as its union.
const MAX_WITNESS_UNION: usize = 64;

/// An endpoint with the named rule (and so the programs) it belongs to.
#[derive(Clone, Copy)]
pub struct Ep<'a> {
    pub rule: &'a NetworkPolicy,
    pub ep: &'a Endpoint,
}

/// What decides an endpoint's HTTP authority; equal keys mean equal authority.
type L7Key<'a> = (bool, bool, Option<AccessPreset>, &'a [L7Rule], &'a [L7Match]);

fn l7_key(ep: &Endpoint) -> L7Key<'_> {
    (ep.is_l4(), ep.is_enforced_rest(), ep.access, &ep.rules, &ep.deny_rules)
}

struct Bound<'a> {
    ep: &'a Endpoint,
    host: Option<GlobId>,
    /// Index into `Checker::rules`.
    rule: usize,
    l7: usize,
}

pub struct Checker<'a> {
    globs: Globs,
    /// Every loop here looks at it: a spent budget stops the search ("not settled here").
    budget: crate::Budget,
    bounds: Vec<Bound<'a>>,
    /// Program globs of each boundary rule (`None` if one did not parse).
    rules: Vec<Option<Vec<GlobId>>>,
    /// Boundary endpoints by host suffix (see [`host_bucket`]).
    buckets: HashMap<String, Vec<usize>>,
    l7_ids: BTreeMap<L7Key<'a>, usize>,
    l7_eps: Vec<&'a Endpoint>,
    host_cache: HashMap<(GlobId, GlobId), bool>,
    program_cache: HashMap<(GlobId, usize), bool>,
    l7_cache: HashMap<(usize, usize), Gap>,
}

/// How a candidate endpoint's HTTP authority exceeds a boundary endpoint's.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Gap {
    /// It does not: contained.
    None,
    /// Raw (non-HTTP) traffic.
    Raw,
    /// This method and path.
    Http(String, String),
    /// Not decided here.
    Unknown,
}

/// The labels of a host glob right of its last wildcard label, joined: every host the glob
/// matches ends in them. A glob can only contain (or match) hosts whose labels end in its
/// own literal labels, so a lookup reads the buckets of every label suffix of the inner
/// glob's literal labels (see [`lookup_keys`]); the empty key holds globs whose labels are
/// all wildcards. Missing a bucket could only cost a z3 query, never a wrong "within".
fn host_bucket(host: &str) -> String {
    let labels: Vec<&str> = host.split('.').collect();
    let first = labels.iter().rposition(|l| l.contains('*')).map_or(0, |i| i + 1);
    labels[first..].join(".")
}

/// The bucket keys whose boundary globs may contain or match `host` (a glob or a name).
fn lookup_keys(host: &str) -> Vec<String> {
    let literal = host_bucket(host);
    let mut keys = vec![String::new()];
    if literal.is_empty() {
        return keys;
    }
    let labels: Vec<&str> = literal.split('.').collect();
    for i in 0..labels.len() {
        keys.push(labels[i..].join("."));
    }
    keys
}

impl<'a> Checker<'a> {
    pub fn new(bounds: &[Ep<'a>], budget: &crate::Budget) -> Self {
        let mut c = Checker {
            globs: Globs::with_budget(budget.clone()),
            budget: budget.clone(),
            bounds: Vec::new(),
            rules: Vec::new(),
            buckets: HashMap::new(),
            l7_ids: BTreeMap::new(),
            l7_eps: Vec::new(),
            host_cache: HashMap::new(),
            program_cache: HashMap::new(),
            l7_cache: HashMap::new(),
        };
        let mut rule_ids: HashMap<*const NetworkPolicy, usize> = HashMap::new();
        for b in bounds {
            let rule = *rule_ids.entry(b.rule as *const _).or_insert_with(|| {
                let ids: Option<Vec<GlobId>> =
                    b.rule.binaries.iter().map(|x| c.globs.id(Domain::Program, &x.path)).collect();
                c.rules.push(ids);
                c.rules.len() - 1
            });
            let host = c.globs.id(Domain::Host, &b.ep.host);
            let l7 = c.l7_id(b.ep);
            c.buckets.entry(host_bucket(&b.ep.host)).or_default().push(c.bounds.len());
            c.bounds.push(Bound { ep: b.ep, host, rule, l7 });
        }
        c
    }

    fn l7_id(&mut self, ep: &'a Endpoint) -> usize {
        let n = self.l7_ids.len();
        let id = *self.l7_ids.entry(l7_key(ep)).or_insert(n);
        if id == n {
            self.l7_eps.push(ep);
        }
        id
    }

    /// Whether single boundary endpoints cover every (program, port) piece of `c`.
    /// `false` means "not proved here", not "exceeds".
    pub fn covered(&mut self, c: &Ep<'a>) -> bool {
        let Some(host) = self.globs.id(Domain::Host, &c.ep.host) else {
            return false;
        };
        let programs: Option<Vec<GlobId>> =
            c.rule.binaries.iter().map(|b| self.globs.id(Domain::Program, &b.path)).collect();
        let Some(programs) = programs else {
            return false;
        };
        let l7 = self.l7_id(c.ep);
        let candidates = self.near(&c.ep.host);
        // Boundary endpoints whose host and HTTP authority contain the candidate's.
        let useful: Vec<usize> = candidates
            .into_iter()
            .filter(|&i| {
                let b = &self.bounds[i];
                !self.budget.spent()
                    && b.ep.ports.iter().any(|p| c.ep.ports.contains(p))
                    && b.host.is_some_and(|bh| self.host_covered(host, bh))
                    && self.l7_covered(l7, self.bounds[i].l7)
            })
            .collect();
        if useful.is_empty() {
            return false;
        }
        for &g in &programs {
            for port in &c.ep.ports {
                if self.budget.spent() {
                    return false;
                }
                let piece = useful.iter().any(|&i| {
                    let (rule, has_port) = {
                        let b = &self.bounds[i];
                        (b.rule, b.ep.ports.contains(port))
                    };
                    has_port && self.program_covered(g, rule)
                });
                if !piece {
                    return false;
                }
            }
        }
        true
    }

    /// Tries to build a concrete request that `c` allows and the boundary does not, from
    /// the globs' samples and the gaps the containment searches found. Every request is
    /// confirmed by the matcher on both policies before it is returned; `None` means none
    /// of the few tried was one (z3 decides then).
    pub fn witness(&mut self, c: &Ep<'a>, boundary: &Policy, candidate: &Policy) -> Option<NetworkRequest> {
        let host_id = self.globs.id(Domain::Host, &c.ep.host)?;
        let near = self.near(&c.ep.host);
        let mut near_rules: Vec<usize> = near.iter().map(|&i| self.bounds[i].rule).collect();
        near_rules.sort_unstable();
        near_rules.dedup();
        let mut near_bins: Vec<GlobId> =
            near_rules.iter().filter_map(|&r| self.rules[r].as_ref()).flatten().copied().collect();
        near_bins.sort_unstable();
        near_bins.dedup();
        let mut near_hosts: Vec<GlobId> = near.iter().filter_map(|&i| self.bounds[i].host).collect();
        near_hosts.sort_unstable();
        near_hosts.dedup();

        let mut programs = Vec::new();
        for b in c.rule.binaries.iter().take(2) {
            let g = self.globs.id(Domain::Program, &b.path)?;
            if near_bins.len() <= MAX_WITNESS_UNION {
                let found = self.globs.find(Domain::Program, &[&[g], &near_bins], |m| m[0] && !m[1]);
                if let Found::Witness(w) = found {
                    programs.push(w);
                }
            }
            programs.push(self.globs.sample(g));
        }
        let mut hosts = Vec::new();
        if near_hosts.len() <= MAX_WITNESS_UNION {
            let found = self.globs.find(Domain::Host, &[&[host_id], &near_hosts], |m| m[0] && !m[1]);
            if let Found::Witness(w) = found {
                hosts.push(w);
            }
        }
        hosts.push(self.globs.sample(host_id));
        let mut ports = c.ep.ports.clone();
        ports.sort_by_key(|p| near.iter().any(|&i| self.bounds[i].ep.ports.contains(p)));
        let mut https: Vec<Option<HttpRequest>> = Vec::new();
        if c.ep.is_l4() {
            https.push(None);
        } else {
            let l7 = self.l7_id(c.ep);
            for &i in near.iter().take(16) {
                if let Gap::Http(method, path) = self.l7_gap(l7, self.bounds[i].l7) {
                    https.push(Some(HttpRequest { method, path, ..Default::default() }));
                }
            }
            for (method, path) in allows(c.ep).into_iter().take(4) {
                let method = if method == ANY_METHOD { "GET" } else { method };
                let path = self.globs.id(Domain::UrlPath, path)?;
                https.push(Some(HttpRequest {
                    method: method.into(),
                    path: self.globs.sample(path),
                    ..Default::default()
                }));
            }
        }
        dedup_in_order(&mut programs);
        dedup_in_order(&mut hosts);
        dedup_in_order(&mut https);
        let mut tries = 0;
        for http in https.iter().take(8) {
            for program in programs.iter().take(3) {
                for host in hosts.iter().take(2) {
                    for &port in ports.iter().take(2) {
                        tries += 1;
                        if tries > MAX_WITNESS_TRIES || self.budget.spent() {
                            return None;
                        }
                        let req = NetworkRequest {
                            program: program.clone(),
                            ancestors: vec![],
                            host: host.clone(),
                            port,
                            http: http.clone(),
                            addr: None,
                        };
                        if self.near_allows(&req) {
                            continue;
                        }
                        let access = Access::Network(req);
                        if candidate.allows(&access) && !boundary.allows(&access) {
                            let Access::Network(req) = access else { unreachable!() };
                            return Some(req);
                        }
                    }
                }
            }
        }
        None
    }

    /// A request that `c` allows and the boundary does not, found by sorting each
    /// dimension into kinds: for one (program glob, port) piece of `c` and the boundary
    /// endpoints near it with that port, the distinct vectors "which of them match" that
    /// programs, hosts and HTTP requests of `c` realize (with an example each). The
    /// dimensions are independent, so every combination of kinds is a real request of `c`;
    /// one no boundary endpoint matches in all three is the witness. Confirmed by the
    /// matcher like [`Checker::witness`]; `None` leaves `c` to z3.
    pub fn kind_witness(&mut self, c: &Ep<'a>, boundary: &Policy, candidate: &Policy) -> Option<NetworkRequest> {
        let host = self.globs.id(Domain::Host, &c.ep.host)?;
        let near = self.near(&c.ep.host);
        for b in &c.rule.binaries {
            let g = self.globs.id(Domain::Program, &b.path)?;
            for &port in &c.ep.ports {
                if self.budget.spent() {
                    return None;
                }
                let bs: Vec<usize> = near
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let b = &self.bounds[i];
                        b.ep.ports.contains(&port) && b.host.is_some() && self.rules[b.rule].is_some()
                    })
                    .collect();
                if bs.len() > MAX_KIND_BOUNDS {
                    continue;
                }
                let mut groups: Vec<Vec<GlobId>> = vec![vec![g]];
                groups.extend(bs.iter().map(|&i| self.rules[self.bounds[i].rule].clone().unwrap_or_default()));
                let refs: Vec<&[GlobId]> = groups.iter().map(Vec::as_slice).collect();
                let programs = self.globs.kinds(Domain::Program, &refs, |m| m[0])?;
                let mut groups: Vec<Vec<GlobId>> = vec![vec![host]];
                groups.extend(bs.iter().map(|&i| self.bounds[i].host.into_iter().collect()));
                let refs: Vec<&[GlobId]> = groups.iter().map(Vec::as_slice).collect();
                let hosts = self.globs.kinds(Domain::Host, &refs, |m| m[0])?;
                let https = self.http_kinds(c.ep, &bs)?;
                if programs.len() * hosts.len() * https.len() > MAX_KIND_COMBINATIONS {
                    continue;
                }
                for (pv, program) in &programs {
                    if self.budget.spent() {
                        return None;
                    }
                    for (hv, host) in &hosts {
                        for (lv, http) in &https {
                            if (0..bs.len()).any(|k| pv[k + 1] && hv[k + 1] && lv[k]) {
                                continue;
                            }
                            let access = Access::Network(NetworkRequest {
                                program: program.clone(),
                                ancestors: vec![],
                                host: host.clone(),
                                port,
                                http: http.clone(),
                                addr: None,
                            });
                            if candidate.allows(&access) && !boundary.allows(&access) {
                                let Access::Network(req) = access else { unreachable!() };
                                return Some(req);
                            }
                        }
                    }
                }
            }
        }
        None
    }

    /// The kinds of HTTP traffic `c` passes: for each, which of the boundary endpoints
    /// `bs` pass it, and an example (`None`: raw traffic, the only kind worth trying for an
    /// L4 `c`, since every endpoint that passes it passes any HTTP request too).
    #[allow(clippy::type_complexity)]
    fn http_kinds(&mut self, c: &Endpoint, bs: &[usize]) -> Option<Vec<(Vec<bool>, Option<HttpRequest>)>> {
        let eps: Vec<&Endpoint> = bs.iter().map(|&i| self.bounds[i].ep).collect();
        if c.is_l4() {
            return Some(vec![(eps.iter().map(|b| b.is_l4()).collect(), None)]);
        }
        if !c.is_enforced_rest() {
            return None;
        }
        let mut named: Vec<&str> = Vec::new();
        for ep in eps.iter().copied().chain([c]) {
            named.extend(allows(ep).into_iter().map(|(m, _)| m));
            named.extend(denies(ep).into_iter().map(|(m, _)| m));
        }
        named.push("HEAD");
        named.retain(|m| *m != ANY_METHOD);
        named.sort_unstable();
        named.dedup();
        let other = unnamed_method(&named);
        let classes: Vec<Option<&str>> = named.iter().copied().map(Some).chain([None]).collect();
        let mut out: Vec<(Vec<bool>, Option<HttpRequest>)> = Vec::new();
        for method in classes {
            if self.budget.spent() {
                return None;
            }
            let allowed = self.paths(allows(c), method)?;
            if allowed.is_empty() {
                continue;
            }
            let mut groups = vec![allowed, self.paths(denies(c), method)?];
            for b in &eps {
                if b.is_enforced_rest() {
                    groups.push(self.paths(allows(b), method)?);
                    groups.push(self.paths(denies(b), method)?);
                } else {
                    groups.extend([vec![], vec![]]);
                }
            }
            let refs: Vec<&[GlobId]> = groups.iter().map(Vec::as_slice).collect();
            let kinds = self.globs.kinds(Domain::UrlPath, &refs, |m| m[0] && !m[1])?;
            for (m, path) in kinds {
                let passes: Vec<bool> = eps
                    .iter()
                    .enumerate()
                    .map(|(k, b)| b.is_l4() || (b.is_enforced_rest() && m[2 + 2 * k] && !m[3 + 2 * k]))
                    .collect();
                if !out.iter().any(|(v, _)| *v == passes) {
                    let method = method.map_or(other.clone(), str::to_string);
                    out.push((passes, Some(HttpRequest { method, path, ..Default::default() })));
                }
            }
        }
        Some(out)
    }

    /// Whether a boundary endpoint with a host near the request's allows it; a cheap filter
    /// before the matcher, which has the last word.
    fn near_allows(&mut self, req: &NetworkRequest) -> bool {
        for i in self.near(&req.host) {
            let b = &self.bounds[i];
            if !b.ep.ports.contains(&req.port) || !b.host.is_some_and(|h| self.globs.glob(h).matches(&req.host)) {
                continue;
            }
            let program = self.rules[b.rule]
                .as_ref()
                .is_some_and(|ids| ids.iter().any(|&g| self.globs.glob(g).matches(&req.program)));
            if !program {
                continue;
            }
            let http = match (&req.http, b.ep.is_l4()) {
                (_, true) => true,
                (None, false) => false,
                (Some(h), false) => {
                    let ep = b.ep;
                    let hit = |rules: Vec<(&str, &str)>, globs: &mut Globs| {
                        rules.into_iter().any(|(m, p)| {
                            method_matches(m, &h.method)
                                && globs.id(Domain::UrlPath, p).is_some_and(|g| globs.glob(g).matches(&h.path))
                        })
                    };
                    ep.is_enforced_rest() && hit(allows(ep), &mut self.globs) && !hit(denies(ep), &mut self.globs)
                }
            };
            if http {
                return true;
            }
        }
        false
    }

    /// Boundary endpoints whose host glob may contain or match `host`.
    fn near(&self, host: &str) -> Vec<usize> {
        let mut out = Vec::new();
        for key in lookup_keys(host) {
            if let Some(v) = self.buckets.get(&key) {
                out.extend(v);
            }
        }
        out
    }

    fn host_covered(&mut self, inner: GlobId, outer: GlobId) -> bool {
        if let Some(&v) = self.host_cache.get(&(inner, outer)) {
            return v;
        }
        let v = self.globs.covered(Domain::Host, inner, &[outer]) == Some(true);
        self.host_cache.insert((inner, outer), v);
        v
    }

    fn program_covered(&mut self, inner: GlobId, rule: usize) -> bool {
        if let Some(&v) = self.program_cache.get(&(inner, rule)) {
            return v;
        }
        let v = match &self.rules[rule] {
            Some(outers) => self.globs.covered(Domain::Program, inner, outers) == Some(true),
            None => false,
        };
        self.program_cache.insert((inner, rule), v);
        v
    }

    fn l7_covered(&mut self, inner: usize, outer: usize) -> bool {
        self.l7_gap(inner, outer) == Gap::None
    }

    fn l7_gap(&mut self, inner: usize, outer: usize) -> Gap {
        if inner == outer {
            return Gap::None;
        }
        if let Some(v) = self.l7_cache.get(&(inner, outer)) {
            return v.clone();
        }
        let (c, b) = (self.l7_eps[inner], self.l7_eps[outer]);
        let v = self.http_gap(c, b);
        self.l7_cache.insert((inner, outer), v.clone());
        v
    }

    /// Whether every request endpoint `c` passes (host and port aside), `b` passes too, and
    /// if not, what HTTP traffic shows it.
    fn http_gap(&mut self, c: &Endpoint, b: &Endpoint) -> Gap {
        if b.is_l4() {
            return Gap::None;
        }
        // Raw traffic through `c` is not something an HTTP-only `b` covers; an opaque `c` is
        // refused before this point, and an opaque `b` passes nothing.
        if c.is_l4() {
            return Gap::Raw;
        }
        if !c.is_enforced_rest() || !b.is_enforced_rest() {
            return Gap::Unknown;
        }
        // Methods fall into classes: each method any of the rules names (HEAD too, which
        // GET rules also allow), and every other method, which only `*` and `full` allow.
        let mut named: Vec<&str> = Vec::new();
        for ep in [c, b] {
            named.extend(allows(ep).into_iter().map(|(m, _)| m));
            named.extend(denies(ep).into_iter().map(|(m, _)| m));
        }
        named.push("HEAD");
        named.retain(|m| *m != ANY_METHOD);
        named.sort_unstable();
        named.dedup();
        let other = unnamed_method(&named);
        let classes: Vec<Option<&str>> = named.iter().copied().map(Some).chain([None]).collect();
        for method in classes {
            if self.budget.spent() {
                return Gap::Unknown;
            }
            let Some(allowed) = self.paths(allows(c), method) else {
                return Gap::Unknown;
            };
            if allowed.is_empty() {
                continue;
            }
            let (Some(c_deny), Some(b_allow), Some(b_deny)) =
                (self.paths(denies(c), method), self.paths(allows(b), method), self.paths(denies(b), method))
            else {
                return Gap::Unknown;
            };
            if b_deny.is_empty() && allowed.iter().all(|a| b_allow.contains(a)) {
                continue;
            }
            // A path the candidate allows and does not deny, that the boundary does not
            // allow or does deny.
            let found = self
                .globs
                .find(Domain::UrlPath, &[&allowed, &c_deny, &b_allow, &b_deny], |m| m[0] && !m[1] && (!m[2] || m[3]));
            match found {
                Found::Nothing => continue,
                Found::Witness(path) => {
                    let m = method.map_or(other.clone(), str::to_string);
                    return Gap::Http(m, path);
                }
                Found::GaveUp => return Gap::Unknown,
            }
        }
        Gap::None
    }

    /// The path globs of the rules that apply to a method class (`None`: an unnamed method).
    fn paths(&mut self, rules: Vec<(&str, &str)>, method: Option<&str>) -> Option<Vec<GlobId>> {
        let mut out = Vec::new();
        for (rule_method, path) in rules {
            let applies = match method {
                Some(m) => method_matches(rule_method, m),
                None => rule_method == ANY_METHOD,
            };
            if applies {
                out.push(self.globs.id(Domain::UrlPath, path)?);
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }
}

/// The matcher's method rule: `*` matches all, a method itself, and GET also HEAD.
fn method_matches(rule: &str, method: &str) -> bool {
    rule == ANY_METHOD || rule == method || (rule == "GET" && method == "HEAD")
}

/// Keeps the first of equal items.
fn dedup_in_order<T: PartialEq + Clone>(v: &mut Vec<T>) {
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    for x in v.drain(..) {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    *v = out;
}

/// A method name none of `named` is (a valid method for the matcher).
fn unnamed_method(named: &[&str]) -> String {
    let mut m = String::from("XOTHER");
    while named.contains(&m.as_str()) {
        m.push('X');
    }
    m
}

/// An endpoint's allow rules as (method, path glob), its preset spelled out on every path.
fn allows(ep: &Endpoint) -> Vec<(&str, &str)> {
    match ep.access.map(|a| a.methods()) {
        Some(None) => vec![(ANY_METHOD, ANY_PATH)],
        Some(Some(ms)) => ms.iter().map(|m| (*m, ANY_PATH)).collect(),
        None => ep.rules.iter().map(|r| (r.allow.method.as_str(), r.allow.path.as_str())).collect(),
    }
}

fn denies(ep: &Endpoint) -> Vec<(&str, &str)> {
    ep.deny_rules.iter().map(|d| (d.method.as_str(), d.path.as_str())).collect()
}
