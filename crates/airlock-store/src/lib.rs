//! airlock's durable state.
//!
//! Everything the hub must remember across restarts goes through the
//! [`Store`] trait: the catalog of what each source offered when last seen,
//! each source's last known status, and the call log. The embedded backend is
//! SQLite ([`SqliteStore`]) in the user's data directory; a hosted backend
//! (PostgreSQL with row-level security) implements the same trait.
//!
//! This crate knows nothing about MCP beyond storing definitions as JSON.

mod sqlite;

pub use sqlite::SqliteStore;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store database error: {0}")]
    Database(#[from] rusqlite::Error),
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the store at {path} has schema version {found}, newer than this airlock understands ({supported}); upgrade airlock"
    )]
    TooNew {
        path: String,
        found: i64,
        supported: i64,
    },
    #[error("the store's writer has stopped; the hub is shutting down")]
    WriterGone,
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// What kind of definition a catalog entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatalogKind {
    Tool,
    Resource,
    ResourceTemplate,
    Prompt,
}

impl CatalogKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogKind::Tool => "tool",
            CatalogKind::Resource => "resource",
            CatalogKind::ResourceTemplate => "resource_template",
            CatalogKind::Prompt => "prompt",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "tool" => CatalogKind::Tool,
            "resource" => CatalogKind::Resource,
            "resource_template" => CatalogKind::ResourceTemplate,
            "prompt" => CatalogKind::Prompt,
            _ => return None,
        })
    }
}

/// One definition as the source last published it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogEntry {
    pub source: String,
    pub kind: CatalogKind,
    /// The upstream's own name (or URI for resources), not the exposed one.
    pub name: String,
    /// The full definition as JSON, exactly as received.
    pub definition: serde_json::Value,
    /// Unix milliseconds when this definition was last seen.
    pub seen_at_ms: i64,
}

/// Where a source stands, as last reported by a running hub.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceStatus {
    pub source: String,
    /// `starting`, `ready`, `failed`, `restarting`, `stopped`.
    pub state: String,
    /// Why, in words a person can act on (empty when ready).
    pub detail: String,
    pub updated_at_ms: i64,
}

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The upstream answered with a result (which may itself be `isError`).
    Ok,
    /// The upstream answered with a tool error result.
    ToolError,
    /// The call never produced an answer: timeout, upstream gone, refused.
    Failed,
}

impl CallOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::ToolError => "tool_error",
            CallOutcome::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "ok" => CallOutcome::Ok,
            "tool_error" => CallOutcome::ToolError,
            _ => CallOutcome::Failed,
        }
    }
}

/// One entry of the call log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub started_at_ms: i64,
    pub duration_us: i64,
    /// Exposed name the client used.
    pub tool: String,
    pub source: String,
    pub outcome: CallOutcome,
    /// Error text for `failed` calls; empty otherwise.
    pub detail: String,
}

/// The durable state of one hub (or, hosted, of one tenant).
pub trait Store: Send + Sync + 'static {
    /// Replaces everything of `kind` known for `source` with `entries`
    /// (name, definition), in one transaction.
    fn replace_catalog(
        &self,
        source: &str,
        kind: CatalogKind,
        entries: &[(String, serde_json::Value)],
    ) -> Result<()>;
    /// All definitions last seen for `source`, or for every source.
    fn catalog(&self, source: Option<&str>) -> Result<Vec<CatalogEntry>>;

    fn set_source_status(&self, status: &SourceStatus) -> Result<()>;
    fn source_statuses(&self) -> Result<Vec<SourceStatus>>;

    /// Appends to the call log. May return before the row is on disk; see
    /// [`Store::flush`].
    fn record_call(&self, record: CallRecord) -> Result<()>;
    /// Blocks until every record accepted so far is durable.
    fn flush(&self) -> Result<()>;
    /// Newest first.
    fn recent_calls(&self, limit: usize) -> Result<Vec<CallRecord>>;
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
