//! The human channels beyond the CLI, end to end: the client's own prompt
//! (an elicitation form for older clients, a sealed input request for
//! 2026-07-28 ones) and the approval page on loopback.

use std::sync::{Arc, Mutex};

use airlock_testkit::{Scratch, call, first_text, free_addr, wait_for_port};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
    InputResponses, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, RequestContext, RoleClient};
use rmcp::{ClientHandler, ClientServiceExt};
use serde_json::{Value, json};

const ASKING: &str = r#"
[sources.fixture]
command = "{fixture}"

[[rules]]
action = "ask"
tool = "fixture__echo"
"#;

/// A client whose person answers airlock's form with `answer`.
#[derive(Clone)]
struct Person {
    answer: ElicitResult,
    asked: Arc<Mutex<Vec<Value>>>,
}

impl Person {
    fn choosing(decision: &str) -> Person {
        Person::answering(
            ElicitResult::new(ElicitationAction::Accept)
                .with_content(json!({ "decision": decision })),
        )
    }

    fn answering(answer: ElicitResult) -> Person {
        Person {
            answer,
            asked: Arc::default(),
        }
    }
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(caps, Implementation::new("channels-test", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.asked
            .lock()
            .unwrap()
            .push(serde_json::to_value(&request).unwrap());
        Ok(self.answer.clone())
    }
}

/// A client that shows the form to nobody: it never answers, and notes
/// when airlock takes the form back.
#[derive(Clone, Default)]
struct Away {
    withdrawn: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Away {
    fn get_info(&self) -> ClientConfig {
        Person::choosing("deny").get_info()
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        Ok(ElicitResult::new(ElicitationAction::Cancel))
    }

    async fn on_cancelled(
        &self,
        params: CancelledNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.withdrawn
            .lock()
            .unwrap()
            .push(params.reason.unwrap_or_default());
    }
}

fn choices(form: &Value) -> Vec<String> {
    form["requestedSchema"]["properties"]["decision"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["const"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn prompt_in_an_older_client_approves_the_call() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let person = Person::choosing("allow_once");
    let client = scratch.stdio_client(&config, person.clone()).await;
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "asked politely"})))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "asked politely");
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["message"].as_str().unwrap();
    assert!(message.contains("fixture__echo"), "{message}");
    assert!(message.contains("asked politely"), "{message}");
    assert_eq!(
        choices(&asked[0]),
        ["allow_once", "allow_for_run", "always_allow", "deny"]
    );
    // The audit names the channel (once the hub's writer has committed).
    let mut audit = String::new();
    for _ in 0..50 {
        let out = scratch
            .airlock(&["audit", "--jsonl"])
            .output()
            .await
            .unwrap();
        audit = String::from_utf8_lossy(&out.stdout).into_owned();
        if audit.contains("via prompt") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"approved\"") && l.contains("by ") && l.contains("via prompt")),
        "{audit}"
    );
}

#[tokio::test]
async fn form_is_withdrawn_when_decided_elsewhere() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let away = Away::default();
    let client = Arc::new(scratch.stdio_client(&config, away.clone()).await);
    let c = client.clone();
    let waiting = tokio::spawn(async move {
        c.call_tool(call("fixture__echo", json!({"text": "cli"})))
            .await
    });
    let id = scratch.pending_id().await;
    let out = scratch.airlock(&["approve", &id]).output().await.unwrap();
    assert!(out.status.success());
    assert_eq!(first_text(&waiting.await.unwrap().unwrap()), "cli");
    for _ in 0..100 {
        if !away.withdrawn.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(*away.withdrawn.lock().unwrap(), ["decided another way"]);
}

#[tokio::test]
async fn declining_the_prompt_denies_the_call() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    for answer in [
        ElicitResult::new(ElicitationAction::Decline),
        ElicitResult::new(ElicitationAction::Cancel),
        Person::choosing("deny").answer,
        // An answer nobody can read is not a yes.
        ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"decision": "yes please"})),
    ] {
        let client = scratch
            .stdio_client(&config, Person::answering(answer.clone()))
            .await;
        let r = client
            .call_tool(call("fixture__echo", json!({"text": "x"})))
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(true), "{answer:?}");
        assert_eq!(
            first_text(&r),
            "The user declined this tool call.",
            "{answer:?}"
        );
        let seen = client
            .call_tool(call("fixture__calls", json!({})))
            .await
            .unwrap();
        assert_eq!(first_text(&seen), "calls", "{answer:?} reached the server");
    }
}

/// A 2026-07-28 client on the HTTP face, and a way to call with a state
/// and an answer.
struct Modern {
    _hub: tokio::process::Child,
    addr: std::net::SocketAddr,
    client: rmcp::service::RunningService<RoleClient, ClientConfig>,
}

impl Modern {
    async fn start(scratch: &Scratch) -> Modern {
        let config = scratch.reviewed_config(ASKING).await;
        let addr = free_addr();
        let hub = scratch
            .airlock(&[
                "serve",
                "--config",
                &config.to_string_lossy(),
                "--http",
                &addr.to_string(),
            ])
            .spawn()
            .unwrap();
        wait_for_port(addr).await;
        let client = Modern::connect(scratch, addr, "channels-test").await;
        Modern {
            _hub: hub,
            addr,
            client,
        }
    }

    /// A 2026-07-28 client named `name` on the hub's HTTP face.
    async fn connect(
        scratch: &Scratch,
        addr: std::net::SocketAddr,
        name: &str,
    ) -> rmcp::service::RunningService<RoleClient, ClientConfig> {
        let caps: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(caps, Implementation::new(name, "1"))
            .serve_with_lifecycle(
                scratch.http_transport(&format!("http://{addr}/mcp")),
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .unwrap()
    }

    async fn call(
        &self,
        args: Value,
        state: Option<String>,
        answer: Option<Value>,
    ) -> Result<CallToolResponse, String> {
        Modern::call_as(&self.client, args, state, answer).await
    }

    async fn call_as(
        client: &rmcp::service::RunningService<RoleClient, ClientConfig>,
        args: Value,
        state: Option<String>,
        answer: Option<Value>,
    ) -> Result<CallToolResponse, String> {
        let mut p = CallToolRequestParams::new("fixture__echo");
        p.arguments = args.as_object().cloned();
        p.request_state = state;
        p.input_responses = answer.map(|a| {
            let mut r = InputResponses::new();
            r.insert("airlock-approval".into(), a);
            r
        });
        client.call_tool_once(p).await.map_err(|e| e.to_string())
    }

    /// The first call: it must come back asking, with the form and a state.
    async fn asked(&self, args: Value) -> (Value, String) {
        let first = self.call(args, None, None).await.unwrap();
        let CallToolResponse::InputRequired(needed) = first else {
            panic!("expected input_required, got {first:?}");
        };
        let requests = serde_json::to_value(&needed.input_requests).unwrap();
        (
            requests["airlock-approval"]["params"].clone(),
            needed.request_state.unwrap(),
        )
    }

    async fn text(&self, r: Result<CallToolResponse, String>) -> String {
        match r.unwrap() {
            CallToolResponse::Complete(r) => first_text(&r),
            other => panic!("expected a result, got {other:?}"),
        }
    }
}

/// "Allow for this run" from a 2026-07-28 client over HTTP, where every
/// request stands alone: the next calls of the same client run unasked;
/// another client program is asked.
#[tokio::test]
async fn allow_for_this_run_holds_for_a_sessionless_client() {
    let scratch = Scratch::new();
    let m = Modern::start(&scratch).await;
    let (_, state) = m.asked(json!({"text": "first"})).await;
    let for_run = json!({"action": "accept", "content": {"decision": "allow_for_run"}});
    let r = m
        .call(json!({"text": "first"}), Some(state), Some(for_run))
        .await;
    assert_eq!(m.text(r).await, "first");
    for text in ["second", "third"] {
        let r = m.call(json!({ "text": text }), None, None).await;
        assert_eq!(m.text(r).await, text, "the run grant covers later calls");
    }
    let other = Modern::connect(&scratch, m.addr, "another-agent").await;
    match Modern::call_as(&other, json!({"text": "x"}), None, None)
        .await
        .unwrap()
    {
        CallToolResponse::InputRequired(_) => {}
        r => panic!("another client ran under the first one's grant: {r:?}"),
    }
}

fn yes() -> Value {
    json!({"action": "accept", "content": {"decision": "allow_once"}})
}

#[tokio::test]
async fn tampered_request_state_is_refused() {
    let scratch = Scratch::new();
    let m = Modern::start(&scratch).await;
    let args = json!({"text": "sealed"});
    let (form, state) = m.asked(args.clone()).await;
    assert_eq!(
        choices(&form),
        ["allow_once", "allow_for_run", "always_allow", "deny"]
    );
    // One changed character anywhere in the seal, or a state made up.
    let mut flipped = state.clone().into_bytes();
    let middle = flipped.len() / 2;
    flipped[middle] = if flipped[middle] == b'a' { b'b' } else { b'a' };
    for bad in [
        String::from_utf8(flipped).unwrap(),
        format!("{state}x"),
        "airlock-approval.e30.AAAA".to_string(),
    ] {
        let err = m
            .call(args.clone(), Some(bad), Some(yes()))
            .await
            .unwrap_err();
        assert!(
            err.contains("not issued by this airlock, or was altered"),
            "{err}"
        );
    }
    // The real seal for other arguments than the person saw.
    let err = m
        .call(json!({"text": "swapped"}), Some(state.clone()), Some(yes()))
        .await
        .unwrap_err();
    assert!(err.contains("arguments differ"), "{err}");
    // Nothing ran.
    let seen = m
        .client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&seen), "calls");
}

#[tokio::test]
async fn replayed_request_state_is_refused() {
    let scratch = Scratch::new();
    let m = Modern::start(&scratch).await;
    let args = json!({"text": "once only"});
    let (_, state) = m.asked(args.clone()).await;
    let ran = m.call(args.clone(), Some(state.clone()), Some(yes())).await;
    assert_eq!(m.text(ran).await, "once only");
    let err = m
        .call(args.clone(), Some(state), Some(yes()))
        .await
        .unwrap_err();
    assert!(err.contains("already used"), "{err}");
    // A "deny" through a fresh form declines, honestly.
    let (_, state) = m.asked(args.clone()).await;
    let no = json!({"action": "accept", "content": {"decision": "deny"}});
    let r = m.call(args, Some(state), Some(no)).await;
    assert_eq!(m.text(r).await, "The user declined this tool call.");
    let seen = m
        .client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&seen), "echo,calls");
}

/// The approval page as a browser without JavaScript would use it.
struct Page {
    base: String,
    http: reqwest::Client,
    cookie: String,
    csrf: String,
}

/// A fresh one-time link from the running hub, as `airlock page --print`
/// prints it.
async fn page_link(scratch: &Scratch) -> String {
    let out = scratch
        .airlock(&["page", "--print"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("http://127.0.0.1:"), "{text}");
    text
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

impl Page {
    async fn open(scratch: &Scratch) -> Page {
        let link = page_link(scratch).await;
        let base = link.split("/open/").next().unwrap().to_string();
        let http = no_redirects();
        let r = http.get(&link).send().await.unwrap();
        assert_eq!(r.status(), 303);
        let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        let cookie = cookie.split(';').next().unwrap().to_string();
        // The link is spent.
        let again = http.get(&link).send().await.unwrap();
        assert_eq!(again.status(), 403);
        let html = http
            .get(format!("{base}/"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let csrf = html
            .split("name=\"csrf\" content=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap()
            .to_string();
        Page {
            base,
            http,
            cookie,
            csrf,
        }
    }

    async fn pending(&self) -> Vec<Value> {
        let r = self
            .http
            .get(format!("{}/api/pending", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()["pending"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// POSTs a decision with the given CSRF token and Origin.
    async fn decide(
        &self,
        id: &str,
        choice: &str,
        csrf: Option<&str>,
        origin: Option<&str>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!("{}/api/decide", self.base))
            .header("cookie", &self.cookie)
            .header("content-type", "application/json")
            .body(json!({"id": id, "choice": choice}).to_string());
        if let Some(c) = csrf {
            req = req.header("x-airlock-csrf", c);
        }
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
}

type Waiting = tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::ServiceError>>;

/// A hub with one call waiting for approval, and nobody in the client to ask.
async fn one_waiting(
    scratch: &Scratch,
    hub: &str,
) -> (
    Arc<rmcp::service::RunningService<RoleClient, ()>>,
    Waiting,
    String,
) {
    let config = scratch.reviewed_config(&format!("{hub}\n{ASKING}")).await;
    let client = Arc::new(scratch.stdio_client(&config, ()).await);
    let c = client.clone();
    let waiting = tokio::spawn(async move {
        c.call_tool(call("fixture__echo", json!({"text": "from the page"})))
            .await
    });
    let id = scratch.pending_id().await;
    (client, waiting, id)
}

#[tokio::test]
async fn page_shows_the_inbox_across_reloads_and_approves() {
    let scratch = Scratch::new();
    let (_client, waiting, id) = one_waiting(&scratch, "").await;
    let page = Page::open(&scratch).await;
    for _reload in 0..2 {
        let inbox = page.pending().await;
        assert_eq!(inbox.len(), 1, "{inbox:?}");
        assert_eq!(inbox[0]["id"], id);
        assert_eq!(inbox[0]["tool"], "fixture__echo");
        assert!(
            inbox[0]["arguments"]
                .as_str()
                .unwrap()
                .contains("from the page")
        );
        assert!(inbox[0]["expires_in_ms"].as_i64().unwrap() > 0);
    }
    // Without the session cookie there is nothing to see.
    let r = page
        .http
        .get(format!("{}/api/pending", page.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let origin = page.base.clone();
    let (status, said) = page
        .decide(&id, "allow_once", Some(&page.csrf), Some(&origin))
        .await;
    assert_eq!((status, said["result"].as_str()), (200, Some("approved")));
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(first_text(&r), "from the page");
    // A replay finds nothing.
    let (status, _) = page
        .decide(&id, "allow_once", Some(&page.csrf), Some(&origin))
        .await;
    assert_eq!(status, 404);
}

/// Arguments longer than the 4 KB the inbox shows are there whole on
/// request, for the page's own session only, scrubbed like the rest.
#[tokio::test]
async fn the_page_shows_long_arguments_whole_on_request() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let client = Arc::new(scratch.stdio_client(&config, ()).await);
    let c = client.clone();
    let long = format!("{}THE-END", "x".repeat(10_000));
    let text = long.clone();
    let _waiting = tokio::spawn(async move {
        c.call_tool(call("fixture__echo", json!({ "text": text })))
            .await
    });
    let id = scratch.pending_id().await;
    let page = Page::open(&scratch).await;
    let inbox = page.pending().await;
    let shown = inbox[0]["arguments"].as_str().unwrap();
    assert!(
        shown.len() < 5000 && !shown.contains("THE-END"),
        "{}",
        shown.len()
    );
    assert_eq!(inbox[0]["arguments_cut"], true, "{inbox:?}");
    assert!(inbox[0]["arguments_bytes"].as_u64().unwrap() > 10_000);
    let whole = |cookie: Option<String>, id: String| {
        let mut req = page.http.get(format!("{}/api/arguments/{id}", page.base));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.send()
    };
    let r = whole(Some(page.cookie.clone()), id.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["arguments"].as_str().unwrap().contains(&long),
        "{body}"
    );
    // Not without the session, and not for a call that is not waiting.
    assert_eq!(whole(None, id.clone()).await.unwrap().status(), 401);
    let r = whole(Some(page.cookie.clone()), "0".repeat(32))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// With several hubs on one data directory, any hub's page shows every
/// waiting call, and its decision wakes the call in the hub it waits in.
#[tokio::test]
async fn one_hubs_page_decides_a_call_waiting_in_another() {
    let scratch = Scratch::new();
    // The hub the call waits in has no page, and waits longer than the
    // test: only the other hub's page can end the wait in time.
    let (_client, waiting, id) = one_waiting(
        &scratch,
        "[hub]\napproval_page = \"off\"\napproval_wait = \"300s\"\napproval_ttl = \"310s\"",
    )
    .await;
    let config = scratch.reviewed_config(ASKING).await;
    let _other = scratch.stdio_client(&config, ()).await;
    let page = Page::open(&scratch).await;
    let inbox = page.pending().await;
    assert!(inbox.iter().any(|w| w["id"] == id), "{inbox:?}");
    let (status, said) = page
        .decide(&id, "allow_once", Some(&page.csrf), Some(&page.base))
        .await;
    assert_eq!(status, 200, "{said}");
    let r = tokio::time::timeout(std::time::Duration::from_secs(20), waiting)
        .await
        .expect("the other hub's page woke the call")
        .unwrap()
        .unwrap();
    assert_eq!(first_text(&r), "from the page");
}

/// The browser launcher inherits airlock's environment: a credential the
/// client passed to airlock (as clients do with their own variables) must
/// not reach it.
#[tokio::test]
async fn the_browser_is_started_without_the_clients_credentials() {
    use rmcp::ServiceExt;
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(ASKING).await;
    let seen = scratch.home().with_file_name("browser-env");
    let launcher = scratch.home().with_file_name("browser.sh");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nenv > '{}.tmp'\nmv '{0}.tmp' '{0}'\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = scratch.airlock(&["serve", "--config", &config.to_string_lossy()]);
    cmd.env_remove("AIRLOCK_NO_BROWSER")
        .env("BROWSER", &launcher)
        .env("GITHUB_TOKEN", "planted-credential-one")
        .env("pgpassword", "planted-credential-two")
        .env("OPENAI_API_KEY", "planted-credential-three");
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let client = Arc::new(().serve(transport).await.unwrap());
    let c = client.clone();
    let _waiting = tokio::spawn(async move {
        c.call_tool(call("fixture__echo", json!({"text": "x"})))
            .await
    });
    let mut env = None;
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&seen) {
            env = Some(text);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let env = env.expect("the browser launcher ran");
    assert!(env.contains("PATH="), "{env}");
    assert!(!env.contains("planted-credential"), "{env}");
}

/// A request whose body stops arriving is ended, not waited on: a local
/// user cannot hold the page's handlers with slow bodies.
#[tokio::test]
async fn a_page_request_whose_body_stalls_is_ended() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let scratch = Scratch::new();
    let (_client, _waiting, _id) = one_waiting(&scratch, "").await;
    let link = page_link(&scratch).await;
    let addr = link
        .split("/open/")
        .next()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(
        format!("POST /api/decide HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"id\"").as_bytes(),
    )
    .await
    .unwrap();
    let limit = airlock_http::BODY_TIMEOUT + std::time::Duration::from_secs(10);
    let mut buf = [0u8; 256];
    let answered = tokio::time::timeout(limit, s.read(&mut buf))
        .await
        .expect("the stalled request was ended within the body timeout");
    if let Ok(n) = answered
        && n > 0
    {
        let head = String::from_utf8_lossy(&buf[..n]);
        assert!(!head.starts_with("HTTP/1.1 2"), "{head}");
    }
}

/// The page's connections have the face's budgets: a head timeout and a
/// cap; once the idle ones are gone, the page answers again.
#[tokio::test]
async fn half_open_page_connections_are_closed_and_capped() {
    let scratch = Scratch::new();
    let (_client, _waiting, _id) = one_waiting(&scratch, "").await;
    let link = page_link(&scratch).await;
    let base = link.split("/open/").next().unwrap().to_string();
    let addr = base.trim_start_matches("http://").to_string();
    airlock_testkit::half_open_connections_are_closed_and_capped(&addr).await;
    let r = no_redirects().get(&link).send().await.unwrap();
    assert_eq!(r.status(), 303, "the page answers again");
}

#[tokio::test]
async fn missing_csrf_is_refused() {
    let scratch = Scratch::new();
    let (_client, waiting, id) = one_waiting(&scratch, "").await;
    let page = Page::open(&scratch).await;
    let origin = page.base.clone();
    for csrf in [None, Some("0000"), Some("")] {
        let (status, said) = page.decide(&id, "allow_once", csrf, Some(&origin)).await;
        assert_eq!(status, 403, "{csrf:?}: {said}");
        assert!(said["error"].as_str().unwrap().contains("CSRF"), "{said}");
    }
    // Still waiting: the refused posts decided nothing.
    assert_eq!(page.pending().await.len(), 1);
    let (status, _) = page
        .decide(&id, "deny", Some(&page.csrf), Some(&origin))
        .await;
    assert_eq!(status, 200);
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(first_text(&r), "The user declined this tool call.");
}

#[tokio::test]
async fn foreign_origin_is_refused() {
    let scratch = Scratch::new();
    let (_client, _waiting, id) = one_waiting(&scratch, "").await;
    let page = Page::open(&scratch).await;
    let port = page.base.rsplit(':').next().unwrap().to_string();
    for origin in [
        None,
        Some("http://evil.example".to_string()),
        Some(format!("http://127.0.0.1.evil.example:{port}")),
        Some("null".to_string()),
    ] {
        let (status, said) = page
            .decide(&id, "allow_once", Some(&page.csrf), origin.as_deref())
            .await;
        assert_eq!(status, 403, "{origin:?}: {said}");
    }
    // A page reached under another name (DNS rebinding) answers nothing.
    let r = page
        .http
        .get(format!("{}/api/pending", page.base))
        .header("cookie", &page.cookie)
        .header("host", format!("rebound.example:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(page.pending().await.len(), 1, "nothing was decided");
}

#[tokio::test]
async fn late_page_decision_is_gone() {
    let scratch = Scratch::new();
    let (_client, waiting, id) = one_waiting(
        &scratch,
        "[hub]\napproval_wait = \"1s\"\napproval_ttl = \"2s\"",
    )
    .await;
    let page = Page::open(&scratch).await;
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(
        first_text(&r),
        "The user did not approve this tool call in time."
    );
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let origin = page.base.clone();
    let (status, said) = page
        .decide(&id, "allow_once", Some(&page.csrf), Some(&origin))
        .await;
    assert_eq!(status, 410, "{said}");
    assert_eq!(said["result"], "expired");
}

#[tokio::test]
async fn malformed_decision_is_refused_and_decides_nothing() {
    let scratch = Scratch::new();
    let (_client, waiting, id) = one_waiting(&scratch, "").await;
    let page = Page::open(&scratch).await;
    // The 413 closes its connection unread; a client of its own keeps the
    // shared one's pool out of that race.
    let once = reqwest::Client::new();
    let post = |body: String, client: &reqwest::Client| {
        client
            .post(format!("{}/api/decide", page.base))
            .header("cookie", &page.cookie)
            .header("origin", &page.base)
            .header("x-airlock-csrf", &page.csrf)
            .header("content-type", "application/json")
            .body(body)
    };
    for (body, status) in [
        ("{not json".to_string(), 400),
        (
            json!({"id": id, "choice": "allow_forever"}).to_string(),
            400,
        ),
        (json!({"id": id}).to_string(), 400),
        // Larger than any decision: refused before it is read.
        (format!("{{\"id\": \"{}\"}}", "a".repeat(64 * 1024)), 413),
    ] {
        let client = if status == 413 { &once } else { &page.http };
        let r = post(body, client).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status);
    }
    let (status, said) = page
        .decide(&id, "allow_forever", Some(&page.csrf), Some(&page.base))
        .await;
    assert!(
        said["error"].as_str().unwrap().contains("allow_once"),
        "{status} {said}"
    );
    assert_eq!(page.pending().await.len(), 1, "nothing was decided");
    let (status, _) = page
        .decide(&id, "allow_once", Some(&page.csrf), Some(&page.base))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        first_text(&waiting.await.unwrap().unwrap()),
        "from the page"
    );
}

#[tokio::test]
async fn the_page_names_the_sources_waiting_for_a_login_and_the_command() {
    use tokio::io::AsyncBufReadExt;
    // A url source whose server asks for OAuth, and no login yet.
    let mut provider = tokio::process::Command::new(airlock_testkit::bin("airlock-oauth-fixture"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = tokio::io::BufReader::new(provider.stdout.take().unwrap())
        .lines()
        .next_line()
        .await
        .unwrap()
        .unwrap();
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config_with_failing(
            &format!("{ASKING}\n[sources.web]\nurl = \"{base}/mcp\"\nallow_private = true\n"),
            &["web"],
        )
        .await;
    let _client = scratch.stdio_client(&config, ()).await;
    let page = Page::open(&scratch).await;
    let mut shown = Value::Null;
    for _ in 0..50 {
        let r = page
            .http
            .get(format!("{}/api/pending", page.base))
            .header("cookie", &page.cookie)
            .send()
            .await
            .unwrap();
        shown = r.json::<Value>().await.unwrap()["logins"].clone();
        if shown.as_array().is_some_and(|l| !l.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let logins = shown.as_array().expect("a list of logins");
    assert_eq!(logins.len(), 1, "{shown}");
    assert_eq!(logins[0]["source"], "web");
    assert!(
        logins[0]["detail"]
            .as_str()
            .unwrap()
            .contains("run `airlock auth login web`"),
        "{shown}"
    );
}
