//! Who is calling: a bearer token from the request, looked up (by its hash) in the store.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openshell_store::{Code, Error, Principal, Store};

/// Metadata the supervisor adds to calls made through the in-sandbox door: the calling
/// program as the kernel resolved it. Only meaningful with a sandbox credential, which only
/// supervisors hold.
pub const PROGRAM_HEADER: &str = "x-openshell-program";

/// Failed authentications one peer address may cost the database per window; past it, an
/// unknown token is refused before the database is asked (a token verified recently is
/// still looked up, so a real user on the same address is not locked out).
const FAILURES_PER_WINDOW: u32 = 20;
const WINDOW: Duration = Duration::from_secs(1);
/// How long a verified user is reused without asking the database: a revoked or expired
/// token is refused within this (sandbox credentials are never cached).
const VERIFIED_TTL: Duration = Duration::from_millis(900);
/// How long a token stays "known good" (exempt from the per-peer budget) after it verified.
const KNOWN_GOOD: Duration = Duration::from_secs(600);
/// Bound on each map: past it, stale entries are dropped (and, if none are, the map is cleared).
const MAX_ENTRIES: usize = 10_000;

/// Verified tokens, briefly cached, and failed authentications per peer.
#[derive(Default)]
pub struct Guard {
    verified: Mutex<HashMap<[u8; 32], (Principal, Instant)>>,
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    lookups: Mutex<HashMap<IpAddr, Arc<tokio::sync::Semaphore>>>,
}

/// Unknown tokens from one peer looked up at once.
const LOOKUPS_PER_PEER: usize = 4;

impl Guard {
    fn cached(&self, hash: &[u8; 32]) -> (Option<Principal>, bool) {
        let map = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(hash) {
            Some((p, at)) if at.elapsed() < VERIFIED_TTL => (Some(p.clone()), true),
            Some((_, at)) => (None, at.elapsed() < KNOWN_GOOD),
            None => (None, false),
        }
    }

    fn remember(&self, hash: [u8; 32], p: &Principal) {
        let mut map = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, (_, at)| at.elapsed() < KNOWN_GOOD);
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(hash, (p.clone(), Instant::now()));
    }

    /// Remembered as verified long enough ago that it is never served from the cache.
    fn known_good(&self, hash: [u8; 32], p: &Principal) {
        if let Some(at) = Instant::now().checked_sub(VERIFIED_TTL) {
            let mut map = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() < MAX_ENTRIES {
                map.insert(hash, (p.clone(), at));
            }
        }
    }

    fn forget(&self, hash: &[u8; 32]) {
        self.verified.lock().unwrap_or_else(|e| e.into_inner()).remove(hash);
    }

    fn over_budget(&self, peer: Option<IpAddr>) -> bool {
        let Some(peer) = peer else { return false };
        let map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        matches!(map.get(&peer), Some((n, start)) if start.elapsed() < WINDOW && *n >= FAILURES_PER_WINDOW)
    }

    /// A permit to ask the database about an unknown token from this peer: at most a few at
    /// once, so a flood of distinct bad tokens cannot all pass the budget check before any of
    /// them has failed. Valid ones only wait their turn.
    async fn lookup_permit(&self, peer: Option<IpAddr>) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let peer = peer?;
        let sem = {
            let mut map = self.lookups.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() >= MAX_ENTRIES {
                map.retain(|_, s| s.available_permits() < LOOKUPS_PER_PEER);
            }
            map.entry(peer).or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(LOOKUPS_PER_PEER))).clone()
        };
        sem.acquire_owned().await.ok()
    }

    fn failed(&self, peer: Option<IpAddr>) {
        let Some(peer) = peer else { return };
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, (_, start)| start.elapsed() < WINDOW);
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        let entry = map.entry(peer).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= WINDOW {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }
}

/// Who calls, from a gRPC request: its metadata and peer address.
pub async fn principal<T>(store: &Store, guard: &Guard, req: &tonic::Request<T>) -> Result<Principal, Error> {
    authenticate(store, guard, req.metadata().as_ref(), req.remote_addr()).await
}

/// Who calls, from a request's headers and peer address: the one authentication every
/// surface (gRPC, MCP) shares.
pub async fn authenticate(
    store: &Store,
    guard: &Guard,
    headers: &http::HeaderMap,
    peer: Option<std::net::SocketAddr>,
) -> Result<Principal, Error> {
    let header = headers
        .get("authorization")
        .ok_or_else(|| Error::new(Code::Unauthenticated, "no credential: send `authorization: Bearer TOKEN`"))?;
    let token = header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .ok_or_else(|| Error::new(Code::Unauthenticated, "malformed authorization header: expected `Bearer TOKEN`"))?;
    let hash = crate::tokens::hash(token);
    let peer = peer.map(|a| a.ip());
    let mut p = match guard.cached(&hash) {
        (Some(p), _) => p,
        (None, known_good) => {
            let _permit = if known_good { None } else { guard.lookup_permit(peer).await };
            if !known_good && guard.over_budget(peer) {
                return Err(Error::new(
                    Code::Unauthenticated,
                    "too many failed authentications from this address; wait a second and use a valid token",
                ));
            }
            match store.authenticate(&hash).await? {
                Some(p) => {
                    // Only users are served from the cache: a stopping sandbox's credential must
                    // die at once. A sandbox's is only marked known good, so its supervisor's
                    // calls (all from this host) never spend the failure budget.
                    if p.is_user() {
                        guard.remember(hash, &p);
                    } else {
                        guard.known_good(hash, &p);
                    }
                    p
                }
                None => {
                    guard.forget(&hash);
                    guard.failed(peer);
                    return Err(Error::new(Code::Unauthenticated, "unknown, revoked or expired credential"));
                }
            }
        }
    };
    if let Principal::Sandbox { program, .. } = &mut p {
        *program = headers
            .get(PROGRAM_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| v.starts_with('/') && v.len() <= 4096)
            .map(str::to_string);
    }
    Ok(p)
}

pub fn require_user(p: &Principal) -> Result<(), Error> {
    if p.is_user() {
        Ok(())
    } else {
        Err(Error::new(Code::NotAllowed, "this method is for users; a sandbox cannot call it"))
    }
}

pub fn require_sandbox(p: &Principal) -> Result<uuid::Uuid, Error> {
    match p {
        Principal::Sandbox { id, .. } => Ok(*id),
        Principal::User { .. } => Err(Error::new(Code::NotAllowed, "this method is for a sandbox's supervisor")),
    }
}
