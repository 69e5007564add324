//! One supervised upstream connection.

// resources/subscribe is legacy-only, and still what an older source speaks.
#![allow(deprecated)]

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use airlock_config::{Sessions, SourceConfig};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotification,
    CancelledNotificationParam, ClientCapabilities, ClientNotification, ClientRequest,
    GetPromptResponse, ProgressToken, ProtocolVersion, ReadResourceResponse, RequestId,
    RequestMetaObject, ServerCapabilities, ServerResult, SubscribeRequest, SubscribeRequestParams,
    UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions, RequestHandle, RoleClient, ServiceError};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::clean::{cleaned, cleaned_error};
use crate::client::UpstreamClient;
use crate::connect::{Connection, connect};
use crate::lanes::{Lane as OwnConnection, Lanes};
use crate::listen::{Listener, Subscribed};
use crate::ports::{Downstream, Lane, Secrets, SourceState};
pub use crate::snapshot::Snapshot;
use crate::snapshot::same_lists;

/// Why a call to a source did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("source `{0}` is not connected: {1}")]
    Unavailable(String, String),
    #[error("source `{src}` did not answer within {}s", timeout.as_secs_f32())]
    Timeout { src: String, timeout: Duration },
    #[error("source `{src}` closed the connection during the call")]
    Closed { src: String },
    #[error("source `{src}` answered with an error: {error}")]
    Mcp { src: String, error: rmcp::ErrorData },
    #[error("source `{src}` failed: {detail}")]
    Other { src: String, detail: String },
    /// The server wants a person to log in (or to grant more scope): the
    /// message names the command.
    #[error("{0}")]
    NeedsLogin(String),
}

pub struct Source {
    pub config: SourceConfig,
    name: Arc<str>,
    connect_timeout: Duration,
    max_message_bytes: usize,
    downstream: Arc<dyn Downstream>,
    secrets: Arc<dyn Secrets>,
    peer: RwLock<Option<Peer<RoleClient>>>,
    snapshot: RwLock<Arc<Snapshot>>,
    state: watch::Sender<SourceState>,
    shutdown: CancellationToken,
    refresh_lock: tokio::sync::Mutex<()>,
    stopped: Notify,
    /// Resources clients subscribed to, for a 2026-07-28 source's stream.
    subscribed: Arc<Subscribed>,
    /// Held across a change of `subscribed` and what an older source is told
    /// of it, so the source hears them in the order they were made.
    subscribing: Arc<tokio::sync::Mutex<()>>,
    /// Client sessions' own connections (`sessions = "per-client"`).
    lanes: Lanes,
    /// The cancellations of calls dropped unfinished, on their way to the
    /// source: waited for before the source is stopped (see
    /// [`Source::cancellations_sent`]).
    farewells: tokio_util::task::TaskTracker,
    /// Why the server last refused a request for want of a login, for the
    /// call it refused (see [`crate::oauth::Watch`]).
    login: crate::oauth::Watch,
    me: Weak<Source>,
}

const BACKOFF_START: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A connection that stayed up this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(60);

impl Source {
    pub fn new(
        config: SourceConfig,
        connect_timeout: Duration,
        max_message_bytes: usize,
        downstream: Arc<dyn Downstream>,
        secrets: Arc<dyn Secrets>,
        shutdown: CancellationToken,
    ) -> Arc<Source> {
        let name: Arc<str> = config.name.as_str().into();
        Arc::new_cyclic(|me| Source {
            config,
            name,
            connect_timeout,
            max_message_bytes,
            downstream,
            secrets,
            peer: RwLock::new(None),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            state: watch::channel(SourceState::Starting).0,
            shutdown,
            refresh_lock: tokio::sync::Mutex::new(()),
            stopped: Notify::new(),
            subscribed: Arc::default(),
            subscribing: Arc::default(),
            lanes: Lanes::default(),
            farewells: tokio_util::task::TaskTracker::new(),
            login: crate::oauth::Watch::default(),
            me: me.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn state(&self) -> SourceState {
        self.state.borrow().clone()
    }

    /// The protocol version the live connection speaks, if it is up.
    pub fn protocol_version(&self) -> Option<String> {
        let peer = self.peer.read().unwrap_or_else(|p| p.into_inner());
        peer.as_ref()
            .and_then(|p| p.peer_info())
            .map(|i| i.protocol_version.to_string())
    }

    /// Waits until the source is ready or has failed its first attempt.
    pub async fn settled(&self) -> SourceState {
        let mut rx = self.state.subscribe();
        let r = rx
            .wait_for(|s| !matches!(s, SourceState::Starting))
            .await
            .map(|s| s.clone());
        r.unwrap_or(SourceState::Stopped { last_failure: None })
    }

    /// If the source is down after a failed attempt, what ends with its
    /// next attempt: the next state that is not `Starting`. The state is
    /// read and watched at once, so an attempt that ends before the future
    /// is polled still counts.
    pub fn after_failure(&self) -> Option<impl Future<Output = SourceState> + Send + 'static> {
        let mut rx = self.state.subscribe();
        if !matches!(*rx.borrow_and_update(), SourceState::Failed { .. }) {
            return None;
        }
        Some(async move {
            if rx.changed().await.is_err() {
                return SourceState::Stopped { last_failure: None };
            }
            let r = rx
                .wait_for(|s| !matches!(s, SourceState::Starting))
                .await
                .map(|s| s.clone());
            r.unwrap_or(SourceState::Stopped { last_failure: None })
        })
    }

    /// Waits (at most `limit`) until every cancellation of a call dropped
    /// unfinished has been handed to the source: a hub that stops because
    /// its client left tells the source first, then stops it.
    pub async fn cancellations_sent(&self, limit: Duration) {
        self.farewells.close();
        let _ = tokio::time::timeout(limit, self.farewells.wait()).await;
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_state(&self, state: SourceState) {
        self.downstream.state_changed(&self.name, &state);
        self.state.send_replace(state);
    }

    fn peer(&self) -> Result<Peer<RoleClient>, UpstreamError> {
        self.peer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                let state = self.state();
                let why = match &state {
                    SourceState::Failed { .. } => state.detail(),
                    other => other.label().to_string(),
                };
                UpstreamError::Unavailable(self.name.to_string(), why)
            })
    }

    /// Connects, keeps the connection, and reconnects with backoff until
    /// shutdown. Run it as a task; it returns once the source is stopped.
    pub async fn run(self: Arc<Self>) {
        if self.config.sessions == Sessions::PerClient {
            tokio::spawn(sweep_lanes(self.me.clone(), self.shutdown.clone()));
        }
        let mut backoff = BACKOFF_START;
        loop {
            if self.shutdown.is_cancelled() {
                break;
            }
            self.set_state(SourceState::Starting);
            let lists_changed = self.lists_changed();
            let attempt = match self.may_start() {
                Err(why) => Err(why),
                Ok(()) => tokio::select! {
                    _ = self.shutdown.cancelled() => break,
                    r = connect(&self.config, self.handler(Lane::Shared, None), self.connect_timeout, self.max_message_bytes, &self.secrets, &self.login) => r,
                },
            };
            let attempt = attempt.map_err(|d| self.secrets.scrub(&d));
            let detail = match attempt {
                Ok(conn) => {
                    let started = tokio::time::Instant::now();
                    let detail = self
                        .secrets
                        .scrub(&self.serve_connection(conn, lists_changed).await);
                    if started.elapsed() >= STABLE_AFTER {
                        backoff = BACKOFF_START;
                    }
                    detail
                }
                Err(detail) => detail,
            };
            if self.shutdown.is_cancelled() {
                break;
            }
            tracing::warn!(source = %self.name, %detail, retry_in_ms = backoff.as_millis() as u64, "source is down");
            self.set_state(SourceState::Failed {
                detail,
                retry_in: backoff,
            });
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        let last_failure = match self.state() {
            SourceState::Failed { detail, .. } => Some(detail),
            _ => None,
        };
        self.set_state(SourceState::Stopped { last_failure });
        self.stopped.notify_waiters();
    }

    /// What re-lists the source when one of its connections says a list changed.
    fn lists_changed(&self) -> Arc<dyn Fn() + Send + Sync> {
        let me = self.me.clone();
        Arc::new(move || {
            if let Some(source) = me.upgrade() {
                tokio::spawn(async move { source.refresh_after_change().await });
            }
        })
    }

    /// The client half of one connection to the source. A lane's marks
    /// `changed` when the source says a list changed on it.
    fn handler(
        &self,
        lane: Lane,
        changed: Option<Arc<std::sync::atomic::AtomicBool>>,
    ) -> UpstreamClient {
        let relist = self.lists_changed();
        let lists_changed: Arc<dyn Fn() + Send + Sync> = match changed {
            None => relist,
            Some(changed) => Arc::new(move || {
                changed.store(true, std::sync::atomic::Ordering::SeqCst);
                relist()
            }),
        };
        UpstreamClient {
            lists_changed,
            name: self.name.clone(),
            downstream: self.downstream.clone(),
            secrets: self.secrets.clone(),
            lane,
        }
    }

    /// Asked before every process start: whether a person approved the command.
    fn may_start(&self) -> Result<(), String> {
        match crate::command::CommandIdentity::of(&self.config) {
            Some(command) => self.downstream.command_allowed(&self.name, &command),
            None => Ok(()),
        }
    }

    /// The connection a request from the client whose own connections are
    /// keyed `client` goes on: its own, for an older source whose sessions
    /// are per client; the shared one otherwise (for a client without a
    /// key, an ended session, and past the bound). `idles`: the key is a
    /// program's, not a session's (see [`crate::lanes`]).
    async fn peer_for(&self, client: Option<(u64, bool)>) -> Result<Via, UpstreamError> {
        let shared = self.peer()?;
        let shared = Via {
            peer: shared,
            lane: Lane::Shared,
            _lease: None,
        };
        let (key, idles) = match client {
            Some(c) if self.config.sessions == Sessions::PerClient && !is_modern(&shared.peer) => c,
            _ => return Ok(shared),
        };
        let Some(slot) = self.lanes.slot(key, idles) else {
            tracing::debug!(source = %self.name, "no connection of its own for this client (ended, or all {} taken); it shares the common one", crate::lanes::MAX_LANES);
            return Ok(shared);
        };
        let mut lane = slot.lock().await;
        let current = self.snapshot();
        let checked = match lane.take().filter(|l| l.is_open()) {
            Some(open) if !open.needs_check(&current) => Ok(open),
            Some(open) => self.check_lane(open, current).await,
            None => self.open_lane(key).await,
        };
        let opened = match checked {
            Ok(opened) => opened,
            Err(detail) => {
                drop(lane);
                self.lanes.failed(key);
                return Err(UpstreamError::Other {
                    src: self.name.to_string(),
                    detail: format!(
                        "its own connection for this client: {}",
                        self.secrets.scrub(&detail)
                    ),
                });
            }
        };
        let peer = opened.peer.clone();
        *lane = Some(opened);
        drop(lane);
        Ok(Via {
            peer,
            lane: Lane::Session(key),
            _lease: Some(slot),
        })
    }

    /// Opens client `key`'s own connection, to be used once it offers what
    /// the shared one listed (what was reviewed).
    async fn open_lane(&self, key: u64) -> Result<OwnConnection, String> {
        self.may_start()?;
        let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conn = connect(
            &self.config,
            self.handler(Lane::Session(key), Some(changed.clone())),
            self.connect_timeout,
            self.max_message_bytes,
            &self.secrets,
            &self.login,
        )
        .await?;
        let lane = OwnConnection::open(conn, Arc::default(), changed, self.shutdown.child_token());
        self.check_lane(lane, self.snapshot()).await
    }

    /// Lists everything a lane offers; it is kept only if that is what
    /// the shared connection listed (`current`). Dropped otherwise, which
    /// closes it.
    async fn check_lane(
        &self,
        mut lane: OwnConnection,
        current: Arc<Snapshot>,
    ) -> Result<OwnConnection, String> {
        let capabilities = lane
            .peer
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        let listed = tokio::time::timeout(
            self.connect_timeout,
            self.list_everything(&lane.peer, capabilities),
        )
        .await
        .map_err(|_| "listing what it offers timed out".to_string())?
        .map_err(|e| format!("listing what it offers failed: {e}"))?;
        if !same_lists(&listed, &current) {
            return Err("it offered other tools, prompts or resources on it than the ones airlock listed and reviewed, so nothing was sent on it".into());
        }
        lane.verified = current;
        Ok(lane)
    }

    /// Holds one live connection until it ends; returns why it ended.
    async fn serve_connection(
        &self,
        mut conn: Connection,
        lists_changed: Arc<dyn Fn() + Send + Sync>,
    ) -> String {
        let peer = conn.peer.clone();
        let capabilities = peer
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        *self.peer.write().unwrap_or_else(|p| p.into_inner()) = Some(peer.clone());
        // Held while listing, so a list_changed that arrives meanwhile
        // re-lists after this, never before it with a stale view.
        let listing = self.refresh_lock.lock().await;
        let listed = tokio::time::timeout(
            self.connect_timeout,
            self.list_everything(&peer, capabilities),
        )
        .await;
        match listed {
            Ok(Ok(snapshot)) => {
                *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
                drop(listing);
                // The catalog first, so whoever waits for `Ready` sees the tools.
                self.downstream.catalog_changed(&self.name);
                self.resubscribe(&peer);
                self.set_state(SourceState::Ready);
            }
            Ok(Err(e)) => {
                self.drop_peer();
                conn.close().await;
                return match self.classify(e) {
                    UpstreamError::NeedsLogin(why) => why,
                    other => format!("listing its tools failed: {other}"),
                };
            }
            Err(_) => {
                self.drop_peer();
                conn.close().await;
                return format!(
                    "listing its tools took longer than {}s",
                    self.connect_timeout.as_secs()
                );
            }
        }
        // A 2026-07-28 source announces changes only on a stream asked for.
        let listen = async {
            match is_modern(&peer) {
                true => {
                    Listener {
                        name: self.name.clone(),
                        peer: peer.clone(),
                        capabilities: self.snapshot().capabilities.clone(),
                        subscribed: self.subscribed.clone(),
                        downstream: self.downstream.clone(),
                        secrets: self.secrets.clone(),
                        lists_changed,
                    }
                    .run()
                    .await
                }
                false => std::future::pending().await,
            }
        };
        let detail = tokio::select! {
            _ = self.shutdown.cancelled() => "stopped".to_string(),
            reason = conn.wait() => reason,
            // The listener runs until the connection ends; should it stop,
            // the connection is opened afresh rather than left unheard.
            _ = listen => "its notification stream stopped".to_string(),
        };
        self.drop_peer();
        conn.close().await;
        detail
    }

    fn drop_peer(&self) {
        self.peer.write().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Re-lists after the server announced a change.
    pub(crate) async fn refresh_after_change(self: Arc<Self>) {
        let _one_at_a_time = self.refresh_lock.lock().await;
        let Ok(peer) = self.peer() else { return };
        // From the handshake, not the snapshot: the first listing may not
        // have finished when the server announces its first change.
        let capabilities = peer
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        match tokio::time::timeout(
            self.connect_timeout,
            self.list_everything(&peer, capabilities),
        )
        .await
        {
            Ok(Ok(snapshot)) => {
                // Read again without a change (a stream reopened): nothing to tell.
                if same_lists(&self.snapshot(), &snapshot) {
                    return;
                }
                *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
                self.downstream.catalog_changed(&self.name);
            }
            Ok(Err(e)) => {
                tracing::warn!(source = %self.name, error = %e, "re-listing after a change failed")
            }
            Err(_) => tracing::warn!(source = %self.name, "re-listing after a change timed out"),
        }
    }

    /// Waits for `run` to finish after shutdown was requested.
    pub async fn stopped(&self) {
        let notified = self.stopped.notified();
        if matches!(self.state(), SourceState::Stopped { .. }) {
            return;
        }
        notified.await
    }

    /// Sends a `tools/call` and returns at once with a handle whose
    /// progress token the upstream will use; await [`PendingCall::finish`]
    /// for the answer. Dropping the handle early cancels the call upstream.
    ///
    /// `client` is what the calling client can do: a 2026-07-28 source is
    /// told that, not airlock's own (which relays everything), so it asks
    /// only for input the client can give.
    pub async fn start_call(
        &self,
        own: Option<(u64, bool)>,
        params: CallToolRequestParams,
        client: Option<&ClientCapabilities>,
        timeout: Duration,
    ) -> Result<PendingCall, UpstreamError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        self.start_request(own, request, client, timeout).await
    }

    /// A `tools/call`, `prompts/get` or `resources/read` sent, its answer
    /// still to come: its id on the connection it went on is known, so a
    /// request the source makes while answering it can be told apart from
    /// those of other clients' requests. (A read is never answered from a
    /// cache here: what a client may keep, it is told by the hints.)
    pub async fn start_request(
        &self,
        own: Option<(u64, bool)>,
        request: ClientRequest,
        client: Option<&ClientCapabilities>,
        timeout: Duration,
    ) -> Result<PendingCall, UpstreamError> {
        let via = self.peer_for(own).await?;
        let peer = via.peer.clone();
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(timeout);
        if let Some(caps) = client.filter(|_| is_modern(&peer)) {
            // Only what airlock can carry back to this client: its input
            // kinds, never an extension (tasks) whose follow-up requests
            // airlock does not relay.
            let mut carried = ClientCapabilities::default();
            carried.elicitation = caps.elicitation.clone();
            carried.sampling = caps.sampling.clone();
            carried.roots = caps.roots.clone();
            let mut meta = RequestMetaObject::default();
            meta.set_client_capabilities(carried);
            options.meta = Some(meta);
        }
        let handle = peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| self.classify(e))?;
        Ok(PendingCall {
            progress_token: handle.progress_token.clone(),
            id: handle.id.clone(),
            lane: via.lane,
            _lease: via._lease,
            peer,
            handle: Some(handle),
            source: self.name.clone(),
            secrets: self.secrets.clone(),
            login: self.logs_in().then(|| self.login.clone()),
            farewells: self.farewells.clone(),
            finished: false,
        })
    }

    /// Any other request (completion, logging level), relayed whole.
    pub async fn request(
        &self,
        client: Option<(u64, bool)>,
        request: rmcp::model::ClientRequest,
        timeout: Duration,
    ) -> Result<rmcp::model::ServerResult, UpstreamError> {
        let Via { peer, _lease, .. } = self.peer_for(client).await?;
        let r = self.bounded(timeout, peer.send_request(request)).await?;
        self.clean(r)
    }

    /// Client session `session` subscribes to `uri` (`on`) or unsubscribes.
    /// Subscriptions are held per session: one session's unsubscribe ends
    /// only its own. A 2026-07-28 source has no `resources/subscribe`: the
    /// URIs held join the set its notification stream asks for. An older
    /// source is asked when the first session subscribes to a URI and told
    /// when the last one lets go.
    pub async fn subscribe(
        &self,
        session: u64,
        client: Option<(u64, bool)>,
        uri: &str,
        on: bool,
        timeout: Duration,
    ) -> Result<(), UpstreamError> {
        let Via { peer, lane, _lease } = self.peer_for(client).await?;
        if lane != Lane::Shared {
            // Its own connection: the source hears each change as made.
            let request = match on {
                true => ClientRequest::SubscribeRequest(SubscribeRequest::new(
                    SubscribeRequestParams::new(uri),
                )),
                false => ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
                    UnsubscribeRequestParams::new(uri),
                )),
            };
            let r = self.bounded(timeout, peer.send_request(request)).await?;
            return self.clean(r).map(|_| ());
        }
        if is_modern(&peer) {
            let offers = peer
                .peer_info()
                .and_then(|i| i.capabilities.resources.as_ref().and_then(|r| r.subscribe))
                == Some(true);
            if on && !offers {
                return Err(UpstreamError::Other {
                    src: self.name.to_string(),
                    detail: "it does not offer resource subscriptions".into(),
                });
            }
            self.subscribed.set(session, uri, on);
            return Ok(());
        }
        let _in_order = self.subscribing.lock().await;
        let (before, after) = self.subscribed.set(session, uri, on);
        let request = match (on, before, after) {
            (true, false, _) => ClientRequest::SubscribeRequest(SubscribeRequest::new(
                SubscribeRequestParams::new(uri),
            )),
            (false, true, false) => ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
                UnsubscribeRequestParams::new(uri),
            )),
            // Another session holds it still, or already did.
            _ => return Ok(()),
        };
        let sent = match self.bounded(timeout, peer.send_request(request)).await {
            Ok(r) => self.clean(r).map(|_| ()),
            Err(e) => Err(e),
        };
        if sent.is_err() && on {
            // Not subscribed upstream: not held here either.
            self.subscribed.set(session, uri, false);
        }
        sent
    }

    /// Client session `session` ended: its own connection (keyed by the
    /// session) closes, its
    /// subscriptions end with it, and an older source is told of each URI
    /// nobody holds any more.
    pub fn session_ended(&self, session: u64) {
        self.lanes.close(session);
        let released = self.subscribed.forget(session);
        let Ok(peer) = self.peer() else { return };
        if released.is_empty() || is_modern(&peer) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let timeout = self.connect_timeout;
        let in_order = self.subscribing.clone();
        let subscribed = self.subscribed.clone();
        runtime.spawn(async move {
            let _in_order = in_order.lock().await;
            for uri in released {
                // Taken up again meanwhile: the source keeps it.
                if !subscribed.holders(&uri).is_empty() {
                    continue;
                }
                let request = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
                    UnsubscribeRequestParams::new(uri),
                ));
                let _ = tokio::time::timeout(timeout, peer.send_request(request)).await;
            }
        });
    }

    /// An older source reconnected: the resources clients still hold are
    /// subscribed to again on the new connection.
    fn resubscribe(&self, peer: &Peer<RoleClient>) {
        let held = self.subscribed.list();
        if held.is_empty() || is_modern(peer) {
            return;
        }
        let peer = peer.clone();
        let timeout = self.connect_timeout;
        let in_order = self.subscribing.clone();
        tokio::spawn(async move {
            let _in_order = in_order.lock().await;
            for uri in held {
                let request = ClientRequest::SubscribeRequest(SubscribeRequest::new(
                    SubscribeRequestParams::new(uri),
                ));
                let _ = tokio::time::timeout(timeout, peer.send_request(request)).await;
            }
        });
    }

    /// The client sessions subscribed to `uri` on this source.
    pub fn subscribers(&self, uri: &str) -> Vec<u64> {
        self.subscribed.holders(uri)
    }

    /// A result from the source with every secret scrubbed (see `clean`).
    fn clean<T: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        value: T,
    ) -> Result<T, UpstreamError> {
        cleaned(self.secrets.as_ref(), value).map_err(|detail| UpstreamError::Other {
            src: self.name.to_string(),
            detail,
        })
    }

    /// Everything the source offers, scrubbed on arrival.
    async fn list_everything(
        &self,
        peer: &Peer<RoleClient>,
        capabilities: ServerCapabilities,
    ) -> Result<Snapshot, ServiceError> {
        let listed = list_everything(peer, capabilities).await?;
        let secrets = self.secrets.as_ref();
        let clean = |what: &str, e: String| {
            ServiceError::McpError(rmcp::ErrorData::internal_error(
                format!("its {what}: {e}"),
                None,
            ))
        };
        Ok(Snapshot {
            tools: cleaned(secrets, listed.tools).map_err(|e| clean("tools", e))?,
            resources: cleaned(secrets, listed.resources).map_err(|e| clean("resources", e))?,
            resource_templates: cleaned(secrets, listed.resource_templates)
                .map_err(|e| clean("resource templates", e))?,
            prompts: cleaned(secrets, listed.prompts).map_err(|e| clean("prompts", e))?,
            capabilities: listed.capabilities,
        })
    }

    async fn bounded<T>(
        &self,
        timeout: Duration,
        fut: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, UpstreamError> {
        // Dropping the request future on timeout makes rmcp send
        // notifications/cancelled upstream.
        match tokio::time::timeout(timeout, fut).await {
            Err(_) => Err(UpstreamError::Timeout {
                src: self.name.to_string(),
                timeout,
            }),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.classify(e)),
        }
    }

    fn classify(&self, e: ServiceError) -> UpstreamError {
        refused(
            &self.name,
            &self.secrets,
            self.logs_in().then_some(&self.login),
            e,
        )
    }

    fn logs_in(&self) -> bool {
        crate::oauth::logs_in(&self.config)
    }
}

/// A failed request: a server that wants a login (or more scope) says so
/// and is noted in the source's login record; anything else as it was.
fn refused(
    name: &str,
    secrets: &Arc<dyn Secrets>,
    login: Option<&crate::oauth::Watch>,
    e: ServiceError,
) -> UpstreamError {
    // Only a source that logs in is told to (see `oauth::logs_in`).
    let Some(login) = login else {
        return classify(name, secrets.as_ref(), e);
    };
    // A refusal the transport saw ends the connection; the request then
    // sees only that it closed.
    let seen = login.take();
    if let Some(needed) = crate::oauth::login_needed(&e as &(dyn std::error::Error + 'static)) {
        let vault: Arc<dyn crate::ports::Vault> = secrets.clone();
        return UpstreamError::NeedsLogin(crate::oauth::mark_needs_login(name, vault, needed));
    }
    match (seen, &e) {
        (Some(why), ServiceError::TransportClosed | ServiceError::TransportSend(_)) => {
            UpstreamError::NeedsLogin(why)
        }
        _ => classify(name, secrets.as_ref(), e),
    }
}

fn classify(name: &str, secrets: &dyn Secrets, e: ServiceError) -> UpstreamError {
    {
        let src = name.to_string();
        match e {
            ServiceError::McpError(error) => UpstreamError::Mcp {
                src,
                error: cleaned_error(secrets, error),
            },
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                UpstreamError::Closed { src }
            }
            ServiceError::Timeout { timeout } => UpstreamError::Timeout { src, timeout },
            other => UpstreamError::Other {
                src,
                detail: other.to_string(),
            },
        }
    }
}

/// Closes idle lanes of sessionless clients, every minute, while the
/// source lives.
async fn sweep_lanes(source: Weak<Source>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        match source.upgrade() {
            Some(source) => source.lanes.sweep(),
            None => return,
        }
    }
}

/// Whether the connection speaks 2026-07-28 (or later).
fn is_modern(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|i| i.protocol_version >= ProtocolVersion::V_2026_07_28)
}

async fn list_everything(
    peer: &Peer<RoleClient>,
    capabilities: ServerCapabilities,
) -> Result<Snapshot, ServiceError> {
    let tools = if capabilities.tools.is_some() {
        peer.list_all_tools().await?
    } else {
        Vec::new()
    };
    let (resources, resource_templates) = if capabilities.resources.is_some() {
        (
            peer.list_all_resources().await?,
            peer.list_all_resource_templates().await?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let prompts = if capabilities.prompts.is_some() {
        peer.list_all_prompts().await?
    } else {
        Vec::new()
    };
    Ok(Snapshot {
        tools,
        resources,
        resource_templates,
        prompts,
        capabilities,
    })
}

/// The connection a request goes on, and the lease on it if it is a lane.
struct Via {
    peer: Peer<RoleClient>,
    lane: Lane,
    _lease: Option<crate::lanes::Slot>,
}

/// A `tools/call` on its way. Dropped before it finishes, it tells the
/// upstream to stop (`notifications/cancelled`).
pub struct PendingCall {
    /// The token the upstream will put on its progress notifications.
    pub progress_token: ProgressToken,
    /// The connection it went on.
    pub lane: Lane,
    /// Keeps its lane from closing for being idle while the call runs.
    _lease: Option<crate::lanes::Slot>,
    id: RequestId,
    peer: Peer<RoleClient>,
    handle: Option<RequestHandle<RoleClient>>,
    source: Arc<str>,
    secrets: Arc<dyn Secrets>,
    /// The source's login watch, when it logs in.
    login: Option<crate::oauth::Watch>,
    farewells: tokio_util::task::TaskTracker,
    finished: bool,
}

impl PendingCall {
    /// Its id on the connection it went on.
    pub fn request_id(&self) -> &RequestId {
        &self.id
    }

    /// The answer to a `tools/call`.
    pub async fn finish(self) -> Result<CallToolResponse, UpstreamError> {
        let source = self.source.clone();
        match self.answer().await? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            _ => Err(not_the_answer(&source, "tools/call", "a tool result")),
        }
    }

    /// The answer to a `resources/read`.
    pub async fn finish_read(self) -> Result<ReadResourceResponse, UpstreamError> {
        let source = self.source.clone();
        match self.answer().await? {
            ServerResult::ReadResourceResult(r) => Ok(ReadResourceResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(ReadResourceResponse::InputRequired(r)),
            _ => Err(not_the_answer(
                &source,
                "resources/read",
                "a resource's contents",
            )),
        }
    }

    /// The answer to a `prompts/get`.
    pub async fn finish_prompt(self) -> Result<GetPromptResponse, UpstreamError> {
        let source = self.source.clone();
        match self.answer().await? {
            ServerResult::GetPromptResult(r) => Ok(GetPromptResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(GetPromptResponse::InputRequired(r)),
            _ => Err(not_the_answer(&source, "prompts/get", "a prompt")),
        }
    }

    /// The answer, scrubbed on arrival.
    async fn answer(mut self) -> Result<ServerResult, UpstreamError> {
        let Some(handle) = self.handle.take() else {
            return Err(UpstreamError::Other {
                src: self.source.to_string(),
                detail: "the request was already finished".into(),
            });
        };
        // On timeout rmcp itself sends notifications/cancelled upstream.
        let result = handle.await_response().await;
        self.finished = true;
        let secrets = self.secrets.as_ref();
        match result {
            Ok(r) => cleaned(secrets, r).map_err(|detail| UpstreamError::Other {
                src: self.source.to_string(),
                detail,
            }),
            Err(e) => Err(refused(&self.source, &self.secrets, self.login.as_ref(), e)),
        }
    }
}

fn not_the_answer(source: &str, method: &str, kind: &str) -> UpstreamError {
    UpstreamError::Other {
        src: source.to_string(),
        detail: format!("it answered {method} with a result that is not {kind}"),
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let peer = self.peer.clone();
        let id = self.id.clone();
        if tokio::runtime::Handle::try_current().is_ok() {
            self.farewells.spawn(async move {
                let params = CancelledNotificationParam::new(
                    Some(id),
                    Some("the client cancelled the call".into()),
                );
                let sent = peer
                    .send_notification(ClientNotification::CancelledNotification(
                        CancelledNotification::new(params),
                    ))
                    .await;
                tracing::debug!(
                    ok = sent.is_ok(),
                    "told the source a dropped call is cancelled"
                );
            });
        }
    }
}
