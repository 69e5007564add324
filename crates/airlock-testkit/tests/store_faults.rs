//! The store failing under a running hub: a call whose decision cannot be
//! recorded does not run, and the log says records are missing.

use airlock_testkit::{Scratch, bin, call, first_text};
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

/// Runs airlock with its data directory on a 16 MiB tmpfs of its own
/// (a mount namespace), so the test can fill that disk under it.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_call_does_not_run_when_its_decision_cannot_be_recorded() {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root || !std::path::Path::new("/usr/bin/unshare").exists() {
        eprintln!("skipped: needs root and unshare to give airlock a disk of its own");
        return;
    }
    let scratch = Scratch::embedded();
    let config = scratch
        .reviewed_config("[sources.fixture]\ncommand = \"{fixture}\"\n")
        .await;
    let disk = scratch.dir.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let mut cmd = tokio::process::Command::new("/usr/bin/unshare");
    cmd.args(["-m", "--", "sh", "-c"])
        .arg(r#"mount -t tmpfs -o size=16m tmpfs "$1" && cp -a "$2"/. "$1"/ && exec "$3" serve --config "$4""#)
        .arg("sh")
        .arg(&disk)
        .arg(scratch.home())
        .arg(bin("airlock"))
        .arg(&config)
        .env("AIRLOCK_HOME", &disk)
        .env("AIRLOCK_NO_BROWSER", "1")
        .env("AIRLOCK_LOG", "error")
        .stderr(std::process::Stdio::null());
    let transport = TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().unwrap();
    let client = ().serve(transport).await.unwrap();
    let r = client
        .call_tool(call("fixture__echo", json!({"text": "one"})))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "one");

    // Fill the hub's disk, seen through its own mount namespace.
    let filler = std::path::PathBuf::from(format!("/proc/{pid}/root{}/filler", disk.display()));
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 1 << 20];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    for text in ["two", "three"] {
        let r = client
            .call_tool(call("fixture__echo", json!({"text": text})))
            .await
            .unwrap();
        let said = first_text(&r);
        assert!(
            said.contains("could not be recorded") && said.contains("did not run"),
            "a call ran without its decision on record: {said}"
        );
    }

    // Room again: the source saw only the first call, and the log says
    // what it lost instead of passing as an intact chain.
    std::fs::remove_file(&filler).unwrap();
    let r = client
        .call_tool(call("fixture__calls", json!({})))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo,calls", "only the recorded call ran");
    let verify = tokio::process::Command::new("/usr/bin/nsenter")
        .args(["-t", &pid.to_string(), "-m", "--"])
        .arg(bin("airlock"))
        .args(["audit", "verify"])
        .env("AIRLOCK_HOME", &disk)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stdout);
    assert!(
        !verify.status.success(),
        "verify passed a log with holes: {said}"
    );
    assert!(said.contains("records are missing"), "{said}");
    client.cancel().await.unwrap();
}
