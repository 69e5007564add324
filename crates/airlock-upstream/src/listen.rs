//! What a 2026-07-28 source announces, heard on `subscriptions/listen`.
//!
//! A source on that protocol sends list changes and resource updates only
//! on a listen stream the client opened, for what the client asked for. So
//! for each such source airlock keeps one stream open while the connection
//! lives: its list changes (the source's capabilities say which lists can
//! change) and the resources some client subscribed to. When a client
//! subscribes or unsubscribes, the stream is opened again with the new set.
//! Each time a stream is open the lists are read again, so a change made
//! while no stream was open is not missed; a stream that ends while the
//! connection lives is opened again after a pause that doubles each time
//! (up to 30 s), a stream is opened at most every 250 ms however fast
//! clients change what they subscribe to, and a source that has no
//! `subscriptions/listen` at all is not asked again on this connection.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ServerCapabilities, ServerNotification, SubscriptionFilter};
use rmcp::service::{Peer, RoleClient};
use tokio::sync::watch;

use crate::clean::cleaned;
use crate::ports::{Downstream, Lane, Secrets};

/// Between a stream that ended and the next one, at first and at most.
const REOPEN_AFTER: Duration = Duration::from_millis(500);
const REOPEN_MAX: Duration = Duration::from_secs(30);
/// How long a source has to acknowledge a stream.
const OPEN_WITHIN: Duration = Duration::from_secs(10);
/// At least this long between two streams opened for changed
/// subscriptions: what clients change meanwhile is taken in at once, so
/// however fast they subscribe and unsubscribe, a source is asked to open
/// a stream (and listed again) at most four times a second.
const RESUBSCRIBE_GAP: Duration = Duration::from_millis(250);

/// The resources clients subscribed to on one source, each with the client
/// sessions that hold it: one session's unsubscribe ends only its own, and
/// a session that ends lets go of all of its.
#[derive(Default)]
pub(crate) struct Subscribed {
    uris: Mutex<BTreeMap<String, BTreeSet<u64>>>,
    changed: watch::Sender<u64>,
}

impl Subscribed {
    /// Session `session` subscribes to `uri` (`on`), or unsubscribes.
    /// Whether any session held `uri` before, and whether one does after.
    pub(crate) fn set(&self, session: u64, uri: &str, on: bool) -> (bool, bool) {
        let mut held = (false, false);
        self.change(|uris| {
            held.0 = uris.contains_key(uri);
            if on {
                uris.entry(uri.to_string()).or_default().insert(session);
            } else if let Some(holders) = uris.get_mut(uri) {
                holders.remove(&session);
                if holders.is_empty() {
                    uris.remove(uri);
                }
            }
            held.1 = uris.contains_key(uri);
        });
        held
    }

    /// Session `session` ended: its subscriptions go with it. The URIs
    /// nobody holds any more.
    pub(crate) fn forget(&self, session: u64) -> Vec<String> {
        let mut released = Vec::new();
        self.change(|uris| {
            uris.retain(|uri, holders| {
                holders.remove(&session);
                if holders.is_empty() {
                    released.push(uri.clone());
                }
                !holders.is_empty()
            })
        });
        released
    }

    /// The sessions an update of `uri` is for: those subscribed to it;
    /// failing that, those subscribed to a URI it lies under (`file:///d`
    /// holds `file:///d/a`: a source may announce what changed inside what
    /// was subscribed); failing that, nobody.
    pub(crate) fn holders(&self, uri: &str) -> Vec<u64> {
        let uris = self.uris.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(exact) = uris.get(uri) {
            return exact.iter().copied().collect();
        }
        let mut inside: BTreeSet<u64> = BTreeSet::new();
        for (held, sessions) in uris.iter() {
            if lies_under(uri, held) {
                inside.extend(sessions);
            }
        }
        inside.into_iter().collect()
    }

    fn change(&self, edit: impl FnOnce(&mut BTreeMap<String, BTreeSet<u64>>)) {
        let mut uris = self.uris.lock().unwrap_or_else(|p| p.into_inner());
        let before: Vec<String> = uris.keys().cloned().collect();
        edit(&mut uris);
        if !uris.keys().eq(before.iter()) {
            self.changed.send_modify(|g| *g += 1);
        }
    }

    /// Every URI some session holds.
    pub(crate) fn list(&self) -> Vec<String> {
        let uris = self.uris.lock().unwrap_or_else(|p| p.into_inner());
        uris.keys().cloned().collect()
    }
}

/// What one source's stream is for, and where what it hears goes.
pub(crate) struct Listener {
    pub(crate) name: Arc<str>,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) capabilities: ServerCapabilities,
    pub(crate) subscribed: Arc<Subscribed>,
    pub(crate) downstream: Arc<dyn Downstream>,
    pub(crate) secrets: Arc<dyn Secrets>,
    /// Called when one of the source's lists changed.
    pub(crate) lists_changed: Arc<dyn Fn() + Send + Sync>,
}

impl Listener {
    fn filter(&self) -> Option<SubscriptionFilter> {
        let caps = &self.capabilities;
        let mut filter = SubscriptionFilter::builder();
        let mut any = false;
        if caps.tools.as_ref().and_then(|t| t.list_changed) == Some(true) {
            filter = filter.tools_list_changed();
            any = true;
        }
        if caps.prompts.as_ref().and_then(|p| p.list_changed) == Some(true) {
            filter = filter.prompts_list_changed();
            any = true;
        }
        if let Some(resources) = &caps.resources {
            if resources.list_changed == Some(true) {
                filter = filter.resources_list_changed();
                any = true;
            }
            let uris = self.subscribed.list();
            if resources.subscribe == Some(true) && !uris.is_empty() {
                filter = filter.resource_subscriptions(uris);
                any = true;
            }
        }
        any.then(|| filter.build())
    }

    /// Keeps a stream open until the connection ends (run it beside the
    /// connection; it never returns on its own).
    pub(crate) async fn run(self) {
        let mut changed = self.subscribed.changed.subscribe();
        let mut pause = REOPEN_AFTER;
        let mut opened_at: Option<tokio::time::Instant> = None;
        loop {
            if let Some(at) = opened_at {
                tokio::time::sleep_until(at + RESUBSCRIBE_GAP).await;
            }
            changed.mark_unchanged();
            let Some(filter) = self.filter() else {
                // Nothing to hear until a client subscribes to something.
                if changed.changed().await.is_err() {
                    return std::future::pending().await;
                }
                continue;
            };
            opened_at = Some(tokio::time::Instant::now());
            let opened = tokio::select! {
                r = tokio::time::timeout(OPEN_WITHIN, self.peer.listen(filter)) => r,
                _ = changed.changed() => continue,
            };
            match opened {
                Ok(Ok(mut stream)) => {
                    // What changed while no stream was open is read now.
                    (self.lists_changed)();
                    pause = REOPEN_AFTER;
                    let resubscribe = loop {
                        tokio::select! {
                            next = stream.next() => match next {
                                Ok(Some(n)) => self.heard(n),
                                Ok(None) => break false,
                                Err(e) => {
                                    tracing::warn!(source = %self.name, error = %e, "its notification stream failed");
                                    break false;
                                }
                            },
                            // The subscribed set changed: the stream is opened
                            // again with it at once (dropping this one cancels it).
                            _ = changed.changed() => break true,
                        }
                    };
                    if resubscribe {
                        continue;
                    }
                }
                Ok(Err(rmcp::ServiceError::McpError(e)))
                    if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND =>
                {
                    tracing::warn!(source = %self.name, "it has no subscriptions/listen; its list changes are not heard");
                    return std::future::pending().await;
                }
                Ok(Err(e)) => {
                    tracing::warn!(source = %self.name, error = %e, "it refused subscriptions/listen");
                }
                Err(_) => {
                    tracing::warn!(source = %self.name, "it did not acknowledge subscriptions/listen within {}s", OPEN_WITHIN.as_secs());
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(REOPEN_MAX);
        }
    }

    fn heard(&self, notification: ServerNotification) {
        let secrets = self.secrets.as_ref();
        match notification {
            ServerNotification::ToolListChangedNotification(_)
            | ServerNotification::PromptListChangedNotification(_)
            | ServerNotification::ResourceListChangedNotification(_) => (self.lists_changed)(),
            ServerNotification::ResourceUpdatedNotification(n) => {
                // Dropped if it cannot be scrubbed, never passed on raw.
                if let Ok(params) = cleaned(secrets, n.params) {
                    self.downstream
                        .resource_updated(&self.name, Lane::Shared, params)
                }
            }
            _ => {}
        }
    }
}

/// Whether `uri` names something inside `held`: `held` followed by a path,
/// query or fragment boundary (`file:///d` holds `file:///d/a`, not
/// `file:///dd`).
fn lies_under(uri: &str, held: &str) -> bool {
    match uri.strip_prefix(held) {
        Some(rest) if held.ends_with('/') => !rest.is_empty(),
        Some(rest) => rest.starts_with(['/', '?', '#']),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_goes_to_the_holders_of_its_uri_or_of_one_it_lies_under() {
        let subscribed = Subscribed::default();
        subscribed.set(1, "file:///d", true);
        subscribed.set(2, "file:///d/a", true);
        subscribed.set(3, "file:///dd", true);
        subscribed.set(4, "note://x/", true);
        assert_eq!(
            subscribed.holders("file:///d/a"),
            [2],
            "exact holders first"
        );
        assert_eq!(subscribed.holders("file:///d/b"), [1]);
        assert_eq!(subscribed.holders("file:///d?v=2"), [1]);
        assert_eq!(subscribed.holders("file:///ddd"), Vec::<u64>::new());
        assert_eq!(subscribed.holders("note://x/y"), [4]);
        assert_eq!(
            subscribed.holders("other://z"),
            Vec::<u64>::new(),
            "an update nobody subscribed to goes to nobody"
        );
        subscribed.set(1, "file:///d", false);
        assert_eq!(subscribed.holders("file:///d/b"), Vec::<u64>::new());
    }
}
