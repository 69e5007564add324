//! Code mode's runs and journals in PostgreSQL.

use tokio_postgres::{Row, Transaction};

use crate::runs::{EntryState, JournalEntry, NewRun, RunRow, RunState};
use crate::{Result, StoreError, now_ms};

const RUN: &str = "SELECT id, principal, code, seed, clock_ms, state, detail, created_at_ms,
        updated_at_ms, resumes FROM airlock.runs";

fn unknown(what: &str, word: &str) -> StoreError {
    StoreError::Refused(format!("unknown {what} `{word}` in the store"))
}

fn read_run(r: &Row) -> Result<RunRow> {
    let state: &str = r.get(5);
    Ok(RunRow {
        id: r.get(0),
        principal: r.get(1),
        code: r.get(2),
        seed: r.get::<_, i64>(3) as u32,
        clock_ms: r.get(4),
        state: RunState::parse(state).ok_or_else(|| unknown("run state", state))?,
        detail: r.get(6),
        created_at_ms: r.get(7),
        updated_at_ms: r.get(8),
        resumes: r.get::<_, i64>(9) as u32,
    })
}

pub(super) async fn create(tx: &Transaction<'_>, run: &NewRun, retention_ms: i64) -> Result<()> {
    let now = now_ms();
    // Retention on the way in; a run and its journal go together.
    let cutoff = now - retention_ms;
    let running = RunState::Running.as_str();
    tx.execute(
        "DELETE FROM airlock.journal WHERE run IN
             (SELECT id FROM airlock.runs WHERE state != $1 AND updated_at_ms < $2)",
        &[&running, &cutoff],
    )
    .await?;
    tx.execute(
        "DELETE FROM airlock.runs WHERE state != $1 AND updated_at_ms < $2",
        &[&running, &cutoff],
    )
    .await?;
    tx.execute(
        "INSERT INTO airlock.runs (id, principal, code, seed, clock_ms, state, detail,
             created_at_ms, updated_at_ms, resumes)
         VALUES ($1, $2, $3, $4, $5, $6, '', $7, $7, 0)",
        &[
            &run.id,
            &run.principal,
            &run.code,
            &i64::from(run.seed),
            &run.clock_ms,
            &running,
            &now,
        ],
    )
    .await?;
    Ok(())
}

pub(super) async fn row(tx: &Transaction<'_>, id: &str) -> Result<Option<RunRow>> {
    tx.query_opt(&format!("{RUN} WHERE id = $1"), &[&id])
        .await?
        .as_ref()
        .map(read_run)
        .transpose()
}

pub(super) async fn take(
    tx: &Transaction<'_>,
    id: &str,
    principal: &str,
) -> Result<Option<RunRow>> {
    let changed = tx
        .execute(
            "UPDATE airlock.runs SET state = $3, resumes = resumes + 1, updated_at_ms = $4
             WHERE id = $1 AND principal = $2 AND state = $5",
            &[
                &id,
                &principal,
                &RunState::Running.as_str(),
                &now_ms(),
                &RunState::Paused.as_str(),
            ],
        )
        .await?;
    if changed == 0 {
        return Ok(None);
    }
    row(tx, id).await
}

pub(super) async fn set(
    tx: &Transaction<'_>,
    id: &str,
    state: RunState,
    detail: &str,
) -> Result<()> {
    tx.execute(
        "UPDATE airlock.runs SET state = $2, detail = $3, updated_at_ms = $4 WHERE id = $1",
        &[&id, &state.as_str(), &detail, &now_ms()],
    )
    .await?;
    Ok(())
}

pub(super) async fn list(tx: &Transaction<'_>, limit: usize) -> Result<Vec<RunRow>> {
    tx.query(
        &format!("{RUN} ORDER BY created_at_ms DESC, id LIMIT $1"),
        &[&(limit as i64)],
    )
    .await?
    .iter()
    .map(read_run)
    .collect()
}

pub(super) async fn journal(tx: &Transaction<'_>, run: &str) -> Result<Vec<JournalEntry>> {
    tx.query(
        "SELECT run, seq, tool, args_digest, state, reply, approval, at_ms
         FROM airlock.journal WHERE run = $1 ORDER BY seq",
        &[&run],
    )
    .await?
    .iter()
    .map(|r| {
        let state: &str = r.get(4);
        Ok(JournalEntry {
            run: r.get(0),
            seq: r.get::<_, i64>(1) as u32,
            tool: r.get(2),
            args_digest: r.get(3),
            state: EntryState::parse(state).ok_or_else(|| unknown("journal state", state))?,
            reply: r.get(5),
            approval: r.get(6),
            at_ms: r.get(7),
        })
    })
    .collect()
}

pub(super) async fn start(
    tx: &Transaction<'_>,
    run: &str,
    seq: u32,
    tool: &str,
    args_digest: &str,
) -> Result<()> {
    tx.execute(
        "INSERT INTO airlock.journal (run, seq, tool, args_digest, state, reply, approval, at_ms)
         VALUES ($1, $2, $3, $4, $5, '', '', $6)",
        &[
            &run,
            &i64::from(seq),
            &tool,
            &args_digest,
            &EntryState::Started.as_str(),
            &now_ms(),
        ],
    )
    .await?;
    Ok(())
}

async fn update(
    tx: &Transaction<'_>,
    run: &str,
    seq: u32,
    state: EntryState,
    column: &str,
    value: &str,
) -> Result<()> {
    tx.execute(
        &format!(
            "UPDATE airlock.journal SET state = $3, {column} = $4, at_ms = $5
             WHERE run = $1 AND seq = $2"
        ),
        &[&run, &i64::from(seq), &state.as_str(), &value, &now_ms()],
    )
    .await?;
    Ok(())
}

pub(super) async fn settle(tx: &Transaction<'_>, run: &str, seq: u32, reply: &str) -> Result<()> {
    update(tx, run, seq, EntryState::Settled, "reply", reply).await
}

pub(super) async fn pause(tx: &Transaction<'_>, run: &str, seq: u32, approval: &str) -> Result<()> {
    update(tx, run, seq, EntryState::Paused, "approval", approval).await
}
