//! Code mode: the model writes a program; airlock runs it in the sandbox
//! (`airlock-sandbox`), and every tool call the program makes goes through
//! the same pipeline as a client's call (policy, approval, credentials,
//! budgets, scrub, audit).
//!
//! Three meta tools, offered when `[hub] code_mode` is `beside` or `only`:
//!
//! - [`search`]: `search_tools`, what the model may call and how;
//! - [`run`]: `run_code` starts a run, `resume_run` resumes a paused one
//!   from its journal, so no call runs twice;
//! - [`bridge`]: one call of a run, and what the code gets back.

mod bridge;
mod run;
mod search;

use std::sync::Arc;

use airlock_config::CodeMode;
use rmcp::ErrorData;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, Tool};
use serde_json::{Value, json};

use crate::hub::Hub;
use crate::pipeline::ToolCall;

pub(crate) const SEARCH_TOOLS: &str = "search_tools";
pub(crate) const RUN_CODE: &str = "run_code";
pub(crate) const RESUME_RUN: &str = "resume_run";

/// The meta tools, in the order clients see them.
pub(crate) fn tools() -> Vec<Tool> {
    let tool = |name: &str, description: &str, schema: Value, read_only: bool| {
        serde_json::from_value::<Tool>(json!({
            "name": name,
            "description": description,
            "inputSchema": schema,
            "annotations": {"readOnlyHint": read_only, "openWorldHint": false},
        }))
        .expect("a meta tool's definition is a valid tool")
    };
    vec![
        tool(
            SEARCH_TOOLS,
            "Find the tools your code can call. Returns each match's call path (tools.<source>.<tool>), a one-line description, and with `schemas: true` its input schema.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for in tool names and descriptions; empty lists every tool."},
                    "schemas": {"type": "boolean", "description": "Include each tool's input schema."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most this many tools (default 10)."}
                },
                "required": ["query"]
            }),
            true,
        ),
        tool(
            RUN_CODE,
            "Run JavaScript that calls tools. `await tools.<source>.<tool>(args)` calls one (found with search_tools) and resolves with its structured result, or its text; a refused call rejects with an Error whose `code` is policy_denied, approval_denied, approval_timeout, unknown_tool, tool_error or failed. `return` the value you want back; console.log lines come back too. Calls that need the user's approval wait for it; if the wait ends first, the run pauses and you get a run_id for resume_run. No network, files, timers or modules; Date.now() is the run's start and Math.random is seeded.",
            json!({
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The body of an async function."}},
                "required": ["code"]
            }),
            false,
        ),
        tool(
            RESUME_RUN,
            "Resume a run that paused for the user's approval, once they have decided. Calls it already made are not made again.",
            json!({
                "type": "object",
                "properties": {"run_id": {"type": "string"}},
                "required": ["run_id"]
            }),
            false,
        ),
    ]
}

/// Whether `name` is a meta tool this hub offers.
pub(crate) fn is_meta(hub: &Hub, name: &str) -> bool {
    hub.settings().code_mode != CodeMode::Off
        && [SEARCH_TOOLS, RUN_CODE, RESUME_RUN].contains(&name)
}

/// What `tools/list` shows under `mode`: the meta tools beside or instead
/// of `tools`. A tool whose name a meta tool takes is not listed (calls by
/// that name reach the meta tool).
pub(crate) fn listed(mode: CodeMode, tools: Vec<Tool>) -> Vec<Tool> {
    match mode {
        CodeMode::Off => tools,
        CodeMode::Only => self::tools(),
        CodeMode::Beside => {
            let mut out = self::tools();
            out.extend(
                tools
                    .into_iter()
                    .filter(|t| ![SEARCH_TOOLS, RUN_CODE, RESUME_RUN].contains(&t.name.as_ref())),
            );
            out
        }
    }
}

/// A call of a meta tool.
pub(crate) async fn call(hub: &Arc<Hub>, call: ToolCall) -> Result<CallToolResponse, ErrorData> {
    let args = call.params.arguments.clone().unwrap_or_default();
    let text = |key: &str| -> Result<String, ErrorData> {
        match args.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(ErrorData::invalid_params(
                format!("`{key}` must be a string"),
                None,
            )),
            None => Err(ErrorData::invalid_params(
                format!("`{key}` is required"),
                None,
            )),
        }
    };
    match call.params.name.as_ref() {
        SEARCH_TOOLS => search::call(hub, &args),
        RUN_CODE => run::start(hub, call, text("code")?).await,
        RESUME_RUN => run::resume(hub, call, text("run_id")?).await,
        other => Err(ErrorData::invalid_params(
            format!("unknown tool `{other}`"),
            None,
        )),
    }
}

/// A meta tool's answer: airlock's words as a block of JSON; then, apart,
/// data that came from tools, quoted as from `sources` if any is quoted.
fn answer(words: &Value, data: Option<(Value, Vec<String>)>, is_error: bool) -> CallToolResponse {
    let mut blocks = vec![ContentBlock::text(
        serde_json::to_string_pretty(words).unwrap_or_default(),
    )];
    if let Some((data, sources)) = data {
        let text = serde_json::to_string_pretty(&data).unwrap_or_default();
        blocks.push(ContentBlock::text(match sources.is_empty() {
            true => text,
            false => crate::quote::wrap(&sources.join("`, `"), &text, &crate::quote::nonce()),
        }));
    }
    CallToolResponse::Complete(match is_error {
        true => CallToolResult::error(blocks),
        false => CallToolResult::success(blocks),
    })
}
