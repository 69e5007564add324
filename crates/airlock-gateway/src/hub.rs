//! The hub: sources, the merged catalog, connected clients, and the calls in
//! flight between them.

#![allow(deprecated)] // logging, sampling, roots: SEP-2577-deprecated, still relayed

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use airlock_common::now_ms;
use airlock_config::{Action, Config, Layer, RuleConfig};
use airlock_policy::Policy;
use airlock_store::ledger::StandingRule;
use airlock_store::{CatalogKind, SourceStatus, Store};
use airlock_upstream::{Downstream, Source, SourceState};
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProgressToken, ResourceUpdatedNotificationParam, ServerRequest,
};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::catalog::Catalog;
use crate::channels::HumanChannels;
use crate::outbox::{Note, Outbox};
use crate::pipeline::ToolCall;
use crate::pipeline::input::{InputNeeded, ParkedCalls, client_supports};
use crate::secrets::HubSecrets;

pub type SessionId = u64;

/// A connected client and the bounded queue its notifications wait in.
type Client = (Peer<RoleServer>, Arc<Outbox>);

/// A client call currently waiting on a source. Server-to-client requests
/// and progress from that source are routed back through it.
struct InFlight {
    source: usize,
    session: SessionId,
    peer: Peer<RoleServer>,
    capabilities: Option<ClientCapabilities>,
    /// Set for 2026-07-28 clients: requests for input go to the call's own
    /// task, which parks the call and asks the client (see pipeline::input).
    input: Option<mpsc::UnboundedSender<InputNeeded>>,
    /// Where this call's progress goes, if the client asked for it: an
    /// ordered queue the call's own task drains to the client.
    progress: Option<mpsc::UnboundedSender<ProgressNotificationParam>>,
    /// The token the upstream uses for this call's progress, once sent.
    upstream_token: Option<ProgressToken>,
}

pub struct Hub {
    pub config: Config,
    /// Who this hub acts for; approvals belong to this principal.
    pub principal: String,
    approval_waiters: Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
    /// The approval page and the prompt channel, attached by what runs the
    /// hub; without them a call that asks waits for the CLI only.
    channels: OnceLock<Arc<dyn HumanChannels>>,
    /// Seals the `requestState` of approval forms for 2026-07-28 clients.
    pub(crate) seals: crate::pipeline::seal::Sealer,
    /// "Allow for this run": (session, exposed tool) → what is left of it.
    run_grants: Mutex<HashMap<(SessionId, String), RunGrant>>,
    policy: RwLock<Arc<PolicyState>>,
    reviewed: Mutex<ReviewedCache>,
    standing_checked: Mutex<Option<Instant>>,
    pub sources: Vec<Arc<Source>>,
    pub store: Arc<dyn Store>,
    pub secrets: Arc<HubSecrets>,
    catalog: RwLock<Arc<Catalog>>,
    /// Each connected client, and the bounded queue its notifications
    /// wait in.
    sessions: Mutex<HashMap<SessionId, Client>>,
    inflight: Mutex<HashMap<u64, InFlight>>,
    pub(crate) parked: ParkedCalls,
    next_id: AtomicU64,
    pub shutdown: CancellationToken,
}

/// The principal approvals belong to: `AIRLOCK_PRINCIPAL`, else the OS user.
pub fn principal() -> String {
    std::env::var("AIRLOCK_PRINCIPAL")
        .or_else(|_| std::env::var("USER"))
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "local".into())
}

/// What decides calls, replaced whole on reload.
pub struct PolicyState {
    pub rules: Policy,
    /// What it was built from, to rebuild when people add standing rules.
    config: Config,
    /// The ids of the standing rules it holds (one revoked and another
    /// added is a change too).
    standing: Vec<i64>,
    /// Per source: (trusted, connection).
    sources: HashMap<String, (bool, String)>,
}

impl PolicyState {
    pub fn new(config: &Config) -> PolicyState {
        PolicyState::with_standing(config, &[])
    }

    /// The config's policy plus the rules people created with "always
    /// allow": each allows one tool on one connection, pinned to the
    /// contract it had, in the user layer.
    pub fn with_standing(config: &Config, standing: &[StandingRule]) -> PolicyState {
        let created: Vec<RuleConfig> = standing
            .iter()
            .map(|r| RuleConfig {
                layer: Layer::User,
                origin: format!("always-allow #{} by {}", r.id, r.created_by),
                action: Action::Allow,
                source: None,
                tool: Some(r.tool.clone()),
                connection: Some(r.connection.clone()),
                pin: Some(r.digest.clone()),
                when: Vec::new(),
                for_future: false,
            })
            .collect();
        PolicyState {
            config: config.clone(),
            standing: standing.iter().map(|r| r.id).collect(),
            rules: Policy::from_rules(config.all_rules().chain(created.iter())),
            sources: config
                .sources
                .iter()
                .map(|s| (s.name.clone(), (s.trusted, s.connection.clone())))
                .collect(),
        }
    }

    /// Whether the user marked `source` trusted (unknown sources are not).
    pub fn trusted(&self, source: &str) -> bool {
        self.sources.get(source).is_some_and(|(t, _)| *t)
    }

    pub fn connection<'a>(&'a self, source: &'a str) -> &'a str {
        self.sources.get(source).map_or(source, |(_, c)| c.as_str())
    }
}

/// The digests a person approved, reloaded when the CLI pins another.
#[derive(Default)]
struct ReviewedCache {
    checked: Option<Instant>,
    generation: i64,
    digests: Arc<HashMap<(String, String), String>>,
    /// The definitions those digests were pinned with: what clients see.
    definitions: Arc<HashMap<(String, String), serde_json::Value>>,
}

/// "Allow for this run" lasts this long and this many calls, whichever
/// ends first.
const RUN_GRANT_TIME: Duration = Duration::from_secs(3600);
const RUN_GRANT_CALLS: u32 = 100;

struct RunGrant {
    until: Instant,
    remaining: u32,
    /// The contract the person saw; a changed tool asks again.
    digest: String,
}

/// How often a call may look for new reviews.
const REVIEW_CHECK: Duration = Duration::from_millis(500);

/// Appended to a tool's description when calls to it ask, so a model knows
/// a decline is the user's choice and not a failure to retry.
pub const ASK_NOTE: &str = "[airlock] Calls to this tool pause for the user's approval and may be declined; a declined call is the user's decision, not an error to retry.";

/// `tool` with `note` appended to its description.
fn with_note(mut tool: rmcp::model::Tool, note: &str) -> rmcp::model::Tool {
    let description = tool.description.take().unwrap_or_default();
    tool.description = Some(if description.is_empty() {
        note.to_string().into()
    } else {
        format!("{description}\n\n{note}").into()
    });
    tool
}

/// The sources' way back into the hub. Holds a weak reference so the
/// sources (owned by the hub) do not keep it alive.
struct Link(Weak<Hub>);

impl Hub {
    /// Builds the hub and starts every source in parallel. Returns at once;
    /// use [`Hub::settled`] to wait for the first attempt of each.
    pub fn start(config: Config, store: Arc<dyn Store>, secrets: Arc<HubSecrets>) -> Arc<Hub> {
        let shutdown = CancellationToken::new();
        let hub = Arc::new_cyclic(|weak: &Weak<Hub>| {
            let link: Arc<dyn Downstream> = Arc::new(Link(weak.clone()));
            let sources = config
                .sources
                .iter()
                .map(|s| {
                    Source::new(
                        s.clone(),
                        config.hub.connect_timeout,
                        config.hub.max_message_bytes,
                        link.clone(),
                        secrets.clone(),
                        shutdown.child_token(),
                    )
                })
                .collect();
            Hub {
                principal: principal(),
                approval_waiters: Mutex::new(HashMap::new()),
                channels: OnceLock::new(),
                seals: crate::pipeline::seal::Sealer::new(),
                run_grants: Mutex::new(HashMap::new()),
                policy: RwLock::new(Arc::new(PolicyState::new(&config))),
                reviewed: Mutex::new(ReviewedCache::default()),
                standing_checked: Mutex::new(None),
                config,
                sources,
                store,
                secrets,
                catalog: RwLock::new(Arc::new(Catalog::default())),
                sessions: Mutex::new(HashMap::new()),
                inflight: Mutex::new(HashMap::new()),
                parked: ParkedCalls::default(),
                next_id: AtomicU64::new(1),
                shutdown,
            }
        });
        match hub.store.ledger_recover() {
            Ok((0, 0)) => {}
            Ok((failed, expired)) => tracing::warn!(
                failed,
                expired,
                "approvals left from a previous run: executing calls marked failed (never re-run), pending ones expired"
            ),
            Err(e) => tracing::error!(error = %e, "cannot recover the approval ledger"),
        }
        for source in &hub.sources {
            tokio::spawn(source.clone().run());
        }
        hub
    }

    /// A person allowed `tool`, as defined by contract `digest`, for the
    /// rest of this client session.
    pub(crate) fn grant_run(&self, session: SessionId, tool: &str, digest: &str) {
        self.run_grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                (session, tool.to_string()),
                RunGrant {
                    until: Instant::now() + RUN_GRANT_TIME,
                    remaining: RUN_GRANT_CALLS,
                    digest: digest.to_string(),
                },
            );
    }

    /// Spends one call of a run grant, if this session has one left for
    /// the tool as it is now (contract `digest`). A grant for another
    /// contract is void: the tool changed since the person allowed it.
    pub(crate) fn use_run_grant(&self, session: SessionId, tool: &str, digest: &str) -> bool {
        let mut grants = self.run_grants.lock().unwrap_or_else(|p| p.into_inner());
        let key = (session, tool.to_string());
        let Some(g) = grants.get_mut(&key) else {
            return false;
        };
        if g.until <= Instant::now() || g.remaining == 0 || g.digest != digest {
            grants.remove(&key);
            return false;
        }
        g.remaining -= 1;
        true
    }

    /// The wake-up for one pending approval.
    pub(crate) fn approval_waiter(&self, id: &str) -> Arc<tokio::sync::Notify> {
        self.approval_waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    pub(crate) fn forget_approval_waiter(&self, id: &str) {
        self.approval_waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Attaches the human channels beyond the CLI (once; later calls are
    /// ignored).
    pub fn attach_channels(&self, channels: Arc<dyn HumanChannels>) {
        let _ = self.channels.set(channels);
    }

    pub(crate) fn channels(&self) -> Option<&Arc<dyn HumanChannels>> {
        self.channels.get()
    }

    /// A human channel recorded a decision on `id`: wake its call. Waking
    /// decides nothing; the call reads the ledger to learn what happened.
    pub fn wake_approval(&self, id: &str) {
        if let Some(n) = self
            .approval_waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            n.notify_one();
        }
    }

    /// Waits (at most `limit`) until every source is ready or has failed once.
    pub async fn settled(&self, limit: Duration) {
        let all = futures::future::join_all(self.sources.iter().map(|s| s.settled()));
        let _ = tokio::time::timeout(limit, all).await;
    }

    /// Stops every source (their processes end) and makes the store durable.
    pub async fn stop(&self) {
        self.shutdown.cancel();
        let all = futures::future::join_all(self.sources.iter().map(|s| s.stopped()));
        let _ = tokio::time::timeout(Duration::from_secs(5), all).await;
        if let Err(e) = self.store.flush() {
            tracing::error!(error = %e, "flushing the store at shutdown failed");
        }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The rules and per-source trust in force now. Looks for new "always
    /// allow" rules at most every REVIEW_CHECK.
    pub fn policy(&self) -> Arc<PolicyState> {
        let current = self
            .policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let due = {
            let mut checked = self
                .standing_checked
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let due = checked.is_none_or(|t| t.elapsed() >= REVIEW_CHECK);
            if due {
                *checked = Some(Instant::now());
            }
            due
        };
        if !due {
            return current;
        }
        match self.store.standing_rules() {
            Ok(rules)
                if !rules
                    .iter()
                    .map(|r| r.id)
                    .eq(current.standing.iter().copied()) =>
            {
                let next = Arc::new(PolicyState::with_standing(&current.config, &rules));
                *self.policy.write().unwrap_or_else(|p| p.into_inner()) = next.clone();
                next
            }
            Ok(_) => current,
            Err(e) => {
                tracing::error!(error = %e, "cannot read standing rules");
                current
            }
        }
    }

    /// Replaces the rules, trust flags and connections with those of a
    /// freshly loaded config. Sources themselves change only on restart;
    /// the returned notes say what was not applied.
    pub fn reload_policy(&self, config: &Config) -> Vec<String> {
        let mut notes = Vec::new();
        let running: Vec<&str> = self.sources.iter().map(|s| s.name()).collect();
        let wanted: Vec<&str> = config.sources.iter().map(|s| s.name.as_str()).collect();
        if running != wanted {
            notes.push(format!(
                "the config lists sources {wanted:?} but {running:?} are running; source changes take effect on restart"
            ));
        }
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(PolicyState::new(config));
        notes
    }

    /// A person just changed what is reviewed or allowed (an "always
    /// allow" was claimed): the next decision reads the store again rather
    /// than a cache up to REVIEW_CHECK old.
    pub(crate) fn forget_cached_reviews(&self) {
        *self
            .standing_checked
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.reviewed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .checked = None;
    }

    /// Approved contract digests by (source, upstream tool). Checks the
    /// store for new reviews at most every REVIEW_CHECK; if the store
    /// cannot be read, keeps what it had (an unreadable review is no review).
    pub fn reviewed_contracts(&self) -> Arc<HashMap<(String, String), String>> {
        let mut cache = self.reviewed.lock().unwrap_or_else(|p| p.into_inner());
        let due = cache.checked.is_none_or(|t| t.elapsed() >= REVIEW_CHECK);
        if due {
            cache.checked = Some(Instant::now());
            match self.store.contracts_generation() {
                Ok(g) if g != cache.generation || cache.digests.is_empty() => {
                    match (
                        self.store.reviewed_contracts(),
                        self.store.reviewed_definitions(),
                    ) {
                        (Ok(d), Ok(defs)) => {
                            cache.digests = Arc::new(d);
                            cache.definitions = Arc::new(defs);
                            cache.generation = g;
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            tracing::error!(error = %e, "cannot read reviewed contracts")
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "cannot read reviewed contracts"),
            }
        }
        cache.digests.clone()
    }

    /// The definitions people pinned, by (source, upstream tool), as of
    /// the last check of the store.
    fn reviewed_definitions(&self) -> Arc<HashMap<(String, String), serde_json::Value>> {
        self.reviewed_contracts();
        self.reviewed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .definitions
            .clone()
    }

    /// The tools a client may see: denied ones removed, and a note on
    /// those whose calls ask. What the model reads is what a person
    /// reviewed: a tool that changed since its review is listed with its
    /// reviewed definition (its calls ask until the change is reviewed);
    /// a tool never reviewed is listed only if its text passes the
    /// poisoning lint, and withheld otherwise.
    pub fn visible_tools(&self) -> Vec<rmcp::model::Tool> {
        let catalog = self.catalog();
        let reviewed = self.reviewed_contracts();
        let definitions = self.reviewed_definitions();
        let mut out = Vec::with_capacity(catalog.tools.len());
        for tool in &catalog.tools {
            let (Some(route), Some(contract)) =
                (catalog.tool(&tool.name), catalog.contract(&tool.name))
            else {
                continue;
            };
            let d = crate::pipeline::decide::evaluate(
                self,
                &catalog,
                &tool.name,
                route.source,
                &route.upstream_name,
                None,
            );
            if d.action == Action::Deny {
                continue;
            }
            let source = self.sources[route.source].name();
            let key = (source.to_string(), route.upstream_name.clone());
            // A reviewed tool is shown as it was reviewed, whatever changed
            // since (its description, or fields outside the contract such
            // as `_meta` and `icons`); calls to a changed one ask.
            let shown = if reviewed.contains_key(&key) {
                match definitions
                    .get(&key)
                    .and_then(|d| serde_json::from_value::<rmcp::model::Tool>(d.clone()).ok())
                {
                    Some(mut t) => {
                        t.name = tool.name.clone();
                        t
                    }
                    None => continue,
                }
            } else {
                let findings = crate::review::lint_new(&catalog, &tool.name, &contract.definition);
                if !findings.is_empty() {
                    tracing::warn!(
                        tool = %tool.name,
                        findings = %findings.join("; "),
                        "not listing a tool nobody has reviewed whose text looks like tool poisoning; run `airlock tools review`"
                    );
                    continue;
                }
                tool.clone()
            };
            match d.action {
                Action::Ask => out.push(with_note(shown, ASK_NOTE)),
                _ => out.push(shown),
            }
        }
        out
    }

    /// Tools nobody has reviewed that clients do not see because their text
    /// looks like tool poisoning, with the lint's findings.
    pub fn withheld_for_review(&self) -> Vec<(String, Vec<String>)> {
        let catalog = self.catalog();
        let reviewed = self.reviewed_contracts();
        let mut out = Vec::new();
        for tool in &catalog.tools {
            let (Some(route), Some(contract)) =
                (catalog.tool(&tool.name), catalog.contract(&tool.name))
            else {
                continue;
            };
            let source = self.sources[route.source].name().to_string();
            if reviewed.contains_key(&(source, route.upstream_name.clone())) {
                continue;
            }
            let findings = crate::review::lint_new(&catalog, &tool.name, &contract.definition);
            if !findings.is_empty() {
                out.push((tool.name.to_string(), findings));
            }
        }
        out
    }

    pub fn call_timeout(&self, source: usize) -> Duration {
        self.config.timeout_for(&self.sources[source].config)
    }

    pub(crate) fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn register_session(&self, id: SessionId, peer: Peer<RoleServer>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.entry(id).or_insert_with(|| {
            let outbox = Outbox::new(peer.clone());
            (peer, outbox)
        });
    }

    pub(crate) fn forget_session(&self, id: SessionId) {
        self.run_grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(s, _), _| *s != id);
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// The outboxes of every live client.
    fn outboxes(&self) -> Vec<Arc<Outbox>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, (p, _)| !p.is_transport_closed());
        sessions.values().map(|(_, o)| o.clone()).collect()
    }

    /// Where a notification from source `index` goes: the client with a
    /// call in flight to it if there is exactly one, else every client.
    fn outboxes_for(&self, index: usize) -> Vec<Arc<Outbox>> {
        let session = {
            let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            let mut sessions = inflight
                .values()
                .filter(|c| c.source == index)
                .map(|c| c.session);
            match (sessions.next(), sessions.next()) {
                (Some(s), None) => Some(s),
                _ => None,
            }
        };
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        match session.and_then(|s| sessions.get(&s)) {
            Some((_, o)) => vec![o.clone()],
            None => {
                drop(sessions);
                self.outboxes()
            }
        }
    }

    /// Marks a call as in flight; the returned guard removes it when dropped.
    /// With `wants_progress`, the source's progress for this call arrives,
    /// in order, on the returned receiver.
    pub(crate) fn begin_call(
        self: &Arc<Self>,
        source: usize,
        call: &ToolCall,
        input: Option<mpsc::UnboundedSender<InputNeeded>>,
    ) -> (
        InFlightGuard,
        Option<mpsc::UnboundedReceiver<ProgressNotificationParam>>,
    ) {
        let id = self.new_id();
        let (progress, rx) = if call.progress.is_some() && input.is_none() {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id,
                InFlight {
                    source,
                    session: call.session,
                    peer: call.peer.clone(),
                    capabilities: call.capabilities.clone(),
                    input,
                    progress,
                    upstream_token: None,
                },
            );
        (
            InFlightGuard {
                hub: self.clone(),
                id,
            },
            rx,
        )
    }

    fn rebuild_catalog(&self, changed: &str) {
        let catalog = Arc::new(Catalog::build(&self.sources));
        for w in catalog.withheld.iter().filter(|w| w.source == changed) {
            tracing::warn!(source = %w.source, name = %w.name, reason = %w.reason, "not exposing an upstream item");
        }
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = catalog;
        if let Some(source) = self.sources.iter().find(|s| s.name() == changed) {
            self.persist_catalog(source);
        }
    }

    fn persist_catalog(&self, source: &Source) {
        fn entries<T: serde::Serialize>(
            items: &[T],
            key: impl Fn(&T) -> String,
        ) -> Vec<(String, serde_json::Value)> {
            items
                .iter()
                .map(|i| (key(i), serde_json::to_value(i).unwrap_or_default()))
                .collect()
        }
        let snap = source.snapshot();
        for (kind, items) in [
            (
                CatalogKind::Tool,
                entries(&snap.tools, |t| t.name.to_string()),
            ),
            (
                CatalogKind::Prompt,
                entries(&snap.prompts, |p| p.name.clone()),
            ),
            (
                CatalogKind::Resource,
                entries(&snap.resources, |r| r.uri.clone()),
            ),
            (
                CatalogKind::ResourceTemplate,
                entries(&snap.resource_templates, |r| r.uri_template.clone()),
            ),
        ] {
            if let Err(e) = self.store.replace_catalog(source.name(), kind, &items) {
                tracing::error!(source = source.name(), error = %e, "cannot save the catalog");
            }
        }
    }

    /// Where a request `source` makes of the client goes: the one client
    /// with a call in flight to it; with none, the only connected client.
    fn route_for(&self, source: usize) -> Result<Route, String> {
        let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let mut found: Option<&InFlight> = None;
        for call in inflight.values().filter(|c| c.source == source) {
            match found {
                Some(f) if f.session != call.session => {
                    return Err("several clients have calls in progress to this source, so airlock cannot tell which one the request is for".into());
                }
                _ => found = Some(call),
            }
        }
        if let Some(call) = found {
            return Ok(match &call.input {
                Some(tx) => Route::Park(tx.clone()),
                None => Route::Direct(call.peer.clone(), Box::new(call.capabilities.clone())),
            });
        }
        drop(inflight);
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let live: Vec<_> = sessions
            .values()
            .map(|(p, _)| p)
            .filter(|p| !p.is_transport_closed())
            .collect();
        match live.as_slice() {
            [peer] => {
                let caps = peer.peer_info().map(|i| i.capabilities.clone());
                Ok(Route::Direct((*peer).clone(), Box::new(caps)))
            }
            [] => Err("no client is connected to airlock".into()),
            _ => Err("no call to this source is in progress and several clients are connected, so airlock cannot tell which one the request is for".into()),
        }
    }

    fn source_index(&self, name: &str) -> Option<usize> {
        self.sources.iter().position(|s| s.name() == name)
    }
}

/// Removes an in-flight entry when the call ends, however it ends.
pub(crate) struct InFlightGuard {
    hub: Arc<Hub>,
    id: u64,
}

impl InFlightGuard {
    /// Links the upstream's progress token to this call.
    pub(crate) fn set_upstream_token(&self, token: ProgressToken) {
        if let Some(call) = self
            .hub
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&self.id)
        {
            call.upstream_token = Some(token);
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.hub
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// How a server→client request reaches its client.
enum Route {
    /// Send it to the client as a request (protocols before 2026-07-28).
    Direct(Peer<RoleServer>, Box<Option<ClientCapabilities>>),
    /// Hand it to the call's task, which asks the client with `input_required`.
    Park(mpsc::UnboundedSender<InputNeeded>),
}

impl Downstream for Link {
    fn server_request(
        &self,
        source: &str,
        request: ServerRequest,
    ) -> airlock_upstream::BoxFuture<'_, Result<ClientResult, ErrorData>> {
        let source = source.to_string();
        Box::pin(async move {
            let Some(hub) = self.0.upgrade() else {
                return Err(ErrorData::internal_error("airlock is shutting down", None));
            };
            let Some(index) = hub.source_index(&source) else {
                return Err(ErrorData::internal_error("unknown source", None));
            };
            let refuse = |why: String| ErrorData::invalid_request(format!("airlock: {why}"), None);
            // The request was scrubbed on arrival (airlock-upstream).
            let timeout = hub.call_timeout(index);
            match hub.route_for(index).map_err(refuse)? {
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

    fn progress(&self, source: &str, params: ProgressNotificationParam) {
        let Some(hub) = self.0.upgrade() else { return };
        let Some(index) = hub.source_index(source) else {
            return;
        };
        let inflight = hub.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let call = inflight.values().find(|c| {
            c.source == index && c.upstream_token.as_ref() == Some(&params.progress_token)
        });
        // Progress for a call whose client did not ask for it is dropped.
        if let Some(tx) = call.and_then(|c| c.progress.as_ref()) {
            let _ = tx.send(params);
        }
    }

    fn log(&self, source: &str, mut params: LoggingMessageNotificationParam) {
        let Some(hub) = self.0.upgrade() else { return };
        // Scrubbed on arrival, logger name and data keys included.
        let logger = params.logger.take().unwrap_or_default();
        params.logger = Some(if logger.is_empty() {
            source.to_string()
        } else {
            format!("{source}/{logger}")
        });
        let Some(index) = hub.source_index(source) else {
            return;
        };
        for outbox in hub.outboxes_for(index) {
            outbox.post(Note::Log(params.clone()));
        }
    }

    fn resource_updated(&self, _source: &str, params: ResourceUpdatedNotificationParam) {
        let Some(hub) = self.0.upgrade() else { return };
        for outbox in hub.outboxes() {
            outbox.post(Note::ResourceUpdated(params.clone()));
        }
    }

    fn catalog_changed(&self, source: &str) {
        let Some(hub) = self.0.upgrade() else { return };
        hub.rebuild_catalog(source);
        for outbox in hub.outboxes() {
            outbox.post(Note::ListsChanged);
        }
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
            .config
            .hub
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
        if hub.config.origin.is_none() {
            return Ok(());
        }
        match hub.store.approved_command(source) {
            Ok(Some(f)) if f == command.fingerprint() => Ok(()),
            Ok(Some(_)) => Err(format!(
                "what it runs or reaches changed since it was reviewed, so it does not start until a person approves it: `{}`; run `airlock tools review`",
                command.describe()
            )),
            Ok(None) => Err(format!(
                "what it runs or reaches has not been reviewed, so it does not start until a person approves it: `{}`; run `airlock tools review`",
                command.describe()
            )),
            Err(e) => Err(format!("cannot read approved commands: {e}")),
        }
    }

    fn state_changed(&self, source: &str, state: &SourceState) {
        let Some(hub) = self.0.upgrade() else { return };
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
