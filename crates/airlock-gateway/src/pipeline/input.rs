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

use super::{Outcome, ToolCall};
use crate::parked;
use crate::seal::{Bound, Continuation, Sealer};

/// Rounds of input one call may ask for; a source that keeps asking is
/// stopped there.
pub(crate) const MAX_ROUNDS: u32 = 16;

fn too_many() -> Outcome {
    Outcome::Failed(format!(
        "the source asked for input more than {MAX_ROUNDS} times in one call; airlock stopped it"
    ))
}

/// For a 2026-07-28 client: the source's requests, under a sealed state
/// that continues this call. `round` is the round this is (1 for the
/// call's first `input_required`).
pub(crate) fn wrap(
    seals: &Sealer,
    principal: &str,
    call: &ToolCall,
    asked: InputRequiredResult,
    round: u32,
    ttl: Duration,
) -> Outcome {
    if round > MAX_ROUNDS {
        return too_many();
    }
    let digest = super::prompt::arguments_digest(call);
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
/// and checked to be the same call.
pub(crate) fn continued(
    seals: &Sealer,
    principal: &str,
    call: &ToolCall,
) -> Result<Continuation, String> {
    let state = call.params.request_state.as_deref().unwrap_or_default();
    let continuation = seals
        .open_continuation(state, principal, now_ms())
        .map_err(|e| e.to_string())?;
    super::prompt::same_call(continuation.tool(), continuation.digest(), call)?;
    Ok(continuation)
}

/// For an older client: each of the source's requests put to the client
/// as a request, while the call waits. The answers, by the source's keys.
pub(crate) async fn ask_client(
    call: &ToolCall,
    asked: &InputRequiredResult,
    round: u32,
    timeout: Duration,
) -> Result<InputResponses, Outcome> {
    if round > MAX_ROUNDS {
        return Err(too_many());
    }
    let mut answers = BTreeMap::new();
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
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(timeout);
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
