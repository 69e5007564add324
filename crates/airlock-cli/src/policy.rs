//! `airlock policy check` and `airlock policy explain`.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;

use airlock_config::{Action, Config, Layer, SourceConfig};
use airlock_policy::{RuleMatcher, ToolFacts, contract};
use airlock_store::{CatalogEntry, CatalogKind};
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
    // What the rules can be checked against: the sources in the config and
    // the tools a running hub (or a review) last stored for them.
    let catalog = crate::store::open(&config.store)
        .ok()
        .and_then(|backend| backend.store().catalog(None).ok())
        .unwrap_or_default();
    let known = Known::new(&config, &catalog);
    let mut failed = false;
    for rule in config.all_rules() {
        let Ok(matcher) = RuleMatcher::new(rule) else {
            continue;
        };
        let what = format!(
            "{} at {} ({} layer)",
            rule.action.as_str(),
            rule.origin,
            rule.layer.as_str()
        );
        match known.reach(&matcher) {
            Reach::Some => {}
            Reach::Unknown(sources) => println!(
                "note  {what}: cannot be checked against tools: no stored catalog for source(s) {} (run the hub or `airlock tools review` once)",
                sources.join(", ")
            ),
            Reach::Nothing(why) if rule.for_future => {
                println!("warn  {what} matches nothing known: {why} (kept: for_future = true)");
            }
            Reach::Nothing(why) if rule.action == Action::Deny => {
                failed = true;
                println!(
                    "FAIL  {what} matches nothing known: {why}\n      a deny that matches nothing protects nothing: fix the name, or mark the rule for_future = true if what it names does not exist yet"
                );
            }
            Reach::Nothing(why) => println!("warn  {what} matches nothing known: {why}"),
        }
    }
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// One tool as the rules see it.
struct KnownTool<'a> {
    source: &'a SourceConfig,
    exposed: String,
    canonical: String,
}

/// The sources of the config and the stored tools of each.
struct Known<'a> {
    sources: &'a [SourceConfig],
    tools: Vec<KnownTool<'a>>,
    /// Sources the store has a catalog for.
    seen: HashSet<&'a str>,
}

enum Reach {
    /// The rule targets at least one known tool (or source, for a rule
    /// without a `tool`).
    Some,
    /// It targets no known source or connection, or no stored tool: why.
    Nothing(String),
    /// It names tools of sources whose tools are not known yet.
    Unknown(Vec<String>),
}

impl<'a> Known<'a> {
    fn new(config: &'a Config, catalog: &'a [CatalogEntry]) -> Known<'a> {
        let mut tools = Vec::new();
        let mut seen = HashSet::new();
        for entry in catalog {
            let Some(source) = config.source(&entry.source) else {
                continue;
            };
            seen.insert(source.name.as_str());
            if entry.kind != CatalogKind::Tool {
                continue;
            }
            let canonical = format!("{}__{}", source.name, entry.name);
            tools.push(KnownTool {
                source,
                exposed: if source.prefix {
                    canonical.clone()
                } else {
                    entry.name.clone()
                },
                canonical,
            });
        }
        Known {
            sources: &config.sources,
            tools,
            seen,
        }
    }

    fn reach(&self, m: &RuleMatcher) -> Reach {
        let rule = m.rule();
        let by_source: Vec<&SourceConfig> = self
            .sources
            .iter()
            .filter(|s| m.matches_source(&s.name))
            .collect();
        if by_source.is_empty() {
            return Reach::Nothing(format!(
                "source glob `{}` matches no source{}",
                rule.source.as_deref().unwrap_or_default(),
                closest_of(
                    rule.source.as_deref().unwrap_or_default(),
                    self.sources.iter().map(|s| s.name.as_str())
                )
            ));
        }
        let candidates: Vec<&SourceConfig> = by_source
            .iter()
            .copied()
            .filter(|s| m.matches_connection(&s.connection))
            .collect();
        if candidates.is_empty() {
            let wanted = rule.connection.as_deref().unwrap_or_default();
            return Reach::Nothing(format!(
                "connection `{wanted}` is not the connection of any source it names{}",
                closest_of(wanted, by_source.iter().map(|s| s.connection.as_str()))
            ));
        }
        let Some(glob) = rule.tool.as_deref() else {
            return Reach::Some;
        };
        let tools: Vec<&KnownTool> = self
            .tools
            .iter()
            .filter(|t| candidates.iter().any(|s| s.name == t.source.name))
            .collect();
        if tools
            .iter()
            .any(|t| m.matches_tool(&t.exposed, &t.canonical))
        {
            return Reach::Some;
        }
        let unseen: Vec<String> = candidates
            .iter()
            .filter(|s| !self.seen.contains(s.name.as_str()))
            .map(|s| s.name.clone())
            .collect();
        if !unseen.is_empty() {
            return Reach::Unknown(unseen);
        }
        let names: BTreeSet<&str> = tools
            .iter()
            .flat_map(|t| [t.exposed.as_str(), t.canonical.as_str()])
            .collect();
        Reach::Nothing(format!(
            "tool glob `{glob}` matches no known tool{}",
            closest_of(glob, names.into_iter())
        ))
    }
}

/// ` (closest: a, b)`, or nothing when no name is near.
fn closest_of<'a>(wanted: &str, known: impl Iterator<Item = &'a str>) -> String {
    let known: BTreeSet<&str> = known.collect();
    let near = airlock_common::closest(wanted, known);
    if near.is_empty() {
        String::new()
    } else {
        format!(" (closest: {})", near.join(", "))
    }
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
    let store = crate::store::open(&config.store)?.store();
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
        upstream: &entry.name,
        trusted: source.trusted,
        definition: &entry.definition,
        digest: &digest,
        reviewed: reviewed.as_ref().map(|r| r.digest.as_str()),
    };
    let args = args.unwrap_or_else(|| Value::Object(Default::default()));
    // The config's rules and the "always allow" rules people created, as
    // the hub decides with them.
    let standing = store.standing_rules()?;
    let policy = airlock_gateway::hub::PolicyState::with_standing(&config, &standing).rules;
    let decision = policy.decide(&facts, Some(&args));
    println!("{tool}: {}", decision.action.as_str().to_uppercase());
    println!("  because {}", decision.reason);
    println!(
        "  source {} (connection {}), contract {digest}",
        source.name, facts.connection
    );
    for line in &decision.chain {
        println!("  {line}");
    }
    if !standing.is_empty() {
        println!(
            "  {} standing \"always allow\" rule(s) counted (`airlock rules list`)",
            standing.len()
        );
    }
    for line in policy.near_misses(&facts, &args) {
        println!("  nearest: {line}");
    }
    Ok(ExitCode::SUCCESS)
}
