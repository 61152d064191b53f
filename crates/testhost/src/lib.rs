//! One concept: **a test host in a network namespace of its own**, the only destination a
//! network test may send traffic to.
//!
//! [`TestHost::new`] makes a namespace and a veth pair: this side gets `198.<o>.<n>.1/30`, the
//! test host `198.<o>.<n>.2` (`o` is 18 or 19, from 198.18.0.0/15, the range set aside for
//! benchmarks). Servers run inside it ([`TestHost::bind`], [`TestHost::spawn`]); dropping it
//! removes the namespace and both ends of the pair. Nothing is routed anywhere else.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct TestHost {
    ns: String,
    veth: String,
    /// The test host's address.
    pub ip: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr))) }
}

impl TestHost {
    /// A new test host. `tag` (a few letters) and this process's id keep the names apart from
    /// other test binaries running at the same time; `second_octet` is 18 or 19.
    pub fn new(tag: &str, second_octet: u8) -> TestHost {
        assert!(matches!(second_octet, 18 | 19), "test hosts live in 198.18.0.0/15");
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < 250, "too many test hosts in one process");
        // Interface names are at most 15 bytes.
        let id = format!("{tag}{:x}{n}", std::process::id() % 0xffff);
        let (ns, veth, peer) = (format!("os{id}"), format!("os{id}a"), format!("os{id}b"));
        assert!(peer.len() <= 15, "tag too long for an interface name");
        let _ = ip(&["netns", "del", &ns]);
        let _ = ip(&["link", "del", &veth]);
        // Distinct /30s per process too: the pid picks the third octet's block.
        let third = ((std::process::id() as u32 * 7 + n) % 250) as u8;
        let host_ip = format!("198.{second_octet}.{third}.1/30");
        let ns_ip = format!("198.{second_octet}.{third}.2/30");
        let steps: [&[&str]; 7] = [
            &["netns", "add", &ns],
            &["link", "add", &veth, "type", "veth", "peer", "name", &peer, "netns", &ns],
            &["addr", "add", &host_ip, "dev", &veth],
            &["link", "set", &veth, "up"],
            &["-n", &ns, "addr", "add", &ns_ip, "dev", &peer],
            &["-n", &ns, "link", "set", &peer, "up"],
            &["-n", &ns, "link", "set", "lo", "up"],
        ];
        let host = TestHost { ns: ns.clone(), veth: veth.clone(), ip: Ipv4Addr::new(198, second_octet, third, 2) };
        for s in steps {
            ip(s).expect("setting up a test host (needs root and iproute2)");
        }
        host
    }

    /// The namespace's name (for `ip netns exec`).
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// A listener bound inside the namespace (a socket keeps the namespace it was made in),
    /// non-blocking, ready for `tokio::net::TcpListener::from_std`.
    pub fn bind(&self, port: u16) -> std::net::TcpListener {
        let path = format!("/var/run/netns/{}", self.ns);
        let addr = SocketAddr::new(IpAddr::V4(self.ip), port);
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).expect("opening the namespace");
            nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("entering the namespace");
            let l = std::net::TcpListener::bind(addr).expect("binding in the namespace");
            l.set_nonblocking(true).expect("non-blocking");
            l
        })
        .join()
        .expect("binding thread")
    }

    /// A program started inside the namespace; killed when the returned guard drops.
    pub fn spawn(&self, program: &str, args: &[&str]) -> Server {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, program])
            .args(args)
            .spawn()
            .expect("starting a server on the test host");
        Server(child)
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// A server process on a test host.
pub struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
