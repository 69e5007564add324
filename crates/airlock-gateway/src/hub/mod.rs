//! The hub: it starts, wires and stops four parts, each owning its state
//! and locks:
//!
//! - [`Sources`]: the upstream connections and the merged catalog;
//! - [`Clients`]: connected sessions, calls in flight, and the routing of
//!   a source's traffic back to a client;
//! - [`PolicyView`]: the rules, the reviews, and the per-call [`View`];
//! - [`Approvals`]: waiting calls, run grants, human channels, parked
//!   calls and the seal.
//!
//! The sources reach back into the hub through [`link`].

mod approvals;
mod clients;
mod link;
mod policy_view;
mod sources;

use std::sync::{Arc, Weak};
use std::time::Duration;

use airlock_config::{Config, HubSettings};
use airlock_store::Store;
use airlock_upstream::{Downstream, Source};
use tokio_util::sync::CancellationToken;

pub use approvals::Approvals;
pub(crate) use approvals::{GrantSpent, RunKey};
pub(crate) use clients::{Asks, InFlight, InFlightGuard};
pub use clients::{Clients, RouteError, SessionId};
pub use policy_view::{ASK_NOTE, PolicyState, PolicyView, Reviewed, View};
pub use sources::Sources;

use crate::catalog::Catalog;
use crate::secrets::HubSecrets;

/// How long a client's first requests wait, at most, for sources on their
/// first attempt; the rest arrive with `list_changed`.
pub const FIRST_CONTACT: Duration = Duration::from_secs(5);

/// Within that, the wait ends early once the sources still starting look
/// stuck: when the hub has been up this long, and
const FIRST_CONTACT_AT_LEAST: Duration = Duration::from_secs(2);
/// this many times as long as the last source that got ready took.
const FIRST_CONTACT_SLOWER_THAN_THE_REST: u32 = 3;

pub struct Hub {
    pub(crate) sources: Sources,
    pub(crate) clients: Arc<Clients>,
    pub(crate) policy: PolicyView,
    pub(crate) approvals: Approvals,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) secrets: Arc<HubSecrets>,
    /// Code-mode runs going at once (`code_runs`).
    pub(crate) code_runs: Arc<tokio::sync::Semaphore>,
    settings: HubSettings,
    /// Run with no config file: the built-in demo, whose only source is
    /// airlock itself.
    builtin: bool,
    /// Whether the wait of a client's first requests is over (see
    /// [`Hub::first_contact`]).
    first_contact: tokio::sync::watch::Sender<bool>,
    /// A hub that serves clients records its sources' states; one started
    /// by `doctor` or `tools review` to look at them does not.
    serving: bool,
    shutdown: CancellationToken,
}

/// Ends the first-contact wait: once every source has had its first
/// attempt; or [`FIRST_CONTACT`] after the start; or once the sources still
/// starting have taken [`FIRST_CONTACT_SLOWER_THAN_THE_REST`] times as long
/// as the last one that got ready, and at least [`FIRST_CONTACT_AT_LEAST`]
/// (nine quick sources and one that hangs: the first answer comes after
/// two seconds, not five). A source that failed is no measure of how long
/// the rest take: only one that got ready moves the end.
async fn first_contact(
    sources: Vec<Arc<Source>>,
    start: tokio::time::Instant,
    over: tokio::sync::watch::Sender<bool>,
) {
    use futures::StreamExt;
    let deadline = start + FIRST_CONTACT;
    let mut pending: futures::stream::FuturesUnordered<_> = sources
        .into_iter()
        .map(|s| async move { s.settled().await })
        .collect();
    let mut until = deadline;
    // Each source that gets ready moves the end; the wait is
    // over when none is left or the end passes.
    while let Ok(Some(state)) = tokio::time::timeout_at(until, pending.next()).await {
        if !matches!(state, airlock_upstream::SourceState::Ready) {
            continue;
        }
        let patience =
            (start.elapsed() * FIRST_CONTACT_SLOWER_THAN_THE_REST).max(FIRST_CONTACT_AT_LEAST);
        until = deadline.min(start + patience);
    }
    over.send_replace(true);
}

/// The principal approvals belong to: `AIRLOCK_PRINCIPAL`, else the OS user.
pub fn principal() -> String {
    std::env::var("AIRLOCK_PRINCIPAL")
        .or_else(|_| std::env::var("USER"))
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "local".into())
}

impl Hub {
    /// Builds the hub that serves clients and starts every source in
    /// parallel. Returns at once; use [`Hub::settled`] to wait for the first
    /// attempt of each.
    pub fn start(config: Config, store: Arc<dyn Store>, secrets: Arc<HubSecrets>) -> Arc<Hub> {
        Hub::build(config, store, secrets, true)
    }

    /// A hub that only starts the sources to look at them (`doctor`,
    /// `tools review`): it records nothing of their state and touches no
    /// running hub's approvals.
    pub fn probe(config: Config, store: Arc<dyn Store>, secrets: Arc<HubSecrets>) -> Arc<Hub> {
        Hub::build(config, store, secrets, false)
    }

    fn build(
        config: Config,
        store: Arc<dyn Store>,
        secrets: Arc<HubSecrets>,
        serving: bool,
    ) -> Arc<Hub> {
        let shutdown = CancellationToken::new();
        let started = tokio::time::Instant::now();
        let hub = Arc::new_cyclic(|weak: &Weak<Hub>| {
            let link: Arc<dyn Downstream> = Arc::new(link::Link(weak.clone()));
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
            let timeouts = config
                .sources
                .iter()
                .map(|s| config.timeout_for(s))
                .collect();
            Hub {
                sources: Sources::new(sources, timeouts, store.clone()),
                clients: Arc::new(Clients::default()),
                policy: PolicyView::new(&config, store.clone()),
                approvals: Approvals::new(principal(), &config.hub),
                store,
                secrets,
                code_runs: Arc::new(tokio::sync::Semaphore::new(config.hub.code.runs as usize)),
                settings: config.hub,
                builtin: config.origin.is_none(),
                serving,
                first_contact: tokio::sync::watch::Sender::new(false),
                shutdown,
            }
        });
        for source in hub.sources.all() {
            tokio::spawn(source.clone().run());
        }
        tokio::spawn(first_contact(
            hub.sources.all().to_vec(),
            started,
            hub.first_contact.clone(),
        ));
        hub
    }

    /// Closes what hubs that stopped left in the shared ledger: their
    /// executing calls are marked failed (never re-run), their waiting ones
    /// expired. `running` are the instances of the hubs still running on
    /// this data directory (this one among them); their rows are left alone.
    pub fn recover_ledger(&self, running: &[String]) {
        match self.store.ledger_recover(running) {
            Ok((0, 0)) => {}
            Ok((failed, expired)) => tracing::warn!(
                failed,
                expired,
                "approvals left by a hub that stopped: executing calls marked failed (never re-run), pending ones expired"
            ),
            Err(e) => tracing::error!(error = %e, "cannot recover the approval ledger"),
        }
    }

    /// This hub among the others on its data directory.
    pub fn instance(&self) -> &str {
        self.approvals.instance()
    }

    /// Every source, in config order.
    pub fn sources(&self) -> &[Arc<Source>] {
        self.sources.all()
    }

    /// The `[hub]` settings it started with.
    pub fn settings(&self) -> &HubSettings {
        &self.settings
    }

    pub fn principal(&self) -> &str {
        self.approvals.principal()
    }

    pub fn secrets(&self) -> &Arc<HubSecrets> {
        &self.secrets
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Cancelled when the hub stops; faces and channels stop with it.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.sources.catalog()
    }

    /// One consistent view of the catalog, rules and reviews as of now.
    pub fn view(&self) -> View {
        self.policy.view(self.sources.catalog())
    }

    /// Attaches the human channels beyond the CLI (once).
    pub fn attach_channels(&self, channels: Arc<dyn crate::channels::HumanChannels>) {
        self.approvals.attach_channels(channels);
    }

    /// A human channel recorded a decision on `id`: wake its call.
    pub fn wake_approval(&self, id: &str) {
        self.approvals.wake(id);
    }

    /// Every call waiting for a person re-reads its row: after a gap in
    /// the announcements of decisions (a team store's listener that lost
    /// its connection), so none misses one.
    pub fn wake_all_approvals(&self) {
        self.approvals.wake_all();
    }

    /// Replaces the rules, trust flags and connections with those of a
    /// freshly loaded config. Sources themselves change only on restart;
    /// the returned notes say what was not applied.
    pub fn reload_policy(&self, config: &Config) -> Vec<String> {
        let mut notes = Vec::new();
        let running: Vec<&str> = self.sources.all().iter().map(|s| s.name()).collect();
        let wanted: Vec<&str> = config.sources.iter().map(|s| s.name.as_str()).collect();
        if running != wanted {
            notes.push(format!(
                "the config lists sources {wanted:?} but {running:?} are running; source changes take effect on restart"
            ));
        }
        self.policy.reload(config);
        notes
    }

    /// Waits (at most `limit`) until every source is ready or has failed once.
    pub async fn settled(&self, limit: Duration) {
        let all = futures::future::join_all(self.sources.all().iter().map(|s| s.settled()));
        let _ = tokio::time::timeout(limit, all).await;
    }

    /// What a client's requests wait for while the hub is new: the first
    /// attempt of every source, so quick sources are there in the first
    /// answer, but a hanging one holds it up only briefly (see
    /// [`first_contact`]). After that, nothing waits again (a source still
    /// starting, or restarting later, fails its calls at once).
    pub async fn first_contact(&self) {
        let mut over = self.first_contact.subscribe();
        let _ = over.wait_for(|over| *over).await;
    }

    /// Stops every source (their processes end) and makes the store durable.
    pub async fn stop(&self) {
        // Calls whose client left end first (each tells its source it is
        // cancelled), then the sources stop.
        let calls_ended = async {
            while self.clients.calls_in_flight() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), calls_ended).await;
        let told = self
            .sources
            .all()
            .iter()
            .map(|s| s.cancellations_sent(Duration::from_secs(1)));
        futures::future::join_all(told).await;
        self.shutdown.cancel();
        let all = futures::future::join_all(self.sources.all().iter().map(|s| s.stopped()));
        let _ = tokio::time::timeout(Duration::from_secs(5), all).await;
        if let Err(e) = self.store.flush() {
            tracing::error!(error = %e, "flushing the store at shutdown failed");
        }
    }

    /// A client session ended: forget it, and the grants given in it.
    pub(crate) fn forget_session(&self, id: SessionId) {
        self.approvals.run_grants.forget_session(id);
        self.clients.forget(id);
        for source in self.sources.all() {
            source.session_ended(id);
        }
    }
}
