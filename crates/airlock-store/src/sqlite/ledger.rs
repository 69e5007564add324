//! The approval ledger in SQLite. Every transition is one `UPDATE … WHERE
//! id = ? AND state = ?`: the affected-row count says who won.

use rusqlite::{Connection, OptionalExtension, params};

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use crate::ledger::{
    ApprovalRow, Approved, Choice, Executing, Expiry, FrozenCall, LedgerState, Pending, Waited,
    waited,
};
use crate::{Result, now_ms};

// The SQL edge: states and choices are stored as their words.

impl ToSql for LedgerState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for LedgerState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let word = value.as_str()?;
        LedgerState::parse(word).ok_or_else(|| FromSqlError::Other(unknown("state", word)))
    }
}

impl ToSql for Choice {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

/// The `choice` column: empty until a person decides. The words an older
/// airlock wrote (a hub still running while a newer CLI migrated the file)
/// read as what they meant; anything else reads as no choice, which allows
/// nothing.
fn choice_of(value: String) -> Option<Choice> {
    match value.as_str() {
        "once" => Some(Choice::AllowOnce),
        "run" => Some(Choice::AllowForRun),
        "always" => Some(Choice::AllowAlways),
        other => Choice::parse(other),
    }
}

fn unknown(what: &str, word: &str) -> Box<dyn std::error::Error + Send + Sync> {
    format!("unknown approval {what} `{word}` in the store").into()
}

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
         WHERE arguments IS NOT NULL AND state IN (?2, ?3, ?4, ?5) AND created_at_ms < ?1",
        params![
            now - retention_ms,
            LedgerState::Executed,
            LedgerState::Failed,
            LedgerState::Denied,
            LedgerState::Expired
        ],
    ) {
        tracing::warn!(error = %e, "approval retention sweep failed");
    }
    let id = crate::ledger::new_id();
    let expires = now + ttl_ms;
    conn.execute(
        "INSERT INTO approvals (id, state, principal, session, source, connection, tool, upstream,
             arguments, args_digest, reason, description, created_at_ms, expires_at_ms, contract_digest,
             choice)
         VALUES (?1, ?15, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, '')",
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
            call.contract_digest,
            LedgerState::Pending
        ],
    )?;
    Ok(Pending {
        id,
        expires_at_ms: expires,
    })
}

/// The columns [`read_row`] reads, in its order.
const ROW: &str = "SELECT id, state, principal, session, source, connection, tool, upstream,
        COALESCE(arguments, ''), args_digest, reason, description,
        created_at_ms, expires_at_ms, decided_by, channel, detail, choice, contract_digest
    FROM approvals";

pub(super) fn row(conn: &Connection, id: &str) -> Result<Option<ApprovalRow>> {
    Ok(conn
        .query_row(&format!("{ROW} WHERE id = ?1"), params![id], read_row)
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
        choice: choice_of(r.get(17)?),
    })
}

pub(super) fn look(conn: &Connection, id: &str) -> Result<Waited> {
    Ok(waited(row(conn, id)?))
}

pub(super) fn expire(conn: &Connection, pending: Pending) -> Result<Expiry> {
    let n = conn.execute(
        "UPDATE approvals SET state = ?2, detail = 'no decision in time'
         WHERE id = ?1 AND state = ?3",
        params![pending.id, LedgerState::Expired, LedgerState::Pending],
    )?;
    if n == 1 {
        return Ok(Expiry::Expired);
    }
    // A decision committed first: it wins, and the caller honours it.
    Ok(Expiry::DecisionWon(waited(row(conn, &pending.id)?)))
}

pub(super) fn claim(conn: &Connection, approved: Approved) -> Result<Option<Executing>> {
    let n = conn.execute(
        "UPDATE approvals SET state = ?2 WHERE id = ?1 AND state = ?3",
        params![approved.id, LedgerState::Executing, LedgerState::Approved],
    )?;
    Ok((n == 1).then_some(Executing { id: approved.id }))
}

pub(super) fn refuse(conn: &Connection, approved: Approved, why: &str) -> Result<()> {
    conn.execute(
        "UPDATE approvals SET state = ?3, detail = ?2 WHERE id = ?1 AND state = ?4",
        params![approved.id, why, LedgerState::Failed, LedgerState::Approved],
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
        "UPDATE approvals SET state = ?2, detail = ?3 WHERE id = ?1 AND state = ?4",
        params![
            executing.id,
            if ok {
                LedgerState::Executed
            } else {
                LedgerState::Failed
            },
            detail,
            LedgerState::Executing
        ],
    )?;
    Ok(())
}

/// At start: a call left executing was interrupted and is never re-run;
/// pending rows from before are expired.
pub(super) fn recover(conn: &mut Connection, running: &[String]) -> Result<(usize, usize)> {
    let tx = conn.transaction()?;
    let orphans: Vec<(String, LedgerState)> = {
        let mut stmt =
            tx.prepare("SELECT id, session, state FROM approvals WHERE state IN (?1, ?2, ?3)")?;
        let rows = stmt.query_map(
            params![
                LedgerState::Executing,
                LedgerState::Pending,
                LedgerState::Approved
            ],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?)),
        )?;
        rows.collect::<rusqlite::Result<Vec<_>>>()?
            .into_iter()
            .filter(|(_, session, _)| {
                crate::ledger::owning_hub(session)
                    .is_none_or(|hub| !running.iter().any(|r| r == hub))
            })
            .map(|(id, _, state)| (id, state))
            .collect()
    };
    let (mut failed, mut expired) = (0, 0);
    for (id, state) in orphans {
        if state == LedgerState::Executing {
            failed += tx.execute(
                "UPDATE approvals SET state = ?1, detail = 'interrupted, not retried'
                 WHERE id = ?2 AND state = ?3",
                params![LedgerState::Failed, id, LedgerState::Executing],
            )?;
        } else {
            expired += tx.execute(
                "UPDATE approvals SET state = ?1, detail = 'the hub that asked stopped before a decision'
                 WHERE id = ?2 AND state = ?3",
                params![LedgerState::Expired, id, state],
            )?;
        }
    }
    tx.commit()?;
    Ok((failed, expired))
}

pub(super) fn list(conn: &Connection, all: bool) -> Result<Vec<ApprovalRow>> {
    let mut stmt = conn.prepare(&format!(
        "{ROW} WHERE ?1 OR (state = ?3 AND expires_at_ms > ?2) ORDER BY created_at_ms"
    ))?;
    let rows = stmt.query_map(params![all, now_ms(), LedgerState::Pending], read_row)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_choice_words_read_as_meant_and_unknown_ones_allow_nothing() {
        assert_eq!(choice_of("once".into()), Some(Choice::AllowOnce));
        assert_eq!(choice_of("run".into()), Some(Choice::AllowForRun));
        assert_eq!(choice_of("always".into()), Some(Choice::AllowAlways));
        assert_eq!(choice_of("always_allow".into()), Some(Choice::AllowAlways));
        assert_eq!(choice_of(String::new()), None);
        assert_eq!(choice_of("forever".into()), None);
    }
}
