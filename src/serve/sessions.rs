//! Engine-backed sessions (docs/serve.md#the-serve-command "Turns", "Compaction"): a client's `turn/start` on a
//! session runs one harness turn (docs/architecture.md#the-turn-algorithm) and `thread/compact/start` the harness's manual
//! compaction (docs/architecture.md#compaction-on-threaded-backends), on the serve's shared upstream.
//!
//! The harness runs unchanged, with the one Codex backend (`backend::codex`): its own backend
//! is a [`CodexBackend`] over the shared upstream ([`crate::serve::codex_link::HubConnect`]),
//! and each client request's harness call runs on a [`CodexBackend`] over that request's own
//! connection ([`ClientCall`]), handed in with the call ([`TurnSpec::on`],
//! [`Harness::compact_on`]). That connection carries what only the request knows — the
//! client's thread and connection, its own `turn/start` params and non-text input items, the
//! thread to adopt, and where the upstream's accepting answer goes. The hub relays the
//! upstream's notifications to the clients, rewritten to the client's thread id, so the reply
//! streams to them as from Codex itself.
//!
//! The client gets its `turn/start` answer as soon as the upstream accepted the turn; the
//! harness records the turn (transcript, engine commit) when `turn/completed` arrives, and a
//! failed or interrupted turn commits nothing.
//!
//! Thread identity: a session's first backend thread is the one the client started (adopted:
//! the effective developer instructions are injected); a later backend thread (an epoch
//! change, drift under `rotate`, overflow recovery) is bound to the client id in the thread
//! map, hidden from lists, and gets the client's thread settings.
//!
//! Delivery of the projection: per `projection.codexContextDelivery`; unset, the upstream's
//! version decides as for the Codex backend (additional context from 0.171.0). In the turn
//! input, the relayed `userMessage` items of the turn show the client's own input instead (the
//! hub swaps them). `thread/read`, `thread/resume`, `thread/turns/list` and
//! `thread/items/list` of a session show the conversation as the user had it
//! ([`crate::serve::history`]): the earlier backend threads' turns rebuilt from the transcript
//! (where each thread begins is the harness's [`Harness::thread_history`]), then the current
//! thread's, framed inputs cut back to the user's request.

use std::sync::Arc;

use async_trait::async_trait;
use codex_app_server_client::AppServerClient;
use ctxbridge_jsonrpc::codes::{INTERNAL_ERROR, INVALID_REQUEST};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::backend::codex::CodexBackend;
use crate::backend::{BackendError, ThreadedBackend};
use crate::harness::{Harness, HarnessError, TurnSpec};
use crate::serve::client_call::{CallFacts, ClientCall, ClientTurnParams};
use crate::serve::history::{self, PageRequest};
use crate::serve::route::SessionOp;
use crate::serve::seam::{SessionAnswer, SessionRequest, SessionTurns, TurnEnd, UpstreamHandle};
use crate::serve::RpcError;

/// Session requests served by the harness (docs/serve.md#the-serve-command): used when an engine other than
/// `legacy` is selected, or `serve.engineThreads` is `"all"`.
pub struct EngineSessions {
    harness: Arc<Harness>,
    /// Client sessions already warned that `legacy` serves them in place of the selected
    /// engine (one WARN and one `warning` notification per session).
    warned: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The harness's own backend, on the shared upstream: its client gives each request's
    /// connection the upstream's server info (learned once) and the turn limits.
    base: Arc<CodexBackend>,
}

impl std::fmt::Debug for EngineSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSessions")
            .field("harness", &self.harness)
            .finish_non_exhaustive()
    }
}

fn internal(error: impl std::fmt::Display) -> RpcError {
    RpcError::new(INTERNAL_ERROR, error.to_string())
}

impl EngineSessions {
    /// Sessions served by `harness`, whose own backend is `base` (a [`CodexBackend`] over the
    /// shared upstream, [`crate::serve::codex_link::HubConnect`]).
    pub fn new(harness: Arc<Harness>, base: Arc<CodexBackend>) -> EngineSessions {
        EngineSessions {
            harness,
            warned: std::sync::Mutex::default(),
            base,
        }
    }

    /// When the selected engine is quarantined, says so once per client session: a WARN line,
    /// and to the asking client Codex's own `warning` notification `{threadId, message}` (an
    /// answer that carries no error: the turn still runs, on `legacy`).
    fn warn_degraded(&self, request: &SessionRequest, upstream: &UpstreamHandle) {
        let Some(record) = self.degradation() else {
            return;
        };
        let first = self
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(request.client_thread_id.clone());
        if !first {
            return;
        }
        let message = format!(
            "context engine \"{}\" is quarantined (failed during {}: {}); \"legacy\" serves this session instead",
            record.engine_id,
            record.operation.as_str(),
            record.reason
        );
        tracing::warn!(session = %request.client_thread_id, "serve: {message}");
        upstream.notify_client(
            request.conn,
            "warning",
            serde_json::json!({"threadId": request.client_thread_id, "message": message}),
        );
    }

    /// The harness (tests, diagnostics).
    pub fn harness(&self) -> &Arc<Harness> {
        &self.harness
    }

    /// One client request's connection (see [`ClientCall::new`]) and the one Codex backend on
    /// it, for that request's harness call.
    async fn call_on(
        &self,
        upstream: UpstreamHandle,
        facts: CallFacts,
    ) -> Result<
        (
            Arc<ClientCall>,
            oneshot::Receiver<()>,
            Arc<dyn ThreadedBackend>,
        ),
        RpcError,
    > {
        let shared = self
            .base
            .client("initialize")
            .await
            .map_err(|e| internal(crate::util::error_chain(&e)))?;
        let (call, accepted) = ClientCall::new(upstream, facts);
        let call = Arc::new(call);
        let client = AppServerClient::over(
            call.clone(),
            shared.server_info().clone(),
            shared.turn_limits(),
        );
        let backend = Arc::new(CodexBackend::on(client, self.base.label()));
        Ok((call, accepted, backend))
    }

    /// Runs `work` (a harness call on `call`) in its own task; returns the upstream's answer
    /// as soon as it accepted the turn (or the compaction), else what `work` ended with. When
    /// `work` ends, `call` is settled: an accepted turn's completion reaches the clients, with
    /// the reason when ctxbridge failed it.
    async fn run_until_accepted<T: Send + 'static>(
        &self,
        session: String,
        what: &'static str,
        call: Arc<ClientCall>,
        accepted: oneshot::Receiver<()>,
        work: impl std::future::Future<Output = Result<T, HarnessError>> + Send + 'static,
        finished: impl FnOnce(T) -> Value + Send + 'static,
    ) -> Result<SessionAnswer, RpcError> {
        let (done_tx, done_rx) = oneshot::channel();
        tokio::spawn(async move {
            let outcome = work.await;
            match &outcome {
                Ok(_) => call.settle(TurnEnd::AsUpstream),
                Err(error) => {
                    tracing::warn!(%session, error = %crate::util::error_chain(error), "serve: {what} failed");
                    call.settle(turn_end(error));
                }
            }
            drop(call);
            let _ = done_tx.send(outcome.map(finished));
        });
        tokio::select! {
            biased;
            // The hub answered the client with the upstream's accepting answer.
            Ok(()) = accepted => Ok(SessionAnswer::Sent),
            done = done_rx => match done {
                Ok(Ok(value)) => Ok(SessionAnswer::Result(value)),
                Ok(Err(error)) => Err(RpcError::new(INVALID_REQUEST, crate::util::error_chain(&error))),
                Err(_) => Err(RpcError::new(INTERNAL_ERROR, format!("{what} was cancelled"))),
            },
        }
    }

    /// `turn/start`: one harness turn on the request's connection.
    async fn turn_start(
        &self,
        request: SessionRequest,
        upstream: UpstreamHandle,
    ) -> Result<SessionAnswer, RpcError> {
        let session = request.client_thread_id.clone();
        let bound = self
            .harness
            .binding(&session)
            .await
            .map_err(|e| RpcError::new(INVALID_REQUEST, crate::util::error_chain(&e)))?;
        // The session's first turn adopts the thread the client started.
        let adopt =
            (bound.is_none() && request.backend_thread_id == session).then(|| session.clone());
        let (prompt, turn) = client_turn(request.params);
        let facts = CallFacts {
            session: session.clone(),
            answer: request.answer,
            turn: Some(turn),
            adopt,
            loaded: (!request.needs_resume).then_some(request.backend_thread_id),
        };
        let (call, accepted, backend) = self.call_on(upstream, facts).await?;
        let harness = self.harness.clone();
        let recorded = call.clone();
        let spec = TurnSpec::new(session.clone(), prompt)
            .on(backend)
            .when_recorded(Arc::new(move |_| recorded.settle(TurnEnd::AsUpstream)));
        self.run_until_accepted(
            session,
            "turn",
            call,
            accepted,
            async move { harness.turn(spec).await },
            |report| json!({"turn": {"id": null, "status": "completed", "items": [], "threadId": report.thread_id}}),
        )
        .await
    }

    /// `thread/compact/start`: the harness's manual compaction on the request's connection.
    async fn compact_start(
        &self,
        request: SessionRequest,
        upstream: UpstreamHandle,
    ) -> Result<SessionAnswer, RpcError> {
        let session = request.client_thread_id.clone();
        let thread = request.backend_thread_id.clone();
        let facts = CallFacts {
            session: session.clone(),
            answer: request.answer,
            turn: None,
            adopt: None,
            loaded: (!request.needs_resume).then_some(thread.clone()),
        };
        let (call, accepted, backend) = self.call_on(upstream.clone(), facts).await?;
        let harness = self.harness.clone();
        let key = session.clone();
        self.run_until_accepted(
            session,
            "manual compaction",
            call,
            accepted,
            async move { harness.compact_on(&key, Some(backend)).await },
            // Without a native compaction no upstream turn tells the client the compaction
            // ended (the answer came from the upstream when one ran).
            move |report| {
                if !report.native_compaction {
                    upstream.show_compaction_turn(&thread);
                }
                json!({})
            },
        )
        .await
    }
}

impl EngineSessions {
    /// The session's turns on backend threads before `backend` (its current one), rebuilt
    /// from the transcript; none when the session never moved.
    fn earlier_turns(&self, session: &str, backend: &str) -> Result<Vec<Value>, RpcError> {
        let history = self
            .harness
            .thread_history(session)
            .map_err(|e| internal(crate::util::error_chain(&e)))?;
        let Some(&earlier_messages) = history.threads.get(backend) else {
            return Ok(Vec::new());
        };
        let transcript = self
            .harness
            .transcript(session)
            .map_err(|e| internal(crate::util::error_chain(&e)))?;
        let earlier = &transcript[..earlier_messages.min(transcript.len())];
        Ok(history::transcript_turns(session, earlier))
    }

    /// The thread object of a `thread/read` or `thread/resume` answer as the client had it:
    /// its turns (when present) preceded by the earlier threads' and showing the user's own
    /// input; its preview the user's first words. `with_turns`: the request asked for turns.
    fn present_thread(
        &self,
        request: &SessionRequest,
        with_turns: bool,
        result: &mut Value,
    ) -> Result<(), RpcError> {
        let Some(thread) = result.get_mut("thread") else {
            return Ok(());
        };
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        let first_words = history::first_user_text(&earlier);
        if let Some(turns) = thread.get_mut("turns").and_then(Value::as_array_mut) {
            turns.iter_mut().for_each(history::show_own_input);
            if with_turns {
                turns.splice(0..0, earlier);
            }
        }
        history::show_own_preview(thread, first_words);
        Ok(())
    }

    /// `thread/read`: the current backend thread's answer, presented as the client had it.
    async fn read(
        &self,
        request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        let with_turns = request.params.get("includeTurns").and_then(Value::as_bool) == Some(true);
        let mut result = upstream
            .request("thread/read", request.params.clone())
            .await?;
        self.present_thread(&request, with_turns, &mut result)?;
        Ok(result)
    }

    /// `thread/turns/list`: relayed (turns showing the user's own input) for a session on its
    /// first backend thread; across backend threads, every turn is gathered (earlier threads'
    /// from the transcript, the current one's from the upstream) and paged here.
    async fn turns_list(
        &self,
        request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        const OP: &str = "thread/turns/list";
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        if earlier.is_empty() {
            let mut result = upstream.request(OP, request.params).await?;
            if let Some(turns) = result.get_mut("data").and_then(Value::as_array_mut) {
                turns.iter_mut().for_each(history::show_own_input);
            }
            return Ok(result);
        }
        let page_request = PageRequest::of(&request.params);
        let view = request.params.get("itemsView").and_then(Value::as_str);
        let turns = all_turns(earlier, &request.backend_thread_id, view, upstream).await?;
        history::page(turns, &page_request)
            .map_err(|message| RpcError::new(INVALID_REQUEST, message))
    }

    /// `thread/resume`: the current backend thread resumed; its answer presented as the client
    /// had it. For a session spanning several backend threads, the page `initialTurnsPage`
    /// asks for and the `turnsBackwardsCursor` are ctxbridge's, over every turn of the session
    /// (the upstream's would cover the current backend thread alone and name it).
    async fn resume(
        &self,
        mut request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        let with_turns = request.params.get("excludeTurns").and_then(Value::as_bool) != Some(true);
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        let initial_page = request
            .params
            .get("initialTurnsPage")
            .filter(|p| p.is_object())
            .cloned();
        if !earlier.is_empty() && initial_page.is_some() {
            if let Some(params) = request.params.as_object_mut() {
                params.remove("initialTurnsPage");
            }
        }
        let mut result = upstream
            .request("thread/resume", request.params.clone())
            .await?;
        self.present_thread(&request, with_turns, &mut result)?;
        if earlier.is_empty() {
            if let Some(turns) = result
                .pointer_mut("/initialTurnsPage/data")
                .and_then(Value::as_array_mut)
            {
                turns.iter_mut().for_each(history::show_own_input);
            }
            return Ok(result);
        }
        let view = initial_page
            .as_ref()
            .and_then(|p| p.get("itemsView"))
            .and_then(Value::as_str);
        let turns_full = all_turns(
            earlier.clone(),
            &request.backend_thread_id,
            Some("full"),
            upstream,
        )
        .await?;
        let mut turns = turns_full.clone();
        if view != Some("full") {
            turns = all_turns(earlier, &request.backend_thread_id, view, upstream).await?;
        }
        let backwards = history::backwards_cursor(turns.len());
        if let (Some(page_params), Some(object)) = (&initial_page, result.as_object_mut()) {
            let page = history::page(turns, &PageRequest::of(page_params))
                .map_err(|message| RpcError::new(INVALID_REQUEST, message))?;
            object.insert("initialTurnsPage".into(), page);
        }
        if let Some(object) = result.as_object_mut() {
            object.insert("turnsBackwardsCursor".into(), backwards);
            let items = history::item_entries(&turns_full, None).len();
            object.insert(
                "itemsBackwardsCursor".into(),
                history::backwards_cursor(items),
            );
        }
        Ok(result)
    }

    /// `thread/items/list`: relayed (user messages showing the user's own input) for a session
    /// on its first backend thread; across backend threads, every item of every turn is
    /// gathered (earlier threads' from the transcript, the current one's from the upstream)
    /// and paged here.
    async fn items_list(
        &self,
        request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        if earlier.is_empty() {
            let mut result = upstream
                .request("thread/items/list", request.params)
                .await?;
            if let Some(entries) = result.get_mut("data").and_then(Value::as_array_mut) {
                for entry in entries {
                    if let Some(item) = entry.get_mut("item") {
                        history::show_own_item_input(item);
                    }
                }
            }
            return Ok(result);
        }
        let turns = all_turns(earlier, &request.backend_thread_id, Some("full"), upstream).await?;
        let turn_id = request.params.get("turnId").and_then(Value::as_str);
        let entries = history::item_entries(&turns, turn_id);
        let page_request = history::items_page_request(&request.params, &entries)
            .map_err(|message| RpcError::new(INVALID_REQUEST, message))?;
        history::page(entries, &page_request)
            .map_err(|message| RpcError::new(INVALID_REQUEST, message))
    }
}

/// Every turn of a session spanning several backend threads, oldest first: `earlier` (the
/// transcript turns of its earlier backend threads) shown in `view`, then the turns of
/// `backend` (its current thread) fetched page by page from the upstream in `view`, showing
/// the user's own input.
async fn all_turns(
    earlier: Vec<Value>,
    backend: &str,
    view: Option<&str>,
    upstream: &UpstreamHandle,
) -> Result<Vec<Value>, RpcError> {
    const OP: &str = "thread/turns/list";
    let mut turns = earlier;
    turns
        .iter_mut()
        .for_each(|turn| history::view_transcript_turn(turn, view));
    let mut cursor: Option<Value> = None;
    loop {
        let mut params = json!({"threadId": backend, "sortDirection": "asc"});
        if let Some(view) = view {
            params["itemsView"] = json!(view);
        }
        if let Some(cursor) = cursor.take() {
            params["cursor"] = cursor;
        }
        let result = upstream.request(OP, params).await?;
        let mut data = result
            .get("data")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        data.iter_mut().for_each(history::show_own_input);
        turns.extend(data);
        match result.get("nextCursor").filter(|c| c.is_string()) {
            Some(next) => cursor = Some(next.clone()),
            None => break,
        }
    }
    Ok(turns)
}

/// How a harness call that failed after the upstream accepted its turn ends for the clients:
/// as the upstream ended it when the backend reported the turn's own end (failed, interrupted,
/// overflowed, lost, or the upstream gone — the upstream's completion says so), else failed
/// with ctxbridge's reason (a turn limit, the answer not recorded, the engine's compaction).
fn turn_end(error: &HarnessError) -> TurnEnd {
    match error {
        HarnessError::Backend {
            source:
                BackendError::TurnFailed { .. }
                | BackendError::ContextOverflow { .. }
                | BackendError::ThreadNotFound { .. }
                | BackendError::Unavailable { .. },
            ..
        } => TurnEnd::AsUpstream,
        other => TurnEnd::Failed(crate::util::error_chain(other)),
    }
}

/// A client's `turn/start` as the harness takes it: the prompt (its text items joined by
/// newlines) and what goes to Codex beside it (its other params and input items).
fn client_turn(params: Value) -> (String, ClientTurnParams) {
    let mut texts = Vec::new();
    let mut turn = ClientTurnParams::default();
    let Value::Object(mut fields) = params else {
        return (String::new(), turn);
    };
    fields.remove("threadId");
    let input = fields.remove("input");
    for item in input.iter().filter_map(Value::as_array).flatten() {
        match (
            item.get("type").and_then(Value::as_str),
            item.get("text").and_then(Value::as_str),
        ) {
            (Some("text"), Some(text)) => texts.push(text.to_owned()),
            _ => turn.extra_input.push(item.clone()),
        }
    }
    turn.fields = fields;
    turn.input = input;
    (texts.join("\n"), turn)
}

#[async_trait]
impl SessionTurns for EngineSessions {
    async fn serve(
        &self,
        request: SessionRequest,
        upstream: UpstreamHandle,
    ) -> Result<SessionAnswer, RpcError> {
        self.warn_degraded(&request, &upstream);
        let result = match request.op {
            SessionOp::TurnStart => return self.turn_start(request, upstream).await,
            SessionOp::CompactStart => return self.compact_start(request, upstream).await,
            SessionOp::Resume => self.resume(request, &upstream).await,
            SessionOp::Read => self.read(request, &upstream).await,
            SessionOp::TurnsList => self.turns_list(request, &upstream).await,
            SessionOp::ItemsList => self.items_list(request, &upstream).await,
        };
        result.map(SessionAnswer::Result)
    }

    async fn shutdown(&self) {
        self.harness.shutdown().await;
    }

    fn degradation(&self) -> Option<crate::quarantine::QuarantineRecord> {
        self.harness.degradation()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The prompt is the text items joined by newlines; other items are kept in order, the
    /// other params kept without the thread and input, the input kept as sent.
    #[test]
    fn splits_turn_input() {
        let input = json!([
            {"type": "text", "text": "look at"},
            {"type": "localImage", "path": "/x.png"},
            {"type": "text", "text": "this"}
        ]);
        let params = json!({"threadId": "t", "input": input, "effort": "high"});
        let (prompt, turn) = client_turn(params);
        assert_eq!(prompt, "look at\nthis");
        assert_eq!(
            turn.extra_input,
            vec![json!({"type": "localImage", "path": "/x.png"})]
        );
        assert_eq!(Value::Object(turn.fields), json!({"effort": "high"}));
        assert_eq!(turn.input, Some(input));
    }
}
