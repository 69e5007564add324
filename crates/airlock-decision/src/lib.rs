//! Recording a person's decision on a pending call.
//!
//! This crate holds the only code that moves an approval from `pending` to
//! `approved` or `denied`. It is a crate of its own so the line can be held
//! by the crate graph: the hub's MCP-facing code (`airlock-gateway`) does
//! not depend on it, and a test over `cargo metadata` fails if it ever
//! does. The human channels (the CLI today) call [`record_decision`].
//!
//! The update is conditional on the row's id, its principal, its state and
//! its expiry, so the database picks one winner among a click, a second
//! click, and the clock.

use std::path::Path;

use airlock_common::now_ms;
use rusqlite::{Connection, OptionalExtension, params};

pub use airlock_store::ledger::{Choice, LedgerState, Recorded};

#[derive(Debug, thiserror::Error)]
#[error("cannot record the decision: {0}")]
pub struct DecisionError(#[from] rusqlite::Error);

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
    let Some(definition) = definition else {
        return Ok(());
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&definition) else {
        return Ok(());
    };
    if airlock_policy::contract::digest(&value) != digest {
        return Ok(());
    }
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
            definition,
            now,
            format!("{principal} (always allow, via {channel})")
        ],
    )?;
    tx.execute(
        "UPDATE meta SET value = value + 1 WHERE key = 'contracts_generation'",
        [],
    )?;
    Ok(())
}

/// Records `choice` for approval `id`, as `principal`, through `channel`.
pub fn record_decision(
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
            // Not from an answer in the client: the client relays that
            // answer, and a client could give it without the person; a
            // review must come from a channel airlock itself shows.
            if channel != "prompt" {
                pin_as_reviewed(&tx, id, now, principal, channel)?;
            }
        }
        tx.commit()?;
        return Ok(match choice {
            Choice::AllowOnce | Choice::AllowForRun | Choice::AllowAlways => Recorded::Approved,
            Choice::Deny => Recorded::Denied,
        });
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
    Ok(match row {
        Some((_, owner, _)) if owner != principal => Recorded::NotFound,
        Some((Some(LedgerState::Expired), _, _)) => Recorded::Expired,
        Some((Some(LedgerState::Pending), _, expires)) if expires <= now => {
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
            Recorded::Expired
        }
        _ => Recorded::NotFound,
    })
}

/// Revokes the standing rule `id` ("always allow"); `false` if there is
/// none. Narrowing needs no decision of its own, but it lives beside the
/// code that creates these rules.
pub fn revoke_standing_rule(database: &Path, id: i64) -> Result<bool, DecisionError> {
    let conn = Connection::open(database)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn.execute("DELETE FROM standing_rules WHERE id = ?1", params![id])? == 1)
}
