//! Code mode's runs and journals in SQLite.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, params};

use crate::runs::{EntryState, JournalEntry, NewRun, RunRow, RunState};
use crate::{Result, now_ms};

impl ToSql for RunState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for RunState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let word = value.as_str()?;
        RunState::parse(word)
            .ok_or_else(|| FromSqlError::Other(format!("unknown run state `{word}`").into()))
    }
}

impl ToSql for EntryState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for EntryState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let word = value.as_str()?;
        EntryState::parse(word)
            .ok_or_else(|| FromSqlError::Other(format!("unknown journal state `{word}`").into()))
    }
}

const RUN: &str = "SELECT id, principal, code, seed, clock_ms, state, detail, created_at_ms,
        updated_at_ms, resumes FROM runs";

fn read_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: r.get(0)?,
        principal: r.get(1)?,
        code: r.get(2)?,
        seed: r.get(3)?,
        clock_ms: r.get(4)?,
        state: r.get(5)?,
        detail: r.get(6)?,
        created_at_ms: r.get(7)?,
        updated_at_ms: r.get(8)?,
        resumes: r.get(9)?,
    })
}

pub(super) fn create(conn: &Connection, run: &NewRun, retention_ms: i64) -> Result<()> {
    let now = now_ms();
    // Retention, as for approvals: best effort, on the way in; a run and
    // its journal go together or not at all (a run left without its
    // journal could replay calls).
    let swept = conn.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         DELETE FROM journal WHERE run IN
             (SELECT id FROM runs WHERE state != '{running}' AND updated_at_ms < {cutoff});
         DELETE FROM runs WHERE state != '{running}' AND updated_at_ms < {cutoff};
         COMMIT;",
        cutoff = now - retention_ms,
        running = RunState::Running.as_str(),
    ));
    if let Err(e) = swept {
        let _ = conn.execute_batch("ROLLBACK");
        tracing::warn!(error = %e, "run retention sweep failed");
    }
    conn.execute(
        "INSERT INTO runs (id, principal, code, seed, clock_ms, state, detail, created_at_ms,
             updated_at_ms, resumes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, '', ?7, ?7, 0)",
        params![
            run.id,
            run.principal,
            run.code,
            run.seed,
            run.clock_ms,
            RunState::Running,
            now
        ],
    )?;
    Ok(())
}

pub(super) fn row(conn: &Connection, id: &str) -> Result<Option<RunRow>> {
    Ok(conn
        .query_row(&format!("{RUN} WHERE id = ?1"), params![id], read_run)
        .optional()?)
}

pub(super) fn take(conn: &Connection, id: &str, principal: &str) -> Result<Option<RunRow>> {
    let changed = conn.execute(
        "UPDATE runs SET state = ?3, resumes = resumes + 1, updated_at_ms = ?4
         WHERE id = ?1 AND principal = ?2 AND state = ?5",
        params![id, principal, RunState::Running, now_ms(), RunState::Paused],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    row(conn, id)
}

pub(super) fn set(conn: &Connection, id: &str, state: RunState, detail: &str) -> Result<()> {
    conn.execute(
        "UPDATE runs SET state = ?2, detail = ?3, updated_at_ms = ?4 WHERE id = ?1",
        params![id, state, detail, now_ms()],
    )?;
    Ok(())
}

pub(super) fn list(conn: &Connection, limit: usize) -> Result<Vec<RunRow>> {
    let mut stmt = conn.prepare(&format!("{RUN} ORDER BY created_at_ms DESC, id LIMIT ?1"))?;
    let rows = stmt.query_map(params![limit as i64], read_run)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn journal(conn: &Connection, run: &str) -> Result<Vec<JournalEntry>> {
    let mut stmt = conn.prepare(
        "SELECT run, seq, tool, args_digest, state, reply, approval, at_ms
         FROM journal WHERE run = ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map(params![run], |r| {
        Ok(JournalEntry {
            run: r.get(0)?,
            seq: r.get(1)?,
            tool: r.get(2)?,
            args_digest: r.get(3)?,
            state: r.get(4)?,
            reply: r.get(5)?,
            approval: r.get(6)?,
            at_ms: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn start(
    conn: &Connection,
    run: &str,
    seq: u32,
    tool: &str,
    args_digest: &str,
) -> Result<()> {
    conn.execute(
        "INSERT INTO journal (run, seq, tool, args_digest, state, reply, approval, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, '', '', ?6)",
        params![run, seq, tool, args_digest, EntryState::Started, now_ms()],
    )?;
    Ok(())
}

pub(super) fn settle(conn: &Connection, run: &str, seq: u32, reply: &str) -> Result<()> {
    conn.execute(
        "UPDATE journal SET state = ?3, reply = ?4, at_ms = ?5 WHERE run = ?1 AND seq = ?2",
        params![run, seq, EntryState::Settled, reply, now_ms()],
    )?;
    Ok(())
}

pub(super) fn pause(conn: &Connection, run: &str, seq: u32, approval: &str) -> Result<()> {
    conn.execute(
        "UPDATE journal SET state = ?3, approval = ?4, at_ms = ?5 WHERE run = ?1 AND seq = ?2",
        params![run, seq, EntryState::Paused, approval, now_ms()],
    )?;
    Ok(())
}
