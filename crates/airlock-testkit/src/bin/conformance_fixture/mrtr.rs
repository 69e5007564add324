//! The 2026-07-28 scenarios of input requests (SEP-2322) in the suite's
//! 0.2.0-alpha line: tools (and one prompt) that end with `input_required`
//! and complete on the retry that brings the answers. States are handles
//! the fixture issued (a made-up or altered one is refused), so the
//! fixture can tell its own state came back unchanged.

use std::collections::{BTreeMap, HashSet};
use std::sync::{LazyLock, Mutex};

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, GetPromptResponse,
    GetPromptResult, InputRequest, InputRequiredResult,
};
use serde_json::{Value, json};

use super::{from, text};

/// The names of the scenario tools, for the list.
pub(crate) const TOOLS: [&str; 8] = [
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
];
pub(crate) const PROMPT: &str = "test_input_required_result_prompt";

/// States this fixture issued and that are still good.
static ISSUED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

fn issue(kind: &str) -> String {
    let n: u64 = rand_u64();
    let state = format!("fixture-state:{kind}:{n:016x}");
    ISSUED.lock().unwrap().insert(state.clone());
    state
}

/// Whether `state` is one this fixture issued for `kind` (spent if so).
fn redeem(state: Option<&str>, kind: &str) -> bool {
    let Some(state) = state else { return false };
    state.starts_with(&format!("fixture-state:{kind}:")) && ISSUED.lock().unwrap().remove(state)
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

fn elicit(message: &str, field: &str, kind: &str) -> InputRequest {
    from(json!({"method": "elicitation/create", "params": {
        "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    }}))
}

fn sample(question: &str, max_tokens: u32) -> InputRequest {
    from(json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
        "maxTokens": max_tokens
    }}))
}

fn roots() -> InputRequest {
    from(json!({"method": "roots/list", "params": {}}))
}

fn asking(requests: Vec<(&str, InputRequest)>, state: Option<String>) -> InputRequiredResult {
    let requests: BTreeMap<String, InputRequest> = requests
        .into_iter()
        .map(|(k, r)| (k.to_string(), r))
        .collect();
    InputRequiredResult::new(Some(requests), state)
}

/// An accepted elicitation's `field`, if the answer is one.
fn accepted<'a>(answer: Option<&'a Value>, field: &str) -> Option<&'a Value> {
    let answer = answer?;
    (answer["action"] == "accept").then_some(())?;
    answer["content"].get(field)
}

pub(crate) fn call(
    request: &CallToolRequestParams,
    client: Option<ClientCapabilities>,
) -> Result<CallToolResponse, ErrorData> {
    let answers = request.input_responses.clone().unwrap_or_default();
    let answer = |key: &str| answers.get(key);
    let state = request.request_state.as_deref();
    let ask = |requests, state| Ok(CallToolResponse::InputRequired(asking(requests, state)));
    match request.name.as_ref() {
        "test_input_required_result_elicitation" => {
            match accepted(answer("user_name"), "name").and_then(Value::as_str) {
                Some(name) => Ok(text(&format!("Hello, {name}!"))),
                // Missing, wrong or malformed: asked again.
                None => ask(
                    vec![("user_name", elicit("What is your name?", "name", "string"))],
                    None,
                ),
            }
        }
        "test_input_required_result_sampling" => {
            match answer("capital_question").and_then(|a| a["content"]["text"].as_str()) {
                Some(said) => Ok(text(&format!("The model said: {said}"))),
                None => ask(
                    vec![(
                        "capital_question",
                        sample("What is the capital of France?", 100),
                    )],
                    None,
                ),
            }
        }
        "test_input_required_result_list_roots" => {
            match answer("client_roots").and_then(|a| a["roots"].as_array()) {
                Some(roots) => {
                    let uris: Vec<&str> = roots.iter().filter_map(|r| r["uri"].as_str()).collect();
                    Ok(text(&format!("Roots: {}", uris.join(", "))))
                }
                None => ask(vec![("client_roots", roots())], None),
            }
        }
        "test_input_required_result_request_state" => {
            if answer("confirm").is_some() {
                if !redeem(state, "request_state") {
                    return Err(ErrorData::invalid_params(
                        "requestState is not one this server issued",
                        None,
                    ));
                }
                return Ok(text("state-ok: confirmed"));
            }
            ask(
                vec![("confirm", elicit("Please confirm", "ok", "boolean"))],
                Some(issue("request_state")),
            )
        }
        "test_input_required_result_multiple_inputs" => {
            let all = ["user_name", "greeting", "client_roots"]
                .iter()
                .all(|k| answer(k).is_some());
            if all {
                if !redeem(state, "multiple") {
                    return Err(ErrorData::invalid_params(
                        "requestState is not one this server issued",
                        None,
                    ));
                }
                return Ok(text("all inputs received"));
            }
            ask(
                vec![
                    ("user_name", elicit("What is your name?", "name", "string")),
                    ("greeting", sample("Generate a greeting", 50)),
                    ("client_roots", roots()),
                ],
                Some(issue("multiple")),
            )
        }
        "test_input_required_result_multi_round" => {
            if answer("step2").is_some() && redeem(state, "round2") {
                return Ok(text("multi-round complete"));
            }
            if answer("step1").is_some() && redeem(state, "round1") {
                return ask(
                    vec![(
                        "step2",
                        elicit("Step 2: What is your favorite color?", "color", "string"),
                    )],
                    Some(issue("round2")),
                );
            }
            ask(
                vec![(
                    "step1",
                    elicit("Step 1: What is your name?", "name", "string"),
                )],
                Some(issue("round1")),
            )
        }
        "test_input_required_result_tampered_state" => {
            if state.is_some() {
                if !redeem(state, "tamper") {
                    return Err(ErrorData::invalid_params(
                        "requestState failed its integrity check",
                        None,
                    ));
                }
                return Ok(text("state verified"));
            }
            ask(
                vec![("confirm", elicit("Please confirm", "ok", "boolean"))],
                Some(issue("tamper")),
            )
        }
        "test_input_required_result_capabilities" => {
            let caps = client.unwrap_or_default();
            let mut requests = Vec::new();
            if caps.elicitation.is_some() {
                requests.push(("user_name", elicit("What is your name?", "name", "string")));
            }
            if caps.sampling.is_some() {
                requests.push(("greeting", sample("Generate a greeting", 50)));
            }
            if requests.is_empty() || requests.iter().all(|(k, _)| answer(k).is_some()) {
                return Ok(text("nothing more to ask"));
            }
            ask(requests, None)
        }
        other => Err(ErrorData::invalid_params(
            format!("unknown tool {other}"),
            None,
        )),
    }
}

/// `test_input_required_result_prompt`: asks for the context first.
pub(crate) fn prompt(answers: Option<&BTreeMap<String, Value>>) -> GetPromptResponse {
    match accepted(answers.and_then(|a| a.get("user_context")), "context").and_then(Value::as_str) {
        Some(context) => GetPromptResponse::Complete(from::<GetPromptResult>(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": format!("Use this context: {context}")}}],
            "resultType": "complete"
        }))),
        None => GetPromptResponse::InputRequired(asking(
            vec![(
                "user_context",
                elicit("What context should the prompt use?", "context", "string"),
            )],
            None,
        )),
    }
}
