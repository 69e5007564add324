//! The life of one `tools/call`, as a sequence of steps.
//!
//! Each step is a module with one job; `run` reads top to bottom as the
//! order they happen in: resolve the name, decide (policy), wait for a
//! person when policy asks (`approval`, asking in the client through
//! `prompt` and `seal`), forward (credentials are added per request by the
//! source's transport, the answer scrubbed on the way back), record.

mod approval;
pub(crate) mod decide;
mod forward;
pub(crate) mod input;
mod prompt;
mod record;
mod resolve;
pub(crate) mod seal;

use std::sync::Arc;
use std::time::Instant;

use airlock_config::Action;
use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ClientCapabilities, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use tokio_util::sync::CancellationToken;

use crate::hub::{Hub, SessionId};

pub(crate) use forward::Outcome;
pub(crate) use resolve::Target;

/// One call as the client made it, with who made it.
pub(crate) struct ToolCall {
    /// Ties the call's audit records together.
    pub id: u64,
    pub params: CallToolRequestParams,
    pub session: SessionId,
    pub peer: Peer<RoleServer>,
    pub progress: Option<ProgressToken>,
    /// What the client declared it can do (elicitation, sampling, roots).
    pub capabilities: Option<ClientCapabilities>,
    /// The client speaks 2026-07-28 or later: no server→client requests.
    pub modern: bool,
    /// Cancelled when the client cancels the request or goes away.
    pub cancelled: CancellationToken,
    pub started: Instant,
    pub started_at_ms: i64,
}

pub(crate) async fn run(hub: &Arc<Hub>, mut call: ToolCall) -> Result<CallToolResponse, ErrorData> {
    // 1. Which source and upstream tool the exposed name means.
    let target = resolve::tool(hub, &call.params.name)?;
    // 2. Exactly one decision, recorded; only allow goes on. A retry that
    //    carries airlock's own requestState was decided when it started.
    let resuming = call
        .params
        .request_state
        .as_deref()
        .is_some_and(|s| s.starts_with(input::STATE_PREFIX));
    let mut claim = None;
    if prompt::is_sealed_retry(&call) {
        // 2c. A 2026-07-28 client's retry with the person's answer to
        //     airlock's own approval form.
        match prompt::resume(hub, &call).await {
            approval::Approval::Granted {
                executing,
                arguments,
            } => {
                call.params.arguments = Some(arguments);
                call.params.request_state = None;
                call.params.input_responses = None;
                claim = Some(executing);
            }
            approval::Approval::Refused(outcome) => return outcome.into_response(),
            approval::Approval::AskClient(response) => return Ok(response),
        }
    } else if !resuming {
        let decision = match decide::call(hub, &call, &target) {
            Ok(d) => d,
            Err(why) => return Outcome::Failed(why).into_response(),
        };
        match decision.action {
            Action::Allow => {}
            Action::Deny => {
                return Outcome::Blocked {
                    action: Action::Deny,
                    reason: decision.reason,
                }
                .into_response();
            }
            // A person already allowed this tool for this client session.
            Action::Ask
                if hub.use_run_grant(
                    call.session,
                    &call.params.name,
                    &hub.catalog()
                        .contract(&call.params.name)
                        .map(|c| c.digest.clone())
                        .unwrap_or_default(),
                ) =>
            {
                if let Err(e) =
                    approval::audit(hub, &call, "allowed for this run", "an earlier approval")
                {
                    return Outcome::Failed(format!(
                        "the decision could not be recorded ({e}), so the call did not run"
                    ))
                    .into_response();
                }
            }
            // 2b. A person decides; the call then runs with the stored
            //     arguments, never what the client sends later.
            Action::Ask => match approval::ask(hub, &call, &target, &decision).await {
                approval::Approval::Granted {
                    executing,
                    arguments,
                } => {
                    call.params.arguments = Some(arguments);
                    claim = Some(executing);
                }
                approval::Approval::Refused(outcome) => return outcome.into_response(),
                approval::Approval::AskClient(response) => return Ok(response),
            },
        }
    }
    // 3. Call the source within its time and size budget.
    let outcome = forward::tool(hub, &call, &target).await;
    // 4. Record how it ended; an approval is spent whatever happened.
    record::call(hub, &call, &target, &outcome);
    if let Some(executing) = claim {
        let (ok, detail) = match &outcome {
            Outcome::Answered(_) => (true, String::new()),
            Outcome::Refused(e) => (false, e.message.to_string()),
            Outcome::Failed(why) => (false, why.clone()),
            Outcome::Blocked { reason, .. } => (false, reason.clone()),
            Outcome::Declined(text) => (false, text.to_string()),
        };
        if let Err(e) = hub.store.ledger_finish(executing, ok, &detail) {
            tracing::error!(error = %e, "cannot record how an approved call ended");
        }
    }
    outcome.into_response()
}
