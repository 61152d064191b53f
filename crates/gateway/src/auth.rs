//! Who is calling: a bearer token from the request, looked up (by its hash) in the store.

use openshell_store::{Code, Error, Principal, Store};

/// Metadata the supervisor adds to calls made through the in-sandbox door: the calling
/// program as the kernel resolved it. Only meaningful with a sandbox credential, which only
/// supervisors hold.
pub const PROGRAM_HEADER: &str = "x-openshell-program";

pub async fn principal<T>(store: &Store, req: &tonic::Request<T>) -> Result<Principal, Error> {
    let header = req
        .metadata()
        .get("authorization")
        .ok_or_else(|| Error::new(Code::Unauthenticated, "no credential: send `authorization: Bearer TOKEN`"))?;
    let token = header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .ok_or_else(|| Error::new(Code::Unauthenticated, "malformed authorization header: expected `Bearer TOKEN`"))?;
    let mut p = store
        .authenticate(&crate::tokens::hash(token))
        .await?
        .ok_or_else(|| Error::new(Code::Unauthenticated, "unknown, revoked or expired credential"))?;
    if let Principal::Sandbox { program, .. } = &mut p {
        *program = req
            .metadata()
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
