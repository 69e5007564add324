//! The evaluation order, step by step, each test named for its guarantee.

use std::path::Path;

use airlock_config::{Action, Format};
use airlock_policy::{Policy, Step, ToolFacts, contract};
use serde_json::{Value, json};

fn policy(rules: &str) -> Policy {
    let text = format!("[sources.fs]\ncommand = \"x\"\n{rules}");
    let config = airlock_config::parse(Path::new("airlock.toml"), &text, Format::Toml)
        .unwrap_or_else(|e| panic!("{e}"));
    Policy::new(&config)
}

fn policy_with_managed(user: &str, managed: &str) -> Policy {
    let text = format!("[sources.fs]\ncommand = \"x\"\n{user}");
    let mut config = airlock_config::parse(Path::new("airlock.toml"), &text, Format::Toml).unwrap();
    let dir = tempfile_path();
    std::fs::write(&dir, managed).unwrap();
    config.managed_rules = airlock_config::load_managed(&dir).unwrap();
    Policy::new(&config)
}

fn tempfile_path() -> std::path::PathBuf {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("airlock-managed-{n}-{}.toml", std::process::id()))
}

struct Tool {
    def: Value,
    digest: String,
}

fn tool(name: &str, annotations: Value) -> Tool {
    let def = json!({"name": name, "description": "d", "inputSchema": {"type": "object"}, "annotations": annotations});
    let digest = contract::digest(&def);
    Tool { def, digest }
}

fn facts<'a>(t: &'a Tool, exposed: &'a str, trusted: bool, reviewed: bool) -> ToolFacts<'a> {
    ToolFacts {
        source: "fs",
        connection: "fs",
        exposed,
        upstream: exposed.strip_prefix("fs__").unwrap_or(exposed),
        trusted,
        definition: &t.def,
        digest: &t.digest,
        reviewed: reviewed.then_some(t.digest.as_str()),
    }
}

const READ_ONLY: &str = r#"{"readOnlyHint": true, "openWorldHint": false}"#;

fn read_only() -> Value {
    serde_json::from_str(READ_ONLY).unwrap()
}

#[test]
fn narrower_allow_cannot_loosen_deny() {
    let p = policy(
        r#"
[[rules]]
action = "deny"
source = "fs"

[[rules]]
action = "allow"
tool = "fs__read_file"
connection = "fs"
"#,
    );
    let t = tool("read_file", read_only());
    let d = p.decide(&facts(&t, "fs__read_file", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Deny);
    assert_eq!(d.step, Step::Deny);
}

#[test]
fn managed_deny_cannot_be_loosened_by_the_user() {
    let p = policy_with_managed(
        "[[rules]]\naction = \"allow\"\ntool = \"fs__delete\"\n",
        "[[rules]]\naction = \"deny\"\ntool = \"fs__delete\"\n",
    );
    let t = tool("delete", json!({}));
    let d = p.decide(&facts(&t, "fs__delete", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Deny);
    assert!(d.rule.unwrap().0.contains("airlock-managed"));
}

#[test]
fn deny_in_the_user_layer_binds_a_managed_allow_too() {
    let p = policy_with_managed(
        "[[rules]]\naction = \"deny\"\ntool = \"fs__delete\"\n",
        "[[rules]]\naction = \"allow\"\ntool = \"fs__delete\"\n",
    );
    let t = tool("delete", json!({}));
    let d = p.decide(&facts(&t, "fs__delete", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Deny);
}

#[test]
fn new_tool_asks_even_when_a_rule_allows_it() {
    let p = policy("[[rules]]\naction = \"allow\"\nsource = \"fs\"\n");
    let t = tool("read_file", read_only());
    let d = p.decide(&facts(&t, "fs__read_file", true, false), Some(&json!({})));
    assert_eq!((d.action, d.step), (Action::Ask, Step::Contract));
    assert!(d.reason.contains("new"), "{}", d.reason);
}

#[test]
fn changed_contract_asks_again() {
    let p = policy("[[rules]]\naction = \"allow\"\nsource = \"fs\"\n");
    let before = tool("read_file", read_only());
    let after = tool(
        "read_file",
        json!({"readOnlyHint": true, "openWorldHint": true}),
    );
    let mut f = facts(&after, "fs__read_file", true, true);
    f.reviewed = Some(&before.digest);
    let d = p.decide(&f, Some(&json!({})));
    assert_eq!((d.action, d.step), (Action::Ask, Step::Contract));
    assert!(d.reason.contains("changed"), "{}", d.reason);
}

#[test]
fn rule_pinned_to_an_old_contract_stops_applying() {
    let old = tool("write_file", json!({}));
    let new = tool("write_file", json!({"destructiveHint": false}));
    let p = policy(&format!(
        "[[rules]]\naction = \"allow\"\ntool = \"fs__write_file\"\npin = \"{}\"\n",
        old.digest
    ));
    let d = p.decide(
        &facts(&old, "fs__write_file", false, true),
        Some(&json!({})),
    );
    assert_eq!(d.action, Action::Allow);
    let d = p.decide(
        &facts(&new, "fs__write_file", false, true),
        Some(&json!({})),
    );
    assert_eq!((d.action, d.step), (Action::Ask, Step::Default));
    assert!(
        d.chain
            .iter()
            .any(|l| l.contains("pinned to another contract"))
    );
}

#[test]
fn most_specific_rule_decides() {
    let p = policy(
        r#"
[[rules]]
action = "ask"
source = "fs"

[[rules]]
action = "allow"
tool = "fs__read_*"
"#,
    );
    let t = tool("read_file", json!({}));
    let d = p.decide(&facts(&t, "fs__read_file", false, true), Some(&json!({})));
    assert_eq!(d.action, Action::Allow);
    let t = tool("write_file", json!({}));
    let d = p.decide(&facts(&t, "fs__write_file", false, true), Some(&json!({})));
    assert_eq!(d.action, Action::Ask);
}

#[test]
fn on_a_tie_ask_beats_allow() {
    let p = policy(
        r#"
[[rules]]
action = "allow"
tool = "fs__*"

[[rules]]
action = "ask"
tool = "fs__write_*"
"#,
    );
    let t = tool("write_file", json!({}));
    let d = p.decide(&facts(&t, "fs__write_file", true, true), Some(&json!({})));
    assert_eq!((d.action, d.step), (Action::Ask, Step::Rule));
}

#[test]
fn argument_conditions_narrow_an_allow() {
    let p = policy(
        r#"
[[rules]]
action = "allow"
tool = "fs__write_file"
[[rules.when]]
pointer = "/path"
glob = "/home/me/scratch/**"
"#,
    );
    let t = tool("write_file", json!({}));
    let f = facts(&t, "fs__write_file", false, true);
    let inside = p.decide(&f, Some(&json!({"path": "/home/me/scratch/a/b.txt"})));
    assert_eq!(inside.action, Action::Allow);
    for outside in [
        json!({"path": "/home/me/notes.txt"}),
        json!({"path": "/home/me/scratch/../notes.txt"}),
        json!({"path": 7}),
        json!({}),
    ] {
        let d = p.decide(&f, Some(&outside));
        assert_eq!(d.action, Action::Ask, "{outside}");
    }
}

#[test]
fn equals_and_regex_conditions_use_strict_types() {
    let p = policy(
        r#"
[[rules]]
action = "deny"
tool = "fs__*"
[[rules.when]]
pointer = "/force"
equals = true

[[rules]]
action = "deny"
tool = "fs__*"
[[rules.when]]
pointer = "/branch"
regex = "main|master"
"#,
    );
    let t = tool("push", json!({}));
    let f = facts(&t, "fs__push", true, true);
    assert_eq!(
        p.decide(&f, Some(&json!({"force": true}))).action,
        Action::Deny
    );
    assert_ne!(
        p.decide(&f, Some(&json!({"force": "true"}))).action,
        Action::Deny
    );
    assert_eq!(
        p.decide(&f, Some(&json!({"branch": "main"}))).action,
        Action::Deny
    );
    // Anchored: "mainline" is not "main".
    assert_ne!(
        p.decide(&f, Some(&json!({"branch": "mainline"}))).action,
        Action::Deny
    );
}

#[test]
fn annotations_alone_never_auto_run() {
    let p = policy("");
    let t = tool("read_file", read_only());
    let d = p.decide(&facts(&t, "fs__read_file", false, true), Some(&json!({})));
    assert_eq!((d.action, d.step), (Action::Ask, Step::Default));
}

#[test]
fn trust_alone_never_auto_runs() {
    let p = policy("");
    let t = tool("write_file", json!({}));
    let d = p.decide(&facts(&t, "fs__write_file", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Ask);
    let t = tool(
        "delete",
        json!({"readOnlyHint": true, "openWorldHint": false, "destructiveHint": true}),
    );
    let d = p.decide(&facts(&t, "fs__delete", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Ask);
}

#[test]
fn both_signals_auto_run() {
    let p = policy("");
    let t = tool("read_file", read_only());
    let d = p.decide(&facts(&t, "fs__read_file", true, true), Some(&json!({})));
    assert_eq!((d.action, d.step), (Action::Allow, Step::Default));
}

#[test]
fn string_true_is_not_true() {
    let p = policy("");
    let t = tool(
        "read_file",
        json!({"readOnlyHint": "true", "openWorldHint": false}),
    );
    let d = p.decide(&facts(&t, "fs__read_file", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Ask);
    let t = tool(
        "read_file",
        json!({"readOnlyHint": true, "openWorldHint": "false"}),
    );
    let d = p.decide(&facts(&t, "fs__read_file", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Ask);
}

#[test]
fn omitted_open_world_is_open_world() {
    let p = policy("");
    let t = tool("read_file", json!({"readOnlyHint": true}));
    let d = p.decide(&facts(&t, "fs__read_file", true, true), Some(&json!({})));
    assert_eq!(d.action, Action::Ask);
}

#[test]
fn unconditional_deny_hides_the_tool_conditional_does_not() {
    let p = policy(
        r#"
[[rules]]
action = "deny"
tool = "fs__delete"

[[rules]]
action = "deny"
tool = "fs__write_file"
[[rules.when]]
pointer = "/path"
glob = "/etc/**"
"#,
    );
    let del = tool("delete", json!({}));
    let write = tool("write_file", json!({}));
    assert!(p.hides(&facts(&del, "fs__delete", false, true)));
    assert!(!p.hides(&facts(&write, "fs__write_file", false, true)));
}

#[test]
fn connection_narrows_a_rule() {
    let text = r#"
[sources.gh-work]
command = "x"
connection = "work"

[[rules]]
action = "allow"
source = "gh-*"
connection = "work"
"#;
    let config = airlock_config::parse(Path::new("a.toml"), text, Format::Toml).unwrap();
    let p = Policy::new(&config);
    let t = tool("issue", json!({}));
    let mut f = facts(&t, "gh-work__issue", false, true);
    f.source = "gh-work";
    f.connection = "work";
    assert_eq!(p.decide(&f, Some(&json!({}))).action, Action::Allow);
    f.connection = "personal";
    assert_eq!(p.decide(&f, Some(&json!({}))).action, Action::Ask);
}
