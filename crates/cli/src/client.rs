//! Reaching the gateway from the CLI: the endpoint and token from the flags, the environment
//! or the config file, and failures as the CLI prints them with their exit codes.

use std::collections::BTreeMap;

use openshell_client::{Code, ConnectError, DEFAULT_ENDPOINT, EXIT_ERROR, Endpoint, Refusal, exit_code};

pub use openshell_client::Client;

/// Every call's deadline (an exec or a download streams within it).
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Endpoint and token from the flags, then the environment (clap), then the config file.
pub async fn connect(endpoint: Option<String>, token: Option<String>, need_token: bool) -> Result<Client, Failure> {
    let config = openshell_gateway::client_config::load()
        .map_err(|e| Failure::local(EXIT_ERROR, format!("reading the config: {e}")))?;
    let endpoint = endpoint
        .or_else(|| config.as_ref().map(|c| c.endpoint.clone()))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let token = token.or_else(|| config.as_ref().map(|c| c.token.clone()));
    if need_token && token.is_none() {
        return Err(Failure::coded(
            Code::NotAllowed,
            format!(
                "no login token: start a gateway with `openshell gateway start` (it writes {}), or pass --token",
                openshell_gateway::client_config::path().display()
            ),
        ));
    }
    let target = Endpoint::parse(&endpoint).map_err(connect_failure)?.timeout(CALL_TIMEOUT);
    target.connect(token.as_deref()).await.map_err(connect_failure)
}

fn connect_failure(e: ConnectError) -> Failure {
    let message = match &e {
        ConnectError::Endpoint { .. } => format!("--{e}"),
        ConnectError::Token => "--token: not a valid token (ASCII only)".to_string(),
        ConnectError::Program => e.to_string(),
        ConnectError::Unreachable { .. } => format!("{e}; is it running? start it with `openshell gateway start`"),
    };
    Failure::coded(e.code(), message)
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
    /// A local problem with the exit code of one of the project's codes, or another exit.
    pub fn local(exit: u8, message: impl Into<String>) -> Failure {
        let code = Code::ALL.into_iter().find(|c| exit_code(*c) == exit).map_or("ERROR", Code::as_str);
        Failure { code: code.into(), message: message.into(), details: BTreeMap::new(), exit }
    }

    fn coded(code: Code, message: impl Into<String>) -> Failure {
        Failure { code: code.as_str().into(), message: message.into(), details: BTreeMap::new(), exit: exit_code(code) }
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
        let r = Refusal::from(&s);
        Failure { code: r.code_name(), exit: r.exit_code(), message: r.message, details: r.details }
    }
}
