//! Team mode through the real binary: replicas (separate `airlock serve`
//! processes with data directories of their own, as on separate machines)
//! on one PostgreSQL database, and a person deciding from yet another.
//! Only the database joins them.

use std::sync::Arc;
use std::time::Duration;

use airlock_pgtest::{Database, HUB_ROLE, Server};
use airlock_testkit::{Scratch, call, first_text};
use rmcp::ServiceExt;
use serde_json::json;

/// Calls wait far longer than the test does: a call that returns was
/// woken by the decision, not released by its clock.
fn config(db: &Database, tenant: &str) -> String {
    format!(
        r#"
[hub]
approval_wait = "300s"
approval_ttl = "310s"

[store]
url = "{url}"
tenant = "{tenant}"

[sources.fixture]
command = "{{fixture}}"

[[rules]]
action = "ask"
tool = "fixture__*"
"#,
        url = db.hub_url()
    )
}

fn migrated() -> Database {
    let db = Server::shared().database();
    airlock_store::PgStore::migrate(&db.admin_url(), None, HUB_ROLE, "team-a").unwrap();
    db
}

/// The URL a tenant's hubs and people use: team-a's role is the suite's
/// hub role; any other tenant gets a role of its own, mapped by the owner.
fn url_of(db: &Database, tenant: &str) -> String {
    if tenant == "team-a" {
        return db.hub_url();
    }
    let role = format!("hub_{}", tenant.replace('-', "_"));
    let url = db.url_as(&role);
    airlock_store::PgStore::migrate(&db.admin_url(), None, &role, tenant).unwrap();
    url
}

/// The CLI on `scratch`'s machine, acting on `db` as `tenant`.
async fn cli(scratch: &Scratch, db: &Database, tenant: &str, args: &[&str]) -> (i32, String) {
    let out = scratch
        .airlock(args)
        .env("AIRLOCK_STORE", url_of(db, tenant))
        .env("AIRLOCK_TENANT", tenant)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The id of the first pending approval of `tenant`, once one appears.
async fn pending_id(scratch: &Scratch, db: &Database, tenant: &str) -> String {
    for _ in 0..200 {
        let (_, text) = cli(scratch, db, tenant, &["pending"]).await;
        if let Some(line) = text.lines().find(|l| l.contains(" pending ")) {
            return line.split_whitespace().next().unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no approval appeared");
}

type Client = Arc<rmcp::service::RunningService<rmcp::RoleClient, ()>>;

fn in_background(
    client: &Client,
    tool: &str,
    args: serde_json::Value,
) -> tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::ServiceError>> {
    let (client, tool) = (client.clone(), tool.to_string());
    tokio::spawn(async move { client.call_tool(call(&tool, args)).await })
}

#[tokio::test]
async fn a_decision_on_one_machine_wakes_the_call_waiting_on_another_replica() {
    let db = migrated();
    let (one, two, person) = (
        Scratch::embedded(),
        Scratch::embedded(),
        Scratch::embedded(),
    );
    // Reviews are shared: reviewing once, from replica one's machine, is
    // enough for every replica of the tenant.
    let config_one = one.reviewed_config(&config(&db, "team-a")).await;
    let config_two = two.config(&config(&db, "team-a"));
    let _replica_one: Client = Arc::new(one.stdio_client(&config_one, ()).await);
    let replica_two: Client = Arc::new(two.stdio_client(&config_two, ()).await);
    let waiting = in_background(&replica_two, "fixture__echo", json!({"text": "across"}));
    let id = pending_id(&person, &db, "team-a").await;
    // Another tenant on the same database sees and decides nothing.
    let (_, theirs) = cli(&person, &db, "team-b", &["pending", "--all"]).await;
    assert!(!theirs.contains(&id), "{theirs}");
    let (code, said) = cli(&person, &db, "team-b", &["approve", &id]).await;
    assert_eq!(code, 5, "{said}");
    // The person's machine runs no hub and shares no directory with the
    // replicas: only the database tells replica two.
    let (code, said) = cli(&person, &db, "team-a", &["approve", &id]).await;
    assert_eq!(code, 0, "{said}");
    let result = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the decision woke the call on the other replica")
        .unwrap()
        .unwrap();
    assert_eq!(first_text(&result), "across");
    // Each tenant's audit chain checks out on its own.
    let (code, said) = cli(&person, &db, "team-a", &["audit", "verify"]).await;
    assert_eq!(code, 0, "{said}");
    let (_, log) = cli(&person, &db, "team-a", &["audit"]).await;
    assert!(log.contains("fixture__echo"), "{log}");
    let (_, log) = cli(&person, &db, "team-b", &["audit"]).await;
    assert!(!log.contains("fixture__echo"), "{log}");
}

#[tokio::test]
async fn two_people_approving_at_once_on_two_machines_have_one_winner() {
    let db = migrated();
    let (hub, alice, bob) = (
        Scratch::embedded(),
        Scratch::embedded(),
        Scratch::embedded(),
    );
    let config = hub.reviewed_config(&config(&db, "team-a")).await;
    let replica: Client = Arc::new(hub.stdio_client(&config, ()).await);
    let waiting = in_background(&replica, "fixture__echo", json!({"text": "once"}));
    let id = pending_id(&alice, &db, "team-a").await;
    let (approve, deny) = (["approve", id.as_str()], ["deny", id.as_str()]);
    let (a, b) = tokio::join!(
        cli(&alice, &db, "team-a", &approve),
        cli(&bob, &db, "team-a", &deny),
    );
    let mut codes = [a.0, b.0];
    codes.sort();
    assert_eq!(
        codes,
        [0, 5],
        "one decision wins, the other finds nothing: {a:?} {b:?}"
    );
    let text = first_text(
        &tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
    );
    let expected = if a.0 == 0 {
        "once"
    } else {
        "The user declined this tool call."
    };
    assert_eq!(text, expected);
}

#[tokio::test]
async fn a_replica_killed_mid_call_leaves_the_call_failed_never_re_run() {
    let db = migrated();
    let (one, two, person) = (
        Scratch::embedded(),
        Scratch::embedded(),
        Scratch::embedded(),
    );
    let config_one = one.reviewed_config(&config(&db, "team-a")).await;
    let config_two = two.config(&config(&db, "team-a"));
    let _survivor: Client = Arc::new(one.stdio_client(&config_one, ()).await);
    let (mut doomed, url) = two.serve_http(&config_two).await;
    let client: Client = Arc::new(().serve(two.http_transport(&url)).await.unwrap());
    let _running = in_background(&client, "fixture__slow", json!({"ms": 60_000}));
    let id = pending_id(&person, &db, "team-a").await;
    let (code, said) = cli(&person, &db, "team-a", &["approve", &id]).await;
    assert_eq!(code, 0, "{said}");
    // The call is now executing on replica two; kill it there.
    for _ in 0..100 {
        let (_, all) = cli(&person, &db, "team-a", &["pending", "--all"]).await;
        if all.contains(&format!("{id}  executing")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    doomed.start_kill().unwrap();
    doomed.wait().await.unwrap();
    // The surviving replica notices the silence and fails the call.
    let mut row = String::new();
    for _ in 0..600 {
        let (_, all) = cli(&person, &db, "team-a", &["pending", "--all"]).await;
        row = all
            .split(&format!("{id}  "))
            .nth(1)
            .unwrap_or_default()
            .to_string();
        if row.starts_with("failed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(row.starts_with("failed"), "{row}");
    assert!(row.contains("interrupted, not retried"), "{row}");
}
