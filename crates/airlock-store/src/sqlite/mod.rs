//! The embedded backend: one SQLite file in WAL mode.
//!
//! Reads and catalog writes run on the caller's thread under a mutex. The call
//! log, written once per call on the hot path, goes through a channel to one
//! writer thread that commits in groups (at most every 20 ms), so a call never
//! waits on the disk; `flush` waits for the writer to catch up and runs on
//! shutdown. A crash can lose the last 20 ms of the call log, never more.

mod migrations;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use crate::{
    CallOutcome, CallRecord, CatalogEntry, CatalogKind, Result, SourceStatus, Store, StoreError,
    now_ms,
};

enum WriterMsg {
    Call(CallRecord),
    Flush(mpsc::Sender<()>),
}

pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    writer: Mutex<Option<mpsc::Sender<WriterMsg>>>,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
}

impl SqliteStore {
    /// Opens (creating if needed) `airlock.db` inside `data_dir`.
    pub fn open_in(data_dir: &Path) -> Result<Arc<Self>> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.display().to_string(),
            source,
        })?;
        restrict_dir(data_dir);
        Self::open(&data_dir.join("airlock.db"))
    }

    pub fn open(path: &Path) -> Result<Arc<Self>> {
        let conn = connect(path)?;
        migrations::apply(&conn, path)?;
        let writer_conn = connect(path)?;
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("airlock-store-writer".into())
            .spawn(move || writer_loop(writer_conn, rx))
            .expect("spawning the store writer thread");
        Ok(Arc::new(SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            writer: Mutex::new(Some(tx)),
            writer_thread: Mutex::new(Some(handle)),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (every
        // write is a transaction), so the poisoned guard is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

#[cfg(unix)]
fn restrict_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Err(e) = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot restrict the data directory to its owner");
    }
}

#[cfg(not(unix))]
fn restrict_dir(_dir: &Path) {}

/// How long the writer gathers call records before committing them
/// together, unless a flush asks for them sooner.
const GROUP_COMMIT: Duration = Duration::from_millis(20);
const MAX_BATCH: usize = 512;

fn writer_loop(mut conn: Connection, rx: mpsc::Receiver<WriterMsg>) {
    while let Ok(first) = rx.recv() {
        // One commit per call would cost more CPU than the call itself;
        // gather what arrives within GROUP_COMMIT and commit once.
        let deadline = Instant::now() + GROUP_COMMIT;
        let mut flushing = matches!(first, WriterMsg::Flush(_));
        let mut batch = vec![first];
        while !flushing && batch.len() < MAX_BATCH {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(more) => {
                    flushing = matches!(more, WriterMsg::Flush(_));
                    batch.push(more);
                }
                Err(_) => break,
            }
        }
        let mut waiters = Vec::new();
        let result = (|| -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO call_log (started_at_ms, duration_us, tool, source, outcome, detail)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for msg in &batch {
                    if let WriterMsg::Call(r) = msg {
                        stmt.execute(params![
                            r.started_at_ms,
                            r.duration_us,
                            r.tool,
                            r.source,
                            r.outcome.as_str(),
                            r.detail
                        ])?;
                    }
                }
            }
            tx.commit()
        })();
        if let Err(e) = result {
            tracing::error!(error = %e, rows = batch.len(), "cannot write the call log");
        }
        for msg in batch {
            if let WriterMsg::Flush(done) = msg {
                waiters.push(done);
            }
        }
        for w in waiters {
            let _ = w.send(());
        }
    }
}

impl Store for SqliteStore {
    fn replace_catalog(
        &self,
        source: &str,
        kind: CatalogKind,
        entries: &[(String, serde_json::Value)],
    ) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM catalog WHERE source = ?1 AND kind = ?2",
            params![source, kind.as_str()],
        )?;
        let now = now_ms();
        {
            let mut stmt = tx.prepare_cached(
                "INSERT OR REPLACE INTO catalog (source, kind, name, definition, seen_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for (name, def) in entries {
                stmt.execute(params![source, kind.as_str(), name, def.to_string(), now])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn catalog(&self, source: Option<&str>) -> Result<Vec<CatalogEntry>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT source, kind, name, definition, seen_at_ms FROM catalog
             WHERE (?1 IS NULL OR source = ?1) ORDER BY source, kind, name",
        )?;
        let rows = stmt.query_map(params![source], |row| {
            let kind: String = row.get(1)?;
            let def: String = row.get(3)?;
            Ok(CatalogEntry {
                source: row.get(0)?,
                kind: CatalogKind::parse(&kind).unwrap_or(CatalogKind::Tool),
                name: row.get(2)?,
                definition: serde_json::from_str(&def).unwrap_or(serde_json::Value::Null),
                seen_at_ms: row.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn set_source_status(&self, s: &SourceStatus) -> Result<()> {
        self.conn().execute(
            "INSERT INTO source_status (source, state, detail, updated_at_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(source) DO UPDATE SET state = excluded.state, detail = excluded.detail,
                 updated_at_ms = excluded.updated_at_ms",
            params![s.source, s.state, s.detail, s.updated_at_ms],
        )?;
        Ok(())
    }

    fn source_statuses(&self) -> Result<Vec<SourceStatus>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT source, state, detail, updated_at_ms FROM source_status ORDER BY source",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(SourceStatus {
                source: row.get(0)?,
                state: row.get(1)?,
                detail: row.get(2)?,
                updated_at_ms: row.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn record_call(&self, record: CallRecord) -> Result<()> {
        let guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .ok_or(StoreError::WriterGone)?
            .send(WriterMsg::Call(record))
            .map_err(|_| StoreError::WriterGone)
    }

    fn flush(&self) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        {
            let guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
            guard
                .as_ref()
                .ok_or(StoreError::WriterGone)?
                .send(WriterMsg::Flush(tx))
                .map_err(|_| StoreError::WriterGone)?;
        }
        rx.recv().map_err(|_| StoreError::WriterGone)
    }

    fn recent_calls(&self, limit: usize) -> Result<Vec<CallRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT started_at_ms, duration_us, tool, source, outcome, detail FROM call_log
             ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map(params![limit as i64], |row| {
            let outcome: String = row.get(4)?;
            Ok(CallRecord {
                started_at_ms: row.get(0)?,
                duration_us: row.get(1)?,
                tool: row.get(2)?,
                source: row.get(3)?,
                outcome: CallOutcome::parse(&outcome),
                detail: row.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the channel lets the writer drain what it has and stop.
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = self
            .writer_thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tool: &str) -> CallRecord {
        CallRecord {
            started_at_ms: now_ms(),
            duration_us: 42,
            tool: tool.into(),
            source: "demo".into(),
            outcome: CallOutcome::Ok,
            detail: String::new(),
        }
    }

    #[test]
    fn catalog_is_replaced_per_source_and_kind() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let def = serde_json::json!({"name": "echo", "inputSchema": {"type": "object"}});
        store
            .replace_catalog("a", CatalogKind::Tool, &[("echo".into(), def.clone())])
            .unwrap();
        store
            .replace_catalog("b", CatalogKind::Tool, &[("x".into(), def.clone())])
            .unwrap();
        store.replace_catalog("a", CatalogKind::Tool, &[]).unwrap();
        let all = store.catalog(None).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].source, "b");
        assert_eq!(all[0].definition, def);
    }

    #[test]
    fn call_log_survives_reopen_after_flush() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open_in(dir.path()).unwrap();
            for i in 0..100 {
                store.record_call(record(&format!("demo__t{i}"))).unwrap();
            }
            store.flush().unwrap();
        }
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let calls = store.recent_calls(1000).unwrap();
        assert_eq!(calls.len(), 100);
        assert_eq!(calls[0].tool, "demo__t99");
    }

    #[test]
    fn dropping_the_store_drains_the_call_log() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open_in(dir.path()).unwrap();
            for _ in 0..50 {
                store.record_call(record("demo__echo")).unwrap();
            }
        }
        let store = SqliteStore::open_in(dir.path()).unwrap();
        assert_eq!(store.recent_calls(1000).unwrap().len(), 50);
    }

    #[test]
    fn newer_schema_is_refused_not_clobbered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("airlock.db");
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 999)
            .unwrap();
        match SqliteStore::open(&path) {
            Err(StoreError::TooNew { found: 999, .. }) => {}
            Err(other) => panic!("wrong error: {other}"),
            Ok(_) => panic!("a newer schema must be refused"),
        }
    }

    #[test]
    fn status_is_upserted() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        for state in ["starting", "ready"] {
            store
                .set_source_status(&SourceStatus {
                    source: "demo".into(),
                    state: state.into(),
                    detail: String::new(),
                    updated_at_ms: now_ms(),
                })
                .unwrap();
        }
        let s = store.source_statuses().unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].state, "ready");
    }
}
