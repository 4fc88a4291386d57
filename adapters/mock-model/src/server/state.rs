//! What the handlers share: the reply script, the recorded requests, stored responses and
//! conversations; a request read into its recording; a chained or conversation request's full
//! input rebuilt from what is stored.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::record::{normalize_input, RecordedRequest, RequestKind};
use crate::script::ScriptedReply;

use super::answers::{conversation_error, json_error};

/// A condition on a request, for [`MockModelServer::push_reply_when`].
pub(super) type RequestMatcher = Box<dyn Fn(&RecordedRequest) -> bool + Send + Sync>;

/// Everything the handlers share.
pub(super) struct Shared {
    pub(super) stateful: bool,
    pub(super) delta_chunks: usize,
    pub(super) seq: AtomicU64,
    /// Replies kept for the first request that matches, in the order pushed.
    pub(super) matched: Mutex<Vec<(RequestMatcher, ScriptedReply)>>,
    pub(super) queue: Mutex<VecDeque<ScriptedReply>>,
    pub(super) default_reply: Mutex<ScriptedReply>,
    pub(super) requests: Mutex<Vec<RecordedRequest>>,
    /// Stored responses: response id → the full conversation including that response's output.
    pub(super) store: Mutex<HashMap<String, Vec<Value>>>,
    /// Conversations: id → the conversation object's fields and its items.
    pub(super) conversations: Mutex<HashMap<String, MockConversation>>,
    pub(super) log: Option<tokio::sync::Mutex<tokio::fs::File>>,
}

/// One conversation the mock holds.
#[derive(Debug, Clone)]
pub(super) struct MockConversation {
    pub(super) created_at: u64,
    pub(super) metadata: Value,
    /// The items in order: those given at creation, then each completed response's input and
    /// output.
    pub(super) items: Vec<Value>,
}

impl MockConversation {
    pub(super) fn object(&self, id: &str) -> Value {
        json!({
            "id": id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        })
    }
}

/// A poisoned lock only means another handler panicked mid-update; the data is still usable for
/// a test double, so recover it rather than cascade the panic.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The parts of a request every handler records.
pub(super) struct Incoming {
    seq: u64,
    received_at_ms: u64,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
    raw_body: Option<String>,
    pub(super) body_len: usize,
}

impl Incoming {
    pub(super) fn new(
        shared: &Shared,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Self {
        let (json, raw_body) = match serde_json::from_slice::<Value>(body) {
            Ok(value) => (value, None),
            Err(_) => (
                Value::Null,
                Some(String::from_utf8_lossy(body).into_owned()),
            ),
        };
        Self {
            seq: shared.seq.fetch_add(1, Ordering::SeqCst) + 1,
            received_at_ms: now_ms(),
            method: method.to_string(),
            path: uri.path().to_owned(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_ascii_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: json,
            raw_body,
            body_len: body.len(),
        }
    }

    pub(super) fn record(self, kind: RequestKind) -> RecordedRequest {
        let instructions = self
            .body
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let input = normalize_input(self.body.get("input"));
        let previous_response_id = self
            .body
            .get("previous_response_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let store = self.body.get("store").and_then(Value::as_bool) == Some(true);
        // `conversation` is a string or an object with an `id`.
        let conversation_id = self
            .body
            .get("conversation")
            .and_then(|c| c.as_str().or_else(|| c.get("id").and_then(Value::as_str)))
            .map(str::to_owned);
        RecordedRequest {
            seq: self.seq,
            received_at_ms: self.received_at_ms,
            method: self.method,
            path: self.path,
            headers: self.headers,
            body: self.body,
            raw_body: self.raw_body,
            kind,
            instructions,
            conversation: input.clone(),
            input,
            previous_response_id,
            conversation_id,
            store,
            status: StatusCode::OK.as_u16(),
            response_id: None,
            reply_text: None,
        }
    }
}

impl Shared {
    /// Stateful mode, after a complete response: store it (for `store: true`, so it can be
    /// chained on) and append the request's input and the output item to the conversation it
    /// names.
    pub(super) fn keep_output(&self, record: &RecordedRequest, response_id: &str, item: &Value) {
        if !self.stateful {
            return;
        }
        if record.store {
            let mut conversation = record.conversation.clone();
            conversation.push(item.clone());
            lock(&self.store).insert(response_id.to_owned(), conversation);
        }
        if let Some(conversation_id) = &record.conversation_id {
            if let Some(conversation) = lock(&self.conversations).get_mut(conversation_id) {
                conversation.items.extend(record.input.iter().cloned());
                conversation.items.push(item.clone());
            }
        }
    }

    pub(super) fn next_reply(&self, record: &RecordedRequest) -> ScriptedReply {
        {
            let mut matched = lock(&self.matched);
            if let Some(i) = matched.iter().position(|(matches, _)| matches(record)) {
                return matched.remove(i).1;
            }
        }
        match lock(&self.queue).pop_front() {
            Some(reply) => reply,
            None => lock(&self.default_reply).clone(),
        }
    }

    pub(super) async fn remember(&self, record: &RecordedRequest) {
        lock(&self.requests).push(record.clone());
        if let Some(log) = &self.log {
            match serde_json::to_string(record) {
                Ok(mut line) => {
                    line.push('\n');
                    let mut file = log.lock().await;
                    let written = match file.write_all(line.as_bytes()).await {
                        Ok(()) => file.flush().await,
                        Err(error) => Err(error),
                    };
                    if let Err(error) = written {
                        tracing::warn!(%error, "mock model: cannot append to the request log");
                    }
                }
                Err(error) => tracing::warn!(%error, "mock model: cannot serialise a request"),
            }
        }
    }
}

impl Shared {
    /// Answer 400 (recorded) when the body is not JSON.
    pub(super) async fn reject_non_json(
        &self,
        record: &mut RecordedRequest,
    ) -> Result<(), Response> {
        if !record.body.is_null() {
            return Ok(());
        }
        record.status = StatusCode::BAD_REQUEST.as_u16();
        self.remember(record).await;
        Err(json_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_json",
            "We could not parse the JSON body of your request.",
            None,
        ))
    }

    /// Stateful mode: rebuild the conversation from `previous_response_id` or from the named
    /// conversation, or answer (and record) `previous_response_not_found` when that response is
    /// unknown or expired, 404 when the conversation is unknown, and 400 when both are given.
    /// Stateless mode records the chain and conversation ids but answers on `input` alone.
    pub(super) async fn resolve_chain(&self, record: &mut RecordedRequest) -> Result<(), Response> {
        if !self.stateful {
            return Ok(());
        }
        if let Some(conversation_id) = record.conversation_id.clone() {
            let failure = if record.previous_response_id.is_some() {
                Some((
                    StatusCode::BAD_REQUEST,
                    "Mutually exclusive parameters: 'previous_response_id' and 'conversation' cannot be used together.".to_owned(),
                ))
            } else {
                match lock(&self.conversations).get(&conversation_id) {
                    Some(conversation) => {
                        let mut items = conversation.items.clone();
                        items.extend(record.input.iter().cloned());
                        record.conversation = items;
                        None
                    }
                    None => Some((
                        StatusCode::NOT_FOUND,
                        format!("Conversation with id '{conversation_id}' not found."),
                    )),
                }
            };
            return match failure {
                None => Ok(()),
                Some((status, message)) => {
                    record.status = status.as_u16();
                    self.remember(record).await;
                    Err(conversation_error(status, &message))
                }
            };
        }
        let Some(previous) = record.previous_response_id.clone() else {
            return Ok(());
        };
        let stored = lock(&self.store).get(&previous).cloned();
        match stored {
            Some(mut conversation) => {
                conversation.extend(record.input.iter().cloned());
                record.conversation = conversation;
                Ok(())
            }
            None => {
                record.status = StatusCode::BAD_REQUEST.as_u16();
                self.remember(record).await;
                Err(json_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "previous_response_not_found",
                    &format!("Previous response with id '{previous}' not found."),
                    Some("previous_response_id"),
                ))
            }
        }
    }
}
