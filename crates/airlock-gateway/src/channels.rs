//! The human channels, as the hub sees them.
//!
//! Recording a decision is not something this crate can do: it does not
//! depend on `airlock-decision`. What runs the hub (the CLI's `serve`)
//! attaches an implementation of [`HumanChannels`] that can. The hub calls
//! it for two things only: to point a person at a call that waits (the
//! approval page), and to hand over what a person answered in the client's
//! own prompt, a form airlock itself put to the client.

use airlock_store::ledger::{Choice, Recorded};

pub trait HumanChannels: Send + Sync {
    /// Approval `id` (a call of `tool`) now waits for a person: make sure
    /// they can find it (open the approval page, or print where it is).
    fn waiting(&self, id: &str, tool: &str);

    /// A person answered airlock's approval form in the client's own
    /// prompt: record `choice` for approval `id` through channel `prompt`.
    fn answered_in_prompt(&self, id: &str, choice: Choice) -> Result<Recorded, String>;

    /// A fresh one-time link to the approval page, if there is one.
    fn page_link(&self) -> Option<String>;
}
