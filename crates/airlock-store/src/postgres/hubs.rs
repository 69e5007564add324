//! The replicas of a tenant, each beating in `hubs`: how one replica
//! knows another stopped, and recovers what it left in the ledger.

use std::time::Duration;

use tokio_postgres::Transaction;

use crate::{Result, now_ms};

/// How often a replica says it is alive.
pub(super) const BEAT: Duration = Duration::from_secs(2);
/// A replica silent this long has stopped: its rows are recovered.
const STALE: Duration = Duration::from_secs(10);

fn cutoff() -> i64 {
    now_ms() - STALE.as_millis() as i64
}

/// The replicas of this tenant that beat recently.
pub(super) async fn alive(tx: &Transaction<'_>) -> Result<Vec<String>> {
    Ok(tx
        .query(
            "SELECT instance FROM airlock.hubs WHERE seen_at_ms >= $1",
            &[&cutoff()],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// One beat of `instance`: says it is alive, then recovers the rows of
/// replicas that stopped beating and forgets them. Returns what the
/// recovery moved (failed, expired).
pub(super) async fn beat(tx: &Transaction<'_>, instance: &str) -> Result<(usize, usize)> {
    tx.execute(
        "INSERT INTO airlock.hubs (instance, seen_at_ms) VALUES ($1, $2)
         ON CONFLICT (tenant, instance) DO UPDATE SET seen_at_ms = excluded.seen_at_ms",
        &[&instance, &now_ms()],
    )
    .await?;
    let stopped = tx
        .query(
            "DELETE FROM airlock.hubs WHERE seen_at_ms < $1 RETURNING instance",
            &[&cutoff()],
        )
        .await?;
    if stopped.is_empty() {
        return Ok((0, 0));
    }
    let alive = alive(tx).await?;
    super::ledger::recover(tx, &alive).await
}
