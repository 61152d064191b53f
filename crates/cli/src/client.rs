//! Reaching the gateway: endpoint and token resolution, and failures with exit codes.

use std::collections::BTreeMap;
use std::time::Duration;

use openshell_codes::Code;
use openshell_proto::v1::{
    audit_client::AuditClient, grants_client::GrantsClient, health_client::HealthClient,
    policies_client::PoliciesClient, sandboxes_client::SandboxesClient, users_client::UsersClient,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;
use tonic_types::StatusExt;

const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7570";

pub struct Client {
    channel: Channel,
    endpoint: String,
    auth: Option<MetadataValue<Ascii>>,
}

impl Client {
    /// Endpoint and token from the flags, then the environment (clap), then the config file.
    pub async fn connect(endpoint: Option<String>, token: Option<String>, need_token: bool) -> Result<Client, Failure> {
        let config = openshell_gateway::client_config::load()
            .map_err(|e| Failure::local(1, format!("reading the config: {e}")))?;
        let endpoint = endpoint
            .or_else(|| config.as_ref().map(|c| c.endpoint.clone()))
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let token = token.or_else(|| config.as_ref().map(|c| c.token.clone()));
        if need_token && token.is_none() {
            return Err(Failure::local(
                4,
                format!(
                    "no login token: start a gateway with `openshell gateway start` (it writes {}), or pass --token",
                    openshell_gateway::client_config::path().display()
                ),
            ));
        }
        let auth = match token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| Failure::local(2, "--token: not a valid token (ASCII only)"))?,
            ),
            None => None,
        };
        let channel = Channel::from_shared(endpoint.clone())
            .map_err(|e| Failure::local(2, format!("--endpoint {endpoint}: {e}")))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(300))
            .connect()
            .await
            .map_err(|e| {
                Failure::local(
                    8,
                    format!("cannot reach the gateway at {endpoint} ({e}); is it running? start it with `openshell gateway start`"),
                )
            })?;
        Ok(Client { channel, endpoint, auth })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn req<T>(&self, body: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(body);
        if let Some(a) = &self.auth {
            r.metadata_mut().insert("authorization", a.clone());
        }
        r
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
    pub fn health(&mut self) -> HealthClient<Channel> {
        HealthClient::new(self.channel.clone())
    }
}

/// Why a command failed: the gateway's error code and details, or a local problem.
#[derive(Debug, serde::Serialize)]
pub struct Failure {
    pub code: String,
    pub message: String,
    pub details: BTreeMap<String, String>,
    #[serde(skip)]
    exit: u8,
}

impl Failure {
    pub fn local(exit: u8, message: impl Into<String>) -> Failure {
        let code = match exit {
            2 => Code::InvalidArgument.as_str(),
            4 => Code::NotAllowed.as_str(),
            8 => Code::Unavailable.as_str(),
            _ => "ERROR",
        };
        Failure { code: code.into(), message: message.into(), details: BTreeMap::new(), exit }
    }

    /// A failure whose output was already printed (only the exit code is left to give).
    pub fn silent(exit: u8) -> Failure {
        Failure { code: String::new(), message: String::new(), details: BTreeMap::new(), exit }
    }

    pub fn exit_code(&self) -> u8 {
        self.exit
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Failure {
        let info = s.get_error_details().error_info().cloned();
        let code = info.as_ref().map(|i| i.reason.clone()).unwrap_or_else(|| match s.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => Code::Unavailable.as_str().into(),
            tonic::Code::Unauthenticated => Code::Unauthenticated.as_str().into(),
            c => format!("{c:?}"),
        });
        let exit = match Code::parse(&code) {
            Some(Code::InvalidArgument) => 2,
            Some(Code::NotFound) => 3,
            Some(Code::NotAllowed | Code::Unauthenticated) => 4,
            Some(Code::LimitReached) => 5,
            Some(Code::PolicyExceedsParent | Code::PolicyUnprovable) => 6,
            Some(Code::Conflict) => 7,
            Some(Code::Unavailable) => 8,
            None => 1,
        };
        let prefix = format!("{code}: ");
        let message = s.message().strip_prefix(&prefix).unwrap_or(s.message()).to_string();
        let details = info.map(|i| i.metadata.into_iter().collect()).unwrap_or_default();
        Failure { code, message, details, exit }
    }
}
