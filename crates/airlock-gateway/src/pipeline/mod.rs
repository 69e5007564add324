//! The life of one `tools/call`, as a sequence of steps.
//!
//! Each step is a module with one job, and hands the next a value only it
//! can make, so the order is the compiler's to check:
//!
//! ```text
//! ToolCall ──resolve──▶ Target ──(entry: fresh | answer | resume)
//!    fresh:  decide ──▶ PolicyAllows ───────────────┐
//!            decide ──▶ ask ──run grant──▶ GrantSpent ┤
//!                            └─approval──▶ Executing ─┤──▶ Allowed ──forward──▶ Ran ──record
//!    answer: prompt::resume ──approval──▶ Executing ──┤
//!    resume: parked call ──▶ Resumed ─────────────────┘
//!    rejoin: a resumed run's paused call ──approval──▶ Executing (or pauses again)
//! ```
//!
//! [`forward`] takes only an [`Allowed`], and an `Allowed` can only be made
//! from one of those proofs: a policy allow (made only by [`decide`]), a
//! spent run grant, a claimed approval (made only by the store's claim), or
//! a parked call that an allowed call left. One snapshot of the catalog,
//! the rules and the reviews ([`crate::hub::View`]) serves the whole call.

mod approval;
mod audit;
pub(crate) mod decide;
mod forward;
mod input;
mod prompt;
mod record;
mod resolve;
mod settle;
mod stage;

use std::sync::Arc;
use std::time::Instant;

use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ClientCapabilities, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use tokio_util::sync::CancellationToken;

use crate::hub::{Hub, RunKey, SessionId};

pub(crate) use audit::Audit;
pub(crate) use forward::Outcome;
pub(crate) use resolve::Target;
pub(crate) use settle::{DECLINED, Desk, TIMED_OUT};
pub(crate) use stage::Allowed;

/// One call as the client made it, with who made it.
pub(crate) struct ToolCall {
    /// Ties the call's audit records together.
    pub id: u64,
    pub params: CallToolRequestParams,
    pub session: SessionId,
    /// What "allow for this run" covers for this client; none for a
    /// sessionless client that names no program.
    pub run: Option<RunKey>,
    /// The key of this client's own connections to a per-client source;
    /// none (the shared connection) for a client that names no program.
    pub lane: Option<(u64, bool)>,
    pub peer: Peer<RoleServer>,
    pub progress: Option<ProgressToken>,
    /// What the client declared it can do (elicitation, sampling, roots).
    pub capabilities: Option<ClientCapabilities>,
    /// The client speaks 2026-07-28 or later: no server→client requests.
    pub modern: bool,
    /// Cancelled when the client cancels the request.
    pub cancelled: CancellationToken,
    /// Cancelled when the client is gone (see [`ToolCall::abandoned`]).
    pub gone: CancellationToken,
    pub started: Instant,
    pub started_at_ms: i64,
    /// Set when code mode's bridge made the call: which run, which call.
    pub code: Option<CodeCall>,
}

/// A call a code-mode run made through the bridge: it pauses the run
/// instead of expiring when a person has not decided in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeCall {
    pub run: String,
    pub seq: u32,
}

impl ToolCall {
    /// Resolves when the client cancels the call or is gone.
    pub(crate) async fn abandoned(&self) {
        tokio::select! {
            _ = self.cancelled.cancelled() => {}
            _ = self.gone.cancelled() => {}
        }
    }
}

/// How a call came in, read once from its `requestState`.
enum Entry {
    /// A new call: policy decides it.
    Fresh,
    /// A 2026-07-28 client's retry carrying a person's answer to airlock's
    /// approval form, under airlock's seal.
    Answer,
    /// A retry carrying the client's input for a call parked mid-run.
    Resume,
    /// A retry carrying the client's input for a 2026-07-28 source that
    /// asked for it, under airlock's seal of the call.
    Continue,
    /// A state airlock did not issue: a source's states reach clients only
    /// inside airlock's seal, so this one is made up.
    Unknown,
    /// A resumed run's call, rejoining the approval it paused on.
    Rejoin,
}

impl Entry {
    fn of(call: &ToolCall) -> Entry {
        match call.params.request_state.as_deref() {
            Some(s) if s.starts_with(crate::seal::SEAL_PREFIX) => Entry::Answer,
            Some(s) if s.starts_with(crate::parked::STATE_PREFIX) => Entry::Resume,
            Some(s) if s.starts_with(crate::seal::CONTINUATION_PREFIX) => Entry::Continue,
            Some(_) => Entry::Unknown,
            None => Entry::Fresh,
        }
    }
}

/// What the admitting steps (decide, approval, prompt) end with.
pub(crate) enum Admission {
    Allowed(Box<Allowed>),
    /// It does not run; this is what the client gets.
    Refused(Outcome),
    /// The person is asked through the client: end the call with this.
    AskClient(CallToolResponse),
    /// A run's call still undecided after the wait: the run pauses on
    /// this approval.
    Paused(String),
}

/// How a call ends: what the client gets, or (a run's call) a pause.
pub(crate) enum Ending {
    Outcome(Outcome),
    AskClient(CallToolResponse),
    Paused(String),
}

pub(crate) async fn run(hub: &Arc<Hub>, call: ToolCall) -> Result<CallToolResponse, ErrorData> {
    match admit_and_forward(hub, call, None).await? {
        Ending::Outcome(outcome) => outcome.into_response(),
        Ending::AskClient(response) => Ok(response),
        // Only a run's call pauses, and those come through `bridged`.
        Ending::Paused(_) => {
            Outcome::Failed("the call paused outside a run".into()).into_response()
        }
    }
}

/// A code-mode run's call, through the same steps as a client's; with
/// `rejoin`, the approval a paused run's call waited for.
pub(crate) async fn bridged(
    hub: &Arc<Hub>,
    call: ToolCall,
    rejoin: Option<&str>,
) -> Result<Ending, ErrorData> {
    admit_and_forward(hub, call, rejoin).await
}

async fn admit_and_forward(
    hub: &Arc<Hub>,
    call: ToolCall,
    rejoin: Option<&str>,
) -> Result<Ending, ErrorData> {
    // One snapshot of what decides, for the whole call.
    let view = hub.view();
    // 1. Which source and upstream tool the exposed name means.
    let target = resolve::tool(&hub.sources, &view, &call.params.name)?;
    let audit = Audit::new(hub.store.clone(), &call, &target);
    // 2. Exactly one decision, recorded; only an allowed call goes on.
    let entry = match rejoin {
        Some(_) => Entry::Rejoin,
        None => Entry::of(&call),
    };
    let admission = match entry {
        // 2d. A resumed run's call that paused on an approval.
        Entry::Rejoin => {
            approval::rejoin(
                &Desk::of(hub),
                &audit,
                call,
                target,
                rejoin.unwrap_or_default(),
            )
            .await
        }
        Entry::Fresh => match decide::call(&view, &audit, &hub.secrets, &call) {
            decide::Verdict::Allow(yes) => {
                Admission::Allowed(Box::new(Allowed::by_policy(call, target, yes)))
            }
            decide::Verdict::Refuse(outcome) => Admission::Refused(outcome),
            // 2b. A person decides (or already did, for this run).
            decide::Verdict::Ask(decision) => {
                approval::ask(&Desk::of(hub), &audit, call, target, &decision).await
            }
        },
        // 2c. A 2026-07-28 client's retry with the person's answer.
        Entry::Answer => prompt::resume(&Desk::of(hub), &audit, call, target).await,
        Entry::Continue => {
            match input::continued(
                &hub.approvals.seals,
                hub.approvals.principal(),
                &view,
                (&call, &target),
            ) {
                Ok(c) => Admission::Allowed(Box::new(Allowed::continued(call, target, c))),
                Err(why) => return refuse_state(&audit, &call, &why),
            }
        }
        Entry::Unknown => {
            return refuse_state(
                &audit,
                &call,
                crate::seal::Refusal::Forged.to_string().as_str(),
            );
        }
        Entry::Resume => match hub.approvals.parked.resume(
            call.params.request_state.as_deref().unwrap_or_default(),
            &call.params.name,
            call.params.input_responses.as_ref(),
        ) {
            Ok(resumed) => Admission::Allowed(Box::new(Allowed::resumed(call, target, resumed))),
            Err(why) => return refuse_state(&audit, &call, &why),
        },
    };
    let allowed = match admission {
        Admission::Allowed(allowed) => *allowed,
        Admission::Refused(outcome) => return Ok(Ending::Outcome(outcome)),
        Admission::AskClient(response) => return Ok(Ending::AskClient(response)),
        Admission::Paused(approval) => return Ok(Ending::Paused(approval)),
    };
    // 3. Call the source within its time and size budget.
    let ran = forward::tool(&forward::Wire::of(hub), allowed).await;
    // 4. Record how it ended; an approval is spent whatever happened.
    Ok(Ending::Outcome(record::call(
        &audit,
        hub.store.as_ref(),
        ran,
    )))
}

/// A retry whose state does not hold: refused and recorded; nothing runs.
fn refuse_state(audit: &Audit, call: &ToolCall, why: &str) -> Result<Ending, ErrorData> {
    let refused = Outcome::Refused(ErrorData::invalid_params(
        format!("airlock: {why}; nothing ran"),
        None,
    ));
    audit.outcome(&refused, call);
    Ok(Ending::Outcome(refused))
}
