//! The PostgreSQL store's schema migrations: the embedded, ordered migrations, the version this
//! build knows, and applying them at start under an advisory lock.

use super::{PostgresStore, LOCK_MIGRATE};
use crate::store::{StateStore, StoreError};

/// The embedded migrations, in order: `(version, SQL)`. A released migration is never edited;
/// a schema change is a new entry.
pub(super) const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "
CREATE TABLE ctxbridge_bindings (
    binding_key TEXT PRIMARY KEY,
    json TEXT NOT NULL,
    generation BIGINT NOT NULL
);
CREATE TABLE ctxbridge_transcript (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    entry_id TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, entry_id)
);
CREATE TABLE ctxbridge_outbox (
    session_id TEXT NOT NULL,
    advancement_key TEXT NOT NULL,
    engine_id TEXT NOT NULL,
    params TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    last_error TEXT,
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (session_id, advancement_key)
);
CREATE INDEX ctxbridge_outbox_order ON ctxbridge_outbox (session_id, seq);
CREATE TABLE ctxbridge_quarantine (
    engine_id TEXT PRIMARY KEY,
    operation TEXT NOT NULL,
    reason TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE TABLE ctxbridge_bootstrapped (
    session_id TEXT NOT NULL,
    engine_id TEXT NOT NULL,
    PRIMARY KEY (session_id, engine_id)
);
CREATE TABLE ctxbridge_leases (
    session TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    generation BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
CREATE TABLE ctxbridge_documents (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
);
",
    ),
    (
        2,
        // Last activity per session id (`s`), binding key (`b`) and document
        // (`d:<namespace>`), the retention sweep's clock, kept by triggers on every write path.
        // Session-scoped rows take the activity row's lock before the write itself (BEFORE),
        // so a sweep holding it finishes before a resumed session writes, and a sweep finding
        // it locked skips it. Lease and binding writes touch it AFTER the row is written, so
        // lease takers and fenced writers lock lease, binding, activity in one order. Keys
        // that exist already are dated to the migration.
        "
CREATE TABLE ctxbridge_activity (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    last_active_ms BIGINT NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX ctxbridge_activity_idle ON ctxbridge_activity (last_active_ms);
CREATE FUNCTION ctxbridge_touch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r JSONB;
    s TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN r := to_jsonb(OLD); ELSE r := to_jsonb(NEW); END IF;
    IF TG_ARGV[0] = 'd' THEN s := 'd:' || (r ->> 'namespace'); ELSE s := TG_ARGV[0]; END IF;
    INSERT INTO ctxbridge_activity (scope, key, last_active_ms)
        VALUES (s, r ->> TG_ARGV[1], (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
        ON CONFLICT (scope, key) DO UPDATE SET last_active_ms = EXCLUDED.last_active_ms;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ctxbridge_transcript_activity BEFORE INSERT OR UPDATE ON ctxbridge_transcript
    FOR EACH ROW EXECUTE FUNCTION ctxbridge_touch('s', 'session_id');
CREATE TRIGGER ctxbridge_bootstrapped_activity BEFORE INSERT ON ctxbridge_bootstrapped
    FOR EACH ROW EXECUTE FUNCTION ctxbridge_touch('s', 'session_id');
CREATE TRIGGER ctxbridge_outbox_activity BEFORE INSERT OR DELETE ON ctxbridge_outbox
    FOR EACH ROW EXECUTE FUNCTION ctxbridge_touch('s', 'session_id');
CREATE TRIGGER ctxbridge_bindings_activity AFTER INSERT OR UPDATE ON ctxbridge_bindings
    FOR EACH ROW EXECUTE FUNCTION ctxbridge_touch('b', 'binding_key');
CREATE TRIGGER ctxbridge_leases_activity AFTER INSERT OR UPDATE ON ctxbridge_leases
    FOR EACH ROW EXECUTE FUNCTION ctxbridge_touch('b', 'session');
CREATE TRIGGER ctxbridge_documents_activity BEFORE INSERT OR UPDATE ON ctxbridge_documents
    FOR EACH ROW EXECUTE FUNCTION ctxbridge_touch('d', 'key');
INSERT INTO ctxbridge_activity (scope, key, last_active_ms)
    SELECT scope, key, (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM (
        SELECT 's' AS scope, session_id AS key FROM ctxbridge_transcript
        UNION SELECT 's', session_id FROM ctxbridge_bootstrapped
        UNION SELECT 's', session_id FROM ctxbridge_outbox
        UNION SELECT 'b', binding_key FROM ctxbridge_bindings
        UNION SELECT 'b', session FROM ctxbridge_leases
        UNION SELECT 'd:' || namespace, key FROM ctxbridge_documents
    ) existing
    ON CONFLICT DO NOTHING;
",
    ),
    (
        3,
        // The highest generation of any lease the retention sweep removed: a lease taken again
        // later starts above it, so a holder from before the sweep stays fenced off.
        "
CREATE TABLE ctxbridge_lease_floor (
    id INT PRIMARY KEY CHECK (id = 1),
    generation BIGINT NOT NULL
);
",
    ),
];

/// The newest schema version this build knows.
pub(super) const SCHEMA_VERSION: i64 = 3;

/// The configured schema exists but this role lacks privileges on it.
#[derive(Debug)]
struct SchemaAccess {
    schema: String,
    role: String,
    owner: String,
    missing: String,
}

impl std::fmt::Display for SchemaAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let SchemaAccess {
            schema,
            role,
            owner,
            missing,
        } = self;
        write!(
            f,
            "role \"{role}\" lacks {missing} on schema \"{schema}\" (store.schema; owned by \"{owner}\"): run `GRANT USAGE, CREATE ON SCHEMA \"{schema}\" TO \"{role}\"` as its owner, or set store.schema to a schema this role owns"
        )
    }
}

impl PostgresStore {
    /// Creates the schema when missing, checks that this role may use it, and applies the
    /// migrations this build knows.
    pub(super) fn migrate(&self) -> Result<(), StoreError> {
        let schema = self.schema.clone();
        let found = self.run("apply schema migrations", move |mut client| async move {
            let tx = client.transaction().await?;
            // Serialise starters of this schema; the lock ends with the transaction.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1), hashtext(COALESCE($2, current_schema(), '')))",
                &[&LOCK_MIGRATE, &schema],
            )
            .await?;
            if let Some(schema) = &schema {
                tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                    .await?;
                // A schema this role may not use or create in is skipped by `search_path`,
                // and PostgreSQL then says only "no schema has been selected to create in".
                let row = tx
                    .query_one(
                        "SELECT current_user::text,
                                (SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = $1),
                                has_schema_privilege($1, 'USAGE'),
                                has_schema_privilege($1, 'CREATE')",
                        &[schema],
                    )
                    .await?;
                let (role, owner): (String, Option<String>) = (row.try_get(0)?, row.try_get(1)?);
                let missing: Vec<&str> = [("USAGE", row.try_get::<_, bool>(2)?), ("CREATE", row.try_get(3)?)]
                    .into_iter()
                    .filter(|(_, held)| !held)
                    .map(|(privilege, _)| privilege)
                    .collect();
                if !missing.is_empty() {
                    tx.rollback().await?;
                    return Ok(Err(SchemaAccess {
                        schema: schema.clone(),
                        role,
                        owner: owner.unwrap_or_default(),
                        missing: missing.join(", "),
                    }));
                }
            }
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS ctxbridge_schema_migrations (
                     version BIGINT PRIMARY KEY,
                     applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                 )",
            )
            .await?;
            let found: i64 = tx
                .query_one(
                    "SELECT COALESCE(MAX(version), 0) FROM ctxbridge_schema_migrations",
                    &[],
                )
                .await?
                .try_get(0)?;
            if found > SCHEMA_VERSION {
                tx.rollback().await?;
                return Ok(Ok(found));
            }
            for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
                tx.batch_execute(sql).await?;
                tx.execute(
                    "INSERT INTO ctxbridge_schema_migrations (version) VALUES ($1)",
                    &[version],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(Ok(found))
        })?;
        let found = found.map_err(|access| StoreError::PostgresSetup {
            url: self.url.clone(),
            operation: "apply schema migrations",
            message: access.to_string(),
        })?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                path: self.location().into(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found < SCHEMA_VERSION {
            tracing::info!(url = %self.url, from = found, to = SCHEMA_VERSION, "migrated the PostgreSQL state store");
        }
        Ok(())
    }
}
