//! The clients part of the hub: connected sessions and the bounded queue
//! each one's notifications wait in, the calls in flight from them to the
//! sources, and the rules that route a source's traffic back to a client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use airlock_upstream::{Cause, Lane};
use rmcp::model::{ClientCapabilities, ProgressNotificationParam, ProgressToken, RequestId};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::mpsc;

use crate::outbox::{Note, Outbox};
use crate::parked::InputNeeded;

pub type SessionId = u64;

/// A connected client and the bounded queue its notifications wait in.
type Client = (Peer<RoleServer>, Arc<Outbox>);

/// A call, prompt or read currently waiting on a source. Server-to-client
/// requests and progress from that source are routed back through it.
pub(crate) struct InFlight {
    pub source: usize,
    pub session: SessionId,
    /// The key of the client's own connections (see [`Clients::lane_of_program`]).
    pub lane: Option<u64>,
    pub peer: Peer<RoleServer>,
    pub capabilities: Option<ClientCapabilities>,
    /// How the source's requests for input during it reach the client.
    pub asks: Asks,
    /// Where this call's progress goes, if the client asked for it: an
    /// ordered queue the call's own task drains to the client.
    pub progress: Option<mpsc::UnboundedSender<ProgressNotificationParam>>,
}

/// How a source's request for input during a client's request reaches it.
pub(crate) enum Asks {
    /// Sent to the client as a request (protocols before 2026-07-28).
    Client,
    /// A 2026-07-28 client's call: handed to the call's own task, which
    /// parks the call and asks the client (see pipeline::input).
    Park(mpsc::UnboundedSender<InputNeeded>),
    /// A 2026-07-28 client's prompt or read: it cannot be asked in the
    /// middle of one (the source asks with `input_required` instead).
    Nobody,
}

/// What the source said of a call once it was sent: the connection it
/// went on, its request id there and the progress token it carries.
struct Sent {
    lane: Lane,
    id: RequestId,
    token: ProgressToken,
}

/// How a server→client request reaches its client.
pub(crate) enum Route {
    /// Send it to the client as a request (protocols before 2026-07-28).
    Direct(Peer<RoleServer>, Box<Option<ClientCapabilities>>),
    /// Hand it to the call's task, which asks the client with `input_required`.
    Park(mpsc::UnboundedSender<InputNeeded>),
}

/// Why a source's request cannot be put to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error(
        "several clients have calls in progress to this source, so airlock cannot tell which one the request is for; with sessions = \"per-client\" on the source each client gets a connection of its own"
    )]
    SeveralCalling,
    #[error("no client is connected to airlock")]
    NoClient,
    #[error(
        "no call to this source is in progress and several clients are connected, so airlock cannot tell which one the request is for"
    )]
    SeveralConnected,
    #[error("the client whose connection to this source it came on has left")]
    OwnerGone,
    /// It came with a call that is still being sent: ask again shortly.
    #[error("the call it came with is still being sent")]
    NotYetSent,
    #[error(
        "it came with a request that is no longer in progress (it has ended), so airlock cannot tell which client it is for"
    )]
    NotACall,
    #[error(
        "requests of more than one client in progress carry the id of the request it came with (the source's connection was replaced), so airlock cannot tell which client it is for"
    )]
    SameId,
    #[error(
        "it came during a 2026-07-28 client's prompt or read, which cannot be asked in the middle of one; a source asks such a client with input_required"
    )]
    CannotAsk,
}

/// Whom a source's request is for, by the routing rules: the one session
/// with calls in flight to the source; with none, the only live session.
/// Anything else is ambiguous, and airlock does not guess.
pub(crate) fn whom(
    calling: impl IntoIterator<Item = SessionId>,
    live: impl IntoIterator<Item = SessionId>,
) -> Result<(SessionId, bool), RouteError> {
    let mut calling = calling.into_iter();
    if let Some(first) = calling.next() {
        return match calling.all(|s| s == first) {
            true => Ok((first, true)),
            false => Err(RouteError::SeveralCalling),
        };
    }
    let mut live = live.into_iter();
    match (live.next(), live.next()) {
        (Some(only), None) => Ok((only, false)),
        (None, _) => Err(RouteError::NoClient),
        _ => Err(RouteError::SeveralConnected),
    }
}

/// Where a source's notification goes: the one session calling the source,
/// or every session when none or several are.
pub(crate) fn notify_whom(calling: impl IntoIterator<Item = SessionId>) -> Option<SessionId> {
    let mut calling = calling.into_iter();
    let first = calling.next()?;
    calling.all(|s| s == first).then_some(first)
}

/// The one of `found` (each with its session) that something from a source
/// is for: none found, the first when all are one session's, and an error
/// when they are several sessions' — ids and progress tokens start again on
/// each connection, so a call on a replaced connection that has not ended
/// yet can share them with one on the new connection. Never a guess.
fn one_owner<T>(found: impl IntoIterator<Item = (SessionId, T)>) -> Result<Option<T>, ()> {
    let mut found = found.into_iter();
    let Some((session, first)) = found.next() else {
        return Ok(None);
    };
    match found.all(|(s, _)| s == session) {
        true => Ok(Some(first)),
        false => Err(()),
    }
}

#[derive(Default)]
pub struct Clients {
    sessions: Mutex<HashMap<SessionId, Client>>,
    /// Calls in flight, by an id of their own; each with what the source
    /// said of it once sent.
    inflight: Mutex<HashMap<u64, (InFlight, Option<Sent>)>>,
    next_id: AtomicU64,
    /// HTTP sessions by their `Mcp-Session-Id`: what to cancel when the
    /// client ends one.
    http: Mutex<HashMap<String, (SessionId, tokio_util::sync::CancellationToken)>>,
    /// 2026-07-28 clients' listen streams, by a session id of their own.
    streams: Mutex<HashMap<SessionId, Arc<Outbox>>>,
    /// The keys of sessionless clients' own connections, by the program
    /// they name (name, version; see [`Clients::lane_of_program`]).
    lanes: Mutex<HashMap<(String, String), u64>>,
}

/// Sessionless clients remembered by name before the oldest are forgotten.
const MAX_NAMED_CLIENTS: usize = 1024;
/// Bytes of name and version a program may take to be remembered.
const MAX_PROGRAM_NAME: usize = 256;

impl Clients {
    /// A fresh id for a session, a call, or a call in flight.
    pub(crate) fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The key of the own connections (to a source with
    /// `sessions = "per-client"`) of a client without a session
    /// (2026-07-28) that names itself `name` `version`: one per program, so
    /// its calls keep one connection across requests. A client with a
    /// session uses its session's id.
    /// None for a name too long to be one (it shares the connection).
    pub(crate) fn lane_of_program(&self, name: &str, version: &str) -> Option<u64> {
        if name.len() + version.len() > MAX_PROGRAM_NAME {
            return None;
        }
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let program = (name.to_string(), version.to_string());
        if let Some(key) = lanes.get(&program) {
            return Some(*key);
        }
        if lanes.len() >= MAX_NAMED_CLIENTS {
            lanes.clear();
        }
        let key = self.new_id();
        lanes.insert(program, key);
        Some(key)
    }

    pub(crate) fn register(&self, id: SessionId, peer: Peer<RoleServer>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.entry(id).or_insert_with(|| {
            let outbox = Outbox::new(peer.clone());
            (peer, outbox)
        });
    }

    /// A 2026-07-28 client's listen stream, as a session of its own: it is
    /// told what its filter takes, until it is forgotten. Kept apart from
    /// the sessions: a stream is no client that a source's request could
    /// be put to, and does not count as one when routing.
    pub(crate) fn register_stream(&self, id: SessionId, sink: rmcp::service::SubscriptionSink) {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        streams.insert(id, Outbox::for_stream(sink));
    }

    /// Session `session`, whose `gone` this is, is known over HTTP as
    /// `header`. The first to claim a header keeps it.
    pub(crate) fn known_as(
        &self,
        header: &str,
        session: SessionId,
        gone: tokio_util::sync::CancellationToken,
    ) {
        let mut http = self.http.lock().unwrap_or_else(|p| p.into_inner());
        http.entry(header.to_string()).or_insert((session, gone));
    }

    /// The client ended HTTP session `header`: its calls stop.
    pub(crate) fn ended(&self, header: &str) {
        let gone = {
            let mut http = self.http.lock().unwrap_or_else(|p| p.into_inner());
            http.remove(header)
        };
        if let Some((_, gone)) = gone {
            gone.cancel();
        }
    }

    /// Session `session` is over: its header, if it held one, is free.
    fn release_header(&self, session: SessionId) {
        let mut http = self.http.lock().unwrap_or_else(|p| p.into_inner());
        http.retain(|_, (s, _)| *s != session);
    }

    pub(crate) fn forget(&self, id: SessionId) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.release_header(id);
    }

    /// Queues `note` for every live client.
    pub(crate) fn post_all(&self, note: Note) {
        for outbox in self.outboxes() {
            outbox.post(note.clone());
        }
    }

    /// Queues `note` for each of these sessions that is still live.
    pub(crate) fn post_to(&self, ids: &[SessionId], note: Note) {
        let outboxes: Vec<Arc<Outbox>> = {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            ids.iter()
                .filter_map(|id| {
                    (sessions.get(id).map(|(_, o)| o))
                        .or_else(|| streams.get(id))
                        .cloned()
                })
                .collect()
        };
        for outbox in outboxes {
            outbox.post(note.clone());
        }
    }

    /// Queues `note` from source `index` for the client it is for: the
    /// owner of the connection it came on; on the shared one, the one
    /// calling the source, or every client when none or several are.
    pub(crate) fn post_from(&self, index: usize, lane: Lane, note: Note) {
        if let Lane::Session(owner) = lane {
            return self.post_to(&[self.owner_of(index, owner)], note);
        }
        for outbox in self.outboxes_for(index) {
            outbox.post(note.clone());
        }
    }

    /// The outboxes of every live client.
    fn outboxes(&self) -> Vec<Arc<Outbox>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, (p, _)| !p.is_transport_closed());
        let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .values()
            .map(|(_, o)| o.clone())
            .chain(streams.values().cloned())
            .collect()
    }

    /// The session a notification on lane `key` of source `index` is for:
    /// the session itself, or for a sessionless program's lane the one
    /// request calling on it (none, or several: the key, which reaches
    /// nobody).
    fn owner_of(&self, index: usize, key: u64) -> SessionId {
        let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let calling = inflight
            .values()
            .filter(|(c, _)| c.source == index && c.lane == Some(key))
            .map(|(c, _)| c.session);
        notify_whom(calling).unwrap_or(key)
    }

    /// The sessions with calls in flight on source `source`'s shared connection.
    fn calling(&self, source: usize) -> Vec<SessionId> {
        let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        inflight
            .values()
            .filter(|(c, sent)| {
                c.source == source && sent.as_ref().is_none_or(|s| s.lane == Lane::Shared)
            })
            .map(|(c, _)| c.session)
            .collect()
    }

    /// Where a notification from source `index` goes.
    fn outboxes_for(&self, index: usize) -> Vec<Arc<Outbox>> {
        let one = notify_whom(self.calling(index)).and_then(|s| {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions.get(&s).map(|(_, o)| o.clone())
        });
        match one {
            Some(o) => vec![o],
            None => self.outboxes(),
        }
    }

    /// How many calls are waiting on a source.
    pub(crate) fn calls_in_flight(&self) -> usize {
        self.inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Marks a call as in flight; the returned guard removes it when dropped.
    pub(crate) fn begin(self: &Arc<Self>, call: InFlight) -> InFlightGuard {
        let id = self.new_id();
        self.inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (call, None));
        InFlightGuard {
            clients: self.clone(),
            id,
        }
    }

    /// Where a request source `index` makes of the client goes: on a
    /// session's own connection, to that session; on the stream of a
    /// call, to that call; otherwise by [`whom`].
    pub(crate) fn route_for(&self, index: usize, cause: &Cause) -> Result<Route, RouteError> {
        let live: Vec<(SessionId, Peer<RoleServer>)> = {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions
                .iter()
                .filter(|(_, (p, _))| !p.is_transport_closed())
                .map(|(id, (p, _))| (*id, p.clone()))
                .collect()
        };
        let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let calls: Vec<(&InFlight, Option<&Sent>)> = inflight
            .values()
            .filter(|(c, sent)| {
                c.source == index
                    && match cause.lane {
                        Lane::Session(owner) => c.lane == Some(owner),
                        // Not yet sent counts: it may be on this connection.
                        Lane::Shared => sent.as_ref().is_none_or(|s| s.lane == Lane::Shared),
                    }
            })
            .map(|(c, sent)| (c, sent.as_ref()))
            .collect();
        let to_call = |call: &InFlight| match &call.asks {
            Asks::Park(tx) => Ok(Route::Park(tx.clone())),
            Asks::Client => Ok(Route::Direct(
                call.peer.clone(),
                Box::new(call.capabilities.clone()),
            )),
            Asks::Nobody => Err(RouteError::CannotAsk),
        };
        // It came on the answer stream of one of airlock's requests: that
        // call's client, or nobody (a request that is no call, a call that
        // has ended); never a guess.
        if let Some(during) = &cause.during {
            let answering = calls
                .iter()
                .filter(|(_, sent)| sent.is_some_and(|s| s.id == *during && s.lane == cause.lane))
                .map(|(c, _)| (c.session, *c));
            if let Some(call) = one_owner(answering).map_err(|()| RouteError::SameId)? {
                return to_call(call);
            }
            return Err(match calls.iter().any(|(_, sent)| sent.is_none()) {
                true => RouteError::NotYetSent,
                false => RouteError::NotACall,
            });
        }
        // A client's own connection may still carry calls of several
        // sessions (sessionless clients naming the same program): the same
        // rules as on a shared one, with its owner as the only client.
        let owner = match cause.lane {
            Lane::Session(owner) => vec![owner],
            Lane::Shared => live.iter().map(|(id, _)| *id).collect(),
        };
        let (session, calling) = whom(calls.iter().map(|(c, _)| c.session), owner)?;
        if calling {
            let (call, _) = calls
                .iter()
                .find(|(c, _)| c.session == session)
                .expect("the chosen session has a call");
            return to_call(call);
        }
        let (_, peer) = live
            .into_iter()
            .find(|(id, _)| *id == session)
            .ok_or(RouteError::OwnerGone)?;
        let caps = peer.peer_info().map(|i| i.capabilities.clone());
        Ok(Route::Direct(peer, Box::new(caps)))
    }

    /// Where progress from source `index` under the upstream's `token` on
    /// connection `lane` goes, if the client of that call asked for it.
    pub(crate) fn progress_to(
        &self,
        index: usize,
        lane: Lane,
        token: &ProgressToken,
    ) -> Option<mpsc::UnboundedSender<ProgressNotificationParam>> {
        let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let carrying = inflight
            .values()
            .filter(|(c, sent)| {
                c.source == index
                    && sent
                        .as_ref()
                        .is_some_and(|s| s.lane == lane && s.token == *token)
            })
            .map(|(c, _)| (c.session, c));
        one_owner(carrying).ok()??.progress.clone()
    }
}

/// Removes an in-flight entry when the call ends, however it ends.
pub(crate) struct InFlightGuard {
    clients: Arc<Clients>,
    id: u64,
}

impl InFlightGuard {
    /// Links what the source knows the call by to this call.
    pub(crate) fn sent(&self, pending: &airlock_upstream::PendingCall) {
        if let Some((_, sent)) = self
            .clients
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&self.id)
        {
            *sent = Some(Sent {
                lane: pending.lane,
                id: pending.request_id().clone(),
                token: pending.progress_token.clone(),
            });
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.clients
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_to_the_one_session_calling_the_source() {
        assert_eq!(whom([7], [3, 7, 9]), Ok((7, true)));
        // Several calls from one session are still one client.
        assert_eq!(whom([7, 7, 7], [7, 9]), Ok((7, true)));
    }

    #[test]
    fn two_sessions_calling_one_source_is_ambiguous() {
        assert_eq!(whom([7, 9], [7, 9]), Err(RouteError::SeveralCalling));
        assert_eq!(whom([7, 7, 9], [7]), Err(RouteError::SeveralCalling));
    }

    #[test]
    fn with_no_call_the_only_client_gets_it_and_otherwise_nobody() {
        assert_eq!(whom([], [4]), Ok((4, false)));
        assert_eq!(whom([], []), Err(RouteError::NoClient));
        assert_eq!(whom([], [4, 5]), Err(RouteError::SeveralConnected));
    }

    #[test]
    fn an_id_or_token_that_two_clients_requests_carry_is_nobodys() {
        assert_eq!(one_owner::<&str>([]), Ok(None));
        assert_eq!(one_owner([(3, "a")]), Ok(Some("a")));
        assert_eq!(one_owner([(3, "a"), (3, "b")]), Ok(Some("a")));
        assert_eq!(one_owner([(3, "a"), (4, "b")]), Err(()));
        assert_eq!(one_owner([(3, "a"), (3, "b"), (4, "c")]), Err(()));
    }

    #[test]
    fn notifications_go_to_the_one_caller_or_to_everyone() {
        assert_eq!(notify_whom([3, 3]), Some(3));
        assert_eq!(notify_whom([3, 4]), None);
        assert_eq!(notify_whom([]), None);
    }
}
