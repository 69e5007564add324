//! Step 3: send an allowed call to its source and wait, within budget.

use std::sync::Arc;

use airlock_config::Action;
use airlock_upstream::{PendingCall, Secrets, UpstreamError};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ProgressNotificationParam,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use airlock_store::ledger::Executing;

use super::input;
use super::stage::Proof;
use super::{Allowed, Target, ToolCall};
use crate::hub::{Approvals, Asks, Clients, Hub, InFlight, InFlightGuard, Sources};
use crate::parked;
use crate::secrets::HubSecrets;
use crate::versions;

/// How the upstream call ended.
pub(crate) enum Outcome {
    /// The source answered (possibly with `isError`, possibly asking for input).
    Answered(CallToolResponse),
    /// The source answered with a JSON-RPC error; passed on unchanged.
    Refused(ErrorData),
    /// No answer: timeout, the source is down or died, the client cancelled.
    Failed(String),
    /// Policy did not allow the call; it never reached the source.
    Blocked { action: Action, reason: String },
    /// A person declined, or did not decide in time; it never ran.
    Declined(&'static str),
}

impl Outcome {
    /// What the client receives. A failure the model can act on is a tool
    /// result with `isError`, prefixed so it is clearly airlock speaking.
    pub(crate) fn into_response(self) -> Result<CallToolResponse, ErrorData> {
        match self {
            Outcome::Answered(r) => Ok(r),
            Outcome::Refused(e) => Err(e),
            Outcome::Failed(why) => Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(format!("airlock: {why}")),
            ]))),
            Outcome::Declined(text) => Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(text),
            ]))),
            // Stable wording, so a model can tell a decision from a failure
            // and does not retry it.
            Outcome::Blocked { action, reason } => {
                let text = match action {
                    Action::Deny => format!(
                        "airlock: denied. This call is not allowed by policy ({reason}). It did not run; do not retry it."
                    ),
                    _ => format!(
                        "airlock: approval required. This call needs the user's approval ({reason}). It did not run."
                    ),
                };
                Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                    ContentBlock::text(text),
                ])))
            }
        }
    }
}

/// A call that went to its source (or tried to), and how it ended.
pub(crate) struct Ran {
    pub call: ToolCall,
    pub outcome: Outcome,
    /// The approval it spent, to be closed with the outcome.
    pub claim: Option<Executing>,
}

/// The parts of the hub a call on its way to a source needs.
pub(crate) struct Wire<'a> {
    sources: &'a Sources,
    /// Where the call is marked in flight, so the source's requests and
    /// progress find their way back to its client.
    clients: &'a Arc<Clients>,
    /// Where a 2026-07-28 client's call waits while the client answers,
    /// and the seal of a 2026-07-28 source's input requests.
    approvals: &'a Approvals,
    secrets: &'a HubSecrets,
}

impl<'a> Wire<'a> {
    pub(crate) fn of(hub: &'a Hub) -> Wire<'a> {
        Wire {
            sources: &hub.sources,
            clients: &hub.clients,
            approvals: &hub.approvals,
            secrets: &hub.secrets,
        }
    }
}

/// Sends an allowed call to its source and waits for the answer.
pub(crate) async fn tool(hub: &Wire<'_>, allowed: Allowed) -> Ran {
    let (call, target, proof) = allowed.into_parts();
    let sources = hub.sources;
    let mut claim = None;
    let outcome = match proof {
        // A retry re-attaches to the call that was waiting for its input.
        Proof::Resumed(resumed) => {
            let timeout = sources.call_timeout(target.source);
            attach(hub, &call, &target, resumed.into_running(), timeout, 1).await
        }
        Proof::Person(executing) => {
            claim = Some(executing);
            start(hub, &call, &target, 1).await
        }
        Proof::Policy | Proof::RunGrant => start(hub, &call, &target, 1).await,
        // The source's input round after the one the seal was issued for.
        Proof::Continued(c) => start(hub, &call, &target, c.round + 1).await,
    };
    Ran {
        call,
        outcome,
        claim,
    }
}

/// `round`: which round of a 2026-07-28 source's input requests the
/// source's next `input_required` would be.
async fn start(hub: &Wire<'_>, call: &ToolCall, target: &Target, round: u32) -> Outcome {
    if call.modern {
        detached(hub, call, target, round).await
    } else {
        attached(hub, call, target, round).await
    }
}

fn upstream_params(call: &ToolCall, target: &Target) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(target.upstream_name.clone());
    params.arguments = call.params.arguments.clone();
    params.input_responses = call.params.input_responses.clone();
    params.request_state = call.params.request_state.clone();
    params
}

/// The source's answer. Everything in it was scrubbed on arrival (I1, in
/// airlock-upstream); only our own description of a failure, which may
/// quote what the transport saw, is scrubbed here.
fn answered(
    hub: &Wire<'_>,
    (call, target): (&ToolCall, &Target),
    result: Result<CallToolResponse, UpstreamError>,
    round: u32,
) -> Outcome {
    let source = target.source;
    match result {
        // Only a 2026-07-28 client gets here with it (see `attached`).
        Ok(CallToolResponse::InputRequired(asked)) => input::wrap(
            &hub.approvals.seals,
            hub.approvals.principal(),
            (call, target),
            asked,
            round,
            hub.approvals.timing.ttl,
        ),
        Ok(CallToolResponse::Complete(mut r)) => {
            // Upstream text never speaks with airlock's voice. A run's
            // code gets the data itself; what the run returns to the
            // model is quoted as a whole (see `code::run`).
            let source = hub.sources.get(source);
            if source.config.quote_output && call.code.is_none() {
                crate::quote::result(source.name(), &mut r);
            }
            Outcome::Answered(versions::call(CallToolResponse::Complete(r)))
        }
        Ok(other) => Outcome::Answered(other),
        Err(UpstreamError::Mcp { error, .. }) => {
            let source = hub.sources.get(source);
            Outcome::Refused(match source.config.quote_output && call.code.is_none() {
                true => crate::quote::source_error(source.name(), error),
                false => error,
            })
        }
        Err(e) => Outcome::Failed(Secrets::scrub(hub.secrets, &e.to_string())),
    }
}

type Started = (
    InFlightGuard,
    Option<mpsc::UnboundedReceiver<ProgressNotificationParam>>,
    PendingCall,
);

/// Registers the call as in flight, then sends it. Registered first, so a
/// request the source makes of the client during this call finds its way
/// back to this client.
async fn send(
    hub: &Wire<'_>,
    call: &ToolCall,
    target: &Target,
    params: CallToolRequestParams,
    input: Option<mpsc::UnboundedSender<parked::InputNeeded>>,
    timeout: std::time::Duration,
) -> Result<Started, Outcome> {
    // With a client that asked for progress (and is not parked for input),
    // the source's progress for this call arrives here, in order.
    let (progress, progress_rx) = if call.progress.is_some() && input.is_none() {
        let (tx, rx) = mpsc::unbounded_channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let in_flight = hub.clients.begin(InFlight {
        source: target.source,
        session: call.session,
        lane: call.lane.map(|(key, _)| key),
        peer: call.peer.clone(),
        capabilities: call.capabilities.clone(),
        asks: input.map_or(Asks::Client, Asks::Park),
        progress,
    });
    let pending = hub
        .sources
        .get(target.source)
        .start_call(call.lane, params, call.capabilities.as_ref(), timeout)
        .await
        .map_err(|e| Outcome::Failed(e.to_string()))?;
    in_flight.sent(&pending);
    Ok((in_flight, progress_rx, pending))
}

/// The call lives inside this client request: requests the source makes of
/// the client go straight to it, and progress is relayed in order. A
/// 2026-07-28 source's `input_required` is put to the client as requests,
/// and the source called again with the answers.
async fn attached(hub: &Wire<'_>, call: &ToolCall, target: &Target, first: u32) -> Outcome {
    let mut params = upstream_params(call, target);
    // One budget for the whole call, however many rounds of input it takes.
    let timeout = hub.sources.call_timeout(target.source);
    let deadline = tokio::time::Instant::now() + timeout;
    for round in first.. {
        if round > first && tokio::time::Instant::now() >= deadline {
            return Outcome::Failed(format!(
                "source did not finish within {}s of input rounds",
                timeout.as_secs()
            ));
        }
        // The first request has the whole budget; each later one what is left.
        let left = match round == first {
            true => timeout,
            false => deadline.saturating_duration_since(tokio::time::Instant::now()),
        };
        let result = match attached_once(hub, call, target, params.clone(), left).await {
            Ok(result) => result,
            Err(failed) => return failed,
        };
        let Ok(CallToolResponse::InputRequired(asked)) = result else {
            return answered(hub, (call, target), result, round);
        };
        match crate::input::ask_client(&input::asker(call), &asked, round, deadline).await {
            Ok(answers) => {
                params.request_state = asked.request_state;
                params.input_responses = Some(answers);
            }
            Err(why) => return Outcome::Failed(why),
        }
    }
    unreachable!("`first..` does not end")
}

/// One request to the source, within this client request.
async fn attached_once(
    hub: &Wire<'_>,
    call: &ToolCall,
    target: &Target,
    params: CallToolRequestParams,
    timeout: std::time::Duration,
) -> Result<Result<CallToolResponse, UpstreamError>, Outcome> {
    let (in_flight, mut progress, pending) = send(hub, call, target, params, None, timeout).await?;
    // Dropping `pending` on cancel tells the source to stop.
    let finish = pending.finish();
    tokio::pin!(finish);
    let result = loop {
        tokio::select! {
            r = &mut finish => break r,
            Some(p) = next_progress(&mut progress) => relay_progress(call, p).await,
            _ = call.abandoned() => return Err(Outcome::Failed("the client cancelled the call".into())),
        }
    };
    // The SDK hands notifications to tasks of their own, so progress sent
    // just before the answer may still be on its way: let those tasks run,
    // then pass on what arrived, all before the answer itself.
    if let Some(rx) = progress.as_mut() {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        while let Ok(p) = rx.try_recv() {
            relay_progress(call, p).await;
        }
    }
    drop(in_flight);
    Ok(result)
}

/// For 2026-07-28 clients: the call runs in a task of its own so it can
/// outlive this client request while the client answers an input request.
async fn detached(hub: &Wire<'_>, call: &ToolCall, target: &Target, round: u32) -> Outcome {
    let (input_tx, input_rx) = mpsc::unbounded_channel();
    let timeout = hub.sources.call_timeout(target.source);
    let params = upstream_params(call, target);
    let (in_flight, _, pending) =
        match send(hub, call, target, params, Some(input_tx), timeout).await {
            Ok(started) => started,
            Err(failed) => return failed,
        };
    let (done_tx, done_rx) = oneshot::channel();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        tokio::select! {
            r = pending.finish() => { let _ = done_tx.send(r); }
            // Dropping `pending` tells the source to stop.
            _ = stop.cancelled() => {}
        }
        drop(in_flight);
    });
    let running = parked::Running {
        done: done_rx,
        input: input_rx,
        cancel,
    };
    attach(hub, call, target, running, timeout, round).await
}

/// Waits on a detached call until it ends, or until the source needs input
/// from the client, in which case the call is parked and the client asked.
async fn attach(
    hub: &Wire<'_>,
    call: &ToolCall,
    target: &Target,
    mut running: parked::Running,
    timeout: std::time::Duration,
    round: u32,
) -> Outcome {
    enum Event {
        Done(Option<Result<CallToolResponse, UpstreamError>>),
        Input(parked::InputNeeded),
        Cancelled,
    }
    loop {
        let event = tokio::select! {
            r = &mut running.done => Event::Done(r.ok()),
            Some(needed) = running.input.recv() => Event::Input(needed),
            _ = call.abandoned() => Event::Cancelled,
        };
        match event {
            Event::Done(Some(result)) => {
                return answered(hub, (call, target), result, round);
            }
            Event::Done(None) => return Outcome::Failed("the call ended without an answer".into()),
            Event::Cancelled => return Outcome::Failed("the client cancelled the call".into()),
            Event::Input(needed) => {
                if let Err(why) =
                    parked::client_supports(call.capabilities.as_ref(), &needed.request)
                {
                    let _ = needed.reply.send(Err(ErrorData::invalid_request(
                        format!("airlock: {why}"),
                        None,
                    )));
                    continue;
                }
                match hub
                    .approvals
                    .parked
                    .park(&call.params.name, running, needed, timeout)
                {
                    Ok(ask) => return Outcome::Answered(ask),
                    Err(back) => running = back,
                }
            }
        }
    }
}

async fn next_progress(
    rx: &mut Option<mpsc::UnboundedReceiver<ProgressNotificationParam>>,
) -> Option<ProgressNotificationParam> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Passes progress on under the client's own token (scrubbed on arrival).
async fn relay_progress(call: &ToolCall, mut p: ProgressNotificationParam) {
    if let Some(token) = call.progress.clone() {
        p.progress_token = token;
        let _ = call.peer.notify_progress(p).await;
    }
}
