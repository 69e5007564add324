//! airlock's configuration.
//!
//! One model ([`Config`]) read from two formats:
//!
//! - the TOML file a person writes for airlock (see `docs/config.md`), where
//!   every key is known and an unknown one is an error;
//! - the `mcpServers` JSON that Claude Desktop, Claude Code and Cursor already
//!   use (and VS Code's `servers`), so an existing setup runs unchanged.
//!
//! Every error is a [`ConfigError`] naming the file, line, column, key and a
//! fix. This crate does no I/O beyond reading the file it is given and knows
//! nothing about MCP; the hub decides what to do with a valid config.

mod credentials;
mod error;
mod import;
mod model;
mod names;
mod raw;
mod rules;
mod store;
mod syntax;

pub use rules::{compile_glob, compile_regex};

pub use credentials::looks_like_credential;
pub use credentials::names_a_credential;
pub use error::ConfigError;
pub use import::{ClientKind, ImportOutput, import_json};
pub use model::{
    Action, ApprovalPage, ArgCondition, ArgTest, CodeLimits, CodeMode, Config, Confinement,
    HubSettings, Layer, NetworkAccess, OAuthSettings, Protocol, ResourceIndicator, RuleConfig,
    Sessions, SourceConfig, Transport,
};
pub use names::{SOURCE_NAME_RULE, validate_source_name};
pub use store::{DEFAULT_TENANT, PostgresSettings, StoreSettings, check_tenant, check_url};

use std::path::Path;

/// Which of the two accepted formats a file is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Toml,
    ClientJson,
}

impl Format {
    /// `.json` files are client configs; everything else is airlock TOML.
    pub fn of(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::ClientJson,
            _ => Format::Toml,
        }
    }
}

/// Reads and validates a config file in either format, and the managed
/// policy file it names, if any.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, &e))?;
    let mut config = parse(path, &text, Format::of(path))?;
    if let Some(managed) = config.hub.managed_policy.clone() {
        config.managed_rules = load_managed(&managed)?;
    }
    Ok(config)
}

/// Reads an administrator's managed policy file: `[[rules]]` only.
pub fn load_managed(path: &Path) -> Result<Vec<RuleConfig>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, &e))?;
    rules::parse_managed(path, &text)
}

/// Parses config text; `path` is used for messages and to resolve relative paths.
pub fn parse(path: &Path, text: &str, format: Format) -> Result<Config, ConfigError> {
    match format {
        Format::Toml => raw::parse_toml(path, text),
        Format::ClientJson => import::parse_client_json(path, text).map(|out| out.config),
    }
}
