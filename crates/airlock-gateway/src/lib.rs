//! The hub: what airlock shows to MCP clients, and the path every call takes.
//!
//! - [`hub`] owns the sources, the merged [`catalog`], the connected clients
//!   and the calls in flight between them.
//! - [`session`] is the MCP server one client talks to.
//! - [`pipeline`] is the life of one `tools/call`, one step per module.
//! - `code` is code mode: the model's program in the sandbox, its calls
//!   through the pipeline, and the journal that makes a resume safe.
//! - [`faces`] put sessions on stdio or Streamable HTTP.
//!
//! Upstream connections live in `airlock-upstream`, durable state in
//! `airlock-store`, configuration in `airlock-config`.

pub mod catalog;
pub mod channels;
mod code;
pub mod control;
pub mod faces;
pub mod hub;
mod input;
mod instructions;
pub mod names;
mod outbox;
mod parked;
pub(crate) mod pipeline;
pub mod quote;
mod review;
mod seal;
pub mod secrets;
pub mod session;
mod uri_spelling;
mod versions;

pub use hub::Hub;
pub use session::Session;
