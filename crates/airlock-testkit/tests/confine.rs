//! A confined stdio source, through the real binary: what it may read,
//! write and reach is what its `[sources.NAME.confine]` says, and nothing
//! else, whatever it tries (`airlock-fixture`'s `probe` tool tries).

use airlock_testkit::{Scratch, call, first_text};
use serde_json::json;

#[tokio::test]
async fn a_confined_source_reaches_only_what_was_reviewed() {
    let scratch = Scratch::new();
    let root = scratch.dir.path();
    // Its own directory, a planted key and another source's files beside it.
    let own = root.join("own");
    let ssh = root.join("home/.ssh");
    let other = root.join("other-source");
    for d in [&own, &ssh, &other] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(ssh.join("id_rsa"), "PRIVATE KEY").unwrap();
    std::fs::write(other.join("token"), "another source's token").unwrap();
    std::fs::write(own.join("notes"), "mine").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();

    let config = scratch
        .reviewed_config(&format!(
            "[sources.fixture]\ncommand = \"{{fixture}}\"\nquote_output = false\n\n[sources.fixture.confine]\nwrite = [\"{}\"]\nnetwork = \"none\"\nopen_files = 256\nmemory_mib = 256\n",
            own.display()
        ))
        .await;
    let client = scratch.stdio_client(&config, ()).await;
    let probe = |args: serde_json::Value| {
        let client = &client;
        async move {
            first_text(
                &client
                    .call_tool(call("fixture__probe", args))
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(
        probe(json!({"read": own.join("notes"), "write": own.join("new")})).await,
        "read=ok write=ok"
    );
    for secret in [ssh.join("id_rsa"), other.join("token")] {
        assert_eq!(
            probe(json!({"read": secret})).await,
            "read=denied",
            "{secret:?}"
        );
    }
    for outside in [
        ssh.join("authorized_keys"),
        other.join("token"),
        root.join("x"),
    ] {
        assert_eq!(
            probe(json!({"write": outside})).await,
            "write=denied",
            "{outside:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(other.join("token")).unwrap(),
        "another source's token"
    );
    assert_eq!(
        probe(json!({"connect": addr.to_string()})).await,
        "connect=denied"
    );
    assert!(listener.accept().is_err(), "the listener saw a connection");
    // Its memory is bounded: more than its limit is refused to it.
    assert_eq!(probe(json!({"allocate_mib": 64})).await, "allocate=ok");
    assert_eq!(
        probe(json!({"allocate_mib": 1024})).await,
        "allocate=denied"
    );
    // Other processes' environments are out of reach (init's: readable by
    // root unconfined, and by its user); the hub is still up.
    assert_eq!(
        probe(json!({"read": "/proc/1/environ"})).await,
        "read=denied"
    );
    let echoed = client
        .call_tool(call("fixture__echo", json!({"text": "still here"})))
        .await
        .unwrap();
    assert_eq!(first_text(&echoed), "still here");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_confinement_the_machine_cannot_enforce_stops_the_source() {
    let scratch = Scratch::new();
    let missing = scratch.dir.path().join("does-not-exist");
    let config = scratch.config(&format!(
        "[sources.fixture]\ncommand = \"{{fixture}}\"\n\n[sources.fixture.confine]\nread = [\"{}\"]\n",
        missing.display()
    ));
    scratch.approve_commands(&config, &["fixture"]).await;
    let doctor = scratch.doctor(&config).await;
    assert!(doctor.contains("cannot confine"), "{doctor}");
    assert!(doctor.contains("does-not-exist"), "{doctor}");
    // And doctor says what would confine it: each layer the kernel offers.
    assert!(
        doctor.contains(
            "info  source fixture: confined (network none, 1 read, 0 write paths) by: Landlock ABI"
        ),
        "{doctor}"
    );
}

#[tokio::test]
async fn a_reviewed_path_reached_through_a_symbolic_link_is_refused() {
    // The source itself could plant the link between two starts.
    let scratch = Scratch::new();
    let real = scratch.dir.path().join("real");
    std::fs::create_dir_all(&real).unwrap();
    let link = scratch.dir.path().join("docs");
    std::os::unix::fs::symlink(scratch.dir.path(), &link).unwrap();
    let config = scratch.config(&format!(
        "[sources.fixture]\ncommand = \"{{fixture}}\"\n\n[sources.fixture.confine]\nread = [\"{}\"]\n",
        link.display()
    ));
    scratch.approve_commands(&config, &["fixture"]).await;
    let doctor = scratch.doctor(&config).await;
    assert!(doctor.contains("cannot confine"), "{doctor}");
    assert!(doctor.contains("a symbolic link"), "{doctor}");
}

/// What Landlock does not cover, the seccomp filter does: a Unix socket
/// with a path (an agent, D-Bus) and the mode of a file the source may
/// read; the same probes unconfined succeed, so the test can fail.
#[tokio::test]
async fn a_confined_source_cannot_reach_unix_sockets_or_change_file_modes() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let root = scratch.dir.path().canonicalize().unwrap();
    let shared = root.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let file = shared.join("readable");
    std::fs::write(&file, "data").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let socket = shared.join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let probes = json!({"chmod": file, "unix": socket});
    for (confine, expected) in [
        (
            format!(
                "\n[sources.fixture.confine]\nread = [\"{}\"]\nopen_files = 256\n",
                shared.display()
            ),
            "chmod=denied unix=denied",
        ),
        (String::new(), "chmod=ok unix=ok"),
    ] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let config = scratch
            .reviewed_config(&format!(
                "[sources.fixture]\ncommand = \"{{fixture}}\"\nquote_output = false\n{confine}"
            ))
            .await;
        let client = scratch.stdio_client(&config, ()).await;
        let said = first_text(
            &client
                .call_tool(call("fixture__probe", probes.clone()))
                .await
                .unwrap(),
        );
        assert_eq!(said, expected, "{confine}");
        client.cancel().await.unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode == 0o777,
            expected.starts_with("chmod=ok"),
            "mode {mode:o}"
        );
    }
    // The hub's accepted connections: one, from the unconfined run.
    let mut accepted = 0;
    while listener.accept().is_ok() {
        accepted += 1;
    }
    assert_eq!(accepted, 1);
}

/// A fork bomb stops at `processes`. The kernel does not hold root to the
/// limit, so when the tests run as root the hub runs as `nobody`; the same
/// source unconfined starts every process it asks for.
#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit() {
    let scratch = Scratch::unprivileged();
    for (confine, bounded) in [
        (
            "\n[sources.fixture.confine]\nprocesses = 8\nopen_files = 256\n",
            true,
        ),
        ("", false),
    ] {
        let config = scratch
            .reviewed_config(&format!(
                "[sources.fixture]\ncommand = \"{{fixture}}\"\nquote_output = false\n{confine}"
            ))
            .await;
        let client = scratch.stdio_client(&config, ()).await;
        let said = first_text(
            &client
                .call_tool(call("fixture__probe", json!({"spawn": 40})))
                .await
                .unwrap(),
        );
        let spawned: usize = said
            .trim_start_matches("spawned=")
            .parse()
            .unwrap_or_else(|_| panic!("{said}"));
        if bounded {
            assert!(
                spawned < 8,
                "{spawned} processes started under a limit of 8"
            );
        } else {
            assert_eq!(spawned, 40, "unconfined, every process starts");
        }
        // The hub is up either way.
        let echoed = client
            .call_tool(call("fixture__echo", json!({"text": "still here"})))
            .await
            .unwrap();
        assert_eq!(first_text(&echoed), "still here");
        client.cancel().await.unwrap();
    }
}
