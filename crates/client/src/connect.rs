//! Reaching the gateway: its endpoint, a channel to it, and the credentials each call carries.

use std::time::Duration;

use openshell_proto::v1::{
    audit_client::AuditClient, grants_client::GrantsClient, health_client::HealthClient,
    policies_client::PoliciesClient, sandboxes_client::SandboxesClient, supervisor_client::SupervisorClient,
    users_client::UsersClient,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::{Code, PROGRAM_HEADER};

/// Why no client could be made. Never carries a token.
#[derive(Debug)]
pub enum ConnectError {
    /// The endpoint is not one this client speaks (`why` says what is wrong).
    Endpoint { url: String, why: String },
    /// The token cannot travel in a header (it is not shown).
    Token,
    /// The program cannot travel in a header.
    Program,
    /// Nothing answered at the endpoint.
    Unreachable { url: String, why: String },
}

impl ConnectError {
    pub fn code(&self) -> Code {
        match self {
            ConnectError::Endpoint { .. } | ConnectError::Token | ConnectError::Program => Code::InvalidArgument,
            ConnectError::Unreachable { .. } => Code::Unavailable,
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Endpoint { url, why } => write!(f, "endpoint {url}: {why}"),
            ConnectError::Token => f.write_str("token: not a valid token (ASCII only)"),
            ConnectError::Program => f.write_str("program: not valid in a header (visible ASCII only)"),
            ConnectError::Unreachable { url, why } => write!(f, "cannot reach the gateway at {url} ({why})"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Where the gateway listens (`http://HOST:PORT`), and how long to wait for it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    url: String,
    connect_timeout: Duration,
    timeout: Option<Duration>,
}

impl Endpoint {
    /// An `http://` URL with a host (the gateway's listener speaks plain HTTP/2; TLS is not
    /// built in). Connecting waits 5 s; calls have no deadline unless [`Endpoint::timeout`].
    pub fn parse(url: &str) -> Result<Endpoint, ConnectError> {
        let bad = |why: &str| ConnectError::Endpoint { url: url.to_string(), why: why.to_string() };
        if url.starts_with("https://") {
            return Err(bad("https is not supported: the gateway listens on http://"));
        }
        if !url.starts_with("http://") {
            return Err(bad("must start with http://"));
        }
        let uri: tonic::codegen::http::Uri = url.parse().map_err(|e| bad(&format!("not a URL: {e}")))?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("names no host"));
        }
        Ok(Endpoint { url: url.to_string(), connect_timeout: Duration::from_secs(5), timeout: None })
    }

    pub fn connect_timeout(mut self, d: Duration) -> Endpoint {
        self.connect_timeout = d;
        self
    }

    /// A deadline on every call.
    pub fn timeout(mut self, d: Duration) -> Endpoint {
        self.timeout = Some(d);
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn channel(&self) -> Result<tonic::transport::Endpoint, ConnectError> {
        let e = Channel::from_shared(self.url.clone())
            .map_err(|e| ConnectError::Endpoint { url: self.url.clone(), why: e.to_string() })?
            .connect_timeout(self.connect_timeout);
        Ok(match self.timeout {
            Some(t) => e.timeout(t),
            None => e,
        })
    }

    /// Connects now (refused at once when nothing answers), calling with `token`.
    pub async fn connect(&self, token: Option<&str>) -> Result<Client, ConnectError> {
        let auth = bearer(token)?;
        let channel = self
            .channel()?
            .connect()
            .await
            .map_err(|e| ConnectError::Unreachable { url: self.url.clone(), why: e.to_string() })?;
        Ok(Client { channel, url: self.url.clone(), auth, program: None })
    }

    /// Connects on the first call (and again after a failure), calling with `token`. Needs
    /// a running tokio runtime.
    pub fn connect_lazy(&self, token: Option<&str>) -> Result<Client, ConnectError> {
        let auth = bearer(token)?;
        Ok(Client { channel: self.channel()?.connect_lazy(), url: self.url.clone(), auth, program: None })
    }
}

fn bearer(token: Option<&str>) -> Result<Option<MetadataValue<Ascii>>, ConnectError> {
    token
        .map(|t| {
            let mut v: MetadataValue<Ascii> = format!("Bearer {t}").parse().map_err(|_| ConnectError::Token)?;
            // Kept out of Debug output (and so out of any log that prints a request).
            v.set_sensitive(true);
            Ok(v)
        })
        .transpose()
}

/// One principal's calls over one channel: each request carries its token (and, for a door
/// call, the program). Cheap to clone; clones share the channel.
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    url: String,
    auth: Option<MetadataValue<Ascii>>,
    program: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.url)
            .field("token", &self.auth.as_ref().map(|_| "<redacted>"))
            .field("program", &self.program)
            .finish()
    }
}

impl Client {
    /// The same channel calling with another token, and a program when it is a door call.
    pub fn with_token(&self, token: Option<&str>, program: Option<&str>) -> Result<Client, ConnectError> {
        let program = program.map(|p| p.parse().map_err(|_| ConnectError::Program)).transpose()?;
        Ok(Client { channel: self.channel.clone(), url: self.url.clone(), auth: bearer(token)?, program })
    }

    /// The endpoint's URL.
    pub fn endpoint(&self) -> &str {
        &self.url
    }

    /// `body` as a request carrying this client's credentials.
    pub fn request<T>(&self, body: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(body);
        if let Some(a) = &self.auth {
            r.metadata_mut().insert("authorization", a.clone());
        }
        if let Some(p) = &self.program {
            r.metadata_mut().insert(PROGRAM_HEADER, p.clone());
        }
        r
    }

    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub fn sandboxes(&self) -> SandboxesClient<Channel> {
        SandboxesClient::new(self.channel.clone())
    }
    pub fn grants(&self) -> GrantsClient<Channel> {
        GrantsClient::new(self.channel.clone())
    }
    pub fn policies(&self) -> PoliciesClient<Channel> {
        PoliciesClient::new(self.channel.clone())
    }
    pub fn audit(&self) -> AuditClient<Channel> {
        AuditClient::new(self.channel.clone())
    }
    pub fn users(&self) -> UsersClient<Channel> {
        UsersClient::new(self.channel.clone())
    }
    pub fn health(&self) -> HealthClient<Channel> {
        HealthClient::new(self.channel.clone())
    }
    pub fn supervisor(&self) -> SupervisorClient<Channel> {
        SupervisorClient::new(self.channel.clone())
    }
}
