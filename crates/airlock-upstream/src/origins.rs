//! Which of airlock's requests a Streamable HTTP source's request came under.
//!
//! A server that needs something from the client while it handles a call
//! (an elicitation, a sampling request) sends that request on the SSE
//! stream answering the call's POST. rmcp hands it to the client handler
//! without saying which stream it arrived on, so the HTTP client records it
//! here as each event passes: the server request's id, and the id of the
//! request whose stream carried it. A stream the server closes early to be
//! resumed (`retry`, then a GET with `Last-Event-ID`) keeps its origin: the
//! last event id seen on it names the request its continuation belongs to.
//!
//! The records are bounded: each server request's is taken when the handler
//! sees it, a stream's resume point is replaced by each later event and
//! dropped with the answer, and past [`MAX_KEPT`] the oldest go first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use rmcp::model::{ClientJsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_client::{SseError, StreamableHttpPostResponse};
use sse_stream::Sse;

/// Records kept per kind before the oldest is dropped.
const MAX_KEPT: usize = 1024;

type Stream = BoxStream<'static, Result<Sse, SseError>>;

#[derive(Default)]
pub(crate) struct Origins {
    inner: Mutex<Records>,
}

#[derive(Default)]
struct Records {
    /// Server request id → the request of airlock's it came under.
    asked: Bounded<RequestId>,
    /// Last event id seen on a request's stream → that request.
    resume: Bounded<String>,
}

/// A map that forgets its oldest entries past [`MAX_KEPT`].
struct Bounded<K> {
    map: HashMap<K, RequestId>,
    order: VecDeque<K>,
}

impl<K> Default for Bounded<K> {
    fn default() -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Bounded<K> {
    fn insert(&mut self, key: K, origin: RequestId) {
        if self.map.insert(key.clone(), origin).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > MAX_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }

    fn remove(&mut self, key: &K) -> Option<RequestId> {
        let origin = self.map.remove(key)?;
        self.order.retain(|k| k != key);
        Some(origin)
    }

    fn remove_origin(&mut self, origin: &RequestId) {
        self.map.retain(|_, o| o != origin);
        let map = &self.map;
        self.order.retain(|k| map.contains_key(k));
    }
}

/// What airlock needs of an SSE event's data: whether it is a request
/// (id and method) or the answer to one (id, no method).
#[derive(serde::Deserialize)]
struct Probe {
    id: Option<RequestId>,
    method: Option<serde::de::IgnoredAny>,
}

impl Origins {
    /// The request of airlock's that server request `id` came under, if it
    /// came on a request's stream. Each is told once.
    pub(crate) fn take(&self, id: &RequestId) -> Option<RequestId> {
        self.lock().asked.remove(id)
    }

    /// The POST's answer, with its SSE stream (if it is one) watched on
    /// behalf of the request the POST carried.
    pub(crate) fn post_answer(
        self: &Arc<Self>,
        sent: Option<RequestId>,
        answer: StreamableHttpPostResponse,
    ) -> StreamableHttpPostResponse {
        match (answer, sent) {
            (StreamableHttpPostResponse::Sse(stream, session), Some(origin)) => {
                StreamableHttpPostResponse::Sse(self.watch(origin, stream), session)
            }
            (other, _) => other,
        }
    }

    /// The id of the request a POST carries, if it carries one.
    pub(crate) fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
        match message {
            ClientJsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        }
    }

    /// A stream resumed from `last_event_id`, watched on behalf of the
    /// request it continues, if that is known.
    pub(crate) fn resumed(self: &Arc<Self>, last_event_id: Option<&str>, stream: Stream) -> Stream {
        let origin = last_event_id.and_then(|id| self.lock().resume.remove(&id.to_string()));
        match origin {
            Some(origin) => self.watch(origin, stream),
            None => stream,
        }
    }

    fn watch(self: &Arc<Self>, origin: RequestId, stream: Stream) -> Stream {
        let origins = Arc::downgrade(self);
        stream
            .inspect(move |event| {
                let (Ok(event), Some(origins)) = (event, origins.upgrade()) else {
                    return;
                };
                origins.saw(&origin, event);
            })
            .boxed()
    }

    fn saw(&self, origin: &RequestId, event: &Sse) {
        let probe = event
            .data
            .as_deref()
            .and_then(|d| serde_json::from_str::<Probe>(d).ok());
        let mut records = self.lock();
        match probe {
            // The answer: nothing more comes on this stream.
            Some(Probe {
                id: Some(id),
                method: None,
            }) if &id == origin => {
                records.resume.remove_origin(origin);
                return;
            }
            Some(Probe {
                id: Some(id),
                method: Some(_),
            }) => records.asked.insert(id, origin.clone()),
            _ => {}
        }
        if let Some(event_id) = event.id.clone().filter(|i| !i.is_empty()) {
            records.resume.remove_origin(origin);
            records.resume.insert(event_id, origin.clone());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: Option<&str>, data: serde_json::Value) -> Sse {
        Sse {
            event: None,
            data: Some(data.to_string()),
            id: id.map(str::to_string),
            retry: None,
        }
    }

    fn asks(id: i64) -> serde_json::Value {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {}})
    }

    #[test]
    fn a_request_on_a_calls_stream_is_told_as_that_calls_once() {
        let origins = Origins::default();
        let call = RequestId::Number(7);
        origins.saw(&call, &event(Some("e1"), asks(0)));
        assert_eq!(origins.take(&RequestId::Number(0)), Some(call));
        assert_eq!(origins.take(&RequestId::Number(0)), None);
        // A notification or a request id never seen: no origin.
        assert_eq!(origins.take(&RequestId::Number(1)), None);
    }

    #[test]
    fn a_resumed_stream_keeps_its_origin_until_the_answer() {
        let origins = Origins::default();
        let call = RequestId::Number(3);
        origins.saw(
            &call,
            &event(Some("e1"), serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})),
        );
        origins.saw(&call, &event(Some("e2"), asks(5)));
        // Resumed from the last event: it continues call 3.
        let origin = origins.lock().resume.remove(&"e2".to_string());
        assert_eq!(origin, Some(call.clone()));
        assert!(
            origins.lock().resume.map.is_empty(),
            "one resume point per stream"
        );
        origins.saw(
            &call,
            &event(
                Some("e3"),
                serde_json::json!({"jsonrpc": "2.0", "id": 3, "result": {}}),
            ),
        );
        assert!(
            origins.lock().resume.map.is_empty(),
            "answered: nothing to resume"
        );
    }

    #[test]
    fn records_are_bounded() {
        let origins = Origins::default();
        for i in 0..(MAX_KEPT as i64 + 10) {
            origins.saw(&RequestId::Number(1), &event(None, asks(i)));
        }
        let records = origins.lock();
        assert_eq!(records.asked.map.len(), MAX_KEPT);
        assert!(!records.asked.map.contains_key(&RequestId::Number(0)));
    }
}
