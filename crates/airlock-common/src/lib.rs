//! Small helpers every airlock crate shares, each written once: the clock
//! ([`now_ms`]), random bytes and ids from the OS ([`random`]), text cut
//! to a size at a character boundary ([`text`]), and did-you-mean
//! suggestions ([`closest`]), the secret names airlock reserves
//! ([`is_reserved_secret_name`]), and the rule for tenant names
//! ([`is_tenant_name`]).

pub mod random;
pub mod text;

/// The command a person runs to log airlock in to a source (`airlock auth
/// login NAME`): what every message about a missing login names.
pub const LOGIN_COMMAND: &str = "airlock auth login";

/// Secret names airlock keeps for itself (a source's OAuth login:
/// `oauth_NAME`, `oauth_NAME_access`, …). A person cannot store one or
/// refer to one in config, so nothing but a login reads or writes them.
pub fn is_reserved_secret_name(name: &str) -> bool {
    name.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("oauth_"))
}

/// Whether `tenant` is a tenant's name as a team store keeps it: 1 to 64
/// letters, digits, `-`, `_` or `.` (it is compared, logged and named in
/// messages, and the config and the store both hold to this one rule).
pub fn is_tenant_name(tenant: &str) -> bool {
    (1..=64).contains(&tenant.len())
        && tenant
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Up to three of `known` closest to `wanted`, best first: names a person
/// or a model probably meant when they misspelt one. A name is close when
/// it is within a few edits (two, or a third of its length; a swap of
/// neighbours is one), when it shares most of its shape (Jaro-Winkler
/// similarity of 0.7 or more: `fs__write` for `fs__write_file`), or when
/// it is `wanted` under a prefix (`read_note` for `demo__read_note`).
pub fn closest<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(usize, f64, &str)> = known
        .into_iter()
        .filter_map(|k| {
            let edits = strsim::damerau_levenshtein(wanted, k);
            let shape = strsim::jaro_winkler(wanted, k);
            let prefixed = !wanted.is_empty() && k.ends_with(&format!("__{wanted}"));
            let near = edits <= 2.max(k.chars().count() / 3) || shape >= 0.7 || prefixed;
            near.then_some((edits, shape, k))
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(b.2)));
    scored.dedup_by(|a, b| a.2 == b.2);
    scored.into_iter().take(3).map(|(_, _, k)| k).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_ranks_near_names_and_ignores_far_ones() {
        let known = ["demo__read_note", "demo__write_note", "other__zzz"];
        let near = closest("demo__reed_note", known);
        assert_eq!(near.first(), Some(&"demo__read_note"));
        assert!(!near.contains(&"other__zzz"));
        assert_eq!(closest("comand", ["command", "args"]), ["command"]);
        assert_eq!(closest("fixtrue", ["fixture", "demo"]), ["fixture"]);
        assert!(closest("zzzzzz", ["command", "args"]).is_empty());
        // A name under its source's prefix, or cut short, is still found.
        assert_eq!(
            closest("read_note", ["demo__read_note", "x__y"]),
            ["demo__read_note"]
        );
        assert_eq!(
            closest("create_issue", ["github__create_issue"]),
            ["github__create_issue"]
        );
        assert_eq!(
            closest("fs__read_file", ["filesystem__read_file"]),
            ["filesystem__read_file"]
        );
        assert_eq!(
            closest("fs__write", ["fs__write_file", "zz"]),
            ["fs__write_file"]
        );
        assert_eq!(
            closest("demo__list", ["demo__list_notes"]),
            ["demo__list_notes"]
        );
        // No name is suggested twice.
        assert_eq!(closest("ab", ["ac", "ac", "ad", "ae", "af"]).len(), 3);
    }

    #[test]
    fn the_clock_is_after_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }
}
