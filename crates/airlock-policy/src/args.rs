//! Argument conditions, reading each value the way a server will.
//!
//! A glob condition compares paths. Before it is matched, a value is
//! normalised lexically — `.` segments, repeated `/` and a trailing `/`
//! dropped, `..` taken back a segment — so `/home/me/x/../.ssh/id_rsa` is
//! judged as `/home/me/.ssh/id_rsa`, the file the server will open.
//!
//! A value the condition cannot read with certainty (a `..` above the root,
//! a NUL byte, a backslash, percent-encoding, a relative path where the
//! pattern is absolute, a non-string) is *unreadable*. For a deny, an
//! unreadable value makes the condition hold; for an allow or ask, it makes
//! it fail. Either way the call falls on the safe side.

use std::borrow::Cow;

use airlock_config::ArgTest;
use serde_json::Value;

/// One compiled condition.
pub(crate) struct Condition {
    pub pointer: String,
    pub test: Test,
    /// The condition as written, for explanations.
    pub shown: String,
}

pub(crate) enum Test {
    /// A glob over paths. `absolute`: the pattern starts with `/`, so a
    /// value must too. `itself`: for `DIR/**`, a matcher of `DIR`, which a
    /// deny covers as well.
    Path {
        glob: globset::GlobMatcher,
        absolute: bool,
        itself: Option<globset::GlobMatcher>,
    },
    /// A glob over URLs (the pattern has `://`): matched as written.
    Url(globset::GlobMatcher),
    Equals(Value),
    Regex(regex::Regex),
}

/// Why a value cannot be read with certainty.
pub(crate) type Unreadable = &'static str;

impl Condition {
    pub fn compile(pointer: &str, test: &ArgTest) -> Result<Condition, String> {
        let (test, shown) = match test {
            ArgTest::Glob(g) if g.contains("://") => (
                Test::Url(airlock_config::compile_glob(g)?),
                format!("glob `{g}`"),
            ),
            ArgTest::Glob(g) => {
                let pattern = normalise_pattern(g);
                let itself = pattern
                    .strip_suffix("/**")
                    .filter(|base| !base.is_empty())
                    .map(airlock_config::compile_glob)
                    .transpose()?;
                (
                    Test::Path {
                        glob: airlock_config::compile_glob(&pattern)?,
                        absolute: pattern.starts_with('/'),
                        itself,
                    },
                    format!("glob `{g}`"),
                )
            }
            ArgTest::Equals(v) => (Test::Equals(v.clone()), format!("equals {v}")),
            ArgTest::Regex(r) => (
                Test::Regex(airlock_config::compile_regex(r)?),
                format!("regex `{r}`"),
            ),
        };
        Ok(Condition {
            pointer: pointer.to_string(),
            test,
            shown,
        })
    }

    /// Whether the condition holds for these arguments, in a rule that
    /// denies (`deny`) or not.
    pub fn holds(&self, args: &Value, deny: bool) -> bool {
        let Some(value) = args.pointer(&self.pointer) else {
            return false;
        };
        if let Test::Equals(want) = &self.test {
            return want == value;
        }
        match self.read(value, deny) {
            Ok(read) => self.test.matches(&read, deny),
            Err(_) => deny,
        }
    }

    /// The value as the condition reads it: the normalised path for a path
    /// glob, the string for a URL glob or a pattern, the JSON text for
    /// `equals`.
    pub fn read<'v>(&self, value: &'v Value, deny: bool) -> Result<Cow<'v, str>, Unreadable> {
        match &self.test {
            Test::Equals(_) => Ok(Cow::Owned(value.to_string())),
            Test::Path { absolute, .. } => {
                let s = string(value)?;
                read_path(s, *absolute, deny).map(Cow::Owned)
            }
            Test::Url(_) | Test::Regex(_) => {
                let s = string(value)?;
                if s.contains('\0') {
                    return Err("it contains a NUL byte");
                }
                Ok(Cow::Borrowed(s))
            }
        }
    }

    /// Why the condition does or does not hold, in one clause.
    pub fn describe(&self, args: &Value, deny: bool) -> String {
        let Some(value) = args.pointer(&self.pointer) else {
            return format!("argument {} is missing", self.pointer);
        };
        let holds = self.holds(args, deny);
        match self.read(value, deny) {
            Err(why) => format!(
                "{} {}: {value} cannot be read ({why}), so {}",
                self.pointer,
                self.shown,
                if deny {
                    "the deny holds"
                } else {
                    "the rule does not match"
                }
            ),
            Ok(read) => {
                let seen = match value {
                    Value::String(s) if s.as_str() != read => {
                        format!("{value} (read as \"{read}\")")
                    }
                    _ => value.to_string(),
                };
                format!(
                    "{} {} vs {seen}: {}",
                    self.pointer,
                    self.shown,
                    if holds { "holds" } else { "does not hold" }
                )
            }
        }
    }
}

impl Test {
    fn matches(&self, read: &str, deny: bool) -> bool {
        match self {
            // Compared as JSON in `holds`, never as text.
            Test::Equals(_) => false,
            Test::Path { glob, itself, .. } => {
                glob.is_match(read) || (deny && itself.as_ref().is_some_and(|g| g.is_match(read)))
            }
            Test::Url(glob) => glob.is_match(read),
            Test::Regex(re) => re.is_match(read),
        }
    }
}

fn string(value: &Value) -> Result<&str, Unreadable> {
    value
        .as_str()
        .ok_or("it is not a string, and a server may coerce it")
}

/// A path value as the server will open it, or why that is uncertain.
///
/// `deny`: a deny takes `..` back one segment; an allow refuses any `..`,
/// since behind a symbolic link `..` can lead anywhere.
pub(crate) fn read_path(s: &str, absolute_pattern: bool, deny: bool) -> Result<String, Unreadable> {
    if s.contains('\0') {
        return Err("it contains a NUL byte");
    }
    if s.contains('\\') {
        return Err("it contains a backslash, which some servers read as a separator");
    }
    if has_percent_escape(s) {
        return Err("it contains percent-encoding, which some servers decode");
    }
    let absolute = s.starts_with('/');
    if absolute_pattern && !absolute {
        return Err("it is not an absolute path, so where it leads depends on the server");
    }
    let mut kept: Vec<&str> = Vec::new();
    for segment in s.split('/') {
        match segment {
            "" | "." => {}
            ".." if !deny => return Err("it has a `..` segment"),
            ".." => {
                if kept.pop().is_none() {
                    return Err("its `..` climbs above where the path starts");
                }
            }
            name => kept.push(name),
        }
    }
    let joined = kept.join("/");
    Ok(match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    })
}

/// A pattern read the way values are: repeated `/`, `.` segments and a
/// trailing `/` dropped (a pattern with them could match no value).
fn normalise_pattern(pattern: &str) -> String {
    let absolute = pattern.starts_with('/');
    let kept: Vec<&str> = pattern
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    let joined = kept.join("/");
    if absolute {
        format!("/{joined}")
    } else {
        joined
    }
}

fn has_percent_escape(s: &str) -> bool {
    s.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_lexically() {
        let deny = |s| read_path(s, true, true);
        assert_eq!(deny("/home/me/./.ssh/x").unwrap(), "/home/me/.ssh/x");
        assert_eq!(deny("/home/me/x/../.ssh/x").unwrap(), "/home/me/.ssh/x");
        assert_eq!(deny("//home/me/.ssh/x").unwrap(), "/home/me/.ssh/x");
        assert_eq!(deny("/home/me/.ssh/").unwrap(), "/home/me/.ssh");
        assert_eq!(deny("/home/me/.ssh/./x/../y").unwrap(), "/home/me/.ssh/y");
        assert_eq!(deny("/").unwrap(), "/");
        // Paths are case-sensitive: not the same file on Linux.
        assert_eq!(deny("/HOME/me/.ssh").unwrap(), "/HOME/me/.ssh");
        assert_eq!(read_path("a/./b/", false, true).unwrap(), "a/b");
        assert_eq!(read_path("./", false, true).unwrap(), ".");
    }

    #[test]
    fn what_cannot_be_read_is_refused() {
        for bad in [
            "/../etc/passwd",
            "/home/../../etc",
            "/home/me/.ssh/x\0",
            "\\home\\me\\.ssh",
            "/home/me/%2essh/x",
            "/home/me/.ssh%2fx",
            "~/.ssh/id_rsa",
            "home/me/.ssh",
            "",
        ] {
            assert!(read_path(bad, true, true).is_err(), "{bad:?}");
        }
        assert!(read_path("a/../../b", false, true).is_err());
        // An allow reads no `..` at all.
        assert!(read_path("/home/me/scratch/a/../b", true, false).is_err());
        // A lone % is a character, not an escape.
        assert!(read_path("/home/me/100%.txt", true, true).is_ok());
    }

    #[test]
    fn patterns_are_read_like_values() {
        assert_eq!(normalise_pattern("/home//me/./.ssh/"), "/home/me/.ssh");
        assert_eq!(normalise_pattern("/home/me/.ssh/**"), "/home/me/.ssh/**");
        assert_eq!(normalise_pattern("**/*.pem"), "**/*.pem");
    }
}
