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

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::mpsc;
use std::time::Duration;

use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod,
    Runtime as PoolRuntime, Transaction,
};
use tokio::sync::oneshot;
use tokio_postgres::{NoTls, Row};

use super::{
    decode_transcript_rows, reborn_generation, sweep_scopes, Lease, LeaseAttempt, OutboxRow,
    QuarantineRecord, StateStore, StoreError, StoreStats, StoredBinding, SweepReport, SweepRequest,
    SweptSession, TranscriptEntry,
};

/// The embedded migrations, in order: `(version, SQL)`. A released migration is never edited;
/// a schema change is a new entry.
const MIGRATIONS: &[(i64, &str)] = &[
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
const SCHEMA_VERSION: i64 = 3;

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

/// How an unparsable `store.url` is named in messages (never by its text).
const UNPARSABLE_URL: &str = "(store.url, not shown: it does not parse)";

/// The URL as it may be shown: the password (in the user info, a `password` query parameter or
/// a `password=` key of a key/value connection string) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let split = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(split);
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, hosts)) => match userinfo.split_once(':') {
                    Some((user, _password)) => format!("{user}:***@{hosts}"),
                    None => authority.to_string(),
                },
                None => authority.to_string(),
            };
            let tail = match tail.split_once('?') {
                Some((path, query)) => {
                    let query: Vec<String> = query
                        .split('&')
                        .map(|pair| match pair.split_once('=') {
                            Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                                format!("{key}=***")
                            }
                            _ => pair.to_string(),
                        })
                        .collect();
                    format!("{path}?{}", query.join("&"))
                }
                None => tail.to_string(),
            };
            format!("{scheme}://{authority}{tail}")
        }
        None => redact_key_value(url),
    }
}

/// Redacts `password=` in a `key=value key='quoted value'` connection string.
fn redact_key_value(conn: &str) -> String {
    let mut out = String::with_capacity(conn.len());
    let mut rest = conn;
    while !rest.is_empty() {
        let trimmed = rest.trim_start();
        out.push_str(&rest[..rest.len() - trimmed.len()]);
        rest = trimmed;
        if rest.is_empty() {
            break;
        }
        let key_end = rest.find('=').unwrap_or(rest.len());
        let key = rest[..key_end].trim();
        let value_start = (key_end + 1).min(rest.len());
        let after_eq = rest[value_start..].trim_start();
        let value_offset = rest.len() - after_eq.len();
        let value_len = if let Some(quoted) = after_eq.strip_prefix('\'') {
            // A quoted value ends at the first quote not escaped by a backslash.
            let mut escaped = false;
            let mut end = quoted.len();
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = i + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            1 + end
        } else {
            after_eq.find(char::is_whitespace).unwrap_or(after_eq.len())
        };
        let token_end = (value_offset + value_len).min(rest.len());
        if key.eq_ignore_ascii_case("password") {
            out.push_str(&rest[..value_offset]);
            out.push_str("***");
        } else {
            out.push_str(&rest[..token_end]);
        }
        rest = &rest[token_end..];
    }
    out
}

/// A schema name is used inside SQL and the connection options, so it is kept to plain
/// identifiers.
fn valid_schema_name(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && schema.len() <= 63
}

/// The store's own thread and runtime; dropping it stops the thread (and with it every pooled
/// connection's task).
struct Worker {
    handle: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl Worker {
    fn start() -> std::io::Result<Worker> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("ctxbridge-postgres".into())
            .spawn(move || {
                // Runs the spawned jobs until the store is dropped (or its sender is gone).
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Worker {
            handle,
            stop: Some(stop),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The thread may already be gone; then there is nothing to stop.
            let _ = stop.send(());
        }
    }
}

/// The turn part of a fenced write.
struct TurnWrite {
    session: String,
    /// `(entry id, message JSON)`, in order.
    entries: Vec<(String, String)>,
    commit: Option<OutboxRow>,
}

/// Why a job failed on the worker.
enum JobError {
    Pool(PoolError),
    Pg(tokio_postgres::Error),
    Timeout,
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
    /// Connects to the database at `url` (a `postgres://` URL or a key/value connection
    /// string), creates the schema if one is configured and applies pending migrations. Errors
    /// name the operation and the URL (password redacted).
    ///
    /// Connections are made without TLS (a URL asking for `sslmode=require` is refused when
    /// connecting); reach a remote server over a trusted network or a local TLS tunnel.
    pub fn connect(url: &str, options: PostgresOptions) -> Result<PostgresStore, StoreError> {
        let shown = redact_url(url);
        let mut config =
            tokio_postgres::Config::from_str(url).map_err(|source| StoreError::Postgres {
                // What does not parse cannot be redacted reliably: a password typed in the
                // wrong place would be shown. Name it without repeating it.
                url: UNPARSABLE_URL.to_owned(),
                operation: "parse the URL",
                detail: describe(&source),
                source,
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

    /// Creates the schema when missing, checks that this role may use it, and applies the
    /// migrations this build knows.
    fn migrate(&self) -> Result<(), StoreError> {
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

    /// Runs `job` with a pooled connection on the worker and waits for it (bounded by
    /// `call_timeout`).
    fn run<T, F, Fut>(&self, operation: &'static str, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        let pool = self.pool.clone();
        let bound = self.call_timeout;
        self.worker.handle.spawn(async move {
            let work = async move {
                let client = pool.get().await.map_err(JobError::Pool)?;
                job(client).await.map_err(JobError::Pg)
            };
            let outcome = tokio::time::timeout(bound, work)
                .await
                .unwrap_or(Err(JobError::Timeout));
            // The caller is waiting on `answer` (it only goes away with the caller's thread).
            let _ = reply.send(outcome);
        });
        match answer.recv() {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(JobError::Pg(source))) => Err(StoreError::Postgres {
                url: self.url.clone(),
                operation,
                detail: describe(&source),
                source,
            }),
            Ok(Err(JobError::Pool(PoolError::Timeout(_)))) | Ok(Err(JobError::Timeout)) => {
                Err(StoreError::PostgresTimeout {
                    url: self.url.clone(),
                    operation,
                    waited_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
                })
            }
            Ok(Err(JobError::Pool(source))) => Err(StoreError::PostgresConnect {
                url: self.url.clone(),
                operation,
                detail: describe(&source),
                source,
            }),
            // The job was dropped unrun: the worker's runtime has stopped.
            Err(mpsc::RecvError) => Err(StoreError::PostgresSetup {
                url: self.url.clone(),
                operation,
                message: "the store's worker thread has stopped".into(),
            }),
        }
    }

    fn record_error(&self, operation: &'static str, key: &str, message: String) -> StoreError {
        StoreError::Record {
            path: self.location().into(),
            operation,
            key: key.to_string(),
            message,
        }
    }

    fn encode_entries(
        &self,
        operation: &'static str,
        entries: &[TranscriptEntry],
    ) -> Result<Vec<(String, String)>, StoreError> {
        entries
            .iter()
            .map(|e| {
                serde_json::to_string(&e.message)
                    .map(|json| (e.entry_id.clone(), json))
                    .map_err(|err| self.record_error(operation, &e.entry_id, err.to_string()))
            })
            .collect()
    }

    /// `record_turn`, queueing `commit` too when given: one fenced transaction.
    fn record_turn_fenced(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: Option<&OutboxRow>,
    ) -> Result<(), StoreError> {
        let encoded = self.encode_entries("record turn", entries)?;
        self.fenced(
            "record turn",
            binding_key,
            binding_json,
            lease_generation,
            Some(TurnWrite {
                session: session_id.to_string(),
                entries: encoded,
                commit: commit.cloned(),
            }),
        )
    }

    /// Runs a fenced write: the binding (and, for a turn, the session's new transcript
    /// entries and queued commit) is written in one transaction, only when the session's lease
    /// generation is not newer than `lease_generation`.
    fn fenced(
        &self,
        operation: &'static str,
        binding_key: &str,
        json: &str,
        lease_generation: u64,
        turn: Option<TurnWrite>,
    ) -> Result<(), StoreError> {
        let key = binding_key.to_string();
        let json = json.to_string();
        let fenced = self.run(operation, move |mut client| async move {
            let tx = client.transaction().await?;
            // FOR SHARE: a concurrent takeover waits for this transaction, or has committed and
            // its generation is read here.
            let current: Option<i64> = tx
                .query_opt(
                    "SELECT generation FROM ctxbridge_leases WHERE session = $1 FOR SHARE",
                    &[&key],
                )
                .await?
                .map(|row| row.try_get(0))
                .transpose()?;
            if let Some(current) = current.map(from_db).filter(|c| *c > lease_generation) {
                tx.rollback().await?;
                return Ok(Some(current));
            }
            if current.is_none() && lease_generation > 0 {
                // Leased once, and the lease has since been swept (the sweep raised the floor
                // in the transaction that removed the row, which the read above waited for).
                let floor = lease_floor(&tx).await?;
                if let Some(floor) = floor.filter(|floor| *floor >= lease_generation) {
                    tx.rollback().await?;
                    return Ok(Some(floor));
                }
            }
            tx.execute(
                "INSERT INTO ctxbridge_bindings (binding_key, json, generation) VALUES ($1, $2, $3)
                 ON CONFLICT (binding_key) DO UPDATE
                   SET json = EXCLUDED.json, generation = EXCLUDED.generation",
                &[&key, &json, &to_db(lease_generation)],
            )
            .await?;
            if let Some(turn) = &turn {
                insert_entries(&tx, &turn.session, &turn.entries).await?;
                if let Some(commit) = &turn.commit {
                    insert_outbox(&tx, commit).await?;
                }
            }
            tx.commit().await?;
            Ok(None)
        })?;
        match fenced {
            Some(current) => Err(StoreError::StaleGeneration {
                operation,
                key: binding_key.to_string(),
                held: lease_generation,
                current,
            }),
            None => Ok(()),
        }
    }
}

/// The error and its causes, joined (the driver's own `Display` names only the kind).
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let next = e.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = e.source();
    }
    text
}

/// Milliseconds and generations are `u64` in the API and `BIGINT` in the database.
fn to_db(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn from_db(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The highest generation of any lease the retention sweep removed, if it removed one.
async fn lease_floor(tx: &Transaction<'_>) -> Result<Option<u64>, tokio_postgres::Error> {
    tx.query_opt(
        "SELECT generation FROM ctxbridge_lease_floor WHERE id = 1",
        &[],
    )
    .await?
    .map(|row| row.try_get::<_, i64>(0).map(from_db))
    .transpose()
}

/// Appends encoded entries after the session's last one, inside the caller's transaction. An
/// advisory lock per session orders concurrent appenders.
async fn insert_entries(
    tx: &Transaction<'_>,
    session_id: &str,
    encoded: &[(String, String)],
) -> Result<(), tokio_postgres::Error> {
    if encoded.is_empty() {
        return Ok(());
    }
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))",
        &[&LOCK_TRANSCRIPT, &session_id],
    )
    .await?;
    let next: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(seq), -1) + 1 FROM ctxbridge_transcript WHERE session_id = $1",
            &[&session_id],
        )
        .await?
        .try_get(0)?;
    let insert = tx
        .prepare_cached(
            "INSERT INTO ctxbridge_transcript (session_id, seq, entry_id, message) VALUES ($1, $2, $3, $4)",
        )
        .await?;
    for (offset, (entry_id, json)) in (0i64..).zip(encoded) {
        tx.execute(&insert, &[&session_id, &(next + offset), entry_id, json])
            .await?;
    }
    Ok(())
}

/// Queues an outbox row (a duplicate advancement key keeps the queued row).
async fn insert_outbox<C: GenericClient>(
    client: &C,
    row: &OutboxRow,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO ctxbridge_outbox (session_id, advancement_key, engine_id, params, attempts, last_error)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (session_id, advancement_key) DO NOTHING",
            &[
                &row.session_id,
                &row.advancement_key,
                &row.engine_id,
                &row.params_json,
                &i64::from(row.attempts),
                &row.last_error,
            ],
        )
        .await
        .map(|_| ())
}

fn outbox_row(row: &Row) -> Result<OutboxRow, tokio_postgres::Error> {
    Ok(OutboxRow {
        session_id: row.try_get(0)?,
        advancement_key: row.try_get(1)?,
        engine_id: row.try_get(2)?,
        params_json: row.try_get(3)?,
        attempts: u32::try_from(row.try_get::<_, i64>(4)?).unwrap_or(u32::MAX),
        last_error: row.try_get(5)?,
    })
}

impl PostgresStore {
    /// Takes the session's lease for `holder` when it is free, expired, already `holder`'s, or
    /// held by `dead_holder` (a holder known to have died); the new generation is one above
    /// the last, which fences every earlier holder.
    fn acquire_lease(
        &self,
        operation: &'static str,
        session: &str,
        holder: &str,
        dead_holder: Option<&str>,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        let (session, holder) = (session.to_string(), holder.to_string());
        let dead_holder = dead_holder.map(str::to_string);
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        self.run(operation, move |mut client| async move {
            let tx = client.transaction().await?;
            // One statement decides and writes: the same holder, the named dead holder's
            // successor, or anyone once the lease has expired, takes it with the next
            // generation. A refused upsert still locks the row, so the read below sees the
            // holder that refused us. (`$5` is NULL without a dead holder: it matches nobody.)
            let acquired = tx
                .query_opt(
                    "INSERT INTO ctxbridge_leases AS l (session, holder, generation, expires_at_ms)
                     VALUES ($1, $2, 1, $4)
                     ON CONFLICT (session) DO UPDATE
                       SET holder = EXCLUDED.holder, generation = l.generation + 1,
                           expires_at_ms = EXCLUDED.expires_at_ms
                       WHERE l.holder = EXCLUDED.holder OR l.holder = $5::text
                         OR l.expires_at_ms <= $3
                     RETURNING generation, (xmax = 0) AS inserted",
                    &[
                        &session,
                        &holder,
                        &to_db(now_ms),
                        &to_db(expires_at_ms),
                        &dead_holder,
                    ],
                )
                .await?;
            let attempt = match acquired {
                Some(row) => {
                    let mut generation = from_db(row.try_get(0)?);
                    if row.try_get::<_, bool>(1)? {
                        // A new row: it starts above the sweep's floor. Read now, in a
                        // statement of its own, it sees a sweep that removed this session's
                        // row while the insert waited for it.
                        let reborn = reborn_generation(lease_floor(&tx).await?);
                        if reborn != generation {
                            tx.execute(
                                "UPDATE ctxbridge_leases SET generation = $2 WHERE session = $1",
                                &[&session, &to_db(reborn)],
                            )
                            .await?;
                            generation = reborn;
                        }
                    }
                    LeaseAttempt::Acquired(Lease {
                        generation,
                        session,
                        holder,
                        expires_at_ms,
                    })
                }
                None => {
                    let row = tx
                        .query_one(
                            "SELECT holder, expires_at_ms FROM ctxbridge_leases WHERE session = $1",
                            &[&session],
                        )
                        .await?;
                    LeaseAttempt::Busy {
                        holder: row.try_get(0)?,
                        expires_at_ms: from_db(row.try_get(1)?),
                    }
                }
            };
            tx.commit().await?;
            Ok(attempt)
        })
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
    ) -> Result<(), StoreError> {
        self.record_turn_fenced(
            session_id,
            entries,
            binding_key,
            binding_json,
            lease_generation,
            None,
        )
    }

    fn record_turn_with_commit(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: &OutboxRow,
    ) -> Result<(), StoreError> {
        self.record_turn_fenced(
            session_id,
            entries,
            binding_key,
            binding_json,
            lease_generation,
            Some(commit),
        )
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
                    &[&record.engine_id, &record.operation, &record.reason, &to_db(record.at_ms)],
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
                    Ok(QuarantineRecord {
                        engine_id: row.try_get(0)?,
                        operation: row.try_get(1)?,
                        reason: row.try_get(2)?,
                        at_ms: from_db(row.try_get(3)?),
                    })
                })
                .collect()
        })
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

    fn try_acquire_lease(
        &self,
        session: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        self.acquire_lease(
            "acquire session lease",
            session,
            holder,
            None,
            now_ms,
            ttl_ms,
        )
    }

    fn take_over_lease(
        &self,
        session: &str,
        dead_holder: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        self.acquire_lease(
            "take over session lease",
            session,
            holder,
            Some(dead_holder),
            now_ms,
            ttl_ms,
        )
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
        let cutoff = to_db(request.idle_before_ms);
        let limit = i64::try_from(request.limit).unwrap_or(i64::MAX);
        let scopes = sweep_scopes(&request.document_namespaces);
        self.run("sweep idle state", move |mut client| async move {
            let tx = client.transaction().await?;
            // Oldest first; a session with an undelivered commit is never idle; rows another
            // instance is sweeping (or a writer is touching) are skipped.
            let idle = tx
                .query(
                    "SELECT scope, key FROM ctxbridge_activity a
                     WHERE last_active_ms < $1 AND scope = ANY($2)
                       AND NOT (scope = 's' AND EXISTS
                         (SELECT 1 FROM ctxbridge_outbox o WHERE o.session_id = a.key))
                     ORDER BY last_active_ms LIMIT $3
                     FOR UPDATE SKIP LOCKED",
                    &[&cutoff, &scopes, &limit],
                )
                .await?;
            let mut report = SweepReport::default();
            for row in &idle {
                let scope: String = row.try_get(0)?;
                let key: String = row.try_get(1)?;
                report.keys += 1;
                match scope.as_str() {
                    "s" => {
                        report.sessions += 1;
                        let entries = tx
                            .execute(
                                "DELETE FROM ctxbridge_transcript WHERE session_id = $1",
                                &[&key],
                            )
                            .await?;
                        report.transcript_entries += entries;
                        report.swept_sessions.push(SweptSession {
                            session_id: key.clone(),
                            transcript_entries: entries,
                        });
                        report.bootstrap_marks += tx
                            .execute(
                                "DELETE FROM ctxbridge_bootstrapped WHERE session_id = $1",
                                &[&key],
                            )
                            .await?;
                    }
                    "b" => {
                        report.bindings += tx
                            .execute(
                                "DELETE FROM ctxbridge_bindings WHERE binding_key = $1",
                                &[&key],
                            )
                            .await?;
                        // The row goes and the floor rises in one statement: a lease taken
                        // again later starts above every generation it had.
                        report.leases += tx
                            .execute(
                                "WITH gone AS (
                                   DELETE FROM ctxbridge_leases
                                   WHERE session = $1 AND expires_at_ms < $2
                                   RETURNING generation)
                                 INSERT INTO ctxbridge_lease_floor AS f (id, generation)
                                   SELECT 1, generation FROM gone
                                 ON CONFLICT (id) DO UPDATE
                                   SET generation = GREATEST(f.generation, EXCLUDED.generation)",
                                &[&key, &cutoff],
                            )
                            .await?;
                    }
                    document => {
                        let namespace = document.strip_prefix("d:").unwrap_or(document);
                        report.documents += tx
                            .execute(
                                "DELETE FROM ctxbridge_documents WHERE namespace = $1 AND key = $2",
                                &[&namespace, &key],
                            )
                            .await?;
                    }
                }
                tx.execute(
                    "DELETE FROM ctxbridge_activity WHERE scope = $1 AND key = $2",
                    &[&scope, &key],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(report)
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
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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

        let err = PostgresStore::connect("postgres://h/db?bogus=1", PostgresOptions::default())
            .unwrap_err();
        assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
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
        assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    }

    /// The migrations are ordered, start at 1, and end at the version this build reports.
    #[test]
    fn migrations_are_ordered() {
        let versions: Vec<i64> = MIGRATIONS.iter().map(|(v, _)| *v).collect();
        let expected: Vec<i64> = (1..=SCHEMA_VERSION).collect();
        assert_eq!(versions, expected);
    }
}
