//! The PostgreSQL state store (`store: {kind: "postgres", url}`): the same guarantees as the
//! embedded SQLite store, across machines.
//!
//! - Session leases live in one row per session; taking one is a single upsert that only
//!   succeeds for the same holder, an expired lease, or (a takeover) the lease of a holder
//!   known to have died, and bumps the fencing generation. The holder's heartbeat renews the
//!   expiry of its own generation and leaves the generation as it is.
//! - Fenced writes (a binding, a whole turn) read the session's lease generation `FOR SHARE`
//!   inside the writing transaction: a takeover either commits before (and the stale write is
//!   refused with [`StoreError::StaleGeneration`]) or waits until the write has committed.
//! - Schema migrations are embedded, ordered and recorded in `ctxbridge_schema_migrations`;
//!   they run at start in one transaction under an advisory lock, so concurrent starters do
//!   not race, and a database migrated by a newer build is refused.
//!
//! [`StateStore`] is synchronous and is called from async code, so the store owns a worker: a
//! dedicated thread running its own tokio runtime, which owns the connection pool. Each method
//! sends its job there and waits on a channel, never blocking on (or requiring) the caller's
//! runtime. The caller's thread is held for the length of a few short indexed statements — the
//! same trade the SQLite store makes with its blocking file I/O — and every call is bounded by
//! the connect and statement timeouts.

mod migrations;
mod queries;
mod redact;
mod sweep;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod worker;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime as PoolRuntime};
use tokio_postgres::NoTls;

use super::{
    decode_transcript_rows, Lease, OutboxRow, QuarantineRecord, SessionRead, StateStore,
    StoreError, StoreStats, StoredBinding, SweepReport, SweepRequest, TranscriptEntry, TurnWrite,
    WriteFuture, WriteMode, WriteOutcome,
};
use crate::util::error_chain;
use migrations::SCHEMA_VERSION;
use queries::{from_db, insert_entries, insert_outbox, outbox_row, to_db};
pub use redact::redact_url;
use redact::UNPARSABLE_URL;
use worker::Worker;

/// First key of the advisory locks this store takes (the second names what is locked).
const LOCK_MIGRATE: &str = "ctxbridge.migrate";
const LOCK_TRANSCRIPT: &str = "ctxbridge.transcript";

/// Tuning of a [`PostgresStore`]. Build with [`PostgresOptions::default`] and the `with_`
/// methods.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The schema holding ctxbridge's tables (created if missing); `None` uses the connection's
    /// default `search_path` (normally `public`).
    pub schema: Option<String>,
    /// Most connections the pool opens.
    pub pool_size: usize,
    /// Bound on opening one connection (and on waiting for a free one in the pool).
    pub connect_timeout: Duration,
    /// Bound on one statement on the server (`statement_timeout`); a whole call is bounded by
    /// `connect_timeout + statement_timeout`.
    pub statement_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: None,
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
        }
    }
}

impl PostgresOptions {
    /// Keeps the tables in `schema` (created if missing).
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Sets the pool size (at least one connection).
    pub fn with_pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size.max(1);
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the statement timeout.
    pub fn with_statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }
}

/// A schema name is used inside SQL and the connection options, so it is kept to plain
/// identifiers.
fn valid_schema_name(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && schema.len() <= 63
}

/// PostgreSQL-backed [`StateStore`] with a connection pool; see the module docs.
pub struct PostgresStore {
    /// The URL with its password redacted (for messages).
    url: String,
    schema: Option<String>,
    pool: Pool,
    call_timeout: Duration,
    worker: Worker,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url)
            .field("schema", &self.schema)
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://` URL or a key/value connection
    /// string), creates the schema if one is configured and applies pending migrations. Errors
    /// name the operation and the URL (password redacted).
    ///
    /// Connections are made without TLS (a URL asking for `sslmode=require` is refused when
    /// connecting); reach a remote server over a trusted network or a local TLS tunnel.
    pub fn connect(url: &str, options: PostgresOptions) -> Result<PostgresStore, StoreError> {
        let shown = redact_url(url);
        let mut config =
            tokio_postgres::Config::from_str(url).map_err(|source| StoreError::Backend {
                // What does not parse cannot be redacted reliably: a password typed in the
                // wrong place would be shown. Name it without repeating it.
                store: UNPARSABLE_URL.to_owned(),
                operation: "parse the URL",
                message: error_chain(&source),
                source: Box::new(source),
            })?;
        let statement_ms = options.statement_timeout.as_millis().max(1);
        let mut server_options = format!("-c statement_timeout={statement_ms}");
        if let Some(schema) = &options.schema {
            if !valid_schema_name(schema) {
                return Err(StoreError::PostgresSetup {
                    url: shown,
                    operation: "configure",
                    message: format!(
                        "schema name {schema:?} is not a plain lower-case identifier ([a-z_][a-z0-9_]*, at most 63 characters)"
                    ),
                });
            }
            server_options.push_str(&format!(" -c search_path={schema}"));
        }
        config.options(server_options);
        config.connect_timeout(options.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("ctxbridge");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .runtime(PoolRuntime::Tokio1)
            .build()
            .map_err(|e| StoreError::PostgresSetup {
                url: shown.clone(),
                operation: "build the connection pool",
                message: e.to_string(),
            })?;
        let worker = Worker::start().map_err(|source| StoreError::PostgresWorker {
            url: shown.clone(),
            source,
        })?;
        let store = PostgresStore {
            url: shown,
            schema: options.schema.clone(),
            pool,
            call_timeout: options
                .connect_timeout
                .saturating_add(options.statement_timeout),
            worker,
        };
        store.migrate()?;
        tracing::debug!(url = %store.url, schema = ?store.schema, "PostgreSQL state store ready");
        Ok(store)
    }

    /// The schema holding the tables, when one is configured.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The newest schema version this build knows (what [`PostgresStore::connect`] migrates to).
    pub fn schema_version() -> i64 {
        SCHEMA_VERSION
    }
}

impl StateStore for PostgresStore {
    fn location(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{} (schema {schema})", self.url),
            None => self.url.clone(),
        }
    }

    fn load_binding(&self, binding_key: &str) -> Result<Option<StoredBinding>, StoreError> {
        let key = binding_key.to_string();
        self.run("load binding", move |client| async move {
            let row = client
                .query_opt(
                    "SELECT json, generation FROM ctxbridge_bindings WHERE binding_key = $1",
                    &[&key],
                )
                .await?;
            row.map(|row| {
                Ok(StoredBinding {
                    binding_key: key.clone(),
                    json: row.try_get(0)?,
                    generation: from_db(row.try_get(1)?),
                })
            })
            .transpose()
        })
    }

    fn load_transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        let session = session_id.to_string();
        let rows: Vec<(String, String)> = self.run("load transcript", move |client| async move {
            client
                .query(
                    "SELECT entry_id, message FROM ctxbridge_transcript WHERE session_id = $1 ORDER BY seq",
                    &[&session],
                )
                .await?
                .iter()
                .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                .collect()
        })?;
        decode_transcript_rows(session_id, rows, |key, message| {
            self.record_error("load transcript", key, message)
        })
    }

    fn pending_outbox(&self, session_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        let session = session_id.to_string();
        self.run("read outbox", move |client| async move {
            client
                .query(
                    "SELECT session_id, advancement_key, engine_id, params, attempts, last_error
                     FROM ctxbridge_outbox WHERE session_id = $1 ORDER BY seq",
                    &[&session],
                )
                .await?
                .iter()
                .map(outbox_row)
                .collect()
        })
    }

    fn quarantines(&self) -> Result<Vec<QuarantineRecord>, StoreError> {
        self.run("read quarantines", move |client| async move {
            client
                .query(
                    "SELECT engine_id, operation, reason, at_ms FROM ctxbridge_quarantine ORDER BY engine_id",
                    &[],
                )
                .await?
                .iter()
                .map(|row| {
                    Ok((
                        row.try_get::<_, String>(0)?,
                        row.try_get::<_, String>(1)?,
                        row.try_get::<_, String>(2)?,
                        from_db(row.try_get(3)?),
                    ))
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        })?
        .into_iter()
        .map(|(engine_id, operation, reason, at_ms)| {
            QuarantineRecord::from_row(engine_id.clone(), &operation, reason, at_ms)
                .map_err(|message| self.record_error("read quarantines", &engine_id, message))
        })
        .collect()
    }

    fn is_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        let (session, engine) = (session_id.to_string(), engine_id.to_string());
        self.run("read bootstrap mark", move |client| async move {
            client
                .query_opt(
                    "SELECT 1 FROM ctxbridge_bootstrapped WHERE session_id = $1 AND engine_id = $2",
                    &[&session, &engine],
                )
                .await
                .map(|row| row.is_some())
        })
    }

    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError> {
        let (namespace, key) = (namespace.to_string(), key.to_string());
        self.run("load document", move |client| async move {
            client
                .query_opt(
                    "SELECT json FROM ctxbridge_documents WHERE namespace = $1 AND key = $2",
                    &[&namespace, &key],
                )
                .await?
                .map(|row| row.try_get(0))
                .transpose()
        })
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        self.run("count rows", move |client| async move {
            let row = client
                .query_one(
                    "SELECT
                       (SELECT count(*) FROM ctxbridge_activity WHERE scope = 's'),
                       (SELECT count(*) FROM ctxbridge_bindings),
                       (SELECT count(*) FROM ctxbridge_transcript),
                       (SELECT count(*) FROM ctxbridge_outbox),
                       (SELECT count(*) FROM ctxbridge_documents),
                       (SELECT min(last_active_ms) FROM ctxbridge_activity WHERE scope IN ('s', 'b'))",
                    &[],
                )
                .await?;
            let count = |i: usize| row.try_get::<_, i64>(i).map(from_db);
            Ok(StoreStats {
                sessions: count(0)?,
                bindings: count(1)?,
                transcript_entries: count(2)?,
                outbox_pending: count(3)?,
                documents: count(4)?,
                oldest_session_ms: row.try_get::<_, Option<i64>>(5)?.map(from_db),
            })
        })
    }

    /// Every write runs at once on the store's worker, which answers it (PostgreSQL runs
    /// concurrent sessions' writes side by side: there is no one writer to queue for).
    fn write(&self, write: TurnWrite, mode: WriteMode) -> WriteFuture {
        let _ = mode;
        Box::pin(std::future::ready(write.apply(self)))
    }
}

impl super::StoreWrites for PostgresStore {
    fn save_binding(
        &self,
        binding_key: &str,
        json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError> {
        self.fenced("save binding", binding_key, json, lease_generation, None)
    }

    fn delete_binding(&self, binding_key: &str) -> Result<(), StoreError> {
        let key = binding_key.to_string();
        self.run("delete binding", move |client| async move {
            client
                .execute(
                    "DELETE FROM ctxbridge_bindings WHERE binding_key = $1",
                    &[&key],
                )
                .await
                .map(|_| ())
        })
    }

    fn delete_session(&self, session_id: &str) -> Result<u64, StoreError> {
        let id = session_id.to_string();
        self.run("delete session", move |client| async move {
            // One statement: every data-modifying CTE runs, atomically.
            let row = client
                .query_one(
                    "WITH t AS (DELETE FROM ctxbridge_transcript WHERE session_id = $1 RETURNING 1),
                          b AS (DELETE FROM ctxbridge_bootstrapped WHERE session_id = $1 RETURNING 1),
                          a AS (DELETE FROM ctxbridge_activity WHERE scope = 's' AND key = $1 RETURNING 1)
                     SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM b), (SELECT count(*) FROM a)",
                    &[&id],
                )
                .await?;
            let entries: i64 = row.try_get(0)?;
            Ok(u64::try_from(entries).unwrap_or(0))
        })
    }

    fn record_turn(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: Option<&OutboxRow>,
    ) -> Result<(), StoreError> {
        self.record_turn_fenced(
            session_id,
            entries,
            binding_key,
            binding_json,
            lease_generation,
            commit,
        )
    }

    fn append_transcript(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        let encoded = self.encode_entries("append transcript", entries)?;
        let session = session_id.to_string();
        self.run("append transcript", move |mut client| async move {
            let tx = client.transaction().await?;
            insert_entries(&tx, &session, &encoded).await?;
            tx.commit().await
        })
    }

    fn replace_transcript_entries(
        &self,
        session_id: &str,
        replacements: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        let encoded = self.encode_entries("rewrite transcript", replacements)?;
        let session = session_id.to_string();
        let missing = self.run("rewrite transcript", move |mut client| async move {
            let tx = client.transaction().await?;
            for (entry_id, json) in &encoded {
                let n = tx
                    .execute(
                        "UPDATE ctxbridge_transcript SET message = $3 WHERE session_id = $1 AND entry_id = $2",
                        &[&session, entry_id, json],
                    )
                    .await?;
                if n == 0 {
                    // All or none: undo every earlier replacement.
                    tx.rollback().await?;
                    return Ok(Some(entry_id.clone()));
                }
            }
            tx.commit().await?;
            Ok(None)
        })?;
        match missing {
            Some(entry_id) => Err(self.record_error(
                "rewrite transcript",
                &format!("{session_id}/{entry_id}"),
                "no such transcript entry".into(),
            )),
            None => Ok(()),
        }
    }

    fn enqueue_outbox(&self, row: &OutboxRow) -> Result<(), StoreError> {
        let row = row.clone();
        self.run("enqueue outbox row", move |client| async move {
            insert_outbox(&client, &row).await
        })
    }

    fn complete_outbox(&self, session_id: &str, advancement_key: &str) -> Result<(), StoreError> {
        let (session, key) = (session_id.to_string(), advancement_key.to_string());
        self.run("complete outbox row", move |client| async move {
            client
                .execute(
                    "DELETE FROM ctxbridge_outbox WHERE session_id = $1 AND advancement_key = $2",
                    &[&session, &key],
                )
                .await
                .map(|_| ())
        })
    }

    fn move_outbox(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        let (from, to) = (from.to_string(), to.to_string());
        self.run("move outbox rows", move |mut client| async move {
            let tx = client.transaction().await?;
            // The update has no activity trigger: the new session is dated here, so the
            // retention sweep sees it (and keeps it while a commit waits).
            let moved = tx
                .execute(
                    "UPDATE ctxbridge_outbox o SET session_id = $2
                     WHERE o.session_id = $1 AND NOT EXISTS (SELECT 1 FROM ctxbridge_outbox t
                       WHERE t.session_id = $2 AND t.advancement_key = o.advancement_key)",
                    &[&from, &to],
                )
                .await?;
            if moved > 0 {
                tx.execute(
                    "INSERT INTO ctxbridge_activity (scope, key, last_active_ms)
                     VALUES ('s', $1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                     ON CONFLICT (scope, key) DO UPDATE SET last_active_ms = EXCLUDED.last_active_ms",
                    &[&to],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(moved)
        })
    }

    fn fail_outbox(
        &self,
        session_id: &str,
        advancement_key: &str,
        error: &str,
    ) -> Result<(), StoreError> {
        let (session, key, error) = (
            session_id.to_string(),
            advancement_key.to_string(),
            error.to_string(),
        );
        self.run("record outbox failure", move |client| async move {
            client
                .execute(
                    "UPDATE ctxbridge_outbox SET attempts = attempts + 1, last_error = $3
                     WHERE session_id = $1 AND advancement_key = $2",
                    &[&session, &key, &error],
                )
                .await
                .map(|_| ())
        })
    }

    fn record_quarantine(&self, record: &QuarantineRecord) -> Result<(), StoreError> {
        let record = record.clone();
        self.run("record quarantine", move |client| async move {
            client
                .execute(
                    "INSERT INTO ctxbridge_quarantine (engine_id, operation, reason, at_ms) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (engine_id) DO UPDATE SET operation = EXCLUDED.operation,
                       reason = EXCLUDED.reason, at_ms = EXCLUDED.at_ms",
                    &[&record.engine_id, &record.operation.as_str(), &record.reason, &to_db(record.at_ms)],
                )
                .await
                .map(|_| ())
        })
    }

    fn clear_quarantine(&self, engine_id: &str) -> Result<(), StoreError> {
        let engine = engine_id.to_string();
        self.run("clear quarantine", move |client| async move {
            client
                .execute(
                    "DELETE FROM ctxbridge_quarantine WHERE engine_id = $1",
                    &[&engine],
                )
                .await
                .map(|_| ())
        })
    }

    fn mark_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        let (session, engine) = (session_id.to_string(), engine_id.to_string());
        self.run("mark bootstrapped", move |client| async move {
            client
                .execute(
                    "INSERT INTO ctxbridge_bootstrapped (session_id, engine_id) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                    &[&session, &engine],
                )
                .await
                .map(|n| n == 1)
        })
    }

    fn acquire_lease(
        &self,
        session: &str,
        holder: &str,
        dead_holder: Option<&str>,
        now_ms: u64,
        ttl_ms: u64,
        read: Option<&SessionRead>,
    ) -> Result<WriteOutcome, StoreError> {
        self.take_lease(session, holder, dead_holder, now_ms, ttl_ms, read.cloned())
    }

    fn renew_lease(&self, lease: &Lease, now_ms: u64, ttl_ms: u64) -> Result<bool, StoreError> {
        // Only the holder of this generation renews, and the generation stays: a renewal never
        // fences anyone, and a holder taken over since finds nothing to renew.
        let lease = lease.clone();
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        self.run("renew session lease", move |client| async move {
            client
                .execute(
                    "UPDATE ctxbridge_leases SET expires_at_ms = $4
                     WHERE session = $1 AND holder = $2 AND generation = $3",
                    &[
                        &lease.session,
                        &lease.holder,
                        &to_db(lease.generation),
                        &to_db(expires_at_ms),
                    ],
                )
                .await
                .map(|n| n == 1)
        })
    }

    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        // Only the holder of this generation may release; the generation stays, so a stale
        // holder stays fenced.
        let lease = lease.clone();
        self.run("release session lease", move |client| async move {
            client
                .execute(
                    "UPDATE ctxbridge_leases SET expires_at_ms = 0
                     WHERE session = $1 AND holder = $2 AND generation = $3",
                    &[&lease.session, &lease.holder, &to_db(lease.generation)],
                )
                .await
                .map(|_| ())
        })
    }

    fn save_document(&self, namespace: &str, key: &str, json: &str) -> Result<(), StoreError> {
        let (namespace, key, json) = (namespace.to_string(), key.to_string(), json.to_string());
        self.run("save document", move |client| async move {
            client
                .execute(
                    "INSERT INTO ctxbridge_documents (namespace, key, json) VALUES ($1, $2, $3)
                     ON CONFLICT (namespace, key) DO UPDATE SET json = EXCLUDED.json",
                    &[&namespace, &key, &json],
                )
                .await
                .map(|_| ())
        })
    }

    fn sweep_idle(&self, request: &SweepRequest) -> Result<SweepReport, StoreError> {
        self.sweep(request)
    }
}
