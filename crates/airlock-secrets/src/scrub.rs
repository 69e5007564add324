use crate::needles::Needles;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// What a secret becomes.
pub const REDACTED: &str = "[secret]";

/// The shortest encoded fragment worth matching: shorter ones would
/// redact innocent text by chance.
const MIN_FRAGMENT: usize = 6;

/// Replaces registered secret values, in every encoding, with `[secret]`.
#[derive(Clone)]
pub struct Scrubber {
    matcher: Option<Needles>,
    /// The forms as they read inside a JSON string, for a scan of a
    /// serialized message; `None` when escaping changes none of them.
    serialized: Option<Needles>,
    longest: usize,
    patterns: usize,
}

impl std::fmt::Debug for Scrubber {
    // Never prints the patterns: they are the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("patterns", &self.patterns)
            .finish()
    }
}

impl Scrubber {
    /// A scrubber for `secrets`. Values shorter than 4 bytes are refused
    /// by the caller's validation, not here: here they are matched raw only.
    pub fn new<S: AsRef<[u8]>>(secrets: &[S]) -> Scrubber {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        for s in secrets {
            let s = s.as_ref();
            if s.is_empty() {
                continue;
            }
            patterns.extend(forms(s));
        }
        patterns.sort();
        patterns.dedup();
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        let count = patterns.len();
        let matcher = (!patterns.is_empty()).then(|| Needles::new(&patterns));
        // A string that holds a form holds it escaped once more when the
        // message is serialized.
        let mut in_json = patterns.clone();
        in_json.extend(patterns.iter().filter_map(|p| json_escaped(p)));
        in_json.sort();
        in_json.dedup();
        let serialized = (in_json.len() > patterns.len()).then(|| Needles::new(&in_json));
        Scrubber {
            matcher,
            serialized,
            longest,
            patterns: count,
        }
    }

    /// No secrets registered: scrubbing is a copy.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// How many byte patterns (all forms of all secrets) are matched.
    pub fn pattern_count(&self) -> usize {
        self.patterns
    }

    /// `text` with every registered value replaced; borrowed when there
    /// was nothing to replace (the common case costs one scan, no copy).
    pub fn scrub<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        let Some(matcher) = &self.matcher else {
            return std::borrow::Cow::Borrowed(text);
        };
        let mut matches = matcher.iter(text.as_bytes()).peekable();
        if matches.peek().is_none() {
            return std::borrow::Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut written = 0;
        // Patterns are whole UTF-8 strings (or ASCII encodings of them), so
        // a match never starts or ends inside a character.
        for (start, end) in matches {
            out.push_str(&text[written..start]);
            out.push_str(REDACTED);
            written = end;
        }
        out.push_str(&text[written..]);
        std::borrow::Cow::Owned(out)
    }

    /// Every string inside `value` scrubbed: values and object keys alike,
    /// at any depth. A key that scrubs to one already present is kept
    /// apart with a `#2`, `#3`… suffix, so no entry is lost or merged.
    pub fn scrub_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.matcher.is_none() {
            return;
        }
        match value {
            Value::String(s) => {
                if let std::borrow::Cow::Owned(clean) = self.scrub(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.scrub_json(i)),
            Value::Object(map) => {
                let dirty = map.keys().any(|k| self.finds(k.as_bytes()));
                if dirty {
                    let old = std::mem::take(map);
                    for (key, v) in old {
                        let clean = self.scrub(&key).into_owned();
                        let mut unique = clean.clone();
                        let mut n = 2;
                        while map.contains_key(&unique) {
                            unique = format!("{clean}#{n}");
                            n += 1;
                        }
                        map.insert(unique, v);
                    }
                }
                map.values_mut().for_each(|v| self.scrub_json(v));
            }
            _ => {}
        }
    }

    /// Whether `text` contains any registered value in any form.
    pub fn finds(&self, text: &[u8]) -> bool {
        self.matcher
            .as_ref()
            .is_some_and(|m| m.find(text).is_some())
    }

    /// Whether a serialized JSON message holds, in any of its strings or
    /// keys, anything [`Scrubber::scrub_json`] would redact: when this is
    /// false, taking the message apart would change nothing.
    pub fn finds_in_serialized(&self, json: &[u8]) -> bool {
        match &self.serialized {
            Some(n) => n.find(json).is_some(),
            None => self.finds(json),
        }
    }

    /// A scrubber over a stream of chunks.
    pub fn stream(&self) -> StreamScrubber<'_> {
        StreamScrubber {
            scrubber: self,
            held: Vec::new(),
        }
    }
}

/// Every form a value may take in text that leaves.
fn forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![secret.to_vec()];
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        out.push(engine.encode(secret).into_bytes());
        // At other alignments: encode behind 1 or 2 filler bytes and keep
        // only the characters that depend on the secret's bits alone.
        for align in 1..3usize {
            let mut shifted = vec![0u8; align];
            shifted.extend_from_slice(secret);
            let encoded = engine.encode(&shifted);
            let first = (8 * align).div_ceil(6);
            let last = (8 * (align + secret.len())) / 6;
            if last > first && last <= encoded.len() && last - first >= MIN_FRAGMENT {
                out.push(encoded.as_bytes()[first..last].to_vec());
            }
        }
        // The aligned encoding without its final, partly-filled characters,
        // for a secret followed by more data in the same encoded string.
        let whole = (8 * secret.len()) / 6;
        let plain = engine.encode(secret);
        if whole >= MIN_FRAGMENT && whole < plain.len() {
            out.push(plain.as_bytes()[..whole].to_vec());
        }
    }
    // Encoders differ on which punctuation they leave alone: cover the
    // RFC 3986 unreserved set, encoding everything but letters and digits,
    // and encoding every byte.
    for keep in [Keep::Unreserved, Keep::Alphanumeric, Keep::Nothing] {
        for upper in [true, false] {
            out.push(percent_encode_with(secret, upper, keep).into_bytes());
        }
    }
    // Hex, as debugging output and byte dumps write it.
    out.push(hex::encode(secret).into_bytes());
    out.push(hex::encode_upper(secret).into_bytes());
    // Each form as it reads inside a JSON string: JSON text that a result
    // carries as a string.
    let escaped: Vec<Vec<u8>> = out.iter().filter_map(|f| json_escaped(f)).collect();
    out.extend(escaped);
    out.retain(|p| !p.is_empty());
    out
}

/// `form` as it reads between the quotes of a JSON string, if that differs.
fn json_escaped(form: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(form).ok()?;
    let json = serde_json::to_string(text).ok()?;
    let inner = &json[1..json.len() - 1];
    (inner != text).then(|| inner.as_bytes().to_vec())
}

#[cfg(test)]
fn percent_encode(bytes: &[u8], upper: bool) -> String {
    percent_encode_with(bytes, upper, Keep::Unreserved)
}

/// What a percent-encoder leaves as it is.
#[derive(Clone, Copy)]
enum Keep {
    /// RFC 3986's unreserved characters.
    Unreserved,
    Alphanumeric,
    Nothing,
}

fn percent_encode_with(bytes: &[u8], upper: bool, keep: Keep) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        let kept = match keep {
            Keep::Unreserved => b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'),
            Keep::Alphanumeric => b.is_ascii_alphanumeric(),
            Keep::Nothing => false,
        };
        if kept {
            out.push(b as char);
        } else if upper {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

/// Scrubs a stream chunk by chunk. It holds back the last few bytes of each
/// chunk (one less than the longest pattern) until it knows they do not
/// begin a secret that the next chunk completes.
pub struct StreamScrubber<'a> {
    scrubber: &'a Scrubber,
    held: Vec<u8>,
}

impl StreamScrubber<'_> {
    /// Feeds one chunk; returns what can safely be passed on now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(matcher) = &self.scrubber.matcher else {
            return chunk.to_vec();
        };
        self.held.extend_from_slice(chunk);
        let keep = self.scrubber.longest.saturating_sub(1);
        let mut cut = self.held.len().saturating_sub(keep);
        let mut out = Vec::with_capacity(self.held.len());
        let mut written = 0;
        for (start, end) in matcher.iter(&self.held) {
            if start >= cut {
                break;
            }
            out.extend_from_slice(&self.held[written..start]);
            out.extend_from_slice(REDACTED.as_bytes());
            written = end;
            cut = cut.max(end);
        }
        let cut = cut.max(written);
        out.extend_from_slice(&self.held[written..cut]);
        self.held.drain(..cut);
        out
    }

    /// Ends the stream; returns the rest, scrubbed.
    pub fn finish(mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        match &self.scrubber.matcher {
            None => held,
            Some(matcher) => {
                let mut out = Vec::with_capacity(held.len());
                let mut written = 0;
                for (start, end) in matcher.iter(&held) {
                    out.extend_from_slice(&held[written..start]);
                    out.extend_from_slice(REDACTED.as_bytes());
                    written = end;
                }
                out.extend_from_slice(&held[written..]);
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";

    #[test]
    fn json_keys_and_values_are_scrubbed_at_every_depth() {
        let s = Scrubber::new(&[SECRET]);
        let mut v = serde_json::json!({
            SECRET: 1,
            "a": [{"x": SECRET, format!("k-{SECRET}"): {"deep": [format!("v {SECRET}")]}}],
            "REDACTED-clash": {SECRET: true, "[secret]": false},
            "plain": "nothing here",
        });
        s.scrub_json(&mut v);
        let text = v.to_string();
        assert!(!text.contains(SECRET), "{text}");
        assert_eq!(v["plain"], "nothing here");
        // Two keys that scrub alike are both kept.
        assert_eq!(v["REDACTED-clash"].as_object().unwrap().len(), 2, "{text}");
        assert_eq!(v.as_object().unwrap().len(), 4, "{text}");
    }

    fn all_encodings(secret: &str) -> Vec<String> {
        let b = secret.as_bytes();
        let mut v = vec![
            secret.to_string(),
            STANDARD.encode(b),
            STANDARD_NO_PAD.encode(b),
            URL_SAFE.encode(b),
            URL_SAFE_NO_PAD.encode(b),
            percent_encode(b, true),
            percent_encode(b, false),
            percent_encode_with(b, true, Keep::Alphanumeric),
        ];
        // Embedded at every alignment inside a longer base64 string.
        for prefix in ["", "a", "ab", "abc"] {
            for engine in [&STANDARD, &URL_SAFE_NO_PAD] {
                v.push(engine.encode(format!("{prefix}{secret}!tail").as_bytes()));
            }
        }
        v
    }

    #[test]
    fn every_encoding_is_redacted() {
        let s = Scrubber::new(&[SECRET]);
        for (i, enc) in all_encodings(SECRET).iter().enumerate() {
            let text = format!("before {enc} after");
            let out = s.scrub(&text);
            assert!(out.contains(REDACTED), "form {i} survived: {out}");
            assert!(!out.contains(SECRET), "form {i}");
        }
    }

    #[test]
    fn json_escaped_form_is_redacted() {
        let secret = "pa\"ss\\word-1234";
        let s = Scrubber::new(&[secret]);
        let text = serde_json::json!({"echo": secret}).to_string();
        let out = s.scrub(&text);
        assert!(!out.contains("ss\\\\word"), "{out}");
        assert!(out.contains(REDACTED), "{out}");
    }

    #[test]
    fn innocent_text_is_untouched() {
        let s = Scrubber::new(&[SECRET]);
        let text = "nothing secret here, just base64 aGVsbG8gd29ybGQ= and %20";
        assert_eq!(s.scrub(text), text);
    }

    #[test]
    fn secrets_split_across_chunks_are_caught() {
        let s = Scrubber::new(&[SECRET, "another-secret-value"]);
        let text = format!(
            "x{SECRET}y and {} and another-secret-value z",
            STANDARD.encode(SECRET)
        );
        for size in 1..=text.len() {
            let mut stream = s.stream();
            let mut out = Vec::new();
            for chunk in text.as_bytes().chunks(size) {
                out.extend(stream.push(chunk));
            }
            out.extend(stream.finish());
            let out = String::from_utf8(out).unwrap();
            assert_eq!(out, s.scrub(&text), "chunk size {size}");
            assert!(!out.contains(SECRET));
        }
    }

    #[test]
    fn debug_never_prints_a_secret() {
        let s = Scrubber::new(&[SECRET]);
        assert!(!format!("{s:?}").contains("sk_live"));
    }
}
