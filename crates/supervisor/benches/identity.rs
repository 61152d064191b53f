//! The caller-identity round trip: for every new proxy connection, and again for every
//! request on it, the supervisor asks the sandbox's init who holds it (`identity::FromInit`
//! -> the init's `identity::answer`, one SOCK_SEQPACKET message each way, JSON), in root and
//! rootless mode alike; a door request pays one round trip beyond the connection's first.
//! `cargo bench -p openshell-supervisor --bench identity` (release), as root.
//!
//! Measured in the same run, each p50/p99 over `BENCH_N` calls (default 2000):
//! * **floor, bare round trip**: the same socket pair type, a message of the request's size
//!   out and the reply's size back, nothing else;
//! * **identify in process**: what the init does per request (the proxy crate's
//!   `ProcIdentity::identify_now` over sock_diag and /proc), called directly;
//! * **round trip through the init**: the supervisor's real code and the init's real code
//!   (this file includes `src/identity.rs`), the supervisor's side waiting on a tokio runtime
//!   as its proxy does, the init on a thread of its own polling as the real one does.
//!
//! Both identity figures are taken for several views: the processes a sandbox's init sees
//! with 1, 16 and 64 processes in the sandbox (this process and sleeping children of it: the
//! init reads every process's descriptors to find each holder), and every process of this
//! host (`/proc` as the host shows it, an upper bound). The caller is a TCP connection of this
//! process on 127.0.0.1. `BENCH_N` sets the calls per figure.

#[path = "../src/identity.rs"]
#[allow(dead_code)]
mod identity;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, recv, send, socket};
use openshell_proxy::{Identify, ProcIdentity};

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (rank(0.5).as_secs_f64() * 1e6, rank(0.99).as_secs_f64() * 1e6)
}

fn measure(n: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..n / 10 {
        f();
    }
    stats(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn diag() -> OwnedFd {
    socket(AddressFamily::Netlink, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::NetlinkSockDiag)
        .expect("a sock_diag socket (run as root)")
}

fn own_pid() -> std::io::Result<Vec<u32>> {
    Ok(vec![std::process::id()])
}

/// This process and `n - 1` sleeping children: a sandbox of `n` processes.
fn sandbox_of(n: usize, children: &mut Vec<std::process::Child>) -> Vec<u32> {
    while children.len() + 1 < n {
        let child = std::process::Command::new("sleep").arg("600").spawn().expect("sleep");
        children.push(child);
    }
    std::iter::once(std::process::id()).chain(children.iter().take(n - 1).map(|c| c.id())).collect()
}

/// The init's side: answers every request on `sock` until the other end closes.
fn serve(identity: ProcIdentity, sock: OwnedFd) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        loop {
            let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::NONE).is_err() {
                return;
            }
            let revents = fds[0].revents().unwrap_or(PollFlags::empty());
            // The supervisor's end closed (a closed SEQPACKET pair also reads as POLLIN).
            if revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR) {
                return;
            }
            if revents.contains(PollFlags::POLLIN) {
                identity::answer(&identity, sock.as_fd());
            }
        }
    })
}

fn main() {
    let n: usize = std::env::var("BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let _agent = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, peer) = listener.accept().unwrap();
    let local = accepted.local_addr().unwrap();
    let host_pids = ProcIdentity::all_pids().unwrap().len();
    println!("caller-identity round trip to the sandbox's init, {n} calls each (p50 / p99, microseconds)");

    // Floor: a request-sized message out, a reply-sized one back, on the same kind of pair.
    let (a, b) = identity::pair().unwrap();
    let sandboxed =
        ProcIdentity::new("/proc/net/tcp", "/proc/net/tcp6", own_pid).with_sock_diag_socket(diag()).unwrap();
    let reply_len = serde_json::to_vec(
        &serde_json::json!({"id": 1, "caller": {"Ok": sandboxed.identify_now(peer, local).unwrap()}}),
    )
    .unwrap()
    .len();
    let request_len = serde_json::to_vec(&serde_json::json!({"id": 1, "peer": peer, "local": local})).unwrap().len();
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let reply = vec![b'x'; reply_len];
        while let Ok(k) = recv(b.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            if k == 0 || send(b.as_raw_fd(), &reply, MsgFlags::empty()).is_err() {
                return;
            }
        }
    });
    let request = vec![b'x'; request_len];
    let mut buf = vec![0u8; 64 * 1024];
    let floor = measure(n, || {
        send(a.as_raw_fd(), &request, MsgFlags::empty()).unwrap();
        recv(a.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap();
    });
    drop(a);
    echo.join().unwrap();
    println!(
        "  floor: bare SOCK_SEQPACKET round trip ({request_len} B out, {reply_len} B back): {:>8.1} / {:>8.1}",
        floor.0, floor.1
    );

    let mut children = Vec::new();
    let views: Vec<(String, Vec<u32>)> = [1, 16, 64]
        .into_iter()
        .map(|k| (format!("a sandbox of {k} process{}", if k == 1 { "" } else { "es" }), sandbox_of(k, &mut children)))
        .chain(std::iter::once((
            format!("the host's /proc ({host_pids} processes)"),
            ProcIdentity::all_pids().unwrap(),
        )))
        .collect();
    for (label, pids) in views {
        let make = || {
            let pids = pids.clone();
            ProcIdentity::new("/proc/net/tcp", "/proc/net/tcp6", move || Ok(pids.clone()))
                .with_sock_diag_socket(diag())
                .unwrap()
        };
        let direct = make();
        // On the host the walk up reaches processes outside the bench (cargo, whose binary a
        // toolchain update may have replaced): that view is skipped, saying why.
        let caller = match direct.identify_now(peer, local) {
            Ok(c) => c,
            Err(e) => {
                println!("  {label}: skipped ({e})");
                continue;
            }
        };
        let inproc = measure(n, || {
            direct.identify_now(peer, local).unwrap();
        });
        let (init_end, supervisor_end) = identity::pair().unwrap();
        let init = serve(make(), init_end);
        // The supervisor asks on its tokio runtime, as its proxy does.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let from_init = {
            let _in = rt.enter();
            identity::FromInit::new(supervisor_end).unwrap()
        };
        assert_eq!(rt.block_on(from_init.identify(peer, local)).unwrap(), caller, "the init names the same caller");
        // What the proxy does per request: ask, then check the holder is the one at accept.
        let round = measure(n, || {
            let now = rt.block_on(from_init.identify(peer, local)).unwrap();
            caller.still_holds(&now).unwrap();
        });
        drop(from_init);
        init.join().unwrap();
        println!("  {label}:");
        println!("    identify in process:          {:>8.1} / {:>8.1}", inproc.0, inproc.1);
        println!(
            "    per request, through the init: {:>8.1} / {:>8.1}   overhead at p50 {:>6.1} us = {:.1}x the bare round trip",
            round.0,
            round.1,
            round.0 - inproc.0,
            (round.0 - inproc.0) / floor.0
        );
    }
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
