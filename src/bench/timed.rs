//! A timing decorator for any [`ThreadedBackend`] (tower style: same trait as what it wraps).
//! It adds up the wall time spent inside the wrapped backend's calls, so the overhead benchmark
//! can subtract the backend's own time from a turn's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::backend::{
    BackendError, BackendKind, BackendProfile, Completion, CompletionRequest, NativeCompaction,
    ResumeThread, StartThread, ThreadId, ThreadedBackend, TurnEvent, TurnOutcome, TurnRequest,
};

/// Wraps `inner`, timing every async call. The totals are process-wide for this instance: read
/// them around a turn only when turns run one at a time.
#[derive(Debug)]
pub struct TimedBackend<B> {
    inner: B,
    nanos: AtomicU64,
    calls: AtomicU64,
}

impl<B> TimedBackend<B> {
    pub fn new(inner: B) -> Self {
        TimedBackend {
            inner,
            nanos: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Time spent inside the wrapped backend so far.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Calls made to the wrapped backend so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn record(&self, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl<B: ThreadedBackend> ThreadedBackend for TimedBackend<B> {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    fn label(&self) -> &str {
        self.inner.label()
    }

    fn profile(&self) -> BackendProfile {
        self.inner.profile()
    }

    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError> {
        let started = Instant::now();
        let result = self.inner.start_thread(request).await;
        self.record(started);
        result
    }

    async fn keeps_additional_context(&self) -> bool {
        self.inner.keeps_additional_context().await
    }

    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        resume: &ResumeThread,
    ) -> Result<(), BackendError> {
        let started = Instant::now();
        let result = self.inner.resume_thread(thread_id, resume).await;
        self.record(started);
        result
    }

    async fn inject_developer_message(
        &self,
        thread_id: &ThreadId,
        text: &str,
    ) -> Result<(), BackendError> {
        let started = Instant::now();
        let result = self.inner.inject_developer_message(thread_id, text).await;
        self.record(started);
        result
    }

    async fn run_turn(
        &self,
        request: TurnRequest,
        events: mpsc::Sender<TurnEvent>,
    ) -> Result<TurnOutcome, BackendError> {
        let started = Instant::now();
        let result = self.inner.run_turn(request, events).await;
        self.record(started);
        result
    }

    async fn compact_thread(&self, thread_id: &ThreadId) -> Result<NativeCompaction, BackendError> {
        let started = Instant::now();
        let result = self.inner.compact_thread(thread_id).await;
        self.record(started);
        result
    }

    async fn complete(&self, request: CompletionRequest) -> Result<Completion, BackendError> {
        let started = Instant::now();
        let result = self.inner.complete(request).await;
        self.record(started);
        result
    }

    async fn shutdown(&self) {
        self.inner.shutdown().await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::backend::MockBackend;

    /// Every call goes through to the wrapped backend and is counted and timed.
    #[tokio::test]
    async fn delegates_and_counts() {
        let timed = TimedBackend::new(MockBackend::new());
        let thread = timed.start_thread(StartThread::default()).await.unwrap();
        let (tx, _rx) = mpsc::channel(16);
        let outcome = timed
            .run_turn(
                TurnRequest {
                    thread_id: thread.clone(),
                    input: "hello".into(),
                    developer_instructions: None,
                    base_instructions: None,
                    tools: Default::default(),
                    additional_context: None,
                    options: Default::default(),
                },
                tx,
            )
            .await
            .unwrap();
        assert!(outcome.reply.contains("hello"));
        assert_eq!(timed.calls(), 2);
        assert_eq!(timed.inner().calls().len(), 2);
        assert!(timed.elapsed() > Duration::ZERO);
        assert_eq!(timed.kind(), BackendKind::Mock);
    }
}
