//! Decisions in the embedded store's file.

use std::path::Path;

use airlock_common::now_ms;
use rusqlite::{Connection, OptionalExtension, params};

use crate::{
    Choice, DecisionError, LedgerState, Recorded, always_reviewer, not_decided, pins_review,
    recorded, reviewable,
};

/// "Always allow" on a tool whose contract nobody reviewed (or that changed
/// since) is the person's review of the contract the call asked under: the
/// standing rule is pinned to it, so without this it would never apply.
/// Pinned only if the catalog still holds that exact contract.
fn pin_as_reviewed(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    now: i64,
    principal: &str,
    channel: &str,
) -> Result<(), DecisionError> {
    let asked: Option<(String, String, String)> = tx
        .query_row(
            "SELECT source, upstream, contract_digest FROM approvals WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((source, upstream, digest)) = asked.filter(|(_, _, d)| !d.is_empty()) else {
        return Ok(());
    };
    let definition: Option<String> = tx
        .query_row(
            "SELECT definition FROM catalog WHERE source = ?1 AND kind = 'tool' AND name = ?2",
            params![source, upstream],
            |r| r.get(0),
        )
        .optional()?;
    let Some(value) = definition.and_then(|d| reviewable(&d, &digest)) else {
        return Ok(());
    };
    tx.execute(
        "INSERT INTO contracts (source, tool, digest, definition, reviewed_at_ms, reviewer)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT(source, tool) DO UPDATE SET digest = excluded.digest,
             definition = excluded.definition, reviewed_at_ms = excluded.reviewed_at_ms,
             reviewer = excluded.reviewer
         WHERE contracts.digest != excluded.digest",
        params![
            source,
            upstream,
            digest,
            value.to_string(),
            now,
            always_reviewer(principal, channel)
        ],
    )?;
    tx.execute(
        "UPDATE meta SET value = value + 1 WHERE key = 'contracts_generation'",
        [],
    )?;
    Ok(())
}

pub(crate) fn record_decision(
    database: &Path,
    id: &str,
    principal: &str,
    choice: Choice,
    channel: &str,
) -> Result<Recorded, DecisionError> {
    let mut conn = Connection::open(database)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let now = now_ms();
    // The decision and, for 'always', its standing rule commit together.
    let tx = conn.transaction()?;
    let n = tx.execute(
        "UPDATE approvals SET state = ?1, decided_at_ms = ?2, decided_by = ?3, channel = ?4, choice = ?6
         WHERE id = ?5 AND principal = ?3 AND state = ?7 AND expires_at_ms > ?2",
        params![
            choice.state().as_str(),
            now,
            principal,
            channel,
            id,
            choice.as_str(),
            LedgerState::Pending.as_str()
        ],
    )?;
    if n == 1 {
        if choice == Choice::AllowAlways {
            tx.execute(
                "INSERT INTO standing_rules (tool, connection, digest, created_at_ms, created_by, approval)
                 SELECT tool, connection, contract_digest, ?2, ?3, id FROM approvals
                 WHERE id = ?1 AND contract_digest != ''",
                params![id, now, principal],
            )?;
        }
        if pins_review(choice, channel) {
            pin_as_reviewed(&tx, id, now, principal, channel)?;
        }
        tx.commit()?;
        return Ok(recorded(choice));
    }
    tx.commit()?;
    let row: Option<(String, String, i64)> = conn
        .query_row(
            "SELECT state, principal, expires_at_ms FROM approvals WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let row = row.map(|(state, owner, expires)| (LedgerState::parse(&state), owner, expires));
    match not_decided(row, principal, now) {
        Ok(r) => Ok(r),
        Err(()) => {
            // Past its time but not yet retired: retire it, and say so.
            conn.execute(
                "UPDATE approvals SET state = ?2, detail = 'no decision in time'
                 WHERE id = ?1 AND state = ?3",
                params![
                    id,
                    LedgerState::Expired.as_str(),
                    LedgerState::Pending.as_str()
                ],
            )?;
            Ok(Recorded::Expired)
        }
    }
}

pub(crate) fn revoke_standing_rule(database: &Path, id: i64) -> Result<bool, DecisionError> {
    let conn = Connection::open(database)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn.execute("DELETE FROM standing_rules WHERE id = ?1", params![id])? == 1)
}
