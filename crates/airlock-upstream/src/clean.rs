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
    let mut json = serde_json::to_value(&value).map_err(|e| e.to_string())?;
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
