//! The process-wide record of quarantined engines.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::engines::LEGACY_ENGINE_ID;
use crate::metrics::MetricsSink;
use crate::util::{lock, now_ms};

use super::record::{quarantine_message, FailedOperation, QuarantineRecord};

/// The process-wide record of quarantined engines, shared by the registry, every
/// [`QuarantineEngine`](super::QuarantineEngine) and `doctor`. The first failure of an engine wins.
#[derive(Debug, Default)]
pub struct QuarantineBook {
    records: Mutex<BTreeMap<String, QuarantineRecord>>,
    /// Told of every quarantine recorded (`serve`'s metrics); none by default.
    metrics: OnceLock<Arc<dyn MetricsSink>>,
}

impl QuarantineBook {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, QuarantineRecord>> {
        // A panic while holding this lock leaves the map intact (single inserts/removes), so a
        // poisoned lock is still safe to use.
        lock(&self.records)
    }

    /// Quarantines `engine_id` unless it already is (or is legacy, which never is). Returns
    /// whether this call recorded it; only then is the error line logged.
    pub fn quarantine(
        &self,
        engine_id: &str,
        operation: FailedOperation,
        reason: impl Into<String>,
    ) -> bool {
        if engine_id == LEGACY_ENGINE_ID {
            return false;
        }
        let mut records = self.lock();
        if records.contains_key(engine_id) {
            return false;
        }
        let record = QuarantineRecord {
            engine_id: engine_id.to_string(),
            operation,
            reason: reason.into(),
            at_ms: now_ms(),
        };
        tracing::error!(
            "{}",
            quarantine_message(&record.engine_id, record.operation, &record.reason)
        );
        if let Some(sink) = self.metrics.get() {
            sink.engine_quarantined(&record.engine_id, record.operation.as_str());
        }
        records.insert(engine_id.to_string(), record);
        true
    }

    /// Reports every quarantine to `sink` (the first sink set stays): those recorded before —
    /// an engine that failed while the process started, before its metrics existed — at once,
    /// and those recorded from now on as they happen.
    pub fn report_to(&self, sink: Arc<dyn MetricsSink>) {
        let records = self.lock();
        if self.metrics.set(sink.clone()).is_ok() {
            for record in records.values() {
                sink.engine_quarantined(&record.engine_id, record.operation.as_str());
            }
        }
    }

    pub fn is_quarantined(&self, engine_id: &str) -> bool {
        self.lock().contains_key(engine_id)
    }

    pub fn get(&self, engine_id: &str) -> Option<QuarantineRecord> {
        self.lock().get(engine_id).cloned()
    }

    /// Every record, by engine id (for doctor, and for a harness that persists them).
    pub fn records(&self) -> Vec<QuarantineRecord> {
        self.lock().values().cloned().collect()
    }

    /// Adds persisted records without logging them again; an engine already recorded keeps its
    /// record. Returns how many were added.
    pub fn restore(&self, records: impl IntoIterator<Item = QuarantineRecord>) -> usize {
        let mut map = self.lock();
        let mut added = 0;
        for record in records {
            if record.engine_id == LEGACY_ENGINE_ID || map.contains_key(&record.engine_id) {
                continue;
            }
            map.insert(record.engine_id.clone(), record);
            added += 1;
        }
        added
    }

    /// Forgets the quarantine of `engine_id` (a new registration of the id).
    pub fn clear(&self, engine_id: &str) -> Option<QuarantineRecord> {
        self.lock().remove(engine_id)
    }
}
