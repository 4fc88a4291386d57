//! The in-process mock threaded backend: the embedded default and the test fake.
//!
//! Like a real threaded backend it keeps its threads (in memory, and in the state store when one
//! is given, so successive `ctxbridge turn` invocations continue them). It records every call
//! and what each thread has received, answers deterministically, and can be told to fail a
//! turn, overflow, lose a thread or compact natively.
//!
//! Its model requests are modelled on the Codex app-server's (stateless requests carrying the
//! whole thread history), so [`MockBackend::model_request_chars`] shows what a real user pays.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{
    AutoCompaction, BackendError, BackendKind, BackendProfile, Completion, CompletionRequest,
    NativeCompaction, ResumeThread, StartThread, ThreadId, ThreadedBackend, ToolInvocation,
    ToolOutput, TurnEvent, TurnOutcome, TurnRequest,
};
use crate::store::StateStore;
use crate::store::StateStoreExt;
use crate::util::lock;

/// The documents namespace the mock backend keeps its threads in (swept by retention).
pub const THREADS_NAMESPACE: &str = "mock-thread";

/// An item of a mock thread's model-visible history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "text", rename_all = "camelCase")]
pub enum MockItem {
    Developer(String),
    User(String),
    Assistant(String),
    /// A native compaction replaced everything before it with this summary.
    Compaction(String),
    /// The model called a tool.
    #[serde(rename_all = "camelCase")]
    ToolCall {
        name: String,
        arguments: Value,
    },
    /// A tool's output, as the model received it.
    #[serde(rename_all = "camelCase")]
    ToolOutput {
        name: String,
        text: String,
        is_error: bool,
    },
}

impl MockItem {
    fn chars(&self) -> usize {
        match self {
            MockItem::Developer(t)
            | MockItem::User(t)
            | MockItem::Assistant(t)
            | MockItem::Compaction(t) => t.chars().count(),
            MockItem::ToolCall { name, arguments } => {
                name.chars().count() + arguments.to_string().chars().count()
            }
            MockItem::ToolOutput { text, .. } => text.chars().count(),
        }
    }
}

/// A mock thread: instructions fixed at start, then its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MockThread {
    pub id: String,
    pub base_instructions: Option<String>,
    pub developer_instructions: Option<String>,
    pub items: Vec<MockItem>,
    pub turns: u64,
    /// Names of the tools offered at thread start.
    #[serde(default)]
    pub tools: Vec<String>,
}

impl MockThread {
    /// Characters of one model request for this thread as it stands (instructions + history
    /// since the last compaction), as a Codex-like backend would send it.
    pub fn request_chars(&self) -> usize {
        let start = self
            .items
            .iter()
            .rposition(|i| matches!(i, MockItem::Compaction(_)))
            .unwrap_or(0);
        let instr = self
            .base_instructions
            .as_deref()
            .map_or(0, |s| s.chars().count())
            + self
                .developer_instructions
                .as_deref()
                .map_or(0, |s| s.chars().count());
        instr
            + self.items[start..]
                .iter()
                .map(MockItem::chars)
                .sum::<usize>()
    }
}

/// Every call the mock received, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MockCall {
    StartThread {
        thread_id: String,
        base_instructions: Option<String>,
        developer_instructions: Option<String>,
    },
    Resume {
        thread_id: String,
        /// The developer instructions the resume re-sent.
        developer_instructions: Option<String>,
    },
    Inject {
        thread_id: String,
        text: String,
    },
    Turn {
        thread_id: String,
        input: String,
        /// The context delivered apart from the input, if any.
        additional_context: Option<String>,
        /// Characters of the model request this turn caused.
        model_request_chars: usize,
    },
    Compact {
        thread_id: String,
    },
    Complete {
        input: String,
        instructions: Option<String>,
        model: Option<String>,
        max_tokens: Option<u64>,
    },
    /// A scripted tool call was executed during a turn.
    ToolCall {
        thread_id: String,
        name: String,
        arguments: Value,
        output: ToolOutput,
    },
}

/// A scripted behaviour for the next turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MockFault {
    /// The turn fails with this message.
    Fail(String),
    /// The model reports a context-window overflow.
    Overflow,
    /// The backend compacts the thread natively during the turn, reporting this summary.
    AutoCompact(String),
    /// The model calls this tool with these arguments; the turn executes it through the turn's
    /// tools and replies with text that includes the tool's output.
    CallTool { name: String, arguments: Value },
}

#[derive(Default)]
struct MockState {
    threads: HashMap<String, MockThread>,
    /// Threads attached in this process (a restart of ctxbridge needs a resume first).
    attached: std::collections::HashSet<String>,
    calls: Vec<MockCall>,
    faults: VecDeque<MockFault>,
}

/// The in-process mock backend.
#[derive(Clone)]
pub struct MockBackend {
    state: Arc<Mutex<MockState>>,
    store: Option<Arc<dyn StateStore>>,
    /// Overflow when a request would exceed this many characters.
    context_window_chars: Option<usize>,
    /// Require `resume_thread` before a turn on a thread not started by this instance, as the
    /// Codex app-server does after a restart.
    require_resume: bool,
}

impl Default for MockBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockBackend")
            .field("persistent", &self.store.is_some())
            .finish()
    }
}

impl MockBackend {
    /// A mock whose threads live in memory only.
    pub fn new() -> Self {
        MockBackend {
            state: Arc::new(Mutex::new(MockState::default())),
            store: None,
            context_window_chars: None,
            require_resume: true,
        }
    }

    /// A mock whose threads persist in `store` (they survive a restart of ctxbridge).
    pub fn with_store(store: Arc<dyn StateStore>) -> Self {
        MockBackend {
            store: Some(store),
            ..Self::new()
        }
    }

    /// Overflow once a model request would exceed `chars` characters.
    pub fn with_context_window(mut self, chars: usize) -> Self {
        self.context_window_chars = Some(chars);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MockState> {
        // The state is plain data; a panic elsewhere cannot leave it half-written in a way that
        // matters to a test double, so recover the guard.
        lock(&self.state)
    }

    /// Scripts the behaviour of the next turn (queued, first in first out).
    pub fn push_fault(&self, fault: MockFault) {
        self.lock().faults.push_back(fault);
    }

    /// Forgets a thread, as if the backend expired or deleted it.
    pub fn lose_thread(&self, thread_id: &str) {
        let mut st = self.lock();
        st.threads.remove(thread_id);
        st.attached.remove(thread_id);
        if let Some(store) = &self.store {
            if let Err(e) = store.save_document(THREADS_NAMESPACE, thread_id, "null") {
                tracing::warn!(thread_id, error = %e, "mock backend could not forget a persisted thread");
            }
        }
    }

    /// Every call received so far.
    pub fn calls(&self) -> Vec<MockCall> {
        self.lock().calls.clone()
    }

    /// A thread as it stands.
    pub fn thread(&self, thread_id: &str) -> Option<MockThread> {
        let mut st = self.lock();
        self.load_into(&mut st, thread_id);
        st.threads.get(thread_id).cloned()
    }

    /// Number of threads started by this instance.
    pub fn threads_started(&self) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| matches!(c, MockCall::StartThread { .. }))
            .count()
    }

    /// Characters of every model request so far (Codex-like: each carries the whole history).
    pub fn model_request_chars(&self) -> usize {
        self.lock()
            .calls
            .iter()
            .map(|c| match c {
                MockCall::Turn {
                    model_request_chars,
                    ..
                } => *model_request_chars,
                _ => 0,
            })
            .sum()
    }

    fn load_into(&self, st: &mut MockState, thread_id: &str) {
        if st.threads.contains_key(thread_id) {
            return;
        }
        let Some(store) = &self.store else { return };
        match store.load_document(THREADS_NAMESPACE, thread_id) {
            Ok(Some(json)) => match serde_json::from_str::<Option<MockThread>>(&json) {
                Ok(Some(thread)) => {
                    st.threads.insert(thread_id.to_string(), thread);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(thread_id, error = %e, "mock backend: unreadable persisted thread")
                }
            },
            Ok(None) => {}
            Err(e) => tracing::warn!(thread_id, error = %e, "mock backend: cannot load thread"),
        }
    }

    fn persist(&self, thread: &MockThread, operation: &'static str) -> Result<(), BackendError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let json = serde_json::to_string(thread).map_err(|e| BackendError::Other {
            operation,
            message: format!("cannot encode mock thread {}: {e}", thread.id),
        })?;
        store
            .save_document(THREADS_NAMESPACE, &thread.id, &json)
            .map_err(|e| BackendError::Unavailable {
                operation,
                message: e.to_string(),
            })
    }

    /// When the next scripted behaviour is a tool call and the turn's thread is usable, takes
    /// it and executes the call through the turn's tools (outside the state lock: the executor
    /// may take its time). Returns the call and its output.
    async fn run_scripted_tool_call(
        &self,
        request: &TurnRequest,
    ) -> Option<(String, Value, ToolOutput)> {
        let (name, arguments) = {
            let mut st = self.lock();
            let id = &request.thread_id.0;
            let usable =
                (st.attached.contains(id) || !self.require_resume) && st.threads.contains_key(id);
            if !usable || !matches!(st.faults.front(), Some(MockFault::CallTool { .. })) {
                return None;
            }
            match st.faults.pop_front() {
                Some(MockFault::CallTool { name, arguments }) => (name, arguments),
                _ => return None,
            }
        };
        let output = request
            .tools
            .call(ToolInvocation {
                call_id: format!("mock-call-{}", uuid::Uuid::new_v4().simple()),
                name: name.clone(),
                arguments: arguments.clone(),
            })
            .await;
        self.lock().calls.push(MockCall::ToolCall {
            thread_id: request.thread_id.0.clone(),
            name: name.clone(),
            arguments: arguments.clone(),
            output: output.clone(),
        });
        Some((name, arguments, output))
    }

    fn reply_for(input: &str, turn: u64) -> String {
        let last = input
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let head: String = last.chars().take(60).collect();
        format!("mock reply {turn} to: {head}")
    }
}

#[async_trait]
impl ThreadedBackend for MockBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Mock
    }

    fn label(&self) -> &str {
        "the mock backend"
    }

    fn profile(&self) -> BackendProfile {
        BackendProfile::CODEX
    }

    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError> {
        let thread = {
            let mut st = self.lock();
            let id = format!("mock-thread-{}", uuid::Uuid::new_v4().simple());
            let thread = MockThread {
                id: id.clone(),
                base_instructions: request.base_instructions.clone(),
                developer_instructions: request.developer_instructions.clone(),
                items: Vec::new(),
                turns: 0,
                tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            };
            st.threads.insert(id.clone(), thread.clone());
            st.attached.insert(id.clone());
            st.calls.push(MockCall::StartThread {
                thread_id: id,
                base_instructions: request.base_instructions,
                developer_instructions: request.developer_instructions,
            });
            thread
        };
        self.persist(&thread, "thread/start")?;
        Ok(ThreadId(thread.id))
    }

    /// A thread this instance already has attached is left as it is (no call is recorded).
    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        resume: &ResumeThread,
    ) -> Result<(), BackendError> {
        let mut st = self.lock();
        if st.attached.contains(&thread_id.0) && st.threads.contains_key(&thread_id.0) {
            return Ok(());
        }
        st.calls.push(MockCall::Resume {
            thread_id: thread_id.0.clone(),
            developer_instructions: resume.developer_instructions.clone(),
        });
        self.load_into(&mut st, &thread_id.0);
        if !st.threads.contains_key(&thread_id.0) {
            return Err(BackendError::ThreadNotFound {
                operation: "thread/resume",
                thread_id: thread_id.0.clone(),
                message: format!("no rollout found for thread id {thread_id}"),
            });
        }
        st.attached.insert(thread_id.0.clone());
        Ok(())
    }

    async fn inject_developer_message(
        &self,
        thread_id: &ThreadId,
        text: &str,
    ) -> Result<(), BackendError> {
        let thread = {
            let mut st = self.lock();
            st.calls.push(MockCall::Inject {
                thread_id: thread_id.0.clone(),
                text: text.to_string(),
            });
            let attached = st.attached.contains(&thread_id.0) || !self.require_resume;
            match st.threads.get_mut(&thread_id.0).filter(|_| attached) {
                Some(t) => {
                    t.items.push(MockItem::Developer(text.to_string()));
                    t.clone()
                }
                None => {
                    return Err(BackendError::ThreadNotFound {
                        operation: "thread/inject_items",
                        thread_id: thread_id.0.clone(),
                        message: format!("thread not found: {thread_id}"),
                    })
                }
            }
        };
        self.persist(&thread, "thread/inject_items")
    }

    async fn run_turn(
        &self,
        request: TurnRequest,
        events: mpsc::Sender<TurnEvent>,
    ) -> Result<TurnOutcome, BackendError> {
        let tool_call = self.run_scripted_tool_call(&request).await;
        let (thread, reply, compaction) = {
            let mut st = self.lock();
            let fault = if tool_call.is_some() {
                None
            } else {
                st.faults.pop_front()
            };
            let attached = st.attached.contains(&request.thread_id.0) || !self.require_resume;
            let window = self.context_window_chars;
            let input_chars = request.input.chars().count()
                + request
                    .additional_context
                    .as_deref()
                    .map_or(0, |c| c.chars().count());
            let Some(thread) = st
                .threads
                .get_mut(&request.thread_id.0)
                .filter(|_| attached)
            else {
                st.calls.push(MockCall::Turn {
                    thread_id: request.thread_id.0.clone(),
                    input: request.input,
                    additional_context: request.additional_context,
                    model_request_chars: 0,
                });
                return Err(BackendError::ThreadNotFound {
                    operation: "turn/start",
                    thread_id: request.thread_id.0.clone(),
                    message: format!("thread not found: {}", request.thread_id),
                });
            };
            let request_chars = thread.request_chars() + input_chars;
            let overflow = matches!(fault, Some(MockFault::Overflow))
                || window.is_some_and(|w| request_chars > w);
            let mut compaction = None;
            let outcome = if overflow {
                Err(BackendError::ContextOverflow {
                    operation: "turn/start",
                    message: format!(
                        "Your input exceeds the context window of this model ({request_chars} chars)"
                    ),
                })
            } else if let Some(MockFault::Fail(message)) = &fault {
                Err(BackendError::TurnFailed {
                    operation: "turn/start",
                    message: message.clone(),
                })
            } else {
                if let Some(MockFault::AutoCompact(summary)) = &fault {
                    thread.items.push(MockItem::Compaction(summary.clone()));
                    compaction = Some(summary.clone());
                }
                thread.turns += 1;
                let mut reply = Self::reply_for(&request.input, thread.turns);
                // As Codex does with `additionalContext`: a developer item before the user's.
                if let Some(context) = &request.additional_context {
                    thread.items.push(MockItem::Developer(context.clone()));
                }
                thread.items.push(MockItem::User(request.input.clone()));
                if let Some((name, arguments, output)) = &tool_call {
                    thread.items.push(MockItem::ToolCall {
                        name: name.clone(),
                        arguments: arguments.clone(),
                    });
                    thread.items.push(MockItem::ToolOutput {
                        name: name.clone(),
                        text: output.text.clone(),
                        is_error: output.is_error,
                    });
                    reply.push_str(&format!(" (tool {name} said: {})", output.text));
                }
                thread.items.push(MockItem::Assistant(reply.clone()));
                Ok(reply)
            };
            let model_request_chars = if overflow { 0 } else { request_chars };
            // Copied only to be persisted (outside the lock), so that turns of other threads do
            // not queue behind a copy they do not need.
            let snapshot = (
                thread.id.clone(),
                self.store.is_some().then(|| thread.clone()),
            );
            st.calls.push(MockCall::Turn {
                thread_id: request.thread_id.0.clone(),
                input: request.input,
                additional_context: request.additional_context,
                model_request_chars,
            });
            (snapshot, outcome?, compaction)
        };
        let (thread_id, snapshot) = thread;
        if let Some(thread) = &snapshot {
            self.persist(thread, "turn/start")?;
        }
        if let Some(summary) = &compaction {
            let _ = events
                .send(TurnEvent::Compacted {
                    summary: Some(summary.clone()),
                })
                .await;
        }
        // Stream the reply in a few pieces, as a real backend would.
        let words: Vec<&str> = reply.split_inclusive(' ').collect();
        for chunk in words.chunks(4) {
            // A caller that stopped listening is not an error for the turn.
            let _ = events.send(TurnEvent::TextDelta(chunk.concat())).await;
        }
        Ok(TurnOutcome {
            thread_id: ThreadId(thread_id),
            reply,
            auto_compaction: compaction.map(|s| AutoCompaction { summary: Some(s) }),
            usage: None,
        })
    }

    async fn compact_thread(&self, thread_id: &ThreadId) -> Result<NativeCompaction, BackendError> {
        let thread = {
            let mut st = self.lock();
            st.calls.push(MockCall::Compact {
                thread_id: thread_id.0.clone(),
            });
            let attached = st.attached.contains(&thread_id.0) || !self.require_resume;
            let Some(thread) = st.threads.get_mut(&thread_id.0).filter(|_| attached) else {
                return Err(BackendError::ThreadNotFound {
                    operation: "thread/compact/start",
                    thread_id: thread_id.0.clone(),
                    message: format!("thread not found: {thread_id}"),
                });
            };
            let summary = format!("compacted {} items", thread.items.len());
            thread.items.push(MockItem::Compaction(summary));
            thread.clone()
        };
        self.persist(&thread, "thread/compact/start")?;
        let summary = thread.items.last().and_then(|i| match i {
            MockItem::Compaction(s) => Some(s.clone()),
            _ => None,
        });
        Ok(NativeCompaction {
            thread_id: None,
            summary,
        })
    }

    async fn complete(&self, request: CompletionRequest) -> Result<Completion, BackendError> {
        let reply = Self::reply_for(&request.input, 0);
        let model = request.model.clone().unwrap_or_else(|| "mock".to_string());
        self.lock().calls.push(MockCall::Complete {
            input: request.input,
            instructions: request.instructions,
            model: request.model,
            max_tokens: request.max_tokens,
        });
        Ok(Completion {
            text: reply,
            model: Some(model),
            usage: None,
        })
    }
}
