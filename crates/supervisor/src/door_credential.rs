//! The door credential the supervisor holds for its in-sandbox MCP door: exchanged for the
//! sandbox credential, renewed well before it expires, handed only to the code that forwards
//! door calls to the gateway. It lives in the supervisor's memory (non-dumpable), never in
//! the sandbox's environment, files or argv, so the agent never sees it.

use std::time::Duration;

use tokio::sync::watch;

use crate::gateway;

/// The current door credential; cheap to clone.
#[derive(Clone)]
pub struct DoorCredential {
    current: watch::Receiver<Option<String>>,
}

impl DoorCredential {
    /// Starts exchanging and renewing in the background (stops when every handle is dropped).
    pub fn spawn(client: gateway::Client) -> DoorCredential {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(renew_forever(client, tx));
        DoorCredential { current: rx }
    }

    /// The credential to forward a door call with, once the first exchange succeeded.
    pub async fn token(&self) -> Option<String> {
        let mut rx = self.current.clone();
        if rx.borrow().is_none() {
            // The first exchange is under way: wait briefly rather than refuse the call.
            let _ = tokio::time::timeout(Duration::from_secs(5), rx.wait_for(Option::is_some)).await;
        }
        rx.borrow().clone()
    }
}

/// When to renew a credential living `ttl`: at half its life, so one failed exchange still
/// leaves time for retries before it expires.
fn renew_after(ttl: Duration) -> Duration {
    ttl / 2
}

async fn renew_forever(mut client: gateway::Client, tx: watch::Sender<Option<String>>) {
    let mut retry = Duration::from_millis(200);
    loop {
        match client.exchange_door_credential().await {
            Ok(c) => {
                retry = Duration::from_millis(200);
                let ttl = Duration::from_secs(c.ttl_seconds.max(1) as u64);
                if tx.send(Some(c.token)).is_err() {
                    return;
                }
                tracing::debug!(expires_at = %c.expires_at, "door credential renewed");
                tokio::time::sleep(renew_after(ttl)).await;
            }
            Err(s) => {
                tracing::warn!("exchanging for a door credential: {}", s.message());
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(Duration::from_secs(5));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn renews_before_expiry() {
        use std::time::Duration;
        for ttl in [1, 3, 600] {
            let ttl = Duration::from_secs(ttl);
            assert!(super::renew_after(ttl) < ttl);
        }
    }
}
