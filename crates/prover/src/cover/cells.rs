//! A candidate endpoint covered only by a union of boundary endpoints, decided without z3.
//!
//! Split the endpoint into pieces, one per (program glob, port). For one piece and the
//! boundary endpoints with that port whose hosts may meet its own (wider, equal and
//! narrower host globs alike: [`Checker::overlapping`]), each dimension falls into cells: the
//! programs, hosts and HTTP requests of the piece sorted by which of those boundary
//! endpoints match them, found exactly (with an example each) by the glob automata
//! ([`Globs::kinds`]), so the cells are cut by the boundary's own host, program and path
//! globs. The piece is the product of its dimensions, so every combination of cells is
//! realized by real requests, all treated alike by every boundary endpoint: the piece is
//! covered exactly when each combination has one boundary endpoint that matches it in all
//! three dimensions. A combination that none matches gives a counterexample, confirmed by
//! the matcher before it is returned.
//!
//! Exactness rests on the searches: each finds every cell that strings of the domain can
//! realize (more only where the domain's length limits are not modelled, which can make a
//! piece look uncovered, never covered). Leaving a boundary endpoint out also only makes a
//! piece look uncovered, and an uncovered combination whose example the matcher does not
//! confirm is [`Cells::Undecided`], as is anything over the limits below: z3 decides those.

use openshell_policy::glob::Domain;
use openshell_policy::{Access, Endpoint, HttpRequest, NetworkRequest, Policy};

use super::{Checker, Ep, method_classes};
use crate::automaton::{Found, GlobId};
use crate::rules;

/// Boundary endpoints one piece may be sorted against (one bit each in a cell's mask).
const MAX_CELL_BOUNDS: usize = 64;
/// Combinations of cells one piece may have.
const MAX_CELL_COMBINATIONS: usize = 1 << 16;

/// What the cells say about one candidate endpoint.
#[derive(Debug)]
pub enum Cells {
    /// Every request it allows, the boundary allows.
    Covered,
    /// A request it allows and the boundary does not (confirmed by the matcher).
    Excess(NetworkRequest),
    /// Not decided here.
    Undecided,
}

/// One cell of a dimension: which boundary endpoints (bits) match it, and an example.
pub(super) type Cell<T> = (u64, T);

/// A dimension's cells; `None` when the search gave up.
pub(super) type Sorted<T> = Option<Vec<Cell<T>>>;

impl<'a> Checker<'a> {
    /// Decides `c` against the union of the boundary endpoints that may share a host with
    /// it; `boundary` and `candidate` are the policies `c` and those endpoints come from,
    /// for the matcher.
    pub fn cells(&mut self, c: &Ep<'a>, boundary: &Policy, candidate: &Policy) -> Cells {
        self.try_cells(c, boundary, candidate).unwrap_or(Cells::Undecided)
    }

    fn try_cells(&mut self, c: &Ep<'a>, boundary: &Policy, candidate: &Policy) -> Option<Cells> {
        if !modelled(c.ep) {
            return None;
        }
        let host = self.globs.id(Domain::Host, &c.ep.host)?;
        let mut near: Vec<usize> = self
            .overlapping(&c.ep.host)
            .into_iter()
            .filter(|&i| {
                let b = &self.bounds[i];
                modelled(b.ep) && self.rules[b.rule].is_some() && b.host.is_some()
            })
            .collect();
        // Over the limit, keep only those that can match one of `c`'s hosts: the rest match
        // no request of `c`, so leaving them out changes no cell.
        if near.len() > MAX_CELL_BOUNDS {
            near.retain(|&i| {
                let bh = self.bounds[i].host.unwrap_or(host);
                self.globs.find(Domain::Host, &[&[host], &[bh]], |m| m[0] && m[1]) != Found::Nothing
            });
        }
        let mut ports = c.ep.ports.clone();
        ports.sort_unstable();
        ports.dedup();
        // Ports whose near endpoints are the same set form one piece.
        let mut pieces: Vec<(u16, Vec<usize>)> = Vec::new();
        for port in ports {
            let bs: Vec<usize> = near.iter().copied().filter(|&i| self.bounds[i].ep.ports.contains(&port)).collect();
            if !pieces.iter().any(|(_, seen)| *seen == bs) {
                pieces.push((port, bs));
            }
        }
        let hosts_of = |checker: &mut Self, bs: &[usize]| -> Sorted<String> {
            let mut groups: Vec<Vec<GlobId>> = vec![vec![host]];
            groups.extend(bs.iter().map(|&i| checker.bounds[i].host.into_iter().collect()));
            checker.cells_of(Domain::Host, groups)
        };
        for (port, bs) in &pieces {
            if bs.len() > MAX_CELL_BOUNDS || self.budget.spent() {
                return None;
            }
            let hosts = hosts_of(self, bs)?;
            let https = self.http_cells(c.ep, bs)?;
            for b in &c.rule.binaries {
                let g = self.globs.id(Domain::Program, &b.path)?;
                let mut groups: Vec<Vec<GlobId>> = vec![vec![g]];
                groups.extend(bs.iter().map(|&i| self.rules[self.bounds[i].rule].clone().unwrap_or_default()));
                let programs = self.cells_of(Domain::Program, groups)?;
                if programs.len() * hosts.len() * https.len() > MAX_CELL_COMBINATIONS {
                    return None;
                }
                for (pm, program) in &programs {
                    if self.budget.spent() {
                        return None;
                    }
                    for (hm, host) in &hosts {
                        let both = pm & hm;
                        let Some((_, http)) = https.iter().find(|(lm, _)| lm & both == 0) else {
                            continue;
                        };
                        let access = Access::Network(NetworkRequest {
                            program: program.clone(),
                            ancestors: vec![],
                            host: host.clone(),
                            port: *port,
                            http: http.clone(),
                            addr: None,
                        });
                        if candidate.allows(&access) && !boundary.allows(&access) {
                            let Access::Network(req) = access else { unreachable!() };
                            return Some(Cells::Excess(req));
                        }
                        return None;
                    }
                }
            }
        }
        Some(Cells::Covered)
    }

    /// The cells of one dimension: group 0 is the candidate's glob, group `k + 1` the
    /// globs of boundary endpoint `k`; each cell's mask has bit `k` when that group matches.
    fn cells_of(&mut self, domain: Domain, groups: Vec<Vec<GlobId>>) -> Sorted<String> {
        let key = (domain, groups);
        if let Some(v) = self.cells_cache.get(&key) {
            return v.clone();
        }
        let refs: Vec<&[GlobId]> = key.1.iter().map(Vec::as_slice).collect();
        let kinds = self.globs.kinds(domain, &refs, |m| m[0]);
        let cells: Sorted<String> = kinds.map(|k| k.into_iter().map(|(m, example)| (mask(&m[1..]), example)).collect());
        // A search the budget stopped is no fact about the globs.
        if !self.budget.spent() {
            self.cells_cache.insert(key, cells.clone());
        }
        cells
    }

    /// The HTTP cells of the traffic `c` passes, against the boundary endpoints `bs`
    /// (`None` as the example: raw traffic, the only cell worth sorting for an L4 `c`,
    /// since a boundary endpoint that passes it, an L4 one, passes any HTTP request too).
    fn http_cells(&mut self, c: &'a Endpoint, bs: &[usize]) -> Sorted<Option<HttpRequest>> {
        let key = (self.l7_id(c), bs.iter().map(|&i| self.bounds[i].l7).collect());
        if let Some(v) = self.http_cells_cache.get(&key) {
            return v.clone();
        }
        let cells = self.sort_http(c, bs);
        if !self.budget.spent() {
            self.http_cells_cache.insert(key, cells.clone());
        }
        cells
    }

    fn sort_http(&mut self, c: &Endpoint, bs: &[usize]) -> Sorted<Option<HttpRequest>> {
        let eps: Vec<&'a Endpoint> = bs.iter().map(|&i| self.bounds[i].ep).collect();
        if c.is_l4() {
            let bits: Vec<bool> = eps.iter().map(|b| b.is_l4()).collect();
            return Some(vec![(mask(&bits), None)]);
        }
        if !c.is_enforced_rest() {
            return None;
        }
        let mut all: Vec<&Endpoint> = eps.clone();
        all.push(c);
        let (classes, other) = method_classes(&all);
        let mut out: Vec<Cell<Option<HttpRequest>>> = Vec::new();
        for method in classes {
            if self.budget.spent() {
                return None;
            }
            let allowed = self.paths(rules::allows(c), method)?;
            if allowed.is_empty() {
                continue;
            }
            // Groups: the candidate's allow and deny paths, then each boundary endpoint's.
            let mut groups = vec![allowed, self.paths(rules::denies(c), method)?];
            for b in &eps {
                if b.is_enforced_rest() {
                    groups.push(self.paths(rules::allows(b), method)?);
                    groups.push(self.paths(rules::denies(b), method)?);
                } else {
                    groups.extend([vec![], vec![]]);
                }
            }
            let refs: Vec<&[GlobId]> = groups.iter().map(Vec::as_slice).collect();
            let kinds = self.globs.kinds(Domain::UrlPath, &refs, |m| m[0] && !m[1])?;
            for (m, path) in kinds {
                // What `openshell_policy::endpoint_allows_at` decides for an endpoint
                // without `path`, `allowed_ips` or queries: L4 passes, enforced rest passes
                // an allowed path its deny rules do not match.
                let passes: Vec<bool> = eps
                    .iter()
                    .enumerate()
                    .map(|(k, b)| b.is_l4() || (b.is_enforced_rest() && m[2 + 2 * k] && !m[3 + 2 * k]))
                    .collect();
                let bits = mask(&passes);
                if !out.iter().any(|(seen, _)| *seen == bits) {
                    let method = method.map_or(other.clone(), str::to_string);
                    out.push((bits, Some(HttpRequest { method, path, ..Default::default() })));
                }
            }
        }
        Some(out)
    }
}

/// Whether the cells model the endpoint as the matcher reads it: L4 or enforced rest, with
/// none of the fields [`crate::approx`] and the address and query classes fold away
/// beforehand (`path`, `allowed_ips`, queries, credential handling).
fn modelled(ep: &Endpoint) -> bool {
    (ep.is_l4() || (ep.is_enforced_rest() && !ep.is_opaque()))
        && ep.path.is_none()
        && ep.allowed_ips.is_empty()
        && !ep.host.is_empty()
        && rules::allows(ep).iter().chain(&rules::denies(ep)).all(|r| r.query.is_empty())
}

fn mask(bits: &[bool]) -> u64 {
    bits.iter().enumerate().filter(|(_, b)| **b).fold(0, |m, (k, _)| m | 1 << k)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::Budget;

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(&format!("version: 1\nnetwork_policies:\n{yaml}")).unwrap()
    }

    fn eps(p: &Policy) -> Vec<Ep<'_>> {
        p.network_policies.values().flat_map(|np| np.endpoints.iter().map(move |ep| Ep { rule: np, ep })).collect()
    }

    /// The cells' answer for the candidate's only endpoint.
    fn cells(boundary: &str, candidate: &str) -> Cells {
        let (b, c) = (policy(boundary), policy(candidate));
        let budget = Budget::new(Instant::now() + Duration::from_secs(30));
        let bounds = eps(&b);
        let mut checker = Checker::new(&bounds, &budget);
        let cands = eps(&c);
        assert_eq!(cands.len(), 1);
        checker.cells(&cands[0], &b, &c)
    }

    fn rest(host: &str, rules: &[(&str, &str)]) -> String {
        let rules: Vec<String> =
            rules.iter().map(|(m, p)| format!("{{allow: {{method: '{m}', path: '{p}'}}}}")).collect();
        format!("{{host: '{host}', port: 443, protocol: rest, enforcement: enforce, rules: [{}]}}", rules.join(", "))
    }

    fn rule(name: &str, bin: &str, endpoints: &[String]) -> String {
        format!("  {name}:\n    endpoints: [{}]\n    binaries: [{{path: '{bin}'}}]\n", endpoints.join(", "))
    }

    #[test]
    fn a_union_of_method_endpoints_covers_and_a_gap_is_found() {
        let b = rule("get", "/usr/bin/*", &[rest("*.example.com", &[("GET", "/**")])])
            + &rule("post", "/usr/bin/curl", &[rest("a.example.com", &[("POST", "/a/*")])]);
        let c = rule("c", "/usr/bin/curl", &[rest("a.example.com", &[("GET", "/a/**"), ("POST", "/a/*")])]);
        assert!(matches!(cells(&b, &c), Cells::Covered));
        // POST one level deeper: no boundary endpoint has it.
        let c = rule("c", "/usr/bin/curl", &[rest("a.example.com", &[("GET", "/a/**"), ("POST", "/a/*/*")])]);
        let Cells::Excess(req) = cells(&b, &c) else { panic!("expected an excess") };
        let http = req.http.unwrap();
        assert_eq!((http.method.as_str(), req.host.as_str()), ("POST", "a.example.com"));
        assert!(http.path.starts_with("/a/") && http.path.matches('/').count() == 3, "{}", http.path);
        // Another program: only the GET endpoint lists it.
        let c = rule("c", "/usr/bin/wget", &[rest("a.example.com", &[("GET", "/a/**"), ("POST", "/a/*")])]);
        let Cells::Excess(req) = cells(&b, &c) else { panic!("expected an excess") };
        assert_eq!((req.program.as_str(), req.http.unwrap().method.as_str()), ("/usr/bin/wget", "POST"));
    }

    #[test]
    fn a_union_of_host_globs_covers_and_a_gap_is_found() {
        let b = rule("one", "/usr/bin/*", &[rest("*.example.com", &[("*", "/**")])])
            + &rule("deep", "/usr/bin/*", &[rest("**.*.example.com", &[("GET", "/**")])]);
        let c = rule("c", "/usr/bin/curl", &[rest("**.example.com", &[("GET", "/**")])]);
        assert!(matches!(cells(&b, &c), Cells::Covered));
        let c = rule("c", "/usr/bin/curl", &[rest("**.example.com", &[("POST", "/**")])]);
        let Cells::Excess(req) = cells(&b, &c) else { panic!("expected an excess") };
        assert_eq!(req.host.matches('.').count(), 3, "{}: a host two labels below example.com", req.host);
    }

    #[test]
    fn raw_traffic_needs_an_l4_endpoint() {
        let b = rule("l4", "/usr/bin/curl", &["{host: a.example.com, port: 443}".into()])
            + &rule("http", "/usr/bin/*", &[rest("a.example.com", &[("*", "/**")])]);
        let c = rule("c", "/usr/bin/curl", &["{host: a.example.com, port: 443}".into()]);
        assert!(matches!(cells(&b, &c), Cells::Covered));
        let c = rule("c", "/usr/bin/*", &["{host: a.example.com, port: 443}".into()]);
        let Cells::Excess(req) = cells(&b, &c) else { panic!("expected an excess") };
        assert!(req.http.is_none() && req.program != "/usr/bin/curl", "{req:?}");
    }

    #[test]
    fn more_boundary_endpoints_than_the_cells_sort_is_undecided() {
        // One method per boundary endpoint (XAA, XAB, ...), 33 endpoints per named rule.
        let letter = |k: usize| char::from(b'A' + (k % 26) as u8);
        let methods: Vec<String> = (0..=MAX_CELL_BOUNDS).map(|k| format!("X{}{}", letter(k / 26), letter(k))).collect();
        let mut b = String::new();
        for (i, chunk) in methods.chunks(33).enumerate() {
            let eps: Vec<String> = chunk.iter().map(|m| rest("a.example.com", &[(m, "/**")])).collect();
            b += &rule(&format!("r{i}"), "/usr/bin/curl", &eps);
        }
        let pairs: Vec<(&str, &str)> = methods.iter().map(|m| (m.as_str(), "/x")).collect();
        let c = rule("c", "/usr/bin/curl", &[rest("a.example.com", &pairs)]);
        assert!(matches!(cells(&b, &c), Cells::Undecided));
    }
}
