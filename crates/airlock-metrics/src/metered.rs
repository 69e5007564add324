//! The store, measured: every operation timed (and counted when it fails)
//! under its own name, and every audit record counted as it is written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use airlock_store::ledger::{
    ApprovalRow, Approved, Executing, Expiry, FrozenCall, Pending, StandingRule, Waited,
};
use airlock_store::runs::{JournalEntry, NewRun, RunRow, RunState};
use airlock_store::{
    AuditCheck, AuditFilter, AuditRecord, CatalogEntry, CatalogKind, PinnedContract, Result,
    SourceStatus, Store, StoredAudit,
};

use crate::Metrics;

pub struct Metered {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Arc<Metered> {
        Arc::new(Metered { inner, metrics })
    }

    fn timed<T>(&self, operation: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let out = f();
        self.metrics
            .store_op(operation, t.elapsed().as_secs_f64(), out.is_err());
        out
    }

    /// Counted once it is accepted: a record the store refused is not in
    /// the log, and not in the numbers.
    fn audited(&self, record: &AuditRecord, written: Result<()>) -> Result<()> {
        if written.is_ok() {
            self.metrics.audit(record);
        }
        written
    }
}

impl Store for Metered {
    fn replace_catalog(
        &self,
        source: &str,
        kind: CatalogKind,
        entries: &[(String, serde_json::Value)],
    ) -> Result<()> {
        self.timed("replace_catalog", || {
            self.inner.replace_catalog(source, kind, entries)
        })
    }
    fn catalog(&self, source: Option<&str>) -> Result<Vec<CatalogEntry>> {
        self.timed("catalog", || self.inner.catalog(source))
    }
    fn set_source_status(&self, status: &SourceStatus) -> Result<()> {
        self.timed("set_source_status", || self.inner.set_source_status(status))
    }
    fn source_statuses(&self) -> Result<Vec<SourceStatus>> {
        self.timed("source_statuses", || self.inner.source_statuses())
    }
    fn record_audit(&self, record: AuditRecord) -> Result<()> {
        let copy = record.clone();
        let written = self.timed("record_audit", || self.inner.record_audit(record));
        self.audited(&copy, written)
    }
    fn record_audit_committed(&self, record: AuditRecord) -> Result<()> {
        let copy = record.clone();
        let written = self.timed("record_audit_committed", || {
            self.inner.record_audit_committed(record)
        });
        self.audited(&copy, written)
    }
    fn flush(&self) -> Result<()> {
        self.timed("flush", || self.inner.flush())
    }
    fn audit(&self, filter: &AuditFilter, limit: usize) -> Result<Vec<StoredAudit>> {
        self.timed("audit", || self.inner.audit(filter, limit))
    }
    fn reviewed_contracts(&self) -> Result<HashMap<(String, String), String>> {
        self.timed("reviewed_contracts", || self.inner.reviewed_contracts())
    }
    fn reviewed_definitions(&self) -> Result<HashMap<(String, String), serde_json::Value>> {
        self.timed("reviewed_definitions", || self.inner.reviewed_definitions())
    }
    fn pinned_contract(&self, source: &str, tool: &str) -> Result<Option<PinnedContract>> {
        self.timed("pinned_contract", || {
            self.inner.pinned_contract(source, tool)
        })
    }
    fn contracts_generation(&self) -> Result<i64> {
        self.timed("contracts_generation", || self.inner.contracts_generation())
    }
    fn verify_audit(&self) -> Result<AuditCheck> {
        self.timed("verify_audit", || self.inner.verify_audit())
    }
    fn ledger_create(&self, call: &FrozenCall, ttl_ms: i64, retention_ms: i64) -> Result<Pending> {
        self.timed("ledger_create", || {
            self.inner.ledger_create(call, ttl_ms, retention_ms)
        })
    }
    fn ledger_look(&self, pending: Pending) -> Result<Waited> {
        self.timed("ledger_look", || self.inner.ledger_look(pending))
    }
    fn ledger_waited(&self, id: &str) -> Result<Waited> {
        self.timed("ledger_waited", || self.inner.ledger_waited(id))
    }
    fn ledger_expire(&self, pending: Pending) -> Result<Expiry> {
        self.timed("ledger_expire", || self.inner.ledger_expire(pending))
    }
    fn ledger_claim(&self, approved: Approved) -> Result<Option<Executing>> {
        self.timed("ledger_claim", || self.inner.ledger_claim(approved))
    }
    fn ledger_refuse(&self, approved: Approved, why: &str) -> Result<()> {
        self.timed("ledger_refuse", || self.inner.ledger_refuse(approved, why))
    }
    fn ledger_finish(&self, executing: Executing, ok: bool, detail: &str) -> Result<()> {
        self.timed("ledger_finish", || {
            self.inner.ledger_finish(executing, ok, detail)
        })
    }
    fn ledger_recover(&self, running: &[String]) -> Result<(usize, usize)> {
        self.timed("ledger_recover", || self.inner.ledger_recover(running))
    }
    fn ledger_list(&self, all: bool) -> Result<Vec<ApprovalRow>> {
        self.timed("ledger_list", || self.inner.ledger_list(all))
    }
    fn ledger_row(&self, id: &str) -> Result<Option<ApprovalRow>> {
        self.timed("ledger_row", || self.inner.ledger_row(id))
    }
    fn run_create(&self, run: &NewRun, retention_ms: i64) -> Result<()> {
        self.timed("run_create", || self.inner.run_create(run, retention_ms))
    }
    fn run_row(&self, id: &str) -> Result<Option<RunRow>> {
        self.timed("run_row", || self.inner.run_row(id))
    }
    fn run_take(&self, id: &str, principal: &str) -> Result<Option<RunRow>> {
        self.timed("run_take", || self.inner.run_take(id, principal))
    }
    fn run_set(&self, id: &str, state: RunState, detail: &str) -> Result<()> {
        self.timed("run_set", || self.inner.run_set(id, state, detail))
    }
    fn runs_list(&self, limit: usize) -> Result<Vec<RunRow>> {
        self.timed("runs_list", || self.inner.runs_list(limit))
    }
    fn journal(&self, run: &str) -> Result<Vec<JournalEntry>> {
        self.timed("journal", || self.inner.journal(run))
    }
    fn journal_start(&self, run: &str, seq: u32, tool: &str, args_digest: &str) -> Result<()> {
        self.timed("journal_start", || {
            self.inner.journal_start(run, seq, tool, args_digest)
        })
    }
    fn journal_settle(&self, run: &str, seq: u32, reply: &str) -> Result<()> {
        self.timed("journal_settle", || {
            self.inner.journal_settle(run, seq, reply)
        })
    }
    fn journal_pause(&self, run: &str, seq: u32, approval: &str) -> Result<()> {
        self.timed("journal_pause", || {
            self.inner.journal_pause(run, seq, approval)
        })
    }
    fn standing_rules(&self) -> Result<Vec<StandingRule>> {
        self.timed("standing_rules", || self.inner.standing_rules())
    }
    fn approved_command(&self, source: &str) -> Result<Option<String>> {
        self.timed("approved_command", || self.inner.approved_command(source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_store::{AuditKind, SqliteStore};

    #[test]
    fn what_the_store_accepts_is_counted_and_every_operation_timed() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(Metrics::new(["fs".to_string()]));
        let store = Metered::new(SqliteStore::open_in(dir.path()).unwrap(), metrics.clone());
        store
            .record_audit_committed(AuditRecord {
                source: "fs".into(),
                decision: "ask".into(),
                ..AuditRecord::new(AuditKind::Decision, "c1", 0)
            })
            .unwrap();
        store
            .record_audit(AuditRecord {
                source: "fs".into(),
                outcome: "ok".into(),
                duration_us: 1500,
                ..AuditRecord::new(AuditKind::Outcome, "c1", 0)
            })
            .unwrap();
        store.ledger_list(false).unwrap();
        let text = metrics.render(None, []);
        assert!(
            text.contains(r#"airlock_calls_total{source="fs",decision="ask"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"airlock_call_outcomes_total{source="fs",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"airlock_call_duration_seconds_count{source="fs"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"airlock_store_operation_seconds_count{operation="ledger_list"} 1"#),
            "{text}"
        );
    }
}
