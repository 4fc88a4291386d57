//! Conformance: quarantine records, bootstrap marks and documents.

use crate::contract::EngineMethod;
use crate::quarantine::FailedOperation;
use crate::store::StateStoreExt;
use crate::store::{QuarantineRecord, StateStore};

/// Quarantine records are upserted per engine, listed by engine id, and cleared one by one.
pub fn quarantine_records(store: &dyn StateStore) {
    let at = store.location();
    assert!(store.quarantines().unwrap().is_empty(), "{at}");
    let record = |engine: &str, reason: &str, at_ms: u64| QuarantineRecord {
        engine_id: engine.into(),
        operation: FailedOperation::Method(EngineMethod::Assemble),
        reason: reason.into(),
        at_ms,
    };
    store
        .record_quarantine(&record("zeta", "crashed", 5))
        .unwrap();
    store
        .record_quarantine(&record("alpha", "timeout", 7))
        .unwrap();
    store
        .record_quarantine(&record("zeta", "crashed again", 1_700_000_000_000))
        .unwrap();
    assert_eq!(
        store.quarantines().unwrap(),
        vec![
            record("alpha", "timeout", 7),
            record("zeta", "crashed again", 1_700_000_000_000)
        ],
        "{at}"
    );
    store.clear_quarantine("alpha").unwrap();
    store.clear_quarantine("never-quarantined").unwrap();
    assert_eq!(
        store.quarantines().unwrap(),
        vec![record("zeta", "crashed again", 1_700_000_000_000)],
        "{at}"
    );
}

/// A bootstrap mark is new once per (session, engine) and then reads as set.
pub fn bootstrap_marks(store: &dyn StateStore) {
    let at = store.location();
    assert!(!store.is_bootstrapped("s", "e").unwrap(), "{at}");
    assert!(
        store.mark_bootstrapped("s", "e").unwrap(),
        "{at}: first mark"
    );
    assert!(
        !store.mark_bootstrapped("s", "e").unwrap(),
        "{at}: repeat mark"
    );
    assert!(store.is_bootstrapped("s", "e").unwrap(), "{at}");
    assert!(!store.is_bootstrapped("s", "other").unwrap(), "{at}");
    assert!(!store.is_bootstrapped("other", "e").unwrap(), "{at}");
    assert!(store.mark_bootstrapped("other", "e").unwrap(), "{at}");
}

/// Documents round-trip per (namespace, key) and are overwritten by a later save.
pub fn documents(store: &dyn StateStore) {
    let at = store.location();
    assert_eq!(store.load_document("ns", "k").unwrap(), None, "{at}");
    store.save_document("ns", "k", "{\"v\":1}").unwrap();
    store.save_document("other", "k", "{\"v\":2}").unwrap();
    assert_eq!(
        store.load_document("ns", "k").unwrap().as_deref(),
        Some("{\"v\":1}"),
        "{at}"
    );
    store.save_document("ns", "k", "{\"v\":3}").unwrap();
    assert_eq!(
        store.load_document("ns", "k").unwrap().as_deref(),
        Some("{\"v\":3}"),
        "{at}"
    );
    assert_eq!(
        store.load_document("other", "k").unwrap().as_deref(),
        Some("{\"v\":2}"),
        "{at}"
    );
    assert_eq!(store.load_document("ns", "missing").unwrap(), None, "{at}");
}
