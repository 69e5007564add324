//! The policy part of the hub: the rules in force (the config's and the
//! standing rules people created), the contracts people reviewed, and the
//! per-call [`View`] that decides calls and what clients may list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use airlock_config::{Action, Config, Layer, RuleConfig};
use airlock_policy::{Decision, Policy, Step, ToolFacts};
use airlock_store::Store;
use airlock_store::ledger::StandingRule;
use serde_json::Value;

use rmcp::model::{Prompt, Resource, ResourceTemplate};

use crate::catalog::{Catalog, Text};

/// What decides calls, replaced whole on reload.
pub struct PolicyState {
    pub rules: Policy,
    /// What it was built from, to rebuild when people add standing rules.
    config: Config,
    /// The ids of the standing rules it holds (one revoked and another
    /// added is a change too).
    standing: Vec<i64>,
    /// Per source: (trusted, connection).
    sources: HashMap<String, (bool, String)>,
}

impl PolicyState {
    pub fn new(config: &Config) -> PolicyState {
        PolicyState::with_standing(config, &[])
    }

    /// The config's policy plus the rules people created with "always
    /// allow": each allows one tool on one connection, pinned to the
    /// contract it had, in the user layer.
    pub fn with_standing(config: &Config, standing: &[StandingRule]) -> PolicyState {
        let created: Vec<RuleConfig> = standing
            .iter()
            .map(|r| RuleConfig {
                layer: Layer::User,
                origin: format!("always-allow #{} by {}", r.id, r.created_by),
                action: Action::Allow,
                source: None,
                tool: Some(r.tool.clone()),
                connection: Some(r.connection.clone()),
                pin: Some(r.digest.clone()),
                when: Vec::new(),
                for_future: false,
            })
            .collect();
        PolicyState {
            config: config.clone(),
            standing: standing.iter().map(|r| r.id).collect(),
            rules: Policy::from_rules(config.all_rules().chain(created.iter())),
            sources: config
                .sources
                .iter()
                .map(|s| (s.name.clone(), (s.trusted, s.connection.clone())))
                .collect(),
        }
    }

    /// Whether the user marked `source` trusted (unknown sources are not).
    pub fn trusted(&self, source: &str) -> bool {
        self.sources.get(source).is_some_and(|(t, _)| *t)
    }

    pub fn connection<'a>(&'a self, source: &'a str) -> &'a str {
        self.sources.get(source).map_or(source, |(_, c)| c.as_str())
    }
}

/// The contracts people reviewed, by (source, upstream tool): the digest
/// pinned, and the definition it was pinned with (what clients see).
#[derive(Default)]
pub struct Reviewed {
    pub digests: HashMap<(String, String), String>,
    pub definitions: HashMap<(String, String), Value>,
}

impl Reviewed {
    pub fn digest(&self, source: &str, tool: &str) -> Option<&str> {
        self.digests
            .get(&(source.to_string(), tool.to_string()))
            .map(String::as_str)
    }
}

#[derive(Default)]
struct ReviewedCache {
    checked: Option<Instant>,
    generation: i64,
    reviewed: Arc<Reviewed>,
}

/// How often the store is looked at for new reviews and standing rules.
const REVIEW_CHECK: Duration = Duration::from_millis(500);

pub struct PolicyView {
    store: Arc<dyn Store>,
    state: RwLock<Arc<PolicyState>>,
    standing_checked: Mutex<Option<Instant>>,
    reviewed: Mutex<ReviewedCache>,
}

impl PolicyView {
    pub(crate) fn new(config: &Config, store: Arc<dyn Store>) -> PolicyView {
        PolicyView {
            store,
            state: RwLock::new(Arc::new(PolicyState::new(config))),
            standing_checked: Mutex::new(None),
            reviewed: Mutex::new(ReviewedCache::default()),
        }
    }

    /// One consistent view of the catalog, the rules and the reviews, for
    /// one call or one listing.
    pub fn view(&self, catalog: Arc<Catalog>) -> View {
        View {
            catalog,
            policy: self.policy(),
            reviewed: self.reviewed(),
        }
    }

    /// The rules and per-source trust in force now. Looks for new "always
    /// allow" rules at most every REVIEW_CHECK.
    pub fn policy(&self) -> Arc<PolicyState> {
        let current = self.state.read().unwrap_or_else(|p| p.into_inner()).clone();
        let due = {
            let mut checked = self
                .standing_checked
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let due = checked.is_none_or(|t| t.elapsed() >= REVIEW_CHECK);
            if due {
                *checked = Some(Instant::now());
            }
            due
        };
        if !due {
            return current;
        }
        match self.store.standing_rules() {
            Ok(rules)
                if !rules
                    .iter()
                    .map(|r| r.id)
                    .eq(current.standing.iter().copied()) =>
            {
                let next = Arc::new(PolicyState::with_standing(&current.config, &rules));
                *self.state.write().unwrap_or_else(|p| p.into_inner()) = next.clone();
                next
            }
            Ok(_) => current,
            Err(e) => {
                tracing::error!(error = %e, "cannot read standing rules");
                current
            }
        }
    }

    /// Replaces the rules, trust flags and connections with those of a
    /// freshly loaded config.
    pub(crate) fn reload(&self, config: &Config) {
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(PolicyState::new(config));
    }

    /// A person just changed what is reviewed or allowed (an "always
    /// allow" was claimed): the next decision reads the store again rather
    /// than a cache up to REVIEW_CHECK old.
    pub(crate) fn forget_cached_reviews(&self) {
        *self
            .standing_checked
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.reviewed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .checked = None;
    }

    /// The reviewed contracts. Checks the store for new reviews at most
    /// every REVIEW_CHECK; if the store cannot be read, keeps what it had
    /// (an unreadable review is no review).
    pub fn reviewed(&self) -> Arc<Reviewed> {
        let mut cache = self.reviewed.lock().unwrap_or_else(|p| p.into_inner());
        if cache.checked.is_some_and(|t| t.elapsed() < REVIEW_CHECK) {
            return cache.reviewed.clone();
        }
        cache.checked = Some(Instant::now());
        match self.store.contracts_generation() {
            Ok(g) if g != cache.generation || cache.reviewed.digests.is_empty() => {
                match (
                    self.store.reviewed_contracts(),
                    self.store.reviewed_definitions(),
                ) {
                    (Ok(digests), Ok(definitions)) => {
                        cache.reviewed = Arc::new(Reviewed {
                            digests,
                            definitions,
                        });
                        cache.generation = g;
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        tracing::error!(error = %e, "cannot read reviewed contracts")
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot read reviewed contracts"),
        }
        cache.reviewed.clone()
    }
}

/// Appended to a tool's description when calls to it ask, so a model knows
/// a decline is the user's choice and not a failure to retry.
pub const ASK_NOTE: &str = "[airlock] Calls to this tool pause for the user's approval and may be declined; a declined call is the user's decision, not an error to retry.";

/// One consistent snapshot of what decides: the catalog, the rules and the
/// reviews as they were when it was taken.
pub struct View {
    pub catalog: Arc<Catalog>,
    pub policy: Arc<PolicyState>,
    pub reviewed: Arc<Reviewed>,
}

impl View {
    /// The decision for one exposed tool, for a call (`args`) or for
    /// listing (`None`).
    pub fn evaluate(&self, exposed: &str, args: Option<&Value>) -> Decision {
        let (Some(route), Some(tool)) =
            (self.catalog.tool(exposed), self.catalog.contract(exposed))
        else {
            return Decision {
                action: Action::Deny,
                step: Step::Error,
                rule: None,
                reason: "the tool has no contract in the catalog".into(),
                chain: vec!["the tool has no contract in the catalog; denied".into()],
            };
        };
        let name = self.catalog.source_name(route.source);
        let facts = ToolFacts {
            source: name,
            connection: self.policy.connection(name),
            exposed,
            upstream: &route.upstream_name,
            trusted: self.policy.trusted(name),
            definition: &tool.definition,
            digest: &tool.digest,
            reviewed: self.reviewed.digest(name, &route.upstream_name),
        };
        if args.is_none() && self.policy.rules.hides(&facts) {
            return Decision {
                action: Action::Deny,
                step: Step::Deny,
                rule: None,
                reason: "denied by policy".into(),
                chain: Vec::new(),
            };
        }
        self.policy.rules.decide(&facts, args)
    }

    /// The tools a client may see: denied ones removed, and a note on
    /// those whose calls ask. What the model reads is what a person
    /// reviewed: a tool that changed since its review is listed with its
    /// reviewed definition (its calls ask until the change is reviewed);
    /// a tool never reviewed is listed only if its text passes the
    /// poisoning lint, and withheld otherwise.
    pub fn visible_tools(&self) -> Vec<rmcp::model::Tool> {
        let mut out = Vec::with_capacity(self.catalog.tools.len());
        for tool in &self.catalog.tools {
            let Some(route) = self.catalog.tool(&tool.name) else {
                continue;
            };
            let action = self.evaluate(&tool.name, None).action;
            if action == Action::Deny {
                continue;
            }
            let source = self.catalog.source_name(route.source);
            let key = (source.to_string(), route.upstream_name.clone());
            // A reviewed tool is shown as it was reviewed, whatever changed
            // since (its description, or fields outside the contract such
            // as `_meta` and `icons`); calls to a changed one ask.
            let shown = if self.reviewed.digests.contains_key(&key) {
                let pinned = self
                    .reviewed
                    .definitions
                    .get(&key)
                    .and_then(|d| serde_json::from_value::<rmcp::model::Tool>(d.clone()).ok());
                match pinned {
                    Some(mut t) => {
                        t.name = tool.name.clone();
                        t
                    }
                    None => continue,
                }
            } else {
                let findings = self.lint_unreviewed(&tool.name);
                if !findings.is_empty() {
                    tracing::warn!(
                        tool = %tool.name,
                        findings = %findings.join("; "),
                        "not listing a tool nobody has reviewed whose text looks like tool poisoning; run `airlock tools review`"
                    );
                    continue;
                }
                tool.clone()
            };
            out.push(match action {
                Action::Ask => with_note(shown, ASK_NOTE),
                _ => shown,
            });
        }
        out
    }

    /// The prompts a client may see: each as it is if a person reviewed it
    /// so or, never reviewed, its text passes the poisoning lint; as it was
    /// reviewed if it changed since; otherwise not at all.
    pub fn visible_prompts(&self) -> Vec<Prompt> {
        let catalog = &self.catalog;
        catalog
            .prompts
            .iter()
            .filter_map(|p| {
                let text = catalog.prompt_text(&p.name)?;
                shown(p, text, self.shown_text(&p.name, text))
            })
            .collect()
    }

    /// Whether a client may see (and so get) the prompt exposed as `exposed`.
    pub fn prompt_visible(&self, exposed: &str) -> bool {
        self.catalog
            .prompt_text(exposed)
            .is_some_and(|text| !matches!(self.shown_text(exposed, text), Shown::Withheld(_)))
    }

    /// Whether a client may read (or subscribe to, or complete) `uri`: what
    /// it comes under is something the client may see — with templates
    /// that routing cannot tell apart, all of them. A withheld item is as
    /// unknown as one never listed, whoever knows its URI.
    /// The same holds for every spelling of a withheld item's URI that a
    /// lenient server may take for it, even when a visible catch-all
    /// template covers that spelling. A URI listed as it is written (a
    /// resource, or, when `completing`, the template a completion names)
    /// is what the listing shows, and is judged by that alone; a read of a
    /// template's own text is a URI like any other.
    pub fn resource_visible(&self, uri: &str, completing: bool) -> bool {
        let catalog = &self.catalog;
        let governing = catalog.resource_texts_for(uri);
        let listed_as_written = catalog.resources.iter().any(|r| r.uri == uri)
            || (completing
                && catalog
                    .resource_templates
                    .iter()
                    .any(|t| t.uri_template == uri));
        !governing.is_empty()
            && governing
                .iter()
                .all(|(name, text)| !matches!(self.shown_text(name, text), Shown::Withheld(_)))
            && (listed_as_written || !self.spells_a_withheld_item(uri))
    }

    fn spells_a_withheld_item(&self, uri: &str) -> bool {
        let uri = crate::uri_spelling::Folded::new(uri);
        let catalog = &self.catalog;
        let withheld = |name: &str, text| matches!(self.shown_text(name, text), Shown::Withheld(_));
        let resources = catalog.resources.iter().enumerate().any(|(i, r)| {
            catalog.folded_uri(i).is_some_and(|f| uri.names(f))
                && catalog
                    .resource_text(i)
                    .is_some_and(|text| withheld(&r.uri, text))
        });
        resources
            || catalog.resource_templates.iter().enumerate().any(|(i, t)| {
                catalog.folded_prefix(i).is_some_and(|p| uri.is_under(p))
                    && catalog
                        .template_text(i)
                        .is_some_and(|text| withheld(&t.uri_template, text))
            })
    }

    /// The resources a client may see, by the same rule as prompts.
    pub fn visible_resources(&self) -> Vec<Resource> {
        let catalog = &self.catalog;
        catalog
            .resources
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let text = catalog.resource_text(i)?;
                shown(r, text, self.shown_text(&r.uri, text))
            })
            .collect()
    }

    /// The resource templates a client may see, by the same rule as prompts.
    pub fn visible_templates(&self) -> Vec<ResourceTemplate> {
        let catalog = &self.catalog;
        catalog
            .resource_templates
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let text = catalog.template_text(i)?;
                shown(t, text, self.shown_text(&t.uri_template, text))
            })
            .collect()
    }

    /// What a client is shown of one prompt, resource or template (`name`
    /// as the client knows it).
    fn shown_text(&self, name: &str, text: &Text) -> Shown {
        let key = (
            self.catalog.source_name(text.source).to_string(),
            text.key.clone(),
        );
        match self.reviewed.digests.get(&key) {
            // Reviewed (changed since or not): served as it was reviewed,
            // so nothing outside the reviewed fields (`_meta`, icons)
            // reaches the client unreviewed.
            Some(_) => match self.reviewed.definitions.get(&key) {
                Some(reviewed) => Shown::Reviewed(reviewed.clone()),
                None => Shown::Withheld(vec!["its reviewed definition cannot be read".into()]),
            },
            None => {
                let findings = crate::review::lint_new(&self.catalog, name, &text.definition);
                if findings.is_empty() {
                    Shown::Current
                } else {
                    tracing::warn!(
                        kind = text.kind(),
                        %name,
                        findings = %findings.join("; "),
                        "not listing an item nobody has reviewed whose text looks like tool poisoning; run `airlock tools review`"
                    );
                    Shown::Withheld(findings)
                }
            }
        }
    }

    /// What clients do not see until a person reviews it, because its text
    /// looks like tool poisoning: `kind \`name\``, with the lint's findings.
    pub fn withheld_for_review(&self) -> Vec<(String, Vec<String>)> {
        let tools = self
            .catalog
            .tools
            .iter()
            .filter(|tool| {
                self.catalog.tool(&tool.name).is_some_and(|route| {
                    let source = self.catalog.source_name(route.source);
                    self.reviewed.digest(source, &route.upstream_name).is_none()
                })
            })
            .map(|tool| {
                (
                    format!("tool `{}`", tool.name),
                    self.lint_unreviewed(&tool.name),
                )
            });
        let catalog = &self.catalog;
        let texts = catalog
            .prompts
            .iter()
            .filter_map(|p| Some((p.name.as_str(), catalog.prompt_text(&p.name)?)))
            .chain(
                catalog
                    .resources
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| Some((r.uri.as_str(), catalog.resource_text(i)?))),
            )
            .chain(
                catalog
                    .resource_templates
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| {
                        Some((t.uri_template.as_str(), catalog.template_text(i)?))
                    }),
            )
            .filter_map(|(name, text)| match self.shown_text(name, text) {
                Shown::Withheld(findings) => Some((format!("{} `{name}`", text.kind()), findings)),
                _ => None,
            });
        tools
            .chain(texts)
            .filter(|(_, findings)| !findings.is_empty())
            .collect()
    }

    fn lint_unreviewed(&self, exposed: &str) -> Vec<String> {
        match self.catalog.contract(exposed) {
            Some(c) => crate::review::lint_new(&self.catalog, exposed, &c.definition),
            None => Vec::new(),
        }
    }
}

/// `tool` with `note` appended to its description.
fn with_note(mut tool: rmcp::model::Tool, note: &str) -> rmcp::model::Tool {
    let description = tool.description.take().unwrap_or_default();
    tool.description = Some(if description.is_empty() {
        note.to_string().into()
    } else {
        format!("{description}\n\n{note}").into()
    });
    tool
}

/// What a client is shown of one prompt, resource or template.
enum Shown {
    /// As the source lists it now (never reviewed, and its text passes
    /// the lint).
    Current,
    /// As a person reviewed it (it changed since).
    Reviewed(Value),
    /// Not at all, with why.
    Withheld(Vec<String>),
}

/// `item` as a client may see it. Shown as reviewed, it keeps the name
/// prefix airlock gave the current one.
fn shown<T: serde::Serialize + serde::de::DeserializeOwned + Clone>(
    item: &T,
    text: &Text,
    shown: Shown,
) -> Option<T> {
    match shown {
        Shown::Current => Some(item.clone()),
        Shown::Withheld(_) => None,
        Shown::Reviewed(mut reviewed) => {
            let now = serde_json::to_value(item).ok()?;
            let prefix = now["name"]
                .as_str()?
                .strip_suffix(text.definition["name"].as_str()?)?
                .to_string();
            let name = format!("{prefix}{}", reviewed["name"].as_str()?);
            reviewed["name"] = Value::String(name);
            serde_json::from_value(reviewed).ok()
        }
    }
}
