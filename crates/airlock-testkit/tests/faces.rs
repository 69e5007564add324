//! The faces and the process: HTTP face guards, protocol versions on both
//! faces, config errors at start, and children that die with airlock.

use std::time::Duration;

use airlock_testkit::{Scratch, first_text};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::ClientLifecycleMode;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientServiceExt, ServiceExt, model::ProtocolVersion};
use serde_json::json;

const DEMO: &str = r#"
[sources.demo]
command = "{airlock}"
args = ["demo-server"]
"#;

fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("faces-test", "1"),
    )
}

fn read_note() -> CallToolRequestParams {
    CallToolRequestParams::new("demo__read_note")
        .with_arguments(json!({"name": "welcome"}).as_object().unwrap().clone())
}

#[tokio::test]
async fn http_face_serves_legacy_and_2026_clients() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let (_hub, url) = scratch.serve_http(&config).await;

    let legacy = client_info()
        .serve(scratch.http_transport(&url))
        .await
        .unwrap();
    let r = legacy.call_tool(read_note()).await.unwrap();
    assert!(first_text(&r).contains("Reads flow"));
    legacy.cancel().await.unwrap();

    let modern = client_info()
        .serve_with_lifecycle(
            scratch.http_transport(&url),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let tools = modern.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "demo__write_note"));
    let r = modern.call_tool(read_note()).await.unwrap();
    assert!(first_text(&r).contains("Reads flow"));
    modern.cancel().await.unwrap();
}

#[tokio::test]
async fn stdio_face_serves_a_2026_client() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let cmd = scratch.airlock(&["serve", "--config", &config.to_string_lossy()]);
    let modern = client_info()
        .serve_with_lifecycle(
            TokioChildProcess::new(cmd).unwrap(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let r = modern.call_tool(read_note()).await.unwrap();
    assert!(first_text(&r).contains("Reads flow"));
    modern.cancel().await.unwrap();
}

#[tokio::test]
async fn http_face_refuses_foreign_host_and_origin() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}
    }});
    let token = scratch.http_token();
    let http = reqwest::Client::new();
    let post = |host: Option<&str>, origin: Option<&str>| {
        let mut req = http
            .post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string());
        if let Some(h) = host {
            req = req.header("host", h);
        }
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let ok = post(None, None).await.unwrap();
    assert!(ok.status().is_success(), "{}", ok.status());
    let rebinding = post(Some("evil.example:80"), None).await.unwrap();
    assert_eq!(rebinding.status(), 403, "foreign Host must be refused");
    let page = post(None, Some("https://evil.example")).await.unwrap();
    assert_eq!(page.status(), 403, "foreign Origin must be refused");
}

#[tokio::test]
async fn malformed_json_rpc_over_http_gets_a_json_rpc_error() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let token = scratch.http_token();
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let r = post("{not json").await.unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    let r = post(r#"{"jsonrpc": "2.0", "id": 4, "method": 17}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(v["id"], 4);
    // The hub is still up and answers a proper request.
    let c = client_info()
        .serve(scratch.http_transport(&url))
        .await
        .unwrap();
    assert!(first_text(&c.call_tool(read_note()).await.unwrap()).contains("Reads flow"));
}

#[tokio::test]
async fn non_loopback_bind_is_refused() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let run = scratch
        .airlock(&[
            "serve",
            "--config",
            &config.to_string_lossy(),
            "--http",
            "0.0.0.0:0",
        ])
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("airlock must refuse at once, not serve")
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(err.contains("allow_non_loopback"), "{err}");
}

#[tokio::test]
async fn config_error_names_file_line_key_and_fix() {
    let scratch = Scratch::new();
    let config = scratch.config("[sources.demo]\ncomand = \"x\"\n");
    let out = scratch
        .airlock(&["serve", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("airlock.toml:2:1"), "{err}");
    assert!(err.contains("sources.demo.comand"), "{err}");
    assert!(err.contains("did you mean `command`"), "{err}");
}

#[tokio::test]
async fn client_json_config_runs_unchanged() {
    let scratch = Scratch::new();
    let json_path = scratch.dir.path().join("claude_desktop_config.json");
    let body = json!({"mcpServers": {"demo": {"command": airlock_testkit::bin("airlock"), "args": ["demo-server"]}}});
    std::fs::write(&json_path, body.to_string()).unwrap();
    scratch.review(&json_path).await;
    let client = scratch.stdio_client(&json_path, client_info()).await;
    // The client's file runs as it is; with no rules in it, calls ask.
    let tools = client.list_all_tools().await.unwrap();
    let read = tools.iter().find(|t| t.name == "demo__read_note").unwrap();
    assert!(
        read.description.as_deref().unwrap().contains("approval"),
        "{read:?}"
    );
    let client = std::sync::Arc::new(client);
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.call_tool(read_note()).await })
    };
    let id = scratch.pending_id().await;
    scratch.airlock(&["deny", &id]).output().await.unwrap();
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(first_text(&r), "The user declined this tool call.");

    let out = scratch
        .airlock(&["import", &json_path.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let toml = String::from_utf8_lossy(&out.stdout);
    assert!(toml.contains("[sources.demo]"), "{toml}");
    let snippet = String::from_utf8_lossy(&out.stderr);
    assert!(snippet.contains("\"serve\""), "{snippet}");
    // A client starts airlock from its own directory: the path is whole.
    assert!(!snippet.contains("\"airlock.toml\""), "{snippet}");
    assert!(snippet.contains("/airlock.toml\""), "{snippet}");
}

/// A VS Code file is imported as VS Code writes it (variables, inputs) and
/// answered with a snippet VS Code reads: `servers`, with a `type`.
#[tokio::test]
async fn a_vs_code_file_gets_a_vs_code_snippet() {
    let scratch = Scratch::new();
    let vscode = scratch.dir.path().join(".vscode");
    std::fs::create_dir(&vscode).unwrap();
    let json_path = vscode.join("mcp.json");
    std::fs::write(
        &json_path,
        r#"{"inputs": [{"type": "promptString", "id": "api-key", "password": true}],
            "servers": {"tool": {"type": "stdio", "command": "npx", "args": ["-y", "some-server", "${workspaceFolder}"],
                                 "env": {"API_KEY": "${input:api-key}"}}}}"#,
    )
    .unwrap();
    let out_path = scratch.dir.path().join("imported.toml");
    let out = scratch
        .airlock(&[
            "import",
            &json_path.to_string_lossy(),
            "--out",
            &out_path.to_string_lossy(),
        ])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let snippet: serde_json::Value =
        serde_json::from_str(&said[said.find('{').unwrap()..]).unwrap();
    assert_eq!(snippet["servers"]["airlock"]["type"], "stdio", "{snippet}");
    assert!(snippet.get("mcpServers").is_none(), "{snippet}");
    assert!(said.contains("airlock secret set api-key"), "{said}");
    let toml = std::fs::read_to_string(&out_path).unwrap();
    assert!(toml.contains("${secret:api-key}"), "{toml}");
    assert!(!toml.contains("${workspaceFolder}"), "{toml}");
    let check = scratch
        .airlock(&["policy", "check", "--config", &out_path.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// Claude Code's `~/.claude.json`: the project servers it keeps are named,
/// not dropped, and `--project` brings them in; a local URL gets
/// `allow_private`, and the TOML it writes is one airlock accepts.
#[tokio::test]
async fn a_claude_code_file_names_its_project_servers_and_imports_them_on_request() {
    let scratch = Scratch::new();
    let project = scratch.dir.path().join("app");
    std::fs::create_dir(&project).unwrap();
    let json_path = scratch.dir.path().join(".claude.json");
    let file = serde_json::json!({
        "mcpServers": {"local-api": {"type": "http", "url": "http://localhost:9/mcp"}},
        "projects": {project.to_string_lossy(): {"mcpServers": {"db": {"command": "db-server", "args": ["${HOME}"]}}}}
    });
    std::fs::write(&json_path, file.to_string()).unwrap();
    let import = |args: Vec<String>| {
        let mut all = vec![
            "import".to_string(),
            json_path.to_string_lossy().into_owned(),
        ];
        all.extend(args);
        let cmd = scratch
            .airlock(&all.iter().map(String::as_str).collect::<Vec<_>>())
            .output();
        async move {
            let out = cmd.await.unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (toml, said) = import(vec![]).await;
    assert!(said.contains("imported 1 user-scope server(s)"), "{said}");
    assert!(
        said.contains("has 1 server(s) of its own, not imported (db)"),
        "{said}"
    );
    assert!(
        said.contains(&format!("--project {}", project.display())),
        "{said}"
    );
    assert!(said.contains("`local-api` reaches this machine"), "{said}");
    assert!(toml.contains("allow_private = true"), "{toml}");
    assert!(!toml.contains("db-server"), "{toml}");
    let out_path = scratch.dir.path().join("with-project.toml");
    let (_, said) = import(vec![
        "--project".into(),
        project.to_string_lossy().into_owned(),
        "--out".into(),
        out_path.to_string_lossy().into_owned(),
    ])
    .await;
    assert!(said.contains("1 server(s) of project"), "{said}");
    let toml = std::fs::read_to_string(&out_path).unwrap();
    assert!(toml.contains("db-server"), "{toml}");
    assert!(
        !toml.contains("${HOME}"),
        "expanded as Claude Code does: {toml}"
    );
    let check = scratch
        .airlock(&["policy", "check", "--config", &out_path.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// stdin a pipe with nothing written yet, stdout not a pipe (a client that
/// logs its server's output to a file): airlock waits for input instead of
/// failing its first read with EAGAIN, which it did when it made stdin
/// non-blocking for a fast path it then did not take.
#[tokio::test]
async fn a_quiet_stdin_pipe_with_stdout_to_a_file_is_waited_on() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let out = std::fs::File::create(scratch.dir.path().join("stdout.log")).unwrap();
    let mut hub = scratch
        .airlock(&["serve", "--config", &config.to_string_lossy()])
        .stdin(std::process::Stdio::piped())
        .stdout(out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let exited = hub.try_wait().unwrap();
    let _ = hub.start_kill();
    let said = hub.wait_with_output().await.unwrap();
    assert!(
        exited.is_none(),
        "airlock exited ({exited:?}): {}",
        String::from_utf8_lossy(&said.stderr)
    );
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn children_do_not_outlive_airlock() {
    let scratch = Scratch::new();
    // This source ignores its stdin closing, so only airlock's own guard
    // (the kernel's parent-death signal) can end it.
    let config = scratch
        .reviewed_config(
            r#"
[sources.demo]
command = "{airlock}"
args = ["demo-server"]

[sources.lingering]
command = "{fixture}"
env = { FIXTURE_IGNORE_EOF = "1" }
"#,
        )
        .await;
    let (mut hub, url) = scratch.serve_http(&config).await;
    // Once the HTTP face answers, the demo source has started.
    let c = client_info()
        .serve(scratch.http_transport(&url))
        .await
        .unwrap();
    c.list_all_tools().await.unwrap();
    let hub_pid = hub.id().unwrap();
    let children = children_of(hub_pid);
    assert!(
        !children.is_empty(),
        "the demo source should be a child process"
    );
    // SIGKILL: no destructor, no signal handler runs in airlock.
    hub.start_kill().unwrap();
    let _ = hub.wait().await;
    let mut alive = children.clone();
    for _ in 0..50 {
        alive.retain(|pid| {
            std::path::Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(*pid)
        });
        if alive.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(alive.is_empty(), "children {alive:?} outlived airlock");
}

#[cfg(target_os = "linux")]
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // Fields after the command name (which may contain spaces): state ppid ...
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let ppid = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

#[cfg(target_os = "linux")]
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
                .unwrap_or(false)
        })
        .unwrap_or(true)
}

/// A 2026-07-28 client cannot receive the elicitation request a legacy
/// source sends mid-call; airlock turns it into `input_required` and
/// resumes the waiting call when the client comes back with the answer.
#[tokio::test]
async fn input_required_round_trip_for_a_2026_client() {
    use rmcp::model::{CallToolResponse, InputResponses};
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(
            r#"
[sources.fixture]
command = "{fixture}"
"#,
        )
        .await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let caps: ClientCapabilities =
        serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
    let client = ClientConfig::new(caps, Implementation::new("faces-test", "1"))
        .serve_with_lifecycle(
            scratch.http_transport(&url),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let ask = |state: Option<String>, tool: &str, answer: Option<serde_json::Value>| {
        let mut p = CallToolRequestParams::new(tool.to_string());
        p.request_state = state;
        p.input_responses = answer.map(|a| {
            let mut r = InputResponses::new();
            r.insert("airlock-input".into(), a);
            r
        });
        client.call_tool_once(p)
    };
    let first = ask(None, "fixture__elicit", None).await.unwrap();
    let CallToolResponse::InputRequired(needed) = first else {
        panic!("expected input_required, got {first:?}");
    };
    let requests = serde_json::to_value(&needed.input_requests).unwrap();
    assert_eq!(
        requests["airlock-input"]["params"]["message"],
        "What is your favourite colour?"
    );
    let state = needed.request_state.clone().unwrap();
    let answer = json!({"action": "accept", "content": {"colour": "teal"}});

    // Tampered state: refused, and the real one still works afterwards.
    let tampered = format!("{state}x");
    let err = ask(Some(tampered), "fixture__elicit", Some(answer.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown, already used or expired"), "{err}");
    // The state of one tool cannot resume a call of another.
    let err = ask(Some(state.clone()), "fixture__echo", Some(answer.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("belongs to a call of `fixture__elicit`"),
        "{err}"
    );

    let done = ask(Some(state.clone()), "fixture__elicit", Some(answer.clone()))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("expected the final result, got {done:?}");
    };
    let text = first_text(&result);
    assert!(
        text.contains("action=accept") && text.contains("teal"),
        "{text}"
    );

    // Single use: a replay finds nothing.
    let err = ask(Some(state), "fixture__elicit", Some(answer))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown, already used or expired"), "{err}");
    client.cancel().await.unwrap();
}

/// Loopback is not a boundary: another local user reaches 127.0.0.1 too.
/// Only a request with the user's token (kept 0600 in the data directory)
/// gets past the HTTP face; everything else is 401 before any parsing.
#[tokio::test]
async fn http_face_refuses_requests_without_the_client_token() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let token = scratch.http_token();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(scratch.home().join("http-token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the token file must be private");
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}
    }})
    .to_string();
    let http = reqwest::Client::new();
    let post = |auth: Vec<String>, url: String| {
        let mut req = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.clone());
        for a in auth {
            req = req.header("authorization", a);
        }
        req.send()
    };
    let near = format!("{}x", &token[..token.len() - 1]);
    let refused: Vec<(&str, Vec<String>, String)> = vec![
        ("no header", vec![], url.clone()),
        ("wrong token", vec![format!("Bearer {near}")], url.clone()),
        (
            "a prefix of it",
            vec![format!("Bearer {}", &token[..20])],
            url.clone(),
        ),
        (
            "with a suffix",
            vec![format!("Bearer {token}x")],
            url.clone(),
        ),
        ("basic scheme", vec![format!("Basic {token}")], url.clone()),
        ("no scheme", vec![token.clone()], url.clone()),
        ("empty bearer", vec!["Bearer ".into()], url.clone()),
        ("in the query", vec![], format!("{url}?token={token}")),
        (
            "right and wrong together",
            vec![format!("Bearer {token}"), format!("Bearer {near}")],
            url.clone(),
        ),
    ];
    for (what, auth, to) in refused {
        let r = post(auth, to).await.unwrap();
        assert_eq!(r.status(), 401, "{what}: must be refused");
        assert!(r.headers().contains_key("www-authenticate"), "{what}");
        let body = r.text().await.unwrap();
        assert!(
            !body.contains("jsonrpc"),
            "{what}: nothing is parsed: {body}"
        );
    }
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = http.request(method.clone(), &url).send().await.unwrap();
        assert_eq!(r.status(), 401, "{method} without the token");
    }
    let ok = post(vec![format!("bearer {token}")], url.clone())
        .await
        .unwrap();
    assert!(ok.status().is_success(), "the scheme is case-insensitive");

    // A rotated token replaces the old one in the running hub.
    let out = scratch
        .airlock(&["token", "--rotate"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let rotated = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_ne!(rotated, token);
    assert_eq!(rotated, scratch.http_token());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let old = post(vec![format!("Bearer {token}")], url.clone())
            .await
            .unwrap();
        if old.status() == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the old token still works"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let new = post(vec![format!("Bearer {rotated}")], url.clone())
        .await
        .unwrap();
    assert!(new.status().is_success(), "{}", new.status());
}

/// A stdio source runs as the same user as the hub; it must not read the
/// hub's environment or memory through /proc. Run as an unprivileged uid
/// (root could read anything), with a same-uid process as the reader and a
/// same-uid `sleep` as the control that proves the reader could read.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_hub_cannot_be_read_by_processes_of_its_own_user() {
    use std::os::unix::fs::PermissionsExt;
    if !std::fs::metadata("/usr/bin/setpriv").is_ok_and(|m| m.is_file())
        || !std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
    {
        eprintln!("skipped: needs root and setpriv to run the hub as another uid");
        return;
    }
    let scratch = Scratch::new();
    let home = scratch.home();
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(scratch.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |program: &str| {
        let mut c = tokio::process::Command::new("/usr/bin/setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            program,
        ])
        .env("AIRLOCK_HOME", &home)
        .env("AIRLOCK_NO_BROWSER", "1")
        .env("HUB_ONLY_MARKER", "marker-4f1c9a")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
        c
    };
    let airlock = airlock_testkit::bin("airlock");
    let mut hub = as_nobody(airlock.to_str().unwrap());
    hub.arg("serve");
    let hub = hub.spawn().unwrap();
    let mut control = as_nobody("/bin/sleep");
    control.arg("30");
    let control = control.spawn().unwrap();
    let read = |pid: u32| async move {
        let out = as_nobody("/bin/cat")
            .arg(format!("/proc/{pid}/environ"))
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("marker-4f1c9a")
    };
    // Wait until the hub runs as nobody (setpriv has exec'd it).
    let pid = hub.id().unwrap();
    for _ in 0..100 {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if exe.ends_with("airlock") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        read(control.id().unwrap()).await,
        "control: a same-uid process can read an ordinary process's environment"
    );
    assert!(
        !read(pid).await,
        "a same-uid process read the hub's environment"
    );
}

/// Sessions are a budget: past the cap a new session is refused with 503
/// and a JSON-RPC error; closing one makes room again.
#[tokio::test]
async fn http_sessions_are_capped() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let token = scratch.http_token();
    let http = reqwest::Client::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}
    }})
    .to_string();
    let open = || {
        http.post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.clone())
            .send()
    };
    let mut ids = Vec::new();
    for _ in 0..airlock_gateway::faces::http::MAX_SESSIONS {
        let r = open().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        ids.push(r.headers()["mcp-session-id"].to_str().unwrap().to_string());
    }
    let refused = open().await.unwrap();
    assert_eq!(refused.status(), 503);
    let v: serde_json::Value = refused.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sessions are open"),
        "{v}"
    );
    let closed = http
        .delete(&url)
        .bearer_auth(&token)
        .header("mcp-session-id", &ids[0])
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let again = open().await.unwrap();
    assert!(
        again.status().is_success(),
        "room again after one closed: {}",
        again.status()
    );
}

/// Connections are a budget too: one that sends nothing, or half a request
/// head, is closed after the head timeout; past the cap a new connection is
/// closed on accept; once the idle ones are gone, a real client is served.
#[tokio::test]
async fn half_open_http_connections_are_closed_and_capped() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let (_hub, url) = scratch.serve_http(&config).await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    airlock_testkit::half_open_connections_are_closed_and_capped(&addr).await;
    let ok = reqwest::Client::new()
        .post(&url)
        .bearer_auth(scratch.http_token())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert!(ok.status().is_success(), "{}", ok.status());
}

/// Started with a low soft limit on open files (a common default), the
/// hub raises it to the hard limit, so its listeners' connection caps fit.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_hub_raises_its_open_file_limit() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(DEMO).await;
    let airlock = airlock_testkit::bin("airlock");
    let mut hub = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -Sn 256 && exec \"$0\" serve --config \"$1\"")
        .arg(&airlock)
        .arg(&config)
        .env("AIRLOCK_HOME", scratch.home())
        .env("AIRLOCK_NO_BROWSER", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = hub.id().unwrap();
    let mut line = String::new();
    for _ in 0..100 {
        // Until the shell has become airlock, its limits say nothing.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("serve") {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        }
        // And until airlock has started its runtime, neither do its own.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
        line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap_or_default()
            .to_string();
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 5 && fields[3] == fields[4] && fields[3] != "256" {
            hub.kill().await.unwrap();
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the soft limit was not raised: {line}");
}
