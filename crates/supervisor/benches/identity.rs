//! The per-connection caller-identity round trip: for every new proxy connection the
//! supervisor asks the sandbox's init who opened it (`identity::FromInit` -> the init's
//! `identity::answer`, one SOCK_SEQPACKET message each way, JSON), in root and rootless mode
//! alike. `cargo bench -p openshell-supervisor --bench identity` (release), as root.
//!
//! Measured in the same run, each p50/p99 over `BENCH_N` calls (default 2000):
//! * **floor, bare round trip**: the same socket pair type, a message of the request's size
//!   out and the reply's size back, nothing else;
//! * **identify in process**: what the init does per request (the proxy crate's
//!   `ProcIdentity` over sock_diag and /proc), called directly;
//! * **round trip through the init**: the supervisor's real code and the init's real code
//!   (this file includes `src/identity.rs`), the init on a thread of its own polling as the
//!   real one does.
//!
//! Both identity figures are taken twice: with the processes a sandbox's init sees (this
//! process alone, as in a sandbox's PID namespace with one agent), and with every process of
//! this host (`/proc` as the host shows it, an upper bound). The caller is a TCP connection
//! of this process on 127.0.0.1.

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
    let reply_len =
        serde_json::to_vec(&serde_json::json!({"id": 1, "caller": {"Ok": sandboxed.identify(peer, local).unwrap()}}))
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

    for (label, make) in [
        (
            "a sandbox's view (1 process)",
            Box::new(|| ProcIdentity::new("/proc/net/tcp", "/proc/net/tcp6", own_pid)) as Box<dyn Fn() -> ProcIdentity>,
        ),
        ("the host's /proc", Box::new(|| ProcIdentity::new("/proc/net/tcp", "/proc/net/tcp6", ProcIdentity::all_pids))),
    ] {
        let label =
            if label.starts_with("the host") { format!("{label} ({host_pids} processes)") } else { label.to_string() };
        let direct = make().with_sock_diag_socket(diag()).unwrap();
        // On the host the walk up reaches processes outside the bench (cargo, whose binary a
        // toolchain update may have replaced): that view is skipped, saying why.
        let caller = match direct.identify(peer, local) {
            Ok(c) => c,
            Err(e) => {
                println!("  {label}: skipped ({e})");
                continue;
            }
        };
        let inproc = measure(n, || {
            direct.identify(peer, local).unwrap();
        });
        let (init_end, supervisor_end) = identity::pair().unwrap();
        let init = serve(make().with_sock_diag_socket(diag()).unwrap(), init_end);
        let from_init = identity::FromInit::new(supervisor_end).unwrap();
        assert_eq!(from_init.identify(peer, local).unwrap(), caller, "the init names the same caller");
        let round = measure(n, || {
            from_init.identify(peer, local).unwrap();
        });
        drop(from_init);
        init.join().unwrap();
        println!("  {label}:");
        println!("    identify in process:          {:>8.1} / {:>8.1}", inproc.0, inproc.1);
        println!(
            "    round trip through the init:  {:>8.1} / {:>8.1}   overhead at p50 {:>6.1} us = {:.1}x the bare round trip",
            round.0,
            round.1,
            round.0 - inproc.0,
            (round.0 - inproc.0) / floor.0
        );
    }
}
