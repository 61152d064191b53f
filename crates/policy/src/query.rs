//! Decoding a URL query string into the key -> values map [`crate::HttpRequest::query`]
//! holds, so the proxy and the tests decode alike: `&`-separated pairs, the first `=`
//! splits key from value (none: empty value), `+` is a space, `%XX` a byte. Fails (the
//! proxy then refuses the request) on bad escapes, invalid UTF-8 or too many pairs.

use std::collections::BTreeMap;

/// Pairs one query may carry before it is refused.
pub const MAX_QUERY_PAIRS: usize = 256;

pub fn decode_query(raw: &str) -> Option<BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let pairs = raw.split('&').filter(|p| !p.is_empty());
    for (n, pair) in pairs.enumerate() {
        if n >= MAX_QUERY_PAIRS {
            return None;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.entry(decode(k)?).or_default().push(decode(v)?);
    }
    Some(out)
}

fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_pairs_repeats_and_escapes() {
        let q = decode_query("per_page=10&sort=asc&per_page=2&flag&a%20b=c+d%2F&&").unwrap();
        assert_eq!(q["per_page"], ["10", "2"]);
        assert_eq!(q["flag"], [""]);
        assert_eq!(q["a b"], ["c d/"]);
        assert_eq!(decode_query("").unwrap().len(), 0);
        for bad in ["a=%zz", "a=%4", "a=%ff", "%"] {
            assert!(decode_query(bad).is_none(), "{bad}");
        }
        assert!(decode_query(&"a=1&".repeat(MAX_QUERY_PAIRS + 1)).is_none());
    }
}
