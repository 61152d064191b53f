//! Destinations the proxy never connects to, whatever the policy says: the sandbox must not
//! reach the host's loopback, the cloud metadata service, link-local neighbours, or the
//! gateway itself through its proxy.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The always-blocked set plus the caller's own additions (the gateway's addresses, the
/// proxy's listen address).
#[derive(Debug, Clone, Default)]
pub(crate) struct Blocklist {
    extra: Vec<IpNet>,
}

impl Blocklist {
    pub(crate) fn new(extra: Vec<IpNet>) -> Blocklist {
        Blocklist { extra }
    }

    /// Whether `ip` (in any of its IPv4-embedding IPv6 spellings) is blocked.
    pub(crate) fn is_blocked(&self, ip: IpAddr) -> bool {
        // Check every address the kernel or a translator could turn this into.
        spellings(ip).into_iter().flatten().any(|ip| always_blocked(ip) || self.extra.iter().any(|n| n.contains(&ip)))
    }
}

/// The address itself, and the IPv4 address an IPv6 address embeds (mapped `::ffff:a.b.c.d`,
/// deprecated compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`).
fn spellings(ip: IpAddr) -> [Option<IpAddr>; 2] {
    match ip {
        IpAddr::V4(_) => [Some(ip), None],
        IpAddr::V6(v6) => [Some(ip), embedded_v4(v6).map(IpAddr::V4)],
    }
}

fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
    let compatible = s[..6] == [0; 6];
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (mapped || compatible || nat64).then_some(tail)
}

fn always_blocked(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                // 0.0.0.0/8: "this host"; Linux connects 0.0.0.0 to the loopback.
                || v4.octets()[0] == 0
                // 240.0.0.0/4 (reserved) includes the broadcast address.
                || v4.octets()[0] >= 240
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // fe80::/10 link-local
                || (first & 0xffc0) == 0xfe80
                // fec0::/10 deprecated site-local, still link-scoped on some stacks
                || (first & 0xffc0) == 0xfec0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(s: &str) -> bool {
        Blocklist::default().is_blocked(s.parse().unwrap())
    }

    #[test]
    fn always_blocked_addresses() {
        for a in [
            "127.0.0.1",
            "127.255.0.9",
            "169.254.169.254",
            "169.254.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "::ffff:0.0.0.0",
        ] {
            assert!(blocked(a), "{a} must be blocked");
        }
    }

    #[test]
    fn ordinary_addresses_pass() {
        for a in ["198.18.0.2", "93.184.216.34", "10.1.2.3", "2001:db8::1", "::ffff:198.18.0.2"] {
            assert!(!blocked(a), "{a} must not be blocked");
        }
    }

    #[test]
    fn extra_nets_cover_mapped_spellings() {
        let list = Blocklist::new(vec!["10.9.0.0/16".parse().unwrap()]);
        assert!(list.is_blocked("10.9.1.1".parse().unwrap()));
        assert!(list.is_blocked("::ffff:10.9.1.1".parse().unwrap()));
        assert!(!list.is_blocked("10.8.1.1".parse().unwrap()));
    }
}
