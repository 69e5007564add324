//! The scrubber against a naive reference and against itself: on text of
//! secrets between other characters it does what replacing each secret
//! (longest first) would; no secret survives in the encodings it claims;
//! and scrubbing a stream cut anywhere, through the middle of a secret
//! included, gives what scrubbing it whole does.

use airlock_secrets::{REDACTED, Scrubber};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;

fn secrets() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec("[A-Za-z0-9]{8,24}", 1..4)
}

/// Characters no secret has: what stands between them in the text.
fn filler() -> impl Strategy<Value = String> {
    "[ .,;:!~éλ\n\"{}]{1,6}"
}

/// Text made of filler and secrets, each secret between filler.
fn text_of(secrets: Vec<String>) -> impl Strategy<Value = (Vec<String>, String)> {
    let n = secrets.len();
    let pieces = proptest::collection::vec((filler(), 0..n, any::<bool>()), 0..8);
    (Just(secrets), pieces, filler()).prop_map(|(secrets, pieces, end)| {
        let mut text = String::new();
        for (fill, which, with_secret) in pieces {
            text.push_str(&fill);
            if with_secret {
                text.push_str(&secrets[which]);
            }
        }
        text.push_str(&end);
        (secrets, text)
    })
}

fn reference(secrets: &[String], text: &str) -> String {
    let mut longest_first: Vec<&String> = secrets.iter().collect();
    longest_first.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for s in longest_first {
        out = out.replace(s.as_str(), REDACTED);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn scrubbing_does_what_replacing_each_secret_does((secrets, text) in secrets().prop_flat_map(text_of)) {
        let scrubber = Scrubber::new(&secrets);
        prop_assert_eq!(scrubber.scrub(&text).into_owned(), reference(&secrets, &text));
    }

    #[test]
    fn no_secret_survives_in_an_encoding_it_is_scrubbed_in(
        secret in "[A-Za-z0-9]{8,24}",
        before in "[A-Za-z0-9]{0,5}",
        after in "[A-Za-z0-9]{0,5}",
    ) {
        let scrubber = Scrubber::new(&[secret.as_str()]);
        // Base64 of the secret inside more data, at every alignment.
        let encoded = STANDARD.encode(format!("{before}{secret}{after}"));
        let out = scrubber.scrub(&encoded).into_owned();
        let decoded = STANDARD.decode(out.as_bytes()).ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        prop_assert!(!decoded.contains(&secret), "{} survived as {}", secret, out);
        // Percent-encoded byte by byte, and hex, either case.
        let percent: String = secret.bytes().map(|b| format!("%{b:02X}")).collect();
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        for form in [percent.clone(), percent.to_lowercase(), hex.clone(), hex.to_uppercase()] {
            let scrubbed = scrubber.scrub(&format!("x={form}&")).into_owned();
            prop_assert!(!scrubbed.contains(&form), "{} survived as {}", secret, scrubbed);
        }
    }

    #[test]
    fn a_stream_cut_anywhere_is_scrubbed_as_if_whole(
        (secrets, text) in secrets().prop_flat_map(text_of),
        cuts in proptest::collection::vec(0usize..64, 0..6),
    ) {
        let scrubber = Scrubber::new(&secrets);
        let bytes = text.as_bytes();
        let mut at: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
        at.push(bytes.len());
        at.sort_unstable();
        let mut stream = scrubber.stream();
        let mut out = Vec::new();
        let mut from = 0;
        for to in at {
            out.extend(stream.push(&bytes[from..to]));
            from = to;
        }
        out.extend(stream.finish());
        prop_assert_eq!(String::from_utf8(out).unwrap(), scrubber.scrub(&text).into_owned());
    }
}

/// What the scrubber says of a text agrees with what scrubbing it does.
#[test]
fn what_the_scrubber_finds_is_what_it_scrubs() {
    let none = Scrubber::new::<&str>(&[]);
    assert!(none.is_empty());
    assert_eq!(none.pattern_count(), 0);
    assert!(!none.finds(b"anything"));
    let secret = r#"tok"en\value"#;
    let scrubber = Scrubber::new(&[secret]);
    assert!(!scrubber.is_empty());
    assert!(scrubber.pattern_count() > 1, "raw and encoded forms");
    assert!(scrubber.finds(format!("x {secret} y").as_bytes()));
    assert!(!scrubber.finds(b"nothing of it here"));
    // A string holding JSON text holds the value escaped once; serialized,
    // the message holds it escaped twice, and is still found.
    let inner = serde_json::json!({ "text": secret }).to_string();
    let message = serde_json::to_vec(&serde_json::json!({ "result": inner })).unwrap();
    assert!(
        !scrubber.finds(&message),
        "escaped twice, no form of it is there as is"
    );
    assert!(scrubber.finds_in_serialized(&message));
    assert!(!scrubber.finds_in_serialized(br#"{"text":"clean"}"#));
    // Keys are scrubbed too, two that scrub alike kept apart.
    let mut value = serde_json::json!({ secret: 1, format!("{secret}!"): 2, "[secret]": 3 });
    scrubber.scrub_json(&mut value);
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 3, "{value}");
    assert!(!value.to_string().contains("tok"), "{value}");
}
