//! The approval ledger in SQLite. Every transition is one `UPDATE … WHERE
//! id = ? AND state = ?`: the affected-row count says who won.

use rusqlite::{Connection, OptionalExtension, params};

use crate::ledger::{ApprovalRow, Approved, Executing, Expiry, FrozenCall, Pending, Waited};
use crate::{Result, now_ms};

pub(super) fn create(
    conn: &Connection,
    call: &FrozenCall,
    ttl_ms: i64,
    retention_ms: i64,
) -> Result<Pending> {
    let now = now_ms();
    // Opportunistic retention: terminal rows lose their arguments after
    // the retention period (the audit keeps their digests). Best effort.
    if let Err(e) = conn.execute(
        "UPDATE approvals SET arguments = NULL
         WHERE arguments IS NOT NULL AND state IN ('executed', 'failed', 'denied', 'expired')
           AND created_at_ms < ?1",
        params![now - retention_ms],
    ) {
        tracing::warn!(error = %e, "approval retention sweep failed");
    }
    let id = new_id();
    let expires = now + ttl_ms;
    conn.execute(
        "INSERT INTO approvals (id, state, principal, session, source, connection, tool, upstream,
             arguments, args_digest, reason, description, created_at_ms, expires_at_ms, contract_digest)
         VALUES (?1, 'pending', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            id,
            call.principal,
            call.session,
            call.source,
            call.connection,
            call.tool,
            call.upstream,
            call.arguments,
            call.args_digest,
            call.reason,
            call.description,
            now,
            expires,
            call.contract_digest
        ],
    )?;
    Ok(Pending {
        id,
        expires_at_ms: expires,
    })
}

fn new_id() -> String {
    // 128 random bits from the OS, via the same source SQLite seeds from.
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn row(conn: &Connection, id: &str) -> Result<Option<ApprovalRow>> {
    Ok(conn
        .query_row(
            "SELECT id, state, principal, session, source, connection, tool, upstream,
                    COALESCE(arguments, ''), args_digest, reason, description,
                    created_at_ms, expires_at_ms, decided_by, channel, detail, choice, contract_digest
             FROM approvals WHERE id = ?1",
            params![id],
            read_row,
        )
        .optional()?)
}

pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApprovalRow> {
    Ok(ApprovalRow {
        id: r.get(0)?,
        state: r.get(1)?,
        call: FrozenCall {
            principal: r.get(2)?,
            session: r.get(3)?,
            source: r.get(4)?,
            connection: r.get(5)?,
            tool: r.get(6)?,
            upstream: r.get(7)?,
            arguments: r.get(8)?,
            args_digest: r.get(9)?,
            reason: r.get(10)?,
            description: r.get(11)?,
            contract_digest: r.get(18)?,
        },
        created_at_ms: r.get(12)?,
        expires_at_ms: r.get(13)?,
        decided_by: r.get(14)?,
        channel: r.get(15)?,
        detail: r.get(16)?,
        choice: r.get(17)?,
    })
}

fn waited(row: Option<ApprovalRow>) -> Waited {
    match row {
        None => Waited::Missing,
        Some(r) => match r.state.as_str() {
            "pending" => Waited::Pending(Pending {
                id: r.id,
                expires_at_ms: r.expires_at_ms,
            }),
            "approved" => Waited::Approved(Box::new(Approved {
                id: r.id,
                call: r.call,
                choice: r.choice,
                channel: r.channel.unwrap_or_default(),
            })),
            "denied" => Waited::Denied {
                by: r.decided_by.unwrap_or_default(),
                channel: r.channel.unwrap_or_default(),
            },
            "expired" => Waited::Expired,
            _ => Waited::Missing,
        },
    }
}

pub(super) fn look(conn: &Connection, pending: Pending) -> Result<Waited> {
    Ok(waited(row(conn, &pending.id)?))
}

pub(super) fn expire(conn: &Connection, pending: Pending) -> Result<Expiry> {
    let n = conn.execute(
        "UPDATE approvals SET state = 'expired', detail = 'no decision in time'
         WHERE id = ?1 AND state = 'pending'",
        params![pending.id],
    )?;
    if n == 1 {
        return Ok(Expiry::Expired);
    }
    // A decision committed first: it wins, and the caller honours it.
    Ok(Expiry::DecisionWon(waited(row(conn, &pending.id)?)))
}

pub(super) fn claim(conn: &Connection, approved: Approved) -> Result<Option<Executing>> {
    let n = conn.execute(
        "UPDATE approvals SET state = 'executing' WHERE id = ?1 AND state = 'approved'",
        params![approved.id],
    )?;
    Ok((n == 1).then_some(Executing { id: approved.id }))
}

pub(super) fn refuse(conn: &Connection, approved: Approved, why: &str) -> Result<()> {
    conn.execute(
        "UPDATE approvals SET state = 'failed', detail = ?2 WHERE id = ?1 AND state = 'approved'",
        params![approved.id, why],
    )?;
    Ok(())
}

pub(super) fn finish(
    conn: &Connection,
    executing: Executing,
    ok: bool,
    detail: &str,
) -> Result<()> {
    conn.execute(
        "UPDATE approvals SET state = ?2, detail = ?3 WHERE id = ?1 AND state = 'executing'",
        params![executing.id, if ok { "executed" } else { "failed" }, detail],
    )?;
    Ok(())
}

/// At start: a call left executing was interrupted and is never re-run;
/// pending rows from before are expired.
pub(super) fn recover(conn: &Connection) -> Result<(usize, usize)> {
    let failed = conn.execute(
        "UPDATE approvals SET state = 'failed', detail = 'interrupted, not retried'
         WHERE state = 'executing'",
        [],
    )?;
    let expired = conn.execute(
        "UPDATE approvals SET state = 'expired', detail = 'the hub restarted before a decision'
         WHERE state IN ('pending', 'approved')",
        [],
    )?;
    Ok((failed, expired))
}

pub(super) fn list(conn: &Connection, all: bool) -> Result<Vec<ApprovalRow>> {
    let mut stmt = conn.prepare(
        "SELECT id, state, principal, session, source, connection, tool, upstream,
                COALESCE(arguments, ''), args_digest, reason, description,
                created_at_ms, expires_at_ms, decided_by, channel, detail, choice, contract_digest
         FROM approvals WHERE ?1 OR (state = 'pending' AND expires_at_ms > ?2)
         ORDER BY created_at_ms",
    )?;
    let rows = stmt.query_map(params![all, now_ms()], read_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn standing_rules(conn: &Connection) -> Result<Vec<crate::ledger::StandingRule>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, tool, connection, digest, created_by, created_at_ms, approval
         FROM standing_rules ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(crate::ledger::StandingRule {
            id: r.get(0)?,
            tool: r.get(1)?,
            connection: r.get(2)?,
            digest: r.get(3)?,
            created_by: r.get(4)?,
            created_at_ms: r.get(5)?,
            approval: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
