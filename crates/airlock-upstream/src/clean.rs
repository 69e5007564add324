//! Everything a source says passes through here once, on arrival, before
//! anything else in airlock sees it: every string of every message (lists,
//! results, errors, requests to the client, notifications), object keys
//! included, with every known secret value redacted. What the hub shows,
//! stores or logs downstream of this point is already clean.

use rmcp::ErrorData;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ports::Secrets;

/// `value` with every string inside it scrubbed. Fails only if the scrubbed
/// form no longer fits the protocol type (a secret equal to a field name):
/// the caller then withholds the message.
pub(crate) fn cleaned<T: Serialize + DeserializeOwned>(
    secrets: &dyn Secrets,
    value: T,
) -> Result<T, String> {
    if !secrets.active() {
        return Ok(value);
    }
    // One scan of the serialized message: the same strings, escaped as
    // every form is also registered. Only a message that holds a secret is
    // taken apart string by string.
    let bytes = serde_json::to_vec(&value).map_err(|e| e.to_string())?;
    if !secrets.finds_in_serialized(&bytes) {
        return Ok(value);
    }
    let mut json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    secrets.scrub_json(&mut json);
    serde_json::from_value(json)
        .map_err(|e| format!("it could not be scrubbed, so it was withheld ({e})"))
}

/// An error from the source, scrubbed (message and data); one that cannot
/// be scrubbed is replaced by one that says so.
pub(crate) fn cleaned_error(secrets: &dyn Secrets, error: ErrorData) -> ErrorData {
    cleaned(secrets, error).unwrap_or_else(|why| {
        ErrorData::internal_error(format!("airlock: the source's error: {why}"), None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_secrets::Scrubber;
    use serde_json::{Value, json};

    struct Known(Scrubber);

    impl crate::ports::Vault for Known {
        fn get(&self, _: &str) -> Result<Option<String>, String> {
            Ok(None)
        }
        fn set(&self, _: &str, _: &str) -> Result<(), String> {
            Err("read-only".into())
        }
        fn get_note(&self, _: &str) -> Result<Option<String>, String> {
            Ok(None)
        }
        fn set_note(&self, _: &str, _: &str) -> Result<(), String> {
            Err("read-only".into())
        }
        fn remove(&self, _: &str) -> Result<bool, String> {
            Ok(false)
        }
        fn describe(&self) -> String {
            "nothing".into()
        }
        fn learn(&self, _: &str) {}
        fn lock_dir(&self) -> std::path::PathBuf {
            std::env::temp_dir()
        }
    }

    impl Secrets for Known {
        fn resolve(&self, text: &str) -> Result<String, String> {
            Ok(text.to_string())
        }
        fn scrub(&self, text: &str) -> String {
            self.0.scrub(text).into_owned()
        }
        fn scrub_json(&self, value: &mut Value) {
            self.0.scrub_json(value)
        }
        fn finds_in_serialized(&self, json: &[u8]) -> bool {
            self.0.finds_in_serialized(json)
        }
        fn active(&self) -> bool {
            !self.0.is_empty()
        }
    }

    /// The one-scan shortcut must never let through what taking the message
    /// apart would have caught: secrets that JSON escapes, placed raw,
    /// escaped once (JSON text inside a string) or twice, in values and keys.
    #[test]
    fn a_message_that_holds_a_secret_in_any_spelling_is_taken_apart() {
        let secrets = [
            "pa\"ss\\word-0001",
            "line\nbreak\ttab-0002",
            "plain-secret-0003",
            "ctl\u{1}byte-0004",
        ];
        let known = Known(Scrubber::new(&secrets));
        for secret in secrets {
            let once = serde_json::to_string(secret).unwrap();
            let twice = serde_json::to_string(&once).unwrap();
            for (depth, planted) in [secret.to_string(), once, twice].into_iter().enumerate() {
                for message in [
                    json!({"text": format!("before {planted} after")}),
                    json!({"deep": [{format!("k {planted}"): 1}]}),
                ] {
                    let out = cleaned(&known, message.clone()).unwrap();
                    let mut walked = message.clone();
                    known.0.scrub_json(&mut walked);
                    assert_eq!(out, walked, "{planted:?} in {message}");
                    if depth < 2 {
                        assert!(out.to_string().contains("[secret]"), "{planted:?}: {out}");
                    }
                }
            }
        }
        // A message without one is returned as it came.
        let clean = json!({"text": "nothing here", "n": 1.5});
        assert_eq!(cleaned(&known, clean.clone()).unwrap(), clean);
    }
}
