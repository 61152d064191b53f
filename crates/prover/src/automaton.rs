//! Exact, solver-free reasoning about globs: each glob becomes a small NFA over the bytes of
//! its [`Domain`], and [`Globs::find`] searches the product of several determinized glob
//! unions for a string on which a boolean condition over "which unions match" holds (for
//! example "the candidate glob matches and none of the boundary globs does").
//!
//! Why this is exact: a glob's transitions only ever test "this literal byte", "not the
//! separator" or "any byte", so all domain bytes that appear in no literal of the globs
//! involved (and are no separator) behave alike; one representative of them, plus every
//! such literal byte, is an alphabet on which the search loses nothing. The search also
//! runs a small automaton for the domain's shape (paths start with `/`; host labels are
//! non-empty), so strings outside the domain never count. The domain's length limits are
//! not modelled: that only adds strings, so a "no such string" answer still holds on the
//! real domain. A search that would exceed [`MAX_PRODUCT_STATES`] gives up
//! ([`Found::GaveUp`]), and callers treat that as "not proved".

use std::cell::OnceCell;
use std::collections::HashMap;

use rustc_hash::FxHashMap;

use openshell_policy::glob::{Domain, Glob, Piece};

/// Product states one search may visit before giving up.
pub const MAX_PRODUCT_STATES: usize = 4096;

#[derive(Clone, Copy)]
enum Pred {
    Byte(u8),
    NotSep,
    Any,
}

/// A glob's NFA: states `0..len`, start 0, one accepting state.
struct Nfa {
    trans: Vec<Vec<(Pred, u32)>>,
    /// Epsilon closure of every state, itself included, sorted.
    closure: Vec<Vec<u32>>,
    accept: u32,
    /// Every byte that occurs in one of the glob's literals.
    literal_bytes: Vec<u8>,
}

impl Nfa {
    fn new(glob: &Glob) -> Nfa {
        let mut trans: Vec<Vec<(Pred, u32)>> = vec![vec![]];
        let mut eps: Vec<Vec<u32>> = vec![vec![]];
        let fresh = |trans: &mut Vec<Vec<(Pred, u32)>>, eps: &mut Vec<Vec<u32>>| {
            trans.push(vec![]);
            eps.push(vec![]);
            (trans.len() - 1) as u32
        };
        let mut cur = 0u32;
        let mut literal_bytes = Vec::new();
        for piece in &glob.pieces {
            match piece {
                Piece::Lit(s) => {
                    for &b in s.as_bytes() {
                        literal_bytes.push(b);
                        let t = fresh(&mut trans, &mut eps);
                        trans[cur as usize].push((Pred::Byte(b), t));
                        cur = t;
                    }
                }
                Piece::Star => {
                    let t = fresh(&mut trans, &mut eps);
                    eps[cur as usize].push(t);
                    trans[t as usize].push((Pred::NotSep, t));
                    cur = t;
                }
                Piece::SlashAny => {
                    let inner = fresh(&mut trans, &mut eps);
                    let end = fresh(&mut trans, &mut eps);
                    eps[cur as usize].push(end);
                    trans[cur as usize].push((Pred::Byte(b'/'), inner));
                    trans[inner as usize].push((Pred::Any, inner));
                    eps[inner as usize].push(end);
                    cur = end;
                }
                Piece::Plus => {
                    let t = fresh(&mut trans, &mut eps);
                    trans[cur as usize].push((Pred::Any, t));
                    trans[t as usize].push((Pred::Any, t));
                    cur = t;
                }
            }
        }
        let closure = (0..trans.len())
            .map(|s| {
                // Most states (every literal byte's) have no epsilon move.
                if eps[s].is_empty() {
                    return vec![s as u32];
                }
                let mut seen = vec![false; trans.len()];
                let mut stack = vec![s as u32];
                seen[s] = true;
                while let Some(x) = stack.pop() {
                    for &y in &eps[x as usize] {
                        if !seen[y as usize] {
                            seen[y as usize] = true;
                            stack.push(y);
                        }
                    }
                }
                (0..trans.len() as u32).filter(|&i| seen[i as usize]).collect()
            })
            .collect();
        literal_bytes.sort_unstable();
        literal_bytes.dedup();
        Nfa { trans, closure, accept: cur, literal_bytes }
    }
}

enum Want {
    Skip,
    Keep,
    Stop,
}

/// Glob identifier inside one [`Globs`] arena.
pub type GlobId = u32;

/// The answer of a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No string in the domain satisfies the condition.
    Nothing,
    /// A string (in the domain's alphabet and shape) that satisfies it.
    Witness(String),
    /// Too many states; nothing is known.
    GaveUp,
}

/// A parsed glob, and its NFA once a search needs it (many globs, literal ones above all,
/// are only ever matched directly).
struct Entry {
    glob: Glob,
    nfa: OnceCell<Nfa>,
}

impl Entry {
    fn nfa(&self) -> &Nfa {
        self.nfa.get_or_init(|| Nfa::new(&self.glob))
    }
}

/// Parsed globs and their NFAs, each built once per distinct (domain, text).
#[derive(Default)]
pub struct Globs {
    entries: Vec<Entry>,
    /// Per domain (indexed by [`domain_slot`]), looked up by `&str`.
    ids: [HashMap<String, GlobId>; 3],
    /// A search gives up when it is spent (checked every few product states).
    budget: Option<crate::Budget>,
}

impl Globs {
    pub fn with_budget(budget: crate::Budget) -> Globs {
        Globs { budget: Some(budget), ..Globs::default() }
    }

    /// The id of a glob, parsing it on first use; `None` if it does not parse (validated
    /// policies never hold such globs, and callers then fall back to the solver).
    pub fn id(&mut self, domain: Domain, text: &str) -> Option<GlobId> {
        if let Some(&id) = self.ids[domain_slot(domain)].get(text) {
            return Some(id);
        }
        let glob = match domain {
            Domain::Host => Glob::host(text),
            d => Glob::path(text, d),
        }
        .ok()?;
        let id = self.entries.len() as GlobId;
        self.entries.push(Entry { glob, nfa: OnceCell::new() });
        self.ids[domain_slot(domain)].insert(text.to_string(), id);
        Some(id)
    }

    pub fn glob(&self, id: GlobId) -> &Glob {
        &self.entries[id as usize].glob
    }

    /// Searches for a string of `domain` on which `bad(matches)` holds, where `matches[g]`
    /// says whether some glob of `groups[g]` matches it. Group 0 is the subject: `bad` must
    /// be false whenever no glob of group 0 matches (the search prunes on it).
    pub fn find(&self, domain: Domain, groups: &[&[GlobId]], bad: impl Fn(&[bool]) -> bool) -> Found {
        let found = self.search(domain, groups, |m| if bad(m) { Want::Stop } else { Want::Skip });
        match found {
            None => Found::GaveUp,
            Some(v) => v.into_iter().next().map_or(Found::Nothing, |(_, w)| Found::Witness(w)),
        }
    }

    /// Every distinct `matches` vector (see [`Globs::find`]) of a domain string on which
    /// `subject(matches)` holds, each with one such string; `None` when the search gave up.
    pub fn kinds(
        &self,
        domain: Domain,
        groups: &[&[GlobId]],
        subject: impl Fn(&[bool]) -> bool,
    ) -> Option<Vec<(Vec<bool>, String)>> {
        let mut seen: Vec<Vec<bool>> = Vec::new();
        self.search(domain, groups, |m| {
            if subject(m) && !seen.iter().any(|s| s == m) {
                seen.push(m.to_vec());
                Want::Keep
            } else {
                Want::Skip
            }
        })
    }

    /// The product search behind [`Globs::find`] and [`Globs::kinds`]: visits every
    /// reachable product state in breadth-first order, asks `want` about each accepting one
    /// and collects the kept ones with their witness strings.
    fn search(
        &self,
        domain: Domain,
        groups: &[&[GlobId]],
        mut want: impl FnMut(&[bool]) -> Want,
    ) -> Option<Vec<(Vec<bool>, String)>> {
        let mut kept = Vec::new();
        // A literal subject has one string (none if it lies outside the domain): judge it
        // with the globs' own matching instead of walking the product.
        if let [only] = groups[0]
            && let Some(lit) = self.glob(*only).as_literal()
        {
            if domain.contains(lit) {
                let acc: Vec<bool> = groups.iter().map(|ids| ids.iter().any(|&g| self.glob(g).matches(lit))).collect();
                if !matches!(want(&acc), Want::Skip) {
                    kept.push((acc, lit.to_string()));
                }
            }
            return Some(kept);
        }
        // Lay every (group, glob) NFA out in one state space.
        struct Member<'a> {
            nfa: &'a Nfa,
            offset: u32,
            group: usize,
        }
        let mut members = Vec::new();
        let mut offset = 0u32;
        for (g, ids) in groups.iter().enumerate() {
            for &id in ids.iter() {
                let entry = &self.entries[id as usize];
                debug_assert_eq!(entry.glob.domain, domain);
                let nfa = entry.nfa();
                members.push(Member { nfa, offset, group: g });
                offset += nfa.trans.len() as u32;
            }
        }
        let total = offset as usize;
        // Global state -> (member, local state).
        let mut owner = Vec::with_capacity(total);
        for (m, mem) in members.iter().enumerate() {
            owner.extend((0..mem.nfa.trans.len() as u32).map(|s| (m as u32, s)));
        }
        let subject_end =
            members.iter().filter(|m| m.group == 0).map(|m| m.offset + m.nfa.trans.len() as u32).max().unwrap_or(0);

        let alphabet = alphabet(domain, members.iter().map(|m| m.nfa));
        let sep = domain.separator();

        let accepts = |set: &[u32], acc: &mut [bool]| {
            acc.fill(false);
            for &s in set {
                let (m, local) = owner[s as usize];
                let mem = &members[m as usize];
                if local == mem.nfa.accept {
                    acc[mem.group] = true;
                }
            }
        };

        let mut start: Vec<u32> =
            members.iter().flat_map(|m| m.nfa.closure[0].iter().map(move |&s| s + m.offset)).collect();
        start.sort_unstable();
        start.dedup();

        // Product state: the domain shape state, then the sorted NFA state set, in one
        // vector (looked up by slice, so a transition to a known state allocates nothing);
        // parents rebuild the witness.
        let mut index: FxHashMap<Vec<u32>, usize> = FxHashMap::default();
        let mut states: Vec<Vec<u32>> = Vec::new();
        let mut parent: Vec<Option<(usize, u8)>> = Vec::new();
        let first: Vec<u32> = std::iter::once(0).chain(start).collect();
        index.insert(first.clone(), 0);
        states.push(first);
        parent.push(None);
        let mut next_state: Vec<u32> = Vec::new();
        let mut acc = vec![false; groups.len()];
        let mut i = 0;
        while i < states.len() {
            if i % 64 == 0 && self.budget.as_ref().is_some_and(crate::Budget::spent) {
                return None;
            }
            let shape = states[i][0] as u8;
            let alive = states[i].get(1).is_some_and(|&s| s < subject_end);
            if !alive {
                i += 1;
                continue;
            }
            if shape_accepts(domain, shape) {
                accepts(&states[i][1..], &mut acc);
                match want(&acc) {
                    Want::Skip => {}
                    Want::Keep => kept.push((acc.clone(), witness(&parent, i))),
                    Want::Stop => {
                        kept.push((acc.clone(), witness(&parent, i)));
                        return Some(kept);
                    }
                }
            }
            for &c in &alphabet {
                let Some(shape2) = shape_step(domain, shape, c) else {
                    continue;
                };
                next_state.clear();
                for &s in &states[i][1..] {
                    let (m, local) = owner[s as usize];
                    let mem = &members[m as usize];
                    for &(pred, t) in &mem.nfa.trans[local as usize] {
                        let ok = match pred {
                            Pred::Byte(b) => b == c,
                            Pred::NotSep => c != sep,
                            Pred::Any => true,
                        };
                        if ok {
                            next_state.extend(mem.nfa.closure[t as usize].iter().map(|&x| x + mem.offset));
                        }
                    }
                }
                next_state.sort_unstable();
                next_state.dedup();
                // No subject state left: nothing beyond counts, so the state is not kept.
                if next_state.first().is_none_or(|&s| s >= subject_end) {
                    continue;
                }
                next_state.insert(0, u32::from(shape2));
                if !index.contains_key(next_state.as_slice()) {
                    if states.len() >= MAX_PRODUCT_STATES {
                        return None;
                    }
                    index.insert(next_state.clone(), states.len());
                    states.push(next_state.clone());
                    parent.push(Some((i, c)));
                }
            }
            i += 1;
        }
        Some(kept)
    }

    /// Whether every string of the domain that `inner` matches, some glob of `outers` matches.
    /// `None` when the search gave up.
    pub fn covered(&self, domain: Domain, inner: GlobId, outers: &[GlobId]) -> Option<bool> {
        if outers.contains(&inner) {
            return Some(true);
        }
        // Cheap refutation first: a sample string of `inner` that no outer glob matches.
        let sample = self.sample(inner);
        if domain.contains(&sample) && !outers.iter().any(|&o| self.glob(o).matches(&sample)) {
            return Some(false);
        }
        // A literal in the domain is the glob's only string.
        if let Some(lit) = self.glob(inner).as_literal()
            && domain.contains(lit)
        {
            return Some(outers.iter().any(|&o| self.glob(o).matches(lit)));
        }
        match self.find(domain, &[&[inner], outers], |m| m[0] && !m[1]) {
            Found::Nothing => Some(true),
            Found::Witness(_) => Some(false),
            Found::GaveUp => None,
        }
    }

    /// A string the glob matches: wildcards filled with one `x` (or nothing for `/**`).
    pub fn sample(&self, id: GlobId) -> String {
        let mut s = String::new();
        for p in &self.glob(id).pieces {
            match p {
                Piece::Lit(l) => s.push_str(l),
                Piece::Star | Piece::Plus => s.push('x'),
                Piece::SlashAny => {}
            }
        }
        if s.is_empty() {
            s.push('/');
        }
        s
    }
}

fn domain_slot(domain: Domain) -> usize {
    match domain {
        Domain::Host => 0,
        Domain::UrlPath => 1,
        Domain::Program => 2,
    }
}

/// One byte per class of domain bytes the NFAs cannot tell apart.
fn alphabet<'a>(domain: Domain, nfas: impl Iterator<Item = &'a Nfa>) -> Vec<u8> {
    let mut special = vec![domain.separator(), b'/', b'.'];
    for n in nfas {
        special.extend_from_slice(&n.literal_bytes);
    }
    special.retain(|&c| domain.has_char(c));
    special.sort_unstable();
    special.dedup();
    let other = domain.char_ranges().iter().flat_map(|&(lo, hi)| lo..=hi).find(|c| !special.contains(c));
    special.extend(other);
    special
}

/// Domain shape: hosts are non-empty labels joined by single dots (state 0: at the start of
/// a label, 1: inside one); paths and programs start with `/` (0: nothing read, 1: after).
fn shape_step(domain: Domain, state: u8, c: u8) -> Option<u8> {
    match domain {
        Domain::Host => match (state, c) {
            (0, b'.') => None,
            (1, b'.') => Some(0),
            _ => Some(1),
        },
        Domain::UrlPath | Domain::Program => (state == 1 || c == b'/').then_some(1),
    }
}

fn shape_accepts(_domain: Domain, state: u8) -> bool {
    state == 1
}

fn witness(parent: &[Option<(usize, u8)>], mut i: usize) -> String {
    let mut bytes = Vec::new();
    while let Some((p, c)) = parent[i] {
        bytes.push(c);
        i = p;
    }
    bytes.reverse();
    String::from_utf8(bytes).expect("domain bytes are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covered(domain: Domain, inner: &str, outers: &[&str]) -> Option<bool> {
        let mut g = Globs::default();
        let i = g.id(domain, inner).unwrap();
        let o: Vec<GlobId> = outers.iter().map(|t| g.id(domain, t).unwrap()).collect();
        g.covered(domain, i, &o)
    }

    #[test]
    fn path_containment() {
        let p = Domain::UrlPath;
        assert_eq!(covered(p, "/a/b", &["/a/*"]), Some(true));
        assert_eq!(covered(p, "/a/*", &["/a/**"]), Some(true));
        assert_eq!(covered(p, "/a/**", &["/a/*"]), Some(false));
        assert_eq!(covered(p, "/a/**", &["/a", "/a/*", "/a/*/**"]), Some(true));
        assert_eq!(covered(p, "/a/**", &["/a/*", "/a/*/**"]), Some(false));
        assert_eq!(covered(p, "/**", &["/*", "/*/**"]), Some(true));
        assert_eq!(covered(p, "/api/v1/**", &["/api/**"]), Some(true));
        assert_eq!(covered(p, "/api/x/items", &["/api/*/items"]), Some(true));
        assert_eq!(covered(p, "/api/**", &["/api/*/items"]), Some(false));
        assert_eq!(covered(p, "/a*", &["/a/**"]), Some(false));
        assert_eq!(covered(p, "/a/**/b", &["/a/**"]), Some(true));
        assert_eq!(covered(p, "/x*y*z", &["/x*z"]), Some(true));
        assert_eq!(covered(p, "/x*z", &["/x*y*z"]), Some(false));
    }

    #[test]
    fn host_containment_respects_label_shape() {
        let h = Domain::Host;
        assert_eq!(covered(h, "*.example.com", &["**.example.com"]), Some(true));
        assert_eq!(covered(h, "**.example.com", &["*.example.com"]), Some(false));
        assert_eq!(covered(h, "**.example.com", &["*.example.com", "**.*.example.com"]), Some(true));
        assert_eq!(covered(h, "a.example.com", &["*.example.com"]), Some(true));
        assert_eq!(covered(h, "example.com", &["*.example.com"]), Some(false));
        assert_eq!(covered(h, "x*.example.com", &["*.example.com"]), Some(true));
    }

    #[test]
    fn witnesses_are_real() {
        let mut g = Globs::default();
        let d = Domain::UrlPath;
        let a = g.id(d, "/a/**").unwrap();
        let b = g.id(d, "/a/*").unwrap();
        let Found::Witness(w) = g.find(d, &[&[a], &[b]], |m| m[0] && !m[1]) else { panic!() };
        assert!(g.glob(a).matches(&w) && !g.glob(b).matches(&w), "{w}");
    }

    use proptest::prelude::*;

    fn path_glob() -> impl Strategy<Value = String> {
        let seg = prop::sample::select(&["a", "b", "ab", "*", "**", "a*", "*b", "a*b"][..]);
        prop::collection::vec(seg, 1..4).prop_map(|v| format!("/{}", v.join("/")))
    }

    fn host_glob() -> impl Strategy<Value = String> {
        let label = prop::sample::select(&["a", "b", "ab", "*", "a*", "*b"][..]);
        (any::<bool>(), prop::collection::vec(label, 0..3)).prop_map(|(plus, v)| {
            let mut labels: Vec<&str> = Vec::new();
            if plus {
                labels.push("**");
            }
            labels.extend(v);
            labels.extend(["example", "com"]);
            labels.join(".")
        })
    }

    /// Strings over the globs' letters, a fresh one and the separator, up to a depth.
    fn strings(domain: Domain) -> Vec<String> {
        let parts = ["", "a", "b", "ab", "ba", "x", "aab"];
        let mut out = Vec::new();
        match domain {
            Domain::Host => {
                for n in 0..4 {
                    let mut v: Vec<Vec<&str>> = vec![vec![]];
                    for _ in 0..n {
                        v = v
                            .into_iter()
                            .flat_map(|p| {
                                parts[1..].iter().map(move |x| {
                                    let mut q = p.clone();
                                    q.push(*x);
                                    q
                                })
                            })
                            .collect();
                    }
                    for p in v {
                        let mut labels = p.clone();
                        labels.extend(["example", "com"]);
                        out.push(labels.join("."));
                    }
                }
            }
            _ => {
                for n in 1..5 {
                    let mut v: Vec<String> = vec![String::new()];
                    for _ in 0..n {
                        v = v.into_iter().flat_map(|p| parts.iter().map(move |x| format!("{p}/{x}"))).collect();
                    }
                    out.extend(v);
                }
            }
        }
        out
    }

    fn check(domain: Domain, inner: &str, outers: &[String]) -> Result<(), TestCaseError> {
        let mut g = Globs::default();
        let i = g.id(domain, inner).unwrap();
        let o: Vec<GlobId> = outers.iter().map(|t| g.id(domain, t).unwrap()).collect();
        match g.covered(domain, i, &o) {
            Some(true) => {
                for s in strings(domain) {
                    prop_assert!(
                        !g.glob(i).matches(&s) || o.iter().any(|&x| g.glob(x).matches(&s)),
                        "{inner} within {outers:?} claimed, but {s}"
                    );
                }
            }
            Some(false) => match g.find(domain, &[&[i], &o], |m| m[0] && !m[1]) {
                Found::Witness(w) => prop_assert!(
                    g.glob(i).matches(&w) && !o.iter().any(|&x| g.glob(x).matches(&w)),
                    "witness {w} for {inner} outside {outers:?} does not replay"
                ),
                other => prop_assert!(false, "refuted without a witness: {other:?}"),
            },
            None => {}
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn path_containment_agrees_with_the_matcher(
            inner in path_glob(),
            outers in prop::collection::vec(path_glob(), 1..4),
        ) {
            check(Domain::UrlPath, &inner, &outers)?;
        }

        #[test]
        fn host_containment_agrees_with_the_matcher(
            inner in host_glob(),
            outers in prop::collection::vec(host_glob(), 1..4),
        ) {
            check(Domain::Host, &inner, &outers)?;
        }
    }
}
