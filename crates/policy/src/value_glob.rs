//! Globs for single values (query parameters, MCP tool names): `*` matches any run of
//! characters, everything else is literal. No separator, as upstream's `glob.match(v, [])`.

use crate::limits::{MAX_PATTERN_LEN, MAX_WILDCARDS_PER_PATTERN};

/// Checks a value glob's syntax: bounded, printable, only `*` as a wildcard.
pub fn check(pattern: &str) -> Result<(), String> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!("glob is {} bytes; the limit is {MAX_PATTERN_LEN}", pattern.len()));
    }
    if pattern.matches('*').count() > MAX_WILDCARDS_PER_PATTERN {
        return Err(format!("`{pattern}` has more than {MAX_WILDCARDS_PER_PATTERN} wildcards"));
    }
    if let Some(c) = pattern.chars().find(|c| matches!(c, '?' | '[' | ']' | '{' | '}' | '\\') || c.is_control()) {
        return Err(format!("`{pattern}`: `{}` is not supported here; only `*` is a wildcard", c.escape_default()));
    }
    Ok(())
}

/// Whether `value` matches `pattern`; linear in their lengths times the wildcards.
pub fn matches(pattern: &str, value: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    // One part means no `*`: a literal.
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == value;
    };
    let Some(mut rest) = value.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A value the glob matches (every `*` empty).
pub fn sample(pattern: &str) -> String {
    pattern.replace('*', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_matches_any_run() {
        assert!(matches("1*", "100"));
        assert!(matches("1*", "1"));
        assert!(!matches("1*", "21"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "abc") && matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "acb"));
        assert!(matches("NVIDIA/*", "NVIDIA/a/b"));
        assert!(matches("x", "x") && !matches("x", "xy"));
        assert!(!matches("ab*ba", "aba"));
        assert_eq!(sample("a*b"), "ab");
        assert!(check("a?").is_err() && check("a*").is_ok());
    }
}
