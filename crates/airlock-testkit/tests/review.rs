//! `airlock tools review` as a person uses it: at a terminal (a real pty,
//! through util-linux `script`), answering per item and per source, and in
//! scripts with `--approve-all`.

use std::process::Stdio;

use airlock_testkit::{Scratch, bin};
use tokio::io::AsyncWriteExt;

const DEMO: &str = r#"
[sources.demo]
command = "{airlock}"
args = ["demo-server"]
"#;

/// Runs `tools review` at a pseudo-terminal, typing `answers`; returns
/// what the terminal showed.
async fn review_at_a_terminal(
    scratch: &Scratch,
    config: &std::path::Path,
    answers: &str,
) -> String {
    let line = format!(
        "{} tools review --config {}",
        bin("airlock").display(),
        config.display()
    );
    let mut child = tokio::process::Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("AIRLOCK_HOME", scratch.home())
        .envs(scratch.store_env())
        .env("AIRLOCK_LOG", "warn,rmcp=error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("util-linux script runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answers.as_bytes()).await.unwrap();
    // Kept open until the review ends: the end of input means quit.
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let out = child.wait_with_output();
        let out = out.await.unwrap();
        drop(stdin);
        out
    })
    .await
    .expect("the review ended");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn list(scratch: &Scratch, config: &std::path::Path) -> String {
    let out = scratch
        .airlock(&[
            "tools",
            "review",
            "--config",
            &config.to_string_lossy(),
            "--list",
        ])
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `?` explains and asks again (it is not "no"), an unknown answer asks
/// again, `s` skips the rest of a source, `q` stops keeping what was
/// pinned, `a` pins the rest of a source, and items come grouped per source.
#[tokio::test]
async fn an_interactive_review_takes_answers_per_source() {
    let scratch = Scratch::new();
    let config = scratch.config(DEMO);
    let waiting = |text: &str| text.matches("── NEW ").count();
    // The command: `?` then yes. The first item: `maybe` (asked again),
    // then yes; the second: skip the rest of the source.
    let shown = review_at_a_terminal(&scratch, &config, "?\ny\nmaybe\ny\ns\n").await;
    assert!(
        shown.contains("q  quit; what was pinned stays pinned"),
        "{shown}"
    );
    assert!(shown.contains("━━ source demo: 7 to review"), "{shown}");
    let left = list(&scratch, &config).await;
    assert!(
        !left.contains("NEW command"),
        "the command was approved: {left}"
    );
    assert_eq!(waiting(&left), 6, "one pinned, the rest skipped: {left}");
    // Quit stops at once and keeps what was pinned.
    let shown = review_at_a_terminal(&scratch, &config, "y\nq\n").await;
    assert!(shown.contains("left unreviewed"), "{shown}");
    assert_eq!(waiting(&list(&scratch, &config).await), 5);
    // All of the source.
    review_at_a_terminal(&scratch, &config, "a\n").await;
    let left = list(&scratch, &config).await;
    assert_eq!(waiting(&left), 0, "{left}");
}

/// `--approve-all` approves no command that cannot run, and says why.
#[tokio::test]
async fn approve_all_refuses_a_command_that_cannot_run() {
    let scratch = Scratch::new();
    let config = scratch.config(
        r#"
[sources.demo]
command = "{airlock}"
args = ["demo-server"]

[sources.ghost]
command = "no-such-mcp-server-anywhere"
"#,
    );
    let out = scratch
        .airlock(&[
            "tools",
            "review",
            "--config",
            &config.to_string_lossy(),
            "--approve-all",
        ])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("not approved: program not found: `no-such-mcp-server-anywhere`"),
        "{shown}"
    );
    assert!(shown.contains("approved: demo may run it"), "{shown}");
    let left = list(&scratch, &config).await;
    assert!(left.contains("NEW command of source ghost"), "{left}");
}

/// A one-shot command waiting on a source that never answers says what it
/// waits for while it waits, then why the source failed, with nothing of a
/// next attempt it will not make.
#[tokio::test]
async fn doctor_says_what_it_waits_for_and_why_a_hanging_source_failed() {
    let scratch = Scratch::new();
    let config = scratch.config(
        r#"
[hub]
connect_timeout = "6s"

[sources.demo]
command = "{airlock}"
args = ["demo-server"]

[sources.mute]
command = "sleep"
args = ["30"]
"#,
    );
    scratch.approve_commands(&config, &["demo", "mute"]).await;
    let out = scratch
        .airlock(&["doctor", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    let (report, progress) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        progress.contains("starting 2 source(s), waiting up to 6s"),
        "{progress}"
    );
    assert!(
        progress.contains("still starting after 5s: mute"),
        "{progress}"
    );
    assert!(
        !progress.contains("demo,"),
        "demo was ready at once: {progress}"
    );
    assert!(
        report.contains("FAIL  source mute: failed — no MCP handshake within 6s"),
        "{report}"
    );
    assert!(!report.contains("next attempt"), "{report}");
    assert_eq!(out.status.code(), Some(2));
}

/// A source that cannot be reached fails in a person's terms: where and
/// what, never the SDK's type names.
#[tokio::test]
async fn a_failed_handshake_is_told_without_type_names() {
    let scratch = Scratch::new();
    // A port nothing listens on: bound, then dropped.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = scratch.config(&format!(
        "[hub]\nconnect_timeout = \"3s\"\n\n[sources.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nallow_private = true\n"
    ));
    scratch.approve_commands(&config, &["web"]).await;
    let out = scratch
        .airlock(&["doctor", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let line = report
        .lines()
        .find(|l| l.starts_with("FAIL  source web"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.contains(&format!("http://127.0.0.1:{port}/mcp")),
        "{line}"
    );
    for leaked in [
        "rmcp::",
        "WorkerTransport",
        "airlock_upstream::",
        "<",
        "Some(",
    ] {
        assert!(!line.contains(leaked), "`{leaked}` in {line}");
    }
}

/// A source that fails its first start and comes up on its second (a
/// failure of the moment, as on a loaded machine) is reviewed like any
/// other: the review waits for that second attempt rather than reporting
/// the source as down and leaving its tools unreviewed.
#[tokio::test]
async fn a_source_that_fails_once_is_reviewed_on_its_second_attempt() {
    let scratch = Scratch::new();
    let mark = scratch.dir.path().join("crashed-once");
    let config = scratch
        .reviewed_config(&format!(
            "[sources.fixture]\ncommand = \"{{fixture}}\"\nenv = {{ FIXTURE_CRASH_ONCE = {:?} }}\n",
            mark.to_string_lossy()
        ))
        .await;
    assert!(mark.exists(), "the first start crashed");
    let listed = scratch
        .airlock(&[
            "tools",
            "review",
            "--list",
            "--config",
            &config.to_string_lossy(),
        ])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains("Nothing to do"), "{text}");
}
