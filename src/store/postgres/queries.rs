//! The PostgreSQL store's SQL helpers: fenced writes of a binding or a whole turn, transcript
//! and outbox inserts, the lease floor and lease acquisition, and the conversions between the
//! API's `u64` and the database's `BIGINT`.

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::Row;

use super::{PostgresStore, LOCK_TRANSCRIPT};
use crate::store::{
    reborn_generation, Lease, LeaseAttempt, OutboxRow, SessionRead, SessionSnapshot, StateStore,
    StoreError, StoredBinding, TranscriptEntry, WriteOutcome,
};

/// The turn part of a fenced write.
pub(super) struct TurnWrite {
    session: String,
    /// `(entry id, message JSON)`, in order.
    entries: Vec<(String, String)>,
    commit: Option<OutboxRow>,
}

impl PostgresStore {
    pub(super) fn record_error(
        &self,
        operation: &'static str,
        key: &str,
        message: String,
    ) -> StoreError {
        StoreError::Record {
            path: self.location().into(),
            operation,
            key: key.to_string(),
            message,
        }
    }

    pub(super) fn encode_entries(
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
    pub(super) fn record_turn_fenced(
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
    pub(super) fn fenced(
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

/// Milliseconds and generations are `u64` in the API and `BIGINT` in the database.
pub(super) fn to_db(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(super) fn from_db(value: i64) -> u64 {
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
pub(super) async fn insert_entries(
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
pub(super) async fn insert_outbox<C: GenericClient>(
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

pub(super) fn outbox_row(row: &Row) -> Result<OutboxRow, tokio_postgres::Error> {
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
    /// the last, which fences every earlier holder. With `read`, a lease taken comes with what
    /// the same transaction read of its session.
    pub(super) fn take_lease(
        &self,
        session: &str,
        holder: &str,
        dead_holder: Option<&str>,
        now_ms: u64,
        ttl_ms: u64,
        read: Option<SessionRead>,
    ) -> Result<WriteOutcome, StoreError> {
        let operation = match dead_holder {
            None => "acquire session lease",
            Some(_) => "take over session lease",
        };
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
                    let lease = Lease {
                        generation,
                        session,
                        holder,
                        expires_at_ms,
                    };
                    match &read {
                        Some(read) => {
                            let snapshot = read_session(&tx, &lease.session, read).await?;
                            WriteOutcome::SessionLease(lease, Box::new(snapshot))
                        }
                        None => WriteOutcome::Lease(LeaseAttempt::Acquired(lease)),
                    }
                }
                None => {
                    let row = tx
                        .query_one(
                            "SELECT holder, expires_at_ms FROM ctxbridge_leases WHERE session = $1",
                            &[&session],
                        )
                        .await?;
                    WriteOutcome::Lease(LeaseAttempt::Busy {
                        holder: row.try_get(0)?,
                        expires_at_ms: from_db(row.try_get(1)?),
                    })
                }
            };
            tx.commit().await?;
            Ok(attempt)
        })
    }
}

/// What the holder of `binding_key`'s lease, just taken in `tx`, first reads of its session
/// (`read`), in one statement. PostgreSQL hands out no transcript cursors.
async fn read_session(
    tx: &Transaction<'_>,
    binding_key: &str,
    read: &SessionRead,
) -> Result<SessionSnapshot, tokio_postgres::Error> {
    let row = tx
        .query_one(
            "WITH sid AS (
               SELECT COALESCE(
                 (SELECT json FROM ctxbridge_documents WHERE namespace = $1 AND key = $2),
                 $2) AS id)
             SELECT sid.id,
               EXISTS (SELECT 1 FROM ctxbridge_outbox o WHERE o.session_id = sid.id),
               EXISTS (SELECT 1 FROM ctxbridge_transcript t WHERE t.session_id = sid.id),
               ARRAY(SELECT b.engine_id FROM ctxbridge_bootstrapped b
                     WHERE b.session_id = sid.id),
               binding.json,
               binding.generation
             FROM sid
             LEFT JOIN ctxbridge_bindings binding ON binding.binding_key = $3",
            &[&read.id_namespace, &read.session_key, &binding_key],
        )
        .await?;
    let mut bootstrapped: Vec<String> = row.try_get(3)?;
    // Sorted here, by bytes, as every store sorts them (not by the database's collation).
    bootstrapped.sort();
    let binding = match (
        row.try_get::<_, Option<String>>(4)?,
        row.try_get::<_, Option<i64>>(5)?,
    ) {
        (Some(json), Some(generation)) => Some(StoredBinding {
            binding_key: binding_key.to_string(),
            json,
            generation: from_db(generation),
        }),
        _ => None,
    };
    let transcript_empty = !row.try_get::<_, bool>(2)?;
    Ok(SessionSnapshot {
        session_id: row.try_get(0)?,
        outbox_empty: !row.try_get::<_, bool>(1)?,
        bootstrapped,
        binding,
        transcript_empty,
        empty_transcript_cursor: None,
    })
}
