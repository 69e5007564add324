//! Approvals end to end: a call that asks waits for a person at the CLI,
//! and runs once, with the stored arguments, only if they approve.

use std::time::Duration;

use airlock_testkit::{Scratch, call, first_text};
use serde_json::json;

const ASKING: &str = r#"
[sources.fixture]
command = "{fixture}"

[[rules]]
action = "ask"
tool = "fixture__echo"
"#;
/// The id of the one pending approval, once it appears.
type Client = std::sync::Arc<rmcp::service::RunningService<rmcp::RoleClient, ()>>;

/// A call that will wait for approval, running while the test decides.
fn in_background(
    client: &Client,
    tool: &'static str,
    args: serde_json::Value,
) -> tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::ServiceError>> {
    let client = client.clone();
    tokio::spawn(async move { client.call_tool(call(tool, args)).await })
}

async fn cli(scratch: &Scratch, args: &[&str]) -> (i32, String) {
    let out = scratch.airlock(args).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn approved_call_runs_once_with_the_stored_arguments() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let waiting = in_background(&client, "fixture__echo", json!({"text": "as asked"}));
    let id = scratch.pending_id().await;
    let (_, listed) = cli(&scratch, &["pending"]).await;
    assert!(listed.contains("fixture__echo"), "{listed}");
    assert!(listed.contains("Echo the text back."), "{listed}");
    // As sent, not escaped a second time.
    assert!(
        listed.contains(r#"arguments:    {"text":"as asked"}"#),
        "{listed}"
    );
    // Other calls, waiting ones included, are not held up.
    let other = client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&other), "calls");

    let (code, said) = cli(&scratch, &["approve", &id]).await;
    assert_eq!(code, 0, "{said}");
    let r = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the approval woke the call")
        .unwrap()
        .unwrap();
    assert_eq!(first_text(&r), "as asked");
    // Single use: approving again finds nothing.
    let (code, said) = cli(&scratch, &["approve", &id]).await;
    assert_eq!(code, 5, "{said}");
    assert!(said.starts_with("not found"), "{said}");
}

/// What runs is exactly the call the person was shown: the approval is
/// bound to its arguments by digest and to the shown copy, so a ledger
/// row altered after the call asked runs nothing.
#[tokio::test]
async fn approval_runs_only_the_call_the_person_was_shown() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let waiting = in_background(&client, "fixture__echo", json!({"text": "from the client"}));
    let id = scratch.pending_id().await;
    scratch.raw_sql(&format!(
        r#"UPDATE approvals SET arguments = '{{"text":"as reviewed"}}' WHERE id = '{id}'"#
    ));
    cli(&scratch, &["approve", &id]).await;
    let r = waiting.await.unwrap().unwrap();
    assert!(
        first_text(&r).contains("does not match the call that asked"),
        "{}",
        first_text(&r)
    );
    let r = client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert!(!first_text(&r).contains("echo"), "the altered call ran");
}

#[tokio::test]
async fn denied_call_never_contacts_the_server() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let waiting = in_background(&client, "fixture__echo", json!({"text": "x"}));
    let id = scratch.pending_id().await;
    let (code, said) = cli(&scratch, &["deny", &id]).await;
    assert_eq!(code, 0, "{said}");
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(first_text(&r), "The user declined this tool call.");
    let seen = client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&seen), "calls");
}

#[tokio::test]
async fn late_decision_is_expired() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(&format!(
            "[hub]\napproval_wait = \"1s\"\napproval_ttl = \"2s\"\n{ASKING}"
        ))
        .await;
    let client = scratch.stdio_client(&config, ()).await;
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(
        first_text(&r),
        "The user did not approve this tool call in time."
    );
    let (_, all) = cli(&scratch, &["pending", "--all"]).await;
    let id = all.split_whitespace().next().unwrap().to_string();
    let (code, said) = cli(&scratch, &["approve", &id]).await;
    assert_eq!(code, 4, "{said}");
    assert!(said.starts_with("too late"), "{said}");
    let seen = client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&seen), "calls");
}

#[cfg(unix)]
#[tokio::test]
async fn policy_change_before_approval_is_enforced() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let mut cmd = scratch.airlock(&["serve", "--config", &config.to_string_lossy()]);
    cmd.stderr(std::process::Stdio::null());
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().unwrap();
    let client = std::sync::Arc::new(rmcp::ServiceExt::serve((), transport).await.unwrap());
    let waiting = in_background(&client, "fixture__echo", json!({"text": "x"}));
    let id = scratch.pending_id().await;
    // While it waits, the user denies the tool outright and reloads.
    let body = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{body}\n[[rules]]\naction = \"deny\"\ntool = \"fixture__echo\"\n"),
    )
    .unwrap();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    cli(&scratch, &["approve", &id]).await;
    let r = waiting.await.unwrap().unwrap();
    let text = first_text(&r);
    assert!(text.starts_with("airlock: denied"), "{text}");
    assert!(text.contains("policy changed while it waited"), "{text}");
    let seen = client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&seen), "calls");
}

/// Exactly one crate records a decision, and the code that faces MCP
/// clients cannot reach it: not in its dependency graph, not called from
/// anywhere but the desk every human channel records through.
#[test]
fn only_the_decision_module_records() {
    let metadata = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(metadata.status.success());
    let m: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    let deps = |name: &str| -> Vec<String> {
        m["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect()
    };
    // The closure of what MCP-facing crates depend on, within the workspace.
    let mut seen = Vec::new();
    let mut todo = vec![
        "airlock-gateway".to_string(),
        "airlock-upstream".to_string(),
    ];
    while let Some(p) = todo.pop() {
        if seen.contains(&p) {
            continue;
        }
        for d in deps(&p) {
            if d.starts_with("airlock-") {
                todo.push(d);
            }
        }
        seen.push(p);
    }
    for recorder in ["airlock-decision", "airlock-channels"] {
        assert!(!seen.contains(&recorder.to_string()), "{seen:?}");
    }

    let root = airlock_testkit::workspace_root();
    let needle = concat!("record_", "decision(");
    let callers: Vec<_> = airlock_testkit::rust_sources(&root.join("crates"))
        .into_iter()
        .filter(|p| std::fs::read_to_string(p).unwrap().contains(needle))
        .collect();
    let allowed = [
        root.join("crates/airlock-decision/src/lib.rs"),
        root.join("crates/airlock-decision/src/sqlite.rs"),
        root.join("crates/airlock-decision/src/postgres.rs"),
        root.join("crates/airlock-decision/tests/ledger.rs"),
        root.join("crates/airlock-channels/src/desk.rs"),
    ]
    .map(|p| p.canonicalize().unwrap());
    for c in &callers {
        assert!(allowed.contains(c), "{} records a decision", c.display());
    }
}

#[tokio::test]
async fn allow_for_this_run_asks_once_per_session() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let first = in_background(&client, "fixture__echo", json!({"text": "one"}));
    let id = scratch.pending_id().await;
    let (code, said) = cli(&scratch, &["approve", &id, "--for-run"]).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(first_text(&first.await.unwrap().unwrap()), "one");
    // The same tool again in this session runs without asking...
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        client.call_tool(call("fixture__echo", json!({"text": "two"}))),
    )
    .await
    .expect("no second approval was needed")
    .unwrap();
    assert_eq!(first_text(&r), "two");
    let (_, all) = cli(&scratch, &["pending", "--all"]).await;
    assert_eq!(
        all.lines().filter(|l| l.contains("fixture__echo")).count(),
        1,
        "{all}"
    );
    drop(client);
    // ...but a new session asks again.
    let again = scratch.stdio_client(&config, ()).await;
    let again = std::sync::Arc::new(again);
    let waiting = in_background(&again, "fixture__echo", json!({"text": "three"}));
    let id = scratch.pending_id().await;
    cli(&scratch, &["deny", &id]).await;
    assert_eq!(
        first_text(&waiting.await.unwrap().unwrap()),
        "The user declined this tool call."
    );
}

#[tokio::test]
async fn always_allow_is_pinned_to_the_contract() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let first = in_background(&client, "fixture__echo", json!({"text": "one"}));
    let id = scratch.pending_id().await;
    let (code, said) = cli(&scratch, &["approve", &id, "--always"]).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(first_text(&first.await.unwrap().unwrap()), "one");
    drop(client);
    // A new session, a new process: the standing rule still allows it.
    let client = scratch.stdio_client(&config, ()).await;
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        client.call_tool(call("fixture__echo", json!({"text": "two"}))),
    )
    .await
    .expect("no approval was needed")
    .unwrap();
    assert_eq!(first_text(&r), "two");
    client.cancel().await.unwrap();
    // The server changes the tool; a person re-reviews it; the rule, pinned
    // to the old contract, no longer applies, so the call asks again.
    let changed = scratch
        .reviewed_config(
            r#"
[sources.fixture]
command = "{fixture}"
env = { FIXTURE_VARIANT = "2" }

[[rules]]
action = "ask"
tool = "fixture__echo"
"#,
        )
        .await;
    let client = std::sync::Arc::new(scratch.stdio_client(&changed, ()).await);
    let waiting = in_background(&client, "fixture__echo", json!({"text": "three"}));
    let id = scratch.pending_id().await;
    cli(&scratch, &["deny", &id]).await;
    assert_eq!(
        first_text(&waiting.await.unwrap().unwrap()),
        "The user declined this tool call."
    );
}

/// While a call waits for a person, the HTTP face keeps the stream alive
/// with SSE comment frames (every 15 s), so proxies do not cut it.
#[tokio::test]
async fn waiting_call_keeps_the_http_stream_alive() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let addr = airlock_testkit::free_addr();
    let _hub = scratch
        .airlock(&[
            "serve",
            "--config",
            &config.to_string_lossy(),
            "--http",
            &addr.to_string(),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    airlock_testkit::wait_for_port(addr).await;
    let url = format!("http://{addr}/mcp");
    let token = scratch.http_token();
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value, session: Option<String>| {
        let mut req = http
            .post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body.to_string());
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req.send()
    };
    let init = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        None,
    )
    .await
    .unwrap();
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(session.clone()),
    )
    .await
    .unwrap();
    let mut call = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "fixture__echo", "arguments": {"text": "kept alive"}}}),
        Some(session),
    )
    .await
    .unwrap();
    // Read the stream for a little over one keep-alive period.
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(18);
    while !seen.contains("\n:") && !seen.starts_with(':') {
        let chunk = tokio::time::timeout_at(deadline, call.chunk())
            .await
            .expect("a keep-alive frame within 18 s")
            .unwrap()
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let id = scratch.pending_id().await;
    cli(&scratch, &["approve", &id]).await;
    while !seen.contains("kept alive") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), call.chunk())
            .await
            .unwrap()
            .unwrap()
            .expect("the answer arrives on the same stream");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// The hostile fixture with `shifty`, whose description comes from a file,
/// and every tool asking; `wait` is how long a call waits for a person.
fn shifty_config(scratch: &Scratch, wait: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let description = scratch.dir.path().join("description.txt");
    std::fs::write(&description, "Add two numbers.").unwrap();
    let config = scratch.config(&format!(
        "[hub]\napproval_wait = \"{wait}\"\napproval_ttl = \"120s\"\n\n[sources.h]\ncommand = \"{{hostile}}\"\nenv = {{ HOSTILE_DESCRIPTION_FILE = {:?} }}\n\n[[rules]]\naction = \"ask\"\nsource = \"h\"\n\n[[rules]]\naction = \"allow\"\ntool = \"h__announce\"\n",
        description.to_string_lossy()
    ));
    (config, description)
}

/// "Allow for this run" is given for the tool as the person saw it: once
/// the upstream changes the tool, the grant no longer applies.
#[tokio::test]
async fn allow_for_this_run_ends_when_the_tool_changes() {
    let scratch = Scratch::new();
    let (config, description) = shifty_config(&scratch, "3s");
    scratch.review(&config).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let first = in_background(&client, "h__shifty", json!({}));
    let id = scratch.pending_id().await;
    let (code, said) = cli(&scratch, &["approve", &id, "--for-run"]).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(first_text(&first.await.unwrap().unwrap()), "ran");
    let r = client
        .call_tool(call("h__shifty", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "ran", "the grant covers the unchanged tool");

    std::fs::write(&description, "Add two numbers, and mail them home.").unwrap();
    let r = client
        .call_tool(call("h__announce", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "announced");
    // The hub re-lists; once it has, the changed tool asks again.
    let mut asked = false;
    for _ in 0..20 {
        let r = client
            .call_tool(call("h__shifty", json!({})))
            .await
            .unwrap();
        if first_text(&r) != "ran" {
            assert_eq!(
                first_text(&r),
                "The user did not approve this tool call in time."
            );
            asked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(asked, "the run grant outlived the change");
}

/// "Always allow" on a tool nobody reviewed is the person's review of it:
/// the next call runs unasked, `rules list` shows the rule, `policy
/// explain` counts it, and `rules revoke` makes the tool ask again.
#[tokio::test]
async fn always_allow_on_an_unreviewed_tool_reviews_it_and_can_be_revoked() {
    let scratch = Scratch::new();
    let (config, _) = shifty_config(&scratch, "5s");
    scratch.approve_commands(&config, &["h"]).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let first = in_background(&client, "h__shifty", json!({}));
    let id = scratch.pending_id().await;
    let (code, said) = cli(&scratch, &["approve", &id, "--always"]).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(first_text(&first.await.unwrap().unwrap()), "ran");
    let r = client
        .call_tool(call("h__shifty", json!({})))
        .await
        .unwrap();
    let (_, explain) = cli(
        &scratch,
        &[
            "policy",
            "explain",
            "h__shifty",
            "--config",
            &config.to_string_lossy(),
        ],
    )
    .await;
    let (_, audit) = cli(&scratch, &["audit"]).await;
    assert_eq!(first_text(&r), "ran", "{explain}\n{audit}");

    let (_, rules) = cli(&scratch, &["rules", "list"]).await;
    assert!(rules.contains("#1  allow h__shifty"), "{rules}");
    let (_, explain) = cli(
        &scratch,
        &[
            "policy",
            "explain",
            "h__shifty",
            "--config",
            &config.to_string_lossy(),
        ],
    )
    .await;
    assert!(explain.starts_with("h__shifty: ALLOW"), "{explain}");
    assert!(explain.contains("always-allow #1"), "{explain}");

    let (code, said) = cli(&scratch, &["rules", "revoke", "1"]).await;
    assert_eq!(code, 0, "{said}");
    let mut asked = false;
    for _ in 0..20 {
        let r = client
            .call_tool(call("h__shifty", json!({})))
            .await
            .unwrap();
        if first_text(&r) != "ran" {
            asked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(asked, "a revoked rule still allowed the call");
    let (code, _) = cli(&scratch, &["rules", "revoke", "1"]).await;
    assert_eq!(code, 3, "revoking twice says there is no such rule");
}

/// Every channel counts down to the moment the call stops waiting
/// (approval_wait), not to a later expiry nobody is waiting for.
#[tokio::test]
async fn what_a_person_sees_counts_down_to_when_the_call_stops_waiting() {
    let scratch = Scratch::new();
    let (config, _) = shifty_config(&scratch, "6s");
    scratch.review(&config).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    let waiting = in_background(&client, "h__shifty", json!({}));
    scratch.pending_id().await;
    let (_, pending) = cli(&scratch, &["pending"]).await;
    let left: u64 = pending
        .split("expires in ")
        .nth(1)
        .and_then(|r| r.split('s').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{pending}"));
    assert!(left <= 6, "counts down to approval_wait (6s), says {left}s");
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(
        first_text(&r),
        "The user did not approve this tool call in time."
    );
    // When the call stopped waiting, the approval ended with it.
    let (_, pending) = cli(&scratch, &["pending"]).await;
    assert!(pending.contains("No calls are waiting"), "{pending}");
}
