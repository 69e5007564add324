//! I1: a secret value never reaches the client, the store or the logs, in
//! any encoding, even when the upstream echoes its credential on purpose.

use std::process::Stdio;

use airlock_testkit::{RawStdio, Scratch, bytes_contain, secret_forms};
use serde_json::json;

const TOKEN: &str = "tok_9vQ2xLw8ZpR4mK7nB3cD5fG1hJ6s";

#[tokio::test]
async fn secret_never_reaches_the_client_the_store_or_the_logs() {
    let scratch = Scratch::new();
    scratch.store_secret("LEAKY", TOKEN).await;
    let config = scratch
        .reviewed_config(
            r#"
[sources.fixture]
command = "{fixture}"
env = { FIXTURE_TOKEN = "secret:LEAKY" }
"#,
        )
        .await;
    let log_path = scratch.dir.path().join("airlock.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, Stdio::from(log));
    raw.handshake("2025-06-18").await;
    raw.send(json!({"jsonrpc": "2.0", "method": "logging/setLevel", "id": 2, "params": {"level": "debug"}})).await;
    raw.response(2).await;
    raw.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "fixture__leak", "arguments": {}, "_meta": {"progressToken": "p"}}}))
        .await;
    let (result, _) = raw.response(3).await;
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    // The upstream did send it: every form was replaced on the way out.
    assert!(text.contains("raw=[secret]"), "{text}");
    assert!(text.contains("b64=[secret]"), "{text}");
    assert!(text.contains("url=[secret]"), "{text}");
    // Errors and status: a call that fails mentions nothing either.
    raw.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "fixture__echo", "arguments": {"text": TOKEN}}}))
        .await;
    raw.response(4).await;
    drop(raw);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;

    let mut places: Vec<(String, Vec<u8>)> = vec![("client traffic".into(), Vec::new())];
    let _ = &mut places;
    let log_bytes = std::fs::read(&log_path).unwrap();
    assert!(
        bytes_contain(&log_bytes, "fixture: my token is [secret]")
            || !bytes_contain(&log_bytes, "my token is"),
        "the source's stderr was not scrubbed"
    );
    places.extend(scratch.stored());
    places.push(("airlock log".into(), log_bytes));
    for form in secret_forms(TOKEN) {
        for (place, bytes) in &places {
            assert!(
                !bytes_contain(bytes, &form),
                "{place} holds the secret as {form}"
            );
        }
    }
}

#[tokio::test]
async fn secret_never_reaches_the_client_stream() {
    // The same, checking the raw lines airlock wrote to the client.
    let scratch = Scratch::new();
    scratch.store_secret("LEAKY", TOKEN).await;
    let config = scratch
        .reviewed_config(
            r#"
[sources.fixture]
command = "{fixture}"
env = { FIXTURE_TOKEN = "secret:LEAKY" }
"#,
        )
        .await;
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, Stdio::null());
    raw.handshake("2025-06-18").await;
    raw.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "fixture__leak", "arguments": {}, "_meta": {"progressToken": "p"}}}))
        .await;
    let (_, before) = raw.response(3).await;
    assert!(
        before
            .iter()
            .any(|m| m["method"] == "notifications/message"),
        "the log notification was relayed: {before:?}"
    );
    for form in secret_forms(TOKEN) {
        assert!(!raw.seen.contains(&form), "client traffic holds {form}");
    }
    assert!(raw.seen.contains("[secret]"));
}

#[tokio::test]
async fn credential_in_config_is_refused_with_the_command_to_store_it() {
    let scratch = Scratch::new();
    let config = scratch.config(
        r#"
[sources.fixture]
command = "{fixture}"
env = { GITHUB_TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a" }
"#,
    );
    let out = scratch
        .airlock(&["serve", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("looks like a live credential"), "{err}");
    assert!(err.contains("airlock secret set GITHUB_TOKEN"), "{err}");
    assert!(
        !err.contains("ghp_16C7e42F"),
        "the error repeats the credential: {err}"
    );
}

#[tokio::test]
async fn missing_secret_fails_the_source_with_the_fix() {
    let scratch = Scratch::new();
    let config = scratch.config(
        r#"
[sources.fixture]
command = "{fixture}"
env = { FIXTURE_TOKEN = "secret:NOT_STORED" }
"#,
    );
    scratch.approve_commands(&config, &["fixture"]).await;
    let out = scratch
        .airlock(&["doctor", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("airlock secret set NOT_STORED"), "{text}");
}
