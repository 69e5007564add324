//! The sandbox on its own: every cap holds, nothing but the bridge is
//! reachable, and replies reach the code in the order its calls were made.

use std::time::Duration;

use airlock_sandbox::{Call, Ended, Limits, Next, Program, Reply, RunError, ToolName, start};
use serde_json::{Value, json};

fn program(code: &str) -> Program {
    Program {
        code: code.to_string(),
        seed: 7,
        clock_ms: 1_700_000_000_000,
        tools: vec![ToolName {
            source: "demo".into(),
            tool: "echo".into(),
            exposed: "demo__echo".into(),
        }],
    }
}

fn small() -> Limits {
    Limits {
        memory_bytes: 16 << 20,
        cpu: Duration::from_millis(500),
        ..Limits::default()
    }
}

/// Runs `code`, answering each call with `answer`; returns the end, the
/// output and the calls seen.
async fn run_with(
    code: &str,
    limits: Limits,
    answer: impl Fn(&Call) -> Reply,
) -> (Ended, Vec<String>, Vec<Call>) {
    let mut running = start(program(code), limits);
    let mut calls = Vec::new();
    let report = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match running.next().await {
                Next::Call(call) => {
                    running.reply(call.seq, answer(&call));
                    calls.push(call);
                }
                Next::Ended(report) => return report,
            }
        }
    })
    .await
    .expect("the run ends by itself");
    (report.ended, report.output, calls)
}

async fn run(code: &str) -> Ended {
    run_with(code, small(), |c| {
        Reply::Value(Value::Object(c.arguments.clone()))
    })
    .await
    .0
}

#[tokio::test]
async fn a_result_and_console_output_come_back() {
    let (ended, output, calls) = run_with(
        "const r = await tools.demo.echo({text: 'hi'}); console.log('got', r); return {r, n: 1 + 1};",
        small(),
        |c| Reply::Value(Value::Object(c.arguments.clone())),
    )
    .await;
    assert_eq!(ended, Ended::Finished(json!({"r": {"text": "hi"}, "n": 2})));
    assert_eq!(output, vec![r#"got {"text":"hi"}"#.to_string()]);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].exposed, "demo__echo");
}

#[tokio::test]
async fn caps_end_the_run_with_their_own_error() {
    type Expected = fn(&RunError) -> bool;
    let cases: &[(&str, Expected)] = &[
        (
            "let a = []; while (true) a.push('x'.repeat(1 << 16));",
            |e| matches!(e, RunError::Memory(_)),
        ),
        ("function f(n) { return f(n + 1) + 1; } return f(0);", |e| {
            matches!(e, RunError::Stack)
        }),
        ("while (true) {}", |e| matches!(e, RunError::Cpu(_))),
        ("for (;;) { try { while (true) {} } catch (e) {} }", |e| {
            matches!(e, RunError::Cpu(_))
        }),
        (
            "function flood() { Promise.resolve().then(flood); } flood(); await new Promise(() => {});",
            |e| matches!(e, RunError::Cpu(_)),
        ),
        (
            "for (let i = 0; i < 1e6; i++) console.log('x'.repeat(1000));",
            |e| matches!(e, RunError::Output(_)),
        ),
        (
            "try { for (;;) console.log('y'.repeat(1000)); } catch (e) {} return 'caught it';",
            |e| matches!(e, RunError::Output(_)),
        ),
        ("return 'z'.repeat(1 << 20);", |e| {
            matches!(e, RunError::Output(_))
        }),
        (
            "for (let i = 0; i < 1000; i++) { try { tools.demo.echo({}); } catch (e) {} } return 1;",
            |e| matches!(e, RunError::Calls(_)),
        ),
        ("await new Promise(() => {});", |e| {
            matches!(e, RunError::Stuck)
        }),
        ("this is not javascript", |e| {
            matches!(e, RunError::Syntax(_))
        }),
        (
            "throw new Error('boom');",
            |e| matches!(e, RunError::Thrown(t) if t.contains("boom")),
        ),
    ];
    for (code, expected) in cases {
        match run(code).await {
            Ended::Failed(e) => assert!(expected(&e), "{code}: ended with {e:?}"),
            other => panic!("{code}: ended with {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_caught_allocation_failure_leaves_the_cap_in_place() {
    // Code may catch the failure, but every later attempt fails too.
    let code = "
        let failures = 0;
        for (let round = 0; round < 3; round++) {
            try { let a = []; while (true) a.push(new Array(1 << 16).fill(1)); }
            catch (e) { failures++; }
        }
        return failures;
    ";
    assert_eq!(run(code).await, Ended::Finished(json!(3)));
}

#[tokio::test]
async fn nothing_but_the_bridge_is_reachable() {
    let absent = [
        "fetch",
        "require",
        "process",
        "Deno",
        "std",
        "os",
        "setTimeout",
        "setInterval",
        "XMLHttpRequest",
        "WebSocket",
        "performance",
        "Bun",
        "module",
        "exports",
    ];
    for name in absent {
        let code = format!(
            "return typeof globalThis[{name:?}] === 'undefined' && typeof {name} === 'undefined';"
        );
        assert_eq!(
            run(&code).await,
            Ended::Finished(json!(true)),
            "{name} is reachable"
        );
    }
    // Modules cannot be loaded at all.
    match run("await import('os'); return 'loaded';").await {
        Ended::Failed(RunError::Thrown(t)) => assert!(!t.is_empty()),
        other => panic!("import() ended with {other:?}"),
    }
}

#[tokio::test]
async fn the_bridge_cannot_be_tampered_with() {
    // The tools object is frozen, and the code's own changes to globals
    // and prototypes do not reach the replies.
    let code = "
        'use strict';
        let threw = 0;
        try { tools.demo.echo = () => 'mine'; } catch (e) { threw++; }
        try { tools.evil = {}; } catch (e) { threw++; }
        try { delete tools.demo; } catch (e) { threw++; }
        Promise.prototype.then = function () { return 'hijacked'; };
        JSON.parse = () => ({ forged: true });
        Object.defineProperty(Object.prototype, 'text', { set() { throw new Error('set') }, configurable: true });
        globalThis.Error = function () { return { forged: true }; };
        const r = await tools.demo.echo({ n: 1 });
        return { threw, r };
    ";
    let (ended, _, calls) = run_with(code, small(), |_| Reply::Value(json!({"n": 1}))).await;
    assert_eq!(ended, Ended::Finished(json!({"threw": 3, "r": {"n": 1}})));
    assert_eq!(calls.len(), 1);
    // Arguments that are not an object are refused before any call.
    for bad in ["'text'", "[1, 2]", "() => 1", "42"] {
        let code = format!(
            "try {{ tools.demo.echo({bad}); return 'called'; }} catch (e) {{ return e.name; }}"
        );
        let (ended, _, calls) = run_with(&code, small(), |_| Reply::Value(json!(1))).await;
        assert_eq!(ended, Ended::Finished(json!("TypeError")), "{bad}");
        assert!(calls.is_empty(), "{bad} made a call");
    }
}

#[tokio::test]
async fn a_refused_call_rejects_with_a_code_the_code_can_catch() {
    let code = "try { await tools.demo.echo({}); return 'ran'; } catch (e) { return [e.code, e.message, e instanceof Error]; }";
    let (ended, _, _) = run_with(code, small(), |_| Reply::Error {
        code: "policy_denied".into(),
        message: "denied by policy".into(),
    })
    .await;
    assert_eq!(
        ended,
        Ended::Finished(json!(["policy_denied", "denied by policy", true]))
    );
}

#[tokio::test]
async fn the_clock_and_random_numbers_are_the_runs_own() {
    let code = "return [Date.now(), new Date().getTime(), Math.random(), Math.random(), typeof Date(), new Date(0).getTime()];";
    let first = run(code).await;
    let second = run(code).await;
    assert_eq!(first, second, "the same seed and clock give the same run");
    let Ended::Finished(Value::Array(v)) = first else {
        panic!("{first:?}")
    };
    assert_eq!(v[0], json!(1_700_000_000_000i64));
    assert_eq!(v[1], json!(1_700_000_000_000i64));
    assert_ne!(v[2], v[3]);
    assert_eq!(v[5], json!(0));
}

#[tokio::test]
async fn replies_reach_the_code_in_call_order_and_a_pause_stops_it() {
    // Three calls at once; whatever order the host answers in, the code
    // sees them settle in the order it made them.
    let code = "
        const seen = [];
        const ps = [1, 2, 3].map(n => tools.demo.echo({ n }).then(r => seen.push(r.n)));
        await Promise.all(ps);
        return seen;
    ";
    let mut running = start(program(code), small());
    let mut calls = Vec::new();
    while calls.len() < 3 {
        match running.next().await {
            Next::Call(c) => calls.push(c),
            Next::Ended(r) => panic!("{r:?}"),
        }
    }
    for c in calls.iter().rev() {
        running.reply(c.seq, Reply::Value(Value::Object(c.arguments.clone())));
    }
    match running.next().await {
        Next::Ended(r) => assert_eq!(r.ended, Ended::Finished(json!([1, 2, 3]))),
        Next::Call(c) => panic!("{c:?}"),
    }
    // A pause ends the run at that call.
    let (ended, _, calls) = run_with(
        "await tools.demo.echo({}); await tools.demo.echo({}); await tools.demo.echo({}); return 'done';",
        small(),
        |c| if c.seq == 2 { Reply::Pause } else { Reply::Value(json!({})) },
    )
    .await;
    assert_eq!(ended, Ended::Paused { at: 2 });
    assert_eq!(calls.len(), 2);
}

#[tokio::test]
async fn a_stopped_run_ends_at_once() {
    let mut running = start(
        program("while (true) {}"),
        Limits {
            cpu: Duration::from_secs(60),
            ..small()
        },
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    running.stop();
    let report = tokio::time::timeout(Duration::from_secs(5), running.next())
        .await
        .expect("stops");
    match report {
        Next::Ended(r) => assert_eq!(r.ended, Ended::Failed(RunError::Stopped)),
        Next::Call(c) => panic!("{c:?}"),
    }
}
