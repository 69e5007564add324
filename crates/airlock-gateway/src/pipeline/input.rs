//! Input a 2026-07-28 source asks for during an allowed call.
//!
//! Such a source does not send requests mid-call: it ends the call with an
//! `input_required` result (its requests and its own `requestState`) and
//! expects to be called again with the answers. What airlock does with it
//! depends on the client:
//!
//! - a client on 2026-07-28 gets the source's requests under airlock's own
//!   sealed state ([`crate::seal::Continuation`]), which wraps the source's.
//!   Its retry opens the seal and continues this call ([`continued`]): it is
//!   not decided again, and it cannot become another call (same tool, same
//!   arguments, same principal, once, in time);
//! - an older client is asked each request as the request it knows
//!   (`elicitation/create`, `sampling/createMessage`, `roots/list`) while
//!   the call waits, and airlock calls the source again with the answers
//!   ([`ask_client`]).
//!
//! Either way a call gets at most [`MAX_ROUNDS`] rounds of input.

#![allow(deprecated)] // sampling and roots: SEP-2577-deprecated, still relayed

use std::collections::BTreeMap;
use std::time::Duration;

use airlock_common::now_ms;
use rmcp::model::{
    CallToolResponse, InputRequest, InputRequiredResult, InputResponses, ServerRequest,
};
use rmcp::service::PeerRequestOptions;

use super::{Outcome, Target, ToolCall};
use crate::hub::View;
use crate::parked;
use crate::seal::{Bound, Continuation, Sealer};
use airlock_config::Action;

/// Rounds of input one call may ask for; a source that keeps asking is
/// stopped there.
pub(crate) const MAX_ROUNDS: u32 = 16;
/// Keys of airlock's own input requests; a source may not use them.
pub(crate) const RESERVED: &str = "airlock";
/// Requests one round may hold.
pub(crate) const MAX_REQUESTS: usize = 8;

/// Why a source's `input_required` is not passed on, if it is not: too
/// many rounds or requests, or a key that would pass for airlock's own form.
fn refused(asked: &InputRequiredResult, round: u32) -> Option<Outcome> {
    if round > MAX_ROUNDS {
        return Some(too_many());
    }
    let requests = asked.input_requests.as_ref();
    if requests.is_some_and(|r| r.len() > MAX_REQUESTS) {
        return Some(Outcome::Failed(format!(
            "the source asked for more than {MAX_REQUESTS} inputs at once; airlock stopped it"
        )));
    }
    if requests.is_some_and(|r| r.keys().any(|k| k.starts_with(RESERVED))) {
        return Some(Outcome::Failed(
            "the source named an input request as airlock's own; airlock stopped it".into(),
        ));
    }
    None
}

fn too_many() -> Outcome {
    Outcome::Failed(format!(
        "the source asked for input more than {MAX_ROUNDS} times in one call; airlock stopped it"
    ))
}

/// What a continuation is bound to besides its tool name: the call's
/// arguments, and the tool as it was when the call was allowed (source,
/// upstream name, contract), one per line, arguments first.
fn bound_to(call: &ToolCall, target: &Target) -> String {
    format!(
        "{}\n{}\n{}\n{}",
        super::prompt::arguments_digest(call),
        target.source_name,
        target.upstream_name,
        target.contract_digest
    )
}

/// For a 2026-07-28 client: the source's requests, under a sealed state
/// that continues this call. `round` is the round this is (1 for the
/// call's first `input_required`).
pub(crate) fn wrap(
    seals: &Sealer,
    principal: &str,
    (call, target): (&ToolCall, &Target),
    asked: InputRequiredResult,
    round: u32,
    ttl: Duration,
) -> Outcome {
    if let Some(no) = refused(&asked, round) {
        return no;
    }
    let digest = bound_to(call, target);
    let state = seals.seal_continuation(
        asked.request_state,
        round,
        Bound {
            principal,
            tool: &call.params.name,
            digest: &digest,
            expires_at_ms: now_ms() + ttl.as_millis() as i64,
        },
    );
    Outcome::Answered(CallToolResponse::InputRequired(InputRequiredResult::new(
        asked.input_requests,
        Some(state),
    )))
}

/// A 2026-07-28 client's retry under a continuation seal: opened (once),
/// and checked to be the same call, of the same tool as it was when it
/// was allowed, that no rule has come to deny since.
pub(crate) fn continued(
    seals: &Sealer,
    principal: &str,
    view: &View,
    (call, target): (&ToolCall, &Target),
) -> Result<Continuation, String> {
    let state = call.params.request_state.as_deref().unwrap_or_default();
    let continuation = seals
        .open_continuation(state, principal, now_ms())
        .map_err(|e| e.to_string())?;
    let sealed = continuation.digest();
    let arguments = sealed.split('\n').next().unwrap_or_default();
    super::prompt::same_call(continuation.tool(), arguments, call)?;
    if sealed != bound_to(call, target) {
        return Err(
            "the tool changed since this call was allowed (its source, name or definition); call it afresh".into(),
        );
    }
    let args = serde_json::Value::Object(call.params.arguments.clone().unwrap_or_default());
    let now = view.evaluate(&call.params.name, Some(&args));
    if now.action == Action::Deny {
        return Err(format!("policy now denies this call ({})", now.reason));
    }
    Ok(continuation)
}

/// For an older client: each of the source's requests put to the client
/// as a request, while the call waits, all within the call's one
/// `deadline`. The answers, by the source's keys. Every request is checked
/// before any is asked, so a person is not asked half of what cannot be
/// answered whole.
pub(crate) async fn ask_client(
    call: &ToolCall,
    asked: &InputRequiredResult,
    round: u32,
    deadline: tokio::time::Instant,
) -> Result<InputResponses, Outcome> {
    if let Some(no) = refused(asked, round) {
        return Err(no);
    }
    let mut requests = Vec::new();
    for (key, request) in asked.input_requests.iter().flatten() {
        let request = match request.clone() {
            InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
            InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
            InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
            _ => {
                return Err(Outcome::Failed(
                    "the source asked for a kind of input airlock does not know".into(),
                ));
            }
        };
        if let Err(why) = parked::client_supports(call.capabilities.as_ref(), &request) {
            return Err(Outcome::Failed(format!(
                "the source asked for input this client cannot give: {why}"
            )));
        }
        requests.push((key, request));
    }
    let mut answers = BTreeMap::new();
    for (key, request) in requests {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(Outcome::Failed(
                "the call ran out of time while the source waited for input".into(),
            ));
        }
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(left);
        let sent = call.peer.send_request_with_option(request, options).await;
        let handle = sent.map_err(|e| {
            Outcome::Failed(format!(
                "the source's input request could not be sent to the client: {e}"
            ))
        })?;
        let answer = tokio::select! {
            a = handle.await_response() => a,
            _ = call.cancelled.cancelled() => {
                return Err(Outcome::Failed("the client cancelled the call".into()))
            }
        };
        let answer = answer.map_err(|e| {
            Outcome::Failed(format!(
                "the client did not answer the source's input request: {e}"
            ))
        })?;
        let value = serde_json::to_value(answer)
            .map_err(|e| Outcome::Failed(format!("the client's answer could not be read: {e}")))?;
        answers.insert(key.clone(), value);
    }
    Ok(answers)
}
