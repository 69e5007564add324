//! The config parser against generated files: it never panics, and every
//! error it gives points into the file (a line and column) with a fix.

use std::path::Path;

use airlock_config::{Format, parse};
use proptest::prelude::*;

/// Lines a config file is made of, right and wrong, and lines of noise.
fn line() -> impl Strategy<Value = String> {
    let known = prop_oneof![
        Just("[hub]"),
        Just("[sources.a]"),
        Just("[sources.b-c]"),
        Just("[sources.\"\"]"),
        Just("[sources]"),
        Just("[[rules]]"),
        Just("[[rules.x]]"),
        Just("command = \"airlock\""),
        Just("command = \"\""),
        Just("command = 3"),
        Just("args = [\"a\", 1]"),
        Just("url = \"http://127.0.0.1:9/mcp\""),
        Just("url = \"http://user:pw@10.0.0.1/\""),
        Just("url = \"not a url\""),
        Just("env = { TOKEN = \"ghp_0123456789abcdef0123456789abcdef0123\" }"),
        Just("env = { A = 1 }"),
        Just("headers = { Authorization = \"Bearer x\" }"),
        Just("call_timeout = \"5s\""),
        Just("call_timeout = \"-1s\""),
        Just("call_timeout = 5"),
        Just("connect_timeout = \"99999999999999h\""),
        Just("protocol = \"legacy\""),
        Just("protocol = \"2031\""),
        Just("sessions = \"per-client\""),
        Just("sessions = \"some\""),
        Just("action = \"allow\""),
        Just("action = \"maybe\""),
        Just("tool = \"*\""),
        Just("tool = \"[[\""),
        Just("source = \"a\""),
        Just("when = [{ arg = \"path\", matches = \"(\" }]"),
        Just("when = [{ arg = \"path\", glob = \"/etc/**\" }]"),
        Just("when = \"x\""),
        Just("trusted = true"),
        Just("trusted = \"yes\""),
        Just("prefix = \"a__b\""),
        Just("approval_page = \"print\""),
        Just("managed_policy = \"/nonexistent/managed.toml\""),
        Just("cmmand = \"x\""),
        Just("= 1"),
        Just("a = "),
        Just("\"\"\""),
    ]
    .prop_map(String::from);
    prop_oneof![4 => known, 1 => "\\PC{0,24}"]
}

fn file() -> impl Strategy<Value = String> {
    proptest::collection::vec(line(), 0..14).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_config_file_never_panics_the_parser_and_every_error_has_a_position(text in file()) {
        let path = Path::new("/nonexistent/airlock.toml");
        if let Err(e) = parse(path, &text, Format::Toml) {
            prop_assert!(e.line >= 1 && e.column >= 1, "no position: {e:?}\n---\n{text}");
            prop_assert!(e.line <= text.split('\n').count(), "past the end: {e:?}\n---\n{text}");
            prop_assert!(!e.fix.is_empty(), "no fix: {e:?}\n---\n{text}");
        }
    }
}
