//! One suite, both backends: what every store must do, run against the
//! embedded SQLite file and a real PostgreSQL server (one per test
//! process, a database per test, the hub's role held by row-level
//! security). The team backend's own guards (tenants, roles, the schema
//! gate) follow.

use std::sync::Arc;

use airlock_common::now_ms;
use airlock_pgtest::{Database, HUB_ROLE, Server};
use airlock_store::postgres::schema;
use airlock_store::runs::{NewRun, RunState};
use airlock_store::{
    AuditCheck, AuditFilter, AuditKind, AuditRecord, CatalogKind, PgStore, PgTarget,
    PinnedContract, Reviews, SourceStatus, SqliteStore, Store, StoreError,
};

trait Backend: Store + Reviews {}
impl<T: Store + Reviews> Backend for T {}

struct Under {
    store: Arc<dyn Backend>,
    /// Runs SQL as an attacker with raw access to the data would (the
    /// file's owner; PostgreSQL's superuser). Table names are unqualified.
    raw: Box<dyn Fn(&str)>,
    _dir: Option<tempfile::TempDir>,
}

fn sqlite() -> Under {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_in(dir.path()).unwrap();
    let path = store.path().to_path_buf();
    Under {
        store,
        raw: Box::new(move |sql| {
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute_batch(sql)
                .unwrap()
        }),
        _dir: Some(dir),
    }
}

fn migrated() -> Database {
    let db = Server::shared().database();
    PgStore::migrate(&db.admin_url(), None, HUB_ROLE, "default").unwrap();
    db
}

/// The role of `tenant`'s hubs (each tenant has its own).
fn role_of(tenant: &str) -> String {
    format!("hub_{}", tenant.replace('-', "_"))
}

/// `tenant`'s URL: its role, created and mapped to it by the owner.
fn url_of(db: &Database, tenant: &str) -> String {
    let url = db.url_as(&role_of(tenant));
    PgStore::migrate(&db.admin_url(), None, &role_of(tenant), tenant).unwrap();
    url
}

fn tenant(db: &Database, tenant: &str) -> Arc<PgStore> {
    PgStore::open(PgTarget {
        url: url_of(db, tenant),
        password: None,
        tenant: tenant.into(),
    })
    .unwrap()
}

fn postgres() -> Under {
    let db = migrated();
    let store = tenant(&db, "team-a");
    let name = db.name.clone();
    Under {
        store,
        raw: Box::new(move |sql| {
            Server::shared().psql(&name, &format!("SET search_path = airlock; {sql}"));
        }),
        _dir: None,
    }
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(super::sqlite()) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(super::postgres()) } )*
        }
    };
}

on_both!(
    catalog_is_replaced_per_source_and_kind,
    status_is_upserted,
    audit_chain_holds_under_concurrent_writers,
    audit_chain_detects_an_edit_a_deletion_and_an_edited_column,
    contracts_are_pinned_with_a_generation,
    commands_are_pinned_per_source,
    a_paused_run_is_taken_once_and_its_journal_never_repeats_a_call,
);

fn record(tool: &str) -> AuditRecord {
    AuditRecord {
        tool: tool.into(),
        source: "demo".into(),
        decision: "allow".into(),
        reason: "allowed by the user policy".into(),
        ..AuditRecord::new(AuditKind::Decision, "c1", now_ms())
    }
}

fn catalog_is_replaced_per_source_and_kind(u: Under) {
    let store = &u.store;
    let def = serde_json::json!({"name": "echo", "inputSchema": {"type": "object"}});
    store
        .replace_catalog("a", CatalogKind::Tool, &[("echo".into(), def.clone())])
        .unwrap();
    store
        .replace_catalog("a", CatalogKind::Prompt, &[("p".into(), def.clone())])
        .unwrap();
    store
        .replace_catalog("b", CatalogKind::Tool, &[("x".into(), def.clone())])
        .unwrap();
    store.replace_catalog("a", CatalogKind::Tool, &[]).unwrap();
    let all = store.catalog(None).unwrap();
    let names: Vec<_> = all
        .iter()
        .map(|e| (e.source.as_str(), e.name.as_str()))
        .collect();
    assert_eq!(names, [("a", "p"), ("b", "x")]);
    assert_eq!(all[1].definition, def);
    assert_eq!(store.catalog(Some("b")).unwrap().len(), 1);
}

fn status_is_upserted(u: Under) {
    for state in ["starting", "ready"] {
        u.store
            .set_source_status(&SourceStatus {
                source: "demo".into(),
                state: state.into(),
                detail: String::new(),
                updated_at_ms: now_ms(),
            })
            .unwrap();
    }
    let s = u.store.source_statuses().unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].state, "ready");
}

fn audit_chain_holds_under_concurrent_writers(u: Under) {
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let store = u.store.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    store
                        .record_audit_committed(record(&format!("demo__t{t}_{i}")))
                        .unwrap();
                    store.record_audit(record("demo__outcome")).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    u.store.flush().unwrap();
    let all = u.store.audit(&AuditFilter::default(), 10_000).unwrap();
    assert_eq!(all.len(), 300);
    let mut committed: Vec<_> = all
        .iter()
        .map(|r| r.record.tool.clone())
        .filter(|t| t != "demo__outcome")
        .collect();
    committed.sort();
    committed.dedup();
    assert_eq!(committed.len(), 150, "each committed record once");
    assert!(matches!(
        u.store.verify_audit().unwrap(),
        AuditCheck::Intact { records: 300, .. }
    ));
    let filtered = u
        .store
        .audit(
            &AuditFilter {
                tool: Some("demo__t1_3".into()),
                ..Default::default()
            },
            10,
        )
        .unwrap();
    assert_eq!(filtered.len(), 1);
}

fn audit_chain_detects_an_edit_a_deletion_and_an_edited_column(u: Under) {
    for i in 0..6 {
        u.store
            .record_audit_committed(record(&format!("demo__t{i}")))
            .unwrap();
    }
    let seqs: Vec<i64> = {
        let mut s: Vec<_> = u
            .store
            .audit(&AuditFilter::default(), 10)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        s.sort();
        s
    };
    let broken_at = |u: &Under| match u.store.verify_audit().unwrap() {
        AuditCheck::Broken { seq, why } => (seq, why),
        AuditCheck::Intact { .. } => panic!("tampering not detected"),
    };
    (u.raw)(&format!(
        "UPDATE audit SET decision = 'deny' WHERE seq = {}",
        seqs[4]
    ));
    assert_eq!(broken_at(&u).0, seqs[4]);
    (u.raw)(&format!(
        "UPDATE audit SET record = replace(record, 'allowed by', 'denied by') WHERE seq = {}",
        seqs[2]
    ));
    let (seq, why) = broken_at(&u);
    assert_eq!(seq, seqs[2]);
    assert!(why.contains("edited"), "{why}");
    (u.raw)(&format!("DELETE FROM audit WHERE seq = {}", seqs[1]));
    let (seq, why) = broken_at(&u);
    assert_eq!(seq, seqs[2]);
    assert!(why.contains("deleted"), "{why}");
}

fn contracts_are_pinned_with_a_generation(u: Under) {
    let g0 = u.store.contracts_generation().unwrap();
    let pin = |digest: &str| PinnedContract {
        source: "fs".into(),
        tool: "read".into(),
        digest: digest.into(),
        definition: serde_json::json!({"name": "read"}),
        reviewed_at_ms: now_ms(),
        reviewer: "me".into(),
    };
    u.store.pin_contract(&pin("sha256:ab")).unwrap();
    u.store.pin_contract(&pin("sha256:cd")).unwrap();
    assert_eq!(u.store.contracts_generation().unwrap(), g0 + 2);
    let reviewed = u.store.reviewed_contracts().unwrap();
    assert_eq!(reviewed.len(), 1);
    assert_eq!(
        reviewed[&("fs".to_string(), "read".to_string())],
        "sha256:cd"
    );
    let def = u.store.reviewed_definitions().unwrap();
    assert_eq!(
        def[&("fs".to_string(), "read".to_string())],
        serde_json::json!({"name": "read"})
    );
    assert_eq!(
        u.store
            .pinned_contract("fs", "read")
            .unwrap()
            .unwrap()
            .reviewer,
        "me"
    );
    assert!(u.store.pinned_contract("fs", "write").unwrap().is_none());
}

fn commands_are_pinned_per_source(u: Under) {
    assert_eq!(u.store.approved_command("fs").unwrap(), None);
    u.store.pin_command("fs", "sha256:1", "me").unwrap();
    u.store.pin_command("fs", "sha256:2", "me").unwrap();
    assert_eq!(
        u.store.approved_command("fs").unwrap().as_deref(),
        Some("sha256:2")
    );
    assert_eq!(u.store.approved_command("other").unwrap(), None);
}

fn a_paused_run_is_taken_once_and_its_journal_never_repeats_a_call(u: Under) {
    let run = NewRun {
        id: "run1".into(),
        principal: "me".into(),
        code: "await tools.a()".into(),
        seed: u32::MAX,
        clock_ms: 1,
    };
    u.store.run_create(&run, 86_400_000).unwrap();
    u.store
        .journal_start("run1", 1, "demo__a", "sha256:0")
        .unwrap();
    assert!(
        u.store
            .journal_start("run1", 1, "demo__a", "sha256:0")
            .is_err(),
        "a started call is never started again"
    );
    u.store.journal_pause("run1", 1, "appr").unwrap();
    u.store.run_set("run1", RunState::Paused, "waits").unwrap();
    assert!(u.store.run_take("run1", "mallory").unwrap().is_none());
    let taken = u.store.run_take("run1", "me").unwrap().unwrap();
    assert_eq!(
        (taken.state, taken.resumes, taken.seed),
        (RunState::Running, 1, u32::MAX)
    );
    assert!(
        u.store.run_take("run1", "me").unwrap().is_none(),
        "taken once"
    );
    u.store.journal_settle("run1", 1, "{\"value\":1}").unwrap();
    let journal = u.store.journal("run1").unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].reply, "{\"value\":1}");
    assert_eq!(journal[0].approval, "appr");
    assert_eq!(u.store.runs_list(10).unwrap().len(), 1);
}

// The team backend's own guards.

#[test]
fn a_tenant_sees_only_its_own_rows() {
    let db = migrated();
    let (a, b) = (tenant(&db, "team-a"), tenant(&db, "team-b"));
    a.replace_catalog(
        "fs",
        CatalogKind::Tool,
        &[("read".into(), serde_json::json!({}))],
    )
    .unwrap();
    a.record_audit_committed(record("fs__read")).unwrap();
    a.pin_command("fs", "sha256:1", "me").unwrap();
    a.pin_contract(&PinnedContract {
        source: "fs".into(),
        tool: "read".into(),
        digest: "sha256:ab".into(),
        definition: serde_json::json!({}),
        reviewed_at_ms: 0,
        reviewer: "me".into(),
    })
    .unwrap();
    assert!(b.catalog(None).unwrap().is_empty());
    assert!(b.audit(&AuditFilter::default(), 10).unwrap().is_empty());
    assert!(b.reviewed_contracts().unwrap().is_empty());
    assert_eq!(b.contracts_generation().unwrap(), 0);
    assert_eq!(b.approved_command("fs").unwrap(), None);
    // Each tenant's chain is its own: B's starts fresh, A's stays whole.
    b.record_audit_committed(record("fs__other")).unwrap();
    assert!(matches!(
        b.verify_audit().unwrap(),
        AuditCheck::Intact { records: 1, .. }
    ));
    assert!(matches!(
        a.verify_audit().unwrap(),
        AuditCheck::Intact { records: 1, .. }
    ));
}

/// What `role` reads with raw SQL, with `setting` as its tenant (or none).
fn raw_as(db: &Database, role: &str, setting: Option<&str>, sql: &str) -> std::process::Output {
    let set = setting
        .map(|t| format!("SET airlock.tenant = '{t}'; "))
        .unwrap_or_default();
    Server::shared().psql_output(role, &db.name, &format!("{set}{sql}"))
}

#[test]
fn raw_sql_as_a_tenants_role_sees_only_its_tenant_whatever_it_names_and_nothing_without_one() {
    let db = migrated();
    let (a, b) = (tenant(&db, "team-a"), tenant(&db, "team-b"));
    a.pin_command("fs", "sha256:a", "me").unwrap();
    b.pin_command("fs", "sha256:b", "me").unwrap();
    let read = |role: &str, setting| {
        let sql = "SELECT fingerprint FROM airlock.commands ORDER BY 1";
        let out = raw_as(&db, role, setting, sql);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let (role_a, role_b) = (role_of("team-a"), role_of("team-b"));
    assert_eq!(read(&role_a, Some("team-a")), "sha256:a");
    assert_eq!(read(&role_b, Some("team-b")), "sha256:b");
    // A's role naming B's tenant (as a hub told `--tenant team-b` would,
    // or anyone holding A's credentials) sees nothing of B's.
    assert_eq!(read(&role_a, Some("team-b")), "", "A's role read B's rows");
    assert_eq!(read(&role_b, Some("team-a")), "", "B's role read A's rows");
    // A role mapped to no tenant sees nothing, whatever it names.
    assert_eq!(read(HUB_ROLE, Some("team-a")), "");
    assert_eq!(read(&role_a, None), "", "no setting sees nothing");
    assert_eq!(read(&role_a, Some("")), "", "an empty setting sees nothing");
    // A's role cannot remap itself, nor rewrite the audit log.
    for sql in [
        "UPDATE airlock.tenant_roles SET tenant = 'team-b'",
        "INSERT INTO airlock.tenant_roles (role, tenant) VALUES ('x', 'team-b')",
        "DELETE FROM airlock.audit",
        "UPDATE airlock.audit SET record = ''",
        "TRUNCATE airlock.audit",
    ] {
        let out = raw_as(&db, &role_a, Some("team-a"), sql);
        assert!(!out.status.success(), "{sql} was allowed");
    }
    // Writing into another tenant, or into none, is refused.
    for (setting, sql) in [
        (
            Some("team-a"),
            "INSERT INTO airlock.commands (tenant, source, fingerprint, reviewed_at_ms, reviewer) VALUES ('team-b', 'x', 'f', 0, 'me')",
        ),
        (
            None,
            "INSERT INTO airlock.commands (source, fingerprint, reviewed_at_ms, reviewer) VALUES ('x', 'f', 0, 'me')",
        ),
        (
            Some("team-a"),
            "UPDATE airlock.commands SET tenant = 'team-b'",
        ),
    ] {
        let out = raw_as(&db, &role_a, setting, sql);
        assert!(!out.status.success(), "{sql} was allowed");
    }
    // Nor can the hub's role change the rules it is held by.
    for sql in [
        "ALTER TABLE airlock.commands DISABLE ROW LEVEL SECURITY",
        "DROP POLICY tenant_rows ON airlock.commands",
        "UPDATE airlock.schema_version SET version = 0",
    ] {
        assert!(
            !raw_as(&db, &role_a, Some("team-a"), sql).status.success(),
            "{sql}"
        );
    }
}

#[test]
fn every_table_has_row_level_security_enabled_and_forced_unless_exempt() {
    let db = migrated();
    let rows = Server::shared().psql(
        &db.name,
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
                (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'airlock' AND c.relkind IN ('r', 'p') ORDER BY 1",
    );
    let mut seen = 0;
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let cols: Vec<_> = line.split('|').collect();
        let (table, enabled, forced, policies) = (cols[0], cols[1], cols[2], cols[3]);
        seen += 1;
        if let Some((_, why)) = schema::EXEMPT.iter().find(|(t, _)| *t == table) {
            assert!(!why.is_empty());
            continue;
        }
        assert_eq!(
            (enabled, forced, policies),
            ("t", "t", "1"),
            "table {table}: row-level security enabled, forced, one policy"
        );
    }
    assert!(seen >= 12, "only {seen} tables found");
}

#[test]
fn a_hub_refuses_a_role_that_row_level_security_does_not_hold() {
    let db = migrated();
    let server = Server::shared();
    server.psql(
        &db.name,
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bypasser') THEN
             CREATE ROLE bypasser LOGIN BYPASSRLS; END IF;
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owner_member') THEN
             CREATE ROLE owner_member LOGIN; END IF;
         END $$;
         GRANT admin TO owner_member;",
    );
    for (role, why) in [
        (airlock_pgtest::ADMIN, "superuser"),
        ("bypasser", "BYPASSRLS"),
        ("owner_member", "owns"),
    ] {
        let opened = PgStore::open(PgTarget {
            url: format!("postgres://{role}@127.0.0.1:{}/{}", server.port(), db.name),
            password: None,
            tenant: "team-a".into(),
        });
        match opened {
            Err(StoreError::Refused(m)) => assert!(m.contains(why), "{role}: {m}"),
            Err(e) => panic!("{role}: wrong error {e}"),
            Ok(_) => panic!("{role} was accepted"),
        }
    }
}

#[test]
fn a_tenants_role_cannot_open_the_store_as_another_tenant() {
    let db = migrated();
    let url_a = url_of(&db, "team-a");
    for (url, tenant) in [(url_a.clone(), "team-b"), (db.hub_url(), "team-a")] {
        match PgStore::open(PgTarget {
            url,
            password: None,
            tenant: tenant.into(),
        }) {
            Err(StoreError::Refused(m)) => assert!(m.contains("acts for"), "{m}"),
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("opened as {tenant} with another tenant's role"),
        }
    }
    // A password in the URL is refused however it is spelled.
    for url in [
        format!("{url_a}?password=x"),
        format!("{url_a}?passw%6Frd=x"),
        url_a.replacen("://hub_team_a@", "://hub_team_a:x@", 1),
    ] {
        let err = PgStore::open(PgTarget {
            url: url.clone(),
            password: None,
            tenant: "team-a".into(),
        })
        .err()
        .unwrap_or_else(|| panic!("{url} accepted"));
        assert!(
            !err.to_string().contains("=x") && !err.to_string().contains(":x@"),
            "{err}"
        );
    }
}

#[test]
fn a_schema_it_does_not_know_is_refused_and_never_migrated_by_a_hub() {
    let db = Server::shared().database();
    // No schema yet: the hub says who creates it.
    match PgStore::open(PgTarget {
        url: db.hub_url(),
        password: None,
        tenant: "t".into(),
    }) {
        Err(StoreError::Refused(m)) => assert!(m.contains("airlock store migrate"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    PgStore::migrate(&db.admin_url(), None, HUB_ROLE, "t").unwrap();
    // Migrating again is a no-op; mapping the role to another tenant is
    // refused.
    assert_eq!(
        PgStore::migrate(&db.admin_url(), None, HUB_ROLE, "t").unwrap(),
        schema::supported()
    );
    assert!(matches!(
        PgStore::migrate(&db.admin_url(), None, HUB_ROLE, "other"),
        Err(StoreError::Refused(_))
    ));
    for bad in ["public", "pg_read_all_data", "no_such_role", "a;b"] {
        assert!(
            PgStore::migrate(&db.admin_url(), None, bad, "t").is_err(),
            "{bad} accepted as a hub role"
        );
    }
    Server::shared().psql(&db.name, "UPDATE airlock.schema_version SET version = 99");
    let target = PgTarget {
        url: db.hub_url(),
        password: None,
        tenant: "t".into(),
    };
    assert!(matches!(
        PgStore::open(target),
        Err(StoreError::TooNew { found: 99, .. })
    ));
    assert!(matches!(
        PgStore::migrate(&db.admin_url(), None, HUB_ROLE, "t"),
        Err(StoreError::TooNew { found: 99, .. })
    ));
}

#[test]
fn a_lost_database_fails_calls_clearly_and_the_store_recovers_without_a_restart() {
    let db = migrated();
    let a = tenant(&db, "team-a");
    a.pin_command("fs", "sha256:a", "me").unwrap();
    // Every connection of the hub's role is cut, as a failover would.
    Server::shared().psql(
        &db.name,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{HUB_ROLE}'"
        ),
    );
    // The first use may meet the dead connection and fail with a clear
    // error; the pool then reconnects.
    let mut answered = None;
    for _ in 0..3 {
        match a.approved_command("fs") {
            Ok(v) => {
                answered = Some(v);
                break;
            }
            Err(e) => assert!(matches!(e, StoreError::Postgres(_)), "{e}"),
        }
    }
    assert_eq!(answered.flatten().as_deref(), Some("sha256:a"));
}
