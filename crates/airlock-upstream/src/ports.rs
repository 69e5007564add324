//! The crate's ports: what it needs from the hub that runs it, and what
//! it reports. A leaf module; everything else here depends on it, and it on
//! nothing else in the crate but the command's identity.

// Logging, sampling and roots are deprecated by SEP-2577 but still relayed.
#![allow(deprecated)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    ClientResult, LoggingMessageNotificationParam, ProgressNotificationParam, RequestId,
    ResourceUpdatedNotificationParam, ServerRequest,
};

use crate::command::CommandIdentity;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which of a source's connections something came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The connection every client shares (and the catalog is listed on).
    Shared,
    /// The connection this client session has to itself.
    Session(u64),
}

/// What airlock knows of why a source sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub lane: Lane,
    /// It arrived on the stream answering this request of airlock's (on
    /// Streamable HTTP, where the stream says so).
    pub during: Option<RequestId>,
}

/// What a source sends toward clients, and where the hub routes it.
pub trait Downstream: Send + Sync + 'static {
    /// A request from the server to the client (elicitation, sampling,
    /// roots). The hub answers it through the client whose call caused it,
    /// or refuses it when no such client can be found.
    fn server_request(
        &self,
        source: &str,
        cause: Cause,
        request: ServerRequest,
    ) -> BoxFuture<'_, Result<ClientResult, ErrorData>>;
    fn progress(&self, source: &str, lane: Lane, params: ProgressNotificationParam);
    fn log(&self, source: &str, lane: Lane, params: LoggingMessageNotificationParam);
    fn resource_updated(&self, source: &str, lane: Lane, params: ResourceUpdatedNotificationParam);
    /// One of the source's lists changed and its snapshot was refreshed.
    fn catalog_changed(&self, source: &str);
    /// The source's state changed (starting, ready, failed, ...).
    fn state_changed(&self, source: &str, state: &SourceState);
    /// Whether a person has approved this exact command for `source`.
    /// Asked before every start; a refusal fails the source with the reason.
    fn command_allowed(&self, source: &str, command: &CommandIdentity) -> Result<(), String>;
}

/// Resolving secret references in a source's env and headers, and keeping
/// the values out of what the source says about itself (stderr, errors).
pub trait Secrets: Vault {
    /// The text with `secret:NAME` / `${secret:NAME}` replaced by values,
    /// which from then on are scrubbed from everything that leaves.
    fn resolve(&self, text: &str) -> Result<String, String>;
    /// The text with every known secret value redacted.
    fn scrub(&self, text: &str) -> String;
    /// Every string inside `value` (object keys included) redacted.
    fn scrub_json(&self, value: &mut serde_json::Value);
    /// Whether `bytes` hold a known secret value in any of its forms,
    /// including as it reads inside a JSON string: a serialized message
    /// that this finds nothing in has no string that scrubbing would change.
    fn finds_in_serialized(&self, json: &[u8]) -> bool;
    /// Whether any secret is known (when none is, scrubbing is skipped).
    fn active(&self) -> bool;
}

/// Secrets airlock keeps for itself (OAuth tokens and registrations) in
/// the same store as the person's own. Every value read or written is
/// from then on scrubbed from everything that leaves.
pub trait Vault: Send + Sync + 'static {
    fn get(&self, name: &str) -> Result<Option<String>, String>;
    fn set(&self, name: &str, value: &str) -> Result<(), String>;
    /// A value that is not secret (a login's record), kept beside the
    /// secrets: read and written without teaching the scrubber, which
    /// would otherwise grow with every change of it.
    fn get_note(&self, name: &str) -> Result<Option<String>, String>;
    fn set_note(&self, name: &str, value: &str) -> Result<(), String>;
    /// Whether there was anything to remove.
    fn remove(&self, name: &str) -> Result<bool, String>;
    /// Where values are kept, in a person's words (the keychain, or the
    /// private file that is the fallback).
    fn describe(&self) -> String;
    /// Scrub this value from now on without storing it (a value held only
    /// for a moment, such as an authorization code).
    fn learn(&self, value: &str);
    /// A private directory for the lock files that keep two airlock
    /// processes from refreshing the same token at once.
    fn lock_dir(&self) -> std::path::PathBuf;
}

/// Where a source stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceState {
    Starting,
    Ready,
    /// It failed to start or died; `retry_in` until the next attempt.
    Failed {
        detail: String,
        retry_in: Duration,
    },
    /// The hub stopped it; `last_failure` says why it was down, if it was.
    Stopped {
        last_failure: Option<String>,
    },
}

impl SourceState {
    pub fn label(&self) -> &'static str {
        match self {
            SourceState::Starting => "starting",
            SourceState::Ready => "ready",
            SourceState::Failed { .. } => "failed",
            SourceState::Stopped { .. } => "stopped",
        }
    }

    /// Why it is not ready, with when the hub tries again: what a running
    /// hub reports.
    pub fn detail(&self) -> String {
        match self {
            SourceState::Failed { detail, retry_in } => {
                format!("{detail} (next attempt in {:.1}s)", retry_in.as_secs_f32())
            }
            _ => self.reason(),
        }
    }

    /// Why it is not ready, and nothing of a next attempt: what a one-shot
    /// command (`doctor`, `tools review`), which makes none, reports.
    pub fn reason(&self) -> String {
        match self {
            SourceState::Failed { detail, .. } => detail.clone(),
            SourceState::Stopped {
                last_failure: Some(detail),
            } => format!("down when the hub stopped: {detail}"),
            _ => String::new(),
        }
    }
}
