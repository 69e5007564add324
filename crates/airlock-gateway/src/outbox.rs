//! Notifications toward one client go through a bounded queue of its own.
//!
//! An upstream can send notifications (logs, resource updates, list
//! changes) faster than a client reads them, or to a client that has
//! stopped reading. Each session's notifications wait in a queue of
//! [`CAPACITY`]; one task per session delivers them in order. When the
//! queue is full the newest notification is dropped and counted: a slow
//! client loses notifications, never the hub's memory.

#![allow(deprecated)] // logging is SEP-2577-deprecated, still relayed

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    LoggingMessageNotificationParam, PromptListChangedNotification,
    ResourceListChangedNotification, ResourceUpdatedNotification, ResourceUpdatedNotificationParam,
    ServerNotification, ToolListChangedNotification,
};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};
use tokio::sync::mpsc;

/// Notifications one client may have waiting.
pub(crate) const CAPACITY: usize = 256;

#[derive(Clone)]
pub(crate) enum Note {
    Log(LoggingMessageNotificationParam),
    ResourceUpdated(ResourceUpdatedNotificationParam),
    /// Tools, prompts and resources may have changed.
    ListsChanged,
}

pub(crate) struct Outbox {
    tx: mpsc::Sender<Note>,
    dropped: AtomicU64,
}

impl Outbox {
    /// The outbox of `peer`, with its delivering task; the task ends when
    /// the outbox is dropped or the client is gone.
    pub(crate) fn new(peer: Peer<RoleServer>) -> Arc<Outbox> {
        let (tx, mut rx) = mpsc::channel(CAPACITY);
        tokio::spawn(async move {
            while let Some(note) = rx.recv().await {
                let sent = match note {
                    Note::Log(p) => peer.notify_logging_message(p).await,
                    Note::ResourceUpdated(p) => peer.notify_resource_updated(p).await,
                    Note::ListsChanged => {
                        let _ = peer.notify_tool_list_changed().await;
                        let _ = peer.notify_prompt_list_changed().await;
                        peer.notify_resource_list_changed().await
                    }
                };
                if sent.is_err() && peer.is_transport_closed() {
                    break;
                }
            }
        });
        Arc::new(Outbox {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// The outbox of a 2026-07-28 client's `subscriptions/listen` stream:
    /// what its filter takes goes down the stream (the sink refuses the
    /// rest); logs are not sent on streams.
    pub(crate) fn for_stream(sink: SubscriptionSink) -> Arc<Outbox> {
        let (tx, mut rx) = mpsc::channel(CAPACITY);
        tokio::spawn(async move {
            while let Some(note) = rx.recv().await {
                let notes = match note {
                    Note::Log(_) => continue,
                    Note::ResourceUpdated(p) => {
                        vec![ServerNotification::ResourceUpdatedNotification(
                            ResourceUpdatedNotification::new(p),
                        )]
                    }
                    Note::ListsChanged => vec![
                        ServerNotification::ToolListChangedNotification(
                            ToolListChangedNotification::default(),
                        ),
                        ServerNotification::PromptListChangedNotification(
                            PromptListChangedNotification::default(),
                        ),
                        ServerNotification::ResourceListChangedNotification(
                            ResourceListChangedNotification::default(),
                        ),
                    ],
                };
                for n in notes {
                    if let Err(rmcp::service::SubscriptionSendError::SubscriptionClosed) =
                        sink.send(n).await
                    {
                        return;
                    }
                }
            }
        });
        Arc::new(Outbox {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues `note`, or drops it if the client is that far behind.
    pub(crate) fn post(&self, note: Note) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(note) {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "a client is not reading its notifications; airlock drops them rather than buffer them"
                );
            }
        }
    }
}
