//! The gateway end to end: the real airlock binary between an rmcp client
//! and real upstream processes (the shipped demo and a fixture that
//! misbehaves on request).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_testkit::{RawStdio, Scratch, call, first_text};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, ProgressNotificationParam, ReadResourceRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData};
use serde_json::json;

const TWO_SOURCES: &str = r#"
[hub]
call_timeout = "2s"
max_message_bytes = 65536

[sources.demo]
command = "{airlock}"
args = ["demo-server"]

[sources.fixture]
command = "{fixture}"
"#;

#[derive(Clone, Default)]
struct Client {
    elicitation: bool,
    tool_list_changes: Arc<Mutex<u32>>,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities = if self.elicitation {
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("gateway-test", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let asked = serde_json::to_value(&request).unwrap();
        assert_eq!(asked["message"], "What is your favourite colour?");
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"colour": "teal"})))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        *self.tool_list_changes.lock().unwrap() += 1;
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}
#[tokio::test]
async fn every_source_is_listed_under_its_prefix() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for expected in ["demo__read_note", "demo__delete_note", "fixture__echo"] {
        assert!(names.contains(&expected.to_string()), "{names:?}");
    }
    assert!(names.iter().all(|n| {
        n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }));
    // An upstream name that cannot be exposed as-is is withheld, not mangled.
    assert!(!names.iter().any(|n| n.contains("bad")), "{names:?}");
    // Annotations pass through untouched.
    let read = tools.iter().find(|t| t.name == "demo__read_note").unwrap();
    assert_eq!(
        read.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    // Resources and prompts too.
    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(resources[0].name, "demo__index");
    let read = client
        .read_resource(ReadResourceRequestParams::new("notes://index"))
        .await
        .unwrap();
    assert!(serde_json::to_string(&read).unwrap().contains("welcome"));
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts[0].name, "demo__tidy_notes");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn calls_reach_the_right_source_and_are_logged() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    let r = client
        .call_tool(call("demo__read_note", json!({"name": "welcome"})))
        .await
        .unwrap();
    assert!(first_text(&r).contains("Reads flow"));
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "hello"})))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "hello");
    client.cancel().await.unwrap();
    // Give airlock a moment to flush and exit after stdin closes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = scratch.airlock(&["status"]).output().await.unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("fixture__echo"), "{status}");
    assert!(status.contains("demo__read_note"), "{status}");
}

#[tokio::test]
async fn unknown_tool_error_names_the_closest_matches() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    let err = client
        .call_tool(call("demo__reed_note", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown tool `demo__reed_note`"), "{err}");
    assert!(err.contains("`demo__read_note`"), "{err}");
    let err = client
        .call_tool(call("nosuch__thing", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no source `nosuch`"), "{err}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn hung_upstream_ends_within_its_timeout_and_others_carry_on() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    let hang = client.call_tool(call("fixture__hang", json!({})));
    let read = client.call_tool(call("demo__list_notes", json!({})));
    let started = std::time::Instant::now();
    let (hang, read) = tokio::join!(hang, read);
    let hang = hang.unwrap();
    assert_eq!(hang.is_error, Some(true));
    assert!(
        first_text(&hang).contains("did not answer within 2"),
        "{}",
        first_text(&hang)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(first_text(&read.unwrap()).contains("welcome"));
    // The source itself is still usable.
    let echo = client
        .call_tool(call("fixture__echo", json!({"text": "still here"})))
        .await
        .unwrap();
    assert_eq!(first_text(&echo), "still here");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn upstream_that_dies_mid_call_gives_a_clear_error_and_comes_back() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    let r = client
        .call_tool(call("fixture__crash", json!({})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(
        first_text(&r).contains("closed the connection"),
        "{}",
        first_text(&r)
    );
    // It restarts with backoff; within a few seconds it answers again.
    let mut answered = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let r = client
            .call_tool(call("fixture__echo", json!({"text": "back"})))
            .await
            .unwrap();
        if first_text(&r) == "back" {
            answered = true;
            break;
        }
    }
    assert!(answered, "the crashed source did not restart");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn garbage_oversized_and_lying_answers_end_the_call_with_an_error() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    for (tool, args) in [
        ("fixture__garbage", json!({})),
        ("fixture__oversized", json!({"bytes": 200000})),
        ("fixture__lie", json!({})),
    ] {
        let r = client.call_tool(call(tool, args)).await;
        match r {
            Ok(r) => assert_eq!(r.is_error, Some(true), "{tool}: {r:?}"),
            Err(e) => assert!(!e.to_string().is_empty(), "{tool}"),
        }
    }
    let echo = client
        .call_tool(call("fixture__echo", json!({"text": "fine"})))
        .await
        .unwrap();
    assert_eq!(first_text(&echo), "fine");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_failing_source_does_not_block_the_others() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config_with_failing(
            r#"
[sources.demo]
command = "{airlock}"
args = ["demo-server"]

[sources.broken]
command = "{fixture}"
env = { FIXTURE_CRASH_ON_START = "1" }

[sources.missing]
command = "/nonexistent/airlock-test-program"
"#,
            &["broken", "missing"],
        )
        .await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    let r = client
        .call_tool(call("demo__list_notes", json!({})))
        .await
        .unwrap();
    assert!(first_text(&r).contains("welcome"));
    let err = client
        .call_tool(call("missing__anything", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("program not found"), "{err}");
    client.cancel().await.unwrap();
    let out = scratch.airlock(&["status"]).output().await.unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("broken"), "{status}");
    assert!(
        status.contains("crashing on start") || status.contains("exited"),
        "{status}"
    );
}

#[tokio::test]
async fn elicitation_reaches_the_client_and_the_answer_goes_back() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let handler = Client {
        elicitation: true,
        ..Client::default()
    };
    let client = scratch.stdio_client(&config, handler).await;
    let r = client
        .call_tool(call("fixture__elicit", json!({})))
        .await
        .unwrap();
    let text = first_text(&r);
    assert!(text.contains("action=accept"), "{text}");
    assert!(text.contains("teal"), "{text}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn elicitation_to_a_client_without_the_capability_is_refused() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    let r = client
        .call_tool(call("fixture__elicit", json!({})))
        .await
        .unwrap();
    let text = first_text(&r);
    assert!(text.contains("does not support elicitation"), "{text}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn progress_reaches_the_client_under_its_own_token() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let mut raw = RawStdio::start(&scratch, &config);
    raw.handshake("2025-06-18").await;
    raw.send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "fixture__progress", "arguments": {}, "_meta": {"progressToken": "mine-1"}
        }}),
    )
    .await;
    let (result, before) = raw.response(5).await;
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    // The upstream saw airlock's own token, never the client's.
    assert!(!text.contains("mine-1"), "{text}");
    let progress: Vec<_> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{before:?}");
    for p in progress {
        assert_eq!(p["params"]["progressToken"], "mine-1");
    }
}

#[tokio::test]
async fn malformed_json_rpc_gets_an_error_and_the_hub_stays_up() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let mut raw = RawStdio::start(&scratch, &config);
    raw.handshake("2025-06-18").await;
    raw.send_line("{not json").await;
    let m = raw.recv().await;
    assert_eq!(m["error"]["code"], -32700, "{m}");
    raw.send(json!({"jsonrpc": "2.0", "id": 9, "method": 17}))
        .await;
    let m = raw.recv().await;
    assert_eq!(m["error"]["code"], -32600, "{m}");
    assert_eq!(m["id"], 9);
    raw.send(json!({"jsonrpc": "2.0", "id": 10, "method": "no/such/method"}))
        .await;
    let (m, _) = raw.response(10).await;
    assert_eq!(m["error"]["code"], -32601, "{m}");
    raw.send(json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "fixture__echo", "arguments": {"text": "alive"}}})).await;
    let (m, _) = raw.response(11).await;
    assert_eq!(
        airlock_testkit::unquote(m["result"]["content"][0]["text"].as_str().unwrap()),
        "alive"
    );
}

#[tokio::test]
async fn list_changed_propagates_and_the_new_tool_is_callable() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let handler = Client::default();
    let changes = handler.tool_list_changes.clone();
    let client = scratch.stdio_client(&config, handler).await;
    client
        .call_tool(call("fixture__change", json!({})))
        .await
        .unwrap();
    let mut listed = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tools = client.list_all_tools().await.unwrap();
        if tools.iter().any(|t| t.name == "fixture__added_later") {
            listed = true;
            break;
        }
    }
    assert!(listed, "the new tool never appeared");
    assert!(
        *changes.lock().unwrap() >= 1,
        "no list_changed reached the client"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn stdio_sources_see_only_a_minimal_environment() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(
            r#"
[sources.fixture]
command = "{fixture}"
env = { GIVEN_BY_CONFIG = "yes" }
"#,
        )
        .await;
    let cmd_env = ("AIRLOCK_TEST_PRIVATE", "must-not-leak");
    let mut cmd = scratch.airlock(&["serve", "--config", &config.to_string_lossy()]);
    cmd.env(cmd_env.0, cmd_env.1);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let client = rmcp::ServiceExt::serve(Client::default(), transport)
        .await
        .unwrap();
    let r = client
        .call_tool(call("fixture__env", json!({})))
        .await
        .unwrap();
    let names = first_text(&r);
    assert!(names.split(',').any(|n| n == "GIVEN_BY_CONFIG"), "{names}");
    assert!(names.split(',').any(|n| n == "PATH"), "{names}");
    assert!(!names.contains("AIRLOCK_TEST_PRIVATE"), "{names}");
    assert!(!names.contains("AIRLOCK_HOME"), "{names}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn client_cancellation_reaches_the_source() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(TWO_SOURCES).await;
    let mut raw = RawStdio::start(&scratch, &config);
    raw.handshake("2025-06-18").await;
    raw.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "fixture__hang", "arguments": {}}}))
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    raw.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "the user pressed stop"}}),
    )
    .await;
    // The source hears of it as its own request being cancelled.
    let mut heard = String::new();
    for i in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        raw.send(
            json!({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
            "params": {"name": "fixture__calls", "arguments": {}}}),
        )
        .await;
        let (m, _) = raw.response(100 + i).await;
        heard = m["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if heard.contains("cancelled:") {
            break;
        }
    }
    assert!(heard.contains("hang,cancelled:"), "{heard}");
}

/// A source that never finishes its handshake does not keep the client
/// waiting: `initialize` is answered while it still starts (here its
/// timeout is a minute), the ready source's tools are listed, and the
/// instructions say what is still starting.
#[tokio::test]
async fn a_hanging_source_does_not_hold_up_the_first_answer() {
    let scratch = Scratch::new();
    let sources = "[sources.fixture]\ncommand = \"{fixture}\"\n\n[sources.slow]\ncommand = \"sleep\"\nargs = [\"600\"]\n";
    // The review waits for the slow source only briefly; the hub, a minute.
    scratch
        .reviewed_config_with_failing(
            &format!("[hub]\nconnect_timeout = \"2s\"\n\n{sources}"),
            &["slow"],
        )
        .await;
    let config = scratch.config(&format!(
        "[hub]\nconnect_timeout = \"60s\"\n\n{sources}\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n"
    ));
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, std::process::Stdio::null());
    let init = tokio::time::timeout(Duration::from_secs(20), raw.handshake("2025-06-18"))
        .await
        .expect("initialize answered while a source still starts");
    let said = init["result"]["instructions"].as_str().unwrap_or_default();
    assert!(said.contains("Still starting: source `slow`"), "{init}");
    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}))
        .await;
    let (tools, _) = raw.response(2).await;
    assert!(tools.to_string().contains("fixture__echo"), "{tools}");
}

/// A freshly imported config: nothing reviewed yet. The client is told so
/// at first contact, not only on airlock's stderr.
#[tokio::test]
async fn the_first_answer_says_what_waits_for_review() {
    let scratch = Scratch::new();
    let config = scratch.config("[sources.fixture]\ncommand = \"{fixture}\"\n");
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, std::process::Stdio::null());
    let init = raw.handshake("2025-06-18").await;
    let said = init["result"]["instructions"].as_str().unwrap_or_default();
    assert!(
        said.contains("Not started until the user reviews its command: source `fixture`"),
        "{init}"
    );
    drop(raw);
    scratch.approve_commands(&config, &["fixture"]).await;
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, std::process::Stdio::null());
    let init = raw.handshake("2025-06-18").await;
    let said = init["result"]["instructions"].as_str().unwrap_or_default();
    assert!(
        said.contains("have not been reviewed by the user yet"),
        "{init}"
    );
    drop(raw);
    scratch.review(&config).await;
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, std::process::Stdio::null());
    let init = raw.handshake("2025-06-18").await;
    assert!(
        init["result"].get("instructions").is_none(),
        "nothing waits: {init}"
    );
}

/// What people read: `audit` in local time with columns that stay aligned
/// whatever the names, `status --calls N` showing N calls (not records),
/// `--jsonl` with an ISO time, and no colour when stderr is no terminal.
#[tokio::test]
async fn audit_and_status_read_as_times_and_aligned_calls() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(
            r#"
[sources.demo]
command = "{airlock}"
args = ["demo-server"]

[sources.a-source-with-a-long-name-indeed]
command = "{fixture}"
"#,
        )
        .await;
    let client = scratch.stdio_client(&config, Client::default()).await;
    for (tool, args) in [
        ("demo__read_note", json!({"name": "welcome"})),
        (
            "a-source-with-a-long-name-indeed__echo",
            json!({"text": "hi"}),
        ),
        ("demo__read_note", json!({"name": "welcome"})),
    ] {
        client.call_tool(call(tool, args)).await.unwrap();
    }
    client.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let out = scratch.airlock(&["audit"]).output().await.unwrap();
    let audit = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = audit.lines().collect();
    assert!(lines.len() >= 6, "{audit}");
    // `#seq  YYYY-MM-DD HH:MM:SS  tool  decision|outcome …`, the last
    // column starting at the same place on every line.
    let starts: Vec<usize> = lines
        .iter()
        .map(|l| {
            l.find("decision ")
                .or_else(|| l.find("outcome "))
                .unwrap_or_else(|| panic!("{l}"))
        })
        .collect();
    assert!(starts.iter().all(|s| *s == starts[0]), "{audit}");
    for l in &lines {
        let when = l.split("  ").nth(1).unwrap_or("");
        assert!(
            when.len() == 19 && when.as_bytes()[4] == b'-' && when.as_bytes()[13] == b':',
            "{l}"
        );
        assert!(!l.contains("[ "), "{l}");
    }

    let out = scratch
        .airlock(&["audit", "--jsonl", "--limit", "1"])
        .output()
        .await
        .unwrap();
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        line["at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.contains('T')),
        "{line}"
    );

    let out = scratch
        .airlock(&["status", "--calls", "2"])
        .output()
        .await
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("The last 2 call(s)"), "{status}");
    let recent = status.split("The last 2 call(s)").nth(1).unwrap();
    // Two calls: the echo and the last read, each its decision and outcome.
    assert_eq!(recent.matches("decision ").count(), 2, "{status}");
    assert_eq!(recent.matches("outcome ").count(), 2, "{status}");
    assert_eq!(recent.matches("demo__read_note").count(), 1, "{status}");

    // Not a terminal: no colour in what the hub logs.
    let out = scratch
        .airlock(&["doctor", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    let doctor = String::from_utf8_lossy(&out.stdout);
    assert!(doctor.starts_with("ok    config "), "{doctor}");
    assert!(!doctor.contains("config: config"), "{doctor}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains('\u{1b}'));
}
