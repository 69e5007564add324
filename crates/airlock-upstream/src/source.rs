//! One supervised upstream connection.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use airlock_config::SourceConfig;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse, Prompt,
    ReadResourceRequestParams, ReadResourceResponse, Resource, ResourceTemplate,
    ServerCapabilities, Tool,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::client::{Downstream, UpstreamClient};
use crate::connect::{Connection, connect};

/// Where a source stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceState {
    Starting,
    Ready,
    /// It failed to start or died; `retry_in` until the next attempt.
    Failed { detail: String, retry_in: Duration },
    Stopped,
}

impl SourceState {
    pub fn label(&self) -> &'static str {
        match self {
            SourceState::Starting => "starting",
            SourceState::Ready => "ready",
            SourceState::Failed { .. } => "failed",
            SourceState::Stopped => "stopped",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            SourceState::Failed { detail, retry_in } => {
                format!("{detail} (next attempt in {}s)", retry_in.as_secs())
            }
            _ => String::new(),
        }
    }
}

/// What a source offered when last listed.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub tools: Vec<Tool>,
    pub resources: Vec<Resource>,
    pub resource_templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
    pub capabilities: ServerCapabilities,
}

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
    Mcp {
        src: String,
        error: rmcp::ErrorData,
    },
    #[error("source `{src}` failed: {detail}")]
    Other { src: String, detail: String },
}

pub struct Source {
    pub config: SourceConfig,
    name: Arc<str>,
    connect_timeout: Duration,
    max_message_bytes: usize,
    downstream: Arc<dyn Downstream>,
    peer: RwLock<Option<Peer<RoleClient>>>,
    snapshot: RwLock<Arc<Snapshot>>,
    state: watch::Sender<SourceState>,
    shutdown: CancellationToken,
    refresh_lock: tokio::sync::Mutex<()>,
    stopped: Notify,
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
        shutdown: CancellationToken,
    ) -> Arc<Source> {
        let name: Arc<str> = config.name.as_str().into();
        Arc::new(Source {
            config,
            name,
            connect_timeout,
            max_message_bytes,
            downstream,
            peer: RwLock::new(None),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            state: watch::channel(SourceState::Starting).0,
            shutdown,
            refresh_lock: tokio::sync::Mutex::new(()),
            stopped: Notify::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn state(&self) -> SourceState {
        self.state.borrow().clone()
    }

    /// Waits until the source is ready or has failed its first attempt.
    pub async fn settled(&self) -> SourceState {
        let mut rx = self.state.subscribe();
        let r = rx
            .wait_for(|s| !matches!(s, SourceState::Starting))
            .await
            .map(|s| s.clone());
        r.unwrap_or(SourceState::Stopped)
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap_or_else(|p| p.into_inner()).clone()
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
        let mut backoff = BACKOFF_START;
        loop {
            if self.shutdown.is_cancelled() {
                break;
            }
            self.set_state(SourceState::Starting);
            let handler = UpstreamClient {
                source: Arc::downgrade(&self),
                name: self.name.clone(),
                downstream: self.downstream.clone(),
            };
            let attempt = tokio::select! {
                _ = self.shutdown.cancelled() => break,
                r = connect(&self.config, handler, self.connect_timeout, self.max_message_bytes) => r,
            };
            let detail = match attempt {
                Ok(conn) => {
                    let started = tokio::time::Instant::now();
                    let detail = self.serve_connection(conn).await;
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
        self.set_state(SourceState::Stopped);
        self.stopped.notify_waiters();
    }

    /// Holds one live connection until it ends; returns why it ended.
    async fn serve_connection(&self, mut conn: Connection) -> String {
        let peer = conn.peer.clone();
        let capabilities = peer
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        *self.peer.write().unwrap_or_else(|p| p.into_inner()) = Some(peer.clone());
        let listed = tokio::time::timeout(self.connect_timeout, list_everything(&peer, capabilities)).await;
        match listed {
            Ok(Ok(snapshot)) => {
                *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
                self.set_state(SourceState::Ready);
                self.downstream.catalog_changed(&self.name);
            }
            Ok(Err(e)) => {
                self.drop_peer();
                conn.close().await;
                return format!("listing its tools failed: {e}");
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
        let detail = tokio::select! {
            _ = self.shutdown.cancelled() => "stopped".to_string(),
            reason = conn.wait() => reason,
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
        let capabilities = self.snapshot().capabilities.clone();
        match tokio::time::timeout(self.connect_timeout, list_everything(&peer, capabilities)).await {
            Ok(Ok(snapshot)) => {
                *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
                self.downstream.catalog_changed(&self.name);
            }
            Ok(Err(e)) => tracing::warn!(source = %self.name, error = %e, "re-listing after a change failed"),
            Err(_) => tracing::warn!(source = %self.name, "re-listing after a change timed out"),
        }
    }

    /// Waits for `run` to finish after shutdown was requested.
    pub async fn stopped(&self) {
        let notified = self.stopped.notified();
        if matches!(self.state(), SourceState::Stopped) {
            return;
        }
        notified.await
    }

    pub async fn call_tool(
        &self,
        params: CallToolRequestParams,
        timeout: Duration,
    ) -> Result<CallToolResponse, UpstreamError> {
        let peer = self.peer()?;
        self.bounded(timeout, peer.call_tool_once(params)).await
    }

    pub async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        timeout: Duration,
    ) -> Result<ReadResourceResponse, UpstreamError> {
        let peer = self.peer()?;
        self.bounded(timeout, peer.read_resource_once(params)).await
    }

    pub async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        timeout: Duration,
    ) -> Result<GetPromptResponse, UpstreamError> {
        let peer = self.peer()?;
        self.bounded(timeout, peer.get_prompt_once(params)).await
    }

    /// Any other request (completion, subscribe, logging level), relayed whole.
    pub async fn request(
        &self,
        request: rmcp::model::ClientRequest,
        timeout: Duration,
    ) -> Result<rmcp::model::ServerResult, UpstreamError> {
        let peer = self.peer()?;
        self.bounded(timeout, peer.send_request(request)).await
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
        let src = self.name.to_string();
        match e {
            ServiceError::McpError(error) => UpstreamError::Mcp { src, error },
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
