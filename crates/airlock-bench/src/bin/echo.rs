//! `bench-echo`: the smallest useful MCP server, one `echo` tool, built on
//! rmcp. Stdio by default; `--http ADDR` serves Streamable HTTP at `/mcp`.
//! `BENCH_ECHO_TOOLS=N` lists N more tools with schemas the size of a
//! typical server's (for measuring what a catalog costs a model's context).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};

#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(serde_json::json!({
            "name": "echo", "description": "Echo the text back.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }))
        .expect("valid tool");
        let extra: usize = std::env::var("BENCH_ECHO_TOOLS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let mut tools = vec![tool];
        tools.extend((0..extra).map(typical_tool));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(|t| t.as_str())
            .unwrap_or("")
            .to_string();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

/// A tool shaped like those of issue trackers and databases: a paragraph
/// of description, four parameters with their own descriptions.
fn typical_tool(i: usize) -> Tool {
    serde_json::from_value(serde_json::json!({
        "name": format!("records_{i}"),
        "description": format!("List the records of collection {i} that match a filter. Returns at most `limit` records, newest first, each with its id, title, owner and the time it last changed; use `cursor` from a previous answer to read the next page."),
        "inputSchema": {"type": "object", "properties": {
            "filter": {"type": "string", "description": "A filter expression, e.g. `owner:me state:open`."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "At most this many records (default 20)."},
            "cursor": {"type": "string", "description": "Where the previous page ended."},
            "fields": {"type": "array", "items": {"type": "string"}, "description": "Only these fields of each record."}
        }, "required": ["filter"]},
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    }))
    .expect("valid tool")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--http") {
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
        };
        let addr: std::net::SocketAddr = args
            .get(i + 1)
            .ok_or_else(|| anyhow::anyhow!("--http needs an address"))?
            .parse()?;
        let service = StreamableHttpService::new(
            || Ok(Echo),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        axum::serve(tokio::net::TcpListener::bind(addr).await?, router).await?;
    } else {
        Echo.serve(rmcp::transport::stdio())
            .await?
            .waiting()
            .await?;
    }
    Ok(())
}
