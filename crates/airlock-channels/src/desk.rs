//! The desk: where every human channel records a decision.
//!
//! This is the only module that calls `airlock_decision::record_decision`
//! (a test over the sources holds that line). After a decision is recorded
//! the waiting call is woken; waking decides nothing, the call reads the
//! ledger.

use airlock_decision::{Choice, DecisionError, Recorded, record_decision};

pub use airlock_decision::Ledger;

type Wake = Box<dyn Fn(&str) + Send + Sync>;

pub struct Desk {
    ledger: Ledger,
    principal: String,
    wake: Wake,
}

impl Desk {
    /// Decisions go to `ledger`, as `principal`; `wake` is told the id of
    /// each approval decided (with a team's store, the replicas that wait
    /// are also told through the database).
    pub fn new(ledger: Ledger, principal: String, wake: Wake) -> Desk {
        Desk {
            ledger,
            principal,
            wake,
        }
    }

    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// Records `choice` for approval `id`, as made through `channel`
    /// (`cli`, `page` or `prompt`).
    pub fn decide(
        &self,
        id: &str,
        choice: Choice,
        channel: &str,
    ) -> Result<Recorded, DecisionError> {
        let recorded = record_decision(&self.ledger, id, &self.principal, choice, channel)?;
        if matches!(recorded, Recorded::Approved | Recorded::Denied) {
            (self.wake)(id);
        }
        Ok(recorded)
    }
}

/// Revokes the standing rule `id` that an "always allow" created; `false`
/// when there is none. Every channel that changes the ledger goes through
/// this module.
pub fn revoke_standing_rule(ledger: &Ledger, id: i64) -> Result<bool, DecisionError> {
    airlock_decision::revoke_standing_rule(ledger, id)
}
