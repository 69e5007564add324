//! Connections a client session has to a source of its own.
//!
//! A stdio server has one stdin: when several clients' calls share its
//! process, a request it makes of "the client" (an elicitation, a sampling
//! request, a roots query) does not say whose call it belongs to. A source
//! with `sessions = "per-client"` gives each client session a connection of
//! its own, opened on the session's first request and closed when the
//! session ends (or after [`IDLE`] without a request from it: a client
//! without a session, which is keyed by the program it names, never says
//! it has gone), so whatever arrives on it is that session's. It is the
//! same as each client starting the server itself, as it would without
//! airlock. The shared connection stays, for the catalog and for sessions
//! past [`MAX_LANES`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::service::{Peer, RoleClient};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::connect::Connection;

/// Client sessions per source that get a connection of their own; later
/// ones share the common connection (where routing refuses what it cannot
/// tell apart), so many sessions cannot start unbounded processes.
pub(crate) const MAX_LANES: usize = 32;

/// A lane no request has used for this long is closed.
pub(crate) const IDLE: Duration = Duration::from_secs(30 * 60);

/// A session's connection, closed when this is dropped.
pub(crate) struct Lane {
    pub(crate) peer: Peer<RoleClient>,
    _closes: DropGuard,
}

impl Lane {
    /// Holds `conn` open until the lane is dropped, `stop` is cancelled or
    /// the connection ends by itself.
    pub(crate) fn open(mut conn: Connection, stop: CancellationToken) -> Lane {
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
            _closes: closes,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        !self.peer.is_transport_closed()
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Lane>>>;

/// The lanes of one source, by client session.
#[derive(Default)]
pub(crate) struct Lanes {
    /// Each with when a request last asked for it.
    slots: Mutex<HashMap<u64, (Slot, Instant)>>,
}

impl Lanes {
    /// Where session `session`'s lane is kept (locked while it opens, so
    /// its concurrent first requests open one); `None` once
    /// [`MAX_LANES`] sessions have one.
    pub(crate) fn slot(&self, session: u64) -> Option<Slot> {
        self.slot_at(session, Instant::now())
    }

    fn slot_at(&self, session: u64, now: Instant) -> Option<Slot> {
        let mut slots = self.lock();
        // Idle ones go, unless a request is opening or using one just now.
        slots.retain(|_, (slot, used)| {
            now.duration_since(*used) < IDLE || Arc::strong_count(slot) > 1
        });
        if let Some((slot, used)) = slots.get_mut(&session) {
            *used = now;
            return Some(slot.clone());
        }
        if slots.len() >= MAX_LANES {
            return None;
        }
        let slot = Slot::default();
        slots.insert(session, (slot.clone(), now));
        Some(slot)
    }

    /// The session ended: its lane closes (once no request holds it).
    pub(crate) fn close(&self, session: u64) {
        self.lock().remove(&session);
    }

    /// How many sessions have a lane (open or opening).
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Slot, Instant)>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_bounded_and_a_session_keeps_its_own() {
        let lanes = Lanes::default();
        for session in 0..MAX_LANES as u64 {
            assert!(lanes.slot(session).is_some());
        }
        assert!(lanes.slot(1000).is_none(), "past the bound: shared");
        assert!(Arc::ptr_eq(
            &lanes.slot(3).unwrap(),
            &lanes.slot(3).unwrap()
        ));
        lanes.close(3);
        assert_eq!(lanes.count(), MAX_LANES - 1);
        assert!(lanes.slot(1000).is_some(), "a closed lane frees its place");
    }

    #[test]
    fn an_idle_lane_is_closed_and_a_used_one_kept() {
        let lanes = Lanes::default();
        let start = Instant::now();
        lanes.slot_at(1, start);
        lanes.slot_at(2, start);
        // Session 2 keeps asking; session 1 does not.
        lanes.slot_at(2, start + IDLE / 2);
        let held = lanes.slot_at(3, start + IDLE + Duration::from_secs(1));
        assert_eq!(lanes.count(), 2);
        assert!(lanes.lock().contains_key(&2) && !lanes.lock().contains_key(&1));
        // One a request holds is kept however long it has been.
        let _held = held;
        lanes.slot_at(4, start + IDLE * 3);
        assert!(lanes.lock().contains_key(&3));
    }
}
