//! The demo MCP server airlock runs when it has no configuration.
//!
//! A notebook kept in memory, with the mix of tools a real server has:
//! reads annotated `readOnlyHint: true, openWorldHint: false`, a write, a
//! destructive delete, and a tool that declares nothing at all. It lets a
//! new user see how airlock treats each kind without installing anything.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptMessage, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, Role, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

pub struct Notebook {
    notes: Mutex<BTreeMap<String, String>>,
}

impl Default for Notebook {
    fn default() -> Self {
        let mut notes = BTreeMap::new();
        notes.insert(
            "welcome".to_string(),
            "airlock sits between your MCP client and your servers. Reads flow, writes ask."
                .to_string(),
        );
        notes.insert(
            "groceries".to_string(),
            "oat milk, lentils, lemons".to_string(),
        );
        Notebook {
            notes: Mutex::new(notes),
        }
    }
}

fn tool(def: Value) -> Tool {
    serde_json::from_value(def).expect("demo tool definitions are valid")
}

fn name_schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string", "description": "The note's name"}}, "required": ["name"]})
}

/// The demo's tools, in the order they are listed.
pub fn tools() -> Vec<Tool> {
    let read_only = json!({"readOnlyHint": true, "openWorldHint": false});
    vec![
        tool(json!({
            "name": "list_notes",
            "description": "List the names of all notes.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": read_only,
        })),
        tool(json!({
            "name": "read_note",
            "description": "Read one note by name.",
            "inputSchema": name_schema(),
            "annotations": read_only,
        })),
        tool(json!({
            "name": "search_notes",
            "description": "Find notes whose text contains a word.",
            "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            "annotations": read_only,
        })),
        tool(json!({
            "name": "write_note",
            "description": "Create or replace a note.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}, "text": {"type": "string"}}, "required": ["name", "text"]},
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
        })),
        tool(json!({
            "name": "delete_note",
            "description": "Delete a note for good.",
            "inputSchema": name_schema(),
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "openWorldHint": false},
        })),
        tool(json!({
            "name": "share_note",
            "description": "Share a note with someone by email.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string"}}, "required": ["name", "email"]},
        })),
    ]
}

fn text(s: impl Into<String>) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(s.into())]))
}

fn failure(s: impl Into<String>) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(s.into())]))
}

fn arg<'a>(args: &'a serde_json::Map<String, Value>, key: &str) -> Result<&'a str, ErrorData> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorData::invalid_params(format!("missing string argument `{key}`"), None))
}

impl ServerHandler for Notebook {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new(
            "airlock-demo",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions("A small notebook. Notes have a name and some text.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        Ok(match request.name.as_ref() {
            "list_notes" => text(notes.keys().cloned().collect::<Vec<_>>().join("\n")),
            "read_note" => {
                let name = arg(&args, "name")?;
                match notes.get(name) {
                    Some(t) => text(t.clone()),
                    None => failure(format!("no note named `{name}`")),
                }
            }
            "search_notes" => {
                let q = arg(&args, "query")?.to_lowercase();
                let hits: Vec<_> = notes
                    .iter()
                    .filter(|(_, t)| t.to_lowercase().contains(&q))
                    .map(|(n, _)| n.clone())
                    .collect();
                text(hits.join("\n"))
            }
            "write_note" => {
                let name = arg(&args, "name")?.to_string();
                let body = arg(&args, "text")?.to_string();
                notes.insert(name.clone(), body);
                text(format!("saved `{name}`"))
            }
            "delete_note" => {
                let name = arg(&args, "name")?;
                match notes.remove(name) {
                    Some(_) => text(format!("deleted `{name}`")),
                    None => failure(format!("no note named `{name}`")),
                }
            }
            "share_note" => {
                let name = arg(&args, "name")?;
                let email = arg(&args, "email")?;
                if !notes.contains_key(name) {
                    failure(format!("no note named `{name}`"))
                } else {
                    // The demo never sends anything; it only says what it would do.
                    text(format!("would share `{name}` with {email}"))
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool `{other}`"),
                    None,
                ));
            }
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(
            "notes://index",
            "index",
        )]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != "notes://index" {
            return Err(ErrorData::resource_not_found(
                format!("no resource `{}`", request.uri),
                None,
            ));
        }
        let notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        let index = notes.keys().cloned().collect::<Vec<_>>().join("\n");
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![ResourceContents::text(index, request.uri)],
        )))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "tidy_notes",
            Some("Ask the model to suggest which notes to merge or delete."),
            None,
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "tidy_notes" {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt `{}`", request.name),
                None,
            ));
        }
        Ok(GetPromptResponse::Complete(
            GetPromptResult::new(vec![PromptMessage::new_text(
                Role::User,
                "List my notes and suggest which ones to merge or delete.",
            )])
            .with_description("Tidy the notebook"),
        ))
    }
}

/// Serves the demo on this process's stdio until the client disconnects.
pub async fn serve_stdio() -> anyhow::Result<()> {
    let running = Notebook::default().serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
