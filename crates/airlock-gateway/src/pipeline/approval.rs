//! Step 2b: a call that asks waits for a person.
//!
//! The call is frozen into a pending ledger row; a person decides through a
//! human channel (the client's own prompt, the approval page, or the CLI:
//! `airlock approve ID` / `airlock deny ID`), which records the decision in
//! the ledger (`airlock-decision`, a crate this one does not depend on) and
//! wakes this wait. Then policy is checked again, the approval is claimed once, and
//! the call runs with the stored arguments, never anything resent.

use std::sync::Arc;
use std::time::Duration;

use airlock_common::now_ms;
use airlock_config::Action;
use airlock_policy::{Decision, contract};
use airlock_store::ledger::{Choice, Executing, Expiry, FrozenCall, Pending, Waited};
use airlock_store::{AuditKind, AuditRecord};
use rmcp::model::{CallToolResponse, JsonObject, ProgressNotificationParam};
use serde_json::Value;

use super::{Outcome, Target, ToolCall, decide, prompt};
use crate::hub::Hub;

/// What the model is told, word for word, so it can tell a person's
/// decision from a failure.
pub const DECLINED: &str = "The user declined this tool call.";
pub const TIMED_OUT: &str = "The user did not approve this tool call in time.";

/// Keep-alive cadence while a call waits (below common 30–60 s idle limits).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(crate) enum Approval {
    /// A person approved; the claim is held and these are the arguments
    /// to send (the ones the person was shown, checked by digest).
    Granted {
        executing: Executing,
        arguments: JsonObject,
    },
    Refused(Outcome),
    /// The person is asked through the client: end the call with this.
    AskClient(CallToolResponse),
}

pub(crate) async fn ask(
    hub: &Arc<Hub>,
    call: &ToolCall,
    target: &Target,
    decision: &Decision,
) -> Approval {
    let source = hub.sources[target.source].name();
    let args = Value::Object(call.params.arguments.clone().unwrap_or_default());
    let canonical = contract::canonical(&args);
    let catalog = hub.catalog();
    // What the person deciding sees: the description, or for a tool that
    // changed since its review, what changed, with the lint's findings.
    let reviewed = hub
        .store
        .pinned_contract(source, &target.upstream_name)
        .ok()
        .flatten();
    let description = catalog
        .contract(&call.params.name)
        .map(|c| {
            crate::review::summary(
                &catalog,
                &call.params.name,
                &c.definition,
                reviewed.as_ref().map(|r| &r.definition),
            )
        })
        .unwrap_or_default();
    let frozen = FrozenCall {
        principal: hub.principal.clone(),
        session: call.session.to_string(),
        source: source.to_string(),
        connection: hub.policy().connection(source).to_string(),
        tool: call.params.name.to_string(),
        upstream: target.upstream_name.clone(),
        // The digest binds the approval to the exact arguments; the store
        // keeps only what a person is shown (scrubbed). The arguments
        // themselves stay in this call's memory until it runs or ends.
        args_digest: contract::digest_canonical(&canonical),
        arguments: airlock_upstream::Secrets::scrub(hub.secrets.as_ref(), &canonical),
        reason: decision.reason.clone(),
        description,
        contract_digest: catalog
            .contract(&call.params.name)
            .map(|c| c.digest.clone())
            .unwrap_or_default(),
    };
    let settings = &hub.config.hub;
    // One deadline everywhere: a call that waits here stops waiting after
    // approval_wait, so the approval expires then too, and every channel
    // counts down to that moment. A 2026-07-28 client asked with the form
    // ends this request and retries later, within approval_ttl.
    let client_retries = call.modern && prompt::can_ask(hub, call);
    let ttl = if client_retries {
        settings.approval_ttl
    } else {
        settings.approval_ttl.min(settings.approval_wait)
    };
    let pending = match hub.store.ledger_create(
        &frozen,
        ttl.as_millis() as i64,
        settings.approval_retention.as_millis() as i64,
    ) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot record a pending approval");
            return Approval::Refused(Outcome::Failed(
                "the approval could not be recorded, so the call did not run".into(),
            ));
        }
    };
    let id = pending.id().to_string();
    // The person running the hub sees this; the model never gets the id.
    tracing::warn!(
        tool = %frozen.tool,
        "approval needed: run `airlock approve {id}` or `airlock deny {id}` (`airlock pending` lists them)"
    );
    let mut asking =
        prompt::can_ask(hub, call).then(|| prompt::form(&frozen, pending.expires_at_ms()));
    // A client that can show the form asks the person itself; otherwise
    // point them at the approval page. (The page lists every waiting call
    // either way.)
    if asking.is_none()
        && let Some(channels) = hub.channels()
    {
        channels.waiting(&id, &frozen.tool);
    }
    // A 2026-07-28 client is asked by ending the call with the form; its
    // retry brings the answer (prompt::resume).
    if call.modern
        && let Some(form) = asking.take()
    {
        let _ = audit(
            hub,
            call,
            "asked in the client",
            "input_required with the approval form",
        );
        return Approval::AskClient(prompt::input_required(hub, &frozen, &pending, form));
    }
    let wake = hub.approval_waiter(&id);
    let in_client = asking.map(|form| prompt::ask_in_client(hub, call, &id, form));
    let outcome = wait(hub, call, pending, &wake).await;
    if let Some(form) = in_client {
        form.withdraw();
    }
    hub.forget_approval_waiter(&id);
    outcome
}

async fn wait(
    hub: &Hub,
    call: &ToolCall,
    mut pending: Pending,
    wake: &tokio::sync::Notify,
) -> Approval {
    // The approval's own expiry, the moment every channel counts down to.
    let left = (pending.expires_at_ms() - now_ms()).max(0) as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(left);
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.tick().await;
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                return match hub.store.ledger_expire(pending) {
                    Ok(Expiry::Expired) => {
                        let _ = audit(hub, call, "expired", "no decision in time");
                        Approval::Refused(Outcome::Declined(TIMED_OUT))
                    }
                    // A decision committed at the last moment: it wins.
                    Ok(Expiry::DecisionWon(w)) => settle(hub, call, w).unwrap_or_else(|| {
                        Approval::Refused(Outcome::Declined(TIMED_OUT))
                    }),
                    Err(e) => Approval::Refused(Outcome::Failed(format!("the approval could not be read: {e}"))),
                };
            }
            _ = keep_alive.tick() => {
                ticks += 1;
                keep_client_waiting(call, ticks).await;
                continue;
            }
            _ = call.cancelled.cancelled() => {
                let _ = hub.store.ledger_expire(pending);
                return Approval::Refused(Outcome::Failed("the client cancelled the call".into()));
            }
        }
        match hub.store.ledger_look(pending) {
            Ok(Waited::Pending(p)) => pending = p,
            Ok(w) => {
                if let Some(done) = settle(hub, call, w) {
                    return done;
                }
                return Approval::Refused(Outcome::Declined(TIMED_OUT));
            }
            Err(e) => {
                return Approval::Refused(Outcome::Failed(format!(
                    "the approval could not be read: {e}"
                )));
            }
        }
    }
}

/// Turns a decided row into the call's fate. `None` for a row still pending.
pub(crate) fn settle(hub: &Hub, call: &ToolCall, waited: Waited) -> Option<Approval> {
    Some(match waited {
        Waited::Pending(_) => return None,
        Waited::Denied { by, channel } => {
            let _ = audit_decision(hub, call, "declined", &by, &channel);
            Approval::Refused(Outcome::Declined(DECLINED))
        }
        Waited::Expired | Waited::Missing => {
            let _ = audit(hub, call, "expired", "no decision in time");
            Approval::Refused(Outcome::Declined(TIMED_OUT))
        }
        Waited::Approved(approved) => {
            let approved = *approved;
            // The arguments held in memory since the call asked, bound to
            // the approval by their digest (the store keeps a redacted
            // copy only).
            let stored: JsonObject = call.params.arguments.clone().unwrap_or_default();
            let canonical = contract::canonical(&Value::Object(stored.clone()));
            let shown = airlock_upstream::Secrets::scrub(hub.secrets.as_ref(), &canonical);
            // Bound both ways: to the digest, and to the copy the person
            // was shown (a record altered after the fact runs nothing).
            if contract::digest_canonical(&canonical) != approved.call().args_digest
                || shown != approved.call().arguments
            {
                let _ = hub.store.ledger_refuse(
                    approved,
                    "the approval's record does not match the call that asked",
                );
                return Some(Approval::Refused(Outcome::Failed(
                    "the approval's record does not match the call that asked, so it did not run"
                        .into(),
                )));
            }
            // Policy again, on the stored call: a rule added while the
            // call waited is enforced.
            let Some(route) = hub.catalog().tool(&approved.call().tool).cloned() else {
                let _ = hub.store.ledger_refuse(approved, "the tool is gone");
                return Some(Approval::Refused(Outcome::Failed(
                    "the tool is no longer offered by its source".into(),
                )));
            };
            let now = decide::evaluate(
                hub,
                &hub.catalog(),
                &approved.call().tool,
                route.source,
                &route.upstream_name,
                Some(&Value::Object(stored.clone())),
            );
            if now.action == Action::Deny {
                let _ = audit(hub, call, "denied-at-approval", &now.reason);
                let _ = hub
                    .store
                    .ledger_refuse(approved, &format!("denied at approval: {}", now.reason));
                return Some(Approval::Refused(Outcome::Blocked {
                    action: Action::Deny,
                    reason: format!(
                        "denied when approved, because the policy changed while it waited: {}",
                        now.reason
                    ),
                }));
            }
            let by = approved.call().principal.clone();
            let choice = approved.choice();
            let channel = approved.channel().to_string();
            let contract = approved.call().contract_digest.clone();
            match hub.store.ledger_claim(approved) {
                Ok(Some(executing)) => {
                    let what = match choice {
                        Choice::AllowForRun => {
                            hub.grant_run(call.session, &call.params.name, &contract);
                            "approved for this run"
                        }
                        Choice::AllowAlways => {
                            hub.forget_cached_reviews();
                            "approved always"
                        }
                        Choice::AllowOnce | Choice::Deny => "approved",
                    };
                    // The person's yes is on record before the call runs,
                    // or the call does not run (fail closed).
                    if let Err(e) = audit_decision(hub, call, what, &by, &channel) {
                        let _ = hub.store.ledger_finish(executing, false, "not recorded");
                        return Some(Approval::Refused(Outcome::Failed(format!(
                            "the approval could not be recorded ({e}), so the call did not run"
                        ))));
                    }
                    Approval::Granted {
                        executing,
                        arguments: stored,
                    }
                }
                Ok(None) => {
                    Approval::Refused(Outcome::Failed("this approval was already used".into()))
                }
                Err(e) => Approval::Refused(Outcome::Failed(format!(
                    "the approval could not be claimed: {e}"
                ))),
            }
        }
    })
}

/// Progress while waiting, for clients that asked for progress: a sign of
/// life that also tells the user what the pause is.
async fn keep_client_waiting(call: &ToolCall, ticks: u32) {
    let Some(token) = call.progress.clone() else {
        return;
    };
    let params: Result<ProgressNotificationParam, _> = serde_json::from_value(serde_json::json!({
        "progressToken": token,
        "progress": ticks,
        "message": "waiting for the user's approval",
    }));
    if let Ok(p) = params {
        let _ = call.peer.notify_progress(p).await;
    }
}

/// A person's decision, with who decided and through which channel,
/// committed before this returns.
fn audit_decision(
    hub: &Hub,
    call: &ToolCall,
    what: &str,
    by: &str,
    channel: &str,
) -> Result<(), airlock_store::StoreError> {
    record_audit(hub, call, what, channel, &format!("by {by} via {channel}"))
}

/// What happened to a call at the approval step, committed before this
/// returns; an error means it is not on record.
pub(crate) fn audit(
    hub: &Hub,
    call: &ToolCall,
    what: &str,
    detail: &str,
) -> Result<(), airlock_store::StoreError> {
    record_audit(hub, call, what, "", detail)
}

fn record_audit(
    hub: &Hub,
    call: &ToolCall,
    what: &str,
    channel: &str,
    detail: &str,
) -> Result<(), airlock_store::StoreError> {
    let source = hub
        .catalog()
        .tool(&call.params.name)
        .map(|r| hub.sources[r.source].name().to_string())
        .unwrap_or_default();
    let record = AuditRecord {
        connection: hub.policy().connection(&source).to_string(),
        source,
        tool: call.params.name.to_string(),
        decision: what.into(),
        step: "approval".into(),
        rule: channel.into(),
        reason: detail.into(),
        ..AuditRecord::new(AuditKind::Decision, call.id.to_string(), now_ms())
    };
    hub.store.record_audit_committed(record).inspect_err(|e| {
        tracing::error!(error = %e, "cannot record the approval step");
    })
}
