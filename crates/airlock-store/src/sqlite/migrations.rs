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
    // 7: one vocabulary for choices, the words forms and the page use;
    //    empty until a person decides.
    "UPDATE approvals SET choice = CASE
        WHEN decided_at_ms IS NULL THEN ''
        WHEN state = 'denied' THEN 'deny'
        WHEN choice = 'run' THEN 'allow_for_run'
        WHEN choice = 'always' THEN 'always_allow'
        ELSE 'allow_once' END;",
    // 8: code mode's runs and their journals.
    "CREATE TABLE runs (
        id            TEXT PRIMARY KEY,
        principal     TEXT NOT NULL,
        code          TEXT NOT NULL,
        seed          INTEGER NOT NULL,
        clock_ms      INTEGER NOT NULL,
        state         TEXT NOT NULL,
        detail        TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        resumes       INTEGER NOT NULL
    );
    CREATE TABLE journal (
        run         TEXT NOT NULL REFERENCES runs (id),
        seq         INTEGER NOT NULL,
        tool        TEXT NOT NULL,
        args_digest TEXT NOT NULL,
        state       TEXT NOT NULL,
        reply       TEXT NOT NULL,
        approval    TEXT NOT NULL,
        at_ms       INTEGER NOT NULL,
        PRIMARY KEY (run, seq)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_stored_in_the_old_words_read_in_the_one_vocabulary() {
        let conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..6] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch("PRAGMA user_version = 6").unwrap();
        for (id, state, decided, choice) in [
            ("p", "pending", None, "once"),
            ("o", "executed", Some(1), "once"),
            ("r", "executing", Some(1), "run"),
            ("a", "approved", Some(1), "always"),
            ("d", "denied", Some(1), "once"),
        ] {
            conn.execute(
                "INSERT INTO approvals (id, state, principal, session, source, connection, tool,
                     upstream, args_digest, reason, description, created_at_ms, expires_at_ms,
                     decided_at_ms, choice)
                 VALUES (?1, ?2, 'me', 's', 'x', 'x', 'x__t', 't', '', '', '', 0, 0, ?3, ?4)",
                rusqlite::params![id, state, decided, choice],
            )
            .unwrap();
        }
        apply(&conn, Path::new("test.db")).unwrap();
        let choice = |id: &str| -> String {
            conn.query_row("SELECT choice FROM approvals WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(choice("p"), "");
        assert_eq!(choice("o"), "allow_once");
        assert_eq!(choice("r"), "allow_for_run");
        assert_eq!(choice("a"), "always_allow");
        assert_eq!(choice("d"), "deny");
        for word in ["allow_once", "allow_for_run", "always_allow", "deny"] {
            assert!(crate::ledger::Choice::parse(word).is_some(), "{word}");
        }
    }
}
