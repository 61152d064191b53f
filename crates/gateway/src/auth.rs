//! Who is calling: a bearer token from the request, looked up (by its hash) in the store,
//! and what that credential may present on the surface the call arrived on.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openshell_store::{Code, Error, Principal, Store};

/// Metadata the supervisor adds to calls made through the in-sandbox door: the calling
/// program as the kernel resolved it. Accepted only with a door credential (which only
/// supervisors hold); on any other call it is refused, so no caller can claim a program.
pub const PROGRAM_HEADER: &str = "x-openshell-program";

/// Where a call arrives, which decides the credentials it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// The supervisor's own RPCs: a sandbox credential only (never a door credential).
    Supervisor,
    /// The API's gRPC services: a user's token, a sandbox credential, or a door credential
    /// with the calling program.
    Api,
    /// The MCP endpoint: a user's token, or a door credential with the calling program;
    /// a sandbox's general credential is not a door credential and is refused.
    Mcp,
}

/// Failed authentications one peer address may cost the database per window, for each kind
/// of credential; past it, an unknown token of that kind is refused before the database is
/// asked (a token verified recently is still looked up, so a real user on the same address is
/// not locked out). Kinds count apart: supervisors of stopping sandboxes, all on the gateway's
/// host, keep presenting credentials that no longer work, and must not lock out a user whose
/// token this process has not verified yet (its first call, or any call after a restart).
const FAILURES_PER_WINDOW: u32 = 20;
/// `details.reason` of a refusal for the address's spent budget (not the credential itself).
pub const BUDGET_REASON: &str = "auth_budget";
const WINDOW: Duration = Duration::from_secs(1);
/// How long a verified user (or, on MCP only, a door credential) is reused without asking
/// the database: a revoked or expired token is refused within this. A sandbox's general
/// credential is never cached, and a door credential is served from here only to MCP
/// requests, where every tool call checks it again in the SQL call that takes from its
/// sandbox's bucket (`take_door_call`), so only requests that act on nothing (initialize,
/// tools/list, the session's stream) may see a credential revoked less than this ago.
const VERIFIED_TTL: Duration = Duration::from_millis(900);
/// How long a token stays "known good" (exempt from the per-peer budget) after it verified, or
/// after this gateway minted it for a sandbox it starts.
const KNOWN_GOOD: Duration = Duration::from_secs(600);
/// Bound on each map: past it, stale entries are dropped (and, if none are, the map is cleared).
const MAX_ENTRIES: usize = 10_000;

/// A token's principal (only while it may be served from the cache; `None` marks a token
/// only known good) and when it verified.
type Verified = (Option<Principal>, Instant);

/// Verified tokens, briefly cached, and failed authentications per peer.
#[derive(Default)]
pub struct Guard {
    verified: Mutex<HashMap<[u8; 32], Verified>>,
    failures: Mutex<HashMap<(IpAddr, Kind), (u32, Instant)>>,
    lookups: Mutex<HashMap<IpAddr, Arc<tokio::sync::Semaphore>>>,
}

/// What a credential claims to be, by its prefix: failures of each kind have a budget of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    User,
    Sandbox,
    Door,
    Other,
}

impl Kind {
    fn of(token: &str) -> Kind {
        if token.starts_with(crate::tokens::USER_PREFIX) {
            Kind::User
        } else if token.starts_with(crate::tokens::SANDBOX_PREFIX) {
            Kind::Sandbox
        } else if token.starts_with(crate::tokens::DOOR_PREFIX) {
            Kind::Door
        } else {
            Kind::Other
        }
    }
}

/// Unknown tokens from one peer looked up at once.
const LOOKUPS_PER_PEER: usize = 4;

impl Guard {
    fn cached(&self, hash: &[u8; 32]) -> (Option<Principal>, bool) {
        let map = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(hash) {
            Some((Some(p), at)) if at.elapsed() < VERIFIED_TTL => (Some(p.clone()), true),
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
        map.insert(hash, (Some(p.clone()), Instant::now()));
    }

    /// Known good (exempt from the per-peer budget), never served from the cache: the
    /// database is asked on every call.
    fn known_good(&self, hash: [u8; 32]) {
        let mut map = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() < MAX_ENTRIES {
            map.insert(hash, (None, Instant::now()));
        }
    }

    /// A sandbox credential this gateway just minted for a workload it starts: its
    /// supervisor's first connect is no guess, so a budget other callers on the host spent
    /// (supervisors of stopping sandboxes presenting their dead credentials, say) must not
    /// hold the new sandbox back from READY.
    pub(crate) fn minted(&self, credential: &str) {
        self.known_good(crate::tokens::hash(credential));
    }

    fn forget(&self, hash: &[u8; 32]) {
        self.verified.lock().unwrap_or_else(|e| e.into_inner()).remove(hash);
    }

    fn over_budget(&self, peer: Option<IpAddr>, kind: Kind) -> bool {
        let Some(peer) = peer else { return false };
        let map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        matches!(map.get(&(peer, kind)), Some((n, start)) if start.elapsed() < WINDOW && *n >= FAILURES_PER_WINDOW)
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

    /// The database's answer about `token` (`lookup`; None: unknown), asked under its
    /// address's budget: a token not known good waits for a lookup permit and is refused
    /// once the address spent its budget; an unknown one spends from it.
    async fn looked_up<T>(
        &self,
        peer: Option<IpAddr>,
        token: &str,
        hash: &[u8; 32],
        known_good: bool,
        lookup: impl std::future::Future<Output = Result<Option<T>, Error>>,
    ) -> Result<T, Error> {
        let _permit = if known_good { None } else { self.lookup_permit(peer).await };
        if !known_good && self.over_budget(peer, Kind::of(token)) {
            // Marked, so a supervisor tells this from its own credential being refused.
            return Err(Error::new(
                Code::Unauthenticated,
                "too many failed authentications from this address; wait a second and use a valid token",
            )
            .with_details(
                serde_json::json!({ "reason": BUDGET_REASON, "retry_after_ms": WINDOW.as_millis() as u64 }),
            ));
        }
        match lookup.await? {
            Some(found) => Ok(found),
            None => {
                self.forget(hash);
                self.failed(peer, Kind::of(token));
                Err(Error::new(Code::Unauthenticated, "unknown, revoked or expired credential"))
            }
        }
    }

    fn failed(&self, peer: Option<IpAddr>, kind: Kind) {
        let Some(peer) = peer else { return };
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, (_, start)| start.elapsed() < WINDOW);
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        let entry = map.entry((peer, kind)).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= WINDOW {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }
}

/// The principal of a gRPC call on `surface` (see [`authenticate`]).
pub async fn principal<T>(
    store: &Store,
    guard: &Guard,
    req: &tonic::Request<T>,
    surface: Surface,
) -> Result<Principal, Error> {
    authenticate(store, guard, req.metadata().as_ref(), req.remote_addr(), surface).await
}

/// Who presents this credential, and the program when it came through the in-sandbox door.
/// One function for every surface: a program header is accepted only with a door
/// credential (and required with one); a door credential only on the API and MCP surfaces;
/// a sandbox's general credential never on MCP.
pub async fn authenticate(
    store: &Store,
    guard: &Guard,
    headers: &http::HeaderMap,
    peer: Option<std::net::SocketAddr>,
    surface: Surface,
) -> Result<Principal, Error> {
    authenticate_credential(store, guard, headers, peer, surface).await.map(|(p, _)| p)
}

/// [`authenticate`], with the SHA-256 of the credential presented (for a door call's
/// [`Store::take_door_call`]).
pub async fn authenticate_credential(
    store: &Store,
    guard: &Guard,
    headers: &http::HeaderMap,
    peer: Option<std::net::SocketAddr>,
    surface: Surface,
) -> Result<(Principal, [u8; 32]), Error> {
    let token = bearer(headers, surface)?;
    let door = token.starts_with(crate::tokens::DOOR_PREFIX);
    let hash = crate::tokens::hash(token);
    let peer = peer.map(|a| a.ip());
    let (cached, known_good) = guard.cached(&hash);
    let mut p = match cached {
        Some(p) if !door || surface == Surface::Mcp => p,
        _ => {
            let lookup =
                async { if door { store.authenticate_door(&hash).await } else { store.authenticate(&hash).await } };
            let p = guard.looked_up(peer, token, &hash, known_good, lookup).await?;
            // Users and door credentials are cached (see VERIFIED_TTL); a sandbox's general
            // credential must die at once, so it is only marked known good, and its
            // supervisor's calls (all from this host) never spend the budget.
            if p.is_user() || door {
                guard.remember(hash, &p);
            } else {
                guard.known_good(hash);
            }
            p
        }
    };
    let program = match headers.get(PROGRAM_HEADER).map(|v| v.to_str().map_err(|_| ())) {
        None => None,
        Some(Err(())) => return Err(Error::invalid(PROGRAM_HEADER, "not visible ASCII")),
        Some(Ok(_)) if !door => return Err(program_not_door()),
        Some(Ok(v)) if !v.starts_with('/') || v.len() > 4096 => {
            return Err(Error::invalid(PROGRAM_HEADER, "must be an absolute path of at most 4096 bytes"));
        }
        Some(Ok(v)) => Some(v.to_string()),
    };
    match (&mut p, door, surface) {
        (Principal::Sandbox { .. }, false, Surface::Mcp) => Err(Error::new(
            Code::Unauthenticated,
            format!(
                "a sandbox's credential is not accepted by the MCP endpoint: calls from a sandbox come through its \
                 door, with a door credential (audience {})",
                crate::tokens::DOOR_AUDIENCE
            ),
        )),
        (Principal::Sandbox { program: slot, .. }, true, _) => {
            *slot = Some(program.ok_or_else(|| {
                Error::invalid(PROGRAM_HEADER, "a door call must name the calling program the kernel reported")
            })?);
            Ok((p, hash))
        }
        _ => Ok((p, hash)),
    }
}

/// A supervisor's call whose SQL checks its sandbox credential in the same round trip
/// (`supervisor_start` and `supervisor_ready`, sql/supervisor.sql): the header and this
/// address's budget are checked here as [`authenticate`] checks them, then `call` runs with
/// the credential's hash, and its UNAUTHENTICATED refusal counts as a failed authentication.
/// A token that is not a sandbox credential by its form is authenticated first, as on any
/// call, so a user's is told the method is a supervisor's.
pub async fn supervisor_call<T, F, Fut>(
    store: &Store,
    guard: &Guard,
    headers: &http::HeaderMap,
    peer: Option<std::net::SocketAddr>,
    call: F,
) -> Result<T, Error>
where
    F: FnOnce([u8; 32]) -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let token = bearer(headers, Surface::Supervisor)?;
    if !token.starts_with(crate::tokens::SANDBOX_PREFIX) {
        let (p, hash) = authenticate_credential(store, guard, headers, peer, Surface::Supervisor).await?;
        require_sandbox(&p)?;
        return call(hash).await;
    }
    if headers.contains_key(PROGRAM_HEADER) {
        return Err(program_not_door());
    }
    let hash = crate::tokens::hash(token);
    let (_, known_good) = guard.cached(&hash);
    let checked = async {
        match call(hash).await {
            Err(e) if e.code == Code::Unauthenticated => Ok(None),
            other => other.map(Some),
        }
    };
    let answer = guard.looked_up(peer.map(|a| a.ip()), token, &hash, known_good, checked).await?;
    guard.known_good(hash);
    Ok(answer)
}

/// The bearer token of a call on `surface` (a door credential is refused on the supervisor's).
fn bearer(headers: &http::HeaderMap, surface: Surface) -> Result<&str, Error> {
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
    if surface == Surface::Supervisor && token.starts_with(crate::tokens::DOOR_PREFIX) {
        return Err(Error::new(
            Code::Unauthenticated,
            format!(
                "a door credential (audience {}) is only accepted on MCP calls, not by the supervisor's RPCs",
                crate::tokens::DOOR_AUDIENCE
            ),
        ));
    }
    Ok(token)
}

fn program_not_door() -> Error {
    Error::invalid(
        PROGRAM_HEADER,
        "only the in-sandbox door may name the calling program (with its door credential); no other caller can \
         claim one",
    )
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
