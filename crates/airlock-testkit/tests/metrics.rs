//! The admin listener through the real binary: counts an operator can
//! scrape, and nothing a call carried.

use std::time::Duration;

use airlock_testkit::{Scratch, call, free_addr, secret_forms, wait_for_port};
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

const TOKEN: &str = "tok_M3tr1csN0tH3r3x8Qp2Lw7Zr";
const SENSITIVE: &str = "correct-horse-battery-staple";

async fn scrape(addr: std::net::SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn metrics_count_calls_by_source_decision_and_outcome_and_hold_nothing_a_call_carried() {
    let scratch = Scratch::new();
    scratch.store_secret("LEAKY", TOKEN).await;
    let config = scratch
        .reviewed_config(
            r#"
[sources.fixture]
command = "{fixture}"
env = { FIXTURE_TOKEN = "secret:LEAKY" }

[[rules]]
action = "deny"
tool = "fixture__slow"
"#,
        )
        .await;
    let addr = free_addr();
    let cmd = scratch.airlock(&[
        "serve",
        "--config",
        &config.to_string_lossy(),
        "--metrics",
        &addr.to_string(),
    ]);
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    wait_for_port(addr).await;
    for args in [
        json!({"text": TOKEN}),
        json!({"text": format!("password={SENSITIVE}")}),
    ] {
        client.call_tool(call("fixture__echo", args)).await.unwrap();
    }
    client
        .call_tool(call("fixture__leak", json!({})))
        .await
        .unwrap();
    let _ = client
        .call_tool(call("fixture__slow", json!({"ms": 1, "why": SENSITIVE})))
        .await;
    // Outcomes are written off the hot path: give them a moment.
    let mut text = String::new();
    for _ in 0..50 {
        text = scrape(addr).await;
        if text.contains(r#"airlock_call_outcomes_total{source="fixture",outcome="ok"} 3"#) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        text.contains(r#"airlock_calls_total{source="fixture",decision="allow"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"airlock_calls_total{source="fixture",decision="deny"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"airlock_call_outcomes_total{source="fixture",outcome="ok"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"airlock_sources{state="ready"} 1"#),
        "{text}"
    );
    assert!(text.contains("airlock_approvals_pending 0"), "{text}");
    assert!(
        text.contains("airlock_store_operation_seconds_bucket"),
        "{text}"
    );
    for form in secret_forms(TOKEN).into_iter().chain([
        SENSITIVE.to_string(),
        "fixture__echo".into(),
        "password".into(),
    ]) {
        assert!(!text.contains(&form), "`{form}` is in the metrics:\n{text}");
    }
    drop(client);
}

#[tokio::test]
async fn metrics_beyond_loopback_are_refused_unless_the_config_allows_them() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config("[sources.fixture]\ncommand = \"{fixture}\"\n")
        .await;
    let out = scratch
        .airlock(&[
            "serve",
            "--config",
            &config.to_string_lossy(),
            "--metrics",
            "0.0.0.0:0",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("not a loopback address"), "{said}");
}
