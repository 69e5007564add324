//! HTTP credentials are resolved per request, after policy and approval:
//! the hub runs in this process over a secret store that counts its
//! reads, in front of a loopback MCP server that records what it was sent.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_channels::Desk;
use airlock_gateway::secrets::HubSecrets;
use airlock_gateway::{Hub, Session};
use airlock_secrets::{SecretError, SecretStore, SecretValue};
use airlock_store::ledger::Choice;
use airlock_store::{Reviews, SqliteStore, Store};
use airlock_testkit::{call, first_text, free_addr};
use axum::http::{HeaderMap, StatusCode};
use rmcp::ServiceExt;
use serde_json::{Value, json};

const TOKEN: &str = "tok-9f3b2c71e0d4a865";

/// A secret store holding one value, counting every read.
struct Counting {
    reads: Arc<AtomicUsize>,
}

impl SecretStore for Counting {
    fn get(&self, name: &str) -> Result<SecretValue, SecretError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        assert_eq!(name, "web_token");
        Ok(SecretValue::new(TOKEN.to_string()))
    }
    fn set(&self, _: &str, _: &SecretValue) -> Result<(), SecretError> {
        unreachable!("nothing stores secrets here")
    }
    fn remove(&self, _: &str) -> Result<bool, SecretError> {
        unreachable!("nothing removes secrets here")
    }
    fn names(&self) -> Result<Vec<String>, SecretError> {
        Ok(vec!["web_token".into()])
    }
    fn describe(&self) -> String {
        "a counting test store".into()
    }
}

/// What the upstream received: (JSON-RPC method, tool if a call,
/// Authorization header).
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

/// A minimal stateless Streamable HTTP MCP server with two tools.
async fn upstream(seen: Seen) -> std::net::SocketAddr {
    let addr = free_addr();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let seen = seen.clone();
            async move {
                let msg: Value = serde_json::from_str(&body).unwrap();
                let method = msg["method"].as_str().unwrap_or_default().to_string();
                let tool = msg["params"]["name"].as_str().unwrap_or_default().to_string();
                let auth = headers
                    .get("authorization")
                    .map(|v| v.to_str().unwrap().to_string())
                    .unwrap_or_default();
                seen.lock().unwrap().push((method.clone(), tool.clone(), auth));
                let id = msg["id"].clone();
                let result = match method.as_str() {
                    "initialize" => json!({
                        "protocolVersion": msg["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "credentials-upstream", "version": "1"}
                    }),
                    "tools/list" => json!({"tools": [
                        {"name": "read", "description": "Reads.", "inputSchema": {"type": "object"}},
                        {"name": "wipe", "description": "Wipes.", "inputSchema": {"type": "object"}}
                    ]}),
                    "tools/call" => json!({"content": [{"type": "text", "text": format!("ran {tool}")}]}),
                    _ if id.is_null() => return (StatusCode::ACCEPTED, String::new()),
                    _ => {
                        return (
                            StatusCode::OK,
                            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}})
                                .to_string(),
                        );
                    }
                };
                (
                    StatusCode::OK,
                    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
                )
            }
        })
        .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
        .delete(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    let app = app.layer(axum::middleware::map_response(
        |mut r: axum::response::Response| async move {
            if r.status() == StatusCode::OK {
                r.headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
            }
            r
        },
    ));
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The id of the one pending approval, once it appears.
async fn pending_id(store: &Arc<dyn Store>) -> String {
    for _ in 0..200 {
        if let Some(row) = store.ledger_list(false).unwrap().into_iter().next() {
            return row.id;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no approval appeared")
}

#[tokio::test]
async fn denied_call_never_resolves_a_secret() {
    let seen = Seen::default();
    let addr = upstream(seen.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.toml");
    let text = format!(
        r#"
[hub]
approval_wait = "20s"
approval_ttl = "30s"

[sources.web]
url = "http://{addr}/mcp"
allow_private = true
headers = {{ Authorization = "Bearer ${{secret:web_token}}" }}

[[rules]]
action = "deny"
tool = "web__wipe"

[[rules]]
action = "ask"
tool = "web__read"
"#
    );
    std::fs::write(&path, &text).unwrap();
    let config = airlock_config::parse(&path, &text, airlock_config::Format::Toml).unwrap();
    let sqlite = SqliteStore::open_in(&dir.path().join("home")).unwrap();
    let endpoint = airlock_upstream::command::CommandIdentity::of(&config.sources[0]).unwrap();
    sqlite
        .pin_command("web", &endpoint.fingerprint(), "test")
        .unwrap();
    let database = sqlite.path().to_path_buf();
    let store: Arc<dyn Store> = sqlite;
    let reads = Arc::new(AtomicUsize::new(0));
    let secrets = HubSecrets::new(
        Box::new(Counting {
            reads: reads.clone(),
        }),
        dir.path().join("home"),
    );
    let hub = Hub::start(config, store.clone(), secrets);
    hub.settled(Duration::from_secs(10)).await;

    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let server = Session::new(hub.clone());
    tokio::spawn(async move {
        let running = server.serve(theirs).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = Arc::new(().serve(ours).await.unwrap());
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "web__read"), "{tools:?}");
    // Connecting resolved the header for each request it sent, and sent it.
    let connected = reads.load(Ordering::SeqCst);
    assert!(connected > 0);
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|(_, _, auth)| *auth == format!("Bearer {TOKEN}"))
    );
    let at = |what: &str| {
        let n = reads.load(Ordering::SeqCst);
        assert_eq!(n, connected, "{what} read the secret store");
    };

    // Denied by policy: no read, nothing sent.
    let r = client
        .call_tool(call("web__wipe", json!({})))
        .await
        .unwrap();
    assert!(first_text(&r).contains("denied"), "{}", first_text(&r));
    at("a denied call");

    // Asking: while it waits, and when a person declines, no read.
    let desk = {
        let hub = hub.clone();
        Desk::new(
            airlock_channels::desk::Ledger::Sqlite(database),
            hub.principal().to_string(),
            Box::new(move |id| hub.wake_approval(id)),
        )
    };
    let c = client.clone();
    let declined = tokio::spawn(async move { c.call_tool(call("web__read", json!({}))).await });
    let id = pending_id(&store).await;
    at("a pending call");
    desk.decide(&id, Choice::Deny, "test").unwrap();
    let r = declined.await.unwrap().unwrap();
    assert_eq!(first_text(&r), "The user declined this tool call.");
    at("a declined call");
    assert!(
        !seen
            .lock()
            .unwrap()
            .iter()
            .any(|(m, _, _)| m == "tools/call"),
        "a call reached the upstream"
    );

    // Approved: resolved now, for this request, and sent.
    let c = client.clone();
    let approved = tokio::spawn(async move { c.call_tool(call("web__read", json!({}))).await });
    let id = pending_id(&store).await;
    at("a pending call");
    desk.decide(&id, Choice::AllowOnce, "test").unwrap();
    let r = approved.await.unwrap().unwrap();
    assert_eq!(first_text(&r), "ran read");
    assert!(reads.load(Ordering::SeqCst) > connected);
    let calls: BTreeMap<String, String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _, _)| m == "tools/call")
        .map(|(_, t, a)| (t.clone(), a.clone()))
        .collect();
    assert_eq!(
        calls,
        BTreeMap::from([("read".to_string(), format!("Bearer {TOKEN}"))])
    );
    hub.stop().await;
}
