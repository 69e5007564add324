//! The sources' way back into the hub: requests for a client, progress,
//! logs, updates, catalog changes, whether a command may start, and status.

#![allow(deprecated)] // logging, sampling, roots: SEP-2577-deprecated, still relayed

use std::sync::Weak;

use airlock_common::now_ms;
use airlock_store::SourceStatus;
use airlock_upstream::{Cause, Downstream, Lane, SourceState};
use rmcp::ErrorData;
use rmcp::model::{
    ClientResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    ResourceUpdatedNotificationParam, ServerRequest,
};
use tokio::sync::oneshot;

use super::Hub;
use super::clients::{Route, RouteError};
use crate::catalog::UriRoute;
use crate::outbox::Note;
use crate::parked::{InputNeeded, client_supports};

/// Holds a weak reference so the sources (owned by the hub) do not keep it
/// alive.
pub(super) struct Link(pub(super) Weak<Hub>);

impl Downstream for Link {
    fn server_request(
        &self,
        source: &str,
        cause: Cause,
        request: ServerRequest,
    ) -> airlock_upstream::BoxFuture<'_, Result<ClientResult, ErrorData>> {
        let source = source.to_string();
        Box::pin(async move {
            let Some(hub) = self.0.upgrade() else {
                return Err(ErrorData::internal_error("airlock is shutting down", None));
            };
            let Some(index) = hub.sources.index_of(&source) else {
                return Err(ErrorData::internal_error("unknown source", None));
            };
            let refuse = |why: String| ErrorData::invalid_request(format!("airlock: {why}"), None);
            // The request was scrubbed on arrival (airlock-upstream).
            let timeout = hub.sources.call_timeout(index);
            let route = route(&hub, index, cause)
                .await
                .map_err(|e| refuse(e.to_string()))?;
            match route {
                Route::Park(tx) => {
                    let (reply, answer) = oneshot::channel();
                    tx.send(InputNeeded { request, reply })
                        .map_err(|_| refuse("the call has already ended".into()))?;
                    match tokio::time::timeout(timeout, answer).await {
                        Ok(Ok(result)) => result,
                        Ok(Err(_)) => {
                            Err(refuse("the call ended before the client answered".into()))
                        }
                        Err(_) => Err(refuse(format!(
                            "the client did not answer within {}s",
                            timeout.as_secs()
                        ))),
                    }
                }
                Route::Direct(peer, caps) => {
                    client_supports(caps.as_ref().as_ref(), &request).map_err(refuse)?;
                    match tokio::time::timeout(timeout, peer.send_request(request)).await {
                        Ok(Ok(result)) => Ok(result),
                        Ok(Err(rmcp::ServiceError::McpError(e))) => Err(e),
                        Ok(Err(e)) => Err(refuse(format!("relaying to the client failed: {e}"))),
                        Err(_) => Err(refuse(format!(
                            "the client did not answer within {}s",
                            timeout.as_secs()
                        ))),
                    }
                }
            }
        })
    }

    fn progress(&self, source: &str, lane: Lane, params: ProgressNotificationParam) {
        let Some(hub) = self.0.upgrade() else { return };
        let Some(index) = hub.sources.index_of(source) else {
            return;
        };
        // Progress for a call whose client did not ask for it is dropped.
        if let Some(tx) = hub.clients.progress_to(index, lane, &params.progress_token) {
            let _ = tx.send(params);
        }
    }

    fn log(&self, source: &str, lane: Lane, mut params: LoggingMessageNotificationParam) {
        let Some(hub) = self.0.upgrade() else { return };
        // Scrubbed on arrival, logger name and data keys included.
        let logger = params.logger.take().unwrap_or_default();
        params.logger = Some(if logger.is_empty() {
            source.to_string()
        } else {
            format!("{source}/{logger}")
        });
        let Some(index) = hub.sources.index_of(source) else {
            return;
        };
        hub.clients.post_from(index, lane, Note::Log(params));
    }

    /// To the owner of the connection it came on, or to the sessions
    /// subscribed to the URI (or to one it lies under); to nobody else. An
    /// update for a resource withheld from clients goes to nobody.
    fn resource_updated(&self, source: &str, lane: Lane, params: ResourceUpdatedNotificationParam) {
        let Some(hub) = self.0.upgrade() else { return };
        let Some(index) = hub.sources.index_of(source) else {
            return;
        };
        let view = hub.view();
        if matches!(view.catalog.resource(&params.uri), UriRoute::Source(_))
            && !view.resource_visible(&params.uri, false)
        {
            tracing::debug!(
                source,
                "dropped an update of a resource withheld from clients"
            );
            return;
        }
        if let Lane::Session(_) = lane {
            return hub
                .clients
                .post_from(index, lane, Note::ResourceUpdated(params));
        }
        let holders = hub.sources.get(index).subscribers(&params.uri);
        if holders.is_empty() {
            tracing::debug!(
                source,
                "dropped an update of a resource no client subscribed to"
            );
            return;
        }
        hub.clients.post_to(&holders, Note::ResourceUpdated(params));
    }

    fn catalog_changed(&self, source: &str) {
        let Some(hub) = self.0.upgrade() else { return };
        hub.sources.rebuild_catalog(source);
        hub.clients.post_all(Note::ListsChanged);
    }

    fn command_allowed(
        &self,
        source: &str,
        command: &airlock_upstream::command::CommandIdentity,
    ) -> Result<(), String> {
        let Some(hub) = self.0.upgrade() else {
            return Err("airlock is shutting down".into());
        };
        if let Some(allowed) = hub
            .settings
            .allowed_programs
            .as_ref()
            .filter(|_| command.endpoint.is_none())
        {
            let name = command
                .program
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let path = command.program.display().to_string();
            if !allowed.iter().any(|a| *a == name || *a == path) {
                return Err(format!(
                    "`{path}` is not in hub.allowed_programs; add it there if it should run"
                ));
            }
        }
        // The built-in demo is airlock itself, chosen by running airlock
        // with no config; there is no other command to review.
        if hub.builtin {
            return Ok(());
        }
        // A program that cannot run says so first: reviewing it would not
        // help, and review does not approve it.
        command.runnable()?;
        match hub.store.approved_command(source) {
            Ok(Some(f)) if f == command.fingerprint() => Ok(()),
            Ok(Some(_)) => Err(format!(
                "what it runs or reaches changed since it was reviewed, {}: `{}`; run `airlock tools review`",
                crate::instructions::NEEDS_REVIEW,
                command.describe()
            )),
            Ok(None) => Err(format!(
                "what it runs or reaches has not been reviewed, {}: `{}`; run `airlock tools review`",
                crate::instructions::NEEDS_REVIEW,
                command.describe()
            )),
            Err(e) => Err(format!("cannot read approved commands: {e}")),
        }
    }

    fn state_changed(&self, source: &str, state: &SourceState) {
        let Some(hub) = self.0.upgrade() else { return };
        if !hub.serving {
            return;
        }
        let status = SourceStatus {
            source: source.to_string(),
            state: state.label().to_string(),
            detail: state.detail(),
            updated_at_ms: now_ms(),
        };
        if let Err(e) = hub.store.set_source_status(&status) {
            tracing::error!(%source, error = %e, "cannot record the source status");
        }
    }
}

/// Where a source's request goes. A request that came with a call still
/// being sent waits for it, briefly (1 s), then is refused.
async fn route(hub: &Hub, index: usize, cause: Cause) -> Result<Route, RouteError> {
    for _ in 0..100 {
        match hub.clients.route_for(index, &cause) {
            Err(RouteError::NotYetSent) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            other => return other,
        }
    }
    Err(RouteError::NotACall)
}
