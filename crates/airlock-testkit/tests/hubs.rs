//! Several hubs on one data directory (each desktop client starts its own
//! `airlock serve`) behave as one: a decision made anywhere wakes the call
//! in whichever hub it waits in; no hub closes or hides another's calls,
//! sockets or sources.

use std::sync::Arc;
use std::time::Duration;

use airlock_testkit::{Scratch, call, first_text};
use serde_json::json;

/// Calls wait far longer than the test does, so a call that returns was
/// woken by the decision, not released by its clock.
const ASKING: &str = r#"
[hub]
approval_wait = "300s"
approval_ttl = "310s"

[sources.fixture]
command = "{fixture}"

[[rules]]
action = "ask"
tool = "fixture__echo"
"#;

type Client = Arc<rmcp::service::RunningService<rmcp::RoleClient, ()>>;
type Waiting = tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::ServiceError>>;

fn waiting(client: &Client, text: &'static str) -> Waiting {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .call_tool(call("fixture__echo", json!({ "text": text })))
            .await
    })
}

async fn cli(scratch: &Scratch, args: &[&str]) -> (i32, String) {
    let out = scratch.airlock(args).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn woken(call: Waiting) -> String {
    let r = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the decision woke the call in its own hub")
        .unwrap()
        .unwrap();
    first_text(&r)
}

/// The running hubs' lines of `airlock status`.
async fn hub_lines(scratch: &Scratch) -> Vec<String> {
    let (_, status) = cli(scratch, &["status"]).await;
    status
        .lines()
        .filter(|l| l.trim_start().starts_with("hub pid "))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_decision_wakes_the_call_in_whichever_hub_it_waits() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let first: Client = Arc::new(scratch.stdio_client(&config, ()).await);
    let second: Client = Arc::new(scratch.stdio_client(&config, ()).await);
    // The call waits in the hub that started first; the second hub's
    // socket is the newer one.
    let call = waiting(&first, "in the first hub");
    let id = scratch.pending_id().await;
    let (code, said) = cli(&scratch, &["approve", &id]).await;
    assert_eq!(code, 0, "{said}");
    assert_eq!(woken(call).await, "in the first hub");
    let call = waiting(&second, "in the second hub");
    let id = scratch.pending_id().await;
    cli(&scratch, &["approve", &id]).await;
    assert_eq!(woken(call).await, "in the second hub");
}

/// A hub starting, and `doctor` or `tools review` looking at the sources,
/// close nothing of a running hub: its waiting call still runs when
/// approved, and `status` still shows its sources as they are.
#[tokio::test]
async fn a_hub_starting_beside_another_leaves_its_calls_and_sources_alone() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let first: Client = Arc::new(scratch.stdio_client(&config, ()).await);
    let call = waiting(&first, "still waiting");
    let id = scratch.pending_id().await;
    let second: Client = Arc::new(scratch.stdio_client(&config, ()).await);
    let (code, said) = cli(&scratch, &["doctor", "--config", &config.to_string_lossy()]).await;
    assert_eq!(code, 0, "{said}");
    let (_, listed) = cli(&scratch, &["pending"]).await;
    assert!(
        listed.contains(&id),
        "the waiting call was closed: {listed}"
    );
    let (code, status) = cli(&scratch, &["status"]).await;
    assert_eq!(code, 0, "{status}");
    assert!(status.contains("2 hub(s) running"), "{status}");
    assert_eq!(
        status
            .lines()
            .filter(|l| l.contains("fixture") && l.contains("ready"))
            .count(),
        2,
        "each hub shows its own source as ready: {status}"
    );
    assert!(!status.contains("stopped"), "{status}");
    cli(&scratch, &["approve", &id]).await;
    assert_eq!(woken(call).await, "still waiting");
    drop(second);
}

/// A hub that stops removes its own socket only: the page link and the
/// status still come from the hub that runs on.
#[tokio::test]
async fn a_hub_stopping_leaves_the_others_reachable() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let staying: Client = Arc::new(scratch.stdio_client(&config, ()).await);
    let leaving = scratch.stdio_client(&config, ()).await;
    assert_eq!(hub_lines(&scratch).await.len(), 2);
    leaving.cancel().await.unwrap();
    let mut lines = hub_lines(&scratch).await;
    for _ in 0..100 {
        if lines.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        lines = hub_lines(&scratch).await;
    }
    assert_eq!(lines.len(), 1, "{lines:?}");
    let (code, link) = cli(&scratch, &["page", "--print"]).await;
    assert_eq!(code, 0, "{link}");
    assert!(link.trim().starts_with("http://127.0.0.1:"), "{link}");
    let call = waiting(&staying, "after the other left");
    let id = scratch.pending_id().await;
    cli(&scratch, &["approve", &id]).await;
    assert_eq!(woken(call).await, "after the other left");
}

/// A hub that died without cleaning up (SIGKILL) leaves its calls closed
/// by the next hub to start, never re-run, and its socket removed.
#[tokio::test]
async fn what_a_killed_hub_left_is_closed_by_the_next() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let mut raw = airlock_testkit::RawStdio::start_with_stderr(
        &scratch,
        &config,
        std::process::Stdio::null(),
    );
    raw.handshake("2025-06-18").await;
    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "fixture__echo", "arguments": {"text": "orphan"}}}))
        .await;
    let id = scratch.pending_id().await;
    raw.child.kill().await.unwrap();
    let next: Client = Arc::new(scratch.stdio_client(&config, ()).await);
    let (_, listed) = cli(&scratch, &["pending", "--all"]).await;
    let row = listed
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_default();
    assert!(row.contains("expired"), "{listed}");
    assert_eq!(hub_lines(&scratch).await.len(), 1);
    let left: Vec<_> = std::fs::read_dir(scratch.home().join("hubs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        left.len(),
        2,
        "only the new hub's socket and lock: {left:?}"
    );
    drop(next);
}
