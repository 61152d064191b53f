//! The supervisor's own hosts, reached through the proxy: `policy.local` (the sandbox's
//! policy, denials, proposals) and `openshell.local` (the MCP door). They never go to DNS;
//! a name without a handler answers 404.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper::{Request, Response};

use crate::identity::Caller;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Response bodies: the proxy's own, an upstream's, or a virtual host's.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub const POLICY_HOST: &str = "policy.local";
pub const OPENSHELL_HOST: &str = "openshell.local";

/// Serves requests for one virtual host. The request's URI is in origin form (`/mcp?x`);
/// `caller` is the kernel-resolved program that sent it.
pub trait VirtualHost: Send + Sync {
    fn serve(&self, caller: Caller, req: Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
}

impl<F, Fut> VirtualHost for F
where
    F: Fn(Caller, Request<Incoming>) -> Fut + Send + Sync,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    fn serve(&self, caller: Caller, req: Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        Box::pin(self(caller, req))
    }
}

/// Handlers for the reserved names; `None` answers 404.
#[derive(Clone, Default)]
pub struct VirtualHosts {
    pub policy: Option<Arc<dyn VirtualHost>>,
    pub openshell: Option<Arc<dyn VirtualHost>>,
}

/// What a (normalized) host name means to the proxy.
pub(crate) enum Named<'a> {
    Virtual(Option<&'a Arc<dyn VirtualHost>>),
    Network,
}

impl VirtualHosts {
    pub(crate) fn lookup(&self, host: &str) -> Named<'_> {
        match host {
            POLICY_HOST => Named::Virtual(self.policy.as_ref()),
            OPENSHELL_HOST => Named::Virtual(self.openshell.as_ref()),
            _ => Named::Network,
        }
    }
}
