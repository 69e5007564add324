//! One policy decision among 10,000 rules: the indexed evaluator against a
//! scan of every rule, the same rules and the same calls in one run.

use std::time::Instant;

use airlock_config::{Action, ArgCondition, ArgTest, Layer, RuleConfig};
use airlock_policy::{Policy, ToolFacts};
use serde_json::json;

pub struct PolicyReport {
    pub rules: usize,
    pub indexed_p50_us: f64,
    pub indexed_p99_us: f64,
    pub scan_p50_us: f64,
    pub scan_p99_us: f64,
}

const SOURCES: usize = 100;
const TOOLS: usize = 80;

/// 10,000 rules as a large organisation might write them: mostly one tool
/// each, some patterns over a source's tools or a tool in every source,
/// some with argument conditions, some over whole sources.
fn rules() -> Vec<RuleConfig> {
    let rule = |i: usize, action, tool: Option<String>, source: Option<String>| RuleConfig {
        layer: if i.is_multiple_of(3) {
            Layer::Managed
        } else {
            Layer::User
        },
        origin: format!("rules.toml:{i}"),
        action,
        source,
        tool,
        connection: None,
        pin: None,
        when: Vec::new(),
        for_future: false,
    };
    let action = |i: usize| match i % 7 {
        0 => Action::Deny,
        1 | 2 => Action::Ask,
        _ => Action::Allow,
    };
    let mut out = Vec::new();
    // 7,500 single tools.
    for i in 0..7500 {
        let (s, t) = (i % SOURCES, (i / SOURCES) % TOOLS);
        out.push(rule(i, action(i), Some(format!("src{s}__tool{t}")), None));
    }
    // 1,000 patterns: a prefix within a source, a tool in every source.
    for i in 0..1000 {
        let tool = if i % 2 == 0 {
            format!("src{}__write{}_*", i % SOURCES, i)
        } else {
            format!("*__exec{i}")
        };
        out.push(rule(7500 + i, action(i), Some(tool), None));
    }
    // 1,000 with a path condition.
    for i in 0..1000 {
        let mut r = rule(
            8500 + i,
            action(i),
            Some(format!("src{}__tool{}", i % SOURCES, i % TOOLS)),
            None,
        );
        r.when = vec![ArgCondition {
            pointer: "/path".into(),
            test: ArgTest::Glob(format!("/home/me/area{i}/**")),
        }];
        out.push(r);
    }
    // 500 whole sources, by name and by pattern.
    for i in 0..500 {
        let source = if i % 2 == 0 {
            format!("src{}", i % SOURCES)
        } else {
            format!("src{}*", i % SOURCES)
        };
        out.push(rule(9500 + i, Action::Ask, None, Some(source)));
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

pub fn run() -> PolicyReport {
    let rules = rules();
    let policy = Policy::from_rules(rules.iter());
    let definition = json!({"name": "tool", "inputSchema": {"type": "object"}});
    let args = json!({"path": "/home/me/area7/notes.txt"});
    let names: Vec<(String, String, String)> = (0..64)
        .map(|k| {
            let (s, t) = ((k * 37) % SOURCES, (k * 11) % TOOLS);
            (
                format!("src{s}"),
                format!("tool{t}"),
                format!("src{s}__tool{t}"),
            )
        })
        .collect();
    let measure = |scan: bool, rounds: usize| -> Vec<f64> {
        let mut times = Vec::with_capacity(rounds);
        let mut sink = 0usize;
        for i in 0..rounds {
            let (source, upstream, exposed) = &names[i % names.len()];
            let facts = ToolFacts {
                source,
                connection: source,
                exposed,
                upstream,
                trusted: false,
                definition: &definition,
                digest: "sha256:0",
                reviewed: Some("sha256:0"),
            };
            let t = Instant::now();
            let d = if scan {
                policy.decide_scanning_every_rule(&facts, Some(&args))
            } else {
                policy.decide(&facts, Some(&args))
            };
            times.push(t.elapsed().as_secs_f64() * 1e6);
            sink += d.chain.len();
        }
        std::hint::black_box(sink);
        times.sort_by(f64::total_cmp);
        times
    };
    // Both evaluators decide alike; the bench would be meaningless if not.
    for (source, upstream, exposed) in &names {
        let facts = ToolFacts {
            source,
            connection: source,
            exposed,
            upstream,
            trusted: false,
            definition: &definition,
            digest: "sha256:0",
            reviewed: Some("sha256:0"),
        };
        assert_eq!(
            policy.decide(&facts, Some(&args)),
            policy.decide_scanning_every_rule(&facts, Some(&args))
        );
    }
    measure(false, 2000);
    let indexed = measure(false, 50_000);
    let scan = measure(true, 500);
    PolicyReport {
        rules: rules.len(),
        indexed_p50_us: percentile(&indexed, 0.5),
        indexed_p99_us: percentile(&indexed, 0.99),
        scan_p50_us: percentile(&scan, 0.5),
        scan_p99_us: percentile(&scan, 0.99),
    }
}
