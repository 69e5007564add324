//! The team backend: PostgreSQL shared by several hubs (replicas), one
//! tenant per hub.
//!
//! Every operation is one transaction that first sets `airlock.tenant`
//! for that transaction only (`set_config(…, true)`, the function form of
//! `SET LOCAL`): a pooled connection carries no tenant from one use to
//! the next, and row-level security (see [`schema`]) holds each
//! transaction to its tenant's rows. The ledger's transitions are the same
//! conditional single-row updates as in SQLite, so approvals stay
//! single-use across replicas; a decision notifies the waiting call's
//! replica with `NOTIFY`, carrying only the approval's id ([`listen`]).
//!
//! Audit records are appended under a per-tenant transaction lock: each
//! append reads the chain's head and links to it, and the table refuses a
//! second record after the same hash, so concurrent writers on any
//! replica make one chain, never a fork.

mod audit;
mod hubs;
mod ledger;
pub mod listen;
mod pool;
mod runs;
pub mod schema;

use std::collections::HashMap;
use std::sync::Arc;

use tokio_postgres::{Config, Transaction};

use crate::{
    AuditCheck, AuditFilter, AuditRecord, CatalogEntry, CatalogKind, PinnedContract, Result,
    Reviews, SourceStatus, Store, StoreError, StoredAudit, now_ms,
};
use pool::{Driver, Pool};

/// How a hub reaches a PostgreSQL store.
#[derive(Clone)]
pub struct PgTarget {
    /// `postgres://ROLE@HOST:PORT/DATABASE` (a password, when one is
    /// needed, comes from [`PgTarget::password`], never the URL in config).
    pub url: String,
    pub password: Option<String>,
    /// Whose rows this hub reads and writes.
    pub tenant: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget")
            .field("url", &schema::redacted(&self.url))
            .field("password", &self.password.as_ref().map(|_| "[secret]"))
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl PgTarget {
    fn config(&self) -> Result<Config> {
        let mut config: Config = self.url.parse().map_err(|_| {
            StoreError::Refused(format!(
                "the store URL {} is not a PostgreSQL URL",
                schema::redacted(&self.url)
            ))
        })?;
        // However it is spelled (userinfo, `password=`, a percent-encoded
        // key), a password in the URL is refused: it would sit in config
        // and in messages.
        if config.get_password().is_some() {
            return Err(StoreError::Refused(
                "the store URL holds a password; give it as a stored secret instead (see docs/team.md)"
                    .into(),
            ));
        }
        if let Some(p) = &self.password {
            config.password(p);
        }
        config
            .connect_timeout(std::time::Duration::from_secs(5))
            .application_name("airlock")
            // A statement that hangs (a lock held by a stuck replica, a
            // server under load) fails the call instead of holding it.
            .options("-c statement_timeout=15000 -c lock_timeout=10000")
            // A half-open connection (a cable pulled, a firewall dropping
            // state) is noticed in seconds, not the kernel's two hours.
            .keepalives(true)
            .keepalives_idle(std::time::Duration::from_secs(10))
            .keepalives_interval(std::time::Duration::from_secs(5))
            .keepalives_retries(3)
            .tcp_user_timeout(std::time::Duration::from_secs(30));
        Ok(config)
    }
}

/// How many connections one hub holds at most.
const POOL_SIZE: usize = 8;

pub struct PgStore {
    target: PgTarget,
    pool: Arc<Pool>,
    // Dropped last: the connections' I/O runs on it.
    driver: Driver,
}

impl PgStore {
    /// Connects as a hub: the schema must be the version this airlock
    /// knows and the role one that row-level security holds.
    pub fn open(target: PgTarget) -> Result<Arc<PgStore>> {
        check_tenant(&target.tenant)?;
        let config = target.config()?;
        let driver = Driver::start();
        let pool = Arc::new(Pool::new(config, driver.handle().clone(), POOL_SIZE));
        let store = PgStore {
            target,
            pool,
            driver,
        };
        futures::executor::block_on(async {
            let mut lease = store.pool.lease().await.map_err(|e| match e {
                StoreError::Postgres(e) => StoreError::Unavailable(format!(
                    "cannot reach the store at {}: {}",
                    schema::redacted(&store.target.url),
                    postgres_cause(&e)
                )),
                other => other,
            })?;
            schema::check(lease.client(), &store.target.url, &store.target.tenant).await
        })?;
        Ok(Arc::new(store))
    }

    /// As the schema's owner: applies the migrations this airlock knows,
    /// grants `hub_role` the rows and maps it to `tenant` (a role acts for
    /// one tenant only). Returns the schema's version.
    pub fn migrate(
        owner_url: &str,
        password: Option<&str>,
        hub_role: &str,
        tenant: &str,
    ) -> Result<i64> {
        check_tenant(tenant)?;
        let target = PgTarget {
            url: owner_url.to_string(),
            password: password.map(str::to_string),
            tenant: String::new(),
        };
        let config = target.config()?;
        let driver = Driver::start();
        futures::executor::block_on(async {
            let mut client = pool::connect(driver.handle(), &config).await?;
            schema::migrate(&mut client, owner_url, hub_role, tenant).await
        })
    }

    pub fn tenant(&self) -> &str {
        &self.target.tenant
    }

    /// The store's URL without any password, for messages.
    pub fn describe(&self) -> String {
        schema::redacted(&self.target.url)
    }

    /// Runs `f` in one transaction acting for this store's tenant, on the
    /// caller's thread (the connection's I/O runs on the store's own).
    pub fn transaction<T>(&self, f: impl AsyncFnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        futures::executor::block_on(in_tenant(&self.pool, &self.target.tenant, f))
    }

    /// Forgets replicas known to have stopped (a hub beside them found
    /// their lock free), so their rows are recovered now rather than when
    /// their heartbeat ages.
    pub fn forget_hubs(&self, stopped: &[String]) -> Result<()> {
        if stopped.is_empty() {
            return Ok(());
        }
        self.transaction(async |tx| {
            tx.execute(
                "DELETE FROM airlock.hubs WHERE instance = ANY($1)",
                &[&stopped],
            )
            .await?;
            Ok(())
        })
    }

    /// Keeps this hub's row in `hubs` fresh while the store lives, and on
    /// each beat recovers the rows of hubs of the tenant that stopped
    /// beating (killed, or cut off): their executing calls fail, never to
    /// be re-run, and their waiting ones expire. Whichever replica notices
    /// first does it; the conditional updates make doing it twice
    /// harmless.
    pub fn keep_alive(&self, instance: &str) {
        let (pool, tenant, instance) = (
            self.pool.clone(),
            self.target.tenant.clone(),
            instance.to_string(),
        );
        self.driver.handle().spawn(async move {
            let mut beat = tokio::time::interval(hubs::BEAT);
            loop {
                beat.tick().await;
                let done =
                    in_tenant(&pool, &tenant, async |tx| hubs::beat(tx, &instance).await).await;
                match done {
                    Ok((0, 0)) => {}
                    Ok((failed, expired)) => tracing::warn!(
                        failed,
                        expired,
                        "recovered the approvals of a replica that stopped"
                    ),
                    Err(e) => tracing::warn!(error = %e, "the replica heartbeat failed"),
                }
            }
        });
    }

    /// The `LISTEN` channel decisions for this tenant are announced on.
    pub fn decisions_channel(&self) -> String {
        listen::channel(&self.target.tenant)
    }

    /// Calls `decided(id)` for each decision any replica records for this
    /// tenant, and `listening()` each time the listening connection starts
    /// listening, first and after a loss (notifications sent while it was
    /// down are gone: the waiting calls re-read the ledger then). Runs
    /// until the store is dropped.
    pub fn listen(
        &self,
        decided: impl Fn(&str) + Send + Sync + 'static,
        listening: impl Fn() + Send + Sync + 'static,
    ) -> Result<()> {
        let config = self.target.config()?;
        listen::spawn(
            self.driver.handle(),
            config,
            self.decisions_channel(),
            Arc::new(decided),
            Arc::new(listening),
        );
        Ok(())
    }
}

/// What went wrong under a connection error, in the deepest words
/// available (tokio-postgres repeats its own context at each level).
fn postgres_cause(e: &tokio_postgres::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Runs `f` in one transaction of `pool` acting for `tenant`: the setting
/// is local to the transaction, so the connection goes back to the pool
/// acting for no one.
async fn in_tenant<T>(
    pool: &Pool,
    tenant: &str,
    f: impl AsyncFnOnce(&Transaction<'_>) -> Result<T>,
) -> Result<T> {
    let mut lease = pool.lease().await?;
    let tx = lease.client().transaction().await?;
    // One round trip in the simple protocol (no statement to prepare);
    // the tenant is a checked plain name (`check_tenant`), so it cannot
    // leave its quotes.
    debug_assert!(airlock_common::is_tenant_name(tenant));
    tx.batch_execute(&format!(
        "SELECT set_config('{}', '{tenant}', true)",
        schema::TENANT_SETTING
    ))
    .await?;
    let out = f(&tx).await?;
    tx.commit().await?;
    Ok(out)
}

/// A tenant is a plain name: it is compared, logged and put in messages.
fn check_tenant(tenant: &str) -> Result<()> {
    if airlock_common::is_tenant_name(tenant) {
        Ok(())
    } else {
        Err(StoreError::Refused(format!(
            "the tenant `{tenant}` must be 1 to 64 letters, digits, `-`, `_` or `.`"
        )))
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
}

impl Store for PgStore {
    fn replace_catalog(
        &self,
        source: &str,
        kind: CatalogKind,
        entries: &[(String, serde_json::Value)],
    ) -> Result<()> {
        self.transaction(async |tx| {
            tx.execute(
                "DELETE FROM airlock.catalog WHERE source = $1 AND kind = $2",
                &[&source, &kind.as_str()],
            )
            .await?;
            let insert = tx
                .prepare(
                    "INSERT INTO airlock.catalog (source, kind, name, definition, seen_at_ms)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (tenant, source, kind, name) DO UPDATE
                         SET definition = excluded.definition, seen_at_ms = excluded.seen_at_ms",
                )
                .await?;
            let now = now_ms();
            for (name, def) in entries {
                tx.execute(
                    &insert,
                    &[&source, &kind.as_str(), name, &def.to_string(), &now],
                )
                .await?;
            }
            Ok(())
        })
    }

    fn catalog(&self, source: Option<&str>) -> Result<Vec<CatalogEntry>> {
        self.transaction(async |tx| {
            let rows = tx
                .query(
                    "SELECT source, kind, name, definition, seen_at_ms FROM airlock.catalog
                     WHERE ($1::text IS NULL OR source = $1) ORDER BY source, kind, name",
                    &[&source],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| CatalogEntry {
                    source: r.get(0),
                    kind: CatalogKind::parse(r.get(1)).unwrap_or(CatalogKind::Tool),
                    name: r.get(2),
                    definition: json(r.get(3)),
                    seen_at_ms: r.get(4),
                })
                .collect())
        })
    }

    fn set_source_status(&self, s: &SourceStatus) -> Result<()> {
        self.transaction(async |tx| {
            tx.execute(
                "INSERT INTO airlock.source_status (source, state, detail, updated_at_ms)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, source) DO UPDATE SET state = excluded.state,
                     detail = excluded.detail, updated_at_ms = excluded.updated_at_ms",
                &[&s.source, &s.state, &s.detail, &s.updated_at_ms],
            )
            .await?;
            Ok(())
        })
    }

    fn source_statuses(&self) -> Result<Vec<SourceStatus>> {
        self.transaction(async |tx| {
            let rows = tx
                .query(
                    "SELECT source, state, detail, updated_at_ms FROM airlock.source_status
                     ORDER BY source",
                    &[],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| SourceStatus {
                    source: r.get(0),
                    state: r.get(1),
                    detail: r.get(2),
                    updated_at_ms: r.get(3),
                })
                .collect())
        })
    }

    fn record_audit(&self, record: AuditRecord) -> Result<()> {
        // No group commit across replicas: each record is linked to the
        // shared head in its own transaction.
        self.record_audit_committed(record)
    }

    fn record_audit_committed(&self, record: AuditRecord) -> Result<()> {
        self.transaction(async |tx| audit::append(tx, &record).await)
            .map_err(|e| StoreError::AuditUnwritable(e.to_string()))
    }

    fn flush(&self) -> Result<()> {
        // Every record is committed before record_audit returns.
        Ok(())
    }

    fn audit(&self, filter: &AuditFilter, limit: usize) -> Result<Vec<StoredAudit>> {
        self.transaction(async |tx| audit::read(tx, filter, limit).await)
    }

    fn reviewed_contracts(&self) -> Result<HashMap<(String, String), String>> {
        self.transaction(async |tx| {
            let rows = tx
                .query("SELECT source, tool, digest FROM airlock.contracts", &[])
                .await?;
            Ok(rows
                .iter()
                .map(|r| ((r.get(0), r.get(1)), r.get(2)))
                .collect())
        })
    }

    fn reviewed_definitions(&self) -> Result<HashMap<(String, String), serde_json::Value>> {
        self.transaction(async |tx| {
            let rows = tx
                .query(
                    "SELECT source, tool, definition FROM airlock.contracts",
                    &[],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| ((r.get(0), r.get(1)), json(r.get(2))))
                .collect())
        })
    }

    fn pinned_contract(&self, source: &str, tool: &str) -> Result<Option<PinnedContract>> {
        self.transaction(async |tx| {
            let row = tx
                .query_opt(
                    "SELECT digest, definition, reviewed_at_ms, reviewer FROM airlock.contracts
                     WHERE source = $1 AND tool = $2",
                    &[&source, &tool],
                )
                .await?;
            Ok(row.map(|r| PinnedContract {
                source: source.to_string(),
                tool: tool.to_string(),
                digest: r.get(0),
                definition: json(r.get(1)),
                reviewed_at_ms: r.get(2),
                reviewer: r.get(3),
            }))
        })
    }

    fn contracts_generation(&self) -> Result<i64> {
        self.transaction(async |tx| {
            let row = tx
                .query_opt("SELECT contracts FROM airlock.generations", &[])
                .await?;
            Ok(row.map(|r| r.get(0)).unwrap_or(0))
        })
    }

    fn verify_audit(&self) -> Result<AuditCheck> {
        self.transaction(async |tx| audit::verify(tx).await)
    }

    fn ledger_create(
        &self,
        call: &crate::ledger::FrozenCall,
        ttl_ms: i64,
        retention_ms: i64,
    ) -> Result<crate::ledger::Pending> {
        self.transaction(async |tx| ledger::create(tx, call, ttl_ms, retention_ms).await)
    }

    fn ledger_look(&self, pending: crate::ledger::Pending) -> Result<crate::ledger::Waited> {
        self.transaction(async |tx| ledger::look(tx, &pending.id).await)
    }

    fn ledger_waited(&self, id: &str) -> Result<crate::ledger::Waited> {
        self.transaction(async |tx| ledger::look(tx, id).await)
    }

    fn ledger_expire(&self, pending: crate::ledger::Pending) -> Result<crate::ledger::Expiry> {
        self.transaction(async |tx| ledger::expire(tx, pending).await)
    }

    fn ledger_claim(
        &self,
        approved: crate::ledger::Approved,
    ) -> Result<Option<crate::ledger::Executing>> {
        self.transaction(async |tx| ledger::claim(tx, approved).await)
    }

    fn ledger_refuse(&self, approved: crate::ledger::Approved, why: &str) -> Result<()> {
        self.transaction(async |tx| ledger::refuse(tx, approved, why).await)
    }

    fn ledger_finish(
        &self,
        executing: crate::ledger::Executing,
        ok: bool,
        detail: &str,
    ) -> Result<()> {
        self.transaction(async |tx| ledger::finish(tx, executing, ok, detail).await)
    }

    fn ledger_recover(&self, running: &[String]) -> Result<(usize, usize)> {
        // Running: the hubs named, and every replica still beating.
        self.transaction(async |tx| {
            let mut alive = hubs::alive(tx).await?;
            alive.extend(running.iter().cloned());
            ledger::recover(tx, &alive).await
        })
    }

    fn ledger_list(&self, all: bool) -> Result<Vec<crate::ledger::ApprovalRow>> {
        self.transaction(async |tx| ledger::list(tx, all).await)
    }

    fn ledger_row(&self, id: &str) -> Result<Option<crate::ledger::ApprovalRow>> {
        self.transaction(async |tx| ledger::row(tx, id).await)
    }

    fn run_create(&self, run: &crate::runs::NewRun, retention_ms: i64) -> Result<()> {
        self.transaction(async |tx| runs::create(tx, run, retention_ms).await)
    }

    fn run_row(&self, id: &str) -> Result<Option<crate::runs::RunRow>> {
        self.transaction(async |tx| runs::row(tx, id).await)
    }

    fn run_take(&self, id: &str, principal: &str) -> Result<Option<crate::runs::RunRow>> {
        self.transaction(async |tx| runs::take(tx, id, principal).await)
    }

    fn run_set(&self, id: &str, state: crate::runs::RunState, detail: &str) -> Result<()> {
        self.transaction(async |tx| runs::set(tx, id, state, detail).await)
    }

    fn runs_list(&self, limit: usize) -> Result<Vec<crate::runs::RunRow>> {
        self.transaction(async |tx| runs::list(tx, limit).await)
    }

    fn journal(&self, run: &str) -> Result<Vec<crate::runs::JournalEntry>> {
        self.transaction(async |tx| runs::journal(tx, run).await)
    }

    fn journal_start(&self, run: &str, seq: u32, tool: &str, args_digest: &str) -> Result<()> {
        self.transaction(async |tx| runs::start(tx, run, seq, tool, args_digest).await)
    }

    fn journal_settle(&self, run: &str, seq: u32, reply: &str) -> Result<()> {
        self.transaction(async |tx| runs::settle(tx, run, seq, reply).await)
    }

    fn journal_pause(&self, run: &str, seq: u32, approval: &str) -> Result<()> {
        self.transaction(async |tx| runs::pause(tx, run, seq, approval).await)
    }

    fn standing_rules(&self) -> Result<Vec<crate::ledger::StandingRule>> {
        self.transaction(async |tx| ledger::standing_rules(tx).await)
    }

    fn approved_command(&self, source: &str) -> Result<Option<String>> {
        self.transaction(async |tx| {
            let row = tx
                .query_opt(
                    "SELECT fingerprint FROM airlock.commands WHERE source = $1",
                    &[&source],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }
}

impl Reviews for PgStore {
    fn pin_contract(&self, c: &PinnedContract) -> Result<()> {
        self.transaction(async |tx| {
            tx.execute(
                "INSERT INTO airlock.contracts (source, tool, digest, definition, reviewed_at_ms, reviewer)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (tenant, source, tool) DO UPDATE SET digest = excluded.digest,
                     definition = excluded.definition, reviewed_at_ms = excluded.reviewed_at_ms,
                     reviewer = excluded.reviewer",
                &[
                    &c.source,
                    &c.tool,
                    &c.digest,
                    &c.definition.to_string(),
                    &c.reviewed_at_ms,
                    &c.reviewer,
                ],
            )
            .await?;
            bump_contracts_generation(tx).await
        })
    }

    fn pin_command(&self, source: &str, fingerprint: &str, reviewer: &str) -> Result<()> {
        self.transaction(async |tx| {
            tx.execute(
                "INSERT INTO airlock.commands (source, fingerprint, reviewed_at_ms, reviewer)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, source) DO UPDATE SET fingerprint = excluded.fingerprint,
                     reviewed_at_ms = excluded.reviewed_at_ms, reviewer = excluded.reviewer",
                &[&source, &fingerprint, &now_ms(), &reviewer],
            )
            .await?;
            Ok(())
        })
    }
}

/// Tells every replica's contract cache to reload.
pub async fn bump_contracts_generation(tx: &Transaction<'_>) -> Result<()> {
    tx.execute(
        "INSERT INTO airlock.generations (contracts) VALUES (1)
         ON CONFLICT (tenant) DO UPDATE SET contracts = airlock.generations.contracts + 1",
        &[],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_connection_acts_for_no_tenant_between_transactions() {
        let db = airlock_pgtest::Server::shared().database();
        PgStore::migrate(&db.admin_url(), None, airlock_pgtest::HUB_ROLE, "team-a").unwrap();
        let store = PgStore::open(PgTarget {
            url: db.hub_url(),
            password: None,
            tenant: "team-a".into(),
        })
        .unwrap();
        store.pin_command("fs", "sha256:a", "me").unwrap();
        // The connection that transaction used, back in the pool: outside
        // any transaction it acts for no one (a tenant set for the
        // session would still be there, for whoever leases it next).
        let leftover = futures::executor::block_on(async {
            let mut lease = store.pool.lease().await?;
            let row = lease
                .client()
                .query_one(
                    "SELECT coalesce(current_setting('airlock.tenant', true), '')",
                    &[],
                )
                .await?;
            Ok::<String, StoreError>(row.get(0))
        })
        .unwrap();
        assert_eq!(leftover, "", "the tenant outlived its transaction");
    }

    #[test]
    fn tenants_are_plain_names() {
        for ok in ["default", "team-a", "acme.prod", "t_1"] {
            assert!(check_tenant(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "x'; --", "ü", &"a".repeat(65)] {
            assert!(check_tenant(bad).is_err(), "{bad}");
        }
    }
}
