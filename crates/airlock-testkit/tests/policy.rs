//! Policy end to end: the real binary deciding calls to a real upstream
//! process, and recording every decision.

use airlock_testkit::{Scratch, call, first_text};
use serde_json::json;
const FIXTURE: &str = r#"
[sources.fixture]
command = "{fixture}"
"#;

async fn upstream_saw(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>) -> String {
    first_text(
        &client
            .call_tool(call("fixture__calls", json!({})))
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn deny_never_reaches_the_server() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(&format!(
            "{FIXTURE}\n[[rules]]\naction = \"deny\"\ntool = \"fixture__echo\"\n"
        ))
        .await;
    let client = scratch.stdio_client(&config, ()).await;
    // Hidden from the model...
    let tools = client.list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name == "fixture__echo"));
    // ...and refused if called anyway, without reaching the server.
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(
        first_text(&r).starts_with("airlock: denied"),
        "{}",
        first_text(&r)
    );
    assert_eq!(upstream_saw(&client).await, "calls");
    client.cancel().await.unwrap();
}

/// Why the last call asked, as the person sees it in `airlock pending --all`.
async fn why_it_asked(scratch: &Scratch) -> String {
    let out = scratch
        .airlock(&["pending", "--all"])
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const SHORT_WAIT: &str = "[hub]\napproval_wait = \"1s\"\napproval_ttl = \"2s\"\n";

#[tokio::test]
async fn unreviewed_tool_asks_and_never_runs() {
    let scratch = Scratch::new();
    // A rule allows everything, but nobody has reviewed the tools yet.
    let config = scratch.config(&format!(
        "{SHORT_WAIT}{FIXTURE}\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n"
    ));
    scratch.approve_commands(&config, &["fixture"]).await;
    let client = scratch.stdio_client(&config, ()).await;
    let tools = client.list_all_tools().await.unwrap();
    let echo = tools.iter().find(|t| t.name == "fixture__echo").unwrap();
    assert!(
        echo.description
            .as_deref()
            .unwrap()
            .contains("pause for the user's approval")
    );
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(
        first_text(&r),
        "The user did not approve this tool call in time."
    );
    assert!(why_it_asked(&scratch).await.contains("not been reviewed"));
    client.cancel().await.unwrap();
    // Reviewing pins the contracts, and the same call then runs.
    scratch.review(&config).await;
    let client = scratch.stdio_client(&config, ()).await;
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "now"})))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "now");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn changed_contract_asks_again_end_to_end() {
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(FIXTURE).await;
    // The server updates itself: same tool name, different description.
    let changed = scratch.config(
        r#"
[hub]
approval_wait = "1s"
approval_ttl = "2s"

[sources.fixture]
command = "{fixture}"
env = { FIXTURE_VARIANT = "2" }

[[rules]]
action = "allow"
source = "*"
"#,
    );
    assert_eq!(config, changed);
    // The new environment changed the command too; approve only that.
    scratch.approve_commands(&changed, &["fixture"]).await;
    let client = scratch.stdio_client(&changed, ()).await;
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(
        first_text(&r),
        "The user did not approve this tool call in time."
    );
    assert!(
        why_it_asked(&scratch)
            .await
            .contains("changed since it was reviewed")
    );
    // Unchanged tools still run.
    assert_eq!(upstream_saw(&client).await, "calls");
    client.cancel().await.unwrap();
    // The review shows the change and flags what the new text asks for.
    let out = scratch
        .airlock(&[
            "tools",
            "review",
            "--config",
            &changed.to_string_lossy(),
            "--list",
        ])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("CHANGED tool fixture__echo"), "{shown}");
    assert!(
        shown.contains("+ Echo the text back. Also reads ~/.ssh"),
        "{shown}"
    );
    assert!(shown.contains("~/.ssh"), "{shown}");
}

#[tokio::test]
async fn every_decision_is_audited_and_the_chain_verifies() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(&format!(
            "{FIXTURE}\n[[rules]]\naction = \"deny\"\ntool = \"fixture__log\"\n"
        ))
        .await;
    let client = scratch.stdio_client(&config, ()).await;
    client
        .call_tool(call("fixture__echo", json!({"text": "secret-ish"})))
        .await
        .unwrap();
    client
        .call_tool(call("fixture__log", json!({})))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let out = scratch
        .airlock(&["audit", "--jsonl"])
        .output()
        .await
        .unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decision = |tool: &str| {
        lines
            .iter()
            .find(|l| l["tool"] == tool && l["kind"] == "decision")
            .unwrap_or_else(|| panic!("no decision for {tool}: {lines:?}"))
            .clone()
    };
    let echo = decision("fixture__echo");
    assert_eq!(echo["decision"], "allow");
    assert_eq!(echo["layer"], "user");
    assert!(echo["rule"].as_str().unwrap().contains("airlock.toml:"));
    assert!(echo["args_digest"].as_str().unwrap().starts_with("sha256:"));
    let log = decision("fixture__log");
    assert_eq!(log["decision"], "deny");
    assert!(
        lines
            .iter()
            .any(|l| l["tool"] == "fixture__echo" && l["outcome"] == "ok")
    );
    assert!(
        !lines
            .iter()
            .any(|l| l["tool"] == "fixture__log" && l["kind"] == "outcome")
    );
    let out = scratch
        .airlock(&["audit", "verify"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("chain intact"));
}

#[tokio::test]
async fn explain_names_the_layer_rule_and_signals() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(&format!(
            "{FIXTURE}\n[[rules]]\naction = \"ask\"\ntool = \"fixture__echo\"\n"
        ))
        .await;
    let out = scratch
        .airlock(&[
            "policy",
            "explain",
            "fixture__echo",
            "--args",
            r#"{"text": "hi"}"#,
            "--config",
            &config.to_string_lossy(),
        ])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("fixture__echo: ASK"), "{text}");
    assert!(text.contains("1. no deny rule matches"), "{text}");
    assert!(text.contains("2. contract sha256:"), "{text}");
    assert!(text.contains("3. most specific rule: ask at"), "{text}");
    assert!(text.contains("user layer, matches by tool"), "{text}");
}

#[tokio::test]
async fn bad_policy_refuses_to_start() {
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "{FIXTURE}\n[[rules]]\naction = \"Allow\"\nsource = \"*\"\n"
    ));
    let out = scratch
        .airlock(&["serve", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`Allow` is not an action"), "{err}");
    assert!(err.contains("did you mean \"allow\""), "{err}");
    let out = scratch
        .airlock(&["policy", "check", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[cfg(unix)]
#[tokio::test]
async fn failed_reload_keeps_the_last_good_policy() {
    use airlock_testkit::RawStdio;
    let scratch = Scratch::new();
    let config = scratch.reviewed_config(FIXTURE).await;
    let mut raw = RawStdio::start(&scratch, &config);
    raw.handshake("2025-06-18").await;
    let mut id = 10;
    let mut echo = async |raw: &mut RawStdio| {
        id += 1;
        raw.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "fixture__echo", "arguments": {"text": "hi"}}}))
            .await;
        let (m, _) = raw.response(id).await;
        airlock_testkit::unquote(m["result"]["content"][0]["text"].as_str().unwrap())
    };
    assert_eq!(echo(&mut raw).await, "hi");
    let hangup = |pid: u32| {
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    let pid = raw.child.id().unwrap();

    // A good change applies on SIGHUP.
    let body = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{body}\n[[rules]]\naction = \"deny\"\ntool = \"fixture__echo\"\n"),
    )
    .unwrap();
    hangup(pid);
    let mut denied = false;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if echo(&mut raw).await.starts_with("airlock: denied") {
            denied = true;
            break;
        }
    }
    assert!(denied, "the reloaded deny never applied");

    // A broken file changes nothing: the deny stays in force.
    std::fs::write(
        &config,
        format!("{body}\n[[rules]]\naction = \"Allow\"\nsource = \"*\"\n"),
    )
    .unwrap();
    hangup(pid);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(echo(&mut raw).await.starts_with("airlock: denied"));
}

#[tokio::test]
async fn unreviewed_command_never_runs_and_a_changed_one_asks_again() {
    let scratch = Scratch::new();
    let config = scratch.config(&format!("[hub]\nconnect_timeout = \"5s\"\n{FIXTURE}"));
    let report = scratch.doctor(&config).await;
    assert!(report.contains("has not been reviewed"), "{report}");
    assert!(report.contains("airlock-fixture"), "{report}");
    scratch.approve_commands(&config, &["fixture"]).await;
    let report = scratch.doctor(&config).await;
    assert!(report.contains("ok    source fixture"), "{report}");
    // Same source, different arguments: it asks again.
    let changed = scratch.config(&format!(
        "[hub]\nconnect_timeout = \"5s\"\n{FIXTURE}args = [\"--verbose\"]\n"
    ));
    let report = scratch.doctor(&changed).await;
    assert!(report.contains("changed since it was reviewed"), "{report}");
}

#[tokio::test]
async fn program_outside_the_allow_list_never_runs() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config_with_failing(
            &format!("[hub]\nallowed_programs = [\"npx\"]\nconnect_timeout = \"5s\"\n{FIXTURE}"),
            &["fixture"],
        )
        .await;
    let report = scratch.doctor(&config).await;
    assert!(report.contains("not in hub.allowed_programs"), "{report}");
}

/// The spellings of `/home/me/.ssh/id_rsa` (and of the directory) that a
/// server opens as that file, and the values a deny cannot read.
const SSH_SPELLINGS: &[&str] = &[
    "/home/me/.ssh/id_rsa",
    "/home/me/./.ssh/id_rsa",
    "/home/me/x/../.ssh/id_rsa",
    "//home/me/.ssh/id_rsa",
    "/home/me/.ssh/",
    "/home/me/.ssh",
    "/home/me/.ssh/./x/../id_rsa",
    "/home/me/%2essh/id_rsa",
    "/home/me/.ssh%2fid_rsa",
    "\\home\\me\\.ssh\\id_rsa",
    "/home/me/.ssh/id_rsa\u{0}.txt",
    "/../home/me/.ssh/id_rsa",
    "~/.ssh/id_rsa",
];

#[tokio::test]
async fn a_path_deny_holds_for_every_spelling_and_the_server_never_sees_one() {
    let scratch = Scratch::new();
    // A deny on a path glob beside an allow of everything else.
    let config = scratch
        .reviewed_config(&format!(
            "{FIXTURE}\n[[rules]]\naction = \"deny\"\ntool = \"fixture__echo\"\n[[rules.when]]\npointer = \"/text\"\nglob = \"/home/me/.ssh/**\"\n"
        ))
        .await;
    let client = scratch.stdio_client(&config, ()).await;
    let denied = |r: &rmcp::model::CallToolResult| first_text(r).starts_with("airlock: denied");
    for spelling in SSH_SPELLINGS {
        let r = client
            .call_tool(call("fixture__echo", json!({ "text": spelling })))
            .await
            .unwrap();
        assert!(denied(&r), "{spelling:?} got through: {}", first_text(&r));
    }
    // Not a string: a lenient server might take the first element.
    let r = client
        .call_tool(call(
            "fixture__echo",
            json!({ "text": ["/home/me/.ssh/id_rsa"] }),
        ))
        .await
        .unwrap();
    assert!(denied(&r), "{}", first_text(&r));
    // A path outside runs, so the deny did not simply take everything.
    let r = client
        .call_tool(call(
            "fixture__echo",
            json!({ "text": "/home/me/notes.txt" }),
        ))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "/home/me/notes.txt");
    // The server saw that one call and nothing else.
    assert_eq!(upstream_saw(&client).await, "echo,calls");
    client.cancel().await.unwrap();
    // `policy explain` agrees with the hub and says why.
    let out = scratch
        .airlock(&[
            "policy",
            "explain",
            "fixture__echo",
            "--args",
            r#"{"text": "/home/me/x/../.ssh/id_rsa"}"#,
            "--config",
            &config.to_string_lossy(),
        ])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("fixture__echo: DENY"), "{text}");
    assert!(text.contains("read as \"/home/me/.ssh/id_rsa\""), "{text}");
}

#[tokio::test]
async fn a_managed_deny_binds_the_tool_whatever_prefix_the_user_sets() {
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("managed.toml"),
        "[[rules]]\naction = \"deny\"\ntool = \"*__echo\"\n",
    )
    .unwrap();
    // The user drops the prefix and allows the bare name.
    let config = scratch
        .reviewed_config(&format!(
            "[hub]\nmanaged_policy = \"managed.toml\"\n{FIXTURE}prefix = false\n\n[[rules]]\naction = \"allow\"\ntool = \"echo\"\n"
        ))
        .await;
    let client = scratch.stdio_client(&config, ()).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"calls"), "{names:?}");
    assert!(!names.contains(&"echo"), "{names:?}");
    let r = client
        .call_tool(call("echo", json!({"text": "x"})))
        .await
        .unwrap();
    assert!(
        first_text(&r).starts_with("airlock: denied"),
        "{}",
        first_text(&r)
    );
    let saw = client.call_tool(call("calls", json!({}))).await.unwrap();
    assert_eq!(first_text(&saw), "calls");
    client.cancel().await.unwrap();
    let out = scratch
        .airlock(&[
            "policy",
            "explain",
            "echo",
            "--config",
            &config.to_string_lossy(),
        ])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("echo: DENY"), "{text}");
    assert!(text.contains("managed layer"), "{text}");
}

async fn policy_check(scratch: &Scratch, config: &std::path::Path) -> (Option<i32>, String) {
    let out = scratch
        .airlock(&["policy", "check", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn policy_check_fails_a_deny_that_matches_nothing() {
    let scratch = Scratch::new();
    // Reviewing stores the catalog the rules are checked against.
    let config = scratch
        .reviewed_config(&format!(
            "{FIXTURE}\n[[rules]]\naction = \"deny\"\ntool = \"fixture__echo\"\n"
        ))
        .await;
    let (code, text) = policy_check(&scratch, &config).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("FAIL") && !text.contains("warn"), "{text}");

    // A typo: the deny protects nothing.
    let config = scratch.config(&format!(
        "{FIXTURE}\n[[rules]]\naction = \"allow\"\nsource = \"*\"\n\n[[rules]]\naction = \"deny\"\ntool = \"fixture__ecoh\"\n"
    ));
    let (code, text) = policy_check(&scratch, &config).await;
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("FAIL  deny at") && text.contains("airlock.toml:9"),
        "{text}"
    );
    assert!(
        text.contains("tool glob `fixture__ecoh` matches no known tool (closest: fixture__echo"),
        "{text}"
    );
    // `explain` names the deny that nearly matched.
    let out = scratch
        .airlock(&[
            "policy",
            "explain",
            "fixture__echo",
            "--config",
            &config.to_string_lossy(),
        ])
        .output()
        .await
        .unwrap();
    let explained = String::from_utf8_lossy(&out.stdout);
    assert!(
        explained.contains(
            "deny at {}:9 (user layer) did not match: tool glob `fixture__ecoh` vs `fixture__echo`"
                .replace("{}", &config.to_string_lossy())
                .as_str()
        ),
        "{explained}"
    );

    // Marked intentional, it passes with a warning; an allow that matches
    // nothing only warns.
    let config = scratch.config(&format!(
        "{FIXTURE}\n[[rules]]\naction = \"allow\"\ntool = \"fixture__nope\"\n\n[[rules]]\naction = \"deny\"\ntool = \"fixture__ecoh\"\nfor_future = true\n"
    ));
    let (code, text) = policy_check(&scratch, &config).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("warn  deny at"), "{text}");
    assert!(text.contains("for_future = true"), "{text}");
    assert!(
        text.contains("warn  allow at") && text.contains("`fixture__nope`"),
        "{text}"
    );
    // A source or connection that does not exist fails a deny as well.
    let config = scratch.config(&format!(
        "{FIXTURE}\n[[rules]]\naction = \"deny\"\nsource = \"fixtrue\"\n\n[[rules]]\naction = \"deny\"\nsource = \"fixture\"\nconnection = \"wrok\"\n"
    ));
    let (code, text) = policy_check(&scratch, &config).await;
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("(closest: fixture)"), "{text}");
    assert!(text.contains("connection `wrok`"), "{text}");
}

#[tokio::test]
async fn a_changed_env_value_or_path_asks_for_review_again() {
    let scratch = Scratch::new();
    let bin_dir = airlock_testkit::bin("airlock-fixture")
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // Found by name on the PATH the source is given.
    let body = |path: &str, mode: &str| {
        format!(
            "[hub]\nconnect_timeout = \"5s\"\n\n[sources.fixture]\ncommand = \"airlock-fixture\"\nenv = {{ PATH = {path:?}, MODE = {mode:?} }}\n"
        )
    };
    let config = scratch.config(&body(&bin_dir, "a"));
    scratch.approve_commands(&config, &["fixture"]).await;
    let report = scratch.doctor(&config).await;
    assert!(report.contains("ok    source fixture"), "{report}");
    // Only a value changes: it asks again, and does not show the value.
    let config = scratch.config(&body(&bin_dir, "b"));
    let report = scratch.doctor(&config).await;
    assert!(report.contains("changed since it was reviewed"), "{report}");
    assert!(!report.contains("MODE=\"b\""), "{report}");
    // Another PATH, another program: it asks again, showing the PATH.
    let other = scratch.dir.path().join("bin");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(
        airlock_testkit::bin("airlock-fixture"),
        other.join("airlock-fixture"),
    )
    .unwrap();
    let config = scratch.config(&body(&other.to_string_lossy(), "a"));
    let report = scratch.doctor(&config).await;
    assert!(report.contains("changed since it was reviewed"), "{report}");
    assert!(
        report.contains(&other.join("airlock-fixture").to_string_lossy().into_owned()),
        "{report}"
    );
}
