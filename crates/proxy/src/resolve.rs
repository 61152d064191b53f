//! Name resolution done by the proxy, never by the sandbox: the addresses it returns are what
//! the blocklist checks and what the proxy connects to.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// At most this many addresses of one name are tried.
const MAX_ADDRESSES: usize = 8;

/// The system resolver plus fixed answers for some names.
#[derive(Debug, Clone)]
pub struct Resolver {
    overrides: Arc<HashMap<String, Vec<IpAddr>>>,
    system: bool,
}

impl Resolver {
    /// The system resolver (`getaddrinfo`), no overrides.
    pub fn system() -> Resolver {
        Resolver { overrides: Arc::default(), system: true }
    }

    /// Only the given answers; every other name fails to resolve. For tests, which must never
    /// send a query anywhere.
    pub fn fixed(answers: HashMap<String, Vec<IpAddr>>) -> Resolver {
        let overrides = answers.into_iter().map(|(k, v)| (normalize(&k), v)).collect();
        Resolver { overrides: Arc::new(overrides), system: false }
    }

    /// Adds a fixed answer that wins over the system resolver.
    pub fn with_override(mut self, host: &str, addrs: Vec<IpAddr>) -> Resolver {
        Arc::make_mut(&mut self.overrides).insert(normalize(host), addrs);
        self
    }

    /// The addresses of `host` (an IP literal is its own answer), at most [`MAX_ADDRESSES`].
    pub(crate) async fn resolve(&self, host: &str, timeout: Duration) -> Result<Vec<IpAddr>, String> {
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        if let Some(addrs) = self.overrides.get(&normalize(host)) {
            return Ok(addrs.iter().copied().take(MAX_ADDRESSES).collect());
        }
        if !self.system {
            return Err(format!("no address known for {host}"));
        }
        // The port is irrelevant to the answer; getaddrinfo wants one.
        let lookup = tokio::net::lookup_host((host, 0));
        match tokio::time::timeout(timeout, lookup).await {
            Err(_) => Err(format!("resolving {host} timed out")),
            Ok(Err(e)) => Err(format!("resolving {host} failed: {e}")),
            Ok(Ok(addrs)) => {
                let mut out: Vec<IpAddr> = Vec::new();
                for a in addrs {
                    if !out.contains(&a.ip()) && out.len() < MAX_ADDRESSES {
                        out.push(a.ip());
                    }
                }
                if out.is_empty() { Err(format!("{host} has no address")) } else { Ok(out) }
            }
        }
    }
}

fn normalize(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fixed_answers_only() {
        let r = Resolver::fixed(HashMap::from([("Api.Test".to_string(), vec!["198.18.0.2".parse().unwrap()])]));
        let t = Duration::from_secs(1);
        assert_eq!(r.resolve("api.test.", t).await.unwrap(), vec!["198.18.0.2".parse::<IpAddr>().unwrap()]);
        assert!(r.resolve("other.test", t).await.is_err());
        assert_eq!(r.resolve("[::1]", t).await.unwrap(), vec!["::1".parse::<IpAddr>().unwrap()]);
    }
}
