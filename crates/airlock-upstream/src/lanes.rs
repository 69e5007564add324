//! Connections a client session has to a source of its own.
//!
//! A stdio server has one stdin: when several clients' calls share its
//! process, a request it makes of "the client" (an elicitation, a sampling
//! request, a roots query) does not say whose call it belongs to. A source
//! with `sessions = "per-client"` gives each client session a connection of
//! its own, opened on the session's first request and closed when the
//! session ends, so whatever arrives on it is that session's. It is the
//! same as each client starting the server itself, as it would without
//! airlock. A client without a session (2026-07-28), keyed by the program
//! it names, never says it has gone: its lane closes after [`IDLE`] with no
//! request and no call on it. The shared connection stays, for the catalog
//! and for sessions past [`MAX_LANES`].
//!
//! A lane is used only while it offers what the shared connection listed
//! (what a person reviewed): checked when it opens, and again after the
//! source's lists change on either connection.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::service::{Peer, RoleClient};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::connect::Connection;
use crate::snapshot::Snapshot;

/// Client sessions per source that get a connection of their own; later
/// ones share the common connection (where routing refuses what it cannot
/// tell apart), so many sessions cannot start unbounded processes.
pub(crate) const MAX_LANES: usize = 32;

/// A lane of a sessionless client that nothing has used for this long is closed.
pub(crate) const IDLE: Duration = Duration::from_secs(30 * 60);

/// Ended sessions remembered, so a late request of one opens no new lane.
const ENDED_KEPT: usize = 4096;

/// A session's connection, closed when this is dropped.
pub(crate) struct Lane {
    pub(crate) peer: Peer<RoleClient>,
    /// The listing it was found to offer, the shared one's at the time.
    pub(crate) verified: Arc<Snapshot>,
    /// Set when the source said on this connection that a list changed.
    pub(crate) changed: Arc<AtomicBool>,
    _closes: DropGuard,
}

impl Lane {
    /// Holds `conn` open until the lane is dropped, `stop` is cancelled or
    /// the connection ends by itself.
    pub(crate) fn open(
        mut conn: Connection,
        verified: Arc<Snapshot>,
        changed: Arc<AtomicBool>,
        stop: CancellationToken,
    ) -> Lane {
        let peer = conn.peer.clone();
        let closes = stop.clone().drop_guard();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = conn.wait() => {}
            }
            conn.close().await;
        });
        Lane {
            peer,
            verified,
            changed,
            _closes: closes,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        !self.peer.is_transport_closed()
    }

    /// Whether it must be listed again before use: the shared listing
    /// changed since it was checked, or it said its own lists changed.
    pub(crate) fn needs_check(&self, current: &Arc<Snapshot>) -> bool {
        !Arc::ptr_eq(&self.verified, current) || self.changed.swap(false, Ordering::SeqCst)
    }
}

/// Where a session's lane is kept. A clone is a lease: while a request or
/// a call holds one, the lane is not closed for being idle.
pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<Lane>>>;

struct Kept {
    slot: Slot,
    used: Instant,
    /// Keyed by a program, not a session: closed when idle.
    idles: bool,
}

/// The lanes of one source, by client session.
#[derive(Default)]
pub(crate) struct Lanes {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<u64, Kept>,
    ended: HashSet<u64>,
    ended_order: VecDeque<u64>,
}

impl Lanes {
    /// Where client `key`'s lane is kept (locked while it opens, so
    /// concurrent first requests open one); `None` once [`MAX_LANES`] have
    /// one, or for a session that has ended.
    pub(crate) fn slot(&self, key: u64, idles: bool) -> Option<Slot> {
        self.slot_at(key, idles, Instant::now())
    }

    fn slot_at(&self, key: u64, idles: bool, now: Instant) -> Option<Slot> {
        let mut inner = self.lock();
        sweep(&mut inner.slots, now);
        if inner.ended.contains(&key) {
            return None;
        }
        if let Some(kept) = inner.slots.get_mut(&key) {
            kept.used = now;
            return Some(kept.slot.clone());
        }
        if inner.slots.len() >= MAX_LANES {
            return None;
        }
        let slot = Slot::default();
        inner.slots.insert(
            key,
            Kept {
                slot: slot.clone(),
                used: now,
                idles,
            },
        );
        Some(slot)
    }

    /// Client `key`'s lane did not open: its place is free again.
    pub(crate) fn failed(&self, key: u64) {
        self.lock().slots.remove(&key);
    }

    /// Session `key` ended: its lane closes (once no request holds it),
    /// and none opens for it again.
    pub(crate) fn close(&self, key: u64) {
        let mut inner = self.lock();
        inner.slots.remove(&key);
        if inner.ended.insert(key) {
            inner.ended_order.push_back(key);
        }
        while inner.ended_order.len() > ENDED_KEPT {
            if let Some(old) = inner.ended_order.pop_front() {
                inner.ended.remove(&old);
            }
        }
    }

    /// Closes the idle lanes of sessionless clients.
    pub(crate) fn sweep(&self) {
        sweep(&mut self.lock().slots, Instant::now());
    }

    /// How many clients have a lane (open or opening).
    #[cfg(test)]
    fn count(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drops the lanes keyed by a program that nothing has used for [`IDLE`]
/// and that no request or call holds.
fn sweep(slots: &mut HashMap<u64, Kept>, now: Instant) {
    slots.retain(|_, k| {
        !k.idles || now.duration_since(k.used) < IDLE || Arc::strong_count(&k.slot) > 1
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_bounded_and_a_session_keeps_its_own() {
        let lanes = Lanes::default();
        for session in 0..MAX_LANES as u64 {
            assert!(lanes.slot(session, false).is_some());
        }
        assert!(lanes.slot(1000, false).is_none(), "past the bound: shared");
        assert!(Arc::ptr_eq(
            &lanes.slot(3, false).unwrap(),
            &lanes.slot(3, false).unwrap()
        ));
        lanes.close(3);
        assert_eq!(lanes.count(), MAX_LANES - 1);
        assert!(
            lanes.slot(1000, false).is_some(),
            "a closed lane frees its place"
        );
        assert!(
            lanes.slot(3, false).is_none(),
            "an ended session opens none again"
        );
        lanes.failed(1000);
        assert_eq!(
            lanes.count(),
            MAX_LANES - 1,
            "a failed open frees its place"
        );
    }

    #[test]
    fn only_a_programs_idle_unheld_lane_is_closed() {
        let lanes = Lanes::default();
        let start = Instant::now();
        lanes.slot_at(1, true, start);
        lanes.slot_at(2, true, start);
        lanes.slot_at(5, false, start);
        // Program 2 keeps asking; program 1 does not; session 5 ends only with its session.
        lanes.slot_at(2, true, start + IDLE / 2);
        let held = lanes.slot_at(3, true, start + IDLE + Duration::from_secs(1));
        let keys = |l: &Lanes| {
            let mut k: Vec<u64> = l.lock().slots.keys().copied().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&lanes), vec![2, 3, 5]);
        // One a call holds is kept however long it has been.
        lanes.slot_at(4, true, start + IDLE * 3);
        assert_eq!(keys(&lanes), vec![3, 4, 5]);
        drop(held);
        lanes.slot_at(4, true, start + IDLE * 5);
        assert_eq!(keys(&lanes), vec![4, 5]);
    }
}
