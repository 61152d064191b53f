//! The gRPC surface: one service per module, each RPC a translation of its request into a
//! typed operation (`crate::ops` and the gateway's methods) and of the result back. Nothing
//! here decides: [`Api::call`] authenticates, runs the operation and maps its refusal.

mod audit;
mod grants;
mod health;
mod policies;
mod sandboxes;
mod supervisor;
mod users;

use std::future::Future;

use openshell_store::{Error, Principal};
use tonic::{Request, Response, Status};

use crate::Gateway;
use crate::auth::{Surface, principal};
use crate::ops::{Page, PageRequest};
use crate::status::to_status;

pub use policies::check_response;

/// Every gRPC service, over one gateway.
#[derive(Clone)]
pub struct Api(pub Gateway);

type R<T> = Result<Response<T>, Status>;

impl Api {
    /// Authenticates the caller for `surface`, runs `op` with it and the request's body, and
    /// answers its result or its refusal as a status (one mapping for every RPC).
    async fn call<T, U, F, Fut>(&self, surface: Surface, req: Request<T>, op: F) -> R<U>
    where
        F: FnOnce(Principal, T) -> Fut,
        Fut: Future<Output = Result<U, Error>>,
    {
        let caller = principal(&self.0.store, &self.0.auth, &req, surface).await.map_err(to_status)?;
        op(caller, req.into_inner()).await.map(Response::new).map_err(to_status)
    }

    /// [`Api::call`] on the API surface (a user, a sandbox, or a door call).
    async fn api<T, U, F, Fut>(&self, req: Request<T>, op: F) -> R<U>
    where
        F: FnOnce(Principal, T) -> Fut,
        Fut: Future<Output = Result<U, Error>>,
    {
        self.call(Surface::Api, req, op).await
    }
}

/// Proto's empty string as "not given".
fn optional(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

/// A page request from a listing's `page_size` and `page_token`.
fn page_request(size: i32, token: String) -> PageRequest {
    PageRequest { size, token }
}

/// A page as its rows (converted by `f`) and the next page's token.
fn page_out<T, U>(page: Page<T>, f: impl FnMut(T) -> U) -> (Vec<U>, String) {
    let page = page.map(f);
    (page.items, page.next_token)
}
