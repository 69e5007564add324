use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
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
    automaton: Option<AhoCorasick>,
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
        let automaton = (!patterns.is_empty()).then(|| {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .kind(Some(AhoCorasickKind::DFA))
                .build(&patterns)
                .expect("patterns build an automaton")
        });
        Scrubber {
            automaton,
            longest,
            patterns: count,
        }
    }

    /// No secrets registered: scrubbing is a copy.
    pub fn is_empty(&self) -> bool {
        self.automaton.is_none()
    }

    /// How many byte patterns (all forms of all secrets) are matched.
    pub fn pattern_count(&self) -> usize {
        self.patterns
    }

    /// `text` with every registered value replaced; borrowed when there
    /// was nothing to replace (the common case costs one scan, no copy).
    pub fn scrub<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        let Some(ac) = &self.automaton else {
            return std::borrow::Cow::Borrowed(text);
        };
        let mut matches = ac.find_iter(text).peekable();
        if matches.peek().is_none() {
            return std::borrow::Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut written = 0;
        for m in matches {
            out.push_str(&text[written..m.start()]);
            out.push_str(REDACTED);
            written = m.end();
        }
        out.push_str(&text[written..]);
        std::borrow::Cow::Owned(out)
    }

    /// Whether `text` contains any registered value in any form.
    pub fn finds(&self, text: &[u8]) -> bool {
        self.automaton.as_ref().is_some_and(|ac| ac.is_match(text))
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
    // Encoders differ on which punctuation they leave alone: cover both the
    // RFC 3986 unreserved set and encoding everything but letters and digits.
    for strict in [false, true] {
        for upper in [true, false] {
            out.push(percent_encode_with(secret, upper, strict).into_bytes());
        }
    }
    if let Ok(text) = std::str::from_utf8(secret) {
        let json = serde_json::to_string(text).unwrap_or_default();
        out.push(json.trim_matches('"').as_bytes().to_vec());
    }
    out.retain(|p| !p.is_empty());
    out
}

#[cfg(test)]
fn percent_encode(bytes: &[u8], upper: bool) -> String {
    percent_encode_with(bytes, upper, false)
}

fn percent_encode_with(bytes: &[u8], upper: bool, strict: bool) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || (!strict && matches!(b, b'-' | b'_' | b'.' | b'~')) {
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
        let Some(ac) = &self.scrubber.automaton else {
            return chunk.to_vec();
        };
        self.held.extend_from_slice(chunk);
        let keep = self.scrubber.longest.saturating_sub(1);
        let mut cut = self.held.len().saturating_sub(keep);
        let mut out = Vec::with_capacity(self.held.len());
        let mut written = 0;
        for m in ac.find_iter(&self.held) {
            if m.start() >= cut {
                break;
            }
            out.extend_from_slice(&self.held[written..m.start()]);
            out.extend_from_slice(REDACTED.as_bytes());
            written = m.end();
            cut = cut.max(m.end());
        }
        let cut = cut.max(written);
        out.extend_from_slice(&self.held[written..cut]);
        self.held.drain(..cut);
        out
    }

    /// Ends the stream; returns the rest, scrubbed.
    pub fn finish(mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        match &self.scrubber.automaton {
            None => held,
            Some(ac) => {
                let mut out = Vec::with_capacity(held.len());
                ac.replace_all_with_bytes(&held, &mut out, |_, _, dst| {
                    dst.extend_from_slice(REDACTED.as_bytes());
                    true
                });
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";

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
            percent_encode_with(b, true, true),
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
