//! The MCP client airlock runs toward each source.
//!
//! It implements rmcp's `Service<RoleClient>` directly rather than the typed
//! `ClientHandler`, so every server-to-client request is relayed whole,
//! whatever its kind, instead of being re-built field by field.

// Logging, sampling and roots are deprecated by SEP-2577 but still used by
// the servers and clients airlock sits between; relaying them is the point.
#![allow(deprecated)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientResult, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam, ResourceUpdatedNotificationParam,
    ServerNotification, ServerRequest,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, Service};

use crate::clean::cleaned;
use crate::source::Source;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a source sends toward clients, and where the hub routes it.
pub trait Downstream: Send + Sync + 'static {
    /// A request from the server to the client (elicitation, sampling,
    /// roots). The hub answers it through the client whose call caused it,
    /// or refuses it when no such client can be found.
    fn server_request(
        &self,
        source: &str,
        request: ServerRequest,
    ) -> BoxFuture<'_, Result<ClientResult, ErrorData>>;
    fn progress(&self, source: &str, params: ProgressNotificationParam);
    fn log(&self, source: &str, params: LoggingMessageNotificationParam);
    fn resource_updated(&self, source: &str, params: ResourceUpdatedNotificationParam);
    /// One of the source's lists changed and its snapshot was refreshed.
    fn catalog_changed(&self, source: &str);
    /// The source's state changed (starting, ready, failed, ...).
    fn state_changed(&self, source: &str, state: &crate::SourceState);
    /// Whether a person has approved this exact command for `source`.
    /// Asked before every start; a refusal fails the source with the reason.
    fn command_allowed(
        &self,
        source: &str,
        command: &crate::command::CommandIdentity,
    ) -> Result<(), String>;
}

/// Resolving secret references in a source's env and headers, and keeping
/// the values out of what the source says about itself (stderr, errors).
pub trait Secrets: Send + Sync + 'static {
    /// The text with `secret:NAME` / `${secret:NAME}` replaced by values,
    /// which from then on are scrubbed from everything that leaves.
    fn resolve(&self, text: &str) -> Result<String, String>;
    /// The text with every known secret value redacted.
    fn scrub(&self, text: &str) -> String;
    /// Every string inside `value` (object keys included) redacted.
    fn scrub_json(&self, value: &mut serde_json::Value);
    /// Whether any secret is known (when none is, scrubbing is skipped).
    fn active(&self) -> bool;
}

pub(crate) struct UpstreamClient {
    pub(crate) source: Weak<Source>,
    pub(crate) name: Arc<str>,
    pub(crate) downstream: Arc<dyn Downstream>,
    pub(crate) secrets: Arc<dyn Secrets>,
}

/// airlock can relay every client feature, so it declares them all to the
/// upstream; whether the actual client supports one is checked per request.
fn client_capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
        "roots": {"listChanged": true}
    }))
    .unwrap_or_default()
}

impl Service<RoleClient> for UpstreamClient {
    async fn handle_request(
        &self,
        request: ServerRequest,
        _context: RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        if let ServerRequest::PingRequest(_) = request {
            return Ok(ClientResult::empty(()));
        }
        // What a server asks of the person may quote its credentials.
        let request = cleaned(self.secrets.as_ref(), request).map_err(|why| {
            ErrorData::invalid_request(format!("airlock: the request: {why}"), None)
        })?;
        self.downstream.server_request(&self.name, request).await
    }

    async fn handle_notification(
        &self,
        notification: ServerNotification,
        _context: NotificationContext<RoleClient>,
    ) -> Result<(), ErrorData> {
        let secrets = self.secrets.as_ref();
        // A notification that cannot be scrubbed is dropped, never passed on raw.
        match notification {
            ServerNotification::ProgressNotification(n) => {
                if let Ok(params) = cleaned(secrets, n.params) {
                    self.downstream.progress(&self.name, params)
                }
            }
            ServerNotification::LoggingMessageNotification(n) => {
                if let Ok(params) = cleaned(secrets, n.params) {
                    self.downstream.log(&self.name, params)
                }
            }
            ServerNotification::ResourceUpdatedNotification(n) => {
                if let Ok(params) = cleaned(secrets, n.params) {
                    self.downstream.resource_updated(&self.name, params)
                }
            }
            ServerNotification::ToolListChangedNotification(_)
            | ServerNotification::PromptListChangedNotification(_)
            | ServerNotification::ResourceListChangedNotification(_) => {
                if let Some(source) = self.source.upgrade() {
                    tokio::spawn(async move { source.refresh_after_change().await });
                }
            }
            // Cancellation of our own requests and anything else the
            // server announces needs no action from the hub.
            _ => {}
        }
        Ok(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            client_capabilities(),
            Implementation::new("airlock", env!("CARGO_PKG_VERSION")),
        )
    }
}
