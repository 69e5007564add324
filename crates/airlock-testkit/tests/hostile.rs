//! A hostile upstream (`airlock-hostile`) against the client side: what it
//! plants in any field never reaches the client, the store or the logs
//! when it is a secret, and what it changes after review never reaches the
//! model before a person has seen it.

use std::process::Stdio;

use airlock_testkit::{RawStdio, Scratch};
use base64::Engine;
use serde_json::{Value, json};

const PLANTED: &str = "pl4nt_Zq81xWv0mN3bK7cR5tY2uH9e";

async fn store_secret(scratch: &Scratch, name: &str, value: &str) {
    use tokio::io::AsyncWriteExt;
    let mut child = scratch
        .airlock(&["secret", "set", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(value.as_bytes()).await.unwrap();
    drop(stdin);
    assert!(child.wait().await.unwrap().success());
}

fn forms(v: &str) -> Vec<String> {
    let e = base64::engine::general_purpose::STANDARD.encode(v);
    let u = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    vec![v.to_string(), e.trim_end_matches('=').to_string(), u]
}

fn bytes_contain(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Sends `request` with `id` and returns its response and what came before.
async fn ask(raw: &mut RawStdio, id: i64, method: &str, params: Value) -> (Value, Vec<Value>) {
    raw.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    raw.response(id).await
}

#[tokio::test]
async fn a_secret_planted_in_any_field_never_reaches_the_client_the_store_or_the_logs() {
    let scratch = Scratch::new();
    store_secret(&scratch, "PLANTED", PLANTED).await;
    let config = scratch
        .reviewed_config(
            r#"
[sources.h]
command = "{hostile}"
env = { HOSTILE_PLANT = "secret:PLANTED" }
"#,
        )
        .await;
    let log_path = scratch.dir.path().join("airlock.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, Stdio::from(log));
    raw.send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await;
    raw.response(0).await;
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    // Every list, and every request that reaches the source.
    let (tools, _) = ask(&mut raw, 1, "tools/list", json!({})).await;
    let plant = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "h__plant")
        .cloned()
        .unwrap_or_else(|| panic!("h__plant listed: {tools}"));
    assert!(
        plant["description"]
            .as_str()
            .unwrap()
            .starts_with("Description [secret]"),
        "the planted field was passed on, scrubbed: {plant}"
    );
    ask(&mut raw, 2, "prompts/list", json!({})).await;
    ask(&mut raw, 3, "prompts/get", json!({"name": "h__greet"})).await;
    ask(&mut raw, 4, "resources/list", json!({})).await;
    ask(&mut raw, 5, "resources/templates/list", json!({})).await;
    let (read, _) = ask(
        &mut raw,
        6,
        "resources/read",
        json!({"uri": "hostile://t/1"}),
    )
    .await;
    assert!(read.get("error").is_some(), "{read}");
    let (done, _) = ask(
        &mut raw,
        7,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "h__greet"}, "argument": {"name": "who", "value": ""}}),
    )
    .await;
    assert_eq!(
        done["result"]["completion"]["values"][0], "[secret]",
        "{done}"
    );
    ask(
        &mut raw,
        8,
        "resources/subscribe",
        json!({"uri": "hostile://t/1"}),
    )
    .await;
    ask(&mut raw, 9, "logging/setLevel", json!({"level": "debug"})).await;
    let (result, before) = ask(
        &mut raw,
        10,
        "tools/call",
        json!({"name": "h__plant", "arguments": {}, "_meta": {"progressToken": "p"}}),
    )
    .await;
    assert!(
        result["result"]["structuredContent"]
            .as_object()
            .is_some_and(|o| o.contains_key("[secret]")),
        "keys are scrubbed, not dropped: {result}"
    );
    // The elicitation the source made during the call reached this client.
    if let Some(req) = before.iter().find(|m| m["method"] == "elicitation/create") {
        raw.send(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "decline"}}))
            .await;
    }
    ask(
        &mut raw,
        11,
        "tools/call",
        json!({"name": "h__fail", "arguments": {}}),
    )
    .await;
    // Give notifications sent during the call time to arrive.
    ask(&mut raw, 12, "ping", json!({})).await;
    let seen = raw.seen.clone();
    drop(raw);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;

    let mut places: Vec<(String, Vec<u8>)> = vec![("client traffic".into(), seen.into_bytes())];
    let home = scratch.home();
    for f in ["airlock.db", "airlock.db-wal"] {
        if let Ok(b) = std::fs::read(home.join(f)) {
            places.push((f.into(), b));
        }
    }
    places.push(("airlock log".into(), std::fs::read(&log_path).unwrap()));
    for form in forms(PLANTED) {
        for (place, bytes) in &places {
            assert!(
                !bytes_contain(bytes, &form),
                "{place} holds the secret as {form}"
            );
        }
    }
    let traffic = String::from_utf8_lossy(&places[0].1);
    for (what, needle) in [
        ("log data keys", "notifications/message"),
        ("resources/updated", "notifications/resources/updated"),
        ("progress", "notifications/progress"),
        ("elicitation", "elicitation/create"),
    ] {
        assert!(traffic.contains(needle), "{what} was relayed at all");
    }
}
