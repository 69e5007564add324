//! TOML syntax and shape errors, with the key they are at and a fix: the
//! keys each table accepts, and the error a bad file gets. Shared by the
//! config file's parser and the managed-policy parser.

use std::path::Path;

use crate::error::{ConfigError, closest};

const HUB_KEYS: &[&str] = &[
    "call_timeout",
    "connect_timeout",
    "max_message_bytes",
    "allow_non_loopback",
    "managed_policy",
    "approval_wait",
    "approval_ttl",
    "approval_retention",
    "allowed_programs",
    "approval_page",
    "code_mode",
    "code_memory_mib",
    "code_cpu",
    "code_output_kib",
    "code_calls",
    "code_runs",
    "code_time",
];
const SOURCE_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "call_timeout",
    "prefix",
    "trusted",
    "connection",
    "allow_private",
    "quote_output",
    "protocol",
    "sessions",
    "oauth",
    "confine",
];
const CONFINE_KEYS: &[&str] = &[
    "read",
    "write",
    "network",
    "memory_mib",
    "processes",
    "open_files",
];
const OAUTH_KEYS: &[&str] = &[
    "client_id",
    "client_secret",
    "client_metadata_url",
    "scopes",
    "resource",
];
const TOP_KEYS: &[&str] = &["hub", "store", "sources", "rules"];
const STORE_KEYS: &[&str] = &["url", "tenant", "password"];
const RULE_KEYS: &[&str] = &[
    "action",
    "source",
    "tool",
    "connection",
    "pin",
    "when",
    "for_future",
];
const CONDITION_KEYS: &[&str] = &["pointer", "glob", "equals", "regex"];

pub(crate) fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let offset = e.span().map(|s| s.start);
    let message = e.message().trim().to_string();
    let header = offset
        .map(|o| table_header_before(text, o))
        .unwrap_or_default();
    let word = offset.map(|o| key_at(text, o)).filter(|w| !w.is_empty());
    let key = match (&word, header.is_empty()) {
        (Some(w), false) => Some(format!("{header}.{w}")),
        (Some(w), true) => Some(w.clone()),
        (None, false) => Some(header.clone()),
        (None, true) => None,
    };
    let fix = if let Some(unknown) = message
        .strip_prefix("unknown field `")
        .and_then(|r| r.split('`').next())
    {
        let known = if header.is_empty() {
            TOP_KEYS
        } else if header == "hub" {
            HUB_KEYS
        } else if header == "store" {
            STORE_KEYS
        } else if header == "rules.when" {
            CONDITION_KEYS
        } else if header == "rules" {
            RULE_KEYS
        } else if header.ends_with(".oauth") {
            OAUTH_KEYS
        } else if header.ends_with(".confine") {
            CONFINE_KEYS
        } else {
            SOURCE_KEYS
        };
        match closest(unknown, known) {
            Some(k) => format!("did you mean `{k}`? (known keys: {})", known.join(", ")),
            None => format!("remove it; known keys here: {}", known.join(", ")),
        }
    } else if message.contains("invalid type") {
        "check the value's type against docs/config.md (strings are quoted, lists use [ ])".into()
    } else {
        "fix the TOML syntax at this position (see docs/config.md for examples)".into()
    };
    let message = message.lines().next().unwrap_or("invalid TOML").to_string();
    ConfigError::at(path, text, offset, key, message, fix)
}

fn table_header_before(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    text[..offset]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && l.ends_with(']'))
        .map(|l| l.trim_matches(['[', ']']).trim().to_string())
        .unwrap_or_default()
}

/// The key an error at `offset` is about: the word there, or, where the
/// offset is in a value (`key = <here>`), the key that value belongs to.
fn key_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_start = text
        .get(..offset)
        .and_then(|t| t.rfind('\n'))
        .map_or(0, |i| i + 1);
    let before = text.get(line_start..offset).unwrap_or("");
    match before.rfind('=') {
        Some(eq) => {
            let lhs = &before[..eq];
            let lhs = lhs.rsplit(['{', ',']).next().unwrap_or(lhs);
            lhs.trim().trim_matches(['"', '\'']).to_string()
        }
        None => word_at(text, offset),
    }
}

fn word_at(text: &str, offset: usize) -> String {
    text.get(offset..)
        .unwrap_or("")
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect()
}
