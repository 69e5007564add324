//! Secrets in a real OS keychain (the Secret Service, run by
//! `scripts/test` under its own D-Bus session with gnome-keyring). Skipped,
//! saying so, when the script did not set AIRLOCK_TEST_KEYCHAIN.

use std::process::Stdio;

use airlock_testkit::{RawStdio, Scratch};
use serde_json::json;

const VALUE: &str = "kc_Zq8Wm3Lp0Rt6Yv1Xn4Bs7Dg2Hj5Kf9";

fn enabled() -> bool {
    let on = std::env::var_os("AIRLOCK_TEST_KEYCHAIN").is_some();
    if !on {
        eprintln!(
            "keychain tests skipped: run them through scripts/test, which starts a Secret Service"
        );
    }
    on
}

#[tokio::test]
async fn secret_lives_in_the_keychain_and_never_on_disk() {
    if !enabled() {
        return;
    }
    use tokio::io::AsyncWriteExt;
    let scratch = Scratch::new();
    let mut set = scratch
        .airlock(&["secret", "set", "KC_TOKEN"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    set.stdin
        .take()
        .unwrap()
        .write_all(VALUE.as_bytes())
        .await
        .unwrap();
    let out = set.wait_with_output().await.unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("OS keychain"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = scratch
        .reviewed_config(
            r#"
[sources.fixture]
command = "{fixture}"
env = { FIXTURE_TOKEN = "secret:KC_TOKEN" }
"#,
        )
        .await;
    let mut raw = RawStdio::start_with_stderr(&scratch, &config, Stdio::null());
    raw.handshake("2025-06-18").await;
    raw.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "fixture__leak", "arguments": {}}}))
        .await;
    let (result, _) = raw.response(3).await;
    // The source got the value from the keychain (it echoed it), and it was scrubbed.
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("raw=[secret]")
    );
    assert!(!raw.seen.contains(VALUE));
    drop(raw);
    // Nothing in the data directory holds the value.
    for entry in std::fs::read_dir(scratch.home()).unwrap().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        assert!(
            !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
            "{} holds the secret",
            entry.path().display()
        );
    }
    assert!(!scratch.home().join("secrets.json").exists());
    let list = scratch.airlock(&["secret", "list"]).output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "KC_TOKEN");
    let rm = scratch
        .airlock(&["secret", "rm", "KC_TOKEN"])
        .output()
        .await
        .unwrap();
    assert!(rm.status.success());
}
