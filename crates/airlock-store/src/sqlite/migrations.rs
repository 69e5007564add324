//! Forward-only schema migrations, tracked in `PRAGMA user_version`.
//!
//! Each entry moves the schema from version `i` to `i + 1` and runs in one
//! transaction with the version bump, so a crash mid-migration leaves the
//! previous version intact. Never edit a shipped entry; append a new one.

use std::path::Path;

use rusqlite::Connection;

use crate::{Result, StoreError};

const MIGRATIONS: &[&str] = &[
    // 1: catalog, source status, call log.
    "CREATE TABLE catalog (
        source      TEXT NOT NULL,
        kind        TEXT NOT NULL,
        name        TEXT NOT NULL,
        definition  TEXT NOT NULL,
        seen_at_ms  INTEGER NOT NULL,
        PRIMARY KEY (source, kind, name)
    );
    CREATE TABLE source_status (
        source        TEXT PRIMARY KEY,
        state         TEXT NOT NULL,
        detail        TEXT NOT NULL,
        updated_at_ms INTEGER NOT NULL
    );
    CREATE TABLE call_log (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at_ms INTEGER NOT NULL,
        duration_us   INTEGER NOT NULL,
        tool          TEXT NOT NULL,
        source        TEXT NOT NULL,
        outcome       TEXT NOT NULL,
        detail        TEXT NOT NULL
    );
    CREATE INDEX call_log_started ON call_log (started_at_ms);",
    // 2: reviewed contracts; the hash-chained audit log replaces the call log.
    "CREATE TABLE contracts (
        source         TEXT NOT NULL,
        tool           TEXT NOT NULL,
        digest         TEXT NOT NULL,
        definition     TEXT NOT NULL,
        reviewed_at_ms INTEGER NOT NULL,
        reviewer       TEXT NOT NULL,
        PRIMARY KEY (source, tool)
    );
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    INSERT INTO meta (key, value) VALUES ('contracts_generation', 0);
    CREATE TABLE audit (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        record       TEXT NOT NULL,
        at_ms        INTEGER NOT NULL,
        kind         TEXT NOT NULL,
        tool         TEXT NOT NULL,
        source       TEXT NOT NULL,
        decision     TEXT NOT NULL,
        prev_hash    TEXT NOT NULL,
        hash         TEXT NOT NULL
    );
    CREATE INDEX audit_at ON audit (at_ms);
    DROP TABLE call_log;",
    // 3: the approval ledger.
    "CREATE TABLE approvals (
        id             TEXT PRIMARY KEY,
        state          TEXT NOT NULL,
        principal      TEXT NOT NULL,
        session        TEXT NOT NULL,
        source         TEXT NOT NULL,
        connection     TEXT NOT NULL,
        tool           TEXT NOT NULL,
        upstream       TEXT NOT NULL,
        arguments      TEXT,
        args_digest    TEXT NOT NULL,
        reason         TEXT NOT NULL,
        description    TEXT NOT NULL,
        created_at_ms  INTEGER NOT NULL,
        expires_at_ms  INTEGER NOT NULL,
        decided_at_ms  INTEGER,
        decided_by     TEXT,
        channel        TEXT,
        detail         TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX approvals_state ON approvals (state, expires_at_ms);",
    // 4: stdio commands a person approved.
    "CREATE TABLE commands (
        source         TEXT PRIMARY KEY,
        fingerprint    TEXT NOT NULL,
        reviewed_at_ms INTEGER NOT NULL,
        reviewer       TEXT NOT NULL
    );",
    // 5: which of the choices a person made.
    "ALTER TABLE approvals ADD COLUMN choice TEXT NOT NULL DEFAULT 'once';",
    // 6: 'always allow': the contract a call asked under, and the rules a
    //    person's 'always' created (written by airlock-decision only).
    "ALTER TABLE approvals ADD COLUMN contract_digest TEXT NOT NULL DEFAULT '';
    CREATE TABLE standing_rules (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        tool          TEXT NOT NULL,
        connection    TEXT NOT NULL,
        digest        TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        created_by    TEXT NOT NULL,
        approval      TEXT NOT NULL
    );",
];

pub(crate) fn apply(conn: &Connection, path: &Path) -> Result<()> {
    let supported = MIGRATIONS.len() as i64;
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > supported {
        return Err(StoreError::TooNew {
            path: path.display().to_string(),
            found,
            supported,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; {sql}; PRAGMA user_version = {}; COMMIT;",
            i + 1
        ))
        .inspect_err(|_| {
            let _ = conn.execute_batch("ROLLBACK");
        })?;
    }
    Ok(())
}
