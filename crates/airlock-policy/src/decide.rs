//! The evaluation order, one function per step.

use airlock_config::{Action, Config, Layer, RuleConfig};
use serde_json::Value;

use crate::args::Condition;

/// Everything the decision depends on about one tool.
#[derive(Debug, Clone)]
pub struct ToolFacts<'a> {
    pub source: &'a str,
    pub connection: &'a str,
    /// The name clients see: `<source>__<tool>`, or the upstream name
    /// alone for a source with `prefix = false`.
    pub exposed: &'a str,
    /// The tool's own name at its source, as the server lists it.
    pub upstream: &'a str,
    /// The user marked the source trusted.
    pub trusted: bool,
    /// The tool's definition as the source sent it.
    pub definition: &'a Value,
    /// The digest of that definition's contract.
    pub digest: &'a str,
    /// The digest a person last approved, if any.
    pub reviewed: Option<&'a str>,
}

impl ToolFacts<'_> {
    /// What the tool is, whatever it is exposed as: `<source>__<upstream>`.
    pub fn canonical(&self) -> String {
        format!("{}__{}", self.source, self.upstream)
    }
}

/// Which step of the evaluation decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Deny,
    Contract,
    Rule,
    Default,
    /// The evaluator could not run; fails closed.
    Error,
}

/// One decision and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub action: Action,
    pub step: Step,
    /// The rule that decided (`file:line`) and its layer, if a rule did.
    pub rule: Option<(String, Layer)>,
    /// One sentence for the model and the audit.
    pub reason: String,
    /// Every consideration, in order, for `airlock policy explain`.
    pub chain: Vec<String>,
}

/// One rule, compiled: which tools it targets and what it asks of their
/// arguments.
///
/// A `tool` glob targets a tool when it matches the exposed name **or** the
/// canonical name `<source>__<upstream>`, so a rule follows the tool
/// whatever prefix it is exposed under. A deny's globs and connection also
/// ignore case: no renaming, prefix setting or case escapes a deny.
pub struct RuleMatcher {
    rule: RuleConfig,
    source: Option<NameTest>,
    tool: Option<NameTest>,
    conditions: Vec<Condition>,
}

/// A glob over names. The common shapes — a plain name, `prefix*`,
/// `*suffix` — are compared as strings (names are ASCII: the hub exposes
/// no other), anything else by the compiled glob.
enum NameTest {
    Plain { name: String, any_case: bool },
    Prefix { lit: String, any_case: bool },
    Suffix { lit: String, any_case: bool },
    Glob(globset::GlobMatcher),
}

fn same(a: &[u8], b: &[u8], any_case: bool) -> bool {
    if any_case {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// The characters that make a pattern more than a plain name.
const GLOB_SYNTAX: [char; 7] = ['*', '?', '[', ']', '{', '}', '\\'];

impl NameTest {
    fn new(pattern: &str, any_case: bool) -> Result<NameTest, String> {
        let plain = |p: &str| p.is_ascii() && !p.contains(GLOB_SYNTAX);
        if plain(pattern) {
            return Ok(NameTest::Plain {
                name: pattern.to_string(),
                any_case,
            });
        }
        if let Some(lit) = pattern.strip_suffix('*').filter(|l| plain(l)) {
            return Ok(NameTest::Prefix {
                lit: lit.to_string(),
                any_case,
            });
        }
        if let Some(lit) = pattern.strip_prefix('*').filter(|l| plain(l)) {
            return Ok(NameTest::Suffix {
                lit: lit.to_string(),
                any_case,
            });
        }
        name_glob(pattern, any_case).map(NameTest::Glob)
    }

    fn is_match(&self, s: &str) -> bool {
        let b = s.as_bytes();
        match self {
            NameTest::Plain { name, any_case } => same(b, name.as_bytes(), *any_case),
            // `*` stays within a path segment, as in every rule glob.
            NameTest::Prefix { lit, any_case } => {
                b.len() >= lit.len()
                    && same(&b[..lit.len()], lit.as_bytes(), *any_case)
                    && !b[lit.len()..].contains(&b'/')
            }
            NameTest::Suffix { lit, any_case } => {
                b.len() >= lit.len()
                    && same(&b[b.len() - lit.len()..], lit.as_bytes(), *any_case)
                    && !b[..b.len() - lit.len()].contains(&b'/')
            }
            NameTest::Glob(g) => g.is_match(s),
        }
    }
}

impl RuleMatcher {
    pub fn new(rule: &RuleConfig) -> Result<RuleMatcher, String> {
        let deny = rule.action == Action::Deny;
        let glob = |g: &Option<String>| g.as_deref().map(|g| NameTest::new(g, deny)).transpose();
        let conditions = rule
            .when
            .iter()
            .map(|c| Condition::compile(&c.pointer, &c.test))
            .collect::<Result<_, String>>()?;
        Ok(RuleMatcher {
            rule: rule.clone(),
            source: glob(&rule.source)?,
            tool: glob(&rule.tool)?,
            conditions,
        })
    }

    pub fn rule(&self) -> &RuleConfig {
        &self.rule
    }

    fn deny(&self) -> bool {
        self.rule.action == Action::Deny
    }

    /// The rule's `source` glob (if any) matches this source name.
    pub fn matches_source(&self, source: &str) -> bool {
        self.source.as_ref().is_none_or(|g| g.is_match(source))
    }

    /// The rule's `tool` glob (if any) matches either name of a tool.
    pub fn matches_tool(&self, exposed: &str, canonical: &str) -> bool {
        self.tool
            .as_ref()
            .is_none_or(|g| g.is_match(exposed) || g.is_match(canonical))
    }

    /// The rule's `connection` (if any) is this one.
    pub fn matches_connection(&self, connection: &str) -> bool {
        self.rule.connection.as_deref().is_none_or(|c| {
            if self.deny() {
                c.eq_ignore_ascii_case(connection)
            } else {
                c == connection
            }
        })
    }

    fn targets_named(&self, facts: &ToolFacts, canonical: &str) -> bool {
        self.matches_source(facts.source)
            && self.matches_tool(facts.exposed, canonical)
            && self.matches_connection(facts.connection)
    }

    fn matches(&self, facts: &ToolFacts, canonical: &str, args: Option<&Value>) -> bool {
        self.targets_named(facts, canonical)
            && pin_applies(&self.rule, facts)
            && match args {
                None => self.conditions.is_empty(),
                Some(args) => self.conditions.iter().all(|c| c.holds(args, self.deny())),
            }
    }

    /// How close the rule came to matching (1.0: only an argument
    /// condition failed) and the first thing that did not match; `None` if
    /// it matches.
    fn miss(&self, facts: &ToolFacts, canonical: &str, args: &Value) -> Option<(f64, String)> {
        let mut score = 1.0;
        let mut why: Option<String> = None;
        let mut note = |s: f64, w: String| {
            score *= s;
            why.get_or_insert(w);
        };
        if !self.matches_source(facts.source) {
            let g = self.rule.source.as_deref().unwrap_or_default();
            note(
                strsim::jaro_winkler(g, facts.source),
                format!("source glob `{g}` vs `{}`", facts.source),
            );
        }
        if !self.matches_tool(facts.exposed, canonical) {
            let g = self.rule.tool.as_deref().unwrap_or_default();
            let names = if canonical == facts.exposed {
                format!("`{canonical}`")
            } else {
                format!("`{}` (or `{canonical}`)", facts.exposed)
            };
            note(
                strsim::jaro_winkler(g, facts.exposed).max(strsim::jaro_winkler(g, canonical)),
                format!("tool glob `{g}` vs {names}"),
            );
        }
        if !self.matches_connection(facts.connection) {
            let c = self.rule.connection.as_deref().unwrap_or_default();
            note(0.9, format!("connection `{c}` vs `{}`", facts.connection));
        }
        if !pin_applies(&self.rule, facts) {
            note(0.95, "it is pinned to another contract".into());
        }
        if let Some(c) = self.conditions.iter().find(|c| !c.holds(args, self.deny())) {
            note(1.0, c.describe(args, self.deny()));
        }
        why.map(|w| (score, w))
    }
}

/// A glob over names: a deny's ignores case.
fn name_glob(pattern: &str, case_insensitive: bool) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .case_insensitive(case_insensitive)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}

type Compiled = RuleMatcher;

/// The rules of every layer, compiled once per configuration.
pub struct Policy {
    rules: Vec<Compiled>,
    /// Which rules can possibly target a tool, found without scanning them
    /// all.
    index: Index,
    /// Rules that failed to compile (impossible after config validation,
    /// but if it happens every call they could apply to is denied).
    broken: Vec<(RuleConfig, String)>,
}

/// Finds the rules that may target a tool: every rule is filed under its
/// `tool` glob (or, without one, its `source` glob) in lower case, a plain
/// name in a map, a pattern in a glob set, and looked up with the tool's
/// names in lower case. What it finds is a superset (case and `/` aside);
/// each candidate is still matched in full, in rule order, so decisions
/// are those of a scan over every rule.
#[derive(Default)]
struct Index {
    /// `t:<tool>` and `s:<source>`, lower case.
    names: std::collections::HashMap<String, Vec<u32>>,
    /// Tool patterns.
    tools: GlobIndex,
    /// Source patterns of rules without a `tool`.
    sources: GlobIndex,
}

struct GlobIndex {
    set: globset::GlobSet,
    rules: Vec<u32>,
}

impl Default for GlobIndex {
    fn default() -> Self {
        GlobIndex {
            set: globset::GlobSet::empty(),
            rules: Vec::new(),
        }
    }
}

impl Index {
    fn new(rules: &[Compiled]) -> Index {
        let mut index = Index::default();
        let mut builders: [(globset::GlobSetBuilder, Vec<u32>); 2] =
            std::array::from_fn(|_| (globset::GlobSetBuilder::new(), Vec::new()));
        for (i, c) in rules.iter().enumerate() {
            let i = i as u32;
            let (kind, pattern) = match (&c.rule.tool, &c.rule.source) {
                (Some(t), _) => ('t', t.to_ascii_lowercase()),
                (None, Some(s)) => ('s', s.to_ascii_lowercase()),
                // Validation refuses a rule with neither; file it as `*`.
                (None, None) => ('s', "*".to_string()),
            };
            let literal =
                pattern.is_ascii() && !pattern.contains(['*', '?', '[', ']', '{', '}', '\\']);
            if literal {
                index
                    .names
                    .entry(format!("{kind}:{pattern}"))
                    .or_default()
                    .push(i);
                continue;
            }
            // Names hold no `/`, so `*` may cross it here: the set is
            // simpler, and matches the same names.
            let glob = globset::GlobBuilder::new(&pattern)
                .literal_separator(false)
                .case_insensitive(!pattern.is_ascii())
                .build();
            let Ok(glob) = glob else {
                // Cannot happen (the rule compiled); a pattern that will
                // not index is filed where every tool finds it.
                index.names.entry("*".into()).or_default().push(i);
                continue;
            };
            let slot = usize::from(kind == 's');
            builders[slot].0.add(glob);
            builders[slot].1.push(i);
        }
        let [tools, sources] = builders.map(|(builder, rules)| GlobIndex {
            set: builder
                .build()
                .unwrap_or_else(|_| globset::GlobSet::empty()),
            rules,
        });
        index.tools = tools;
        index.sources = sources;
        index
    }

    /// The rules that may target this tool, in rule order.
    fn candidates(&self, facts: &ToolFacts, canonical: &str) -> Vec<u32> {
        let mut ids: Vec<u32> = Vec::new();
        let exposed = format!("t:{}", facts.exposed.to_ascii_lowercase());
        let canonical = format!("t:{}", canonical.to_ascii_lowercase());
        let source = format!("s:{}", facts.source.to_ascii_lowercase());
        for key in [&exposed, &canonical, &source] {
            if let Some(found) = self.names.get(key.as_str()) {
                ids.extend_from_slice(found);
            }
        }
        if let Some(found) = self.names.get("*") {
            ids.extend_from_slice(found);
        }
        let mut hits = Vec::new();
        if !self.tools.rules.is_empty() {
            self.tools.set.matches_into(&exposed[2..], &mut hits);
            ids.extend(hits.iter().map(|&h| self.tools.rules[h]));
            if canonical != exposed {
                self.tools.set.matches_into(&canonical[2..], &mut hits);
                ids.extend(hits.iter().map(|&h| self.tools.rules[h]));
            }
        }
        if !self.sources.rules.is_empty() {
            self.sources.set.matches_into(&source[2..], &mut hits);
            ids.extend(hits.iter().map(|&h| self.sources.rules[h]));
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

impl Policy {
    pub fn new(config: &Config) -> Policy {
        Policy::from_rules(config.all_rules())
    }

    /// A policy of these rules (the config's, plus any a person created).
    pub fn from_rules<'a>(all: impl Iterator<Item = &'a RuleConfig>) -> Policy {
        let mut rules = Vec::new();
        let mut broken = Vec::new();
        for rule in all {
            match RuleMatcher::new(rule) {
                Ok(c) => rules.push(c),
                Err(why) => broken.push((rule.clone(), why)),
            }
        }
        let index = Index::new(&rules);
        Policy {
            rules,
            index,
            broken,
        }
    }

    /// Decides a call (`args` given) or, for listing, the tool in general
    /// (`args` `None`: rules with argument conditions do not match).
    pub fn decide(&self, facts: &ToolFacts, args: Option<&Value>) -> Decision {
        let canonical = facts.canonical();
        let candidates: Vec<&Compiled> = self
            .index
            .candidates(facts, &canonical)
            .into_iter()
            .map(|i| &self.rules[i as usize])
            .collect();
        self.decide_among(&candidates, facts, &canonical, args)
    }

    /// [`Policy::decide`] by scanning every rule, without the index: the
    /// reference the index is tested and measured against.
    #[doc(hidden)]
    pub fn decide_scanning_every_rule(&self, facts: &ToolFacts, args: Option<&Value>) -> Decision {
        let canonical = facts.canonical();
        let all: Vec<&Compiled> = self.rules.iter().collect();
        self.decide_among(&all, facts, &canonical, args)
    }

    fn decide_among(
        &self,
        rules: &[&Compiled],
        facts: &ToolFacts,
        canonical: &str,
        args: Option<&Value>,
    ) -> Decision {
        let mut chain = Vec::new();
        if let Some(d) = self.broken_rule(facts, &mut chain) {
            return d;
        }
        if let Some(d) = step_deny(rules, facts, canonical, args, &mut chain) {
            return d;
        }
        if let Some(d) = step_contract(facts, &mut chain) {
            return d;
        }
        if let Some(d) = step_rules(rules, facts, canonical, args, &mut chain) {
            return d;
        }
        step_default(facts, chain)
    }

    /// Whether the tool is hidden from `tools/list`: a deny that applies to
    /// every call of it (no argument conditions).
    pub fn hides(&self, facts: &ToolFacts) -> bool {
        let canonical = facts.canonical();
        let candidates = self.index.candidates(facts, &canonical);
        candidates
            .into_iter()
            .map(|i| &self.rules[i as usize])
            .any(|c| {
                c.rule.action == Action::Deny
                    && c.conditions.is_empty()
                    && c.targets_named(facts, &canonical)
                    && pin_applies(&c.rule, facts)
            })
    }

    /// For `airlock policy explain`: the nearest deny, and the nearest
    /// other rule, that did not match this call, each with the first thing
    /// that kept it from matching.
    pub fn near_misses(&self, facts: &ToolFacts, args: &Value) -> Vec<String> {
        let canonical = facts.canonical();
        let mut best: [Option<(f64, &Compiled, String)>; 2] = [None, None];
        for c in &self.rules {
            let Some((score, why)) = c.miss(facts, &canonical, args) else {
                continue;
            };
            let slot = &mut best[usize::from(!c.deny())];
            if score >= 0.7 && slot.as_ref().is_none_or(|(s, _, _)| score > *s) {
                *slot = Some((score, c, why));
            }
        }
        best.into_iter()
            .flatten()
            .map(|(_, c, why)| {
                format!(
                    "{} at {} ({} layer) did not match: {why}",
                    c.rule.action.as_str(),
                    c.rule.origin,
                    c.rule.layer.as_str()
                )
            })
            .collect()
    }

    fn broken_rule(&self, facts: &ToolFacts, chain: &mut Vec<String>) -> Option<Decision> {
        let (rule, why) = self.broken.first()?;
        let _ = facts;
        chain.push(format!(
            "rule at {} cannot be evaluated: {why}",
            rule.origin
        ));
        Some(Decision {
            action: Action::Deny,
            step: Step::Error,
            rule: Some((rule.origin.clone(), rule.layer)),
            reason: format!(
                "the policy could not be evaluated (rule at {}: {why}), so the call is denied",
                rule.origin
            ),
            chain: chain.clone(),
        })
    }
}

/// Step 1: any matching deny, from any layer, wins.
fn step_deny(
    rules: &[&Compiled],
    facts: &ToolFacts,
    canonical: &str,
    args: Option<&Value>,
    chain: &mut Vec<String>,
) -> Option<Decision> {
    let deny = rules
        .iter()
        .find(|c| c.rule.action == Action::Deny && c.matches(facts, canonical, args));
    match deny {
        Some(c) => {
            chain.push(format!(
                "1. deny rule at {} ({} layer) matches",
                c.rule.origin,
                c.rule.layer.as_str()
            ));
            if let Some(args) = args {
                for cond in &c.conditions {
                    chain.push(format!("   {}", cond.describe(args, true)));
                }
            }
            Some(Decision {
                action: Action::Deny,
                step: Step::Deny,
                rule: Some((c.rule.origin.clone(), c.rule.layer)),
                reason: format!("denied by the {} policy", c.rule.layer.as_str()),
                chain: chain.clone(),
            })
        }
        None => {
            chain.push("1. no deny rule matches".into());
            None
        }
    }
}

/// Step 3: the most specific matching rule; a later layer wins a tie,
/// then ask beats allow.
fn step_rules(
    rules: &[&Compiled],
    facts: &ToolFacts,
    canonical: &str,
    args: Option<&Value>,
    chain: &mut Vec<String>,
) -> Option<Decision> {
    let best = rules
        .iter()
        .filter(|c| c.rule.action != Action::Deny && c.matches(facts, canonical, args))
        .max_by_key(|c| {
            (
                specificity(&c.rule),
                c.rule.layer,
                matches!(c.rule.action, Action::Ask),
            )
        });
    for c in rules.iter().filter(|c| {
        c.rule.pin.is_some() && c.targets_named(facts, canonical) && !pin_applies(&c.rule, facts)
    }) {
        chain.push(format!(
            "   rule at {} is pinned to another contract and no longer applies",
            c.rule.origin
        ));
    }
    let c = match best {
        Some(c) => c,
        None => {
            chain.push("3. no allow or ask rule matches".into());
            return None;
        }
    };
    chain.push(format!(
        "3. most specific rule: {} at {} ({} layer, matches by {})",
        c.rule.action.as_str(),
        c.rule.origin,
        c.rule.layer.as_str(),
        specificity_name(&c.rule)
    ));
    let reason = match c.rule.action {
        Action::Allow => format!("allowed by the {} policy", c.rule.layer.as_str()),
        _ => format!("the {} policy asks for approval", c.rule.layer.as_str()),
    };
    Some(Decision {
        action: c.rule.action,
        step: Step::Rule,
        rule: Some((c.rule.origin.clone(), c.rule.layer)),
        reason,
        chain: chain.clone(),
    })
}

/// Step 2: new or changed contracts ask.
fn step_contract(facts: &ToolFacts, chain: &mut Vec<String>) -> Option<Decision> {
    let reason = match facts.reviewed {
        Some(r) if r == facts.digest => {
            chain.push(format!("2. contract {} was reviewed", short(facts.digest)));
            return None;
        }
        Some(r) => format!(
            "the tool changed since it was reviewed (contract {} → {}); run `airlock tools review`",
            short(r),
            short(facts.digest)
        ),
        None => format!(
            "the tool is new and has not been reviewed (contract {}); run `airlock tools review`",
            short(facts.digest)
        ),
    };
    chain.push(format!("2. {reason}"));
    Some(Decision {
        action: Action::Ask,
        step: Step::Contract,
        rule: None,
        reason,
        chain: chain.clone(),
    })
}

/// Step 4: two signals, both required: the user's trust in the source, and
/// the tool's own annotations, read with strict JSON types.
fn step_default(facts: &ToolFacts, mut chain: Vec<String>) -> Decision {
    let ann = facts.definition.get("annotations");
    let flag = |k: &str| ann.and_then(|a| a.get(k));
    let read_only = flag("readOnlyHint") == Some(&Value::Bool(true));
    // An omitted openWorldHint means open world, as the specification says.
    let closed_world = flag("openWorldHint") == Some(&Value::Bool(false));
    let not_destructive = flag("destructiveHint") != Some(&Value::Bool(true));
    chain.push(format!(
        "4. no rule: source trusted by the user = {}; annotations readOnlyHint === true: {read_only}, openWorldHint === false: {closed_world}, destructiveHint !== true: {not_destructive}",
        facts.trusted
    ));
    if facts.trusted && read_only && closed_world && not_destructive {
        Decision {
            action: Action::Allow,
            step: Step::Default,
            rule: None,
            reason: "a read-only tool of a source you trust".into(),
            chain,
        }
    } else {
        let why = if !facts.trusted {
            "its source is not marked trusted"
        } else {
            "its annotations do not declare it read-only and closed-world"
        };
        Decision {
            action: Action::Ask,
            step: Step::Default,
            rule: None,
            reason: format!("no rule allows this tool and {why}, so it asks"),
            chain,
        }
    }
}

fn pin_applies(rule: &RuleConfig, facts: &ToolFacts) -> bool {
    rule.pin.as_deref().is_none_or(|p| p == facts.digest)
}

fn specificity(rule: &RuleConfig) -> u8 {
    match (rule.tool.is_some(), rule.connection.is_some()) {
        (true, true) => 4,
        (true, false) => 3,
        (false, true) => 2,
        (false, false) => 1,
    }
}

fn specificity_name(rule: &RuleConfig) -> &'static str {
    match specificity(rule) {
        4 => "tool and connection",
        3 => "tool",
        2 => "source and connection",
        _ => "source",
    }
}

fn short(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("sha256:{}", &hex[..hex.len().min(12)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The string shortcuts decide exactly as the glob would.
    #[test]
    fn name_shortcuts_agree_with_the_glob() {
        let patterns = [
            "fs__read", "FS__Read", "fs__*", "*__read", "*", "*__", "fs*", "*s", "", "a/b", "a/*",
            "*/b", "fs__r?ad", "**", "*read*",
        ];
        let names = [
            "fs__read",
            "FS__READ",
            "fs__",
            "gh__read",
            "read",
            "",
            "a/b",
            "a/x/b",
            "x/b",
            // A `/` well before the literal a suffix ends with.
            "aaaaaaaa/x__read",
            "fs",
            "fs__read/x",
        ];
        for p in patterns {
            for any_case in [false, true] {
                let fast = NameTest::new(p, any_case).unwrap();
                let glob = name_glob(p, any_case).unwrap();
                for n in names {
                    assert_eq!(
                        fast.is_match(n),
                        glob.is_match(n),
                        "{p:?} vs {n:?} (any case: {any_case})"
                    );
                }
            }
        }
    }
}
