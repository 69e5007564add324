//! `airlock-conformance-fixture`: the server the MCP conformance suite's
//! server scenarios expect (tools, resources and prompts with the names and
//! contents each scenario checks), built on rmcp.
//!
//! `airlock-conformance-fixture` serves stdio (to sit behind airlock);
//! `--http 127.0.0.1:PORT` serves Streamable HTTP at `/mcp` (to measure the
//! suite against the fixture directly). With `FIXTURE_LISTEN_LOG=PATH` it
//! appends a line to PATH for each `subscriptions/listen` stream opened.

#![allow(deprecated)] // sampling and logging: SEP-2577-deprecated, still tested

mod mrtr;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::broadcast;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CreateMessageRequest, CreateMessageRequestParams, ElicitRequest, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, InputRequest, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam, Prompt,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceTemplate, ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ResultType,
    ServerCapabilities, ServerConfig, ServerNotification, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

fn from<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture JSON matches the rmcp type")
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Set once `test_add_tool` ran: the list then has `test_added_tool` too.
static GROWN: AtomicBool = AtomicBool::new(false);
/// What the listen streams open are told: each change of the tool list,
/// each update of a resource (each stream's own filter picks).
static ANNOUNCED: LazyLock<broadcast::Sender<ServerNotification>> =
    LazyLock::new(|| broadcast::channel(8).0);

fn tools() -> Vec<Tool> {
    let t = |name: &str, description: &str, schema: Value| -> Tool {
        from(json!({"name": name, "description": description, "inputSchema": schema}))
    };
    let string_arg = |arg: &str| json!({"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]});
    vec![
        t("test_simple_text", "Returns simple text", no_args()),
        t("test_image_content", "Returns an image", no_args()),
        t("test_audio_content", "Returns audio", no_args()),
        t(
            "test_embedded_resource",
            "Returns an embedded resource",
            no_args(),
        ),
        t(
            "test_multiple_content_types",
            "Returns mixed content",
            no_args(),
        ),
        t("test_tool_with_logging", "Logs while running", no_args()),
        t("test_error_handling", "Always fails", no_args()),
        t("test_tool_with_progress", "Reports progress", no_args()),
        t(
            "test_sampling",
            "Asks the client to sample",
            string_arg("prompt"),
        ),
        t("test_elicitation", "Asks the user", string_arg("message")),
        t(
            "test_update_resource",
            "Announces that a resource was updated",
            string_arg("uri"),
        ),
        t(
            "test_add_tool",
            "Adds a tool to this server's list and announces the change",
            no_args(),
        ),
        t(
            "test_requires_sampling",
            "Runs only for a client that declared sampling (-32021 otherwise)",
            no_args(),
        ),
        t(
            "test_input_rounds",
            "Asks the user twice, one question after the other",
            no_args(),
        ),
        t(
            "test_elicitation_sep1034_defaults",
            "Asks with defaults",
            no_args(),
        ),
        t(
            "test_elicitation_sep1330_enums",
            "Asks with enums",
            no_args(),
        ),
        t(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                "additionalProperties": false
            }),
        ),
    ]
    .into_iter()
    .chain(mrtr::TOOLS.iter().map(|name| t(name, "Asks for input (SEP-2322)", no_args())))
    .collect()
}

fn content(blocks: Value) -> CallToolResponse {
    CallToolResponse::Complete(from::<CallToolResult>(json!({"content": blocks})))
}

fn text(s: &str) -> CallToolResponse {
    content(json!([{"type": "text", "text": s}]))
}

#[derive(Clone)]
struct Fixture;

impl Fixture {
    async fn log(&self, ctx: &RequestContext<RoleServer>, message: &str) {
        let params: LoggingMessageNotificationParam =
            from(json!({"level": "info", "logger": "fixture", "data": message}));
        let _ = ctx.peer.notify_logging_message(params).await;
    }

    /// Input from the client. On 2026-07-28 the call ends with
    /// `input_required` (the fixture's state names the tool and the round)
    /// and the retry brings the answer, with that state unchanged; before
    /// it, the client is asked with a request mid-call.
    async fn ask(
        &self,
        ctx: &RequestContext<RoleServer>,
        call: &CallToolRequestParams,
        round: u32,
        request: InputRequest,
    ) -> Result<Value, CallToolResponse> {
        if !is_modern(ctx) {
            let answer = match request {
                InputRequest::Elicitation(r) => ctx
                    .peer
                    .create_elicitation(r.params)
                    .await
                    .map(|a| serde_json::to_value(a).unwrap_or_default()),
                InputRequest::CreateMessage(r) => ctx
                    .peer
                    .create_message(r.params)
                    .await
                    .map(|a| serde_json::to_value(a).unwrap_or_default()),
                _ => return Err(failed("this input cannot be asked for mid-call")),
            };
            return answer.map_err(|e| failed(&format!("input request failed: {e}")));
        }
        let state = format!("fixture:{}:{round}", call.name);
        let key = format!("q{round}");
        match call.input_responses.as_ref().and_then(|r| r.get(&key)) {
            Some(answer) if call.request_state.as_deref() == Some(state.as_str()) => {
                Ok(answer.clone())
            }
            Some(_) => Err(failed(
                "the fixture's requestState did not come back unchanged",
            )),
            None => Err(CallToolResponse::InputRequired(InputRequiredResult::new(
                Some(BTreeMap::from([(key, request)])),
                Some(state),
            ))),
        }
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let request_params = &request;
        Ok(match request.name.as_ref() {
            "test_simple_text" => text("This is a simple text response for testing."),
            "test_requires_sampling" => {
                if ctx.client_capabilities().is_none_or(|c| c.sampling.is_none()) {
                    return Err(ErrorData::new(
                        rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                        "this tool needs the client's sampling capability",
                        Some(json!({"requiredCapabilities": {"sampling": {}}})),
                    ));
                }
                text("the client declared sampling")
            }
            "test_image_content" => content(json!([{"type": "image", "data": PNG, "mimeType": "image/png"}])),
            "test_audio_content" => content(json!([{"type": "audio", "data": WAV, "mimeType": "audio/wav"}])),
            "test_embedded_resource" => content(json!([{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."
            }}])),
            "test_multiple_content_types" => content(json!([
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
            ])),
            "test_tool_with_logging" => {
                self.log(&ctx, "Tool execution started").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.log(&ctx, "Tool processing data").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.log(&ctx, "Tool execution completed").await;
                text("Logging test completed")
            }
            "test_error_handling" => CallToolResponse::Complete(from(json!({
                "isError": true, "content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}]
            }))),
            "test_tool_with_progress" => {
                let token = ctx.meta.get_progress_token();
                for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if let Some(token) = &token {
                        let n: ProgressNotificationParam =
                            from(json!({"progressToken": token, "progress": p, "total": 100.0}));
                        let _ = ctx.peer.notify_progress(n).await;
                    }
                }
                text("Progress test completed")
            }
            "test_sampling" => {
                let params: CreateMessageRequestParams = from(json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": args["prompt"]}}],
                    "maxTokens": 100
                }));
                let request = InputRequest::CreateMessage(CreateMessageRequest::new(params));
                match self.ask(&ctx, request_params, 1, request).await {
                    Ok(r) => text(&format!("LLM response: {}", r["content"]["text"].as_str().unwrap_or(""))),
                    Err(response) => response,
                }
            }
            "test_input_rounds" => self.rounds(&ctx, request_params).await,
            name if name.starts_with("test_input_required_result_") => {
                return mrtr::call(request_params, ctx.client_capabilities());
            }
            "test_update_resource" => {
                let uri = args["uri"].as_str().unwrap_or_default();
                let params = ResourceUpdatedNotificationParam::new(uri);
                if is_modern(&ctx) {
                    let n = ServerNotification::ResourceUpdatedNotification(
                        ResourceUpdatedNotification::new(params),
                    );
                    let _ = ANNOUNCED.send(n);
                } else {
                    let _ = ctx.peer.notify_resource_updated(params).await;
                }
                text("updated")
            }
            "test_add_tool" => {
                GROWN.store(true, Ordering::SeqCst);
                if is_modern(&ctx) {
                    let n = ServerNotification::ToolListChangedNotification(Default::default());
                    let _ = ANNOUNCED.send(n);
                } else {
                    let _ = ctx.peer.notify_tool_list_changed().await;
                }
                text("added test_added_tool")
            }
            "test_elicitation" => {
                self.elicit(&ctx, request_params, json!({
                    "message": args["message"],
                    "requestedSchema": {"type": "object", "properties": {
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"}
                    }, "required": ["username", "email"]}
                }), "User response: ").await
            }
            "test_elicitation_sep1034_defaults" => {
                self.elicit(&ctx, request_params, json!({
                    "message": "Please review and update the form fields with defaults",
                    "requestedSchema": {"type": "object", "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    }}
                }), "Elicitation completed: ").await
            }
            "test_elicitation_sep1330_enums" => {
                self.elicit(&ctx, request_params, json!({
                    "message": "Please select options from the enum fields",
                    "requestedSchema": {"type": "object", "properties": {
                        "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
                        "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
                            {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}, {"const": "value3", "title": "Third Option"}]},
                        "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                        "untitledMulti": {"type": "array", "description": "Select multiple options", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                        "titledMulti": {"type": "array", "description": "Select multiple options with titles", "items": {"anyOf": [
                            {"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"}, {"const": "value3", "title": "Third Choice"}]}}
                    }}
                }), "Elicitation completed: ").await
            }
            "json_schema_2020_12_tool" => text("ok"),
            other => return Err(ErrorData::invalid_params(format!("unknown tool {other}"), None)),
        })
    }

    /// Two questions, one after the other. On 2026-07-28 the state carries
    /// the round and the answers so far, and must come back unchanged.
    async fn rounds(
        &self,
        ctx: &RequestContext<RoleServer>,
        call: &CallToolRequestParams,
    ) -> CallToolResponse {
        let question = |round: u32| {
            InputRequest::Elicitation(ElicitRequest::new(from(json!({
                "message": format!("Question {round}?"),
                "requestedSchema": {"type": "object", "properties": {
                    "answer": {"type": "string"}}, "required": ["answer"]}
            }))))
        };
        let answer_of = |r: &Value| r["content"]["answer"].as_str().unwrap_or("?").to_string();
        if !is_modern(ctx) {
            let mut answers = Vec::new();
            for round in 1..=2 {
                match self.ask(ctx, call, round, question(round)).await {
                    Ok(r) => answers.push(answer_of(&r)),
                    Err(response) => return response,
                }
            }
            return text(&format!("answers: {}", answers.join(", ")));
        }
        let (round, mut answers) = match call.request_state.as_deref() {
            None => (0, Vec::new()),
            Some(state) => {
                let parsed = state
                    .strip_prefix("fixture:rounds:")
                    .and_then(|rest| rest.split_once(':'))
                    .and_then(|(round, so_far)| {
                        let answers: Vec<String> = match so_far {
                            "" => Vec::new(),
                            s => s.split(',').map(String::from).collect(),
                        };
                        round.parse::<u32>().ok().map(|r| (r, answers))
                    });
                match parsed {
                    Some(p) => p,
                    None => {
                        return failed("the fixture's requestState did not come back unchanged");
                    }
                }
            }
        };
        if round > 0 {
            match call
                .input_responses
                .as_ref()
                .and_then(|r| r.get(&format!("q{round}")))
            {
                Some(r) => answers.push(answer_of(r)),
                None => return failed("the retry did not answer the question"),
            }
        }
        if answers.len() == 2 {
            return text(&format!("answers: {}", answers.join(", ")));
        }
        let next = round + 1;
        CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(BTreeMap::from([(format!("q{next}"), question(next))])),
            Some(format!("fixture:rounds:{next}:{}", answers.join(","))),
        ))
    }

    async fn elicit(
        &self,
        ctx: &RequestContext<RoleServer>,
        call: &CallToolRequestParams,
        params: Value,
        prefix: &str,
    ) -> CallToolResponse {
        let request = InputRequest::Elicitation(ElicitRequest::new(from(params)));
        match self.ask(ctx, call, 1, request).await {
            Ok(r) => text(&format!(
                "{prefix}action={}, content={}",
                r["action"].as_str().unwrap_or("?"),
                r.get("content").cloned().unwrap_or(Value::Null)
            )),
            Err(response) => response,
        }
    }
}

fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

fn failed(why: &str) -> CallToolResponse {
    CallToolResponse::Complete(from(json!({
        "isError": true, "content": [{"type": "text", "text": why}]
    })))
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_prompts()
                .enable_logging()
                .enable_completions()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = tools();
        if GROWN.load(Ordering::SeqCst) {
            tools.push(from(json!({
                "name": "test_added_tool", "description": "Added by test_add_tool",
                "inputSchema": no_args()
            })));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    /// A 2026-07-28 client hears of list changes on its listen stream.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        if let Some(log) = std::env::var_os("FIXTURE_LISTEN_LOG") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("open FIXTURE_LISTEN_LOG");
            let _ = writeln!(f, "listen");
        }
        let mut announced = ANNOUNCED.subscribe();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                r = announced.recv() => {
                    let Ok(n) = r else { return Ok(()) };
                    // Outside this stream's filter: not for it.
                    let _ = context.sink().send(n).await;
                }
            }
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // 2026-07-28 wants every final result marked (rmcp drops the mark
        // for older clients).
        self.call(request, ctx).await.map(|r| match r {
            CallToolResponse::Complete(mut c) => {
                c.result_type = Some(ResultType::COMPLETE);
                CallToolResponse::Complete(c)
            }
            other => other,
        })
    }

    async fn list_resources(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let r = |uri: &str, name: &str, mime: &str| -> Resource {
            from(
                json!({"uri": uri, "name": name, "description": format!("The {name} resource"), "mimeType": mime}),
            )
        };
        Ok(ListResourcesResult::with_all_items(vec![
            r("test://static-text", "static-text", "text/plain"),
            r("test://static-binary", "static-binary", "image/png"),
            r("test://watched-resource", "watched-resource", "text/plain"),
        ]))
    }

    async fn list_resource_templates(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let t: ResourceTemplate = from(json!({
            "uriTemplate": "test://template/{id}/data", "name": "template", "description": "Data by id", "mimeType": "application/json"
        }));
        Ok(ListResourceTemplatesResult::with_all_items(vec![t]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            "test://static-text" => {
                json!([{"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."}])
            }
            "test://static-binary" => json!([{"uri": uri, "mimeType": "image/png", "blob": PNG}]),
            "test://watched-resource" => {
                json!([{"uri": uri, "mimeType": "text/plain", "text": "watched"}])
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|r| r.strip_suffix("/data"))
            {
                Some(id) => json!([{"uri": uri, "mimeType": "application/json",
                    "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}]),
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("no resource {uri}"),
                        None,
                    ));
                }
            },
        };
        Ok(ReadResourceResponse::Complete(from::<ReadResourceResult>(
            json!({"contents": contents, "resultType": "complete"}),
        )))
    }

    async fn subscribe(
        &self,
        _r: SubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _r: UnsubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_prompts(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let p = |v: Value| -> Prompt { from(v) };
        Ok(ListPromptsResult::with_all_items(vec![
            p(json!({"name": "test_simple_prompt", "description": "A simple prompt"})),
            p(
                json!({"name": "test_prompt_with_arguments", "description": "A prompt with arguments", "arguments": [
                {"name": "arg1", "description": "First test argument", "required": true},
                {"name": "arg2", "description": "Second test argument", "required": true}]}),
            ),
            p(
                json!({"name": "test_prompt_with_embedded_resource", "description": "A prompt with a resource", "arguments": [
                {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]}),
            ),
            p(json!({"name": "test_prompt_with_image", "description": "A prompt with an image"})),
            p(
                json!({"name": mrtr::PROMPT, "description": "Asks for its context first (SEP-2322)"}),
            ),
            p(
                json!({"name": "test_prompt_with_elicitation", "description": "Asks the user while it is being fetched (older protocols)", "arguments": [
                {"name": "message", "description": "The question", "required": true}]}),
            ),
        ]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name == mrtr::PROMPT {
            return Ok(mrtr::prompt(request.input_responses.as_ref()));
        }
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let messages = match request.name.as_str() {
            "test_prompt_with_elicitation" if !is_modern(&context) => {
                let asked = from(json!({"mode": "form", "message": arg("message"),
                    "requestedSchema": {"type": "object", "properties": {
                        "username": {"type": "string", "description": "User's response"}}}}));
                let answer = match context.peer.create_elicitation(asked).await {
                    Ok(a) => serde_json::to_value(a).unwrap_or_default(),
                    Err(e) => {
                        return Err(ErrorData::internal_error(
                            format!("input request failed: {e}"),
                            None,
                        ));
                    }
                };
                json!([{"role": "user", "content": {"type": "text", "text": format!("User response: {answer}")}}])
            }
            "test_simple_prompt" => {
                json!([{"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}])
            }
            "test_prompt_with_arguments" => json!([{"role": "user", "content": {"type": "text",
                "text": format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2"))}}]),
            "test_prompt_with_embedded_resource" => json!([
                {"role": "user", "content": {"type": "resource", "resource": {"uri": arg("resourceUri"), "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
                {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
            ]),
            "test_prompt_with_image" => json!([
                {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
            ]),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt {other}"),
                    None,
                ));
            }
        };
        Ok(GetPromptResponse::Complete(from::<GetPromptResult>(
            json!({"messages": messages, "resultType": "complete"}),
        )))
    }

    async fn complete(
        &self,
        _r: CompleteRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Ok(from(
            json!({"completion": {"values": ["paris", "park", "party"], "total": 3, "hasMore": false}}),
        ))
    }

    async fn set_level(
        &self,
        _r: SetLevelRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--http") {
        Some(i) => {
            use rmcp::transport::streamable_http_server::{
                StreamableHttpServerConfig, StreamableHttpService,
                session::local::LocalSessionManager,
            };
            let addr: std::net::SocketAddr = args
                .get(i + 1)
                .ok_or_else(|| anyhow::anyhow!("--http needs an address"))?
                .parse()?;
            let service = StreamableHttpService::new(
                || Ok(Fixture),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind(addr).await?;
            axum::serve(listener, router).await?;
        }
        None => {
            let running = Fixture.serve(rmcp::transport::stdio()).await?;
            running.waiting().await?;
        }
    }
    Ok(())
}
