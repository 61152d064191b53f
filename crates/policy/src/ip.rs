//! IP networks for `allowed_ips`: parsing (`10.0.0.0/8`, `10.0.0.1`, `fd00::/8`), and the
//! addresses the proxy never connects to whatever a policy says.

use std::net::IpAddr;

use crate::model::IpNet;

/// Parses an address or CIDR; host bits are cleared (`10.0.5.7/24` is `10.0.5.0/24`).
pub fn parse(s: &str) -> Result<IpNet, String> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| format!("`{s}` is not an IP address or CIDR network"))?;
    if let IpAddr::V6(v6) = addr
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("`{s}` is an IPv4-mapped IPv6 address; write the IPv4 form"));
    }
    let max = bits(&addr);
    let prefix = match prefix {
        None => max,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= max && p.bytes().all(|c| c.is_ascii_digit()) => n,
            _ => return Err(format!("`{s}`: the prefix length must be 0..={max}")),
        },
    };
    let net = IpNet { addr, prefix };
    let (lo, _) = range(&net);
    Ok(IpNet { addr: from_u128(&addr, lo), prefix })
}

fn bits(a: &IpAddr) -> u8 {
    if a.is_ipv4() { 32 } else { 128 }
}

pub fn same_family(a: &IpAddr, b: &IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

pub fn to_u128(a: &IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(*v)),
        IpAddr::V6(v) => u128::from(*v),
    }
}

/// The address of `family` with this number (truncated to the family's width).
pub fn from_u128(family: &IpAddr, n: u128) -> IpAddr {
    match family {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from(n as u32)),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(n)),
    }
}

/// First and last address of a network, as numbers within its family.
pub fn range(net: &IpNet) -> (u128, u128) {
    let width = u32::from(bits(&net.addr));
    let host_bits = width - u32::from(net.prefix.min(bits(&net.addr)));
    let a = to_u128(&net.addr);
    let mask: u128 = if host_bits >= 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
    (a & !mask, a | mask)
}

/// Networks the proxy never connects to, whatever the policy: loopback and link-local.
pub const BLOCKED: &[&str] = &["127.0.0.0/8", "169.254.0.0/16", "::1/128", "fe80::/10"];

/// Whether the proxy refuses this resolved address outright.
pub fn is_blocked(addr: &IpAddr) -> bool {
    let a = addr.to_canonical();
    BLOCKED.iter().filter_map(|b| parse(b).ok()).any(|n| n.contains(&a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalizes() {
        assert_eq!(parse("10.0.5.7/24").unwrap().to_string(), "10.0.5.0/24");
        assert_eq!(parse("10.0.5.7").unwrap().to_string(), "10.0.5.7/32");
        assert_eq!(parse("fd00::1/8").unwrap().to_string(), "fd00::/8");
        assert_eq!(parse("0.0.0.0/0").unwrap().range(), (0, u128::from(u32::MAX)));
        for bad in ["10.0.0.0/33", "10.0.0/8", "x", "::ffff:10.0.0.1", "10.0.0.0/", "10.0.0.0/-1", "fd00::/129"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn contains_and_blocked() {
        let n = parse("10.0.0.0/8").unwrap();
        assert!(n.contains(&"10.1.2.3".parse().unwrap()));
        assert!(n.contains(&"::ffff:10.1.2.3".parse().unwrap()));
        assert!(!n.contains(&"11.0.0.0".parse().unwrap()));
        assert!(!n.contains(&"::a00:1".parse().unwrap()));
        assert!(is_blocked(&"127.0.0.1".parse().unwrap()));
        assert!(is_blocked(&"::ffff:169.254.169.254".parse().unwrap()));
        assert!(is_blocked(&"fe80::1".parse().unwrap()));
        assert!(!is_blocked(&"10.0.0.1".parse().unwrap()));
    }
}
