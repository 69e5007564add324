//! The evaluation order, one function per step.

use airlock_config::{Action, ArgTest, Config, Layer, RuleConfig};
use serde_json::Value;

/// Everything the decision depends on about one tool.
#[derive(Debug, Clone)]
pub struct ToolFacts<'a> {
    pub source: &'a str,
    pub connection: &'a str,
    /// The exposed name, `<source>__<tool>`.
    pub exposed: &'a str,
    /// The user marked the source trusted.
    pub trusted: bool,
    /// The tool's definition as the source sent it.
    pub definition: &'a Value,
    /// The digest of that definition's contract.
    pub digest: &'a str,
    /// The digest a person last approved, if any.
    pub reviewed: Option<&'a str>,
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

struct Compiled {
    rule: RuleConfig,
    source: Option<globset::GlobMatcher>,
    tool: Option<globset::GlobMatcher>,
    conditions: Vec<(String, Test)>,
}

enum Test {
    Glob(globset::GlobMatcher),
    Equals(Value),
    Regex(regex::Regex),
}

/// The rules of every layer, compiled once per configuration.
pub struct Policy {
    rules: Vec<Compiled>,
    /// Rules that failed to compile (impossible after config validation,
    /// but if it happens every call they could apply to is denied).
    broken: Vec<(RuleConfig, String)>,
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
            match compile(rule) {
                Ok(c) => rules.push(c),
                Err(why) => broken.push((rule.clone(), why)),
            }
        }
        Policy { rules, broken }
    }

    /// Decides a call (`args` given) or, for listing, the tool in general
    /// (`args` `None`: rules with argument conditions do not match).
    pub fn decide(&self, facts: &ToolFacts, args: Option<&Value>) -> Decision {
        let mut chain = Vec::new();
        if let Some(d) = self.broken_rule(facts, &mut chain) {
            return d;
        }
        if let Some(d) = self.step_deny(facts, args, &mut chain) {
            return d;
        }
        if let Some(d) = step_contract(facts, &mut chain) {
            return d;
        }
        if let Some(d) = self.step_rules(facts, args, &mut chain) {
            return d;
        }
        step_default(facts, chain)
    }

    /// Whether the tool is hidden from `tools/list`: a deny that applies to
    /// every call of it (no argument conditions).
    pub fn hides(&self, facts: &ToolFacts) -> bool {
        self.rules.iter().any(|c| {
            c.rule.action == Action::Deny
                && c.conditions.is_empty()
                && self.targets(c, facts)
                && pin_applies(&c.rule, facts)
        })
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

    fn targets(&self, c: &Compiled, facts: &ToolFacts) -> bool {
        c.source.as_ref().is_none_or(|g| g.is_match(facts.source))
            && c.tool.as_ref().is_none_or(|g| g.is_match(facts.exposed))
            && c.rule
                .connection
                .as_deref()
                .is_none_or(|conn| conn == facts.connection)
    }

    fn matches(&self, c: &Compiled, facts: &ToolFacts, args: Option<&Value>) -> bool {
        self.targets(c, facts)
            && pin_applies(&c.rule, facts)
            && match args {
                None => c.conditions.is_empty(),
                Some(args) => c
                    .conditions
                    .iter()
                    .all(|(pointer, test)| holds(test, args.pointer(pointer))),
            }
    }

    /// Step 1: any matching deny, from any layer, wins.
    fn step_deny(
        &self,
        facts: &ToolFacts,
        args: Option<&Value>,
        chain: &mut Vec<String>,
    ) -> Option<Decision> {
        let deny = self
            .rules
            .iter()
            .find(|c| c.rule.action == Action::Deny && self.matches(c, facts, args));
        match deny {
            Some(c) => {
                chain.push(format!(
                    "1. deny rule at {} ({} layer) matches",
                    c.rule.origin,
                    c.rule.layer.as_str()
                ));
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
        &self,
        facts: &ToolFacts,
        args: Option<&Value>,
        chain: &mut Vec<String>,
    ) -> Option<Decision> {
        let best = self
            .rules
            .iter()
            .filter(|c| c.rule.action != Action::Deny && self.matches(c, facts, args))
            .max_by_key(|c| {
                (
                    specificity(&c.rule),
                    c.rule.layer,
                    matches!(c.rule.action, Action::Ask),
                )
            });
        for c in self.rules.iter().filter(|c| {
            c.rule.pin.is_some() && self.targets(c, facts) && !pin_applies(&c.rule, facts)
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

fn holds(test: &Test, value: Option<&Value>) -> bool {
    match (test, value) {
        (Test::Equals(want), Some(v)) => want == v,
        // `/scratch/../etc` would match `/scratch/**` by its letters while
        // naming another place: a value with `.` or `..` segments never
        // matches a glob, so such a call falls through to ask.
        (Test::Glob(g), Some(Value::String(s))) => {
            !s.split(['/', '\\']).any(|seg| seg == ".." || seg == ".")
                && !s.contains('\0')
                && g.is_match(s)
        }
        (Test::Regex(re), Some(Value::String(s))) => re.is_match(s),
        // A missing argument, or a non-string for a glob or pattern, does
        // not satisfy the condition.
        _ => false,
    }
}

fn compile(rule: &RuleConfig) -> Result<Compiled, String> {
    let glob = |g: &Option<String>| g.as_deref().map(airlock_config::compile_glob).transpose();
    let conditions = rule
        .when
        .iter()
        .map(|c| {
            let test = match &c.test {
                ArgTest::Glob(g) => Test::Glob(airlock_config::compile_glob(g)?),
                ArgTest::Equals(v) => Test::Equals(v.clone()),
                ArgTest::Regex(r) => Test::Regex(airlock_config::compile_regex(r)?),
            };
            Ok((c.pointer.clone(), test))
        })
        .collect::<Result<_, String>>()?;
    Ok(Compiled {
        rule: rule.clone(),
        source: glob(&rule.source)?,
        tool: glob(&rule.tool)?,
        conditions,
    })
}
