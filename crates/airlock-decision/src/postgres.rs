//! Decisions in a team's PostgreSQL store, as the hub's tenant (the
//! store's transactions set it; row-level security holds them to it).
//! The decision, its standing rule, its review and the announcement to
//! the other replicas commit together: `NOTIFY` is delivered on commit.

use airlock_common::now_ms;
use airlock_store::PgStore;
use tokio_postgres::Transaction;

use crate::{
    Choice, DecisionError, LedgerState, Recorded, always_reviewer, not_decided, pins_review,
    recorded, reviewable,
};

/// See the SQLite twin: pins the contract the call asked under, if the
/// catalog still holds exactly it.
async fn pin_as_reviewed(
    tx: &Transaction<'_>,
    id: &str,
    now: i64,
    principal: &str,
    channel: &str,
) -> airlock_store::Result<()> {
    let asked = tx
        .query_opt(
            "SELECT source, upstream, contract_digest FROM airlock.approvals WHERE id = $1",
            &[&id],
        )
        .await?;
    let Some((source, upstream, digest)) = asked
        .map(|r| {
            (
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, String>(2),
            )
        })
        .filter(|(_, _, d)| !d.is_empty())
    else {
        return Ok(());
    };
    let definition = tx
        .query_opt(
            "SELECT definition FROM airlock.catalog WHERE source = $1 AND kind = 'tool' AND name = $2",
            &[&source, &upstream],
        )
        .await?
        .map(|r| r.get::<_, String>(0));
    let Some(value) = definition.and_then(|d| reviewable(&d, &digest)) else {
        return Ok(());
    };
    tx.execute(
        "INSERT INTO airlock.contracts (source, tool, digest, definition, reviewed_at_ms, reviewer)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tenant, source, tool) DO UPDATE SET digest = excluded.digest,
             definition = excluded.definition, reviewed_at_ms = excluded.reviewed_at_ms,
             reviewer = excluded.reviewer
         WHERE airlock.contracts.digest != excluded.digest",
        &[
            &source,
            &upstream,
            &digest,
            &value.to_string(),
            &now,
            &always_reviewer(principal, channel),
        ],
    )
    .await?;
    airlock_store::postgres::bump_contracts_generation(tx).await
}

pub(crate) fn record_decision(
    pg: &PgStore,
    id: &str,
    principal: &str,
    choice: Choice,
    channel: &str,
) -> Result<Recorded, DecisionError> {
    let now = now_ms();
    let announce = pg.decisions_channel();
    Ok(pg.transaction(async |tx| {
        let n = tx
            .execute(
                "UPDATE airlock.approvals SET state = $1, decided_at_ms = $2, decided_by = $3,
                     channel = $4, choice = $6
                 WHERE id = $5 AND principal = $3 AND state = $7 AND expires_at_ms > $2",
                &[
                    &choice.state().as_str(),
                    &now,
                    &principal,
                    &channel,
                    &id,
                    &choice.as_str(),
                    &LedgerState::Pending.as_str(),
                ],
            )
            .await?;
        if n == 1 {
            if choice == Choice::AllowAlways {
                tx.execute(
                    "INSERT INTO airlock.standing_rules
                         (tool, connection, digest, created_at_ms, created_by, approval)
                     SELECT tool, connection, contract_digest, $2, $3, id FROM airlock.approvals
                     WHERE id = $1 AND contract_digest != ''",
                    &[&id, &now, &principal],
                )
                .await?;
            }
            if pins_review(choice, channel) {
                pin_as_reviewed(tx, id, now, principal, channel).await?;
            }
            // Only the id: whoever waits reads the ledger.
            tx.execute("SELECT pg_notify($1, $2)", &[&announce, &id])
                .await?;
            return Ok(recorded(choice));
        }
        let row = tx
            .query_opt(
                "SELECT state, principal, expires_at_ms FROM airlock.approvals WHERE id = $1",
                &[&id],
            )
            .await?
            .map(|r| {
                (
                    LedgerState::parse(r.get(0)),
                    r.get::<_, String>(1),
                    r.get::<_, i64>(2),
                )
            });
        match not_decided(row, principal, now) {
            Ok(r) => Ok(r),
            Err(()) => {
                // Past its time but not yet retired: retire it, and say so.
                tx.execute(
                    "UPDATE airlock.approvals SET state = $2, detail = 'no decision in time'
                     WHERE id = $1 AND state = $3",
                    &[
                        &id,
                        &LedgerState::Expired.as_str(),
                        &LedgerState::Pending.as_str(),
                    ],
                )
                .await?;
                Ok(Recorded::Expired)
            }
        }
    })?)
}

pub(crate) fn revoke_standing_rule(pg: &PgStore, id: i64) -> Result<bool, DecisionError> {
    Ok(pg.transaction(async |tx| {
        let n = tx
            .execute("DELETE FROM airlock.standing_rules WHERE id = $1", &[&id])
            .await?;
        Ok(n == 1)
    })?)
}
