//! Exposed names: `<source>__<name>`.
//!
//! Source names cannot contain `_` (see `airlock_config::validate_source_name`),
//! so the first `__` always ends the source and the mapping is reversible.
//! An upstream name that would make the exposed name invalid is not renamed:
//! the item is withheld and reported, since a mangled name could not be
//! mapped back with certainty.

pub const SEPARATOR: &str = "__";
const MAX_LEN: usize = 64;

/// The exposed name, if it is valid under `^[a-zA-Z0-9_-]{1,64}$`.
/// Without `prefix` the upstream name is exposed as it is.
pub fn expose(source: &str, name: &str, prefix: bool) -> Result<String, String> {
    let exposed = if prefix {
        format!("{source}{SEPARATOR}{name}")
    } else {
        name.to_string()
    };
    if name.is_empty() {
        return Err("the upstream name is empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "`{name}` contains {c:?}, which is not allowed in an exposed tool name"
        ));
    }
    if exposed.len() > MAX_LEN {
        return Err(format!(
            "`{exposed}` is {} characters, more than the {MAX_LEN} clients accept",
            exposed.len()
        ));
    }
    Ok(exposed)
}

/// Splits an exposed name into (source, upstream name).
pub fn split(exposed: &str) -> Option<(&str, &str)> {
    exposed
        .split_once(SEPARATOR)
        .filter(|(s, n)| !s.is_empty() && !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_round_trip() {
        for (source, name) in [("fs", "read_file"), ("a-b", "x__y"), ("g", "-")] {
            let e = expose(source, name, true).unwrap();
            assert_eq!(split(&e), Some((source, name)));
        }
    }

    #[test]
    fn invalid_exposed_names_are_refused_not_mangled() {
        assert!(expose("fs", "read.file", true).is_err());
        assert!(expose("fs", "", true).is_err());
        assert!(expose("fs", &"x".repeat(61), true).is_err());
        assert!(expose("fs", &"x".repeat(60), true).is_ok());
        assert_eq!(expose("fs", "read", false).unwrap(), "read");
        assert!(expose("fs", "read.file", false).is_err());
    }
}
