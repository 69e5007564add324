//! Step 1: the exposed name → a source and the upstream tool name.

use rmcp::ErrorData;

use crate::hub::Hub;
use crate::names;

pub(crate) struct Target {
    pub source: usize,
    pub upstream_name: String,
}

/// Unknown names fail closed with a protocol error that names the closest
/// matches, so a model that misspelt a tool can correct itself.
pub(crate) fn tool(hub: &Hub, exposed: &str) -> Result<Target, ErrorData> {
    let catalog = hub.catalog();
    if let Some(route) = catalog.tool(exposed) {
        return Ok(Target {
            source: route.source,
            upstream_name: route.upstream_name.clone(),
        });
    }
    let mut message = format!("unknown tool `{exposed}`");
    let near = airlock_common::closest(exposed, catalog.tool_names());
    if !near.is_empty() {
        message.push_str(&format!("; did you mean {}?", quoted(&near)));
    } else if let Some((source, _)) = names::split(exposed) {
        match hub.sources.iter().find(|s| s.name() == source) {
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
