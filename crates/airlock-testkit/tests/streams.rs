//! Clients that go away: a call whose client is gone does not keep running
//! at its source. Over HTTP a client ends its session with `DELETE`, or just
//! drops its connections; either way the source hears its request was
//! cancelled, at once, not when the call's timeout comes.

use std::time::Duration;

use airlock_testkit::{Scratch, call, first_text};
use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use serde_json::json;

const FIXTURE: &str = r#"
[sources.fixture]
command = "{fixture}"
call_timeout = "60s"
"#;

fn info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("streams-test", "1"),
    )
}

/// What the fixture has been asked, as it says (`calls` lists its calls and
/// the cancellations it heard).
async fn heard(scratch: &Scratch, url: &str) -> String {
    let client = info().serve(scratch.http_transport(url)).await.unwrap();
    let said = client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    first_text(&said)
}

#[tokio::test]
async fn a_call_whose_http_client_is_gone_is_cancelled_at_its_source() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(FIXTURE).await;
    let (_hub, url) = scratch.serve_http(&config).await;

    // Ends its session (rmcp's client sends DELETE when cancelled).
    let leaving = info().serve(scratch.http_transport(&url)).await.unwrap();
    // On a loaded machine the source may still be starting: airlock lists
    // its tools when they come.
    for _ in 0..300 {
        let tools = leaving.list_all_tools().await.unwrap();
        if tools.iter().any(|t| t.name == "fixture__hang") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peer = leaving.peer().clone();
    let hanging = tokio::spawn(async move {
        let _ = peer.call_tool(call("fixture__hang", json!({}))).await;
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    leaving.cancel().await.unwrap();
    hanging.abort();

    // "At once" is checked against the SDK's own grace: it lets a closed
    // session's handlers run up to 5 s more before cancelling them, so the
    // source must have heard well inside that.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut said = heard(&scratch, &url).await;
    while !said.contains("cancelled:") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        said = heard(&scratch, &url).await;
    }
    assert!(said.contains("hang"), "{said}");
    assert!(
        said.contains("cancelled:"),
        "the source still runs the call: {said}"
    );
}
