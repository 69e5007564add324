//! Sources on 2026-07-28: airlock negotiates the newest protocol a source
//! speaks, and a source's `input_required` reaches each kind of client in
//! its own terms — an older client as requests mid-call, a 2026-07-28
//! client under airlock's own seal, whose retry continues the decided call
//! and can be made into nothing else.

use std::sync::{Arc, Mutex};

use airlock_testkit::{Scratch, first_text};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, InputRequiredResult, InputResponses,
    ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, RequestContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ClientServiceExt};
use serde_json::{Value, json};

const SOURCES: &str = r#"
[sources.c]
command = "{conformance}"

[sources.old]
command = "{conformance}"
protocol = "legacy"
"#;

const ROUNDS: &str = "c__test_input_rounds";

/// An older client whose person answers each question with the next answer.
#[derive(Clone)]
struct Person {
    answers: Arc<Mutex<Vec<&'static str>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(caps, Implementation::new("modern-test", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let message = serde_json::to_value(&request).unwrap()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.asked.lock().unwrap().push(message.clone());
        let mut answers = self.answers.lock().unwrap();
        assert!(
            !answers.is_empty(),
            "asked when no question was expected: {message}"
        );
        let answer = answers.remove(0);
        // Under both names the fixture's questions use.
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ "answer": answer, "context": answer })))
    }
}

#[tokio::test]
async fn each_source_speaks_the_newest_protocol_it_offers_unless_pinned() {
    let scratch = Scratch::new();
    // `raw` answers `server/discover` with "method not found" and agrees
    // to whatever version `initialize` asks for: it gets the handshake's
    // own newest, never 2026-07-28 (which only discovery reaches).
    let config = scratch
        .reviewed_config(&format!(
            "{SOURCES}\n[sources.raw]\ncommand = \"{{fixture}}\"\n"
        ))
        .await;
    let report = scratch.doctor(&config).await;
    assert!(
        report.contains("ok    source raw: protocol 2025-11-25"),
        "{report}"
    );
    assert!(
        report.contains("ok    source c: protocol 2026-07-28"),
        "{report}"
    );
    assert!(
        report.contains("ok    source old: protocol 2025-"),
        "{report}"
    );

    // A protocol airlock does not speak is a config error that says what would do.
    for wrong in ["2026", "latest", "Legacy", ""] {
        let bad = scratch.config(&format!(
            "[sources.c]\ncommand = \"{{conformance}}\"\nprotocol = \"{wrong}\"\n"
        ));
        let out = scratch
            .airlock(&["doctor", "--config", &bad.to_string_lossy()])
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let said = format!("{stdout}{stderr}");
        assert!(!out.status.success(), "{said}");
        assert!(said.contains("sources.c.protocol"), "{said}");
        assert!(said.contains("\"2026-07-28\""), "{said}");
    }
}

/// An older client cannot take `input_required`: it is asked each of the
/// source's questions as an elicitation while the call waits, round after
/// round, and gets the call's final answer.
#[tokio::test]
async fn an_older_client_answers_a_2026_sources_questions_as_requests() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(SOURCES).await;
    let person = Person {
        answers: Arc::new(Mutex::new(vec!["red", "blue"])),
        asked: Arc::default(),
    };
    let client = scratch.stdio_client(&config, person.clone()).await;
    listed(&client, ROUNDS).await;
    let result = client
        .call_tool(CallToolRequestParams::new(ROUNDS))
        .await
        .unwrap();
    assert_eq!(first_text(&result), "answers: red, blue");
    assert_eq!(
        *person.asked.lock().unwrap(),
        ["Question 1?", "Question 2?"]
    );
    client.cancel().await.unwrap();
}

async fn modern_client(scratch: &Scratch, url: &str) -> RunningService<RoleClient, ClientConfig> {
    let caps: ClientCapabilities =
        serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
    ClientConfig::new(caps, Implementation::new("modern-test", "1"))
        .serve_with_lifecycle(
            scratch.http_transport(url),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap()
}

fn retry(
    tool: &str,
    arguments: Value,
    state: Option<String>,
    answers: &[(&str, &str)],
) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_string())
        .with_arguments(arguments.as_object().unwrap().clone());
    p.request_state = state;
    if !answers.is_empty() {
        let mut r = InputResponses::new();
        for (key, answer) in answers {
            r.insert(
                key.to_string(),
                json!({"action": "accept", "content": {"answer": answer}}),
            );
        }
        p.input_responses = Some(r);
    }
    p
}

fn input_required(response: CallToolResponse) -> InputRequiredResult {
    match response {
        CallToolResponse::InputRequired(r) => r,
        other => panic!("expected input_required, got {other:?}"),
    }
}

/// A 2026-07-28 client gets the source's questions under airlock's seal.
/// The seal opens once, for the same tool and arguments; anything else —
/// altered, replayed, made up, the source's own state, another tool, other
/// arguments — is refused and runs nothing. The call is decided once.
#[tokio::test]
async fn a_2026_client_continues_a_2026_sources_call_under_airlocks_seal() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(SOURCES).await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let client = modern_client(&scratch, &url).await;
    listed(&client, ROUNDS).await;
    let args = json!({});
    let call = |p: CallToolRequestParams| client.call_tool_once(p);

    let first = input_required(call(retry(ROUNDS, args.clone(), None, &[])).await.unwrap());
    let asked = serde_json::to_value(&first.input_requests).unwrap();
    assert_eq!(asked["q1"]["params"]["message"], "Question 1?", "{asked}");
    let state = first.request_state.clone().unwrap();
    assert!(state.starts_with("airlock-continue."), "{state}");
    assert!(
        !state.contains("fixture:"),
        "the source's state shows: {state}"
    );

    // Answers sent with a fresh call reach the source (a stateless source
    // may take them); this one wants its own state back with them, and
    // says so. Under airlock's own keys they never reach it: it asks.
    let elicit = |answers: &[(&str, &str)]| {
        retry(
            "c__test_elicitation",
            json!({"message": "Your name?"}),
            None,
            answers,
        )
    };
    let passed = call(elicit(&[("q1", "yes")])).await.unwrap();
    let CallToolResponse::Complete(passed) = passed else {
        panic!("the source should have judged the answer itself: {passed:?}");
    };
    assert!(
        first_text(&passed).contains("did not come back unchanged"),
        "{passed:?}"
    );
    for reserved in ["airlock-approval", "airlock-input", "airlock"] {
        let asked = call(elicit(&[(reserved, "yes")])).await.unwrap();
        let asked = input_required(asked);
        assert!(
            asked
                .request_state
                .unwrap()
                .starts_with("airlock-continue.")
        );
    }

    let refused = |e: rmcp::ServiceError| e.to_string();
    let fresh = || async {
        let r = input_required(call(retry(ROUNDS, json!({}), None, &[])).await.unwrap());
        r.request_state.unwrap()
    };
    // Every spelling of a state airlock did not issue, or not for this call.
    let mut altered = state.clone().into_bytes();
    let mid = altered.len() / 2;
    altered[mid] = if altered[mid] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let cases = [
        (
            "altered",
            ROUNDS,
            args.clone(),
            altered,
            "not issued by this airlock",
        ),
        (
            "the source's own",
            ROUNDS,
            args.clone(),
            "fixture:rounds:1:".to_string(),
            "not issued by this airlock",
        ),
        (
            "made up",
            ROUNDS,
            args.clone(),
            "airlock-continue.e30.AAAA".to_string(),
            "not issued by this airlock",
        ),
        (
            "another tool",
            "c__test_simple_text",
            args.clone(),
            fresh().await,
            "belongs to a call of",
        ),
        (
            "other arguments",
            ROUNDS,
            json!({"x": 1}),
            fresh().await,
            "arguments differ",
        ),
    ];
    for (why, tool, arguments, bad, expect) in cases {
        let err = call(retry(tool, arguments, Some(bad), &[("q1", "red")]))
            .await
            .map(|r| format!("{r:?}"))
            .map_err(refused)
            .expect_err(why);
        assert!(err.contains(expect), "{why}: {err}");
    }

    let second = input_required(
        call(retry(
            ROUNDS,
            args.clone(),
            Some(state.clone()),
            &[("q1", "red")],
        ))
        .await
        .unwrap(),
    );
    let asked = serde_json::to_value(&second.input_requests).unwrap();
    assert_eq!(asked["q2"]["params"]["message"], "Question 2?", "{asked}");
    // Replayed: refused, though the call it continued goes on.
    let err = call(retry(ROUNDS, args.clone(), Some(state), &[("q1", "red")]))
        .await
        .map(|r| format!("{r:?}"))
        .map_err(refused)
        .expect_err("replay");
    assert!(err.contains("already used"), "{err}");

    let state = second.request_state.clone().unwrap();
    let done = call(retry(ROUNDS, args.clone(), Some(state), &[("q2", "blue")]))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("expected the final answer, got {done:?}");
    };
    // The source saw its own state back each round (it checks), and both answers.
    assert_eq!(first_text(&result), "answers: red, blue");

    // Three calls were started (two only for their seals); each was
    // decided once, however many retries continued it.
    let out = scratch
        .airlock(&["audit", "--jsonl", "--limit", "200"])
        .output()
        .await
        .unwrap();
    let audit = String::from_utf8_lossy(&out.stdout);
    let decisions = audit
        .lines()
        .filter(|l| l.contains(ROUNDS) && l.contains("\"kind\":\"decision\""))
        .count();
    assert_eq!(decisions, 3, "{audit}");
    client.cancel().await.unwrap();
}

/// A 2026-07-28 source tells of a changed tool list only on a listen
/// stream; airlock keeps one open, so the change reaches its catalog (and
/// so its review) as it does for an older source.
#[tokio::test]
async fn a_2026_sources_list_change_is_heard() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(SOURCES).await;
    let person = Person {
        answers: Arc::default(),
        asked: Arc::default(),
    };
    let client = scratch.stdio_client(&config, person).await;
    listed(&client, "c__test_add_tool").await;
    listed(&client, "old__test_add_tool").await;
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };
    let before = names(client.list_all_tools().await.unwrap());
    assert!(
        !before.iter().any(|n| n.ends_with("test_added_tool")),
        "{before:?}"
    );
    for source in ["c", "old"] {
        let added = format!("{source}__test_added_tool");
        let result = client
            .call_tool(CallToolRequestParams::new(format!(
                "{source}__test_add_tool"
            )))
            .await
            .unwrap();
        assert!(first_text(&result).contains("added test_added_tool"));
        let mut now = Vec::new();
        for _ in 0..100 {
            now = names(client.list_all_tools().await.unwrap());
            if now.contains(&added) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(now.contains(&added), "{source}: {now:?}");
    }
    client.cancel().await.unwrap();
}

/// An older client over HTTP that notes the resource updates it is told of.
#[derive(Clone, Default)]
struct Watcher {
    updated: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Watcher {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
    }
}

/// Subscriptions are each client's own: with two clients subscribed to
/// the same resource, one unsubscribing leaves the other's in place, and
/// the update reaches the one still subscribed only — whether the source
/// hears of subscriptions by `resources/subscribe` or on its 2026-07-28
/// listen stream.
#[tokio::test]
#[allow(deprecated)] // resources/subscribe: how an older client subscribes
async fn one_clients_unsubscribe_leaves_anothers_subscription() {
    use rmcp::ServiceExt;
    use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
    const URI: &str = "test://static-text";
    for protocol in ["auto", "legacy"] {
        let scratch = Scratch::new();
        let config = scratch
            .reviewed_config(&format!(
                "[sources.c]\ncommand = \"{{conformance}}\"\nprotocol = \"{protocol}\"\n"
            ))
            .await;
        let (_hub, url) = scratch.serve_http(&config).await;
        let (a, b) = (Watcher::default(), Watcher::default());
        let client_a = a.clone().serve(scratch.http_transport(&url)).await.unwrap();
        let client_b = b.clone().serve(scratch.http_transport(&url)).await.unwrap();
        listed(&client_a, "c__test_update_resource").await;
        for client in [&client_a, &client_b] {
            client
                .subscribe(SubscribeRequestParams::new(URI))
                .await
                .unwrap();
        }
        client_a
            .unsubscribe(UnsubscribeRequestParams::new(URI))
            .await
            .unwrap();
        // A 2026-07-28 source's stream is opened again with the new set.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let announce = CallToolRequestParams::new("c__test_update_resource")
            .with_arguments(json!({"uri": URI}).as_object().unwrap().clone());
        client_a.call_tool(announce).await.unwrap();
        for _ in 0..100 {
            if !b.updated.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(*b.updated.lock().unwrap(), [URI], "{protocol}");
        // Give a misrouted copy the time the right one took, and more.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(a.updated.lock().unwrap().is_empty(), "{protocol}");
        client_a.cancel().await.unwrap();
        client_b.cancel().await.unwrap();
    }
}

/// A 2026-07-28 client hears list changes and the updates of the
/// resources it asked for on its own `subscriptions/listen` stream; a
/// resource no source offers is left out of what airlock accepts.
#[tokio::test]
async fn a_2026_client_listens_for_changes_and_updates() {
    use rmcp::model::{ServerNotification, SubscriptionFilter};
    const URI: &str = "test://static-text";
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config("[sources.c]\ncommand = \"{conformance}\"\n")
        .await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let client = modern_client(&scratch, &url).await;
    listed(&client, "c__test_update_resource").await;
    let filter = SubscriptionFilter::builder()
        .tools_list_changed()
        .resource_subscriptions([URI, "test://no-such-resource"])
        .build();
    let mut stream = client.peer().listen(filter).await.unwrap();
    assert_eq!(
        stream.acknowledged().resource_subscriptions.as_deref(),
        Some(&[URI.to_string()][..])
    );
    // The stream is acknowledged before the source's own stream takes the
    // resource in, so an update in that moment may be missed: announced
    // again until one arrives (bounded).
    let update = CallToolRequestParams::new("c__test_update_resource")
        .with_arguments(json!({"uri": URI}).as_object().unwrap().clone());
    let mut heard = None;
    for _ in 0..40 {
        client.call_tool_once(update.clone()).await.unwrap();
        let wait = std::time::Duration::from_millis(250);
        if let Ok(n) = tokio::time::timeout(wait, stream.next()).await {
            heard = Some(n.unwrap().unwrap());
            break;
        }
    }
    match heard {
        Some(ServerNotification::ResourceUpdatedNotification(n)) => assert_eq!(n.params.uri, URI),
        other => panic!("expected the update, got {other:?}"),
    }
    // Updates announced more than once may still be on their way.
    loop {
        let wait = std::time::Duration::from_millis(300);
        match tokio::time::timeout(wait, stream.next()).await {
            Ok(n) => match n.unwrap().unwrap() {
                ServerNotification::ResourceUpdatedNotification(_) => continue,
                other => panic!("expected only updates, got {other:?}"),
            },
            Err(_) => break,
        }
    }
    client
        .call_tool_once(CallToolRequestParams::new("c__test_add_tool"))
        .await
        .unwrap();
    match next(&mut stream).await {
        ServerNotification::ToolListChangedNotification(_) => {}
        other => panic!("expected the list change, got {other:?}"),
    }
    client.cancel().await.unwrap();
}

/// A 2026-07-28 client is never told a stream holds a resource it does
/// not: one from a source that offers no subscriptions is left out of the
/// acknowledgement, and one its source refuses ends the stream with the
/// source's refusal.
#[tokio::test]
async fn a_listen_stream_holds_only_the_subscriptions_its_sources_made() {
    use rmcp::model::SubscriptionFilter;
    const URI: &str = "hostile://t/1";
    for mode in ["none", "refuse"] {
        let scratch = Scratch::new();
        let config = scratch
            .reviewed_config(&format!(
                "[sources.h]\ncommand = \"{{hostile}}\"\nenv = {{ HOSTILE_SUBSCRIBE = \"{mode}\" }}\n"
            ))
            .await;
        let (_hub, url) = scratch.serve_http(&config).await;
        let client = modern_client(&scratch, &url).await;
        listed(&client, "h__len").await;
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions([URI])
            .build();
        let stream = client.peer().listen(filter).await;
        match mode {
            "none" => {
                let stream = stream.unwrap();
                let held = stream.acknowledged().resource_subscriptions.clone();
                assert!(held.as_ref().is_none_or(Vec::is_empty), "{mode}: {held:?}");
            }
            _ => {
                let mut stream = stream.unwrap();
                let held = stream.acknowledged().resource_subscriptions.clone();
                assert_eq!(held.as_deref(), Some(&[URI.to_string()][..]));
                let wait = std::time::Duration::from_secs(10);
                let end = tokio::time::timeout(wait, stream.next())
                    .await
                    .expect("the stream ends in time");
                let said = format!("{end:?}");
                assert!(
                    said.contains("was not made, so this stream ends"),
                    "{mode}: {said}"
                );
            }
        }
        client.cancel().await.unwrap();
    }
}

async fn next(stream: &mut rmcp::service::Subscription) -> rmcp::model::ServerNotification {
    let wait = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next());
    wait.await
        .expect("a notification in time")
        .unwrap()
        .unwrap()
}

/// A prompt a 2026-07-28 source answers with `input_required` works for
/// both kinds of client, as a tool does: an older client is asked mid-
/// request, a 2026-07-28 one gets airlock's seal, which opens once and for
/// that prompt only.
#[tokio::test]
async fn a_2026_sources_prompt_asks_each_client_in_its_terms() {
    use rmcp::model::{GetPromptRequestParams, GetPromptResponse};
    const PROMPT: &str = "c__test_input_required_result_prompt";
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config("[sources.c]\ncommand = \"{conformance}\"\n")
        .await;
    let text_of = |r: GetPromptResponse| match r {
        GetPromptResponse::Complete(p) => serde_json::to_value(&p.messages).unwrap()[0]["content"]
            ["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        other => panic!("expected the prompt, got {other:?}"),
    };

    let person = Person {
        answers: Arc::new(Mutex::new(vec!["the garden"])),
        asked: Arc::default(),
    };
    let older = scratch.stdio_client(&config, person.clone()).await;
    listed(&older, "c__test_simple_text").await;
    let got = older
        .get_prompt_once(GetPromptRequestParams::new(PROMPT))
        .await
        .unwrap();
    assert!(text_of(got).contains("the garden"));
    assert_eq!(
        *person.asked.lock().unwrap(),
        ["What context should the prompt use?"]
    );
    older.cancel().await.unwrap();

    let (_hub, url) = scratch.serve_http(&config).await;
    let client = modern_client(&scratch, &url).await;
    listed(&client, "c__test_simple_text").await;
    let asked = match client
        .get_prompt_once(GetPromptRequestParams::new(PROMPT))
        .await
        .unwrap()
    {
        GetPromptResponse::InputRequired(a) => a,
        other => panic!("expected input_required, got {other:?}"),
    };
    let state = asked.request_state.unwrap();
    assert!(state.starts_with("airlock-continue."), "{state}");
    let retry = |name: &str, state: &str| {
        let mut p = GetPromptRequestParams::new(name);
        p.request_state = Some(state.to_string());
        let mut r = InputResponses::new();
        r.insert(
            "user_context".into(),
            json!({"action": "accept", "content": {"context": "the shed"}}),
        );
        p.input_responses = Some(r);
        p
    };
    // Another prompt's, an altered or a made-up state: refused.
    for (name, bad) in [
        ("c__test_simple_prompt", state.clone()),
        (PROMPT, format!("{state}x")),
        (PROMPT, "their-own-state".to_string()),
    ] {
        let err = client
            .get_prompt_once(retry(name, &bad))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("belongs to") || err.contains("not issued by this airlock"),
            "{name} {bad}: {err}"
        );
    }
    // The first of those spent the seal: a state is good for one retry.
    let err = client
        .get_prompt_once(retry(PROMPT, &state))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already used"), "{err}");
    let asked = match client
        .get_prompt_once(GetPromptRequestParams::new(PROMPT))
        .await
        .unwrap()
    {
        GetPromptResponse::InputRequired(a) => a,
        other => panic!("expected input_required, got {other:?}"),
    };
    let done = client
        .get_prompt_once(retry(PROMPT, &asked.request_state.unwrap()))
        .await
        .unwrap();
    assert!(text_of(done).contains("the shed"));
    client.cancel().await.unwrap();
}

/// Waits (bounded) until airlock lists `tool`: on a loaded machine a source
/// may still be starting when the first answer is due, and airlock does
/// not hold a client up for it (it lists the tools when they come).
async fn listed<S: rmcp::Service<RoleClient>>(client: &RunningService<RoleClient, S>, tool: &str) {
    for _ in 0..300 {
        let tools = client.list_all_tools().await.unwrap();
        if tools.iter().any(|t| t.name == tool) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("airlock never listed `{tool}`");
}

/// A 2026-07-28 source that needs a capability the client did not declare
/// says so with `-32021`; airlock tells the source what the client
/// declared, and passes the refusal on with its code (HTTP 400 on the
/// HTTP face), rather than turning it into a tool failure.
#[tokio::test]
async fn a_missing_client_capability_passes_through_with_its_code() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(SOURCES).await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let client = modern_client(&scratch, &url).await;
    listed(&client, "c__test_requires_sampling").await;
    let err = client
        .call_tool_once(CallToolRequestParams::new("c__test_requires_sampling"))
        .await
        .expect_err("the client declared no sampling");
    let rmcp::ServiceError::McpError(e) = err else {
        panic!("expected a JSON-RPC error, got {err:?}");
    };
    assert_eq!(
        e.code,
        rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        "{e:?}"
    );
    assert!(e.message.contains("sampling"), "{e:?}");
    client.cancel().await.unwrap();

    // A client that declared it gets the tool's answer.
    let caps: ClientCapabilities = serde_json::from_value(json!({"sampling": {}})).unwrap();
    let sampler = ClientConfig::new(caps, Implementation::new("sampler", "1"))
        .serve_with_lifecycle(
            scratch.http_transport(&url),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let ok = sampler
        .call_tool_once(CallToolRequestParams::new("c__test_requires_sampling"))
        .await
        .unwrap();
    let CallToolResponse::Complete(ok) = ok else {
        panic!("{ok:?}");
    };
    assert!(first_text(&ok).contains("declared sampling"), "{ok:?}");
    sampler.cancel().await.unwrap();
}

/// An older source that asks while a 2026-07-28 client's prompt is being
/// fetched gets a refusal that says why; the request reaches no other
/// client.
#[tokio::test]
async fn an_older_sources_question_during_a_2026_clients_prompt_is_refused_with_the_reason() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config("[sources.old]\ncommand = \"{conformance}\"\nprotocol = \"legacy\"\n")
        .await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let client = modern_client(&scratch, &url).await;
    listed(&client, "old__test_simple_text").await;
    let mut params = rmcp::model::GetPromptRequestParams::new("old__test_prompt_with_elicitation");
    params.arguments = json!({"message": "anyone?"}).as_object().cloned();
    let refused = client.get_prompt(params).await.unwrap_err().to_string();
    assert!(
        refused.contains("cannot be asked in the middle of one"),
        "{refused}"
    );
    client.cancel().await.unwrap();
}

/// However fast a client subscribes and unsubscribes, a 2026-07-28 source
/// is asked to open a listen stream at most every 250 ms, and the stream
/// ends up holding what the client holds last.
#[tokio::test]
#[allow(deprecated)] // resources/subscribe: what an older client sends
async fn subscribing_in_a_loop_does_not_make_a_2026_source_reopen_its_stream_each_time() {
    const URI: &str = "test://static-text";
    let scratch = Scratch::new();
    let log = scratch.dir.path().join("listens.log");
    let config = scratch
        .reviewed_config(&format!(
            "[sources.c]\ncommand = \"{{conformance}}\"\nenv = {{ FIXTURE_LISTEN_LOG = {:?} }}\n",
            log.to_string_lossy()
        ))
        .await;
    let watcher = Watcher::default();
    let client = scratch.stdio_client(&config, watcher.clone()).await;
    listed(&client, "c__test_update_resource").await;
    let began = std::time::Instant::now();
    for i in 0..41 {
        let uri = URI.to_string();
        match i % 2 {
            0 => client
                .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
                .await
                .unwrap(),
            _ => client
                .unsubscribe(rmcp::model::UnsubscribeRequestParams::new(uri))
                .await
                .unwrap(),
        }
    }
    // Subscribed at the end: an update reaches the client.
    let update = CallToolRequestParams::new("c__test_update_resource")
        .with_arguments(json!({"uri": URI}).as_object().unwrap().clone());
    for _ in 0..40 {
        client.call_tool(update.clone()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if !watcher.updated.lock().unwrap().is_empty() {
            break;
        }
    }
    assert_eq!(watcher.updated.lock().unwrap()[0], URI);
    let elapsed = began.elapsed();
    let opened = std::fs::read_to_string(&log).unwrap().lines().count();
    // One stream at the start, then at most one per 250 ms.
    let bound = 2 + (elapsed.as_millis() / 250) as usize;
    assert!(
        opened <= bound,
        "{opened} streams opened in {elapsed:?} for 41 changes (at most {bound})"
    );
    client.cancel().await.unwrap();
}
