//! The MCP client airlock runs toward each source.
//!
//! It implements rmcp's `Service<RoleClient>` directly rather than the typed
//! `ClientHandler`, so every server-to-client request is relayed whole,
//! whatever its kind, instead of being re-built field by field.

// Logging, sampling and roots are deprecated by SEP-2577 but still used by
// the servers and clients airlock sits between; relaying them is the point.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientResult, Implementation, ProtocolVersion,
    ServerNotification, ServerRequest,
};
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, RequestContext, RoleClient, Service,
};

use crate::clean::cleaned;
use crate::ports::{Cause, Downstream, Lane, Secrets};

/// The newest version the `initialize` handshake speaks.
pub(crate) const LEGACY: ProtocolVersion = ProtocolVersion::V_2025_11_25;

pub(crate) struct UpstreamClient {
    /// Called when the server says one of its lists changed.
    pub(crate) lists_changed: Arc<dyn Fn() + Send + Sync>,
    pub(crate) name: Arc<str>,
    pub(crate) downstream: Arc<dyn Downstream>,
    pub(crate) secrets: Arc<dyn Secrets>,
    /// Which connection of the source this is.
    pub(crate) lane: Lane,
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
        context: RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        if let ServerRequest::PingRequest(_) = request {
            return Ok(ClientResult::empty(()));
        }
        // What a server asks of the person may quote its credentials.
        let request = cleaned(self.secrets.as_ref(), request).map_err(|why| {
            ErrorData::invalid_request(format!("airlock: the request: {why}"), None)
        })?;
        // On Streamable HTTP, rmcp marks the stream a request came on:
        // the answer stream of one of airlock's requests, or none.
        let during = match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
            _ => None,
        };
        let cause = Cause {
            lane: self.lane,
            during,
        };
        self.downstream
            .server_request(&self.name, cause, request)
            .await
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
                    self.downstream.progress(&self.name, self.lane, params)
                }
            }
            ServerNotification::LoggingMessageNotification(n) => {
                if let Ok(params) = cleaned(secrets, n.params) {
                    self.downstream.log(&self.name, self.lane, params)
                }
            }
            ServerNotification::ResourceUpdatedNotification(n) => {
                if let Ok(params) = cleaned(secrets, n.params) {
                    self.downstream
                        .resource_updated(&self.name, self.lane, params)
                }
            }
            ServerNotification::ToolListChangedNotification(_)
            | ServerNotification::PromptListChangedNotification(_)
            | ServerNotification::ResourceListChangedNotification(_) => {
                (self.lists_changed)();
            }
            // Cancellation of our own requests and anything else the
            // server announces needs no action from the hub.
            _ => {}
        }
        Ok(())
    }

    fn get_info(&self) -> ClientConfig {
        // What `initialize` asks for: 2026-07-28 is reached by
        // `server/discover`, never by the legacy handshake.
        ClientConfig::new(
            client_capabilities(),
            Implementation::new("airlock", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(LEGACY)
    }
}
