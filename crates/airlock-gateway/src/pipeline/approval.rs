//! Step 2b: a call that asks waits for a person.
//!
//! A person's "allow for this run" given earlier in this client session
//! covers it at once. Otherwise the call is frozen into a pending ledger
//! row; a person decides through a human channel (the client's own prompt,
//! the approval page, or the CLI: `airlock approve ID` / `airlock deny ID`),
//! which records the decision in the ledger (`airlock-decision`, a crate
//! this one does not depend on) and wakes this wait. Then policy is checked
//! again, the approval is claimed once, and the call runs with the stored
//! arguments, never anything resent.

use std::time::Duration;

use airlock_common::now_ms;
use airlock_policy::{Decision, contract};
use airlock_store::ledger::{Expiry, FrozenCall, Pending, Waited};
use rmcp::model::ProgressNotificationParam;
use serde_json::Value;

use super::settle::{Desk, TIMED_OUT, settle};
use super::{Admission, Allowed, Audit, Outcome, Target, ToolCall, prompt};

/// Keep-alive cadence while a call waits (below common 30–60 s idle limits).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(crate) async fn ask(
    desk: &Desk<'_>,
    audit: &Audit,
    call: ToolCall,
    target: Target,
    decision: &Decision,
) -> Admission {
    // A person already allowed this tool, as it is now, for this session.
    if let Some(grant) = call.run.as_ref().and_then(|run| {
        desk.approvals
            .run_grants
            .spend(run, &call.params.name, &target.contract_digest)
    }) {
        if let Err(e) = audit.approval("allowed for this run", "", "an earlier approval") {
            return Admission::Refused(Outcome::Failed(format!(
                "the decision could not be recorded ({e}), so the call did not run"
            )));
        }
        return Admission::Allowed(Box::new(Allowed::by_run_grant(call, target, grant)));
    }
    let args = Value::Object(call.params.arguments.clone().unwrap_or_default());
    let canonical = contract::canonical(&args);
    let catalog = desk.sources.catalog();
    // What the person deciding sees: the description, or for a tool that
    // changed since its review, what changed, with the lint's findings.
    let reviewed = desk
        .store
        .pinned_contract(&target.source_name, &target.upstream_name)
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
        principal: desk.approvals.principal().to_string(),
        session: format!("{}/{}", desk.approvals.instance(), call.session),
        source: target.source_name.clone(),
        connection: target.connection.clone(),
        tool: call.params.name.to_string(),
        upstream: target.upstream_name.clone(),
        // The digest binds the approval to the exact arguments; the store
        // keeps only what a person is shown (scrubbed). The arguments
        // themselves stay in this call's memory until it runs or ends.
        args_digest: contract::digest_canonical(&canonical),
        arguments: airlock_upstream::Secrets::scrub(desk.secrets, &canonical),
        reason: decision.reason.clone(),
        description,
        contract_digest: target.contract_digest.clone(),
    };
    let timing = desk.approvals.timing;
    // One deadline everywhere: a call that waits here stops waiting after
    // approval_wait, so the approval expires then too, and every channel
    // counts down to that moment. A 2026-07-28 client asked with the form
    // ends this request and retries later, within approval_ttl; so does a
    // code-mode run, which pauses and is resumed.
    let pauses = call.code.is_some();
    let client_retries = call.modern && prompt::can_ask(desk, &call);
    let ttl = if client_retries || pauses {
        timing.ttl
    } else {
        timing.ttl.min(timing.wait)
    };
    let pending = match desk.store.ledger_create(
        &frozen,
        ttl.as_millis() as i64,
        timing.retention.as_millis() as i64,
    ) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot record a pending approval");
            return Admission::Refused(Outcome::Failed(
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
    // A run's call cannot end its request with the form (the request is
    // the run's): a 2026-07-28 client's person answers on the page.
    let mut asking = (prompt::can_ask(desk, &call) && !(pauses && call.modern))
        .then(|| prompt::form(&frozen, pending.expires_at_ms()));
    // A client that can show the form asks the person itself; otherwise
    // point them at the approval page. (The page lists every waiting call
    // either way.)
    if asking.is_none()
        && let Some(channels) = desk.approvals.channels()
    {
        channels.waiting(&id, &frozen.tool);
    }
    // A 2026-07-28 client is asked by ending the call with the form; its
    // retry brings the answer (prompt::resume).
    if call.modern
        && !pauses
        && let Some(form) = asking.take()
    {
        let _ = audit.approval(
            "asked in the client",
            "",
            "input_required with the approval form",
        );
        return Admission::AskClient(prompt::input_required(desk, &frozen, &pending, form));
    }
    let wake = desk.approvals.waiter(&id);
    let in_client = asking.map(|form| prompt::ask_in_client(desk, &call, &id, form, wake.clone()));
    let waited = wait(desk, audit, &call, pending, &wake).await;
    if let Some(form) = in_client {
        form.withdraw();
    }
    desk.approvals.forget_waiter(&id);
    ended(desk, audit, call, target, waited)
}

/// A resumed run's call that paused on approval `id`: decided since, it
/// settles like any approval; still pending, it waits again (and pauses
/// again if the wait ends undecided). Only the call that asked may use it.
pub(crate) async fn rejoin(
    desk: &Desk<'_>,
    audit: &Audit,
    call: ToolCall,
    target: Target,
    id: &str,
) -> Admission {
    let failed = |why: &str| Admission::Refused(Outcome::Failed(why.to_string()));
    match desk.store.ledger_row(id) {
        Ok(Some(row))
            if row.call.tool == call.params.name.as_ref()
                && row.call.args_digest == prompt::arguments_digest(&call)
                && row.call.principal == desk.approvals.principal() => {}
        Ok(_) => return failed("the approval this run waited for belongs to no such call"),
        Err(e) => return failed(&format!("the approval could not be read: {e}")),
    }
    let waited = match desk.store.ledger_waited(id) {
        Ok(Waited::Pending(pending)) => {
            let wake = desk.approvals.waiter(id);
            let waited = wait(desk, audit, &call, pending, &wake).await;
            desk.approvals.forget_waiter(id);
            waited
        }
        Ok(decided) => Ok(decided),
        Err(e) => return failed(&format!("the approval could not be read: {e}")),
    };
    ended(desk, audit, call, target, waited)
}

/// How a wait ended becomes the call's fate; a run's call still undecided
/// pauses the run.
fn ended(
    desk: &Desk<'_>,
    audit: &Audit,
    call: ToolCall,
    target: Target,
    waited: Result<Waited, Outcome>,
) -> Admission {
    match waited {
        Ok(Waited::Pending(p)) if call.code.is_some() => {
            let _ = audit.approval("paused", "", "the run pauses until the user decides");
            Admission::Paused(p.id().to_string())
        }
        Ok(waited) => settle(desk, audit, call, target, waited),
        Err(outcome) => Admission::Refused(outcome),
    }
}

/// Waits for the row to leave `pending`: a decision, the clock, or the
/// client giving up. A run's call stops waiting after `approval_wait`
/// and leaves the row pending (`Ok(Waited::Pending)`): the run pauses.
async fn wait(
    desk: &Desk<'_>,
    audit: &Audit,
    call: &ToolCall,
    mut pending: Pending,
    wake: &tokio::sync::Notify,
) -> Result<Waited, Outcome> {
    // The approval's own expiry, the moment every channel counts down to.
    let left = (pending.expires_at_ms() - now_ms()).max(0) as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(left);
    let pause = match call.code {
        Some(_) => tokio::time::Instant::now() + desk.approvals.timing.wait,
        None => deadline,
    };
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.tick().await;
    let mut ticks = 0u32;
    let unreadable = |e: airlock_store::StoreError| {
        Outcome::Failed(format!("the approval could not be read: {e}"))
    };
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                return match desk.store.ledger_expire(pending).map_err(unreadable)? {
                    Expiry::Expired => {
                        let _ = audit.approval("expired", "", "no decision in time");
                        Err(Outcome::Declined(TIMED_OUT))
                    }
                    // A decision committed at the last moment: it wins.
                    Expiry::DecisionWon(w) => Ok(w),
                };
            }
            _ = tokio::time::sleep_until(pause), if pause < deadline => {
                return Ok(Waited::Pending(pending));
            }
            _ = keep_alive.tick() => {
                ticks += 1;
                keep_client_waiting(call, ticks).await;
                continue;
            }
            _ = call.abandoned() => {
                let _ = desk.store.ledger_expire(pending);
                return Err(Outcome::Failed("the client cancelled the call".into()));
            }
        }
        match desk.store.ledger_look(pending).map_err(unreadable)? {
            Waited::Pending(p) => pending = p,
            decided => return Ok(decided),
        }
    }
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
