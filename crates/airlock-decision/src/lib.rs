//! Recording a person's decision on a pending call.
//!
//! This crate holds the only code that moves an approval from `pending` to
//! `approved` or `denied`. It is a crate of its own so the line can be held
//! by the crate graph: the hub's MCP-facing code (`airlock-gateway`) does
//! not depend on it, and a test over `cargo metadata` fails if it ever
//! does. The human channels call [`record_decision`].
//!
//! The update is conditional on the row's id, its principal, its state and
//! its expiry, so the database picks one winner among a click, a second
//! click, the clock, and (with a team's PostgreSQL store) a person deciding
//! on another replica at the same moment. With PostgreSQL the decision
//! also announces the approval's id to every replica of the tenant, so the
//! waiting call wakes wherever it waits.

mod postgres;
mod sqlite;

use std::path::PathBuf;
use std::sync::Arc;

use airlock_store::PgStore;

pub use airlock_store::ledger::{Choice, LedgerState, Recorded};

#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("cannot record the decision: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot record the decision: {0}")]
    Store(#[from] airlock_store::StoreError),
}

/// Where the ledger is.
#[derive(Clone)]
pub enum Ledger {
    /// The embedded store's file.
    Sqlite(PathBuf),
    /// A team's database, as this hub's tenant.
    Postgres(Arc<PgStore>),
}

/// Records `choice` for approval `id`, as `principal`, through `channel`.
pub fn record_decision(
    ledger: &Ledger,
    id: &str,
    principal: &str,
    choice: Choice,
    channel: &str,
) -> Result<Recorded, DecisionError> {
    match ledger {
        Ledger::Sqlite(path) => sqlite::record_decision(path, id, principal, choice, channel),
        Ledger::Postgres(pg) => postgres::record_decision(pg, id, principal, choice, channel),
    }
}

/// Revokes the standing rule `id` ("always allow"); `false` if there is
/// none. Narrowing needs no decision of its own, but it lives beside the
/// code that creates these rules.
pub fn revoke_standing_rule(ledger: &Ledger, id: i64) -> Result<bool, DecisionError> {
    match ledger {
        Ledger::Sqlite(path) => sqlite::revoke_standing_rule(path, id),
        Ledger::Postgres(pg) => postgres::revoke_standing_rule(pg, id),
    }
}

/// The definition "always allow" pins as reviewed: the catalog's current
/// one, only if it still has the digest the call asked under.
fn reviewable(definition: &str, digest: &str) -> Option<serde_json::Value> {
    let value = serde_json::from_str::<serde_json::Value>(definition).ok()?;
    (airlock_policy::contract::digest(&value) == digest).then_some(value)
}

/// Who pinned a contract by choosing "always allow".
fn always_reviewer(principal: &str, channel: &str) -> String {
    format!("{principal} (always allow, via {channel})")
}

/// "Always allow" pins its contract as reviewed only from a channel
/// airlock itself shows: the prompt's answer is relayed by the client,
/// which could give it without the person.
fn pins_review(choice: Choice, channel: &str) -> bool {
    choice == Choice::AllowAlways && channel != "prompt"
}

/// What recording a choice did.
fn recorded(choice: Choice) -> Recorded {
    match choice {
        Choice::AllowOnce | Choice::AllowForRun | Choice::AllowAlways => Recorded::Approved,
        Choice::Deny => Recorded::Denied,
    }
}

/// Why a decision found nothing to decide, from the row as it is now
/// (state, owner, expiry); `Err(())` when the row is pending past its
/// time and must be retired as expired.
fn not_decided(
    row: Option<(Option<LedgerState>, String, i64)>,
    principal: &str,
    now: i64,
) -> Result<Recorded, ()> {
    match row {
        Some((_, owner, _)) if owner != principal => Ok(Recorded::NotFound),
        Some((Some(LedgerState::Expired), _, _)) => Ok(Recorded::Expired),
        Some((Some(LedgerState::Pending), _, expires)) if expires <= now => Err(()),
        _ => Ok(Recorded::NotFound),
    }
}
