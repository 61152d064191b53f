//! The gateway's one LISTEN connection: what sql/ NOTIFYs on [`CHANNEL`] at commit (a
//! sandbox's policy version in sql/policies.sql, a proposal in sql/proposals.sql, a phase in
//! sql/lifecycle.sql), as typed [`Change`]s. Payloads carry ids only.
//!
//! A notification reaches only a session that was LISTENing when the write committed: when
//! this connection ends ([`Listener::next`] returns None) the caller opens a new one and
//! treats everything as possibly changed (crates/gateway/src/changes.rs).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use uuid::Uuid;

use crate::Store;
use crate::error::Error;

/// The channel every trigger of sql/ notifies on.
pub const CHANNEL: &str = "openshell_changes";

/// The `application_name` of the LISTEN connection (how an operator finds it in
/// `pg_stat_activity`).
pub const APPLICATION_NAME: &str = "openshell-gateway listen";

/// One committed change, as its trigger named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A sandbox's policy has this version now.
    Policy { sandbox: Uuid, version: i32 },
    /// A proposal of a sandbox was made or left pending.
    Proposal { sandbox: Uuid, id: i64 },
    /// A sandbox's phase changed.
    Phase { sandbox: Uuid, phase: String },
    /// A payload this build does not know (a newer gateway's trigger): anything may have
    /// changed.
    Unknown,
}

impl Change {
    /// The change a payload names; [`Change::Unknown`] for anything else.
    pub fn parse(payload: &str) -> Change {
        #[derive(serde::Deserialize)]
        struct Payload {
            kind: String,
            sandbox: Uuid,
            version: Option<i32>,
            id: Option<i64>,
            phase: Option<String>,
        }
        let Ok(p) = serde_json::from_str::<Payload>(payload) else { return Change::Unknown };
        match (p.kind.as_str(), p.version, p.id, p.phase) {
            ("policy", Some(version), _, _) => Change::Policy { sandbox: p.sandbox, version },
            ("proposal", _, Some(id), _) => Change::Proposal { sandbox: p.sandbox, id },
            ("phase", _, _, Some(phase)) => Change::Phase { sandbox: p.sandbox, phase },
            _ => Change::Unknown,
        }
    }

    /// The sandbox it is about.
    pub fn sandbox(&self) -> Option<Uuid> {
        match self {
            Change::Policy { sandbox, .. } | Change::Proposal { sandbox, .. } | Change::Phase { sandbox, .. } => {
                Some(*sandbox)
            }
            Change::Unknown => None,
        }
    }
}

/// A LISTEN session of its own (not pooled); the changes in commit order.
pub struct Listener {
    /// Kept open: dropping it ends the session.
    _client: tokio_postgres::Client,
    changes: mpsc::Receiver<Change>,
    backend_pid: i32,
}

impl Listener {
    /// The next change; None once the connection is gone (open another, and treat everything
    /// as possibly changed: what committed meanwhile was told to no one here).
    pub async fn next(&mut self) -> Option<Change> {
        self.changes.recv().await
    }

    /// The session's backend process id (`pg_stat_activity.pid`).
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }
}

/// Changes queued between the connection and its reader before the connection waits.
const QUEUE: usize = 4096;

impl Store {
    /// Opens a session that LISTENs on [`CHANNEL`], as the gateway role. Its TCP keepalives
    /// notice a peer that vanished without closing (then [`Listener::next`] ends), since an
    /// idle LISTEN session otherwise never sends a byte.
    pub async fn listen(&self) -> Result<Listener, Error> {
        let mut config = self.session.clone();
        config.application_name(APPLICATION_NAME);
        config.keepalives(true).keepalives_idle(Duration::from_secs(30));
        config.keepalives_interval(Duration::from_secs(10)).keepalives_retries(3);
        let (client, mut conn) = config.connect(tokio_postgres::NoTls).await?;
        let (tx, rx) = mpsc::channel(QUEUE);
        // The connection is driven here; the client's own queries need it polled too.
        tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) if n.channel() == CHANNEL => {
                        if tx.send(Change::parse(n.payload())).await.is_err() {
                            return;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!("the LISTEN connection ended: {e}");
                        return;
                    }
                    None => return,
                }
            }
        });
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        let backend_pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await?.try_get(0)?;
        Ok(Listener { _client: client, changes: rx, backend_pid })
    }
}

#[cfg(test)]
mod tests {
    use super::Change;

    #[test]
    fn payloads_parse_and_anything_else_is_unknown() {
        let id = uuid::Uuid::nil();
        assert_eq!(
            Change::parse(&format!(r#"{{"kind":"policy","sandbox":"{id}","version":3}}"#)),
            Change::Policy { sandbox: id, version: 3 }
        );
        assert_eq!(
            Change::parse(&format!(r#"{{"kind":"proposal","sandbox":"{id}","id":9}}"#)),
            Change::Proposal { sandbox: id, id: 9 }
        );
        assert_eq!(
            Change::parse(&format!(r#"{{"kind":"phase","sandbox":"{id}","phase":"READY"}}"#)),
            Change::Phase { sandbox: id, phase: "READY".into() }
        );
        for bad in [
            "",
            "{}",
            "policy",
            r#"{"kind":"policy","sandbox":"x","version":1}"#,
            r#"{"kind":"new","sandbox":"00000000-0000-0000-0000-000000000000"}"#,
        ] {
            assert_eq!(Change::parse(bad), Change::Unknown, "{bad}");
        }
    }
}
