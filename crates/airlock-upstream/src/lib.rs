//! The side of airlock that faces MCP servers.
//!
//! Each configured source becomes a [`Source`]: a supervised connection that
//! starts (in parallel with the others), publishes a [`Snapshot`] of what the
//! server offers, restarts with backoff when it dies, and never lets its
//! child process outlive airlock. What the server sends that is not a
//! response — requests to the client (elicitation, sampling, roots),
//! progress, logs, list changes — is handed to a [`Downstream`], which the
//! hub implements to reach the right client.
//!
//! This crate does not decide whether a call may run; it only carries calls
//! the hub has already decided to make.

mod clean;
mod client;
pub mod command;
pub mod confine;
mod connect;
mod credentials;
pub mod egress;
mod lanes;
mod layer;
mod listen;
pub mod oauth;
mod ports;
mod snapshot;
mod source;

pub use connect::INHERITED_ENV;
pub use ports::{BoxFuture, Cause, Downstream, Lane, Secrets, SourceState, Vault};
pub use source::{PendingCall, Snapshot, Source, UpstreamError};
