//! The last step: the outcome of a call that ran, appended to the audit
//! log after its decision (written off the hot path; see airlock-store),
//! and the approval it spent, if any, closed.

use airlock_store::Store;

use super::forward::Ran;
use super::{Audit, Outcome};

pub(crate) fn call(audit: &Audit, store: &dyn Store, ran: Ran) -> Outcome {
    let Ran {
        call,
        outcome,
        claim,
    } = ran;
    audit.outcome(&outcome, &call);
    if let Some(executing) = claim {
        let (ok, detail) = match &outcome {
            Outcome::Answered(_) => (true, String::new()),
            Outcome::Refused(e) => (false, e.message.to_string()),
            Outcome::Failed(why) => (false, why.clone()),
            Outcome::Blocked { reason, .. } => (false, reason.clone()),
            Outcome::Declined(text) => (false, text.to_string()),
        };
        if let Err(e) = store.ledger_finish(executing, ok, &detail) {
            tracing::error!(error = %e, "cannot record how an approved call ended");
        }
    }
    outcome
}
