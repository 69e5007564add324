//! Server→client requests for clients on 2026-07-28, which forbids them.
//!
//! A source on an older protocol asks for input mid-call with a request
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`). A client on
//! 2026-07-28 cannot receive one; it expects the call to end with an
//! `input_required` result and to be called again with the answers. So the
//! call keeps running in a task of its own, the client gets
//! `input_required` carrying the source's request and an opaque
//! `requestState`, and the retry (same tool, that state, the answers)
//! delivers the answer to the waiting source and re-attaches to the call.
//!
//! The state is a random handle to a server-side entry, single use, bound to
//! the tool name, and dropped when the call ends or expires.

#![allow(deprecated)] // sampling and roots: SEP-2577-deprecated, still relayed

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use airlock_upstream::UpstreamError;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientResult, CreateMessageResult, ElicitResult,
    InputRequest, InputRequiredResult, ListRootsResult, ServerRequest,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Prefix of the `requestState` airlock issues, to tell it from a source's own.
pub(crate) const STATE_PREFIX: &str = "airlock.";
const INPUT_KEY: &str = "airlock-input";

/// A request the source made of the client, waiting for the answer.
pub(crate) struct InputNeeded {
    pub request: ServerRequest,
    pub reply: oneshot::Sender<Result<ClientResult, ErrorData>>,
}

/// A call running in its own task, detached from any client request.
/// Dropping it (the client gave up, the parked entry expired) stops the call.
pub(crate) struct Running {
    pub done: oneshot::Receiver<Result<CallToolResponse, UpstreamError>>,
    pub input: mpsc::UnboundedReceiver<InputNeeded>,
    pub cancel: CancellationToken,
}

/// A parked call handed back to the client's retry that brought its input.
/// Only [`ParkedCalls::resume`] makes one: the call was allowed when it started.
pub(crate) struct Resumed(Running);

impl Resumed {
    pub(crate) fn into_running(self) -> Running {
        self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Whether a client that declared `caps` can answer `request`.
pub(crate) fn client_supports(
    caps: Option<&ClientCapabilities>,
    request: &ServerRequest,
) -> Result<(), String> {
    let Some(caps) = caps else {
        return Err("the client has not declared its capabilities".into());
    };
    let (ok, what) = match request {
        ServerRequest::ElicitRequest(_) => (caps.elicitation.is_some(), "elicitation"),
        ServerRequest::CreateMessageRequest(_) => (caps.sampling.is_some(), "sampling"),
        ServerRequest::ListRootsRequest(_) => (caps.roots.is_some(), "roots"),
        _ => (true, ""),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the client connected to airlock does not support {what}"
        ))
    }
}

struct Parked {
    tool: String,
    running: Running,
    kind: Kind,
    reply: oneshot::Sender<Result<ClientResult, ErrorData>>,
    expires: Instant,
}

#[derive(Clone, Copy)]
enum Kind {
    Elicit,
    Sample,
    Roots,
}

/// Calls waiting for a client to come back with input.
#[derive(Default)]
pub(crate) struct ParkedCalls {
    calls: Mutex<HashMap<String, Parked>>,
}

impl ParkedCalls {
    /// Parks `running` until the client answers `needed`; returns the
    /// `input_required` result to send the client. A request that cannot be
    /// put to a 2026-07-28 client is refused to the source, and the call is
    /// handed back to keep waiting on.
    pub(crate) fn park(
        &self,
        tool: &str,
        running: Running,
        needed: InputNeeded,
        ttl: Duration,
    ) -> Result<CallToolResponse, Running> {
        let (kind, request) = match needed.request {
            ServerRequest::ElicitRequest(r) => (Kind::Elicit, InputRequest::Elicitation(r)),
            ServerRequest::CreateMessageRequest(r) => {
                (Kind::Sample, InputRequest::CreateMessage(r))
            }
            ServerRequest::ListRootsRequest(r) => (Kind::Roots, InputRequest::ListRoots(r)),
            other => {
                let what = serde_json::to_value(&other)
                    .ok()
                    .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(String::from))
                    .unwrap_or_else(|| "request".into());
                let _ = needed.reply.send(Err(ErrorData::invalid_request(
                    format!("airlock: {what} cannot be relayed to this client"),
                    None,
                )));
                return Err(running);
            }
        };
        let key = format!("{STATE_PREFIX}{}", airlock_common::random::hex::<16>());
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        calls.retain(|_, p| p.expires > now && !p.reply.is_closed());
        calls.insert(
            key.clone(),
            Parked {
                tool: tool.to_string(),
                running,
                kind,
                reply: needed.reply,
                expires: now + ttl,
            },
        );
        let requests = BTreeMap::from([(INPUT_KEY.to_string(), request)]);
        Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(requests),
            Some(key),
        )))
    }

    /// The retry of a call parked for input (`state`, for `tool`): delivers
    /// the client's answer to the waiting source and hands back the call
    /// to re-attach to.
    pub(crate) fn resume(
        &self,
        state: &str,
        tool: &str,
        responses: Option<&BTreeMap<String, serde_json::Value>>,
    ) -> Result<Resumed, String> {
        let parked = {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            match calls.get(state) {
                None => return Err("this requestState is unknown, already used or expired".into()),
                // Past its time: the call is dropped (and so stopped).
                Some(p) if p.expires <= Instant::now() => {
                    calls.remove(state);
                    return Err("this requestState is unknown, already used or expired".into());
                }
                Some(p) if p.tool != tool => {
                    return Err(format!(
                        "this requestState belongs to a call of `{}`, not `{tool}`",
                        p.tool
                    ));
                }
                Some(_) => calls.remove(state).expect("present"),
            }
        };
        let answer = responses
            .and_then(|r| r.get(INPUT_KEY))
            .cloned()
            .ok_or_else(|| format!("inputResponses has no `{INPUT_KEY}` entry"));
        let result = answer.and_then(|v| parse_answer(parked.kind, v));
        match result {
            Ok(r) => {
                let _ = parked.reply.send(Ok(r));
                Ok(Resumed(parked.running))
            }
            Err(why) => {
                let _ = parked.reply.send(Err(ErrorData::invalid_params(
                    format!("airlock: the client's answer was not usable: {why}"),
                    None,
                )));
                Err(why)
            }
        }
    }
}

fn parse_answer(kind: Kind, v: serde_json::Value) -> Result<ClientResult, String> {
    let bad = |e: serde_json::Error| format!("the answer does not match the request: {e}");
    Ok(match kind {
        Kind::Elicit => {
            ClientResult::ElicitResult(serde_json::from_value::<ElicitResult>(v).map_err(bad)?)
        }
        Kind::Sample => ClientResult::CreateMessageResult(Box::new(
            serde_json::from_value::<CreateMessageResult>(v).map_err(bad)?,
        )),
        Kind::Roots => ClientResult::ListRootsResult(
            serde_json::from_value::<ListRootsResult>(v).map_err(bad)?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ElicitRequest, PingRequest};
    use serde_json::json;

    fn running() -> (Running, CancellationToken) {
        let (_done_tx, done) = oneshot::channel();
        let (_input_tx, input) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let r = Running {
            done,
            input,
            cancel: cancel.clone(),
        };
        (r, cancel)
    }

    fn elicit() -> (
        InputNeeded,
        oneshot::Receiver<Result<ClientResult, ErrorData>>,
    ) {
        let params = serde_json::from_value(json!({
            "mode": "form",
            "message": "name?",
            "requestedSchema": {"type": "object", "properties": {"n": {"type": "string"}}},
        }))
        .unwrap();
        let (reply, rx) = oneshot::channel();
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        (InputNeeded { request, reply }, rx)
    }

    fn state_of(r: CallToolResponse) -> String {
        match r {
            CallToolResponse::InputRequired(i) => i.request_state.unwrap(),
            _ => panic!("not input_required"),
        }
    }

    fn answer() -> BTreeMap<String, serde_json::Value> {
        BTreeMap::from([(
            INPUT_KEY.to_string(),
            json!({"action": "accept", "content": {"n": "x"}}),
        )])
    }

    #[test]
    fn a_parked_call_resumes_once_for_its_own_tool_with_the_answer() {
        let parked = ParkedCalls::default();
        let (r, cancel) = running();
        let (needed, mut reply) = elicit();
        let Ok(ask) = parked.park("t", r, needed, Duration::from_secs(60)) else {
            panic!("not parked")
        };
        let state = state_of(ask);
        assert!(state.starts_with(STATE_PREFIX));
        let err = parked
            .resume(&state, "other", Some(&answer()))
            .err()
            .unwrap();
        assert!(err.contains("belongs to a call of `t`"), "{err}");
        let resumed = parked.resume(&state, "t", Some(&answer())).ok().unwrap();
        assert!(matches!(
            reply.try_recv(),
            Ok(Ok(ClientResult::ElicitResult(_)))
        ));
        // Single use.
        assert!(parked.resume(&state, "t", Some(&answer())).is_err());
        assert!(!cancel.is_cancelled());
        drop(resumed.into_running());
        assert!(cancel.is_cancelled(), "dropping the call stops it");
    }

    #[test]
    fn an_unusable_answer_is_refused_to_both_sides() {
        let parked = ParkedCalls::default();
        let (r, cancel) = running();
        let (needed, mut reply) = elicit();
        let state = state_of(
            parked
                .park("t", r, needed, Duration::from_secs(60))
                .ok()
                .unwrap(),
        );
        let bad = BTreeMap::from([(INPUT_KEY.to_string(), json!({"action": 7}))]);
        assert!(parked.resume(&state, "t", Some(&bad)).is_err());
        assert!(matches!(reply.try_recv(), Ok(Err(_))));
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn an_expired_parked_call_is_gone_and_stopped() {
        let parked = ParkedCalls::default();
        let (r, cancel) = running();
        let (needed, _reply) = elicit();
        let state = state_of(parked.park("t", r, needed, Duration::ZERO).ok().unwrap());
        let err = parked.resume(&state, "t", Some(&answer())).err().unwrap();
        assert!(err.contains("expired"), "{err}");
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn a_request_a_modern_client_cannot_take_is_refused_to_the_source() {
        let parked = ParkedCalls::default();
        let (r, cancel) = running();
        let (reply, mut rx) = oneshot::channel();
        let needed = InputNeeded {
            request: ServerRequest::PingRequest(PingRequest::default()),
            reply,
        };
        let back = parked.park("t", r, needed, Duration::from_secs(60));
        assert!(back.is_err(), "the call is handed back to keep waiting");
        assert!(matches!(rx.try_recv(), Ok(Err(_))));
        assert!(!cancel.is_cancelled());
    }
}
