//! Bounded storage (`store.retention`): a background task that sweeps the state of sessions
//! idle longer than the retention, in bounded batches, through [`StateStore::sweep_idle`].
//!
//! The sweep never fails a write and never drops an undelivered commit (the store keeps every
//! session with a queued outbox row). It runs at start (in the background) and then every
//! [`SWEEP_INTERVAL`]; each tick removes at most [`SWEEP_BATCH`] keys per batch and stops after
//! [`MAX_BATCHES_PER_TICK`] batches, so a large backlog is worked off over several ticks.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{StateStore, SweepReport, SweepRequest};
use crate::store::StateStoreExt;
use crate::util::now_ms;

/// Time between two sweeps.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// Most idle keys one batch (one store transaction) removes.
pub const SWEEP_BATCH: usize = 200;

/// Most batches in one tick.
const MAX_BATCHES_PER_TICK: usize = 10;

/// The sweep cutoff: state last active before this instant (ms since the Unix epoch) is idle.
pub fn idle_before_ms(now_ms: u64, retention: Duration) -> u64 {
    now_ms.saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX))
}

/// One tick: batches until one comes back short (nothing more is idle) or the tick's batch
/// budget is spent. Errors are logged and end the tick (the next tick tries again).
pub fn sweep_once(
    store: &dyn StateStore,
    retention: Duration,
    document_namespaces: &[String],
) -> SweepReport {
    let mut total = SweepReport::default();
    let request = SweepRequest {
        idle_before_ms: idle_before_ms(now_ms(), retention),
        limit: SWEEP_BATCH,
        document_namespaces: document_namespaces.to_vec(),
    };
    for _ in 0..MAX_BATCHES_PER_TICK {
        match store.sweep_idle(&request) {
            Ok(report) => {
                total.add(&report);
                if report.keys < SWEEP_BATCH as u64 {
                    break;
                }
            }
            Err(error) => {
                tracing::warn!(%error, store = %store.location(), "retention sweep failed; trying again next time");
                break;
            }
        }
    }
    if total.keys > 0 {
        tracing::info!(
            store = %store.location(),
            sessions = total.sessions,
            transcript_entries = total.transcript_entries,
            bindings = total.bindings,
            documents = total.documents,
            "retention sweep removed idle state"
        );
    }
    total
}

/// Told what each tick removed (when it removed anything), after the store calls; the
/// harness fires `session_end` for the swept sessions through it.
pub type SweepListener =
    Arc<dyn Fn(SweepReport) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// The running sweep task; dropping it stops the task.
#[derive(Debug)]
pub struct RetentionSweeper {
    task: JoinHandle<()>,
}

impl RetentionSweeper {
    /// Starts sweeping `store` (now, then every `interval`) for state idle longer than
    /// `retention`, plus documents of `document_namespaces` idle as long. Must be called
    /// inside a tokio runtime; the store calls run on the blocking pool.
    pub fn spawn(
        store: Arc<dyn StateStore>,
        retention: Duration,
        interval: Duration,
        document_namespaces: Vec<String>,
    ) -> RetentionSweeper {
        Self::spawn_with_listener(store, retention, interval, document_namespaces, None)
    }

    /// As [`RetentionSweeper::spawn`], telling `listener` what each tick removed.
    pub fn spawn_with_listener(
        store: Arc<dyn StateStore>,
        retention: Duration,
        interval: Duration,
        document_namespaces: Vec<String>,
        listener: Option<SweepListener>,
    ) -> RetentionSweeper {
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let store = store.clone();
                let namespaces = document_namespaces.clone();
                let swept = tokio::task::spawn_blocking(move || {
                    sweep_once(&*store, retention, &namespaces)
                })
                .await;
                match swept {
                    Ok(report) if report.keys > 0 => {
                        if let Some(listener) = &listener {
                            listener(report).await;
                        }
                    }
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "retention sweep task failed"),
                }
            }
        });
        RetentionSweeper { task }
    }
}

impl Drop for RetentionSweeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::contract::AgentMessage;
    use crate::store::{SqliteStore, TranscriptEntry};

    /// The cutoff is the retention before now, and never underflows.
    #[test]
    fn cutoff_is_retention_before_now() {
        assert_eq!(idle_before_ms(10_000, Duration::from_secs(3)), 7_000);
        assert_eq!(idle_before_ms(1_000, Duration::from_secs(3)), 0);
    }

    /// A tick works through a backlog larger than one batch, in batches, and stops when a
    /// batch comes back short; state within the retention stays.
    #[test]
    fn a_tick_sweeps_in_batches() {
        let store = SqliteStore::in_memory().unwrap();
        let entry = TranscriptEntry {
            entry_id: "e".into(),
            message: AgentMessage::user("x"),
        };
        for i in 0..(SWEEP_BATCH + 5) {
            store
                .append_transcript(&format!("s{i}"), std::slice::from_ref(&entry))
                .unwrap();
        }
        // A retention of a day keeps everything just written.
        let kept = sweep_once(&store, Duration::from_secs(86_400), &[]);
        assert_eq!(kept.keys, 0);
        let start = now_ms();
        while now_ms() <= start + 5 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let swept = sweep_once(&store, Duration::from_millis(1), &[]);
        assert_eq!(swept.sessions, (SWEEP_BATCH + 5) as u64);
        assert_eq!(store.stats().unwrap().transcript_entries, 0);
    }

    /// The spawned task sweeps at start, in the background, without being asked again.
    #[tokio::test]
    async fn the_task_sweeps_at_start() {
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        store
            .append_transcript(
                "idle",
                &[TranscriptEntry {
                    entry_id: "e".into(),
                    message: AgentMessage::user("x"),
                }],
            )
            .unwrap();
        let start = now_ms();
        while now_ms() <= start + 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let _sweeper = RetentionSweeper::spawn(
            store.clone(),
            Duration::from_millis(1),
            Duration::from_secs(3_600),
            Vec::new(),
        );
        while store.stats().unwrap().sessions > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(store.load_transcript("idle").unwrap().is_empty());
    }
}
