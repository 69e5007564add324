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

/// The ways a server may read one URI, each folded: what is compared with
/// a withheld item's folded URI. A server may resolve `..` before or after
/// it decodes `%2F`, so both orders are tried, and a URI is taken to name
/// an item if any of its readings does.
pub(crate) fn readings(uri: &str) -> [String; 2] {
    let bare = strip_whitespace(uri);
    // Resolve first (on the text as written), then decode; and decode
    // first, then resolve.
    let resolved_then_decoded = fold(&decode(&resolve(cut(&bare))));
    let decoded_then_resolved = fold(&decode(&bare));
    [resolved_then_decoded, decoded_then_resolved]
}

/// A listed item's URI, or a template's literal prefix, folded the same
/// way; `prefix` keeps a trailing boundary (a prefix ends where the
/// template fills in, so `.`, `#` or `?` there are literal).
pub(crate) fn listed(uri: &str, prefix: bool) -> String {
    let decoded = decode(&strip_whitespace(uri));
    if prefix {
        fold_case(&collapse(&decoded.replace('\\', "/")))
    } else {
        fold(&decoded)
    }
}

/// Tabs and line breaks anywhere, and blanks and controls at the ends,
/// are dropped by URL parsers.
fn strip_whitespace(uri: &str) -> String {
    uri.trim_matches(|c: char| c.is_control() || c == ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect()
}

/// `%XX` decoded until nothing changes (a double encoding is read twice by
/// some servers).
fn decode(uri: &str) -> String {
    let mut text = uri.to_string();
    for _ in 0..4 {
        let next = percent_encoding::percent_decode_str(&text)
            .decode_utf8_lossy()
            .into_owned();
        if next == text {
            break;
        }
        text = next;
    }
    text
}

/// A fragment or a query never names another item for a server that reads
/// only the path: both dropped.
fn cut(uri: &str) -> &str {
    match uri.find(['#', '?']) {
        Some(i) => &uri[..i],
        None => uri,
    }
}

/// Case folded as case-insensitive lookups do (`ſ` and `K` (Kelvin) fold
/// to `s` and `k` through their upper case).
fn fold_case(text: &str) -> String {
    text.to_uppercase().to_lowercase()
}

/// Runs of `/` as one.
fn collapse(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

/// The text's path with `.` and `..` resolved and runs of `/` as one.
fn resolve(uri: &str) -> String {
    let (scheme, rest) = split_scheme(uri);
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
    let mut out = String::with_capacity(uri.len());
    out.push_str(scheme);
    if rest.starts_with('/') {
        out.push('/');
    }
    out.push_str(&segments.join("/"));
    out
}

fn split_scheme(uri: &str) -> (&str, &str) {
    match uri.find(':') {
        Some(i)
            if uri[..i]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            (&uri[..=i], &uri[i + 1..])
        }
        _ => ("", uri),
    }
}

/// Case folded, `\` as `/`, fragment and query dropped, dot segments
/// resolved, runs of `/` as one and a trailing slash dropped.
fn fold(uri: &str) -> String {
    let text = fold_case(uri).replace('\\', "/");
    resolve(cut(&text)).trim_end_matches('/').to_string()
}

/// A URI read every way a server may read it, to be compared with many
/// listed ones.
pub(crate) struct Folded([String; 2]);

impl Folded {
    pub(crate) fn new(uri: &str) -> Folded {
        Folded(readings(uri))
    }

    /// Whether a reading of this names the item whose URI, folded by
    /// [`listed`], is `listed_uri`.
    pub(crate) fn names(&self, listed_uri: &str) -> bool {
        self.0.iter().any(|r| r == listed_uri)
    }

    /// Whether a reading of this falls under a template whose literal
    /// prefix, folded by [`listed`], is `prefix`.
    pub(crate) fn is_under(&self, prefix: &str) -> bool {
        // A prefix of the scheme alone (or none) covers everything: that
        // template is a catch-all, not a place an item lives in.
        if prefix.trim_end_matches('/').ends_with(':') || prefix.is_empty() {
            return false;
        }
        self.0.iter().any(|r| match prefix.strip_suffix('/') {
            // `x/` covers `x/…`, and `x` itself once a trailing slash is
            // folded away.
            Some(dir) => r == dir || r.starts_with(prefix),
            None => r.starts_with(prefix),
        })
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
            "hostile://x%23/../shifty",
            "hostile://a%2Fb/../shifty",
            "hostile://shi\tfty",
            " hostile://shifty\n",
            "hostile://ſhifty",
            "hostile://shifty?x",
            "hostile://%2573hifty",
        ] {
            assert!(
                Folded::new(spelling).names(&listed("hostile://shifty", false)),
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
            "other://shifty",
            "hostile://",
        ] {
            assert!(
                !Folded::new(other).names(&listed("hostile://shifty", false)),
                "{other}"
            );
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
            "hostile://x%2F../shifty/7",
        ] {
            assert!(
                Folded::new(spelling).is_under(&listed("hostile://shifty/", true)),
                "{spelling}"
            );
        }
        assert!(!Folded::new("hostile://shiftyx/7").is_under(&listed("hostile://shifty/", true)));
        assert!(!Folded::new("hostile://other/7").is_under(&listed("hostile://shifty/", true)));
        // A prefix of the scheme alone is a catch-all: it withholds
        // nothing by itself here (routing refuses what it governs).
        assert!(!Folded::new("hostile://x").is_under(&listed("hostile://", true)));
        assert!(!Folded::new("hostile://x").is_under(&listed("", true)));
        // A prefix ending in `.` or `#` keeps it: only what comes after is
        // under it.
        assert!(Folded::new("file:///srv/.env").is_under(&listed("file:///srv/.", true)));
        assert!(!Folded::new("file:///srvdata/x").is_under(&listed("file:///srv/.", true)));
        assert!(!Folded::new("doc://pages/x").is_under(&listed("doc://page#", true)));
    }
}
