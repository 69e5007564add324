//! Lines the code itself must hold: what an MCP client can reach never
//! records a review or changes configuration.

use std::path::{Path, PathBuf};

use airlock_testkit::Scratch;
use rmcp::model::CallToolRequestParams;

fn workspace() -> PathBuf {
    airlock_testkit::workspace_root()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    out.extend(airlock_testkit::rust_sources(dir));
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
        root.join("crates/airlock-store/src/postgres/mod.rs"),
        // The store's own suite, for both backends.
        root.join("crates/airlock-store/tests/backends.rs"),
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
        root.join("crates/airlock-store/src/postgres/mod.rs"),
        root.join("crates/airlock-decision/src/sqlite.rs"),
        root.join("crates/airlock-decision/src/postgres.rs"),
    ];
    let sql_writers: Vec<_> = files
        .iter()
        .filter(|f| !writers.contains(f))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap().to_lowercase();
            ["", "airlock."].iter().any(|schema| {
                text.contains(&format!("insert into {schema}{}", "contracts"))
                    || text.contains(&format!("update {schema}{}", "contracts"))
            })
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
    let scratch = Scratch::embedded();
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

/// Which sibling modules `text` refers to through `prefix` (`crate::` or
/// `super::`), by first path segment, in paths and in `use` groups.
fn referenced(text: &str, prefix: &str, siblings: &[String]) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end].split(',').collect()
        } else {
            vec![rest]
        };
        for n in names {
            let first: String = n
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if siblings.contains(&first) {
                out.insert(first);
            }
        }
    }
    out
}

/// The modules of a directory (files `x.rs` and directories `x/`), each
/// with the text of everything in it.
fn modules(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "main", "mod"].contains(&name.as_str()) {
            continue;
        }
        let mut files = Vec::new();
        if p.is_dir() {
            rust_files(&p, &mut files);
        } else if p.extension().is_some_and(|e| e == "rs") {
            files.push(p.clone());
        } else {
            continue;
        }
        // Code only: a comment may name any module.
        let text = files
            .iter()
            .flat_map(|f| {
                std::fs::read_to_string(f)
                    .unwrap()
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .join("\n");
        out.push((name, text));
    }
    out
}

/// A cycle in `edges`, if there is one, as the path around it.
fn cycle(
    edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

/// Modules depend one way: a crate's top-level modules on each other
/// through `crate::`, and the files of a module directory on their
/// siblings through `super::`, with no cycle at either level. (A parent's
/// re-exports are the parent's, not an edge between siblings.)
#[test]
fn no_module_depends_on_itself_through_others() {
    let root = workspace().join("crates");
    let mut found = Vec::new();
    for krate in std::fs::read_dir(&root).unwrap().flatten() {
        let src = krate.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut dirs = vec![(src.clone(), "crate::")];
        let mut stack = vec![src.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.path().is_dir() {
                    dirs.push((e.path(), "super::"));
                    stack.push(e.path());
                }
            }
        }
        for (dir, prefix) in dirs {
            let mods = modules(&dir);
            let names: Vec<String> = mods.iter().map(|(n, _)| n.clone()).collect();
            let edges = mods
                .iter()
                .map(|(n, text)| {
                    let mut to = referenced(text, prefix, &names);
                    to.remove(n);
                    (n.clone(), to)
                })
                .collect();
            if let Some(c) = cycle(&edges) {
                found.push(format!("{}: {}", dir.display(), c.join(" -> ")));
            }
        }
    }
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let names = vec!["a".to_string(), "b".to_string()];
    assert_eq!(
        referenced("use super::{a, b::X};\nsuper::a::f()", "super::", &names).len(),
        2
    );
    let mut edges = std::collections::BTreeMap::new();
    edges.insert("a".to_string(), ["b".to_string()].into());
    edges.insert("b".to_string(), std::collections::BTreeSet::new());
    assert!(cycle(&edges).is_none());
    edges.insert("b".to_string(), ["a".to_string()].into());
    assert_eq!(cycle(&edges).unwrap(), ["a", "b", "a"]);
}

/// Every crate a workspace crate depends on directly is in
/// docs/dependencies.md with what it is for.
#[test]
fn every_dependency_is_listed_in_the_docs() {
    let root = workspace();
    let listed = std::fs::read_to_string(root.join("docs/dependencies.md")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = parsed.get(section).and_then(|d| d.as_table()) else {
                continue;
            };
            for name in deps.keys().filter(|n| !n.starts_with("airlock")) {
                if !listed.contains(&format!("| `{name}` |")) {
                    missing.push(format!("{name} ({})", manifest.display()));
                }
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "not in docs/dependencies.md: {missing:?}"
    );
}
