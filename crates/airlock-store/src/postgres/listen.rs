//! Decisions announced across replicas: the replica that records a
//! decision sends `NOTIFY` on the tenant's channel with the approval's id
//! (nothing else: the waiting call reads the ledger), and every replica of
//! the tenant listens.
//!
//! A notification sent while a listener was disconnected is lost, so each
//! time a listener starts listening (first, and after every loss) it calls
//! `listening`: the hub then has every waiting call re-read its row, which
//! is how it catches up.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio_postgres::{AsyncMessage, Config, NoTls};

type Decided = Arc<dyn Fn(&str) + Send + Sync>;
type Listening = Arc<dyn Fn() + Send + Sync>;

/// The channel of one tenant: derived from its name, so that one tenant's
/// replicas never hear another's ids.
pub fn channel(tenant: &str) -> String {
    let digest = Sha256::digest(tenant.as_bytes());
    format!("airlock_decided_{}", &hex::encode(digest)[..24])
}

/// Waits before listening again after a loss: short, then longer.
const BACKOFF: [Duration; 4] = [
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(2),
    Duration::from_secs(5),
];

pub(super) fn spawn(
    driver: &tokio::runtime::Handle,
    config: Config,
    channel: String,
    decided: Decided,
    listening: Listening,
) {
    driver.spawn(async move {
        let mut failures = 0usize;
        loop {
            match listen_once(&config, &channel, &decided, &listening).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    tracing::warn!(error = %e, "listening for decisions failed; retrying");
                    failures += 1;
                }
            }
            tokio::time::sleep(BACKOFF[failures.min(BACKOFF.len() - 1)]).await;
        }
    });
}

/// One listening connection, until it ends.
async fn listen_once(
    config: &Config,
    channel: &str,
    decided: &Decided,
    listening: &Listening,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, mut rx) = futures::channel::mpsc::unbounded();
    // The connection's messages, until it closes or fails (either ends
    // the loop below, and the caller listens again).
    let pump = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if tx.unbounded_send(m).is_err() {
                break;
            }
        }
    });
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    listening();
    while let Some(message) = rx.next().await {
        if let AsyncMessage::Notification(n) = message {
            decided(n.payload());
        }
    }
    pump.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_has_its_own_channel_and_it_is_an_identifier() {
        let a = channel("team-a");
        assert_ne!(a, channel("team-b"));
        assert!(a.len() < 63);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }
}
