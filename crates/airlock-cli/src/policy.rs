//! `airlock policy check` and `airlock policy explain`.

use std::path::PathBuf;
use std::process::ExitCode;

use airlock_config::Layer;
use airlock_policy::{Policy, ToolFacts, contract};
use airlock_store::{CatalogKind, SqliteStore, Store};
use serde_json::Value;

use crate::home;

pub fn check(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let (config, origin) = match home::load_config(config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL  {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    println!("ok    {origin}");
    let count = |layer: Layer| config.all_rules().filter(|r| r.layer == layer).count();
    println!(
        "      {} user rule(s), {} managed rule(s){}",
        count(Layer::User),
        count(Layer::Managed),
        config
            .hub
            .managed_policy
            .as_ref()
            .map(|p| format!(" from {}", p.display()))
            .unwrap_or_default()
    );
    for s in &config.sources {
        println!(
            "      source {:<20} connection {:<12} {}",
            s.name,
            s.connection,
            if s.trusted { "trusted" } else { "not trusted" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn explain(
    config: Option<PathBuf>,
    tool: &str,
    args: Option<&str>,
    connection: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let (config, _) = home::load_config(config.as_deref())?;
    let args: Option<Value> = args
        .map(|a| serde_json::from_str(a).map_err(|e| anyhow::anyhow!("--args is not JSON: {e}")))
        .transpose()?;
    let store = SqliteStore::open_in(&home::data_dir()?)?;
    // The tool as last seen by a running hub (or a review).
    let entries = store.catalog(None)?;
    let found = config.sources.iter().find_map(|s| {
        let upstream = if s.prefix {
            tool.strip_prefix(&format!("{}__", s.name))?
        } else {
            tool
        };
        entries
            .iter()
            .find(|e| e.source == s.name && e.kind == CatalogKind::Tool && e.name == upstream)
            .map(|e| (s, e))
    });
    let Some((source, entry)) = found else {
        anyhow::bail!(
            "`{tool}` is not in the catalog: run the hub (or `airlock tools review`) once so airlock has seen its sources' tools"
        );
    };
    let digest = contract::digest(&entry.definition);
    let reviewed = store.pinned_contract(&source.name, &entry.name)?;
    let facts = ToolFacts {
        source: &source.name,
        connection: connection.unwrap_or(&source.connection),
        exposed: tool,
        trusted: source.trusted,
        definition: &entry.definition,
        digest: &digest,
        reviewed: reviewed.as_ref().map(|r| r.digest.as_str()),
    };
    let decision = Policy::new(&config).decide(
        &facts,
        Some(args.as_ref().unwrap_or(&Value::Object(Default::default()))),
    );
    println!("{tool}: {}", decision.action.as_str().to_uppercase());
    println!("  because {}", decision.reason);
    println!(
        "  source {} (connection {}), contract {digest}",
        source.name, facts.connection
    );
    for line in &decision.chain {
        println!("  {line}");
    }
    Ok(ExitCode::SUCCESS)
}
