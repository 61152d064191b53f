//! A TCP socket's inode by its exact addresses, asked of the kernel through
//! `NETLINK_SOCK_DIAG`: one hashed lookup, where reading `/proc/<pid>/net/tcp` makes the
//! kernel walk its whole socket hash and print every socket (milliseconds on a busy host).

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Mutex;

use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::{Socket, SocketAddr as NetlinkAddr};

/// `ENOENT`: the kernel has no such socket.
const ENOENT: i32 = 2;

/// A sock_diag socket in one network namespace; lookups are serialized.
pub(crate) struct SockDiag {
    socket: Mutex<Socket>,
}

impl SockDiag {
    /// Opens the socket inside the network namespace `netns` (e.g. `/proc/<pid>/ns/net`): a
    /// socket answers for the namespace it was made in, so a helper thread enters it.
    pub(crate) fn open_in(netns: &Path) -> io::Result<SockDiag> {
        let netns = File::open(netns)?;
        let socket = std::thread::spawn(move || -> io::Result<Socket> {
            nix::sched::setns(netns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
            socket.bind_auto()?;
            socket.connect(&NetlinkAddr::new(0, 0))?;
            Ok(socket)
        })
        .join()
        .map_err(|_| io::Error::other("the namespace helper thread panicked"))??;
        Ok(SockDiag { socket: Mutex::new(socket) })
    }

    /// Uses a `NETLINK_SOCK_DIAG` socket made inside the namespace by a process there (its
    /// init, when this process may not enter the namespace: a non-root supervisor).
    pub(crate) fn from_socket(fd: std::os::fd::OwnedFd) -> io::Result<SockDiag> {
        use std::os::fd::IntoRawFd;
        // SAFETY: we own the descriptor; the Socket takes it over.
        let mut socket = unsafe { <Socket as std::os::fd::FromRawFd>::from_raw_fd(fd.into_raw_fd()) };
        socket.bind_auto()?;
        socket.connect(&NetlinkAddr::new(0, 0))?;
        Ok(SockDiag { socket: Mutex::new(socket) })
    }

    /// The inode of the socket whose local address is `src` and remote address `dst`
    /// (canonical forms), `None` when there is none. An IPv4 pair is also looked for as an
    /// IPv6 socket's v4-mapped pair.
    pub(crate) fn inode(&self, src: SocketAddr, dst: SocketAddr) -> Result<Option<u32>, String> {
        let socket = self.socket.lock().map_err(|_| "sock_diag socket poisoned".to_string())?;
        let mut tries = vec![(AF_INET6, mapped(src), mapped(dst))];
        if src.is_ipv4() && dst.is_ipv4() {
            tries.insert(0, (AF_INET, src, dst));
        }
        for (family, src, dst) in tries {
            if let Some(inode) = lookup(&socket, family, src, dst)? {
                return Ok(Some(inode));
            }
        }
        Ok(None)
    }
}

fn mapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    }
}

fn lookup(socket: &Socket, family: u8, src: SocketAddr, dst: SocketAddr) -> Result<Option<u32>, String> {
    let mut header = NetlinkHeader::default();
    // Not a dump: the kernel looks the one socket up by its addresses.
    header.flags = NLM_F_REQUEST;
    let request = InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::empty(),
        states: StateFlags::all(),
        socket_id: SocketId {
            source_port: src.port(),
            destination_port: dst.port(),
            source_address: src.ip(),
            destination_address: dst.ip(),
            interface_id: 0,
            // All ones: no cookie to check.
            cookie: [0xff; 8],
        },
    };
    let mut packet = NetlinkMessage::new(header, SockDiagMessage::InetRequest(request).into());
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf[..]);
    socket.send(&buf, 0).map_err(|e| format!("sock_diag request: {e}"))?;
    let mut reply = vec![0u8; 8192];
    let n = socket.recv(&mut &mut reply[..], 0).map_err(|e| format!("sock_diag reply: {e}"))?;
    let message = <NetlinkMessage<SockDiagMessage>>::deserialize(&reply[..n.min(reply.len())])
        .map_err(|e| format!("sock_diag reply: {e}"))?;
    match message.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => Ok(Some(r.header.inode)),
        NetlinkPayload::Error(e) if e.raw_code() == -ENOENT => Ok(None),
        NetlinkPayload::Error(e) => Err(format!("sock_diag: {}", e.to_io())),
        other => Err(format!("sock_diag: unexpected reply {other:?}")),
    }
}
