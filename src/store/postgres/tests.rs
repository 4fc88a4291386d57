//! Tests of the PostgreSQL store that need no server: URL redaction, schema names, refused
//! options, the store kind `open_store` selects and the order of the migrations.

use super::migrations::{MIGRATIONS, SCHEMA_VERSION};
use super::*;

/// The password disappears from URLs (user info and query) and key/value strings; the
/// rest stays readable.
#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redact_url("postgres://app:s3cret@db.example:5432/ctx?sslmode=disable"),
        "postgres://app:***@db.example:5432/ctx?sslmode=disable"
    );
    assert_eq!(
        redact_url("postgresql://app:p@ss@h1,h2/ctx"),
        "postgresql://app:***@h1,h2/ctx"
    );
    assert_eq!(
        redact_url("postgres://app@h/ctx?user=x&password=hunter2&x=1"),
        "postgres://app@h/ctx?user=x&password=***&x=1"
    );
    assert_eq!(
        redact_url("postgres://postgres@127.0.0.1:5432/test"),
        "postgres://postgres@127.0.0.1:5432/test"
    );
    assert_eq!(
        redact_url("host=h user=u password=hunter2 dbname=d"),
        "host=h user=u password=*** dbname=d"
    );
    assert_eq!(
        redact_url("host=h password = 'a b\\' c' dbname=d"),
        "host=h password = *** dbname=d"
    );
}

/// Only plain lower-case identifiers are accepted as schema names.
#[test]
fn schema_names_are_plain_identifiers() {
    assert!(valid_schema_name("ctxbridge"));
    assert!(valid_schema_name("_t_1"));
    assert!(!valid_schema_name(""));
    assert!(!valid_schema_name("1abc"));
    assert!(!valid_schema_name("Mixed"));
    assert!(!valid_schema_name("a\"; DROP TABLE x; --"));
    assert!(!valid_schema_name(&"a".repeat(64)));
}

/// A bad schema name and an unparsable URL are refused before any connection is tried,
/// naming the redacted URL.
#[test]
fn unusable_options_are_refused() {
    let err = PostgresStore::connect(
        "postgres://u:secret@127.0.0.1:1/db",
        PostgresOptions::default().with_schema("Bad-Name"),
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::PostgresSetup { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("u:***@127.0.0.1:1/db"), "{text}");
    assert!(!text.contains("secret"), "{text}");

    let err =
        PostgresStore::connect("postgres://h/db?bogus=1", PostgresOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("parse the URL"), "{err}");

    // A URL that does not parse is never shown, not even redacted.
    for url in [
        "postgres:/root:MalSecret1@127.0.0.1:5433/db",
        "not a url MalSecret1",
    ] {
        let err = PostgresStore::connect(url, PostgresOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("not shown") && !text.contains("MalSecret1"),
            "{text}"
        );
    }
}

/// `open_store` opens the selected kind: a SQLite file, or PostgreSQL (here an unusable
/// URL, refused before any connection).
#[test]
fn open_store_selects_the_kind() {
    use crate::store::{open_store, StoreTarget};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open_store(&StoreTarget::Sqlite(path.clone())).unwrap();
    assert_eq!(store.location(), path.display().to_string());
    let err = open_store(&StoreTarget::Postgres {
        url: "postgres://h/db?bogus=1".into(),
        options: PostgresOptions::default(),
    })
    .err()
    .unwrap();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
}

/// The migrations are ordered, start at 1, and end at the version this build reports.
#[test]
fn migrations_are_ordered() {
    let versions: Vec<i64> = MIGRATIONS.iter().map(|(v, _)| *v).collect();
    let expected: Vec<i64> = (1..=SCHEMA_VERSION).collect();
    assert_eq!(versions, expected);
}
