//! `allowed_ips`, decided exactly: the resolved address only matters through which
//! networks hold it, so the address space splits into finitely many classes (every
//! boundary between networks of either policy, and the blocked ranges, is a cut). Within
//! one class each endpoint with `allowed_ips` matches either every address or none, so
//! the network check runs once per class on policies without `allowed_ips`, and once more
//! for "no address known, or one in no network".

use std::borrow::Cow;
use std::net::IpAddr;

use openshell_policy::ip::{self, BLOCKED};
use openshell_policy::{IpNet, Policy};

use crate::limits::MAX_ADDRESS_CLASSES;

/// One representative address per class (`None`: unknown or in no network), blocked
/// classes left out since the matcher allows nothing there.
pub fn classes(a: &Policy, b: &Policy) -> Result<Vec<Option<IpAddr>>, String> {
    let nets: Vec<IpNet> = [a, b]
        .iter()
        .flat_map(|p| p.network_policies.values())
        .flat_map(|np| &np.endpoints)
        .flat_map(|e| e.allowed_ips.iter().copied())
        .collect();
    let mut out = vec![None];
    if nets.is_empty() {
        return Ok(out);
    }
    let blocked: Vec<IpNet> = BLOCKED.iter().filter_map(|b| ip::parse(b).ok()).collect();
    for v4 in [true, false] {
        let fam = |n: &&IpNet| n.addr.is_ipv4() == v4;
        let family: Vec<&IpNet> = nets.iter().filter(fam).collect();
        let Some(first) = family.first() else {
            continue;
        };
        let mut cuts: Vec<u128> = Vec::new();
        for n in family.iter().copied().chain(blocked.iter().filter(fam)) {
            let (lo, hi) = n.range();
            cuts.push(lo);
            if let Some(next) = hi.checked_add(1) {
                cuts.push(next);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        let max = if v4 { u128::from(u32::MAX) } else { u128::MAX };
        for &start in cuts.iter().filter(|&&c| c <= max) {
            let addr = ip::from_u128(&first.addr, start);
            // Only starts that lie in some network begin a class that differs from "none".
            if family.iter().any(|n| n.contains(&addr)) && !ip::is_blocked(&addr) {
                out.push(Some(addr));
            }
        }
        if out.len() > MAX_ADDRESS_CLASSES {
            return Err(format!(
                "allowed_ips split the addresses into more than {MAX_ADDRESS_CLASSES} classes; the prover's limit"
            ));
        }
    }
    Ok(out)
}

/// The policy as it acts on requests whose address is `addr`: endpoints with
/// `allowed_ips` holding it lose the list, the others with a list are gone. A policy
/// without `allowed_ips` acts the same on every address and is returned as it is.
pub fn at(p: &Policy, addr: Option<IpAddr>) -> Cow<'_, Policy> {
    if !p.network_policies.values().flat_map(|np| &np.endpoints).any(|e| !e.allowed_ips.is_empty()) {
        return Cow::Borrowed(p);
    }
    let mut out = p.clone();
    for np in out.network_policies.values_mut() {
        np.endpoints.retain_mut(|e| {
            if e.allowed_ips.is_empty() {
                return true;
            }
            let inside = addr.is_some_and(|a| e.allowed_ips.iter().any(|n| n.contains(&a)));
            e.allowed_ips.clear();
            inside
        });
        np.endpoints.sort();
        np.endpoints.dedup();
    }
    out.network_policies.retain(|_, np| !np.endpoints.is_empty());
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(ips: &str) -> Policy {
        Policy::from_yaml(&format!(
            "version: 1\nnetwork_policies: {{r: {{endpoints: [{{host: a.example.com, port: 1, allowed_ips: [{ips}]}}]}}}}\n"
        ))
        .unwrap()
    }

    #[test]
    fn classes_cut_at_every_network_boundary() {
        let a = policy("10.0.0.0/8, 0.0.0.0/0");
        let b = policy("10.0.5.0/24, 127.0.0.1");
        let got: Vec<String> = classes(&a, &b).unwrap().iter().map(|c| format!("{c:?}")).collect();
        assert_eq!(
            got,
            [
                "None",
                "Some(0.0.0.0)",
                "Some(10.0.0.0)",
                "Some(10.0.5.0)",
                "Some(10.0.6.0)",
                "Some(11.0.0.0)",
                "Some(128.0.0.0)",
                "Some(169.255.0.0)",
            ]
        );
        // Blocked ranges (127/8, 169.254/16) are no class: the matcher allows nothing there.
        let at_ten = at(&a, Some("10.1.1.1".parse().unwrap()));
        assert!(at_ten.network_policies["r"].endpoints[0].allowed_ips.is_empty());
        assert!(at(&b, Some("10.1.1.1".parse().unwrap())).network_policies.is_empty());
    }
}
