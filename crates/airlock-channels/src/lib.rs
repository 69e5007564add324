//! The human channels that decide pending calls from outside MCP.
//!
//! - [`desk`]: the one module that records a person's decision (it calls
//!   `airlock-decision`), used by every channel — the CLI, the page, and the
//!   answers people give in their client's prompt (handed over by the hub).
//! - [`page`]: the approval page on loopback: an inbox of pending calls
//!   with the four choices, reached with a one-time link.
//!
//! The hub's MCP-facing crates do not depend on this crate.

pub mod desk;
pub mod page;

pub use desk::Desk;
pub use page::ApprovalPage;
