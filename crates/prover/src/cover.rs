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
//! covers, goes on to [`cells`] (and what they cannot decide, to z3). Results are cached
//! per glob pair, per (program glob, boundary rule) and per pair of HTTP rule sets within
//! one check.

use std::collections::{BTreeMap, HashMap};

use openshell_policy::glob::Domain;
use openshell_policy::{
    ANY_METHOD, Access, AccessPreset, Endpoint, HttpRequest, L7Match, L7Rule, NetworkPolicy, NetworkRequest, Policy,
    is_method, method_matches,
};

use crate::automaton::{Found, GlobId, Globs};
use crate::hosts::HostIndex;
use crate::rules;

mod cells;
pub use cells::Cells;

/// Requests [`Checker::witness`] tries before leaving an endpoint to the cells.
const MAX_WITNESS_TRIES: usize = 24;
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
    /// Boundary endpoints by their host globs' literal tails.
    hosts: HostIndex,
    l7_ids: BTreeMap<L7Key<'a>, usize>,
    l7_eps: Vec<&'a Endpoint>,
    host_cache: HashMap<(GlobId, GlobId), bool>,
    program_cache: HashMap<(GlobId, usize), bool>,
    l7_cache: HashMap<(usize, usize), Gap>,
    /// Searches for a program outside a union of boundary globs, by their glob ids.
    outside_cache: HashMap<(GlobId, Vec<GlobId>), Found>,
    /// The cells of one dimension ([`cells`]), by its groups of glob ids.
    cells_cache: HashMap<(Domain, Vec<Vec<GlobId>>), cells::Sorted<String>>,
    /// The HTTP cells, by the candidate's and the boundary endpoints' HTTP authority ids.
    http_cells_cache: HashMap<(usize, Vec<usize>), cells::Sorted<Option<HttpRequest>>>,
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

impl<'a> Checker<'a> {
    pub fn new(bounds: &[Ep<'a>], budget: &crate::Budget) -> Self {
        let mut c = Checker {
            globs: Globs::with_budget(budget.clone()),
            budget: budget.clone(),
            bounds: Vec::new(),
            rules: Vec::new(),
            hosts: HostIndex::default(),
            l7_ids: BTreeMap::new(),
            l7_eps: Vec::new(),
            host_cache: HashMap::new(),
            program_cache: HashMap::new(),
            l7_cache: HashMap::new(),
            outside_cache: HashMap::new(),
            cells_cache: HashMap::new(),
            http_cells_cache: HashMap::new(),
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
            c.hosts.insert(&b.ep.host, c.bounds.len());
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
                    && self.l7_covered(l7, self.bounds[i].l7)
                    && self.bounds[i].host.is_some_and(|bh| self.host_covered(host, bh))
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
    /// of the few tried was one (the cells, then z3, decide).
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
                let key = (g, near_bins.clone());
                let found = match self.outside_cache.get(&key) {
                    Some(f) => f.clone(),
                    None => {
                        let f = self.globs.find(Domain::Program, &[&[g], &near_bins], |m| m[0] && !m[1]);
                        self.outside_cache.insert(key, f.clone());
                        f
                    }
                };
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
            for rule in rules::allows(c.ep).into_iter().take(4) {
                let method = if rule.method == ANY_METHOD { "GET" } else { rule.method.as_str() };
                let path = self.globs.id(Domain::UrlPath, &rule.path)?;
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
                    let hit = |rules: Vec<&L7Match>, globs: &mut Globs| {
                        rules.into_iter().any(|r| {
                            method_matches(&r.method, &h.method)
                                && globs.id(Domain::UrlPath, &r.path).is_some_and(|g| globs.glob(g).matches(&h.path))
                        })
                    };
                    ep.is_enforced_rest()
                        && hit(rules::allows(ep), &mut self.globs)
                        && !hit(rules::denies(ep), &mut self.globs)
                }
            };
            if http {
                return true;
            }
        }
        false
    }

    /// Boundary endpoints whose host glob may contain or match `host` (missing one could
    /// only cost a z3 query, never a wrong "within").
    fn near(&self, host: &str) -> Vec<usize> {
        self.hosts.containing(host)
    }

    /// Boundary endpoints whose host glob may share a host with `host`: wider, equal and
    /// narrower globs alike.
    fn overlapping(&self, host: &str) -> Vec<usize> {
        self.hosts.meeting(host)
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
        let (classes, other) = method_classes(&[c, b]);
        for method in classes {
            if self.budget.spent() {
                return Gap::Unknown;
            }
            let Some(allowed) = self.paths(rules::allows(c), method) else {
                return Gap::Unknown;
            };
            if allowed.is_empty() {
                continue;
            }
            let (Some(c_deny), Some(b_allow), Some(b_deny)) = (
                self.paths(rules::denies(c), method),
                self.paths(rules::allows(b), method),
                self.paths(rules::denies(b), method),
            ) else {
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

    /// The path globs of the rules that apply to a method class (`None`: an unnamed method,
    /// which only `*` matches).
    fn paths(&mut self, rules: Vec<&L7Match>, method: Option<&str>) -> Option<Vec<GlobId>> {
        let mut out = Vec::new();
        for r in rules {
            let applies = match method {
                Some(m) => method_matches(&r.method, m),
                None => r.method == ANY_METHOD,
            };
            if applies {
                out.push(self.globs.id(Domain::UrlPath, &r.path)?);
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }
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

/// The classes HTTP methods fall into for the rules of `eps`: each method a rule names
/// (HEAD too, since a GET rule matches it: `openshell_policy::method_matches`), and every
/// other method, which only `*` matches (`None`; the name is one such method). Methods the
/// matcher refuses (`openshell_policy::is_method`) are no class: no request carries them.
pub(crate) fn method_classes<'e>(eps: &[&'e Endpoint]) -> (Vec<Option<&'e str>>, String) {
    let mut named: Vec<&str> = vec!["HEAD"];
    for ep in eps {
        named.extend(rules::allows(ep).into_iter().chain(rules::denies(ep)).map(|r| r.method.as_str()));
    }
    named.retain(|m| *m != ANY_METHOD && is_method(m));
    named.sort_unstable();
    named.dedup();
    let mut other = String::from("XOTHER");
    while named.contains(&other.as_str()) {
        other.push('X');
    }
    (named.into_iter().map(Some).chain([None]).collect(), other)
}
