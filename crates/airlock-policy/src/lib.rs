//! Deciding each call.
//!
//! [`Policy::decide`] gives exactly one [`Decision`] — allow, ask or deny —
//! for a call to one tool, with the chain of reasons that produced it, in
//! this order (see `docs/policy.md`):
//!
//! 1. any matching deny wins; no narrower rule can loosen it;
//! 2. a tool that is new, or whose contract changed since a person reviewed
//!    it, asks (and rules pinned to another contract stop applying);
//! 3. the most specific matching rule decides (tool + connection, tool,
//!    source + connection, source); a later layer wins a tie, then ask
//!    beats allow;
//! 4. with no rule, a tool runs unasked only if its source is trusted by the
//!    user AND its annotations say read-only, closed-world, not destructive.
//!    Everything else asks.
//!
//! [`contract`] computes the digest a review pins; [`lint`] flags signs of
//! tool poisoning for the reviewer. This crate reads no files and keeps no
//! state: the caller supplies the facts.

mod args;
pub mod contract;
mod decide;
pub mod lint;

pub use decide::{Decision, Policy, RuleMatcher, Step, ToolFacts};
