//! Lines the code itself must hold: what an MCP client can reach never
//! records a review or changes configuration.

use std::path::{Path, PathBuf};

use airlock_testkit::Scratch;
use rmcp::model::CallToolRequestParams;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Pinning a contract widens what runs unasked, so only a person may do
/// it: through the CLI's review command, which only a person at a terminal
/// (or their script) runs, or through a person's "always allow", recorded
/// by the decision module (decision 0005). The store defines the call;
/// nothing else calls it or writes the table.
#[test]
fn only_the_review_command_pins_contracts() {
    let root = workspace();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let allowed = [
        root.join("crates/airlock-cli/src/tools.rs"),
        root.join("crates/airlock-store/src/lib.rs"),
        root.join("crates/airlock-store/src/sqlite/mod.rs"),
        // Runs the hub in process and stands in for the person who
        // reviews the source's endpoint.
        root.join("crates/airlock-testkit/tests/credentials.rs"),
    ];
    let offenders: Vec<_> = files
        .iter()
        .filter(|f| !allowed.contains(f))
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .contains(concat!("pin_", "contract("))
                || std::fs::read_to_string(f)
                    .unwrap()
                    .contains(concat!("pin_", "command("))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "pin_contract called from {offenders:?}"
    );
    let writers = [
        root.join("crates/airlock-store/src/sqlite/mod.rs"),
        root.join("crates/airlock-decision/src/lib.rs"),
    ];
    let sql_writers: Vec<_> = files
        .iter()
        .filter(|f| !writers.contains(f))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap().to_lowercase();
            text.contains(concat!("insert into ", "contracts"))
                || text.contains(concat!("update ", "contracts"))
        })
        .collect();
    assert!(
        sql_writers.is_empty(),
        "the contracts table is written from {sql_writers:?}"
    );
    // The crates that face MCP clients cannot even name the review trait.
    for krate in ["airlock-gateway", "airlock-upstream", "airlock-policy"] {
        let mut files = Vec::new();
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains("Reviews"),
                "{} names the Reviews trait",
                f.display()
            );
        }
    }
}

/// Every MCP path a client has, exercised; afterwards the reviewed
/// contracts, the config file and the rules are exactly as before.
#[tokio::test]
async fn no_mcp_path_changes_policy() {
    let scratch = Scratch::new();
    let config = scratch
        .reviewed_config(
            r#"
[hub]
call_timeout = "2s"

[sources.demo]
command = "{airlock}"
args = ["demo-server"]

[sources.fixture]
command = "{fixture}"
"#,
        )
        .await;
    let config_before = std::fs::read(&config).unwrap();
    let db = scratch.home().join("airlock.db");
    let contracts_before = contracts(&db);
    assert!(!contracts_before.is_empty());

    let client = scratch.stdio_client(&config, ()).await;
    let tools = client.list_all_tools().await.unwrap();
    // airlock exposes no tools of its own: every one belongs to a source.
    for t in &tools {
        assert!(
            t.name.starts_with("demo__") || t.name.starts_with("fixture__"),
            "airlock exposes its own tool {}",
            t.name
        );
    }
    client.list_all_prompts().await.unwrap();
    client.list_all_resources().await.unwrap();
    client.list_all_resource_templates().await.unwrap();
    for t in &tools {
        if [
            "fixture__hang",
            "fixture__crash",
            "fixture__garbage",
            "fixture__elicit",
        ]
        .contains(&t.name.as_ref())
        {
            continue;
        }
        let _ = client
            .call_tool(CallToolRequestParams::new(t.name.to_string()))
            .await;
    }
    // Names that look like management operations are simply unknown.
    for name in [
        "airlock__approve",
        "airlock__pin",
        "tools__review",
        "policy__set",
    ] {
        assert!(
            client
                .call_tool(CallToolRequestParams::new(name))
                .await
                .is_err()
        );
    }
    client.cancel().await.unwrap();

    assert_eq!(std::fs::read(&config).unwrap(), config_before);
    assert_eq!(contracts(&db), contracts_before);
}

fn contracts(db: &Path) -> Vec<(String, String, String)> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut stmt = c
        .prepare("SELECT source, tool, digest FROM contracts ORDER BY source, tool")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}
