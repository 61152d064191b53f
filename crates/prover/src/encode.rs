//! z3 terms for the matcher's network semantics: globs become regular expressions over the
//! same character domains the matcher accepts, ports are integers, and one formula per
//! endpoint says "this endpoint allows the symbolic request". Built from the same
//! predicates (`is_l4`, `is_enforced_rest`, method rules) as `openshell_policy`'s matcher.

use std::collections::HashMap;

use openshell_policy::glob::{Domain, Glob, Piece};
use openshell_policy::{ANY_METHOD, Endpoint, L7Match, NetworkPolicy};
use z3::ast::{Bool, Int, Regexp, String as Str};

use crate::rules;

/// The symbolic request: program, host, port, whether it is raw (non-HTTP) traffic, and
/// the HTTP method and path when it is not.
pub struct Request {
    pub program: Str,
    pub host: Str,
    pub port: Int,
    pub raw: Bool,
    pub method: Str,
    pub path: Str,
}

/// Builds terms, caching one regex per glob text.
pub struct Encoder {
    regexes: HashMap<(Domain, String), Regexp>,
    pub req: Request,
}

impl Encoder {
    pub fn new() -> Self {
        Encoder {
            regexes: HashMap::new(),
            req: Request {
                program: Str::new_const("program"),
                host: Str::new_const("host"),
                port: Int::new_const("port"),
                raw: Bool::new_const("raw"),
                method: Str::new_const("method"),
                path: Str::new_const("path"),
            },
        }
    }

    /// Every field lies in the matcher's domain, so a model is a request it can judge.
    pub fn domain(&self) -> Bool {
        let r = &self.req;
        let label = class(Domain::Host, Some(b'.')).plus();
        let host = Regexp::concat(&[&label, &Regexp::concat(&[&Regexp::literal("."), &label]).star()]);
        let method_chars = Regexp::union(&[&Regexp::range(&'A', &'Z'), &Regexp::literal("-"), &Regexp::literal("_")]);
        let absolute = |d: Domain| Regexp::concat(&[&Regexp::literal("/"), &class(d, None).star()]);
        Bool::and(&[
            &r.host.regex_matches(&host),
            &r.program.regex_matches(&absolute(Domain::Program)),
            &r.path.regex_matches(&absolute(Domain::UrlPath)),
            &r.method.regex_matches(&Regexp::concat(&[&Regexp::range(&'A', &'Z'), &method_chars.r#loop(0, 31)])),
            &r.port.ge(Int::from_u64(1)),
            &r.port.le(Int::from_u64(65535)),
        ])
    }

    fn glob(&mut self, domain: Domain, text: &str) -> Regexp {
        let key = (domain, text.to_string());
        if let Some(re) = self.regexes.get(&key) {
            return re.clone();
        }
        let glob = match domain {
            Domain::Host => Glob::host(text),
            _ => Glob::path(text, domain),
        }
        .expect("validated policies hold valid globs");
        let re = glob_regex(&glob);
        self.regexes.insert(key, re.clone());
        re
    }

    /// The request's program matches one of the rule's program globs.
    pub fn binaries(&mut self, np: &NetworkPolicy) -> Bool {
        let parts: Vec<Bool> = np
            .binaries
            .iter()
            .map(|b| {
                let re = self.glob(Domain::Program, &b.path);
                self.req.program.regex_matches(&re)
            })
            .collect();
        or(&parts)
    }

    /// The endpoint allows the request (program aside).
    pub fn endpoint(&mut self, ep: &Endpoint) -> Bool {
        let host_re = self.glob(Domain::Host, &ep.host);
        let host = self.req.host.regex_matches(&host_re);
        let ports: Vec<Bool> = ep.ports.iter().map(|p| self.req.port.eq(Int::from_u64(u64::from(*p)))).collect();
        let port = or(&ports);
        // As `openshell_policy::endpoint_allows_at`: L4 passes anything, enforced rest an
        // HTTP request an allow rule matches and no deny rule does.
        let l7 = if ep.is_l4() {
            Bool::from_bool(true)
        } else if ep.is_enforced_rest() {
            let allows: Vec<Bool> = rules::allows(ep).into_iter().map(|r| self.l7(r)).collect();
            let allow = or(&allows);
            let denies: Vec<Bool> = rules::denies(ep).into_iter().map(|d| self.l7(d)).collect();
            Bool::and(&[&self.req.raw.not(), &allow, &or(&denies).not()])
        } else {
            // Enforced opaque protocol: decided by its own handler, the matcher allows nothing.
            Bool::from_bool(false)
        };
        Bool::and(&[&host, &port, &l7])
    }

    /// The request's method matches a rule's: mirrors `openshell_policy::method_matches`
    /// (`*` matches all, GET also HEAD).
    fn method(&self, rule: &str) -> Bool {
        if rule == ANY_METHOD {
            return Bool::from_bool(true);
        }
        let m = &self.req.method;
        if rule == "GET" {
            return Bool::or(&[&m.eq(Str::from("GET")), &m.eq(Str::from("HEAD"))]);
        }
        m.eq(Str::from(rule))
    }

    /// A rule's method and path match: mirrors `openshell_policy::l7_matches`.
    fn l7(&mut self, m: &L7Match) -> Bool {
        let method = self.method(&m.method);
        let re = self.glob(Domain::UrlPath, &m.path);
        Bool::and(&[&method, &self.req.path.regex_matches(&re)])
    }
}

/// Disjunction that stays well-formed for zero or one operand.
pub fn or(parts: &[Bool]) -> Bool {
    match parts {
        [] => Bool::from_bool(false),
        [one] => one.clone(),
        _ => Bool::or(&parts.iter().collect::<Vec<_>>()),
    }
}

/// One character of the domain, optionally excluding one byte.
fn class(domain: Domain, except: Option<u8>) -> Regexp {
    let mut ranges = Vec::new();
    for &(lo, hi) in domain.char_ranges() {
        match except {
            Some(x) if lo <= x && x <= hi => {
                if lo < x {
                    ranges.push((lo, x - 1));
                }
                if x < hi {
                    ranges.push((x + 1, hi));
                }
            }
            _ => ranges.push((lo, hi)),
        }
    }
    let res: Vec<Regexp> = ranges.into_iter().map(|(lo, hi)| Regexp::range(&char::from(lo), &char::from(hi))).collect();
    match res.as_slice() {
        [one] => one.clone(),
        _ => Regexp::union(&res.iter().collect::<Vec<_>>()),
    }
}

/// The regular expression of a parsed glob; same language as `Glob::matches` on the domain.
pub fn glob_regex(glob: &Glob) -> Regexp {
    let parts: Vec<Regexp> = glob
        .pieces
        .iter()
        .map(|p| match p {
            Piece::Lit(s) => Regexp::literal(s),
            Piece::Star => class(glob.domain, Some(glob.domain.separator())).star(),
            Piece::SlashAny => Regexp::concat(&[&Regexp::literal("/"), &class(glob.domain, None).star()]).option(),
            Piece::Plus => class(glob.domain, None).plus(),
        })
        .collect();
    match parts.as_slice() {
        [] => Regexp::literal(""),
        [one] => one.clone(),
        _ => Regexp::concat(&parts.iter().collect::<Vec<_>>()),
    }
}
