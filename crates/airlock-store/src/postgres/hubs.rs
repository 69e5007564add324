//! The replicas of a tenant, each beating in `hubs`: how one replica
//! knows another stopped, and recovers what it left in the ledger.

use std::time::Duration;

use tokio_postgres::Transaction;

use crate::Result;

/// How often a replica says it is alive.
pub(super) const BEAT: Duration = Duration::from_secs(2);
/// A replica silent this long has stopped: its rows are recovered. Well
/// above what a busy replica's beat can be delayed by (a connection lease
/// waits at most 10 s, a statement runs at most 15 s).
const STALE: Duration = Duration::from_secs(30);

/// The database's clock in milliseconds: every replica's beats and
/// cutoffs are read on one clock, whatever the machines' clocks say.
const DB_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The replicas of this tenant that beat recently.
pub(super) async fn alive(tx: &Transaction<'_>) -> Result<Vec<String>> {
    Ok(tx
        .query(
            &format!("SELECT instance FROM airlock.hubs WHERE seen_at_ms >= {DB_NOW} - $1"),
            &[&(STALE.as_millis() as i64)],
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
        &format!(
            "INSERT INTO airlock.hubs (instance, seen_at_ms) VALUES ($1, {DB_NOW})
             ON CONFLICT (tenant, instance) DO UPDATE SET seen_at_ms = excluded.seen_at_ms"
        ),
        &[&instance],
    )
    .await?;
    let stopped = tx
        .query(
            &format!(
                "DELETE FROM airlock.hubs WHERE seen_at_ms < {DB_NOW} - $1 RETURNING instance"
            ),
            &[&(STALE.as_millis() as i64)],
        )
        .await?;
    if stopped.is_empty() {
        return Ok((0, 0));
    }
    let alive = alive(tx).await?;
    super::ledger::recover(tx, &alive).await
}
