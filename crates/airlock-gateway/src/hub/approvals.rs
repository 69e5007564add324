//! The approvals part of the hub: who approvals belong to and how long they
//! last, the wake-ups of calls waiting for a person, "allow for this run"
//! grants, the human channels attached by what runs the hub, calls parked
//! for a 2026-07-28 client's input, and the seal on approval forms.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use airlock_config::HubSettings;
use tokio::sync::Notify;

use super::clients::SessionId;
use crate::channels::HumanChannels;
use crate::parked::ParkedCalls;
use crate::seal::Sealer;

/// How long approvals wait and are kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// How long a person has to decide.
    pub ttl: Duration,
    /// How long a call waits in its request for a decision.
    pub wait: Duration,
    /// How long decided rows keep their (scrubbed) arguments.
    pub retention: Duration,
}

pub struct Approvals {
    /// Who this hub acts for; approvals belong to this principal.
    principal: String,
    /// This hub among those sharing the data directory (`<pid>-<random>`):
    /// its approvals carry it, so no other hub closes them.
    instance: String,
    pub(crate) timing: Timing,
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    /// The approval page and the prompt channel, attached by what runs the
    /// hub; without them a call that asks waits for the CLI only.
    channels: OnceLock<Arc<dyn HumanChannels>>,
    pub(crate) run_grants: RunGrants,
    pub(crate) parked: ParkedCalls,
    /// Seals the `requestState` of approval forms for 2026-07-28 clients.
    pub(crate) seals: Sealer,
}

impl Approvals {
    pub(crate) fn new(principal: String, settings: &HubSettings) -> Approvals {
        Approvals {
            principal,
            instance: format!(
                "{}-{}",
                std::process::id(),
                airlock_common::random::hex::<4>()
            ),
            timing: Timing {
                ttl: settings.approval_ttl,
                wait: settings.approval_wait,
                retention: settings.approval_retention,
            },
            waiters: Mutex::new(HashMap::new()),
            channels: OnceLock::new(),
            run_grants: RunGrants::new(RUN_GRANT_TIME, RUN_GRANT_CALLS),
            parked: ParkedCalls::default(),
            seals: Sealer::new(),
        }
    }

    pub fn principal(&self) -> &str {
        &self.principal
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The wake-up for one pending approval.
    pub(crate) fn waiter(&self, id: &str) -> Arc<Notify> {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    pub(crate) fn forget_waiter(&self, id: &str) {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// A human channel recorded a decision on `id`: wake its call. Waking
    /// decides nothing; the call reads the ledger to learn what happened.
    pub fn wake(&self, id: &str) {
        if let Some(n) = self
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            n.notify_one();
        }
    }

    /// Wakes every waiting call; each reads the ledger to learn where its
    /// row stands.
    pub fn wake_all(&self) {
        for n in self
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            n.notify_one();
        }
    }

    /// Attaches the human channels beyond the CLI (once; later calls are
    /// ignored).
    pub fn attach_channels(&self, channels: Arc<dyn HumanChannels>) {
        let _ = self.channels.set(channels);
    }

    pub(crate) fn channels(&self) -> Option<&Arc<dyn HumanChannels>> {
        self.channels.get()
    }
}

/// "Allow for this run" lasts this long and this many calls, whichever
/// ends first.
const RUN_GRANT_TIME: Duration = Duration::from_secs(3600);
const RUN_GRANT_CALLS: u32 = 100;

/// Proof that a person's "allow for this run" covers one more call. Only
/// [`RunGrants::spend`] makes one.
pub(crate) struct GrantSpent(());

/// What "this run" is for a client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RunKey {
    /// A client with a session (stdio, or a legacy Streamable HTTP
    /// session): the run ends with the session.
    Session(SessionId),
    /// A 2026-07-28 client, which has no session (each HTTP request stands
    /// alone): the run is the client program as it names itself in the
    /// request's `clientInfo` (name, version), on this hub, bounded by the
    /// grant's time and calls. The name is the client's word, not proof:
    /// every holder of the user's token is the user.
    Client(String, String),
    /// A code-mode run: the grant covers the rest of the run, resumes
    /// included.
    Code(String),
}

impl RunKey {
    /// The run of a client without a session that declared `info`; none
    /// when it names no program (its "allow for this run" allows once).
    pub(crate) fn client(info: Option<&rmcp::model::Implementation>) -> Option<RunKey> {
        info.filter(|i| !i.name.is_empty())
            .map(|i| RunKey::Client(i.name.clone(), i.version.clone()))
    }
}

/// "Allow for this run": (run, exposed tool) → what is left of it.
pub(crate) struct RunGrants {
    time: Duration,
    calls: u32,
    grants: Mutex<HashMap<(RunKey, String), RunGrant>>,
}

struct RunGrant {
    until: Instant,
    remaining: u32,
    /// The contract the person saw; a changed tool asks again.
    digest: String,
}

impl RunGrants {
    pub(crate) fn new(time: Duration, calls: u32) -> RunGrants {
        RunGrants {
            time,
            calls,
            grants: Mutex::new(HashMap::new()),
        }
    }

    /// A person allowed `tool`, as defined by contract `digest`, for the
    /// rest of this run.
    pub(crate) fn grant(&self, run: &RunKey, tool: &str, digest: &str) {
        self.grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                (run.clone(), tool.to_string()),
                RunGrant {
                    until: Instant::now() + self.time,
                    remaining: self.calls,
                    digest: digest.to_string(),
                },
            );
    }

    /// Spends one call of a run grant, if this run has one left for the
    /// tool as it is now (contract `digest`). A grant for another contract
    /// is void: the tool changed since the person allowed it.
    pub(crate) fn spend(&self, run: &RunKey, tool: &str, digest: &str) -> Option<GrantSpent> {
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        let key = (run.clone(), tool.to_string());
        let g = grants.get_mut(&key)?;
        if g.until <= Instant::now() || g.remaining == 0 || g.digest != digest {
            grants.remove(&key);
            return None;
        }
        g.remaining -= 1;
        Some(GrantSpent(()))
    }

    /// The session ended: its grants end with it.
    pub(crate) fn forget_session(&self, session: SessionId) {
        self.grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(run, _), _| *run != RunKey::Session(session));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_grant_covers_its_session_tool_and_contract_only() {
        let g = RunGrants::new(Duration::from_secs(60), 10);
        g.grant(&RunKey::Session(1), "fs__write", "sha256:a");
        assert!(
            g.spend(&RunKey::Session(1), "fs__write", "sha256:a")
                .is_some()
        );
        assert!(
            g.spend(&RunKey::Session(2), "fs__write", "sha256:a")
                .is_none(),
            "another session"
        );
        assert!(
            g.spend(&RunKey::Session(1), "fs__read", "sha256:a")
                .is_none(),
            "another tool"
        );
        // The tool changed: the grant is void, also for the old contract.
        assert!(
            g.spend(&RunKey::Session(1), "fs__write", "sha256:b")
                .is_none()
        );
        assert!(
            g.spend(&RunKey::Session(1), "fs__write", "sha256:a")
                .is_none()
        );
    }

    #[test]
    fn a_run_grant_ends_after_its_calls() {
        let g = RunGrants::new(Duration::from_secs(60), 2);
        g.grant(&RunKey::Session(1), "t", "d");
        assert!(g.spend(&RunKey::Session(1), "t", "d").is_some());
        assert!(g.spend(&RunKey::Session(1), "t", "d").is_some());
        assert!(g.spend(&RunKey::Session(1), "t", "d").is_none());
    }

    #[test]
    fn a_run_grant_ends_with_its_time() {
        let g = RunGrants::new(Duration::from_millis(20), 100);
        g.grant(&RunKey::Session(1), "t", "d");
        assert!(g.spend(&RunKey::Session(1), "t", "d").is_some());
        std::thread::sleep(Duration::from_millis(30));
        assert!(g.spend(&RunKey::Session(1), "t", "d").is_none());
    }

    #[test]
    fn a_run_grant_ends_with_its_session() {
        let g = RunGrants::new(Duration::from_secs(60), 100);
        g.grant(&RunKey::Session(1), "t", "d");
        g.grant(&RunKey::Session(2), "t", "d");
        g.forget_session(1);
        assert!(g.spend(&RunKey::Session(1), "t", "d").is_none());
        assert!(g.spend(&RunKey::Session(2), "t", "d").is_some());
    }

    #[test]
    fn a_sessionless_clients_run_is_its_declared_name_and_outlives_requests() {
        use rmcp::model::Implementation;
        let named = |n: &str, v: &str| RunKey::client(Some(&Implementation::new(n, v))).unwrap();
        let g = RunGrants::new(Duration::from_secs(60), 100);
        g.grant(&named("agent", "1.0"), "t", "d");
        // Each 2026-07-28 HTTP request is a session of its own that ends
        // with the request; the run does not.
        g.forget_session(7);
        assert!(g.spend(&named("agent", "1.0"), "t", "d").is_some());
        assert!(g.spend(&named("other", "1.0"), "t", "d").is_none());
        assert!(g.spend(&named("agent@1.0", ""), "t", "d").is_none());
        assert!(g.spend(&RunKey::Session(7), "t", "d").is_none());
        assert!(RunKey::client(None).is_none(), "no name, no run");
        assert!(RunKey::client(Some(&Implementation::new("", "1"))).is_none());
    }
}
