//! Input a 2026-07-28 source asks for, on any request that may be answered
//! with `input_required` (`tools/call`, `prompts/get`, `resources/read`).
//!
//! Such a source does not send requests mid-call: it ends the request with
//! its requests and its own `requestState`, and expects to be asked again
//! with the answers. What airlock does with it depends on the client:
//!
//! - a client on 2026-07-28 gets the source's requests under airlock's own
//!   sealed state ([`crate::seal::Continuation`]), which wraps the source's;
//!   its retry opens the seal, once, for the same request (see
//!   decision 0008);
//! - an older client is asked each request as the request it knows
//!   (`elicitation/create`, `sampling/createMessage`, `roots/list`) while
//!   the request waits ([`ask_client`]), and airlock asks the source again
//!   with the answers.
//!
//! Either way a request gets at most [`MAX_ROUNDS`] rounds of at most
//! [`MAX_REQUESTS`] requests each. [`exchange`] runs those rounds for
//! prompts and resources; `pipeline::input` does it for tool calls, whose
//! seal also binds the decided call.

#![allow(deprecated)] // sampling and roots: SEP-2577-deprecated, still relayed

use std::collections::BTreeMap;
use std::time::Duration;

use airlock_common::now_ms;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, InputRequest, InputRequiredResult, InputResponses, ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleServer};
use tokio_util::sync::CancellationToken;

use airlock_upstream::BoxFuture;

use crate::parked;
use crate::seal::{Bound, Continuation, Sealer};

/// Rounds of input one request may ask for; a source that keeps asking is
/// stopped there.
pub(crate) const MAX_ROUNDS: u32 = 16;
/// Requests one round may hold.
pub(crate) const MAX_REQUESTS: usize = 8;
/// Keys of airlock's own input requests; a source may not use them, and a
/// client's answers under them never reach a source.
pub(crate) const RESERVED: &str = "airlock";

/// Why a source's `input_required` is not passed on, if it is not: too
/// many rounds or requests, or a key that would pass for airlock's own form.
pub(crate) fn refused(asked: &InputRequiredResult, round: u32) -> Option<String> {
    if round > MAX_ROUNDS {
        return Some(format!(
            "the source asked for input more than {MAX_ROUNDS} times in one request; airlock stopped it"
        ));
    }
    let requests = asked.input_requests.as_ref();
    if requests.is_some_and(|r| r.len() > MAX_REQUESTS) {
        return Some(format!(
            "the source asked for more than {MAX_REQUESTS} inputs at once; airlock stopped it"
        ));
    }
    if requests.is_some_and(|r| r.keys().any(|k| k.starts_with(RESERVED))) {
        return Some(
            "the source named an input request as airlock's own; airlock stopped it".into(),
        );
    }
    None
}

/// The client's answers, without any under airlock's own keys.
pub(crate) fn unreserved(answers: &mut Option<InputResponses>) {
    if let Some(a) = answers.as_mut() {
        a.retain(|key, _| !key.starts_with(RESERVED));
    }
}

/// The source's requests under a sealed state bound to `what` and `digest`.
pub(crate) fn sealed(
    seals: &Sealer,
    principal: &str,
    (what, digest): (&str, &str),
    asked: InputRequiredResult,
    round: u32,
    ttl: Duration,
) -> InputRequiredResult {
    let state = seals.seal_continuation(
        asked.request_state,
        round,
        Bound {
            principal,
            tool: what,
            digest,
            expires_at_ms: now_ms() + ttl.as_millis() as i64,
        },
    );
    InputRequiredResult::new(asked.input_requests, Some(state))
}

/// Who answers the source's requests: the client of the request, with
/// what it declared, until it gives up.
pub(crate) struct Asker<'a> {
    pub peer: &'a Peer<RoleServer>,
    pub capabilities: Option<&'a ClientCapabilities>,
    pub cancelled: &'a CancellationToken,
    /// Cancelled when the client is gone.
    pub gone: &'a CancellationToken,
}

/// For an older client: each of the source's requests put to the client
/// as a request, while the request waits, all within `deadline`. The
/// answers, by the source's keys. Every request is checked before any is
/// asked, so a person is not asked half of what cannot be answered whole.
pub(crate) async fn ask_client(
    asker: &Asker<'_>,
    asked: &InputRequiredResult,
    round: u32,
    deadline: tokio::time::Instant,
) -> Result<InputResponses, String> {
    if let Some(no) = refused(asked, round) {
        return Err(no);
    }
    let mut requests = Vec::new();
    for (key, request) in asked.input_requests.iter().flatten() {
        let request = match request.clone() {
            InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
            InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
            InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
            _ => return Err("the source asked for a kind of input airlock does not know".into()),
        };
        if let Err(why) = parked::client_supports(asker.capabilities, &request) {
            return Err(format!(
                "the source asked for input this client cannot give: {why}"
            ));
        }
        requests.push((key, request));
    }
    let mut answers = BTreeMap::new();
    for (key, request) in requests {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err("the request ran out of time while the source waited for input".into());
        }
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(left);
        let handle = asker
            .peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| {
                format!("the source's input request could not be sent to the client: {e}")
            })?;
        let answer = tokio::select! {
            a = handle.await_response() => a,
            _ = asker.cancelled.cancelled() => return Err("the client cancelled the request".into()),
            _ = asker.gone.cancelled() => return Err("the client went away".into()),
        };
        let answer = answer
            .map_err(|e| format!("the client did not answer the source's input request: {e}"))?;
        let value = serde_json::to_value(answer)
            .map_err(|e| format!("the client's answer could not be read: {e}"))?;
        answers.insert(key.clone(), value);
    }
    Ok(answers)
}

/// A continuation seal's retry: opened (once) and checked to be for `what`.
pub(crate) fn open(
    seals: &Sealer,
    principal: &str,
    state: &str,
    what: &str,
) -> Result<Continuation, String> {
    let c = seals
        .open_continuation(state, principal, now_ms())
        .map_err(|e| e.to_string())?;
    if c.tool() != what {
        return Err(format!(
            "this requestState belongs to `{}`, not `{what}`",
            c.tool()
        ));
    }
    Ok(c)
}

/// How one request to the source ended.
pub(crate) enum Step<R> {
    Done(R),
    Asked(InputRequiredResult),
}

/// What an [`exchange`] is about and for whom.
pub(crate) struct Exchange<'a> {
    pub seals: &'a Sealer,
    pub principal: &'a str,
    /// `prompt <name>` or `resource <uri>`: what the seal is bound to.
    pub what: String,
    /// Digest of the request's arguments.
    pub digest: String,
    pub asker: Asker<'a>,
    /// The client speaks 2026-07-28: it answers on a retry, not mid-request.
    pub modern: bool,
    pub timeout: Duration,
    pub ttl: Duration,
}

/// A `prompts/get` or `resources/read` that a 2026-07-28 source may answer
/// with `input_required`, carried through its rounds. `state` and
/// `answers` are what the client sent; `send` asks the source once, within
/// the time given. All rounds share one budget of `ex.timeout`: asking the
/// source and asking the client alike.
pub(crate) async fn exchange<'a, R>(
    ex: Exchange<'_>,
    state: Option<String>,
    mut answers: Option<InputResponses>,
    send: impl Fn(
        Option<String>,
        Option<InputResponses>,
        Duration,
    ) -> BoxFuture<'a, Result<Step<R>, ErrorData>>,
) -> Result<Step<R>, ErrorData> {
    let refuse = |why: String| ErrorData::invalid_params(format!("airlock: {why}"), None);
    unreserved(&mut answers);
    let (mut state, first) = match state {
        None => (None, 1),
        Some(s) if s.starts_with(crate::seal::CONTINUATION_PREFIX) => {
            let c = open(ex.seals, ex.principal, &s, &ex.what).map_err(refuse)?;
            if c.digest() != ex.digest {
                return Err(refuse(
                    "the retry's arguments differ from the request's".into(),
                ));
            }
            (c.upstream_state.clone(), c.round + 1)
        }
        Some(_) => return Err(refuse(crate::seal::Refusal::Forged.to_string())),
    };
    let deadline = tokio::time::Instant::now() + ex.timeout;
    for round in first..=MAX_ROUNDS + 1 {
        // The first request has the whole budget; each later one what is left.
        let left = match round == first {
            true => ex.timeout,
            false => deadline.saturating_duration_since(tokio::time::Instant::now()),
        };
        if left.is_zero() {
            return Err(ErrorData::internal_error(
                format!(
                    "airlock: the source did not finish within {}s of input rounds",
                    ex.timeout.as_secs()
                ),
                None,
            ));
        }
        let asked = match send(state.clone(), answers.clone(), left).await? {
            Step::Done(r) => return Ok(Step::Done(r)),
            Step::Asked(asked) => asked,
        };
        if let Some(no) = refused(&asked, round) {
            return Err(ErrorData::internal_error(format!("airlock: {no}"), None));
        }
        if ex.modern {
            let what = (ex.what.as_str(), ex.digest.as_str());
            let sealed = sealed(ex.seals, ex.principal, what, asked, round, ex.ttl);
            return Ok(Step::Asked(sealed));
        }
        let given = ask_client(&ex.asker, &asked, round, deadline).await;
        answers =
            Some(given.map_err(|e| ErrorData::internal_error(format!("airlock: {e}"), None))?);
        state = asked.request_state;
    }
    Err(ErrorData::internal_error(
        format!("airlock: the source asked for input more than {MAX_ROUNDS} times"),
        None,
    ))
}
