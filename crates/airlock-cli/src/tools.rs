//! `airlock tools review`: the only way a contract is pinned.
//!
//! Starts the sources to read their current definitions, compares each
//! tool's contract digest with the one a person approved, shows what changed
//! and any signs of tool poisoning, and pins what the person approves.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use airlock_common::now_ms;
use airlock_gateway::Hub;
use airlock_policy::contract;
use airlock_policy::lint::Linter;
use airlock_store::{PinnedContract, Store};
use airlock_upstream::command::CommandIdentity;
use serde_json::Value;

use crate::home;

pub enum Mode {
    Interactive,
    ApproveAll,
    Approve(Vec<String>),
    List,
}

impl Mode {
    pub fn from_flags(all: bool, some: Vec<String>, list: bool) -> Mode {
        if all {
            Mode::ApproveAll
        } else if !some.is_empty() {
            Mode::Approve(some)
        } else if list {
            Mode::List
        } else {
            Mode::Interactive
        }
    }
}

struct Pending {
    /// `tool`, `prompt`, `resource` or `resource template`.
    kind: &'static str,
    /// The name a client sees (a resource's URI).
    exposed: String,
    source: String,
    upstream: String,
    definition: Value,
    digest: String,
    previous: Option<PinnedContract>,
}

impl Pending {
    /// What `--approve` names it by: a tool by its exposed name, anything
    /// else by its review key (`prompt:NAME`, `resource:URI`,
    /// `template:URI`), so a name never pins two kinds at once.
    fn approve_name(&self) -> String {
        match self.kind {
            "tool" => self.exposed.clone(),
            _ => {
                let kind = self.upstream.split(':').next().unwrap_or("");
                format!("{kind}:{}", self.exposed)
            }
        }
    }
}

pub fn review(config: Option<PathBuf>, mode: Mode) -> anyhow::Result<ExitCode> {
    let (config, origin) = home::load_config(config.as_deref())?;
    let backend = crate::store::open(&config.store)?;
    let store = backend.store();
    let interactive = matches!(mode, Mode::Interactive);
    if interactive && !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "tools review asks a person at a terminal; in scripts use --list, --approve NAME or --approve-all"
        );
    }
    println!("Reviewing {origin}");
    review_commands(&config, &backend, &mode)?;
    let config_sources: Vec<String> = config.sources.iter().map(|s| s.name.clone()).collect();
    let shared: Arc<dyn Store> = store.clone();
    let runtime = tokio::runtime::Runtime::new()?;
    let timeout = config.hub.connect_timeout;
    let (pending, others, failed, withheld) = runtime.block_on(async {
        let hub = Hub::probe(config, shared, home::hub_secrets()?);
        crate::show::sources_settled(&hub, timeout).await;
        let failed: Vec<String> = hub
            .sources()
            .iter()
            .filter(|s| s.state().label() != "ready")
            .map(|s| match s.state().reason() {
                r if r.is_empty() => format!(
                    "{}: it had not finished starting after {}s",
                    s.name(),
                    timeout.as_secs()
                ),
                r => format!("{}: {r}", s.name()),
            })
            .collect();
        let catalog = hub.catalog();
        let mut pending = Vec::new();
        for tool in &catalog.tools {
            let (Some(route), Some(c)) = (catalog.tool(&tool.name), catalog.contract(&tool.name))
            else {
                continue;
            };
            let source = catalog.source_name(route.source).to_string();
            let previous = store.pinned_contract(&source, &route.upstream_name)?;
            if previous.as_ref().is_some_and(|p| p.digest == c.digest) {
                continue;
            }
            pending.push(Pending {
                kind: "tool",
                exposed: tool.name.to_string(),
                source,
                upstream: route.upstream_name.clone(),
                definition: c.definition.clone(),
                digest: c.digest.clone(),
                previous,
            });
        }
        // What a model reads of prompts, resources and templates, where
        // there is more to read than a name.
        let texts = catalog
            .prompts
            .iter()
            .filter_map(|p| Some((p.name.clone(), catalog.prompt_text(&p.name)?)))
            .chain(
                catalog
                    .resources
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| Some((r.uri.clone(), catalog.resource_text(i)?))),
            )
            .chain(
                catalog
                    .resource_templates
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| Some((t.uri_template.clone(), catalog.template_text(i)?))),
            );
        for (exposed, text) in texts {
            // Something to read beyond a name, or something the lint
            // flags: a person looks at it (a flagged one is withheld until
            // then, so it must be reviewable).
            let has_text = ["description", "title"]
                .iter()
                .any(|f| text.definition[*f].as_str().is_some_and(|s| !s.is_empty()))
                || text.definition["arguments"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty());
            let others: Vec<String> = catalog.tools.iter().map(|t| t.name.to_string()).collect();
            if !has_text && Linter::new(others).check(&text.definition).is_empty() {
                continue;
            }
            let source = catalog.source_name(text.source).to_string();
            let previous = store.pinned_contract(&source, &text.key)?;
            if previous.as_ref().is_some_and(|p| p.digest == text.digest) {
                continue;
            }
            pending.push(Pending {
                kind: text.kind(),
                exposed,
                source,
                upstream: text.key.clone(),
                definition: text.definition.clone(),
                digest: text.digest.clone(),
                previous,
            });
        }
        let others: Vec<String> = catalog.tools.iter().map(|t| t.name.to_string()).collect();
        let withheld: Vec<String> = catalog
            .withheld
            .iter()
            .map(|w| format!("source {}: `{}`: {}", w.source, w.name, w.reason))
            .collect();
        hub.stop().await;
        anyhow::Ok((pending, others, failed, withheld))
    })?;

    for f in &failed {
        println!("warning: source {f}; its tools cannot be reviewed now");
    }
    for w in &withheld {
        println!("withheld from clients (nothing to pin): {w}");
    }
    if pending.is_empty() {
        match failed.len() {
            0 => println!(
                "Every tool, prompt and resource matches what was reviewed. Nothing to do."
            ),
            n => println!(
                "Nothing to review from the sources that started, but {n} did not start (above): review again once they do."
            ),
        }
        return Ok(unreviewed_sources(&failed));
    }
    let reviewer = reviewer();
    let mut approved = 0;
    let mut pending = pending;
    // One source at a time, in the order they came.
    let order: Vec<String> = pending.iter().map(|p| p.source.clone()).collect();
    pending.sort_by_key(|p| order.iter().position(|s| *s == p.source));
    let mut whole_source: Option<(String, bool)> = None;
    for (i, p) in pending.iter().enumerate() {
        if i == 0 || pending[i - 1].source != p.source {
            let n = pending.iter().filter(|q| q.source == p.source).count();
            println!("━━ source {}: {n} to review\n", p.source);
        }
        let others: Vec<String> = others
            .iter()
            .filter(|o| **o != p.exposed)
            .cloned()
            .collect();
        show(p, &Linter::new(others));
        let decided = whole_source
            .as_ref()
            .filter(|(source, _)| *source == p.source)
            .map(|(_, yes)| *yes);
        let yes = match (&mode, decided) {
            (_, Some(yes)) => yes,
            (Mode::List, _) => false,
            (Mode::ApproveAll, _) => true,
            (Mode::Approve(names), _) => names.iter().any(|n| *n == p.approve_name()),
            (Mode::Interactive, None) => {
                match ask(&format!("Pin this {} for {}?", p.kind, p.exposed), true)? {
                    Answer::Yes => true,
                    Answer::No => false,
                    Answer::AllOfSource => {
                        whole_source = Some((p.source.clone(), true));
                        true
                    }
                    Answer::SkipSource => {
                        whole_source = Some((p.source.clone(), false));
                        false
                    }
                    Answer::Quit => {
                        println!(
                            "stopped: {} left unreviewed; `airlock tools review` shows them again",
                            pending.len() - i
                        );
                        break;
                    }
                }
            }
        };
        if yes {
            backend.reviews().pin_contract(&PinnedContract {
                source: p.source.clone(),
                tool: p.upstream.clone(),
                digest: p.digest.clone(),
                definition: p.definition.clone(),
                reviewed_at_ms: now_ms(),
                reviewer: reviewer.clone(),
            })?;
            approved += 1;
            println!("pinned {} {} {}\n", p.kind, p.exposed, p.digest);
        } else {
            match p.kind {
                "tool" => println!("not pinned: calls to {} keep asking\n", p.exposed),
                kind => println!(
                    "not pinned: clients see {kind} {} only as last reviewed, or not at all\n",
                    p.exposed
                ),
            }
        }
    }
    if let Mode::Approve(names) = &mode {
        for n in names {
            let is_source = config_sources.iter().any(|s| s == n);
            if !is_source && !pending.iter().any(|p| p.approve_name() == *n) {
                println!("note: {n} is not among the tools that need review");
            }
        }
    }
    println!("{approved} of {} pinned.", pending.len());
    Ok(unreviewed_sources(&failed))
}

/// Exit 3 when a source did not start, so its items could not be shown:
/// a script that reviews and goes on learns that it is not done.
fn unreviewed_sources(failed: &[String]) -> ExitCode {
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

/// Sources first: the exact command each stdio source runs, and the origin
/// each url source reaches, are approved before it ever starts (a change
/// asks again). `--approve NAME` takes a source name for this.
fn review_commands(
    config: &airlock_config::Config,
    store: &crate::store::Backend,
    mode: &Mode,
) -> anyhow::Result<()> {
    if config.origin.is_none() {
        return Ok(());
    }
    let reviewer = reviewer();
    for source in &config.sources {
        let Some(command) = CommandIdentity::of(source) else {
            continue;
        };
        let previous = store.store().approved_command(&source.name)?;
        if previous.as_deref() == Some(command.fingerprint().as_str()) {
            continue;
        }
        let state = if previous.is_some() { "CHANGED" } else { "NEW" };
        let what = if command.endpoint.is_some() {
            "endpoint"
        } else {
            "command"
        };
        println!("── {state} {what} of source {}", source.name);
        if let Some(prev) = &previous {
            println!("     - {prev}");
        }
        println!("     + {}", command.describe());
        // A command that cannot run is never approved: fixing it changes
        // the command, which is reviewed then.
        if let Err(why) = command.runnable() {
            println!(
                "not approved: {why}; fix the command of {}, then review again\n",
                source.name
            );
            continue;
        }
        let yes = match mode {
            Mode::List => false,
            Mode::ApproveAll => true,
            Mode::Approve(names) => names.iter().any(|n| n == &source.name),
            Mode::Interactive => {
                match ask(
                    &format!("Allow source {} to run this command?", source.name),
                    false,
                )? {
                    Answer::Yes | Answer::AllOfSource => true,
                    Answer::No | Answer::SkipSource => false,
                    Answer::Quit => anyhow::bail!("stopped: nothing more was reviewed"),
                }
            }
        };
        if yes {
            store
                .reviews()
                .pin_command(&source.name, &command.fingerprint(), &reviewer)?;
            println!("approved: {} may run it\n", source.name);
        } else {
            println!("not approved: {} will not start\n", source.name);
        }
    }
    Ok(())
}

fn reviewer() -> String {
    format!(
        "{} (cli)",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    )
}

fn show(p: &Pending, linter: &Linter) {
    let state = if p.previous.is_some() {
        "CHANGED"
    } else {
        "NEW"
    };
    println!("── {state} {} {}  {}", p.kind, p.exposed, p.digest);
    if p.kind != "tool" {
        println!("   (`--approve {}` pins it)", p.approve_name());
    }
    let (of, fields): (fn(&Value) -> Value, _) = match p.kind {
        "tool" => (contract::contract_of, contract::FIELDS),
        _ => (contract::text_of, contract::TEXT_FIELDS),
    };
    let current = of(&p.definition);
    match &p.previous {
        None => {
            for field in fields {
                if let Some(v) = current.get(*field) {
                    println!("   {field}: {}", render(v));
                }
            }
        }
        Some(prev) => {
            let before = of(&prev.definition);
            for field in fields {
                let (a, b) = (before.get(*field), current.get(*field));
                if a != b {
                    println!("   {field}:");
                    println!(
                        "     - {}",
                        a.map(render).unwrap_or_else(|| "(absent)".into())
                    );
                    println!(
                        "     + {}",
                        b.map(render).unwrap_or_else(|| "(absent)".into())
                    );
                }
            }
        }
    }
    let findings = linter.check(&p.definition);
    for f in &findings {
        println!("   ⚠ {}: {}", f.field, f.message);
    }
    match (&p.previous, findings.is_empty()) {
        (Some(_), _) if p.kind == "tool" => println!(
            "   until you pin it, clients see the definition you reviewed and its calls ask"
        ),
        (Some(_), _) => println!("   until you pin it, clients see the text you reviewed"),
        (None, false) => println!(
            "   until you pin it, clients do not see this {}: its text looks like tool poisoning",
            p.kind
        ),
        (None, true) => {}
    }
}

fn render(v: &Value) -> String {
    match v {
        // Escapes make hidden characters visible to the reviewer.
        Value::String(s) => s.escape_default().to_string(),
        other => other.to_string(),
    }
}

/// A person's answer at the review prompt.
#[derive(Debug, PartialEq)]
enum Answer {
    Yes,
    No,
    /// Yes to this and everything else of the same source.
    AllOfSource,
    /// No to this and everything else of the same source.
    SkipSource,
    /// Stop reviewing; what was pinned stays pinned.
    Quit,
}

/// Asks until the answer is one it knows; `?` explains the choices, an
/// empty line is no, and the end of input is quit.
fn ask(question: &str, per_source: bool) -> anyhow::Result<Answer> {
    let choices = if per_source {
        "[y/N/a/s/q/?]"
    } else {
        "[y/N/q/?]"
    };
    loop {
        print!("{question} {choices} ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        if std::io::stdin().lock().read_line(&mut line)? == 0 {
            println!();
            return Ok(Answer::Quit);
        }
        match parse_answer(&line, per_source) {
            Some(answer) => return Ok(answer),
            None => {
                println!("  y  yes, pin it (or approve the command)");
                println!("  n  no, not now (also an empty answer)");
                if per_source {
                    println!("  a  yes to this and the rest of this source");
                    println!("  s  no to this and the rest of this source");
                }
                println!("  q  quit; what was pinned stays pinned");
            }
        }
    }
}

fn parse_answer(line: &str, per_source: bool) -> Option<Answer> {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(Answer::Yes),
        "" | "n" | "no" => Some(Answer::No),
        "a" | "all" if per_source => Some(Answer::AllOfSource),
        "s" | "skip" if per_source => Some(Answer::SkipSource),
        "q" | "quit" => Some(Answer::Quit),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_answers_count_and_help_is_not_no() {
        assert_eq!(parse_answer("Y\n", true), Some(Answer::Yes));
        assert_eq!(parse_answer("\n", true), Some(Answer::No));
        assert_eq!(parse_answer("all", true), Some(Answer::AllOfSource));
        assert_eq!(parse_answer("s", true), Some(Answer::SkipSource));
        assert_eq!(parse_answer("q", false), Some(Answer::Quit));
        for unknown in ["?", "help", "maybe", "yess"] {
            assert_eq!(parse_answer(unknown, true), None, "{unknown}");
        }
        // Per-source answers mean nothing where there is one item.
        assert_eq!(parse_answer("a", false), None);
    }
}
