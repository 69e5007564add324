//! The embedded backend: one SQLite file in WAL mode.
//!
//! Reads and catalog writes run on the caller's thread under a mutex. The call
//! audit log's outcome records go through a channel to one writer thread
//! that chains each record to the previous one and commits in groups (at
//! most every 20 ms), so a finished call never waits on the disk; `flush`
//! waits for the writer to catch up and runs on shutdown. A call's decision
//! is committed before the call goes on, on the caller's thread under the
//! chain's lock (`record_audit_committed`). A crash can lose the
//! last 20 ms of records, and can never leave a broken chain: each group is
//! one transaction.

mod ledger;
mod migrations;
mod runs;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use crate::audit_chain::{check_record, hash as chain_hash, kind_str};
use crate::{
    AuditCheck, AuditFilter, AuditKind, AuditRecord, CatalogEntry, CatalogKind, PinnedContract,
    Result, Reviews, SourceStatus, Store, StoreError, StoredAudit, now_ms,
};

enum WriterMsg {
    Audit(Box<AuditRecord>),
    Flush(mpsc::Sender<()>),
}

/// The audit chain's writing end: one connection and the chain's head,
/// shared by the writer thread (records grouped off the hot path) and by
/// callers that need a record committed before they go on (a call's
/// decision), who commit on their own thread, without a hand-off.
struct Chain {
    conn: Connection,
    head: String,
    /// Records that could not be written since the last commit that
    /// worked, and since when: the next commit that works begins with a
    /// gap record saying so.
    lost: u64,
    lost_since: i64,
}

impl Chain {
    fn open(conn: Connection) -> Chain {
        let head = conn
            .query_row(
                "SELECT hash FROM audit ORDER BY seq DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap_or_default();
        Chain {
            conn,
            head,
            lost: 0,
            lost_since: 0,
        }
    }

    /// Appends `records` in one transaction, chained to the head.
    fn commit<'a>(
        &mut self,
        records: impl Iterator<Item = &'a AuditRecord> + Clone,
    ) -> std::result::Result<(), String> {
        let gap = (self.lost > 0).then(|| AuditRecord {
            reason: format!(
                "{} record(s) from {} (ms since the epoch) on could not be written; they are lost",
                self.lost, self.lost_since
            ),
            ..AuditRecord::new(AuditKind::Gap, "", now_ms())
        });
        let mut new_head = self.head.clone();
        let result = (|| -> rusqlite::Result<()> {
            let tx = self.conn.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO audit (record, at_ms, kind, tool, source, decision, prev_hash, hash)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?;
                let mut insert = |r: &AuditRecord| -> rusqlite::Result<()> {
                    let text = serde_json::to_string(r).unwrap_or_default();
                    let hash = chain_hash(&new_head, &text);
                    stmt.execute(params![
                        text,
                        r.at_ms,
                        kind_str(r.kind),
                        r.tool,
                        r.source,
                        r.decision,
                        new_head,
                        hash
                    ])?;
                    new_head = hash;
                    Ok(())
                };
                if let Some(g) = &gap {
                    insert(g)?;
                }
                for r in records.clone() {
                    insert(r)?;
                }
            }
            tx.commit()
        })();
        match result {
            Ok(()) => {
                self.head = new_head;
                self.lost = 0;
                Ok(())
            }
            Err(e) => {
                let rows = records.count() as u64;
                if self.lost == 0 {
                    self.lost_since = now_ms();
                }
                self.lost += rows;
                tracing::error!(error = %e, rows, "cannot write the audit log");
                Err(e.to_string())
            }
        }
    }
}

/// How one queued record's commit went, once someone committed it.
type Committed = Arc<Mutex<Option<std::result::Result<(), String>>>>;

pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    chain: Arc<Mutex<Chain>>,
    /// Records waiting to be committed by whoever holds the chain next,
    /// each with where its caller learns the result.
    committing: Mutex<Vec<(AuditRecord, Committed)>>,
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
        let chain = Arc::new(Mutex::new(Chain::open(connect(path)?)));
        let (tx, rx) = mpsc::channel();
        let writer_chain = chain.clone();
        let handle = std::thread::Builder::new()
            .name("airlock-store-writer".into())
            .spawn(move || writer_loop(writer_chain, rx))
            .expect("spawning the store writer thread");
        Ok(Arc::new(SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            chain,
            committing: Mutex::new(Vec::new()),
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

fn writer_loop(chain: Arc<Mutex<Chain>>, rx: mpsc::Receiver<WriterMsg>) {
    while let Ok(first) = rx.recv() {
        // One commit per call would cost more CPU than the call itself;
        // gather what arrives within GROUP_COMMIT and commit once. The
        // thread sleeps through the window rather than waiting on the
        // channel, so a record sent meanwhile wakes nobody (a wake-up per
        // record was a context switch per call). A flush waits at most
        // one window.
        let mut batch = vec![first];
        let drain = |batch: &mut Vec<WriterMsg>| {
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(more) => batch.push(more),
                    Err(_) => break,
                }
            }
        };
        drain(&mut batch);
        let flushing = batch.iter().any(|m| matches!(m, WriterMsg::Flush(_)));
        if !flushing && batch.len() < MAX_BATCH {
            std::thread::sleep(GROUP_COMMIT);
            drain(&mut batch);
        }
        let records = batch.iter().filter_map(|m| match m {
            WriterMsg::Audit(r) => Some(r.as_ref()),
            WriterMsg::Flush(_) => None,
        });
        if records.clone().next().is_some() {
            let _ = chain
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .commit(records);
        }
        for msg in batch {
            if let WriterMsg::Flush(done) = msg {
                let _ = done.send(());
            }
        }
    }
}

fn stored(row: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, String, String, String)> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
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

    fn record_audit(&self, record: AuditRecord) -> Result<()> {
        let guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .ok_or(StoreError::WriterGone)?
            .send(WriterMsg::Audit(Box::new(record)))
            .map_err(|_| StoreError::WriterGone)
    }

    fn record_audit_committed(&self, record: AuditRecord) -> Result<()> {
        // On this thread, under the chain's lock: no hand-off to the
        // writer. Callers that arrive while another commits queue their
        // records; whoever holds the lock next commits every queued record
        // in one transaction and tells each caller how it went (group
        // commit: under load, one transaction serves many calls).
        let slot = Arc::new(Mutex::new(None));
        self.committing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((record, slot.clone()));
        let mut chain = self.chain.lock().unwrap_or_else(|p| p.into_inner());
        let done = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(result) = done {
            return result.map_err(StoreError::AuditUnwritable);
        }
        // Ours is still queued: no one took the queue since we joined it
        // (a committer answers every record it took before letting go).
        let batch = std::mem::take(&mut *self.committing.lock().unwrap_or_else(|p| p.into_inner()));
        let result = chain.commit(batch.iter().map(|(r, _)| r));
        for (_, s) in &batch {
            *s.lock().unwrap_or_else(|p| p.into_inner()) = Some(result.clone());
        }
        drop(chain);
        let mine = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        mine.unwrap_or_else(|| Err("the commit did not complete".into()))
            .map_err(StoreError::AuditUnwritable)
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

    fn audit(&self, filter: &AuditFilter, limit: usize) -> Result<Vec<StoredAudit>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT seq, record, prev_hash, hash FROM audit
             WHERE (?1 IS NULL OR tool = ?1) AND (?2 IS NULL OR source = ?2)
               AND (?3 IS NULL OR decision = ?3) AND (?4 IS NULL OR at_ms >= ?4)
             ORDER BY seq DESC LIMIT ?5",
        )?;
        let rows = stmt.query_map(
            params![
                filter.tool,
                filter.source,
                filter.decision,
                filter.since_ms,
                limit as i64
            ],
            stored,
        )?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, text, prev_hash, hash) = row?;
            if let Ok(record) = serde_json::from_str(&text) {
                out.push(StoredAudit {
                    seq,
                    record,
                    prev_hash,
                    hash,
                });
            }
        }
        Ok(out)
    }

    fn reviewed_contracts(&self) -> Result<HashMap<(String, String), String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT source, tool, digest FROM contracts")?;
        let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn reviewed_definitions(&self) -> Result<HashMap<(String, String), serde_json::Value>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT source, tool, definition FROM contracts")?;
        let rows = stmt.query_map([], |r| {
            let def: String = r.get(2)?;
            Ok((
                (r.get(0)?, r.get(1)?),
                serde_json::from_str(&def).unwrap_or(serde_json::Value::Null),
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn pinned_contract(&self, source: &str, tool: &str) -> Result<Option<PinnedContract>> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                "SELECT digest, definition, reviewed_at_ms, reviewer FROM contracts
                 WHERE source = ?1 AND tool = ?2",
                params![source, tool],
                |r| {
                    let def: String = r.get(1)?;
                    Ok(PinnedContract {
                        source: source.to_string(),
                        tool: tool.to_string(),
                        digest: r.get(0)?,
                        definition: serde_json::from_str(&def).unwrap_or_default(),
                        reviewed_at_ms: r.get(2)?,
                        reviewer: r.get(3)?,
                    })
                },
            )
            .optional()?)
    }

    fn contracts_generation(&self) -> Result<i64> {
        Ok(self.conn().query_row(
            "SELECT value FROM meta WHERE key = 'contracts_generation'",
            [],
            |r| r.get(0),
        )?)
    }

    fn ledger_create(
        &self,
        call: &crate::ledger::FrozenCall,
        ttl_ms: i64,
        retention_ms: i64,
    ) -> Result<crate::ledger::Pending> {
        ledger::create(&self.conn(), call, ttl_ms, retention_ms)
    }

    fn ledger_look(&self, pending: crate::ledger::Pending) -> Result<crate::ledger::Waited> {
        ledger::look(&self.conn(), &pending.id)
    }

    fn ledger_waited(&self, id: &str) -> Result<crate::ledger::Waited> {
        ledger::look(&self.conn(), id)
    }

    fn ledger_expire(&self, pending: crate::ledger::Pending) -> Result<crate::ledger::Expiry> {
        ledger::expire(&self.conn(), pending)
    }

    fn ledger_claim(
        &self,
        approved: crate::ledger::Approved,
    ) -> Result<Option<crate::ledger::Executing>> {
        ledger::claim(&self.conn(), approved)
    }

    fn ledger_refuse(&self, approved: crate::ledger::Approved, why: &str) -> Result<()> {
        ledger::refuse(&self.conn(), approved, why)
    }

    fn ledger_finish(
        &self,
        executing: crate::ledger::Executing,
        ok: bool,
        detail: &str,
    ) -> Result<()> {
        ledger::finish(&self.conn(), executing, ok, detail)
    }

    fn ledger_recover(&self, running: &[String]) -> Result<(usize, usize)> {
        ledger::recover(&mut self.conn(), running)
    }

    fn ledger_list(&self, all: bool) -> Result<Vec<crate::ledger::ApprovalRow>> {
        ledger::list(&self.conn(), all)
    }

    fn ledger_row(&self, id: &str) -> Result<Option<crate::ledger::ApprovalRow>> {
        ledger::row(&self.conn(), id)
    }

    fn run_create(&self, run: &crate::runs::NewRun, retention_ms: i64) -> Result<()> {
        runs::create(&self.conn(), run, retention_ms)
    }

    fn run_row(&self, id: &str) -> Result<Option<crate::runs::RunRow>> {
        runs::row(&self.conn(), id)
    }

    fn run_take(&self, id: &str, principal: &str) -> Result<Option<crate::runs::RunRow>> {
        runs::take(&self.conn(), id, principal)
    }

    fn run_set(&self, id: &str, state: crate::runs::RunState, detail: &str) -> Result<()> {
        runs::set(&self.conn(), id, state, detail)
    }

    fn runs_list(&self, limit: usize) -> Result<Vec<crate::runs::RunRow>> {
        runs::list(&self.conn(), limit)
    }

    fn journal(&self, run: &str) -> Result<Vec<crate::runs::JournalEntry>> {
        runs::journal(&self.conn(), run)
    }

    fn journal_start(&self, run: &str, seq: u32, tool: &str, args_digest: &str) -> Result<()> {
        runs::start(&self.conn(), run, seq, tool, args_digest)
    }

    fn journal_settle(&self, run: &str, seq: u32, reply: &str) -> Result<()> {
        runs::settle(&self.conn(), run, seq, reply)
    }

    fn journal_pause(&self, run: &str, seq: u32, approval: &str) -> Result<()> {
        runs::pause(&self.conn(), run, seq, approval)
    }

    fn standing_rules(&self) -> Result<Vec<crate::ledger::StandingRule>> {
        ledger::standing_rules(&self.conn())
    }

    fn approved_command(&self, source: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT fingerprint FROM commands WHERE source = ?1",
                params![source],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn verify_audit(&self) -> Result<AuditCheck> {
        let conn = self.conn();
        // A store SQLite itself finds damaged is damaged, whatever the
        // chain of what can still be read says.
        let integrity: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if integrity != "ok" {
            return Ok(AuditCheck::Broken {
                seq: 0,
                why: format!("the database file is damaged: {integrity}"),
            });
        }
        let mut stmt = conn.prepare(
            "SELECT seq, record, prev_hash, hash, kind, tool, source, decision, at_ms
             FROM audit ORDER BY seq",
        )?;
        let mut rows = stmt.query([])?;
        let mut head = String::new();
        let mut count = 0u64;
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            let text: String = row.get(1)?;
            let prev: String = row.get(2)?;
            let hash: String = row.get(3)?;
            let columns = (
                row.get::<_, String>(4)?,
                row.get::<_, String>(5)?,
                row.get::<_, String>(6)?,
                row.get::<_, String>(7)?,
                row.get::<_, i64>(8)?,
            );
            if let Err(why) = check_record(&head, count, &text, &prev, &hash, columns) {
                return Ok(AuditCheck::Broken { seq, why });
            }
            head = hash;
            count += 1;
        }
        Ok(AuditCheck::Intact {
            records: count,
            head,
        })
    }
}

impl Reviews for SqliteStore {
    fn pin_command(&self, source: &str, fingerprint: &str, reviewer: &str) -> Result<()> {
        self.conn().execute(
            "INSERT INTO commands (source, fingerprint, reviewed_at_ms, reviewer)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(source) DO UPDATE SET fingerprint = excluded.fingerprint,
                 reviewed_at_ms = excluded.reviewed_at_ms, reviewer = excluded.reviewer",
            params![source, fingerprint, now_ms(), reviewer],
        )?;
        Ok(())
    }

    fn pin_contract(&self, c: &PinnedContract) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO contracts (source, tool, digest, definition, reviewed_at_ms, reviewer)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(source, tool) DO UPDATE SET digest = excluded.digest,
                 definition = excluded.definition, reviewed_at_ms = excluded.reviewed_at_ms,
                 reviewer = excluded.reviewer",
            params![
                c.source,
                c.tool,
                c.digest,
                c.definition.to_string(),
                c.reviewed_at_ms,
                c.reviewer
            ],
        )?;
        tx.execute(
            "UPDATE meta SET value = value + 1 WHERE key = 'contracts_generation'",
            [],
        )?;
        tx.commit()?;
        Ok(())
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

    fn record(tool: &str) -> AuditRecord {
        AuditRecord {
            at_ms: now_ms(),
            kind: AuditKind::Decision,
            call_id: "c1".into(),
            source: "demo".into(),
            connection: "demo".into(),
            tool: tool.into(),
            decision: "allow".into(),
            step: "rule".into(),
            layer: "user".into(),
            rule: "airlock.toml:3".into(),
            reason: "allowed by the user policy".into(),
            args_digest: "sha256:00".into(),
            args_excerpt: "{}".into(),
            outcome: String::new(),
            duration_us: 0,
            detail: String::new(),
        }
    }

    fn filled(dir: &Path, n: usize) -> Arc<SqliteStore> {
        let store = SqliteStore::open_in(dir).unwrap();
        for i in 0..n {
            store.record_audit(record(&format!("demo__t{i}"))).unwrap();
        }
        store.flush().unwrap();
        store
    }

    fn raw(dir: &Path) -> Connection {
        Connection::open(dir.join("airlock.db")).unwrap()
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
    fn audit_survives_reopen_and_keeps_order() {
        let dir = tempfile::tempdir().unwrap();
        drop(filled(dir.path(), 100));
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let recent = store.audit(&AuditFilter::default(), 1000).unwrap();
        assert_eq!(recent.len(), 100);
        assert_eq!(recent[0].record.tool, "demo__t99");
        // The chain continues across reopen.
        store.record_audit(record("demo__after")).unwrap();
        store.flush().unwrap();
        assert!(matches!(
            store.verify_audit().unwrap(),
            AuditCheck::Intact { records: 101, .. }
        ));
    }

    #[test]
    fn committed_records_from_many_threads_each_land_once_on_one_chain() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        store
                            .record_audit_committed(record(&format!("demo__t{t}_{i}")))
                            .unwrap();
                        // Interleaved with grouped records, as in a hub.
                        store.record_audit(record("demo__outcome")).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        store.flush().unwrap();
        let all = store.audit(&AuditFilter::default(), 10_000).unwrap();
        let mut committed: Vec<String> = all
            .iter()
            .map(|r| r.record.tool.clone())
            .filter(|t| t != "demo__outcome")
            .collect();
        committed.sort();
        committed.dedup();
        assert_eq!(committed.len(), 400, "each committed record once");
        assert_eq!(all.len(), 800);
        assert!(matches!(
            store.verify_audit().unwrap(),
            AuditCheck::Intact { records: 800, .. }
        ));
    }

    #[test]
    fn dropping_the_store_drains_the_audit_log() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open_in(dir.path()).unwrap();
            for _ in 0..50 {
                store.record_audit(record("demo__echo")).unwrap();
            }
        }
        let store = SqliteStore::open_in(dir.path()).unwrap();
        assert_eq!(
            store.audit(&AuditFilter::default(), 1000).unwrap().len(),
            50
        );
    }

    #[test]
    fn audit_chain_detects_edit() {
        let dir = tempfile::tempdir().unwrap();
        let store = filled(dir.path(), 5);
        raw(dir.path())
            .execute(
                "UPDATE audit SET record = replace(record, 'allowed by', 'denied by') WHERE seq = 3",
                [],
            )
            .unwrap();
        match store.verify_audit().unwrap() {
            AuditCheck::Broken { seq: 3, why } => assert!(why.contains("edited"), "{why}"),
            other => panic!("edit not detected: {other:?}"),
        }
    }

    #[test]
    fn audit_chain_detects_an_edited_column() {
        let dir = tempfile::tempdir().unwrap();
        let store = filled(dir.path(), 5);
        raw(dir.path())
            .execute("UPDATE audit SET decision = 'deny' WHERE seq = 2", [])
            .unwrap();
        assert!(matches!(
            store.verify_audit().unwrap(),
            AuditCheck::Broken { seq: 2, .. }
        ));
    }

    #[test]
    fn audit_chain_detects_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let store = filled(dir.path(), 5);
        raw(dir.path())
            .execute("DELETE FROM audit WHERE seq = 3", [])
            .unwrap();
        match store.verify_audit().unwrap() {
            AuditCheck::Broken { seq: 4, why } => assert!(why.contains("deleted"), "{why}"),
            other => panic!("deletion not detected: {other:?}"),
        }
    }

    #[test]
    fn audit_chain_detects_reordering() {
        let dir = tempfile::tempdir().unwrap();
        let store = filled(dir.path(), 5);
        let c = raw(dir.path());
        // Swap the content of two rows, hashes and all.
        c.execute_batch(
            "UPDATE audit SET seq = 100 WHERE seq = 2;
             UPDATE audit SET seq = 2 WHERE seq = 3;
             UPDATE audit SET seq = 3 WHERE seq = 100;",
        )
        .unwrap();
        assert!(matches!(
            store.verify_audit().unwrap(),
            AuditCheck::Broken { seq: 2, .. }
        ));
    }

    #[test]
    fn contracts_are_pinned_with_a_generation() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let g0 = store.contracts_generation().unwrap();
        store
            .pin_contract(&PinnedContract {
                source: "fs".into(),
                tool: "read".into(),
                digest: "sha256:ab".into(),
                definition: serde_json::json!({"name": "read"}),
                reviewed_at_ms: now_ms(),
                reviewer: "me".into(),
            })
            .unwrap();
        assert_eq!(store.contracts_generation().unwrap(), g0 + 1);
        let reviewed = store.reviewed_contracts().unwrap();
        assert_eq!(
            reviewed[&("fs".to_string(), "read".to_string())],
            "sha256:ab"
        );
        assert_eq!(
            store
                .pinned_contract("fs", "read")
                .unwrap()
                .unwrap()
                .reviewer,
            "me"
        );
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
