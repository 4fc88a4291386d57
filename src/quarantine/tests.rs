use std::time::Duration;

use super::*;
use crate::contract::{AssembleResult, CompactDetails, CompactResult, EngineMethod, SessionTarget};

/// A record round-trips through JSON with the operation as its contract name.
#[test]
fn records_serialize_with_operation_names() {
    let record = QuarantineRecord {
        engine_id: "e".into(),
        operation: FailedOperation::Method(EngineMethod::AfterTurn),
        reason: "boom".into(),
        at_ms: 0,
    };
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"engineId": "e", "operation": "afterTurn", "reason": "boom"})
    );
    assert_eq!(
        serde_json::from_value::<QuarantineRecord>(json).unwrap(),
        record
    );
    assert_eq!(
        FailedOperation::parse("resolve"),
        Some(FailedOperation::Resolve)
    );
    assert_eq!(FailedOperation::parse("nope"), None);
}

/// The book keeps the first failure, never records legacy, and restores without overwriting.
#[test]
fn book_first_failure_wins() {
    let book = QuarantineBook::new();
    assert!(book.quarantine("e", FailedOperation::Resolve, "first"));
    assert!(!book.quarantine("e", FailedOperation::Factory, "second"));
    assert_eq!(book.get("e").unwrap().reason, "first");
    assert!(!book.quarantine("legacy", FailedOperation::Resolve, "x"));
    assert!(!book.is_quarantined("legacy"));
    let added = book.restore([
        QuarantineRecord {
            engine_id: "e".into(),
            operation: FailedOperation::Factory,
            reason: "old".into(),
            at_ms: 0,
        },
        QuarantineRecord {
            engine_id: "f".into(),
            operation: FailedOperation::Method(EngineMethod::Compact),
            reason: "old".into(),
            at_ms: 0,
        },
    ]);
    assert_eq!(added, 1);
    assert_eq!(book.get("e").unwrap().reason, "first");
    assert_eq!(book.records().len(), 2);
    assert!(book.clear("f").is_some());
    assert!(!book.is_quarantined("f"));
}

/// estimatedTokens must be finite and non-negative.
#[test]
fn assemble_validation() {
    let mut r = AssembleResult::default();
    assert!(validate_assemble_result(&r).is_ok());
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        r.estimated_tokens = bad;
        assert!(validate_assemble_result(&r).is_err(), "{bad}");
    }
}

/// A successor naming another agent or session key is rejected; the same ones pass; the
/// mirrored session id must agree.
#[test]
fn compact_successor_validation() {
    let caller = CallerSession {
        agent_id: Some("main".into()),
        session_key: Some("k".into()),
    };
    let result = |target: SessionTarget, session_id: Option<&str>| CompactResult {
        ok: true,
        compacted: true,
        reason: None,
        result: Some(CompactDetails {
            tokens_before: 10.0,
            session_id: session_id.map(str::to_string),
            session_target: Some(target),
            ..Default::default()
        }),
    };
    let same = SessionTarget {
        agent_id: Some("main".into()),
        session_key: Some("k".into()),
        session_id: Some("s2".into()),
        ..Default::default()
    };
    assert!(validate_compact_result(&result(same.clone(), Some("s2")), &caller).is_ok());
    let other_agent = SessionTarget {
        agent_id: Some("ops".into()),
        ..same.clone()
    };
    let e = validate_compact_result(&result(other_agent, None), &caller).unwrap_err();
    assert!(e.contains("agent \"ops\""), "{e}");
    let other_key = SessionTarget {
        session_key: Some("k2".into()),
        ..same.clone()
    };
    assert!(validate_compact_result(&result(other_key, None), &caller).is_err());
    assert!(validate_compact_result(&result(same.clone(), Some("s3")), &caller).is_err());
    let bad_flags = CompactResult {
        ok: false,
        compacted: true,
        reason: None,
        result: None,
    };
    assert!(validate_compact_result(&bad_flags, &caller).is_err());
    let mut negative = result(same, None);
    if let Some(d) = negative.result.as_mut() {
        d.tokens_after = Some(-5.0);
    }
    assert!(validate_compact_result(&negative, &caller).is_err());
}

/// Per-entry timeoutMs applies to every method; defaults are 60 s and 180 s for compact.
#[test]
fn timeouts() {
    let d = CallTimeouts::default();
    assert_eq!(
        d.for_method(EngineMethod::Assemble),
        Duration::from_secs(60)
    );
    assert_eq!(
        d.for_method(EngineMethod::Compact),
        Duration::from_secs(180)
    );
    let t = CallTimeouts::from_timeout_ms(Some(250));
    assert_eq!(
        t.for_method(EngineMethod::Compact),
        Duration::from_millis(250)
    );
    assert_eq!(CallTimeouts::from_timeout_ms(None), d);
}
