//! Code mode through the binary: the model's program runs in the sandbox,
//! every call it makes goes through policy and approval, a paused run is
//! resumed without repeating a call (I6), and no secret reaches the code,
//! the journal or the result (I1).

use std::time::Duration;

use airlock_testkit::{Scratch, bytes_contain, call, first_text, secret_forms, unquote};
use serde_json::{Value, json};

type Client = std::sync::Arc<rmcp::service::RunningService<rmcp::RoleClient, ()>>;

/// A fixture source whose calls are written to `calls.log`, one tool name a
/// line; `slow` asks; `echo` with the text "forbidden" is denied.
fn config(scratch: &Scratch, mode: &str) -> String {
    let log = scratch.dir.path().join("calls.log");
    format!(
        r#"
[hub]
code_mode = "{mode}"
approval_wait = "1s"
code_cpu = "500ms"
code_memory_mib = 16

[sources.fixture]
command = "{{fixture}}"
env = {{ FIXTURE_LOG = {log:?}, FIXTURE_TOKEN = "secret:CODE_TOKEN" }}

[[rules]]
action = "ask"
tool = "fixture__slow"

[[rules]]
action = "deny"
tool = "fixture__echo"
[[rules.when]]
pointer = "/text"
equals = "forbidden"
"#
    )
}

const TOKEN: &str = "tok_code_7Hq2Lm9Vx4Rb8Nc3Kd6Pf1Zs5";

async fn start(mode: &str) -> (Scratch, Client) {
    let scratch = Scratch::new();
    scratch.store_secret("CODE_TOKEN", TOKEN).await;
    let config = scratch.reviewed_config(&config(&scratch, mode)).await;
    let client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    (scratch, client)
}

/// What a meta tool answered, as one JSON object (airlock's words, and the
/// run's data unquoted), with whether it was an error.
async fn meta(client: &Client, tool: &str, args: Value) -> (Value, bool) {
    let r = tokio::time::timeout(Duration::from_secs(30), client.call_tool(call(tool, args)))
        .await
        .expect("the meta tool answers")
        .expect("a result");
    let text = first_text(&r);
    let mut v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    if let Some(data) = r.content.get(1).and_then(|c| c.as_text()) {
        let quoted = data.text.starts_with("[airlock] What follows");
        let data: Value =
            serde_json::from_str(&unquote(&data.text)).expect("the run's data is JSON");
        for (k, d) in data.as_object().unwrap() {
            v[k] = d.clone();
        }
        v["quoted"] = json!(quoted);
    }
    (v, r.is_error == Some(true))
}

async fn run_code(client: &Client, code: &str) -> (Value, bool) {
    meta(client, "run_code", json!({ "code": code })).await
}

/// The tools the fixture ran, in order (its `calls.log`).
fn upstream_calls(scratch: &Scratch) -> Vec<String> {
    std::fs::read_to_string(scratch.dir.path().join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn count(calls: &[String], tool: &str) -> usize {
    calls.iter().filter(|c| *c == tool).count()
}

async fn approve(scratch: &Scratch) {
    let id = scratch.pending_id().await;
    let out = scratch.airlock(&["approve", &id]).output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

const FOUR_CALLS: &str = "
    const a = await tools.fixture.echo({ text: 'one' });
    const b = await tools.fixture.echo({ text: 'two' });
    const c = await tools.fixture.echo({ text: 'three' });
    const d = await tools.fixture.slow({ ms: 1 });
    return [a, b, c, d, Math.random(), Date.now()];
";

#[tokio::test]
async fn a_paused_run_resumes_without_repeating_a_call() {
    let (scratch, client) = start("only").await;
    // Only the meta tools are listed, and tools are not called directly.
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(listed, ["search_tools", "run_code", "resume_run"]);
    let direct = client
        .call_tool(call("fixture__echo", json!({"text": "x"})))
        .await;
    assert!(
        format!("{direct:?}").contains("code mode only"),
        "{direct:?}"
    );

    // Three calls run, the fourth asks, the wait ends: the run pauses.
    let (paused, is_error) = run_code(&client, FOUR_CALLS).await;
    assert!(!is_error, "{paused}");
    assert_eq!(paused["status"], "paused", "{paused}");
    let run_id = paused["run_id"].as_str().unwrap().to_string();
    let seen = upstream_calls(&scratch);
    assert_eq!(
        (count(&seen, "echo"), count(&seen, "slow")),
        (3, 0),
        "{seen:?}"
    );
    // Resuming before anyone decided pauses again, and runs nothing.
    let (again, _) = meta(&client, "resume_run", json!({ "run_id": run_id })).await;
    assert_eq!(again["status"], "paused", "{again}");
    assert_eq!(count(&upstream_calls(&scratch), "echo"), 3);

    approve(&scratch).await;
    let (done, is_error) = meta(&client, "resume_run", json!({ "run_id": run_id })).await;
    assert!(!is_error, "{done}");
    assert_eq!(done["status"], "finished", "{done}");
    // Replayed or not, what came from the (untrusted) source is quoted.
    assert_eq!(done["quoted"], true, "{done}");
    let result = done["result"].as_array().unwrap();
    assert_eq!(
        result[..4],
        [json!("one"), json!("two"), json!("three"), json!("done")]
    );
    // Each call reached the upstream exactly once.
    let seen = upstream_calls(&scratch);
    assert_eq!(
        (count(&seen, "echo"), count(&seen, "slow")),
        (3, 1),
        "{seen:?}"
    );

    // A finished run cannot be resumed, nor can one that does not exist.
    let r = client
        .call_tool(call("resume_run", json!({ "run_id": run_id })))
        .await;
    assert!(format!("{r:?}").contains("finished, not paused"), "{r:?}");
    let r = client
        .call_tool(call("resume_run", json!({ "run_id": "run-nope" })))
        .await;
    assert!(format!("{r:?}").contains("no such run"), "{r:?}");

    // The person can read the run and its journal.
    let out = scratch
        .airlock(&["runs", "show", &run_id])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("finished"), "{shown}");
    assert!(shown.contains("#4  fixture__slow  settled"), "{shown}");
    let out = scratch.airlock(&["runs"]).output().await.unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&run_id));
    // The run's calls are in the audit log under the run and their place:
    // the approval of call 4 and its outcome among them.
    drop(client);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = scratch
        .airlock(&["audit", "--jsonl"])
        .output()
        .await
        .unwrap();
    let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |call: &str| records.iter().filter(|r| r["call_id"] == call).count();
    assert!(
        of(&format!("{run_id}#1")) >= 2,
        "decision and outcome of call 1"
    );
    assert!(
        records
            .iter()
            .any(|r| r["call_id"] == format!("{run_id}#4") && r["decision"] == "approved"),
        "the person's approval of call 4 is on record under the run"
    );
}

#[tokio::test]
async fn a_resumed_run_that_takes_another_path_diverges_and_makes_no_call() {
    let (scratch, client) = start("beside").await;
    let (paused, _) = run_code(&client, FOUR_CALLS).await;
    assert_eq!(paused["status"], "paused", "{paused}");
    let run_id = paused["run_id"].as_str().unwrap().to_string();
    approve(&scratch).await;
    // The stored program now calls with other arguments at position 2.
    scratch.raw_sql(&format!(
        "UPDATE runs SET code = replace(code, '''two''', '''changed''') WHERE id = '{run_id}'"
    ));
    let before = upstream_calls(&scratch);
    let (diverged, is_error) = meta(&client, "resume_run", json!({ "run_id": run_id })).await;
    assert!(is_error, "{diverged}");
    assert_eq!(diverged["status"], "diverged", "{diverged}");
    assert!(
        diverged["error"].as_str().unwrap().contains("call 2"),
        "{diverged}"
    );
    assert_eq!(
        upstream_calls(&scratch),
        before,
        "a diverged run made a call"
    );
}

#[tokio::test]
async fn two_resumes_at_once_take_the_run_once() {
    let (scratch, client) = start("only").await;
    let (paused, _) = run_code(&client, FOUR_CALLS).await;
    let run_id = paused["run_id"].as_str().unwrap().to_string();
    approve(&scratch).await;
    let resume = |client: Client, id: String| {
        tokio::spawn(async move {
            client
                .call_tool(call("resume_run", json!({ "run_id": id })))
                .await
        })
    };
    let (a, b) = tokio::join!(
        resume(client.clone(), run_id.clone()),
        resume(client.clone(), run_id)
    );
    let answers = [format!("{:?}", a.unwrap()), format!("{:?}", b.unwrap())];
    let finished = answers.iter().filter(|a| a.contains("finished")).count();
    assert_eq!(finished, 1, "{answers:?}");
    let seen = upstream_calls(&scratch);
    assert_eq!(
        (count(&seen, "echo"), count(&seen, "slow")),
        (3, 1),
        "{seen:?}"
    );
}

#[tokio::test]
async fn refusals_reach_the_code_as_errors_it_can_catch() {
    let (scratch, client) = start("beside").await;
    let code = "
        const out = {};
        for (const [name, f] of [
            ['denied', () => tools.fixture.echo({ text: 'forbidden' })],
            ['unknown', () => globalThis.tools.fixture.nope({})],
        ]) {
            try { await f(); out[name] = 'ran'; } catch (e) { out[name] = e.code || e.name; }
        }
        return out;
    ";
    let (v, is_error) = run_code(&client, code).await;
    assert!(!is_error, "{v}");
    assert_eq!(
        v["result"],
        json!({"denied": "policy_denied", "unknown": "TypeError"}),
        "{v}"
    );
    assert_eq!(count(&upstream_calls(&scratch), "echo"), 0);
    // A declined call rejects with approval_denied.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            run_code_owned(client, "try { await tools.fixture.slow({ms: 1}); return 'ran'; } catch (e) { return e.code; }").await
        })
    };
    let id = scratch.pending_id().await;
    scratch.airlock(&["deny", &id]).output().await.unwrap();
    let (v, _) = waiting.await.unwrap();
    assert_eq!(v["result"], "approval_denied", "{v}");
    assert_eq!(count(&upstream_calls(&scratch), "slow"), 0);
}

async fn run_code_owned(client: Client, code: &str) -> (Value, bool) {
    run_code(&client, code).await
}

#[tokio::test]
async fn escapes_fail_with_their_own_error_and_the_hub_carries_on() {
    let (_scratch, client) = start("only").await;
    let cases = [
        ("while (true) {}", "CPU"),
        (
            "let a = []; for (;;) a.push('x'.repeat(1 << 16));",
            "memory",
        ),
        ("function f() { return f() + 1; } return f();", "stack"),
        ("for (;;) console.log('y'.repeat(4096));", "output"),
        (
            "return await fetch('http://127.0.0.1/');",
            "fetch is not defined",
        ),
        ("return require('fs');", "require is not defined"),
        ("return process.env;", "process is not defined"),
        ("await import('os');", "the code threw an error"),
        ("return Deno.env;", "Deno is not defined"),
        ("return std.getenv('HOME');", "std is not defined"),
        (
            "function flood() { Promise.resolve().then(flood); } flood(); await new Promise(() => {});",
            "CPU",
        ),
        // A tool's answer too large to journal is not given to the code.
        (
            "return await tools.fixture.oversized({ bytes: 2000000 });",
            "a call from code may return",
        ),
        // Loops inside the engine that never poll its interrupt: the
        // kernel's CPU limit on the run's process ends them.
        (
            "Array.prototype.reverse.call({ length: 2 ** 40 }); return 1;",
            "CPU",
        ),
        (
            "const a = []; a.length = 2 ** 32 - 1; return a.join('').length;",
            "CPU",
        ),
    ];
    for (code, expected) in cases {
        let (v, is_error) = run_code(&client, code).await;
        assert!(is_error, "{code}: {v}");
        assert_eq!(v["status"], "failed", "{code}: {v}");
        let said = format!("{} {}", v["error"], v["thrown"]);
        assert!(said.contains(expected), "{code}: {v}");
    }
    // What the code throws is output too: cut, never megabytes.
    let r = client
        .call_tool(call(
            "run_code",
            json!({"code": "throw 'x'.repeat(1 << 20);"}),
        ))
        .await
        .unwrap();
    let size = serde_json::to_string(&r).unwrap().len();
    assert!(
        size < 16 << 10,
        "a thrown value of 1 MiB came back as {size} bytes"
    );
    // The hub still answers, and a run still works.
    let (v, _) = run_code(
        &client,
        "return (await tools.fixture.echo({text: 'still here'}));",
    )
    .await;
    assert_eq!(v["result"], "still here", "{v}");
    let (found, _) = meta(
        &client,
        "search_tools",
        json!({"query": "echo", "schemas": true}),
    )
    .await;
    assert_eq!(found["tools"][0]["call"], "tools.fixture.echo", "{found}");
    assert!(
        found["tools"][0]["inputSchema"]["properties"]["text"].is_object(),
        "{found}"
    );
    // The code never names a secret it could carry in.
    let r = client
        .call_tool(call(
            "run_code",
            json!({"code": format!("return '{TOKEN}';")}),
        ))
        .await;
    assert!(
        format!("{r:?}").contains("contains a secret value"),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_secret_an_upstream_returns_is_scrubbed_inside_the_run_the_journal_and_the_result() {
    let (scratch, client) = start("only").await;
    let code = "
        const r = await tools.fixture.leak({});
        console.log('inside the sandbox:', r);
        return { r, includesRaw: JSON.stringify(r).includes('tok_code_') };
    ";
    let (v, is_error) = run_code(&client, code).await;
    assert!(!is_error, "{v}");
    assert_eq!(v["result"]["includesRaw"], false, "{v}");
    assert!(v["result"]["r"].to_string().contains("[secret]"), "{v}");
    // What the run returns to the model is quoted as the source's data.
    assert_eq!(v["quoted"], true, "{v}");
    assert!(v["output"][0].as_str().unwrap().contains("[secret]"), "{v}");
    drop(client);
    tokio::time::sleep(Duration::from_millis(600)).await;
    for place in scratch.stored() {
        for form in secret_forms(TOKEN) {
            assert!(
                !bytes_contain(&place.1, &form),
                "{} holds the secret as {form}",
                place.0
            );
        }
    }
    let text = v.to_string();
    for form in secret_forms(TOKEN) {
        assert!(
            !text.contains(&form),
            "the result holds the secret as {form}"
        );
    }
}

#[tokio::test]
async fn a_run_whose_journal_lost_entries_is_not_resumed() {
    let (scratch, client) = start("only").await;
    let (paused, _) = run_code(&client, FOUR_CALLS).await;
    let run_id = paused["run_id"].as_str().unwrap().to_string();
    approve(&scratch).await;
    scratch.raw_sql(&format!("DELETE FROM journal WHERE run = '{run_id}'"));
    let r = client
        .call_tool(call("resume_run", json!({ "run_id": run_id })))
        .await;
    assert!(format!("{r:?}").contains("journal is incomplete"), "{r:?}");
    let seen = upstream_calls(&scratch);
    assert_eq!(
        (count(&seen, "echo"), count(&seen, "slow")),
        (3, 0),
        "{seen:?}"
    );
}

#[tokio::test]
async fn runs_at_once_are_capped() {
    let scratch = Scratch::new();
    scratch.store_secret("CODE_TOKEN", TOKEN).await;
    let body = config(&scratch, "only").replace("[hub]\n", "[hub]\ncode_runs = 1\n");
    let config = scratch.reviewed_config(&body).await;
    let client: Client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    // One run waits for a person; a second is refused, not queued.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { run_code_owned(client, FOUR_CALLS).await })
    };
    scratch.pending_id().await;
    let r = client
        .call_tool(call("run_code", json!({"code": "return 1;"})))
        .await;
    assert!(
        format!("{r:?}").contains("already runs 1 programs"),
        "{r:?}"
    );
    let (paused, _) = waiting.await.unwrap();
    assert_eq!(paused["status"], "paused", "{paused}");
    // Its place is free again.
    let (v, _) = run_code(&client, "return 1;").await;
    assert_eq!(v["result"], 1, "{v}");
}

/// Every run's process is under its seccomp filter (and no new
/// privileges), with an empty environment, seen from outside while a run
/// goes.
#[tokio::test]
async fn a_runs_process_is_filtered_and_has_no_environment() {
    let (_scratch, client) = start("only").await;
    let running = {
        let client = client.clone();
        tokio::spawn(async move { run_code_owned(client, "while (true) {}").await })
    };
    let mut seen = Vec::new();
    for _ in 0..100 {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let dir = entry.path();
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            if !bytes_contain(&cmdline, "__sandbox") {
                continue;
            }
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
            if !status.is_empty() {
                seen.push((status, environ));
            }
        }
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!seen.is_empty(), "no run's process was seen");
    for (status, environ) in &seen {
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .map(|l| l[name.len()..].trim().to_string())
                .unwrap_or_default()
        };
        assert_eq!(field("Seccomp:"), "2", "{status}");
        assert_eq!(field("NoNewPrivs:"), "1", "{status}");
        assert!(environ.is_empty(), "a run's process has an environment");
    }
    let (v, _) = running.await.unwrap();
    assert_eq!(v["status"], "failed", "{v}");
}

/// A run has a whole-time budget, waits included: one whose call never
/// answers is stopped at `code_time`, and the hub carries on.
#[tokio::test]
async fn a_run_that_outlasts_its_time_is_stopped() {
    let scratch = Scratch::new();
    scratch.store_secret("CODE_TOKEN", TOKEN).await;
    let body = config(&scratch, "only").replace("[hub]\n", "[hub]\ncode_time = \"2s\"\n");
    let config = scratch.reviewed_config(&body).await;
    let client: Client = std::sync::Arc::new(scratch.stdio_client(&config, ()).await);
    // (The call's own timeout is a minute: this is the run's.)
    let (v, is_error) = run_code(&client, "await tools.fixture.hang({}); return 'answered';").await;
    assert!(is_error, "{v}");
    assert!(v["error"].as_str().unwrap().contains("code_time"), "{v}");
    let (v, _) = run_code(&client, "return 1;").await;
    assert_eq!(v["result"], 1, "{v}");
}
