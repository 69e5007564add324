//! One resource, many spellings: the form a URI is compared in when the
//! question is whether it names a withheld resource.
//!
//! Servers are lenient in different ways: one decodes `%73` to `s`, one
//! folds case, one resolves `./` and `../`, one treats `//` as `/` or `\`
//! as `/`, one ignores a fragment or a trailing slash. A URI that a visible
//! catch-all template covers must not reach a withheld resource by any of
//! those spellings, so the comparison folds all of them at once. Folding
//! more than a given server does can only refuse a read that server would
//! have served from elsewhere: the safe side.

use std::borrow::Cow;

/// `uri` with every spelling difference above folded away. For a template's
/// literal prefix, `prefix` keeps a trailing slash (it separates the
/// prefix from what the template fills in).
pub(crate) fn fold(uri: &str, prefix: bool) -> String {
    let decoded: Cow<str> = percent_encoding::percent_decode_str(uri).decode_utf8_lossy();
    let lower = decoded.to_lowercase().replace('\\', "/");
    // A fragment never reaches a server's lookup; an empty query adds
    // nothing.
    let lower = match lower.find('#') {
        Some(i) => &lower[..i],
        None => &lower[..],
    };
    let lower = lower.strip_suffix('?').unwrap_or(lower);
    let (scheme, rest) = match lower.find(':') {
        Some(i)
            if lower[..i]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            (&lower[..=i], &lower[i + 1..])
        }
        _ => ("", lower),
    };
    // Every run of slashes as one, then the dot segments resolved.
    let mut segments: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    let mut out = String::with_capacity(lower.len());
    out.push_str(scheme);
    if rest.starts_with('/') {
        out.push('/');
    }
    out.push_str(&segments.join("/"));
    if prefix && rest.ends_with('/') && !segments.is_empty() {
        out.push('/');
    }
    out
}

/// A URI folded once, to be compared with many listed ones.
pub(crate) struct Folded(String);

impl Folded {
    pub(crate) fn new(uri: &str) -> Folded {
        Folded(fold(uri, false))
    }

    /// Whether this names the resource listed as `listed`, however either
    /// is spelled.
    pub(crate) fn names(&self, listed: &str) -> bool {
        self.0 == fold(listed, false)
    }

    /// Whether this falls under a template whose literal prefix is
    /// `prefix`, however either is spelled.
    pub(crate) fn is_under(&self, prefix: &str) -> bool {
        let prefix = fold(prefix, true);
        // A prefix of the scheme alone (or none) covers everything: that
        // template is a catch-all, not a place an item lives in.
        if prefix.trim_end_matches('/').ends_with(':') || prefix.is_empty() {
            return false;
        }
        match prefix.strip_suffix('/') {
            // `x/` covers `x/…`, and `x` itself once a trailing slash is
            // folded away.
            Some(dir) => self.0 == dir || self.0.starts_with(&prefix),
            None => self.0.starts_with(&prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lenient_spelling_names_the_same_resource() {
        for spelling in [
            "hostile://shifty",
            "HOSTILE://Shifty",
            "hostile://%73hifty",
            "hostile://%53HIFTY",
            "hostile:///shifty",
            "hostile:////shifty",
            "hostile://./shifty",
            "hostile://x/../shifty",
            "hostile://shifty/",
            "hostile://shifty#part",
            "hostile://shifty?",
            "hostile:\\\\shifty",
            "hostile://shifty/.",
        ] {
            assert!(
                Folded::new(spelling).names("hostile://shifty"),
                "{spelling}"
            );
        }
    }

    #[test]
    fn other_resources_stay_other() {
        for other in [
            "hostile://shifty2",
            "hostile://shiftyx/y",
            "hostile://shifty/7",
            "hostile://shifty?page=2",
            "other://shifty",
            "hostile://",
        ] {
            assert!(!Folded::new(other).names("hostile://shifty"), "{other}");
        }
    }

    #[test]
    fn a_uri_under_a_withheld_template_is_found_however_spelled() {
        for spelling in [
            "hostile://shifty/7",
            "hostile://SHIFTY/7",
            "hostile://%73hifty/7",
            "hostile://a/../shifty//7",
            "hostile:///shifty/7",
        ] {
            assert!(
                Folded::new(spelling).is_under("hostile://shifty/"),
                "{spelling}"
            );
        }
        assert!(!Folded::new("hostile://shiftyx/7").is_under("hostile://shifty/"));
        assert!(!Folded::new("hostile://other/7").is_under("hostile://shifty/"));
        // A prefix of the scheme alone is a catch-all: it withholds
        // nothing by itself here (routing refuses what it governs).
        assert!(!Folded::new("hostile://x").is_under("hostile://"));
        assert!(!Folded::new("hostile://x").is_under(""));
    }
}
