//! The one spelling of a URL path that is both matched against the policy and sent upstream,
//! so an origin server cannot read a path differently from the rule that allowed it
//! (`/a/../admin`, `/%61dmin`, `/a//b`, `/x/..;/admin`).

use openshell_policy::glob::Domain;

/// The canonical form of a request path, or `None` when it cannot be made unambiguous.
///
/// Percent-encoded unreserved characters are decoded, other escapes upper-cased; encoded `/`
/// and `\` are refused (servers disagree on them); so are `.` and `..` segments (also with
/// `;` parameters) and empty segments other than a trailing one.
pub(crate) fn canonical(raw: &str) -> Option<String> {
    let b = raw.as_bytes();
    if b.first() != Some(&b'/') {
        return None;
    }
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(b[i] as char);
            i += 1;
            continue;
        }
        let hex = b.get(i + 1..i + 3)?;
        let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') {
            out.push(v as char);
        } else if matches!(v, b'/' | b'\\') {
            return None;
        } else {
            out.push('%');
            out.push_str(&format!("{v:02X}"));
        }
        i += 3;
    }
    let segments: Vec<&str> = out[1..].split('/').collect();
    let last = segments.len() - 1;
    for (n, seg) in segments.iter().enumerate() {
        let base = seg.split(';').next().unwrap_or("");
        if base == "." || base == ".." || (base.is_empty() && n != last) {
            return None;
        }
    }
    Domain::UrlPath.contains(&out).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn canonical_paths() {
        for (raw, want) in [
            ("/", Some("/")),
            ("/a/b/", Some("/a/b/")),
            ("/%61dmin", Some("/admin")),
            ("/a%2db%7e", Some("/a-b~")),
            ("/a%20b", Some("/a%20b")),
            ("/a%3fb", Some("/a%3Fb")),
            ("/a/../admin", None),
            ("/a/./b", None),
            ("/a/%2e%2e/b", None),
            ("/a/..;/b", None),
            ("/a//b", None),
            ("/a%2fb", None),
            ("/a%5Cb", None),
            ("/a%2", None),
            ("/a%zz", None),
            ("relative", None),
            ("", None),
            ("/a\\b", None),
        ] {
            assert_eq!(canonical(raw).as_deref(), want, "{raw}");
        }
    }
}
