//! Step 1: the exposed name → a source, its connection, the upstream tool
//! name and the contract it has now.

use rmcp::ErrorData;

use crate::hub::{Sources, View};
use crate::names;

pub(crate) struct Target {
    pub source: usize,
    pub source_name: String,
    pub connection: String,
    pub upstream_name: String,
    /// The tool's contract digest in this call's view of the catalog.
    pub contract_digest: String,
}

/// Unknown names fail closed with a protocol error that names the closest
/// matches, so a model that misspelt a tool can correct itself.
pub(crate) fn tool(sources: &Sources, view: &View, exposed: &str) -> Result<Target, ErrorData> {
    let catalog = &view.catalog;
    if let Some(route) = catalog.tool(exposed) {
        let source_name = catalog.source_name(route.source).to_string();
        return Ok(Target {
            source: route.source,
            connection: view.policy.connection(&source_name).to_string(),
            source_name,
            upstream_name: route.upstream_name.clone(),
            contract_digest: catalog
                .contract(exposed)
                .map(|c| c.digest.clone())
                .unwrap_or_default(),
        });
    }
    let mut message = format!("unknown tool `{exposed}`");
    // Suggest only what this client may list: a tool policy hides, or one
    // withheld for review, is not named to the model.
    let listed = view.visible_tools();
    let near = airlock_common::closest(exposed, listed.iter().map(|t| t.name.as_ref()));
    if !near.is_empty() {
        message.push_str(&format!("; did you mean {}?", quoted(&near)));
    } else if let Some((source, _)) = names::split(exposed) {
        match sources.all().iter().find(|s| s.name() == source) {
            None => message.push_str(&format!("; there is no source `{source}`")),
            Some(s) => {
                let state = s.state();
                if state.label() != "ready" {
                    message.push_str(&format!("; source `{source}` is {}", state.label()));
                    let detail = state.detail();
                    if !detail.is_empty() {
                        message.push_str(&format!(": {detail}"));
                    }
                }
            }
        }
    } else {
        message.push_str(&format!(
            "; tool names have the form <source>{}<tool>",
            names::SEPARATOR
        ));
    }
    Err(ErrorData::invalid_params(message, None))
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
