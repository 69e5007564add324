//! The approval ledger in PostgreSQL: the same conditional single-row
//! updates as the embedded backend, so among replicas too the database
//! picks the one winner of every race.

use tokio_postgres::{Row, Transaction};

use crate::ledger::{
    ApprovalRow, Approved, Choice, Executing, Expiry, FrozenCall, LedgerState, Pending,
    StandingRule, Waited, waited,
};
use crate::{Result, StoreError, now_ms};

fn state_of(word: &str) -> Result<LedgerState> {
    LedgerState::parse(word)
        .ok_or_else(|| StoreError::Refused(format!("unknown approval state `{word}` in the store")))
}

pub(super) async fn create(
    tx: &Transaction<'_>,
    call: &FrozenCall,
    ttl_ms: i64,
    retention_ms: i64,
) -> Result<Pending> {
    let now = now_ms();
    // Terminal rows lose their arguments after the retention period (the
    // audit keeps their digests).
    tx.execute(
        "UPDATE airlock.approvals SET arguments = NULL
         WHERE arguments IS NOT NULL AND state = ANY($2) AND created_at_ms < $1",
        &[
            &(now - retention_ms),
            &[
                LedgerState::Executed.as_str(),
                LedgerState::Failed.as_str(),
                LedgerState::Denied.as_str(),
                LedgerState::Expired.as_str(),
            ]
            .as_slice(),
        ],
    )
    .await?;
    let id = crate::ledger::new_id();
    let expires = now + ttl_ms;
    tx.execute(
        "INSERT INTO airlock.approvals (id, state, principal, session, source, connection, tool,
             upstream, arguments, args_digest, reason, description, created_at_ms, expires_at_ms,
             contract_digest, choice)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, '')",
        &[
            &id,
            &LedgerState::Pending.as_str(),
            &call.principal,
            &call.session,
            &call.source,
            &call.connection,
            &call.tool,
            &call.upstream,
            &call.arguments,
            &call.args_digest,
            &call.reason,
            &call.description,
            &now,
            &expires,
            &call.contract_digest,
        ],
    )
    .await?;
    Ok(Pending {
        id,
        expires_at_ms: expires,
    })
}

/// The columns [`read_row`] reads, in its order.
const ROW: &str = "SELECT id, state, principal, session, source, connection, tool, upstream,
        COALESCE(arguments, ''), args_digest, reason, description,
        created_at_ms, expires_at_ms, decided_by, channel, detail, choice, contract_digest
    FROM airlock.approvals";

fn read_row(r: &Row) -> Result<ApprovalRow> {
    Ok(ApprovalRow {
        id: r.get(0),
        state: state_of(r.get(1))?,
        call: FrozenCall {
            principal: r.get(2),
            session: r.get(3),
            source: r.get(4),
            connection: r.get(5),
            tool: r.get(6),
            upstream: r.get(7),
            arguments: r.get(8),
            args_digest: r.get(9),
            reason: r.get(10),
            description: r.get(11),
            contract_digest: r.get(18),
        },
        created_at_ms: r.get(12),
        expires_at_ms: r.get(13),
        decided_by: r.get(14),
        channel: r.get(15),
        detail: r.get(16),
        choice: Choice::parse(r.get(17)),
    })
}

pub(super) async fn row(tx: &Transaction<'_>, id: &str) -> Result<Option<ApprovalRow>> {
    tx.query_opt(&format!("{ROW} WHERE id = $1"), &[&id])
        .await?
        .as_ref()
        .map(read_row)
        .transpose()
}

pub(super) async fn look(tx: &Transaction<'_>, id: &str) -> Result<Waited> {
    Ok(waited(row(tx, id).await?))
}

async fn move_row(
    tx: &Transaction<'_>,
    id: &str,
    from: LedgerState,
    to: LedgerState,
    detail: Option<&str>,
) -> Result<bool> {
    let n = tx
        .execute(
            "UPDATE airlock.approvals SET state = $3, detail = COALESCE($4, detail)
             WHERE id = $1 AND state = $2",
            &[&id, &from.as_str(), &to.as_str(), &detail],
        )
        .await?;
    Ok(n == 1)
}

pub(super) async fn expire(tx: &Transaction<'_>, pending: Pending) -> Result<Expiry> {
    let expired = move_row(
        tx,
        &pending.id,
        LedgerState::Pending,
        LedgerState::Expired,
        Some("no decision in time"),
    )
    .await?;
    if expired {
        return Ok(Expiry::Expired);
    }
    Ok(Expiry::DecisionWon(waited(row(tx, &pending.id).await?)))
}

pub(super) async fn claim(tx: &Transaction<'_>, approved: Approved) -> Result<Option<Executing>> {
    let won = move_row(
        tx,
        &approved.id,
        LedgerState::Approved,
        LedgerState::Executing,
        None,
    )
    .await?;
    Ok(won.then_some(Executing { id: approved.id }))
}

pub(super) async fn refuse(tx: &Transaction<'_>, approved: Approved, why: &str) -> Result<()> {
    move_row(
        tx,
        &approved.id,
        LedgerState::Approved,
        LedgerState::Failed,
        Some(why),
    )
    .await?;
    Ok(())
}

pub(super) async fn finish(
    tx: &Transaction<'_>,
    executing: Executing,
    ok: bool,
    detail: &str,
) -> Result<()> {
    let to = if ok {
        LedgerState::Executed
    } else {
        LedgerState::Failed
    };
    move_row(tx, &executing.id, LedgerState::Executing, to, Some(detail)).await?;
    Ok(())
}

/// Rows of hubs not in `running`: executing → failed (never re-run),
/// pending or approved → expired. Each row moves with its own conditional
/// update, so two replicas recovering at once fail each row once.
pub(super) async fn recover(tx: &Transaction<'_>, running: &[String]) -> Result<(usize, usize)> {
    let rows = tx
        .query(
            "SELECT id, session, state FROM airlock.approvals WHERE state = ANY($1)",
            &[&[
                LedgerState::Executing.as_str(),
                LedgerState::Pending.as_str(),
                LedgerState::Approved.as_str(),
            ]
            .as_slice()],
        )
        .await?;
    let (mut failed, mut expired) = (0, 0);
    for r in &rows {
        let (id, session): (&str, &str) = (r.get(0), r.get(1));
        let owned_by_running =
            crate::ledger::owning_hub(session).is_some_and(|hub| running.iter().any(|r| r == hub));
        if owned_by_running {
            continue;
        }
        match state_of(r.get(2))? {
            LedgerState::Executing => {
                failed += usize::from(
                    move_row(
                        tx,
                        id,
                        LedgerState::Executing,
                        LedgerState::Failed,
                        Some("interrupted, not retried"),
                    )
                    .await?,
                );
            }
            state => {
                expired += usize::from(
                    move_row(
                        tx,
                        id,
                        state,
                        LedgerState::Expired,
                        Some("the hub that asked stopped before a decision"),
                    )
                    .await?,
                );
            }
        }
    }
    Ok((failed, expired))
}

pub(super) async fn list(tx: &Transaction<'_>, all: bool) -> Result<Vec<ApprovalRow>> {
    tx.query(
        &format!("{ROW} WHERE $1 OR (state = $3 AND expires_at_ms > $2) ORDER BY created_at_ms"),
        &[&all, &now_ms(), &LedgerState::Pending.as_str()],
    )
    .await?
    .iter()
    .map(read_row)
    .collect()
}

pub(super) async fn standing_rules(tx: &Transaction<'_>) -> Result<Vec<StandingRule>> {
    let rows = tx
        .query(
            "SELECT id, tool, connection, digest, created_by, created_at_ms, approval
             FROM airlock.standing_rules ORDER BY id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StandingRule {
            id: r.get(0),
            tool: r.get(1),
            connection: r.get(2),
            digest: r.get(3),
            created_by: r.get(4),
            created_at_ms: r.get(5),
            approval: r.get(6),
        })
        .collect())
}
