//! The door credential the supervisor holds for its in-sandbox MCP door: exchanged for the
//! sandbox credential, renewed well before it expires, handed only to the code that forwards
//! door calls to the gateway. It lives in the supervisor's memory (non-dumpable), never in
//! the sandbox's environment, files or argv, so the agent never sees it. It comes with the
//! gateway's MCP body limit, which the door enforces itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::gateway;

/// The MCP body limit assumed until the gateway has said (the gateway's default).
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// The current door credential; cheap to clone.
#[derive(Clone)]
pub struct DoorCredential {
    current: watch::Receiver<Option<String>>,
    max_body: Arc<AtomicUsize>,
}

impl DoorCredential {
    /// Starts exchanging and renewing in the background once `after` ends (the sandbox's
    /// READY report goes first: a door call meanwhile waits in [`DoorCredential::token`]);
    /// stops when every handle is dropped.
    pub fn spawn(client: gateway::Client, after: impl Future<Output = ()> + Send + 'static) -> DoorCredential {
        let (tx, rx) = watch::channel(None);
        let max_body = Arc::new(AtomicUsize::new(DEFAULT_MAX_BODY));
        let renewing = renew_forever(client, tx, max_body.clone());
        tokio::spawn(async move {
            after.await;
            renewing.await
        });
        DoorCredential { current: rx, max_body }
    }

    /// The largest MCP request body the gateway takes, as it said with the latest credential.
    pub fn max_body(&self) -> usize {
        self.max_body.load(Ordering::Relaxed)
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

async fn renew_forever(mut client: gateway::Client, tx: watch::Sender<Option<String>>, max_body: Arc<AtomicUsize>) {
    let mut retry = Duration::from_millis(200);
    loop {
        match client.exchange_door_credential().await {
            Ok(c) => {
                retry = Duration::from_millis(200);
                let ttl = Duration::from_secs(c.ttl_seconds.max(1) as u64);
                // An older gateway says nothing (0): keep its default.
                if let Ok(n @ 1..) = usize::try_from(c.mcp_max_body_bytes) {
                    max_body.store(n, Ordering::Relaxed);
                }
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
