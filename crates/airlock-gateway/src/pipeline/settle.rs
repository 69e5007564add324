//! After a person decided: the row's state becomes the call's fate. An
//! approval is bound to the arguments held in memory (by digest and by the
//! copy shown), policy is checked again on a fresh view, the approval is
//! claimed once, and only then is the call [`Allowed`] to run. Shared by
//! the call that waited ([`super::approval`]) and the retry that brought
//! the answer ([`super::prompt`]).

use std::sync::Arc;

use airlock_config::Action;
use airlock_policy::contract;
use airlock_store::Store;
use airlock_store::ledger::{Choice, Waited};
use rmcp::model::JsonObject;
use serde_json::Value;

use super::{Admission, Allowed, Audit, Outcome, Target, ToolCall};
use crate::hub::{Approvals, Hub, PolicyView, Sources};
use crate::secrets::HubSecrets;

/// What the model is told, word for word, so it can tell a person's
/// decision from a failure.
pub const DECLINED: &str = "The user declined this tool call.";
pub const TIMED_OUT: &str = "The user did not approve this tool call in time.";

/// The parts of the hub a call waiting for a person needs.
pub(crate) struct Desk<'a> {
    pub approvals: &'a Approvals,
    pub store: &'a Arc<dyn Store>,
    pub secrets: &'a HubSecrets,
    /// To decide again, on a fresh view, when the person has answered.
    pub policy: &'a PolicyView,
    pub sources: &'a Sources,
}

impl<'a> Desk<'a> {
    pub(crate) fn of(hub: &'a Hub) -> Desk<'a> {
        Desk {
            approvals: &hub.approvals,
            store: &hub.store,
            secrets: &hub.secrets,
            policy: &hub.policy,
            sources: &hub.sources,
        }
    }
}

/// Turns a decided row into the call's fate.
pub(crate) fn settle(
    desk: &Desk<'_>,
    audit: &Audit,
    call: ToolCall,
    target: Target,
    waited: Waited,
) -> Admission {
    let approved = match waited {
        Waited::Denied { by, channel } => {
            let _ = audit.approval("declined", &channel, &format!("by {by} via {channel}"));
            return Admission::Refused(Outcome::Declined(DECLINED));
        }
        // Still undecided when looked at: the call stops waiting; the row
        // expires on its own clock.
        Waited::Pending(_) => return Admission::Refused(Outcome::Declined(TIMED_OUT)),
        Waited::Expired | Waited::Missing => {
            let _ = audit.approval("expired", "", "no decision in time");
            return Admission::Refused(Outcome::Declined(TIMED_OUT));
        }
        Waited::Approved(approved) => *approved,
    };
    // The arguments held in memory since the call asked, bound to the
    // approval by their digest (the store keeps a redacted copy only).
    let stored: JsonObject = call.params.arguments.clone().unwrap_or_default();
    let canonical = contract::canonical(&Value::Object(stored.clone()));
    let shown = airlock_upstream::Secrets::scrub(desk.secrets, &canonical);
    // Bound both ways: to the digest, and to the copy the person was shown
    // (a record altered after the fact runs nothing).
    if contract::digest_canonical(&canonical) != approved.call().args_digest
        || shown != approved.call().arguments
    {
        let _ = desk.store.ledger_refuse(
            approved,
            "the approval's record does not match the call that asked",
        );
        return Admission::Refused(Outcome::Failed(
            "the approval's record does not match the call that asked, so it did not run".into(),
        ));
    }
    // Policy again, on a fresh view: a rule added while the call waited is
    // enforced.
    let view = desk.policy.view(desk.sources.catalog());
    if view.catalog.tool(&approved.call().tool).is_none() {
        let _ = desk.store.ledger_refuse(approved, "the tool is gone");
        return Admission::Refused(Outcome::Failed(
            "the tool is no longer offered by its source".into(),
        ));
    }
    let now = view.evaluate(&approved.call().tool, Some(&Value::Object(stored.clone())));
    if now.action == Action::Deny {
        let _ = audit.approval("denied-at-approval", "", &now.reason);
        let _ = desk
            .store
            .ledger_refuse(approved, &format!("denied at approval: {}", now.reason));
        return Admission::Refused(Outcome::Blocked {
            action: Action::Deny,
            reason: format!(
                "denied when approved, because the policy changed while it waited: {}",
                now.reason
            ),
        });
    }
    let by = approved.call().principal.clone();
    let choice = approved.choice();
    let channel = approved.channel().to_string();
    let contract = approved.call().contract_digest.clone();
    let executing = match desk.store.ledger_claim(approved) {
        Ok(Some(executing)) => executing,
        Ok(None) => {
            return Admission::Refused(Outcome::Failed("this approval was already used".into()));
        }
        Err(e) => {
            return Admission::Refused(Outcome::Failed(format!(
                "the approval could not be claimed: {e}"
            )));
        }
    };
    let what = match choice {
        Choice::AllowForRun => match &call.run {
            Some(run) => {
                desk.approvals
                    .run_grants
                    .grant(run, &call.params.name, &contract);
                "approved for this run"
            }
            None => "approved once (the client names no program, so there is no run to allow)",
        },
        Choice::AllowAlways => {
            desk.policy.forget_cached_reviews();
            "approved always"
        }
        Choice::AllowOnce | Choice::Deny => "approved",
    };
    // The person's yes is on record before the call runs, or the call does
    // not run (fail closed).
    if let Err(e) = audit.approval(what, &channel, &format!("by {by} via {channel}")) {
        let _ = desk.store.ledger_finish(executing, false, "not recorded");
        return Admission::Refused(Outcome::Failed(format!(
            "the approval could not be recorded ({e}), so the call did not run"
        )));
    }
    Admission::Allowed(Box::new(Allowed::by_person(
        call, target, executing, stored,
    )))
}
