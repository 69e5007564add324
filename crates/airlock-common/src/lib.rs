//! Small helpers every airlock crate shares, each written once: the clock
//! ([`now_ms`]), random bytes and ids from the OS ([`random`]), text cut
//! to a size at a character boundary ([`text`]), and did-you-mean
//! suggestions ([`closest`]).

pub mod random;
pub mod text;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Up to three of `known` closest to `wanted`, best first: names a person
/// or a model probably meant when they misspelt one. A name counts as close
/// within two edits (a swap of neighbours is one), or a third of its length
/// for long names.
pub fn closest<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(wanted, k), k))
        .filter(|(d, k)| *d <= 2.max(k.chars().count() / 3))
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, k)| k).collect()
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
        // No name is suggested twice.
        assert_eq!(closest("ab", ["ac", "ac", "ad", "ae", "af"]).len(), 3);
    }

    #[test]
    fn the_clock_is_after_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }
}
