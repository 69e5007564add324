//! The rule index finds every rule a scan over all rules would: the same
//! decision, whatever the rules and the tool.

use airlock_config::{Action, ArgCondition, ArgTest, Layer, RuleConfig};
use airlock_policy::{Policy, ToolFacts};
use proptest::prelude::*;
use serde_json::json;

fn pattern() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "fs__read",
        "FS__Read",
        "read",
        "Read",
        "gh__read",
        "fs__write",
        "*__read",
        "*__READ",
        "fs__*",
        "*",
        "?s__read",
        "[fg]s__read",
        "*read*",
        "f*",
        "fs",
        "FS",
        "gh",
        "g?",
    ])
    .prop_map(String::from)
}

fn rule() -> impl Strategy<Value = RuleConfig> {
    (
        prop::sample::select(vec![Action::Allow, Action::Ask, Action::Deny]),
        prop::sample::select(vec![Layer::Builtin, Layer::User, Layer::Managed]),
        prop::option::of(pattern()),
        prop::option::of(pattern()),
        prop::option::of(prop::sample::select(vec!["fs", "FS", "work"])),
        any::<bool>(),
    )
        .prop_map(|(action, layer, tool, source, connection, condition)| {
            let source = if tool.is_none() && source.is_none() {
                Some("*".to_string())
            } else {
                source
            };
            RuleConfig {
                layer,
                origin: "rules.toml:1".into(),
                action,
                source,
                tool,
                connection: connection.map(String::from),
                pin: None,
                when: if condition {
                    vec![ArgCondition {
                        pointer: "/path".into(),
                        test: ArgTest::Glob("/tmp/**".into()),
                    }]
                } else {
                    Vec::new()
                },
                for_future: false,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn the_index_decides_as_a_scan_of_every_rule(
        rules in prop::collection::vec(rule(), 0..12),
        source in prop::sample::select(vec!["fs", "gh"]),
        upstream in prop::sample::select(vec!["read", "Read", "write"]),
        prefix in any::<bool>(),
        connection in prop::sample::select(vec!["fs", "work"]),
        path in prop::sample::select(vec![None, Some("/tmp/x"), Some("/etc/x")]),
    ) {
        for r in &rules {
            for g in [&r.tool, &r.source].into_iter().flatten() {
                prop_assume!(airlock_config::compile_glob(g).is_ok());
            }
        }
        let policy = Policy::from_rules(rules.iter());
        let exposed = if prefix { format!("{source}__{upstream}") } else { upstream.to_string() };
        let definition = json!({"name": upstream});
        let facts = ToolFacts {
            source,
            connection,
            exposed: &exposed,
            upstream,
            trusted: true,
            definition: &definition,
            digest: "sha256:0",
            reviewed: Some("sha256:0"),
        };
        let args = path.map(|p| json!({"path": p}));
        prop_assert_eq!(
            policy.decide(&facts, args.as_ref()),
            policy.decide_scanning_every_rule(&facts, args.as_ref())
        );
        let scan_hides = policy.decide_scanning_every_rule(&facts, None).action == Action::Deny;
        prop_assert_eq!(policy.hides(&facts), scan_hides);
    }
}
