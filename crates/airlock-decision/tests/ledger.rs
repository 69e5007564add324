//! The ledger's races and edges, against a real store file.

use airlock_decision::{Choice, LedgerState, Recorded, record_decision};
use airlock_store::ledger::{Expiry, FrozenCall, Waited};
use airlock_store::{SqliteStore, Store};

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

fn setup() -> (tempfile::TempDir, std::sync::Arc<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_in(dir.path()).unwrap();
    (dir, store)
}

#[test]
fn approval_is_single_use() {
    let (_d, store) = setup();
    let p = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    let id = p.id().to_string();
    assert_eq!(
        record_decision(store.path(), &id, "me", Choice::AllowOnce, "cli").unwrap(),
        Recorded::Approved
    );
    // A second click, or a replay, finds nothing to decide.
    assert_eq!(
        record_decision(store.path(), &id, "me", Choice::AllowOnce, "cli").unwrap(),
        Recorded::NotFound
    );
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

#[test]
fn other_principal_cannot_decide() {
    let (_d, store) = setup();
    let p = store
        .ledger_create(&call("alice"), 60_000, 86_400_000)
        .unwrap();
    assert_eq!(
        record_decision(store.path(), p.id(), "mallory", Choice::AllowOnce, "cli").unwrap(),
        Recorded::NotFound
    );
    assert!(matches!(store.ledger_look(p).unwrap(), Waited::Pending(_)));
}

#[test]
fn late_decision_is_expired() {
    let (_d, store) = setup();
    let p = store.ledger_create(&call("me"), 0, 86_400_000).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(
        record_decision(store.path(), p.id(), "me", Choice::AllowOnce, "cli").unwrap(),
        Recorded::Expired
    );
    assert!(matches!(store.ledger_look(p).unwrap(), Waited::Expired));
}

#[test]
fn decision_at_expiry_has_one_winner() {
    // The clock and the person race for many rows; every row ends in
    // exactly one of the two outcomes, and both sides agree which.
    let (_d, store) = setup();
    for _ in 0..50 {
        let p = store
            .ledger_create(&call("me"), 60_000, 86_400_000)
            .unwrap();
        let id = p.id().to_string();
        let path = store.path().to_path_buf();
        let person = std::thread::spawn(move || {
            record_decision(&path, &id, "me", Choice::AllowOnce, "cli").unwrap()
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

#[test]
fn executing_at_crash_is_never_rerun() {
    let (_d, store) = setup();
    let p = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    record_decision(store.path(), p.id(), "me", Choice::AllowOnce, "cli").unwrap();
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

#[test]
fn terminal_rows_lose_their_arguments_after_retention() {
    let (_d, store) = setup();
    let p = store
        .ledger_create(&call("me"), 60_000, 86_400_000)
        .unwrap();
    record_decision(store.path(), p.id(), "me", Choice::Deny, "cli").unwrap();
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
