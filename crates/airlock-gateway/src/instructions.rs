//! What a client is told at first contact (`initialize` and
//! `server/discover` carry it as `instructions`): what waits for the
//! person before every tool is there. Facts only, in airlock's words, with
//! names airlock knows from the config (neutralised); nothing a source
//! wrote, and never a request to the model to act.

use airlock_upstream::SourceState;

use crate::Hub;
use crate::quote::neutralise_name;

/// The marker in a source's failure that says its command or endpoint
/// waits for a person's review (the message `link.rs` gives).
pub(crate) const NEEDS_REVIEW: &str = "so it does not start until a person approves it";

/// The instructions for a client now, or `None` when nothing waits.
pub(crate) fn for_client(hub: &Hub) -> Option<String> {
    let mut review = Vec::new();
    let mut failed = Vec::new();
    let mut starting = Vec::new();
    for source in hub.sources() {
        let name = format!("`{}`", neutralise_name(source.name()));
        match source.state() {
            SourceState::Ready => {}
            SourceState::Starting => starting.push(name),
            SourceState::Failed { detail, .. } if detail.contains(NEEDS_REVIEW) => {
                review.push(name)
            }
            SourceState::Failed { .. } | SourceState::Stopped { .. } => failed.push(name),
        }
    }
    let view = hub.view();
    let unreviewed = view
        .catalog
        .tools
        .iter()
        .filter(|t| {
            view.catalog.tool(&t.name).is_some_and(|r| {
                view.reviewed
                    .digest(view.catalog.source_name(r.source), &r.upstream_name)
                    .is_none()
            })
        })
        .count();
    let withheld = view.withheld_for_review().len();
    let mut lines = Vec::new();
    if !review.is_empty() {
        lines.push(format!(
            "Not started until the user reviews its command: source {} (the user runs `airlock tools review`).",
            review.join(", ")
        ));
    }
    if unreviewed > 0 {
        lines.push(format!(
            "{unreviewed} tool(s) have not been reviewed by the user yet; calls to them wait for the user's approval."
        ));
    }
    if withheld > 0 {
        lines.push(format!(
            "{withheld} item(s) are not listed until the user reviews them (`airlock doctor` says which)."
        ));
    }
    if !failed.is_empty() {
        lines.push(format!(
            "Not available: source {} failed to start (`airlock doctor` says why).",
            failed.join(", ")
        ));
    }
    if !starting.is_empty() {
        lines.push(format!(
            "Still starting: source {}; its tools are listed when it is ready, and the client is told the list changed.",
            starting.join(", ")
        ));
    }
    (!lines.is_empty()).then(|| {
        format!(
            "airlock sits between this client and its MCP servers; the user decides what runs. {}",
            lines.join(" ")
        )
    })
}
