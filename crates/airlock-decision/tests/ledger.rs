//! The ledger's races and edges, against both backends: a real store
//! file, and a real PostgreSQL server (one per test process, a database
//! per test, the hub's role held by row-level security).

use std::sync::Arc;

use airlock_decision::{Choice, Ledger, LedgerState, Recorded, record_decision};
use airlock_store::ledger::{Expiry, FrozenCall, Waited};
use airlock_store::{PgStore, PgTarget, SqliteStore, Store};

fn call(principal: &str) -> FrozenCall {
    FrozenCall {
        principal: principal.into(),
        session: "hub-a/1".into(),
        source: "fs".into(),
        connection: "fs".into(),
        tool: "fs__write_file".into(),
        upstream: "write_file".into(),
        arguments: r#"{"path":"/tmp/x"}"#.into(),
        args_digest: "sha256:00".into(),
        reason: "asks".into(),
        description: "Write a file.".into(),
        contract_digest: "sha256:ab".into(),
    }
}

/// One backend under test.
struct Under {
    store: Arc<dyn Store>,
    ledger: Ledger,
    _dir: Option<tempfile::TempDir>,
}

impl Under {
    fn decide(&self, id: &str, principal: &str, choice: Choice) -> Recorded {
        record_decision(&self.ledger, id, principal, choice, "cli").unwrap()
    }
}

fn sqlite() -> Under {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_in(dir.path()).unwrap();
    Under {
        ledger: Ledger::Sqlite(store.path().to_path_buf()),
        store,
        _dir: Some(dir),
    }
}

/// `tenant`'s store, through a role of its own the owner mapped to it.
fn pg_tenant(db: &airlock_pgtest::Database, tenant: &str) -> Arc<PgStore> {
    let role = format!("hub_{}", tenant.replace('-', "_"));
    let url = db.url_as(&role);
    PgStore::migrate(&db.admin_url(), None, &role, tenant).unwrap();
    PgStore::open(PgTarget {
        url,
        password: None,
        tenant: tenant.into(),
    })
    .unwrap()
}

fn postgres() -> Under {
    let db = airlock_pgtest::Server::shared().database();
    PgStore::migrate(&db.admin_url(), None, airlock_pgtest::HUB_ROLE, "default").unwrap();
    let pg = pg_tenant(&db, "team-a");
    Under {
        ledger: Ledger::Postgres(pg.clone()),
        store: pg,
        _dir: None,
    }
}

/// Each test, once per backend.
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
    approval_is_single_use,
    other_principal_cannot_decide,
    late_decision_is_expired,
    decision_at_expiry_has_one_winner,
    two_people_deciding_at_once_have_one_winner,
    executing_at_crash_is_never_rerun,
    terminal_rows_lose_their_arguments_after_retention,
);

fn approval_is_single_use(u: Under) {
    let store = &u.store;
    let p = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    let id = p.id().to_string();
    assert_eq!(u.decide(&id, "me", Choice::AllowOnce), Recorded::Approved);
    // A second click, or a replay, finds nothing to decide.
    assert_eq!(u.decide(&id, "me", Choice::AllowOnce), Recorded::NotFound);
    // Two waiters (two hubs on one store) both see it approved...
    let Waited::Approved(a) = store.ledger_look(p).unwrap() else {
        panic!("not approved")
    };
    let Waited::Approved(again) = store.ledger_waited(&id).unwrap() else {
        panic!("not approved")
    };
    assert_eq!(a.choice(), Choice::AllowOnce);
    // ...and only one claim wins; the row is then no longer approved.
    assert!(store.ledger_claim(*a).unwrap().is_some());
    assert!(store.ledger_claim(*again).unwrap().is_none());
    assert!(matches!(store.ledger_waited(&id).unwrap(), Waited::Missing));
}

fn other_principal_cannot_decide(u: Under) {
    let store = &u.store;
    let p = store
        .ledger_create(&call("alice"), 60_000, 86_400_000)
        .unwrap();
    assert_eq!(
        u.decide(p.id(), "mallory", Choice::AllowOnce),
        Recorded::NotFound
    );
    assert!(matches!(store.ledger_look(p).unwrap(), Waited::Pending(_)));
}

fn late_decision_is_expired(u: Under) {
    let store = &u.store;
    let p = store.ledger_create(&call("me"), 0, 86_400_000).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(u.decide(p.id(), "me", Choice::AllowOnce), Recorded::Expired);
    assert!(matches!(store.ledger_look(p).unwrap(), Waited::Expired));
}

fn decision_at_expiry_has_one_winner(u: Under) {
    // The clock and the person race for many rows; every row ends in
    // exactly one of the two outcomes, and both sides agree which.
    let store = &u.store;
    for _ in 0..50 {
        let p = store
            .ledger_create(&call("me"), 60_000, 86_400_000)
            .unwrap();
        let id = p.id().to_string();
        let ledger = u.ledger.clone();
        let person = std::thread::spawn(move || {
            record_decision(&ledger, &id, "me", Choice::AllowOnce, "cli").unwrap()
        });
        let clock = store.ledger_expire(p).unwrap();
        let person = person.join().unwrap();
        match (clock, person) {
            (Expiry::Expired, Recorded::Expired | Recorded::NotFound) => {}
            (Expiry::DecisionWon(Waited::Approved(_)), Recorded::Approved) => {}
            (c, p) => panic!("two winners or none: clock {c:?}, person {p:?}"),
        }
    }
}

fn two_people_deciding_at_once_have_one_winner(u: Under) {
    // Two channels (or, with PostgreSQL, two replicas) decide the same
    // approval at the same moment: exactly one decision is recorded.
    for _ in 0..20 {
        let p = u
            .store
            .ledger_create(&call("me"), 60_000, 86_400_000)
            .unwrap();
        let deciders: Vec<_> = [Choice::AllowOnce, Choice::Deny]
            .into_iter()
            .map(|choice| {
                let (ledger, id) = (u.ledger.clone(), p.id().to_string());
                std::thread::spawn(move || {
                    record_decision(&ledger, &id, "me", choice, "cli").unwrap()
                })
            })
            .collect();
        let results: Vec<Recorded> = deciders.into_iter().map(|d| d.join().unwrap()).collect();
        let won = results
            .iter()
            .filter(|r| matches!(r, Recorded::Approved | Recorded::Denied))
            .count();
        assert_eq!(won, 1, "{results:?}");
        assert!(results.contains(&Recorded::NotFound), "{results:?}");
    }
}

fn executing_at_crash_is_never_rerun(u: Under) {
    let store = &u.store;
    let p = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    u.decide(p.id(), "me", Choice::AllowOnce);
    let Waited::Approved(a) = store.ledger_look(p).unwrap() else {
        panic!()
    };
    let a = *a;
    let _running = store.ledger_claim(a).unwrap().unwrap();
    let waiting = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    // Another hub starting beside it leaves its calls alone.
    assert_eq!(store.ledger_recover(&["hub-a".into()]).unwrap(), (0, 0));
    let Waited::Pending(waiting) = store.ledger_look(waiting).unwrap() else {
        panic!("a running hub's waiting call was expired by another hub")
    };
    // The hub dies here; on the next start:
    assert_eq!(store.ledger_recover(&["hub-b".into()]).unwrap(), (1, 1));
    let rows = store.ledger_list(true).unwrap();
    assert!(
        rows.iter()
            .any(|r| r.state == LedgerState::Failed && r.detail == "interrupted, not retried")
    );
    assert!(matches!(
        store.ledger_look(waiting).unwrap(),
        Waited::Expired
    ));
}

fn terminal_rows_lose_their_arguments_after_retention(u: Under) {
    let store = &u.store;
    let p = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    u.decide(p.id(), "me", Choice::Deny);
    let live = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    // Retention of 1 ms: the next insert sweeps the denied row, not the live one.
    store.ledger_create(&call("me"), 60_000, 1).unwrap();
    let rows = store.ledger_list(true).unwrap();
    let denied = rows
        .iter()
        .find(|r| r.state == LedgerState::Denied)
        .unwrap();
    assert_eq!(denied.call.arguments, "");
    assert_eq!(denied.call.args_digest, "sha256:00");
    let pending = rows.iter().find(|r| r.id == live.id()).unwrap();
    assert!(!pending.call.arguments.is_empty());
}

#[test]
fn another_tenant_can_neither_see_nor_decide_an_approval() {
    let db = airlock_pgtest::Server::shared().database();
    PgStore::migrate(&db.admin_url(), None, airlock_pgtest::HUB_ROLE, "default").unwrap();
    let (a, b) = (pg_tenant(&db, "team-a"), pg_tenant(&db, "team-b"));
    let p = a.ledger_create(&call("me"), 60_000, 86_400_000).unwrap();
    let id = p.id().to_string();
    // Same principal name, other tenant: nothing there.
    assert!(b.ledger_list(true).unwrap().is_empty());
    assert!(b.ledger_row(&id).unwrap().is_none());
    assert!(matches!(b.ledger_waited(&id).unwrap(), Waited::Missing));
    assert_eq!(
        record_decision(
            &Ledger::Postgres(b.clone()),
            &id,
            "me",
            Choice::AllowOnce,
            "cli"
        )
        .unwrap(),
        Recorded::NotFound
    );
    assert!(matches!(a.ledger_look(p).unwrap(), Waited::Pending(_)));
    // Recovery on B's replicas never touches A's rows.
    assert_eq!(b.ledger_recover(&[]).unwrap(), (0, 0));
    assert_eq!(a.ledger_list(false).unwrap().len(), 1);
}

#[test]
fn a_decision_is_announced_to_every_replica_of_the_tenant_only() {
    let db = airlock_pgtest::Server::shared().database();
    PgStore::migrate(&db.admin_url(), None, airlock_pgtest::HUB_ROLE, "default").unwrap();
    let waiting = pg_tenant(&db, "team-a");
    let deciding = pg_tenant(&db, "team-a");
    let other = pg_tenant(&db, "team-b");
    let (listening, heard) = std::sync::mpsc::channel::<String>();
    let (other_tx, other_heard) = std::sync::mpsc::channel::<String>();
    let (up_tx, up) = std::sync::mpsc::channel::<()>();
    waiting
        .listen(
            move |id| {
                let _ = listening.send(id.to_string());
            },
            move || {
                let _ = up_tx.send(());
            },
        )
        .unwrap();
    other
        .listen(
            move |id| {
                let _ = other_tx.send(id.to_string());
            },
            || {},
        )
        .unwrap();
    let wait = std::time::Duration::from_secs(10);
    up.recv_timeout(wait).expect("the waiting replica listens");
    let p = waiting
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    let id = p.id().to_string();
    let deciding = Ledger::Postgres(deciding);
    assert_eq!(
        record_decision(&deciding, &id, "me", Choice::AllowOnce, "cli").unwrap(),
        Recorded::Approved
    );
    assert_eq!(
        heard.recv_timeout(wait).unwrap(),
        id,
        "only the id is announced"
    );
    assert!(matches!(
        waiting.ledger_look(p).unwrap(),
        Waited::Approved(_)
    ));
    assert!(
        other_heard
            .recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "another tenant's replica heard the decision"
    );
}

#[test]
fn a_listener_that_lost_its_connection_listens_again_and_says_so_to_catch_up() {
    let db = airlock_pgtest::Server::shared().database();
    let waiting = pg_tenant(&db, "team-a");
    let deciding = Ledger::Postgres(pg_tenant(&db, "team-a"));
    let (heard_tx, heard) = std::sync::mpsc::channel::<String>();
    let (up_tx, up) = std::sync::mpsc::channel::<()>();
    waiting
        .listen(
            move |id| {
                let _ = heard_tx.send(id.to_string());
            },
            move || {
                let _ = up_tx.send(());
            },
        )
        .unwrap();
    let wait = std::time::Duration::from_secs(10);
    up.recv_timeout(wait).expect("listening");
    // The listening connection is cut (a failover, a restart of the
    // server), and a decision is made while it is down: its NOTIFY is
    // lost for this listener.
    let p = waiting
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    let id = p.id().to_string();
    airlock_pgtest::Server::shared().psql(
        &db.name,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'",
    );
    assert_eq!(
        record_decision(&deciding, &id, "me", Choice::AllowOnce, "cli").unwrap(),
        Recorded::Approved
    );
    // The listener comes back and says so: that is when a hub has every
    // waiting call re-read its row, and this one finds its decision.
    up.recv_timeout(wait)
        .expect("the listener listened again after losing its connection");
    assert!(matches!(
        waiting.ledger_look(p).unwrap(),
        Waited::Approved(_)
    ));
    // Decisions after the reconnect are heard again.
    let p2 = waiting
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    let id2 = p2.id().to_string();
    record_decision(&deciding, &id2, "me", Choice::Deny, "cli").unwrap();
    loop {
        let h = heard
            .recv_timeout(wait)
            .expect("a decision after the reconnect was heard");
        if h == id2 {
            break;
        }
        assert_eq!(h, id, "only the two decisions are announced");
    }
}
