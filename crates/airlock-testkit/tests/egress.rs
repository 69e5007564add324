//! I4 end to end: upstream HTTP goes only where the guard allows, and the
//! guard is the only way the product makes HTTP requests.

use std::path::Path;

use airlock_testkit::{Scratch, free_addr};

/// A loopback server that answers every request with a redirect to `to`.
async fn redirector(to: &'static str) -> std::net::SocketAddr {
    let addr = free_addr();
    let app = axum::Router::new().fallback(move || async move {
        (
            axum::http::StatusCode::TEMPORARY_REDIRECT,
            [(axum::http::header::LOCATION, to)],
        )
    });
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// `airlock doctor` after a person approved the source's endpoint.
async fn doctor(scratch: &Scratch, config: &Path) -> String {
    scratch.approve_commands(config, &["web"]).await;
    scratch.doctor(config).await
}

#[tokio::test]
async fn redirect_to_a_metadata_address_is_refused() {
    let addr = redirector("http://169.254.169.254/latest/meta-data").await;
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "[hub]\nconnect_timeout = \"5s\"\n\n[sources.web]\nurl = \"http://{addr}/mcp\"\nallow_private = true\n"
    ));
    let report = doctor(&scratch, &config).await;
    assert!(report.contains("FAIL  source web"), "{report}");
    // The hop was refused; the SDK reports it as a failed redirect.
    assert!(report.contains("error following redirect"), "{report}");
}

#[tokio::test]
async fn private_target_without_opt_in_is_refused() {
    let scratch = Scratch::new();
    let config = scratch.config(
        "[hub]\nconnect_timeout = \"5s\"\n\n[sources.web]\nurl = \"https://169.254.169.254/mcp\"\n",
    );
    let report = doctor(&scratch, &config).await;
    assert!(report.contains("cloud metadata"), "{report}");
    let config = scratch.config("[sources.web]\nurl = \"https://[::ffff:10.0.0.1]/mcp\"\n");
    let report = doctor(&scratch, &config).await;
    assert!(report.contains("private address"), "{report}");
}

#[tokio::test]
async fn userinfo_url_is_refused() {
    let scratch = Scratch::new();
    let config = scratch.config("[sources.web]\nurl = \"https://me:tok@example.com/mcp\"\n");
    let out = scratch
        .airlock(&["serve", "--config", &config.to_string_lossy()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("credentials"));
}

/// Only `airlock-upstream/src/egress.rs` may build an HTTP client.
#[test]
fn only_the_egress_module_builds_http_clients() {
    let root = airlock_testkit::workspace_root();
    let product = [
        "airlock-channels",
        "airlock-cli",
        "airlock-config",
        "airlock-decision",
        "airlock-demo",
        "airlock-gateway",
        "airlock-policy",
        "airlock-secrets",
        "airlock-store",
        "airlock-upstream",
    ];
    let needles = [
        concat!("reqwest::", "Client"),
        concat!("Client", "Builder"),
        concat!("from_", "uri("),
        concat!("from_", "config("),
        concat!("hyper::", "client"),
    ];
    let egress = root
        .join("crates/airlock-upstream/src/egress.rs")
        .canonicalize()
        .unwrap();
    let files = product
        .iter()
        .flat_map(|c| airlock_testkit::rust_sources(&root.join("crates").join(c).join("src")));
    for p in files.filter(|p| *p != egress) {
        let text = std::fs::read_to_string(&p).unwrap();
        for n in needles {
            assert!(
                !text.contains(n),
                "{} builds HTTP outside the egress guard ({n})",
                p.display()
            );
        }
    }
}

#[tokio::test]
async fn unreviewed_or_moved_endpoint_never_connects() {
    let scratch = Scratch::new();
    let config = scratch.config(
        "[hub]\nconnect_timeout = \"3s\"\n\n[sources.web]\nurl = \"https://example.com/mcp\"\n",
    );
    let report = scratch.doctor(&config).await;
    assert!(report.contains("has not been reviewed"), "{report}");
    assert!(report.contains("endpoint https://example.com"), "{report}");
    scratch.approve_commands(&config, &["web"]).await;
    // Same source name, another host: it asks again.
    let moved = scratch.config(
        "[hub]\nconnect_timeout = \"3s\"\n\n[sources.web]\nurl = \"https://example.org/mcp\"\n",
    );
    let report = scratch.doctor(&moved).await;
    assert!(report.contains("changed since it was reviewed"), "{report}");
}
