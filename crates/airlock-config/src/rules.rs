//! `[[rules]]`: parsed with positions and validated, so a typo in an action,
//! a glob or a pattern refuses to start with file, line and the fix, and the
//! evaluator never meets an invalid rule.

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, closest};
use crate::model::{Action, ArgCondition, ArgTest, Layer, RuleConfig};

const ACTIONS: &[&str] = &["allow", "ask", "deny"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    action: Spanned<String>,
    source: Option<Spanned<String>>,
    tool: Option<Spanned<String>>,
    connection: Option<String>,
    pin: Option<Spanned<String>>,
    #[serde(default)]
    when: Vec<Spanned<RawCondition>>,
    /// Read as any value, so a wrong type gets an error of its own.
    for_future: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCondition {
    pointer: Spanned<String>,
    glob: Option<Spanned<String>>,
    equals: Option<toml::Value>,
    regex: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManagedFile {
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
}

/// Compiles a glob the way rules use it: `*` stays within a path segment.
pub fn compile_glob(pattern: &str) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}

/// Compiles a rule's regular expression, anchored to the whole value.
pub fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())
}

pub(crate) fn validate(
    path: &Path,
    text: &str,
    layer: Layer,
    raw: Vec<Spanned<RawRule>>,
) -> Result<Vec<RuleConfig>, ConfigError> {
    let err = |offset: usize, key: &str, msg: String, fix: String| {
        ConfigError::at(path, text, Some(offset), Some(key.to_string()), msg, fix)
    };
    let mut rules = Vec::new();
    for (i, spanned) in raw.into_iter().enumerate() {
        let start = spanned.span().start;
        let key = format!("rules[{i}]");
        let r = spanned.into_inner();
        let action = match r.action.get_ref().as_str() {
            "allow" => Action::Allow,
            "ask" => Action::Ask,
            "deny" => Action::Deny,
            other => {
                // Fail closed: "Deny" is not a policy, and never means allow.
                let hint = closest(&other.to_ascii_lowercase(), ACTIONS)
                    .map(|a| format!("did you mean \"{a}\"? "))
                    .unwrap_or_default();
                return Err(err(
                    r.action.span().start,
                    &format!("{key}.action"),
                    format!("`{other}` is not an action"),
                    format!("{hint}use \"allow\", \"ask\" or \"deny\" (lower case)"),
                ));
            }
        };
        if r.source.is_none() && r.tool.is_none() {
            return Err(err(
                start,
                &key,
                "a rule needs `source` or `tool` (or both)".into(),
                "add e.g. source = \"fs\" or tool = \"fs__write_*\"".into(),
            ));
        }
        for (name, glob) in [("source", &r.source), ("tool", &r.tool)] {
            if let Some(g) = glob {
                compile_glob(g.get_ref()).map_err(|why| {
                    err(
                        g.span().start,
                        &format!("{key}.{name}"),
                        format!("`{}` is not a valid glob: {why}", g.get_ref()),
                        "use * for any characters, ? for one, [abc] for a set".into(),
                    )
                })?;
            }
        }
        if let Some(pin) = &r.pin {
            let hex = pin.get_ref().strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(err(
                    pin.span().start,
                    &format!("{key}.pin"),
                    format!("`{}` is not a contract digest", pin.get_ref()),
                    "copy the digest `airlock tools review` or `airlock policy explain` prints (sha256:<64 hex digits>)".into(),
                ));
            }
        }
        let for_future = match &r.for_future {
            None => false,
            Some(v) => match v.get_ref() {
                toml::Value::Boolean(b) => *b,
                other => {
                    return Err(err(
                        v.span().start,
                        &format!("{key}.for_future"),
                        format!(
                            "`for_future` is true or false, not the {} `{other}`",
                            other.type_str()
                        ),
                        "write for_future = true (without quotes) to mark a rule whose tools do not exist yet, or remove the key".into(),
                    ));
                }
            },
        };
        let mut when = Vec::new();
        for (j, c) in r.when.into_iter().enumerate() {
            let ckey = format!("{key}.when[{j}]");
            let cstart = c.span().start;
            let c = c.into_inner();
            let pointer = c.pointer.get_ref().clone();
            if !pointer.is_empty() && !pointer.starts_with('/') {
                return Err(err(
                    c.pointer.span().start,
                    &format!("{ckey}.pointer"),
                    format!("`{pointer}` is not a JSON pointer"),
                    format!("start it with /, e.g. pointer = \"/{pointer}\""),
                ));
            }
            let test = match (c.glob, c.equals, c.regex) {
                (Some(g), None, None) => {
                    compile_glob(g.get_ref()).map_err(|why| {
                        err(
                            g.span().start,
                            &format!("{ckey}.glob"),
                            format!("`{}` is not a valid glob: {why}", g.get_ref()),
                            "use * within a path segment, ** across segments".into(),
                        )
                    })?;
                    ArgTest::Glob(g.into_inner())
                }
                (None, Some(v), None) => {
                    ArgTest::Equals(serde_json::to_value(v).unwrap_or(serde_json::Value::Null))
                }
                (None, None, Some(re)) => {
                    compile_regex(re.get_ref()).map_err(|why| {
                        err(
                            re.span().start,
                            &format!("{ckey}.regex"),
                            format!(
                                "`{}` is not a valid regular expression: {why}",
                                re.get_ref()
                            ),
                            "check the pattern's syntax (it must match the whole value)".into(),
                        )
                    })?;
                    ArgTest::Regex(re.into_inner())
                }
                _ => {
                    return Err(err(
                        cstart,
                        &ckey,
                        "a condition needs exactly one of `glob`, `equals` or `regex`".into(),
                        "keep one test per condition; add another [[rules.when]] for more".into(),
                    ));
                }
            };
            when.push(ArgCondition { pointer, test });
        }
        let (line, _) = crate::error::line_col(text, start);
        rules.push(RuleConfig {
            layer,
            origin: format!("{}:{line}", path.display()),
            action,
            source: r.source.map(Spanned::into_inner),
            tool: r.tool.map(Spanned::into_inner),
            connection: r.connection,
            pin: r.pin.map(Spanned::into_inner),
            when,
            for_future,
        });
    }
    Ok(rules)
}

pub(crate) fn parse_managed(path: &Path, text: &str) -> Result<Vec<RuleConfig>, ConfigError> {
    let file: ManagedFile =
        toml::from_str(text).map_err(|e| crate::syntax::toml_error(path, text, &e))?;
    validate(path, text, Layer::Managed, file.rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn parse(text: &str) -> Result<Vec<RuleConfig>, ConfigError> {
        parse_managed(&PathBuf::from("managed.toml"), text)
    }

    #[test]
    fn unknown_policy_value_fails_closed() {
        let e = parse("[[rules]]\ntool = \"fs__*\"\naction = \"Deny\"\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.fix.contains("did you mean \"deny\""), "{e}");
        let e = parse("[[rules]]\ntool = \"x\"\naction = \"permit\"\n").unwrap_err();
        assert!(e.message.contains("not an action"), "{e}");
    }

    #[test]
    fn malformed_glob_and_regex_are_refused_with_position() {
        let e = parse("[[rules]]\naction = \"allow\"\ntool = \"fs__[write\"\n").unwrap_err();
        assert_eq!(e.line, 3);
        let e = parse(
            "[[rules]]\naction = \"allow\"\ntool = \"t\"\n[[rules.when]]\npointer = \"/p\"\nregex = \"(\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        assert!(e.key.as_deref().unwrap().ends_with("regex"), "{e}");
    }

    #[test]
    fn conditions_need_one_test_and_a_pointer() {
        let e = parse(
            "[[rules]]\naction = \"allow\"\ntool = \"t\"\n[[rules.when]]\npointer = \"path\"\nglob = \"x\"\n",
        )
        .unwrap_err();
        assert!(e.fix.contains("\"/path\""), "{e}");
        let e = parse(
            "[[rules]]\naction = \"allow\"\ntool = \"t\"\n[[rules.when]]\npointer = \"/p\"\nglob = \"x\"\nregex = \"y\"\n",
        )
        .unwrap_err();
        assert!(e.message.contains("exactly one"), "{e}");
    }

    #[test]
    fn a_rule_needs_a_target_and_unknown_keys_fail() {
        assert!(parse("[[rules]]\naction = \"deny\"\n").is_err());
        let e = parse("[[rules]]\naction = \"deny\"\ntool = \"x\"\ntools = \"y\"\n").unwrap_err();
        assert!(e.to_string().contains("tools"), "{e}");
    }

    #[test]
    fn for_future_is_a_boolean() {
        let r =
            parse("[[rules]]\naction = \"deny\"\ntool = \"x__y\"\nfor_future = true\n").unwrap();
        assert!(r[0].for_future);
        let r = parse("[[rules]]\naction = \"deny\"\ntool = \"x__y\"\n").unwrap();
        assert!(!r[0].for_future);
        let e = parse("[[rules]]\naction = \"deny\"\ntool = \"x__y\"\nfor_future = \"yes\"\n")
            .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert_eq!(e.key.as_deref(), Some("rules[0].for_future"), "{e}");
        assert!(e.message.contains("true or false"), "{e}");
        assert!(e.fix.contains("for_future = true"), "{e}");
        let e =
            parse("[[rules]]\naction = \"deny\"\ntool = \"x\"\nfor_futur = true\n").unwrap_err();
        assert!(e.fix.contains("`for_future`"), "{e}");
    }

    #[test]
    fn rules_keep_their_origin_and_layer() {
        let r = parse(
            "\n[[rules]]\naction = \"allow\"\ntool = \"fs__write_file\"\n[[rules.when]]\npointer = \"/path\"\nglob = \"/home/me/scratch/**\"\n",
        )
        .unwrap();
        assert_eq!(r[0].layer, Layer::Managed);
        assert_eq!(r[0].origin, "managed.toml:2");
        assert_eq!(
            r[0].when[0].test,
            ArgTest::Glob("/home/me/scratch/**".into())
        );
    }
}
