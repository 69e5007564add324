//! What a source offers, as listed on one of its connections.

use rmcp::model::{Prompt, Resource, ResourceTemplate, ServerCapabilities, Tool};

/// What a source offered when last listed.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub tools: Vec<Tool>,
    pub resources: Vec<Resource>,
    pub resource_templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
    pub capabilities: ServerCapabilities,
}

/// Whether two listings offer the same, definition for definition.
pub(crate) fn same_lists(a: &Snapshot, b: &Snapshot) -> bool {
    let json = |s: &Snapshot| {
        serde_json::to_value((&s.tools, &s.resources, &s.resource_templates, &s.prompts)).ok()
    };
    json(a).is_some() && json(a) == json(b)
}
