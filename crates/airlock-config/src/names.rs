/// Human statement of the source-name rule, used in messages and docs.
pub const SOURCE_NAME_RULE: &str =
    "1 to 32 characters: letters, digits and '-', starting with a letter or digit";

/// A source name must keep every exposed name (`<source>__<name>`) valid and
/// reversible: it cannot contain `_`, so the first `__` always ends it.
pub fn validate_source_name(name: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "source name `{name}` is not valid: {SOURCE_NAME_RULE}"
        ))
    }
}

/// What a client config's server key becomes as a source name, if it can.
pub(crate) fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while out.starts_with('-') {
        out.remove(0);
    }
    out.truncate(32);
    while out.ends_with('-') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn underscores_are_refused_so_names_stay_reversible() {
        assert!(validate_source_name("git_hub").is_err());
        assert!(validate_source_name("git-hub").is_ok());
        assert!(validate_source_name("").is_err());
        assert!(validate_source_name("-x").is_err());
        assert!(validate_source_name(&"a".repeat(33)).is_err());
    }

    #[test]
    fn sanitize_maps_client_keys() {
        assert_eq!(sanitize("my_server"), "my-server");
        assert_eq!(sanitize("@scope/pkg"), "scope-pkg");
    }
}
