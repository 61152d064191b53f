//! Globs for hosts, program paths and URL paths, parsed into a small piece list that both
//! the matcher and the prover read, so enforcement and proof share one meaning.
//!
//! - Path globs (programs, URL paths) are `/`-delimited: `*` matches within one segment,
//!   a whole `**` segment matches any number of segments (`/a/**` matches `/a`, `/a/` and
//!   `/a/b/c`; `/a/**/b` matches `/a/b` and `/a/x/y/b`).
//! - Host globs are `.`-delimited and lower-case: `*` matches within one label, a leading
//!   `**` label matches one or more labels.

use crate::limits::{MAX_PATTERN_LEN, MAX_WILDCARDS_PER_PATTERN};

/// One piece of a parsed glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// These exact bytes.
    Lit(String),
    /// Zero or more characters, none of them the glob's separator.
    Star,
    /// Nothing, or `/` followed by anything (a path's `/**`).
    SlashAny,
    /// One or more characters of any kind (a host's leading `**` before its `.`).
    Plus,
}

/// The strings a request field may hold; anything outside is refused by the matcher, and
/// the prover searches exactly this set, so both agree on every input. (No backslash: it
/// would read as an escape in solver string literals.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Lower-case host names: labels of `[a-z0-9_-]` joined by single dots.
    Host,
    /// Absolute URL paths: `/` then visible ASCII without `?`, `#` and `\`.
    UrlPath,
    /// Absolute program paths: `/` then printable ASCII (space included) without `\`.
    Program,
}

impl Domain {
    /// Inclusive ASCII byte ranges a character of this domain lies in: the alphabet the
    /// prover searches. Program paths also take any non-ASCII UTF-8 (see [`Domain::has_char`]),
    /// which the prover does not model (it refuses globs with such bytes).
    pub fn char_ranges(self) -> &'static [(u8, u8)] {
        match self {
            Domain::Host => &[(b'-', b'.'), (b'0', b'9'), (b'_', b'_'), (b'a', b'z')],
            Domain::UrlPath => &[(0x21, 0x22), (0x24, 0x3e), (0x40, 0x5b), (0x5d, 0x7e)],
            Domain::Program => &[(0x20, 0x5b), (0x5d, 0x7e)],
        }
    }

    /// The separator `*` never crosses.
    pub fn separator(self) -> u8 {
        match self {
            Domain::Host => b'.',
            Domain::UrlPath | Domain::Program => b'/',
        }
    }

    /// Whether a byte may occur in a value of this domain: one of [`Domain::char_ranges`], or
    /// for program paths any byte of a non-ASCII UTF-8 character (as upstream, which
    /// matches `/usr/bin/é*`; the values are `str`, so always whole characters).
    pub fn has_char(self, c: u8) -> bool {
        self.char_ranges().iter().any(|&(lo, hi)| lo <= c && c <= hi) || (self == Domain::Program && c >= 0x80)
    }

    /// Whether a concrete value belongs to the domain (max length included).
    pub fn contains(self, s: &str) -> bool {
        let b = s.as_bytes();
        if b.is_empty() || !b.iter().all(|&c| self.has_char(c)) {
            return false;
        }
        match self {
            Domain::Host => b.len() <= 253 && s.split('.').all(|l| !l.is_empty() && l.len() <= 63),
            Domain::UrlPath => b[0] == b'/' && b.len() <= 8192,
            Domain::Program => b[0] == b'/' && b.len() <= 4096,
        }
    }
}

/// A parsed glob: pieces matched left to right over one [`Domain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pub domain: Domain,
    pub pieces: Vec<Piece>,
}

impl Glob {
    /// Parses a `/`-delimited glob (program path or URL path).
    pub fn path(pattern: &str, domain: Domain) -> Result<Glob, String> {
        check_common(pattern)?;
        if !pattern.starts_with('/') {
            return Err(format!("`{pattern}` must be absolute (start with `/`)"));
        }
        if let Some(i) = pattern.bytes().position(|c| c != b'*' && !domain.has_char(c)) {
            return Err(format!("`{pattern}` contains {}, which is not allowed here", describe(pattern, i)));
        }
        let mut pieces = Vec::new();
        // Split keeps the leading empty segment, so segment i>0 follows a `/`.
        for seg in pattern.split('/').skip(1) {
            if seg == "**" {
                pieces.push(Piece::SlashAny);
                continue;
            }
            if seg.contains("**") {
                return Err(format!("`{pattern}`: `**` must be a whole segment (`/**/`), not part of `{seg}`"));
            }
            push_lit(&mut pieces, "/");
            push_segment(&mut pieces, seg);
        }
        Ok(Glob { domain, pieces })
    }

    /// Parses a host glob (lower-cased first; hosts match case-insensitively).
    pub fn host(pattern: &str) -> Result<Glob, String> {
        check_common(pattern)?;
        let lower = pattern.to_ascii_lowercase();
        if let Some(i) = lower.bytes().position(|c| c != b'*' && !Domain::Host.has_char(c)) {
            return Err(format!("host `{pattern}` contains {}; use a DNS name or IPv4 address", describe(&lower, i)));
        }
        let labels: Vec<&str> = lower.split('.').collect();
        if labels.iter().any(|l| l.is_empty()) {
            return Err(format!("host `{pattern}` has an empty label"));
        }
        if labels.iter().any(|l| l.len() > 63) || lower.len() > 253 {
            return Err(format!("host `{pattern}` is longer than DNS allows"));
        }
        if lower.contains('*') {
            let n = labels.len();
            // A wildcard must stay below a registrable name: `*.com`, `**.io`, `example.*` are
            // refused because they grant a whole top-level domain.
            if labels[n.saturating_sub(2)..].iter().any(|l| l.contains('*')) {
                return Err(format!("host `{pattern}` is a TLD-wide wildcard; the last two labels must be literal"));
            }
        }
        let mut pieces = Vec::new();
        for (i, label) in labels.iter().enumerate() {
            if *label == "**" {
                if i != 0 {
                    return Err(format!("host `{pattern}`: `**` is only allowed as the first label"));
                }
                pieces.push(Piece::Plus);
                continue;
            }
            if label.contains("**") {
                return Err(format!("host `{pattern}`: `**` must be a whole leading label"));
            }
            if i > 0 {
                push_lit(&mut pieces, ".");
            }
            push_segment(&mut pieces, label);
        }
        Ok(Glob { domain: Domain::Host, pieces })
    }

    /// The literal string this glob matches, if it has no wildcard.
    pub fn as_literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// Whether the glob matches `s` (which must lie in the glob's domain).
    pub fn matches(&self, s: &str) -> bool {
        if !self.domain.contains(s) {
            return false;
        }
        let s = s.as_bytes();
        let n = s.len();
        let sep = self.domain.separator();
        // reach[p]: the pieces seen so far can consume exactly s[..p]. Linear per piece
        // (no backtracking), so long inputs cannot blow up.
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        for piece in &self.pieces {
            let mut next = vec![false; n + 1];
            match piece {
                Piece::Lit(l) => {
                    let l = l.as_bytes();
                    for p in (0..=n).filter(|&p| reach[p]) {
                        if s[p..].starts_with(l) {
                            next[p + l.len()] = true;
                        }
                    }
                }
                Piece::Star => {
                    let mut open = false;
                    for p in 0..=n {
                        open |= reach[p];
                        next[p] = open;
                        if p < n && s[p] == sep {
                            open = false;
                        }
                    }
                }
                Piece::SlashAny => {
                    if let Some(first) = (0..=n).find(|&p| reach[p]) {
                        next[..].copy_from_slice(&reach);
                        if let Some(slash) = (first..n).find(|&p| reach[p] && s[p] == b'/') {
                            next[slash + 1..].iter_mut().for_each(|r| *r = true);
                        }
                    }
                }
                Piece::Plus => {
                    if let Some(first) = (0..=n).find(|&p| reach[p]) {
                        next[first + 1..].iter_mut().for_each(|r| *r = true);
                    }
                }
            }
            reach = next;
        }
        reach[n]
    }
}

fn check_common(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("must not be empty".into());
    }
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!(
            "`{}…` is {} bytes long; the limit is {MAX_PATTERN_LEN}",
            pattern.chars().take(32).collect::<String>(),
            pattern.len()
        ));
    }
    let stars = pattern.split('*').count() - 1;
    let wildcards = stars - pattern.matches("**").count();
    if wildcards > MAX_WILDCARDS_PER_PATTERN {
        return Err(format!("`{pattern}` has {wildcards} wildcards; the limit is {MAX_WILDCARDS_PER_PATTERN}"));
    }
    if let Some(c) = pattern.chars().find(|c| matches!(c, '?' | '[' | ']' | '{' | '}')) {
        return Err(format!("`{pattern}`: `{c}` is not glob syntax here; only `*` and `**` are supported"));
    }
    Ok(())
}

/// The character of `s` that holds byte `at`, for an error message.
fn describe(s: &str, at: usize) -> String {
    let c = s.char_indices().take_while(|&(i, _)| i <= at).last().map_or('?', |(_, c)| c);
    if c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control()) {
        format!("`{c}`")
    } else {
        format!("character U+{:04X}", c as u32)
    }
}

/// Pushes a segment's literal runs and `*`s.
fn push_segment(pieces: &mut Vec<Piece>, seg: &str) {
    for (j, lit) in seg.split('*').enumerate() {
        if j > 0 {
            pieces.push(Piece::Star);
        }
        push_lit(pieces, lit);
    }
}

fn push_lit(pieces: &mut Vec<Piece>, lit: &str) {
    if lit.is_empty() {
        return;
    }
    if let Some(Piece::Lit(prev)) = pieces.last_mut() {
        prev.push_str(lit);
    } else {
        pieces.push(Piece::Lit(lit.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(g: &str) -> Glob {
        Glob::path(g, Domain::UrlPath).unwrap()
    }
    fn h(g: &str) -> Glob {
        Glob::host(g).unwrap()
    }

    #[test]
    fn literal_path() {
        assert!(p("/repos/x").matches("/repos/x"));
        assert!(!p("/repos/x").matches("/repos/x/"));
        assert!(!p("/repos/x").matches("/repos/xy"));
        assert_eq!(p("/repos/x").as_literal(), Some("/repos/x"));
    }

    #[test]
    fn star_stays_in_one_segment() {
        let g = p("/repos/*/issues");
        assert!(g.matches("/repos/x/issues"));
        assert!(g.matches("/repos//issues"));
        assert!(!g.matches("/repos/x/y/issues"));
        let g = p("/v1/file-*.txt");
        assert!(g.matches("/v1/file-.txt"));
        assert!(g.matches("/v1/file-abc.txt"));
        assert!(!g.matches("/v1/file-a/b.txt"));
    }

    #[test]
    fn double_star_at_end_spans_segments() {
        let g = p("/repos/**");
        for ok in ["/repos", "/repos/", "/repos/a", "/repos/a/b/c"] {
            assert!(g.matches(ok), "{ok}");
        }
        assert!(!g.matches("/reposx"));
        assert!(!g.matches("/other"));
        let all = p("/**");
        assert!(all.matches("/") && all.matches("/a/b"));
    }

    #[test]
    fn double_star_in_middle_spans_zero_or_more() {
        let g = p("/a/**/b");
        for ok in ["/a/b", "/a/x/b", "/a/x/y/b", "/a//b"] {
            assert!(g.matches(ok), "{ok}");
        }
        for bad in ["/a/xb", "/ab", "/a/b/c"] {
            assert!(!g.matches(bad), "{bad}");
        }
        assert!(p("/**/info/refs*").matches("/org/repo.git/info/refs"));
    }

    #[test]
    fn path_syntax_errors() {
        for bad in ["relative", "/a**", "/a/**b", "/a/***", "/a?", "/a[b]", "/{a,b}", "/a b", ""] {
            assert!(Glob::path(bad, Domain::UrlPath).is_err(), "{bad}");
        }
        assert!(Glob::path("/opt/My App/bin", Domain::Program).is_ok());
        let many = "/*".repeat(MAX_WILDCARDS_PER_PATTERN + 1);
        assert!(Glob::path(&many, Domain::UrlPath).is_err());
        let long = format!("/{}", "a".repeat(MAX_PATTERN_LEN));
        assert!(Glob::path(&long, Domain::UrlPath).is_err());
    }

    #[test]
    fn long_inputs_do_not_backtrack() {
        let g = p("/*a*a*a*a*a*b");
        let s = format!("/{}", "a".repeat(5000));
        assert!(!g.matches(&s));
    }

    #[test]
    fn host_literal_is_case_insensitive_by_lowering() {
        let g = h("API.GitHub.com");
        assert_eq!(g.as_literal(), Some("api.github.com"));
        assert!(g.matches("api.github.com"));
    }

    #[test]
    fn host_star_is_one_label() {
        let g = h("*.github.com");
        assert!(g.matches("api.github.com"));
        assert!(!g.matches("a.b.github.com"));
        assert!(!g.matches("github.com"));
        let g = h("api-*.example.com");
        assert!(g.matches("api-.example.com") && g.matches("api-eu.example.com"));
        assert!(!g.matches("api-eu.x.example.com"));
    }

    #[test]
    fn host_leading_double_star_is_one_or_more_labels() {
        let g = h("**.github.com");
        assert!(g.matches("api.github.com") && g.matches("a.b.github.com"));
        assert!(!g.matches("github.com"));
        assert!(!g.matches("xgithub.com"));
    }

    #[test]
    fn host_errors() {
        for bad in [
            "*.com",
            "**.com",
            "*",
            "**",
            "example.*",
            "*.*",
            "a.*.com",
            "a..com",
            "a.**.b.com",
            "[::1]",
            "a b.com",
            "x**.example.com",
        ] {
            assert!(Glob::host(bad).is_err(), "{bad}");
        }
        for ok in ["localhost", "10.0.0.1", "*.example.com", "a.*.example.com", "**.svc.local"] {
            assert!(Glob::host(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn inputs_outside_the_domain_never_match() {
        assert!(!h("**.example.com").matches(".x.example.com"));
        assert!(!p("/**").matches("/a?b"));
        assert!(!p("/**").matches("no-slash"));
    }
}
