//! Policy fails closed: a deny holds for every spelling of what it names,
//! an allow never stretches past it, and neither the exposed name nor case
//! lets a tool slip out from under a deny.

use std::path::Path;

use airlock_config::{Action, ArgCondition, ArgTest, Format, Layer, RuleConfig};
use airlock_policy::{Policy, Step, ToolFacts, contract};
use proptest::prelude::*;
use serde_json::{Value, json};

fn policy(rules: &str) -> Policy {
    let text = format!("[sources.fs]\ncommand = \"x\"\n{rules}");
    let config = airlock_config::parse(Path::new("airlock.toml"), &text, Format::Toml)
        .unwrap_or_else(|e| panic!("{e}"));
    Policy::new(&config)
}

struct Tool {
    def: Value,
    digest: String,
}

fn tool(name: &str) -> Tool {
    let def = json!({"name": name, "description": "d", "inputSchema": {"type": "object"}});
    let digest = contract::digest(&def);
    Tool { def, digest }
}

/// A reviewed tool of source `fs`, exposed under its prefix.
fn fs_facts<'a>(t: &'a Tool, upstream: &'a str, exposed: &'a str) -> ToolFacts<'a> {
    ToolFacts {
        source: "fs",
        connection: "fs",
        exposed,
        upstream,
        trusted: false,
        definition: &t.def,
        digest: &t.digest,
        reviewed: Some(&t.digest),
    }
}

/// A deny on `~/.ssh` beside an allow of every other write.
const SSH_DENY: &str = r#"
[[rules]]
action = "allow"
tool = "fs__write_file"

[[rules]]
action = "deny"
tool = "fs__write_file"
[[rules.when]]
pointer = "/path"
glob = "/home/me/.ssh/**"
"#;

/// Writes are allowed under scratch only.
const SCRATCH_ALLOW: &str = r#"
[[rules]]
action = "allow"
tool = "fs__write_file"
[[rules.when]]
pointer = "/path"
glob = "/home/me/scratch/**"
"#;

fn decide_path(p: &Policy, path: Value) -> airlock_policy::Decision {
    let t = tool("write_file");
    p.decide(
        &fs_facts(&t, "write_file", "fs__write_file"),
        Some(&json!({ "path": path })),
    )
}

/// One way to write the `/` between two segments that names the same place.
fn separator() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_string()),
        Just("//".to_string()),
        Just("/./".to_string()),
        Just("/.//".to_string()),
        "[a-z]{1,6}".prop_map(|d| format!("/{d}/../")),
        "[a-z]{1,6}".prop_map(|d| format!("/./{d}//../")),
    ]
}

/// A spelling of `/<segments…>`: each `/` replaced by one of its
/// equivalents, and maybe a trailing `/` or `/.`.
fn spelling(segments: Vec<String>) -> impl Strategy<Value = String> {
    let n = segments.len();
    (
        proptest::collection::vec(separator(), n),
        prop_oneof![Just(""), Just("/"), Just("/."), Just("//")],
    )
        .prop_map(move |(seps, tail)| {
            let mut s = String::new();
            for (sep, seg) in seps.iter().zip(&segments) {
                s.push_str(sep);
                s.push_str(seg);
            }
            s.push_str(tail);
            s
        })
}

fn name() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_.-]{0,8}".prop_filter("not . or ..", |s| s != "." && s != "..")
}

/// Segments of a path under `/home/me/.ssh` (the directory itself included).
fn under_ssh() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(name(), 0..4).prop_map(|tail| {
        let mut v: Vec<String> = ["home", "me", ".ssh"].map(String::from).to_vec();
        v.extend(tail);
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_spelling_of_a_denied_path_is_denied(
        path in under_ssh().prop_flat_map(spelling)
    ) {
        let d = decide_path(&policy(SSH_DENY), json!(path));
        prop_assert_eq!((d.action, d.step), (Action::Deny, Step::Deny), "{}", path);
    }

    /// The other side: spellings of a path outside `.ssh` are read as that
    /// path, so the deny does not swallow everything.
    #[test]
    fn spellings_of_a_path_outside_are_not_denied(
        path in proptest::collection::vec(name(), 1..4)
            .prop_map(|tail| {
                let mut v: Vec<String> = ["home", "me", "notes"].map(String::from).to_vec();
                v.extend(tail);
                v
            })
            .prop_flat_map(spelling)
    ) {
        let d = decide_path(&policy(SSH_DENY), json!(path));
        prop_assert_eq!(d.action, Action::Allow, "{}", path);
    }

    /// Any `..` in a path keeps an allow from holding, wherever it leads:
    /// behind a symbolic link `..` can go anywhere.
    #[test]
    fn allow_conditions_never_allow_a_dotdot_escape(
        before in proptest::collection::vec(prop_oneof![name(), Just(".".to_string()), Just("".to_string())], 0..3),
        after in proptest::collection::vec(prop_oneof![name(), Just("..".to_string()), Just(".".to_string())], 0..4),
    ) {
        let mut segments = vec!["home", "me", "scratch"];
        segments.extend(before.iter().map(String::as_str));
        segments.push("..");
        segments.extend(after.iter().map(String::as_str));
        let path = format!("/{}", segments.join("/"));
        let d = decide_path(&policy(SCRATCH_ALLOW), json!(path));
        prop_assert_ne!(d.action, Action::Allow, "{}", path);
    }
}

#[test]
fn the_named_spellings_of_a_denied_path_are_denied() {
    let p = policy(SSH_DENY);
    for path in [
        "/home/me/.ssh/id_rsa",
        "/home/me/./.ssh/id_rsa",
        "/home/me/x/../.ssh/id_rsa",
        "//home/me/.ssh/id_rsa",
        "/home/me/.ssh/",
        "/home/me/.ssh",
        "/home/me/.ssh/./x/../y",
        "/home//me/.ssh//id_rsa/",
    ] {
        let d = decide_path(&p, json!(path));
        assert_eq!((d.action, d.step), (Action::Deny, Step::Deny), "{path}");
    }
    // Paths are case-sensitive on Linux: another directory, not denied.
    assert_eq!(
        decide_path(&p, json!("/HOME/me/.ssh/id_rsa")).action,
        Action::Allow
    );
}

#[test]
fn a_value_a_deny_cannot_read_makes_the_deny_hold() {
    let p = policy(SSH_DENY);
    for value in [
        json!("/home/me/%2essh/id_rsa"),
        json!("/home/me/.ssh%2fid_rsa"),
        json!("/home/me/%2E%2E/me/.ssh/id_rsa"),
        json!("\\home\\me\\.ssh\\id_rsa"),
        json!("/home/me/.ssh\\id_rsa"),
        json!("/home/me/.ssh/id_rsa\u{0}.txt"),
        json!("/../home/me/.ssh/id_rsa"),
        json!("/home/../../home/me/.ssh/id_rsa"),
        json!("~/.ssh/id_rsa"),
        json!(".ssh/id_rsa"),
        json!(""),
        json!(["/home/me/.ssh/id_rsa"]),
        json!({"path": "/home/me/.ssh/id_rsa"}),
        json!(7),
        json!(null),
    ] {
        let d = decide_path(&p, value.clone());
        assert_eq!((d.action, d.step), (Action::Deny, Step::Deny), "{value}");
        assert!(
            d.chain.iter().any(|l| l.contains("cannot be read")),
            "{value}: {:?}",
            d.chain
        );
    }
    // A missing argument is no path at all: the deny does not apply.
    let t = tool("write_file");
    let d = p.decide(
        &fs_facts(&t, "write_file", "fs__write_file"),
        Some(&json!({})),
    );
    assert_eq!(d.action, Action::Allow);
}

#[test]
fn a_value_an_allow_cannot_read_keeps_the_allow_from_holding() {
    let p = policy(SCRATCH_ALLOW);
    assert_eq!(
        decide_path(&p, json!("/home/me/scratch/./a//b.txt/")).action,
        Action::Allow
    );
    for value in [
        json!("/home/me/scratch/%2e%2e/notes.txt"),
        json!("/home/me/scratch/..%2fnotes.txt"),
        json!("/home/me/scratch\\..\\notes.txt"),
        json!("/home/me/scratch/a\u{0}"),
        json!("/home/me/scratch/../notes.txt"),
        json!("/home/me/scratch/a/../b.txt"),
        json!("scratch/a.txt"),
        json!("~/scratch/a.txt"),
        json!(["/home/me/scratch/a.txt"]),
        json!(true),
        // The directory itself is not inside it.
        json!("/home/me/scratch"),
    ] {
        let d = decide_path(&p, value.clone());
        assert_eq!(d.action, Action::Ask, "{value}");
    }
}

#[test]
fn patterns_and_urls_are_read_as_written_where_they_should_be() {
    let p = policy(
        r#"
[[rules]]
action = "allow"
tool = "fs__write_file"

[[rules]]
action = "deny"
tool = "fs__write_file"
[[rules.when]]
pointer = "/path"
glob = "/home//me/./.ssh/"

[[rules]]
action = "deny"
tool = "fs__write_file"
[[rules.when]]
pointer = "/url"
glob = "https://evil.example/**"

[[rules]]
action = "deny"
tool = "fs__write_file"
[[rules.when]]
pointer = "/branch"
regex = "main"
"#,
    );
    let t = tool("write_file");
    let f = fs_facts(&t, "write_file", "fs__write_file");
    let d = |args: Value| p.decide(&f, Some(&args)).action;
    // A pattern is normalised like a value.
    assert_eq!(d(json!({"path": "/home/me/.ssh"})), Action::Deny);
    // URL globs keep their `//`.
    assert_eq!(d(json!({"url": "https://evil.example/a/b"})), Action::Deny);
    assert_eq!(d(json!({"url": "https://good.example/a"})), Action::Allow);
    // ... and are read as written, not as a path whose `..` is resolved.
    assert_eq!(d(json!({"url": "https://evil.example/../x"})), Action::Deny);
    // A pattern's value with a NUL, or not a string, cannot be read.
    assert_eq!(d(json!({"branch": "main\u{0}x"})), Action::Deny);
    assert_eq!(d(json!({"branch": ["main"]})), Action::Deny);
    assert_eq!(d(json!({"branch": "dev"})), Action::Allow);
}

fn rule(layer: Layer, action: Action, tool: &str) -> RuleConfig {
    RuleConfig {
        layer,
        origin: format!("{}.toml:1", layer.as_str()),
        action,
        source: None,
        tool: Some(tool.to_string()),
        connection: None,
        pin: None,
        when: Vec::new(),
        for_future: false,
    }
}

/// A deny in any layer, written over the canonical name or any glob of
/// it, in any case, binds the tool whatever its prefix and whatever the
/// case of its upstream name — while allows in every layer name it too.
#[test]
fn a_deny_binds_the_tool_in_every_layer_prefix_and_case() {
    let mut checked = 0;
    for layer in [Layer::Builtin, Layer::User, Layer::Managed] {
        for pattern in [
            "*__execute_command",
            "shell__execute_command",
            "*__EXECUTE_COMMAND",
            "Shell__Execute_Command",
            "*execute_command",
        ] {
            for prefix in [true, false] {
                for upstream in ["execute_command", "Execute_Command", "EXECUTE_COMMAND"] {
                    let exposed = if prefix {
                        format!("shell__{upstream}")
                    } else {
                        upstream.to_string()
                    };
                    let rules = [
                        rule(layer, Action::Deny, pattern),
                        rule(Layer::User, Action::Allow, &exposed),
                        rule(Layer::Managed, Action::Allow, &exposed),
                        rule(Layer::User, Action::Allow, "*"),
                    ];
                    let p = Policy::from_rules(rules.iter());
                    let t = tool(upstream);
                    let f = ToolFacts {
                        source: "shell",
                        connection: "shell",
                        exposed: &exposed,
                        upstream,
                        trusted: true,
                        definition: &t.def,
                        digest: &t.digest,
                        reviewed: Some(&t.digest),
                    };
                    let case = format!("{layer:?} {pattern} prefix={prefix} {exposed}");
                    assert!(p.hides(&f), "not hidden: {case}");
                    let d = p.decide(&f, Some(&json!({})));
                    assert_eq!((d.action, d.step), (Action::Deny, Step::Deny), "{case}");
                    assert_eq!(d.rule.unwrap().1, layer, "{case}");
                    // Another tool of the source is untouched.
                    let other = tool("read_file");
                    let g = ToolFacts {
                        exposed: if prefix {
                            "shell__read_file"
                        } else {
                            "read_file"
                        },
                        upstream: "read_file",
                        definition: &other.def,
                        digest: &other.digest,
                        reviewed: Some(&other.digest),
                        ..f.clone()
                    };
                    assert!(!p.hides(&g), "{case}");
                    assert_eq!(p.decide(&g, Some(&json!({}))).action, Action::Allow);
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 3 * 5 * 2 * 3);
}

#[test]
fn a_deny_ignores_the_case_of_a_connection_an_allow_does_not() {
    let mut deny = rule(Layer::Managed, Action::Deny, "*");
    deny.tool = None;
    deny.source = Some("GH-*".into());
    deny.connection = Some("Work".into());
    let mut allow = deny.clone();
    allow.action = Action::Allow;
    allow.layer = Layer::User;
    let t = tool("issue");
    let f = ToolFacts {
        source: "gh-work",
        connection: "work",
        exposed: "gh-work__issue",
        upstream: "issue",
        trusted: false,
        definition: &t.def,
        digest: &t.digest,
        reviewed: Some(&t.digest),
    };
    let p = Policy::from_rules([deny].iter());
    assert_eq!(p.decide(&f, Some(&json!({}))).action, Action::Deny);
    let p = Policy::from_rules([allow].iter());
    assert_eq!(p.decide(&f, Some(&json!({}))).action, Action::Ask);
}

#[test]
fn explain_names_the_rule_that_nearly_matched() {
    let p = policy(
        r#"
[[rules]]
action = "deny"
tool = "fs__move_flie"

[[rules]]
action = "allow"
tool = "fs__write_file"
[[rules.when]]
pointer = "/path"
glob = "/home/me/scratch/**"
"#,
    );
    let t = tool("move_file");
    let near = p.near_misses(
        &fs_facts(&t, "move_file", "fs__move_file"),
        &json!({"path": "/tmp/x"}),
    );
    assert!(
        near.iter().any(|l| l
            == "deny at airlock.toml:4 (user layer) did not match: tool glob `fs__move_flie` vs `fs__move_file`"),
        "{near:?}"
    );
    let t = tool("write_file");
    let near = p.near_misses(
        &fs_facts(&t, "write_file", "fs__write_file"),
        &json!({"path": "/home/me/scratch/../x"}),
    );
    assert!(
        near.iter().any(|l| l.starts_with("allow at airlock.toml:8")
            && l.contains("/path glob `/home/me/scratch/**`")
            && l.contains("cannot be read (it has a `..` segment)")),
        "{near:?}"
    );
}

#[test]
fn conditions_keep_their_types() {
    // `equals` is strict: the string "true" is not true. A lenient server
    // may read it as true, so a deny meant for both spells both.
    let cond = |v: Value| ArgCondition {
        pointer: "/force".into(),
        test: ArgTest::Equals(v),
    };
    let mut strict = rule(Layer::User, Action::Deny, "fs__push");
    strict.when = vec![cond(json!(true))];
    let mut lenient = strict.clone();
    lenient.when = vec![cond(json!("true"))];
    let t = tool("push");
    let f = fs_facts(&t, "push", "fs__push");
    let p = Policy::from_rules([strict.clone()].iter());
    assert_eq!(
        p.decide(&f, Some(&json!({"force": "true"}))).action,
        Action::Ask
    );
    let p = Policy::from_rules([strict, lenient].iter());
    assert_eq!(
        p.decide(&f, Some(&json!({"force": "true"}))).action,
        Action::Deny
    );
}

/// A rule that cannot be compiled (a standing rule naming a tool with glob
/// syntax gone wrong, say) denies every call: the policy is not evaluated
/// without it.
#[test]
fn a_rule_that_cannot_be_compiled_denies_every_call() {
    let mut bad = rule(Layer::User, Action::Allow, "fs__[");
    bad.origin = "always-allow #7".into();
    let good = rule(Layer::User, Action::Allow, "fs__read_file");
    let p = Policy::from_rules([&good, &bad].into_iter());
    let t = tool("read_file");
    let d = p.decide(
        &fs_facts(&t, "read_file", "fs__read_file"),
        Some(&json!({})),
    );
    assert_eq!(
        (d.action, d.step),
        (Action::Deny, Step::Error),
        "{}",
        d.reason
    );
    assert!(d.reason.contains("always-allow #7"), "{}", d.reason);
}
