//! The MCP server one client sees: one `Session` per client connection (a
//! stdio client, or a Streamable HTTP session), all sharing one [`Hub`].

#![allow(deprecated)] // logging and subscriptions are SEP-2577-deprecated, still relayed

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_common::now_ms;
use airlock_upstream::PendingCall;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientRequest, CompleteRequest,
    CompleteRequestParams, CompleteResult, GetPromptRequest, GetPromptRequestParams,
    GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequest, ReadResourceRequestParams,
    ReadResourceResponse, Reference, ServerCapabilities, ServerConfig, ServerResult,
    SetLevelRequest, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};
use tokio_util::sync::CancellationToken;

use crate::catalog::UriRoute;
use crate::hub::{Asks, Hub, InFlight, InFlightGuard, RunKey, SessionId};
use crate::input::{self, Asker, Exchange, Step};
use crate::pipeline::{self, ToolCall};
use crate::versions;

/// Whether this request comes from a client on 2026-07-28 or later.
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The digest of a request's canonical arguments.
fn arguments_digest(arguments: Option<rmcp::model::JsonObject>) -> String {
    use airlock_policy::contract;
    contract::digest_canonical(&contract::canonical(&serde_json::Value::Object(
        arguments.unwrap_or_default(),
    )))
}

pub struct Session {
    hub: Arc<Hub>,
    id: SessionId,
    /// The client sent `initialize`: it has a session (a 2026-07-28
    /// client's stateless requests never do).
    initialized: std::sync::atomic::AtomicBool,
    /// Cancelled when the client is gone (its stdin ended, it ended its
    /// HTTP session): every call of this session stops at once.
    gone: CancellationToken,
    /// The HTTP session id this session is known by, once seen.
    http_id: std::sync::OnceLock<String>,
}

impl Session {
    pub fn new(hub: Arc<Hub>) -> Session {
        let id = hub.clients.new_id();
        Session {
            hub,
            id,
            initialized: Default::default(),
            gone: CancellationToken::new(),
            http_id: Default::default(),
        }
    }

    /// What to cancel when the client is gone.
    pub fn gone(&self) -> CancellationToken {
        self.gone.clone()
    }

    /// The rounds of input a `prompts/get` or `resources/read` of `source`
    /// may take, for this request's client.
    fn exchange<'a>(
        &'a self,
        context: &'a RequestContext<RoleServer>,
        capabilities: Option<&'a ClientCapabilities>,
        source: usize,
        what: String,
        digest: String,
    ) -> Exchange<'a> {
        Exchange {
            seals: &self.hub.approvals.seals,
            principal: self.hub.approvals.principal(),
            what,
            digest,
            asker: Asker {
                peer: &context.peer,
                capabilities,
                cancelled: &context.ct,
                gone: &self.gone,
            },
            modern: is_modern(context),
            timeout: self.hub.sources.call_timeout(source),
            ttl: self.hub.approvals.timing.ttl,
        }
    }

    fn remember(&self, context: &RequestContext<RoleServer>) {
        self.hub.clients.register(self.id, context.peer.clone());
        // Over HTTP: known by its session id, so that its DELETE stops its
        // calls at once.
        let header = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        // Only a session that initialized has an HTTP session of its own
        // (a 2026-07-28 client's requests are each a session of their own,
        // whatever header they carry).
        let initialized = self.initialized.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(header) = header
            && initialized
            && self.http_id.get().is_none()
            && self.http_id.set(header.to_string()).is_ok()
        {
            self.hub
                .clients
                .known_as(header, self.id, self.gone.clone());
        }
    }

    /// Where a read, subscribe or listen of `uri` goes, or, when
    /// `completing`, a completion of the template written `uri`.
    fn resource_source(&self, uri: &str, completing: bool) -> Result<usize, ErrorData> {
        let view = self.hub.view();
        let route = match view.catalog.resource(uri) {
            // A resource withheld from the list is as unknown as one never
            // listed: its contents are not served either.
            UriRoute::Source(_) if !view.resource_visible(uri, completing) => UriRoute::Unknown,
            route => route,
        };
        Self::routed(uri, route)
    }

    /// Where an unsubscribe goes: wherever the URI routes, withheld or not,
    /// so that a subscription made before an item was withheld can end.
    fn unsubscribe_source(&self, uri: &str) -> Result<usize, ErrorData> {
        Self::routed(uri, self.hub.catalog().resource(uri))
    }

    fn routed(uri: &str, route: UriRoute) -> Result<usize, ErrorData> {
        match route {
            UriRoute::Source(i) => Ok(i),
            UriRoute::Unknown => Err(ErrorData::resource_not_found(
                format!("no source offers resource `{uri}`"),
                None,
            )),
            UriRoute::Ambiguous => Err(ErrorData::invalid_params(
                format!("more than one source offers resource `{uri}`; airlock will not guess"),
                None,
            )),
        }
    }

    fn prompt_route(&self, exposed: &str) -> Result<(usize, String), ErrorData> {
        // A prompt withheld from the list is as unknown as one never listed.
        let view = self.hub.view();
        let catalog = &view.catalog;
        match catalog
            .prompt(exposed)
            .filter(|_| view.prompt_visible(exposed))
        {
            Some(r) => Ok((r.source, r.upstream_name.clone())),
            None => {
                let visible: Vec<String> =
                    view.visible_prompts().into_iter().map(|p| p.name).collect();
                let near = airlock_common::closest(exposed, visible.iter().map(String::as_str));
                let mut msg = format!("unknown prompt `{exposed}`");
                if !near.is_empty() {
                    msg.push_str(&format!("; did you mean `{}`?", near.join("`, `")));
                }
                Err(ErrorData::invalid_params(msg, None))
            }
        }
    }

    /// Who this client is for "allow for this run": a client that
    /// initialized has a session, whatever version a request claims; only
    /// one without is keyed by the program it names.
    fn run_key(&self, context: &RequestContext<RoleServer>) -> Option<RunKey> {
        match self.initialized.load(std::sync::atomic::Ordering::Relaxed) {
            true => Some(RunKey::Session(self.id)),
            false => RunKey::client(context.client_info().as_ref()),
        }
    }

    /// Sends a prompt or read to source `source`, tracked as in flight
    /// from this client until the returned guard is dropped: a request the
    /// source makes while answering it reaches this client, and only it.
    async fn start_read(
        &self,
        context: &RequestContext<RoleServer>,
        source: usize,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<(InFlightGuard, PendingCall), ErrorData> {
        let lane = self.lane(context);
        let capabilities = context.client_capabilities();
        let in_flight = self.hub.clients.begin(InFlight {
            source,
            session: self.id,
            lane: lane.map(|(key, _)| key),
            peer: context.peer.clone(),
            capabilities: capabilities.clone(),
            asks: match is_modern(context) {
                true => Asks::Nobody,
                false => Asks::Client,
            },
            progress: None,
        });
        let pending = self
            .hub
            .sources
            .get(source)
            .start_request(lane, request, capabilities.as_ref(), timeout)
            .await
            .map_err(|e| self.upstream_error(source, e))?;
        in_flight.sent(&pending);
        Ok((in_flight, pending))
    }

    /// The key of this client's own connections to per-client sources:
    /// its session's id, or for a client without one the program it names.
    fn lane(&self, context: &RequestContext<RoleServer>) -> Option<(u64, bool)> {
        self.lane_of(self.run_key(context).as_ref())
    }

    /// With whether the key is a program's (its lane closes when idle)
    /// rather than a session's (its lane closes with the session).
    fn lane_of(&self, run: Option<&RunKey>) -> Option<(u64, bool)> {
        match run? {
            RunKey::Session(id) => Some((*id, false)),
            RunKey::Client(name, version) => self
                .hub
                .clients
                .lane_of_program(name, version)
                .map(|key| (key, true)),
            // A run's calls take the lane of the client that started it.
            RunKey::Code(_) => None,
        }
    }

    /// Relays a request that carries no policy weight to one source.
    async fn subscription(
        &self,
        source: usize,
        lane: Option<(u64, bool)>,
        uri: &str,
        on: bool,
    ) -> Result<(), ErrorData> {
        let timeout = self.hub.sources.call_timeout(source);
        self.hub
            .sources
            .get(source)
            .subscribe(self.id, lane, uri, on, timeout)
            .await
            .map_err(|e| self.upstream_error(source, e))
    }

    async fn relay(
        &self,
        source: usize,
        lane: Option<(u64, bool)>,
        request: ClientRequest,
    ) -> Result<ServerResult, ErrorData> {
        let timeout = self.hub.sources.call_timeout(source);
        self.hub
            .sources
            .get(source)
            .request(lane, request, timeout)
            .await
            .map_err(|e| self.upstream_error(source, e))
    }

    /// The source's own error (scrubbed on arrival; for a source whose
    /// output is quoted, labelled as the source's words), or ours, which
    /// may quote what the transport saw, scrubbed here.
    fn upstream_error(&self, source: usize, e: airlock_upstream::UpstreamError) -> ErrorData {
        match e {
            airlock_upstream::UpstreamError::Mcp { error, .. } => {
                let source = self.hub.sources.get(source);
                match source.config.quote_output {
                    true => crate::quote::source_error(source.name(), error),
                    false => error,
                }
            }
            other => ErrorData::internal_error(
                format!(
                    "airlock: {}",
                    airlock_upstream::Secrets::scrub(self.hub.secrets.as_ref(), &other.to_string())
                ),
                None,
            ),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.gone.cancel();
        self.hub.forget_session(self.id);
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_logging()
            .enable_completions()
            .build();
        let config = ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("airlock", env!("CARGO_PKG_VERSION")));
        match crate::instructions::for_client(&self.hub) {
            Some(text) => config.with_instructions(text),
            None => config,
        }
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        self.initialized
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // Sources come up in the background; a moment for the quick ones,
        // so the first answer is complete where it can be, never a wait
        // for a source that hangs. Registered after it: the lists this
        // answer reflects are not announced to it as changes.
        self.hub.first_contact().await;
        self.remember(&context);
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.hub.first_contact().await;
        self.remember(&context);
        Ok(versions::listed(
            ListToolsResult::with_all_items(crate::code::listed(
                self.hub.settings().code_mode,
                self.hub.view().visible_tools(),
            )),
            is_modern(&context),
        ))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.hub.first_contact().await;
        self.remember(&context);
        let modern = is_modern(&context);
        let run = self.run_key(&context);
        let call = ToolCall {
            id: self.hub.clients.new_id(),
            progress: context.meta.get_progress_token(),
            capabilities: context.client_capabilities(),
            modern,
            lane: self.lane_of(run.as_ref()),
            run,
            params,
            session: self.id,
            peer: context.peer.clone(),
            cancelled: context.ct.clone(),
            gone: self.gone.clone(),
            started: Instant::now(),
            started_at_ms: now_ms(),
            code: None,
        };
        if crate::code::is_meta(&self.hub, &call.params.name) {
            return crate::code::call(&self.hub, call).await;
        }
        if self.hub.settings().code_mode == airlock_config::CodeMode::Only {
            return Err(ErrorData::invalid_params(
                format!(
                    "`{}` is not offered directly: this hub runs in code mode only; call it from run_code (search_tools finds it)",
                    call.params.name
                ),
                None,
            ));
        }
        pipeline::run(&self.hub, call).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.hub.first_contact().await;
        Ok(versions::listed(
            ListPromptsResult::with_all_items(self.hub.view().visible_prompts()),
            is_modern(&context),
        ))
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.hub.first_contact().await;
        let exposed = request.name.clone();
        let (source, upstream) = self.prompt_route(&exposed)?;
        request.name = upstream;
        request.meta = None;
        let digest = arguments_digest(request.arguments.clone());
        let state = request.request_state.take();
        let answers = request.input_responses.take();
        let caps = context.client_capabilities();
        let ex = self.exchange(
            &context,
            caps.as_ref(),
            source,
            format!("prompt {exposed}"),
            digest,
        );
        let context = &context;
        let step = input::exchange(ex, state, answers, |state, answers, timeout| {
            let mut r = request.clone();
            (r.request_state, r.input_responses) = (state, answers);
            let r = ClientRequest::GetPromptRequest(GetPromptRequest::new(r));
            Box::pin(async move {
                let (_in_flight, pending) = self.start_read(context, source, r, timeout).await?;
                match pending.finish_prompt().await {
                    Ok(GetPromptResponse::InputRequired(asked)) => Ok(Step::Asked(asked)),
                    Ok(done) => Ok(Step::Done(done)),
                    Err(e) => Err(self.upstream_error(source, e)),
                }
            })
        })
        .await?;
        Ok(match step {
            Step::Done(r) => versions::prompt(r),
            Step::Asked(asked) => GetPromptResponse::InputRequired(asked),
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.hub.first_contact().await;
        Ok(versions::listed(
            ListResourcesResult::with_all_items(self.hub.view().visible_resources()),
            is_modern(&context),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.hub.first_contact().await;
        Ok(versions::listed(
            ListResourceTemplatesResult::with_all_items(self.hub.view().visible_templates()),
            is_modern(&context),
        ))
    }

    async fn read_resource(
        &self,
        mut request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.hub.first_contact().await;
        let source = self.resource_source(&request.uri, false)?;
        request.meta = None;
        let state = request.request_state.take();
        let answers = request.input_responses.take();
        // A read that took input is not to be cached.
        let retried = state.is_some() || answers.is_some();
        let caps = context.client_capabilities();
        let what = format!("resource {}", request.uri);
        let ex = self.exchange(&context, caps.as_ref(), source, what, String::new());
        let context = &context;
        let step = input::exchange(ex, state, answers, |state, answers, timeout| {
            let mut r = request.clone();
            (r.request_state, r.input_responses) = (state, answers);
            let r = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(r));
            Box::pin(async move {
                let (_in_flight, pending) = self.start_read(context, source, r, timeout).await?;
                match pending.finish_read().await {
                    Ok(ReadResourceResponse::InputRequired(asked)) => Ok(Step::Asked(asked)),
                    Ok(done) => Ok(Step::Done(done)),
                    Err(e) => Err(self.upstream_error(source, e)),
                }
            })
        })
        .await?;
        let mut read = match step {
            Step::Done(r) => versions::resource(r, is_modern(context), retried),
            Step::Asked(asked) => return Ok(ReadResourceResponse::InputRequired(asked)),
        };
        // What a resource holds is the source's words, quoted like results.
        let upstream = self.hub.sources.get(source);
        if upstream.config.quote_output {
            crate::quote::resource(upstream.name(), &mut read);
        }
        Ok(read)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.remember(&context);
        let source = self.resource_source(&request.uri, false)?;
        self.subscription(source, self.lane(&context), &request.uri, true)
            .await
    }

    /// A 2026-07-28 client's stream takes the list changes it asks for and
    /// the resources it may read from a source that offers subscriptions;
    /// any other resource is left out of what is acknowledged.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        if let Some(uris) = accepted.resource_subscriptions.as_mut() {
            uris.retain(|uri| {
                self.resource_source(uri, false).is_ok_and(|source| {
                    let caps = &self.hub.sources.get(source).snapshot().capabilities;
                    caps.resources
                        .as_ref()
                        .is_some_and(|r| r.subscribe == Some(true))
                })
            });
        }
        Some(accepted)
    }

    /// The stream lives as a session of its own until the client ends it:
    /// its resources are subscribed to at their sources under that session,
    /// and released with it. A subscription its source refuses ends the
    /// stream with that error: the client was told the stream holds it, so
    /// the stream does not go on without it.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let id = self.hub.clients.new_id();
        self.hub.clients.register_stream(id, context.sink().clone());
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let subscribed = async {
            for uri in uris {
                let source = self.resource_source(&uri, false)?;
                let timeout = self.hub.sources.call_timeout(source);
                let upstream = self.hub.sources.get(source);
                // On the shared connection: a stream is no client session.
                upstream
                    .subscribe(id, None, &uri, true, timeout)
                    .await
                    .map_err(|e| {
                        ErrorData::internal_error(
                            format!("airlock: the subscription to `{uri}` was not made, so this stream ends: {e}"),
                            None,
                        )
                    })?;
            }
            Ok(())
        };
        let ended = match subscribed.await {
            Ok(()) => {
                context.cancelled().await;
                Ok(())
            }
            Err(e) => Err(e),
        };
        self.hub.forget_session(id);
        ended
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let source = self.unsubscribe_source(&request.uri)?;
        self.subscription(source, self.lane(&context), &request.uri, false)
            .await
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.hub.first_contact().await;
        let source = match &mut request.r#ref {
            Reference::Prompt(p) => {
                let (source, upstream) = self.prompt_route(&p.name)?;
                p.name = upstream;
                source
            }
            Reference::Resource(r) => self.resource_source(&r.uri, true)?,
            _ => {
                return Err(ErrorData::invalid_params(
                    "airlock: unsupported completion reference",
                    None,
                ));
            }
        };
        if self
            .hub
            .sources
            .get(source)
            .snapshot()
            .capabilities
            .completions
            .is_none()
        {
            return Ok(CompleteResult::default());
        }
        request.meta = None;
        match self
            .relay(
                source,
                self.lane(&context),
                ClientRequest::CompleteRequest(CompleteRequest::new(request)),
            )
            .await?
        {
            ServerResult::CompleteResult(r) => Ok(versions::completion(r)),
            _ => Err(ErrorData::internal_error(
                "airlock: the source answered completion/complete with the wrong result type",
                None,
            )),
        }
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.remember(&context);
        // The level applies to every source that logs; one that fails to
        // take it does not stop the others.
        for (i, source) in self.hub.sources().iter().enumerate() {
            if source.snapshot().capabilities.logging.is_some() {
                let req = ClientRequest::SetLevelRequest(SetLevelRequest::new(request.clone()));
                if let Err(e) = self.relay(i, self.lane(&context), req).await {
                    tracing::warn!(source = source.name(), error = %e.message, "setting the log level failed");
                }
            }
        }
        Ok(())
    }
}
