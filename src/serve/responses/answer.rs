//! One response following its turn: the text as it comes, then either the model's calls of
//! the client's functions (the response ends with them and the turn is parked for the next
//! request) or the answer (the turn's end). The response is kept either way; a streamed one
//! writes the API's events on its way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::oneshot;

use super::handlers::{response_record, turn_error, Pending};
use super::records::{new_id, ResponseRecord};
use super::stream::Writer;
use super::turns::{Progress, RunningTurn};
use super::wire::{self, ApiError, FunctionCall, ResponseView, Status, TokenUsage};
use super::ResponsesFront;
use crate::backend::{ToolInvocation, Usage};
use crate::harness::HarnessError;
use crate::metrics::ResponseOutcome;

/// The response object of `pending` before it is kept: in progress, or failed.
fn unkept_object(pending: &Pending, status: Status, error: Option<(&str, &str)>) -> Value {
    wire::response_object(&ResponseView {
        id: &pending.id,
        created_at: pending.created_at,
        status,
        model: &pending.model,
        output: Vec::new(),
        previous_response_id: pending.request.previous_response_id.as_deref(),
        conversation: pending.request.conversation.as_deref(),
        metadata: &pending.request.metadata,
        store: pending.request.store,
        settings: &pending.request.settings,
        usage: None,
        error,
    })
}

/// The backend's token counts as the API reports them.
fn token_usage(usage: Usage) -> TokenUsage {
    TokenUsage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cached_tokens: usage.cached_input_tokens,
    }
}

/// A model's call as its client sees it, under an item id of the front's.
fn function_call(call: &ToolInvocation) -> FunctionCall {
    FunctionCall {
        id: new_id("fc"),
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        arguments: match &call.arguments {
            Value::String(text) => text.clone(),
            arguments => arguments.to_string(),
        },
    }
}

/// Follows `turn` as the response `pending`, writing its events to `out` when streamed, and
/// returns the kept response. `handed_over` is set when the response ends with the model's
/// calls and the turn waits for the next request.
pub(super) async fn follow(
    front: Arc<ResponsesFront>,
    pending: Pending,
    mut turn: RunningTurn,
    handed_over: Arc<AtomicBool>,
    mut out: Option<Writer>,
) -> Result<ResponseRecord, ApiError> {
    if let Some(out) = &mut out {
        for kind in ["response.created", "response.in_progress"] {
            let object = unkept_object(&pending, Status::InProgress, None);
            out.send(wire::response_event(kind, object)).await;
        }
    }
    let mut text = String::new();
    let mut opened = false;
    loop {
        match turn.progress.recv().await {
            Some(Progress::Delta(delta)) => {
                if let Some(out) = &mut out {
                    if !opened {
                        for event in wire::message_opened(&pending.message_id) {
                            out.send(event).await;
                        }
                    }
                    out.send(wire::text_delta(&pending.message_id, &delta))
                        .await;
                }
                opened = true;
                text.push_str(&delta);
            }
            Some(Progress::Calls { calls, outputs }) => {
                let calls: Vec<FunctionCall> = calls.iter().map(function_call).collect();
                let call_ids = calls.iter().map(|c| c.call_id.clone()).collect();
                let record = front.keep(&pending, &text, calls.clone(), None).await;
                front.park(&pending.session_key, &pending.id, turn, call_ids, outputs);
                handed_over.store(true, Ordering::SeqCst);
                front.metrics.response_ended(ResponseOutcome::FunctionCalls);
                tracing::info!(session = %pending.session_key, response = %pending.id, calls = calls.len(), "responses front: the model called the client's functions; the turn waits for their outputs");
                if let Some(out) = &mut out {
                    let first_call = usize::from(opened);
                    if opened {
                        for event in wire::message_done(&pending.message_id, &text) {
                            out.send(event).await;
                        }
                    }
                    for (index, call) in calls.iter().enumerate() {
                        for event in wire::function_call_events(call, first_call + index) {
                            out.send(event).await;
                        }
                    }
                    out.send(wire::response_event("response.completed", record.object()))
                        .await;
                }
                return Ok(record);
            }
            // Answered: the response ends now; the turn's record and the engine's post-turn
            // work go on.
            Some(Progress::Answered { answer, ended }) => {
                let usage = answer.usage.map(token_usage);
                let told = Told { text, opened };
                let end = End {
                    out,
                    ended: Some(ended),
                };
                return Ok(
                    answered(&front, &pending, &mut turn, told, answer.reply, usage, end).await,
                );
            }
            Some(Progress::Ended(outcome)) => {
                let (reply, usage) = match *outcome {
                    Ok(report) => (report.reply, report.metrics.usage.map(token_usage)),
                    // Answered but not recorded by the harness: the client still gets it.
                    Err(HarnessError::NotRecorded { reply, .. }) => (reply, None),
                    Err(error) => {
                        tracing::warn!(response = %pending.id, %error, "responses front: the turn failed");
                        front.metrics.response_ended(ResponseOutcome::Failed);
                        return Err(failed(&pending, turn_error(&error), &mut out).await);
                    }
                };
                let told = Told { text, opened };
                let end = End { out, ended: None };
                return Ok(answered(&front, &pending, &mut turn, told, reply, usage, end).await);
            }
            None => {
                front.metrics.response_ended(ResponseOutcome::Failed);
                let error = ApiError::server("the turn's task ended without an answer");
                return Err(failed(&pending, error, &mut out).await);
            }
        }
    }
}

/// What a response has told its client so far: the text, and whether its message item is
/// open.
struct Told {
    text: String,
    opened: bool,
}

/// How an answered response ends: its stream (when streamed), and the turn waiting to hear
/// that it has ended (when the turn is still running).
struct End {
    out: Option<Writer>,
    ended: Option<oneshot::Sender<()>>,
}

/// Ends the response `pending` with the turn's answer `reply`: (streamed) the message's end,
/// `response.completed` and the end of the stream, then the response is kept while the
/// turn's record is written (two writes the store may or may not group). Until both are
/// written, a request reading the response or its conversation waits for them; a non-streamed
/// response is returned (and sent) after them.
async fn answered(
    front: &ResponsesFront,
    pending: &Pending,
    turn: &mut RunningTurn,
    told: Told,
    reply: String,
    usage: Option<TokenUsage>,
    end: End,
) -> ResponseRecord {
    // A turn that went through the client's functions spans several responses: this one
    // shows the text since the last calls.
    let text = if turn.rounds == 0 { reply } else { told.text };
    let record = response_record(pending, &text, Vec::new(), usage);
    let settling = front.unsettled.begin(
        std::iter::once(&record.id)
            .chain(&record.conversation)
            .cloned()
            .collect(),
    );
    front.metrics.response_ended(ResponseOutcome::Answered);
    if let Some(mut out) = end.out {
        if !told.opened {
            for event in wire::message_opened(&pending.message_id) {
                out.send(event).await;
            }
        }
        for event in wire::message_done(&pending.message_id, &text) {
            out.send(event).await;
        }
        out.send(wire::response_event("response.completed", record.object()))
            .await;
        // Dropped here: the stream ends.
    }
    if let Some(ended) = end.ended {
        let _ = ended.send(());
    }
    // The server's connection task, woken by the stream's end, writes it before the keep's
    // write runs here (the store's write queue runs its transaction on its submitter).
    tokio::task::yield_now().await;
    front.keep_record(pending, &record).await;
    if let Some(recorded) = turn.recorded.take() {
        // Resolves unanswered when the turn ends unrecorded (its task logs why).
        let _ = recorded.await;
    }
    drop(settling);
    record
}

/// Tells a streamed client its response failed (`response.failed`); returns the error.
async fn failed(pending: &Pending, error: ApiError, out: &mut Option<Writer>) -> ApiError {
    if let Some(out) = out {
        let code = error.code.unwrap_or(error.kind);
        let object = unkept_object(pending, Status::Failed, Some((code, &error.message)));
        out.send(wire::response_event("response.failed", object))
            .await;
    }
    error
}
