//! The environment a sandbox's creator gives its main command (`env` on create): the one
//! rule for names, sizes and the names the sandbox runtime owns, applied by the gateway
//! (which refuses) and again by the supervisor (which never lets a runtime name through).
//!
//! Values may be secrets: this module never puts one in a message.

/// Most variables one create may set.
pub const MAX_VARS: usize = 64;
/// Longest name.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest value.
pub const MAX_VALUE_BYTES: usize = 32 * 1024;
/// Names and values together.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024;

/// Names the runtime sets, compared without case (the proxy variables are read in either
/// case): where the agent's home, identity, proxy and trusted CAs are. `PATH` is not among
/// them: a creator chooses the command, so it may choose where it is looked up.
pub const RUNTIME_NAMES: &[&str] = &[
    "HOME",
    "USER",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "NODE_USE_ENV_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];
/// Every name with this prefix is the runtime's (sandbox id and name, and any to come).
pub const RUNTIME_PREFIX: &str = "OPENSHELL_";

/// Whether the runtime owns `name`.
pub fn runtime_owned(name: &str) -> bool {
    RUNTIME_NAMES.iter().any(|r| r.eq_ignore_ascii_case(name))
        || name.get(..RUNTIME_PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(RUNTIME_PREFIX))
}

/// A POSIX identifier: a letter or `_`, then letters, digits and `_`.
pub fn is_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'_'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= MAX_NAME_BYTES
}

/// Why `vars` cannot be a sandbox's environment, naming the variable (never a value), or
/// None when it can.
pub fn problem<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<String> {
    let (mut count, mut total) = (0usize, 0usize);
    for (name, value) in vars {
        count += 1;
        total += name.len() + value.len();
        if !is_name(name) {
            // The name is not echoed: a mistyped entry may hold a value.
            return Some(format!(
                "variable {count} is not a valid name: a letter or _ then letters, digits or _, at most \
                 {MAX_NAME_BYTES} bytes"
            ));
        }
        if runtime_owned(name) {
            return Some(format!(
                "{name} is set by the sandbox runtime (HOME, USER, proxy and CA bundle variables, {RUNTIME_PREFIX}*)"
            ));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Some(format!("the value of {name} is longer than {MAX_VALUE_BYTES} bytes"));
        }
        if value.contains('\0') {
            return Some(format!("the value of {name} contains a NUL byte"));
        }
    }
    if count > MAX_VARS {
        return Some(format!("at most {MAX_VARS} variables, got {count}"));
    }
    if total > MAX_TOTAL_BYTES {
        return Some(format!("at most {MAX_TOTAL_BYTES} bytes of names and values in all, got {total}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_posix_and_the_runtime_keeps_its_own() {
        assert!(problem([("API_TOKEN", "x"), ("_a1", ""), ("PATH", "/opt/bin")]).is_none());
        for bad in ["", "1A", "A-B", "A B", "A=B", "É", &"A".repeat(MAX_NAME_BYTES + 1)] {
            let why = problem([(bad, "secret-value")]).expect(bad);
            assert!(!why.contains("secret-value"), "{why}");
        }
        for owned in ["HOME", "https_proxy", "No_Proxy", "SSL_CERT_FILE", "OPENSHELL_SANDBOX_ID", "openshell_x"] {
            let why = problem([(owned, "secret-value")]).expect(owned);
            assert!(why.contains(owned) && !why.contains("secret-value"), "{why}");
        }
        assert!(problem([("A", "a\0b")]).is_some());
        assert!(problem([("A", &*"x".repeat(MAX_VALUE_BYTES + 1))]).is_some());
        let many: Vec<(String, String)> = (0..=MAX_VARS).map(|i| (format!("V{i}"), String::new())).collect();
        assert!(problem(many.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap().contains("at most"));
        let big: Vec<(String, String)> = (0..3).map(|i| (format!("V{i}"), "x".repeat(MAX_VALUE_BYTES))).collect();
        assert!(problem(big.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap().contains("in all"));
    }
}
