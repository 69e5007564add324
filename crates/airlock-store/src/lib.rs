//! airlock's durable state.
//!
//! Everything the hub must remember across restarts goes through the
//! [`Store`] trait: the catalog of what each source offered when last seen,
//! each source's last known status, the contracts a person reviewed, and
//! the approval ledger, the standing rules people created, the commands
//! they approved, the hash-chained audit log of every decision and
//! outcome, and code mode's runs with their journals. The local backend is embedded SQLite ([`SqliteStore`]) in
//! the user's data directory; a team's replicas share PostgreSQL
//! ([`PgStore`]), one tenant per hub.
//!
//! This crate knows nothing about MCP beyond storing definitions as JSON.

use airlock_common::now_ms;

mod audit_chain;
pub mod ledger;
pub mod postgres;
pub mod runs;
mod sqlite;

pub use postgres::{PgStore, PgTarget};
pub use sqlite::SqliteStore;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// The server's own words, once: not a source as well, so that error
    /// chains do not print them twice.
    #[error("PostgreSQL store error: {}", postgres_error(.0))]
    Postgres(tokio_postgres::Error),
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// The store cannot be used as configured (a schema it does not know,
    /// a role row-level security does not hold, a bad setting).
    #[error("{0}")]
    Refused(String),
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
    #[error("the audit log could not be written: {0}")]
    AuditUnwritable(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        StoreError::Postgres(e)
    }
}

/// A PostgreSQL error with the server's own message when there is one
/// (tokio-postgres alone says only "db error").
fn postgres_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

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

/// What an audit record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// Policy decided a call: allow, ask or deny.
    Decision,
    /// A call that ran ended: ok, tool_error or failed.
    Outcome,
    /// Records that could not be written (the disk was full or failing):
    /// how many, and when. Its presence makes `verify` report the log
    /// damaged, since what those records said is gone.
    Gap,
}

/// One record of the audit log. Records are appended in order and chained:
/// each one's `hash` covers its content and the previous record's hash, so
/// an edited, reordered or deleted record breaks the chain from there on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub at_ms: i64,
    pub kind: AuditKind,
    /// Ties a decision to its outcome.
    pub call_id: String,
    pub source: String,
    pub connection: String,
    /// The exposed tool name.
    pub tool: String,
    /// `allow`, `ask` or `deny` for decisions; empty for outcomes.
    pub decision: String,
    /// Which evaluation step decided (`deny`, `contract`, `rule`, `default`).
    pub step: String,
    /// The rule's layer and `file:line`, when a rule decided.
    pub layer: String,
    pub rule: String,
    pub reason: String,
    /// `sha256:` of the canonical arguments, and a size-capped copy.
    pub args_digest: String,
    pub args_excerpt: String,
    /// `ok`, `tool_error`, `failed` for outcomes; empty for decisions.
    pub outcome: String,
    pub duration_us: i64,
    pub detail: String,
}

impl AuditRecord {
    /// A record of `kind` about one call (`call_id`, empty for none) at
    /// `at_ms`, every other field empty: the one place records start, so
    /// each writer names only what it knows.
    pub fn new(kind: AuditKind, call_id: impl Into<String>, at_ms: i64) -> AuditRecord {
        AuditRecord {
            at_ms,
            kind,
            call_id: call_id.into(),
            source: String::new(),
            connection: String::new(),
            tool: String::new(),
            decision: String::new(),
            step: String::new(),
            layer: String::new(),
            rule: String::new(),
            reason: String::new(),
            args_digest: String::new(),
            args_excerpt: String::new(),
            outcome: String::new(),
            duration_us: 0,
            detail: String::new(),
        }
    }
}

/// An audit record as stored: with its position and chain hashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredAudit {
    pub seq: i64,
    #[serde(flatten)]
    pub record: AuditRecord,
    pub prev_hash: String,
    pub hash: String,
}

/// What `verify_audit` found.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditCheck {
    /// Every record checks out; `head` is the last hash (keep it elsewhere
    /// to detect a truncated tail later).
    Intact { records: u64, head: String },
    /// The first record that does not check out, and why.
    Broken { seq: i64, why: String },
}

/// A person's approval of one tool's contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PinnedContract {
    pub source: String,
    /// The upstream tool name.
    pub tool: String,
    pub digest: String,
    /// The definition as reviewed, to show what changed next time.
    pub definition: serde_json::Value,
    pub reviewed_at_ms: i64,
    pub reviewer: String,
}

/// Filters for reading the audit log; empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub tool: Option<String>,
    pub source: Option<String>,
    pub decision: Option<String>,
    pub since_ms: Option<i64>,
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

    /// Appends to the audit log. May return before the record is on disk
    /// (see [`Store::flush`]); records keep the order of the calls.
    fn record_audit(&self, record: AuditRecord) -> Result<()>;
    /// Appends one record and returns only once it is committed; an error
    /// means it is not in the log (a call must then not run).
    fn record_audit_committed(&self, record: AuditRecord) -> Result<()>;
    /// Blocks until every record accepted so far is durable.
    fn flush(&self) -> Result<()>;
    /// Newest first, at most `limit`.
    fn audit(&self, filter: &AuditFilter, limit: usize) -> Result<Vec<StoredAudit>>;

    /// Digests a person approved, by (source, upstream tool name).
    fn reviewed_contracts(&self) -> Result<std::collections::HashMap<(String, String), String>>;
    /// The definitions a person approved, by (source, upstream tool name):
    /// what clients are shown of a reviewed tool.
    fn reviewed_definitions(
        &self,
    ) -> Result<std::collections::HashMap<(String, String), serde_json::Value>>;
    /// The contract a person approved for one tool, with its definition.
    fn pinned_contract(&self, source: &str, tool: &str) -> Result<Option<PinnedContract>>;
    /// A number that changes whenever a contract is pinned, so a cache of
    /// [`Store::reviewed_contracts`] can tell when to reload.
    fn contracts_generation(&self) -> Result<i64>;
    /// Checks the whole audit chain.
    fn verify_audit(&self) -> Result<AuditCheck>;

    /// A call that asks: a pending row holding the frozen call, expiring
    /// after `ttl_ms`. Also sweeps arguments of old terminal rows.
    fn ledger_create(
        &self,
        call: &ledger::FrozenCall,
        ttl_ms: i64,
        retention_ms: i64,
    ) -> Result<ledger::Pending>;
    /// Where a pending row stands now.
    fn ledger_look(&self, pending: ledger::Pending) -> Result<ledger::Waited>;
    /// Where approval `id` stands now, for a call that learns its id from
    /// an answer rather than by waiting (a sealed retry). Two hubs may both
    /// hold an [`ledger::Approved`] for one row; only one claim wins.
    fn ledger_waited(&self, id: &str) -> Result<ledger::Waited>;
    /// pending → expired, unless a decision committed first.
    fn ledger_expire(&self, pending: ledger::Pending) -> Result<ledger::Expiry>;
    /// approved → executing; `None` if it was already claimed.
    fn ledger_claim(&self, approved: ledger::Approved) -> Result<Option<ledger::Executing>>;
    /// approved → failed without running (policy denies it now).
    fn ledger_refuse(&self, approved: ledger::Approved, why: &str) -> Result<()>;
    /// executing → executed | failed.
    fn ledger_finish(&self, executing: ledger::Executing, ok: bool, detail: &str) -> Result<()>;
    /// Rows owned by a hub that is no longer running (none of `running`):
    /// executing → failed (never re-run), pending or approved → expired.
    /// Rows of running hubs are theirs to finish.
    fn ledger_recover(&self, running: &[String]) -> Result<(usize, usize)>;
    /// Live pending rows (or every row with `all`), oldest first.
    fn ledger_list(&self, all: bool) -> Result<Vec<ledger::ApprovalRow>>;
    /// One approval row by id, in whatever state.
    fn ledger_row(&self, id: &str) -> Result<Option<ledger::ApprovalRow>>;

    // Code mode: runs and their journals (see [`runs`]).

    /// Records a new run as `running`; runs and journals older than
    /// `retention_ms` that are no longer running are deleted on the way.
    fn run_create(&self, run: &runs::NewRun, retention_ms: i64) -> Result<()>;
    fn run_row(&self, id: &str) -> Result<Option<runs::RunRow>>;
    /// `paused → running` for `principal`'s run, once: none when the run
    /// is not paused (another resume took it, or it ended) or not theirs.
    fn run_take(&self, id: &str, principal: &str) -> Result<Option<runs::RunRow>>;
    /// Sets where a run is, and why.
    fn run_set(&self, id: &str, state: runs::RunState, detail: &str) -> Result<()>;
    /// The newest runs first.
    fn runs_list(&self, limit: usize) -> Result<Vec<runs::RunRow>>;
    fn journal(&self, run: &str) -> Result<Vec<runs::JournalEntry>>;
    /// Records that call `seq` was sent on; fails if the journal has it.
    fn journal_start(&self, run: &str, seq: u32, tool: &str, args_digest: &str) -> Result<()>;
    /// Call `seq` settled with `reply` (scrubbed JSON).
    fn journal_settle(&self, run: &str, seq: u32, reply: &str) -> Result<()>;
    /// Call `seq` waits for approval `approval`.
    fn journal_pause(&self, run: &str, seq: u32, approval: &str) -> Result<()>;

    /// Rules people created by choosing "always allow".
    fn standing_rules(&self) -> Result<Vec<ledger::StandingRule>>;

    /// The command fingerprint a person approved for a stdio source.
    fn approved_command(&self, source: &str) -> Result<Option<String>>;
}

/// Recording a person's review. Kept apart from [`Store`] so that code
/// holding only a `Store` (everything an MCP client can reach) has no way
/// to pin a contract; only the CLI's review command uses this.
pub trait Reviews {
    fn pin_contract(&self, contract: &PinnedContract) -> Result<()>;
    /// Approves the exact command a stdio source runs.
    fn pin_command(&self, source: &str, fingerprint: &str, reviewer: &str) -> Result<()>;
}
