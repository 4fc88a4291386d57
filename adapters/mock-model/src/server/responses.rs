//! `POST …/responses` (a streamed reply, or a scripted tool call) and the unary compaction
//! endpoint `POST …/responses/compact`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::record::{last_user_text, RecordedRequest, RequestKind};
use crate::script::{
    default_reply_text, default_reply_text_for, estimate_tokens, ReplyOutcome, ScriptedReply, Usage,
};
use crate::sse;

use super::answers::{error_type_for, event_stream, hold, json_error, new_id};
use super::state::{now_ms, Incoming, Shared};

/// Marker texts of a compaction request sent as a normal Responses request (Codex's local
/// compaction appends its summarisation prompt as the last user message).
const COMPACTION_MARKERS: [&str; 3] = [
    "CONTEXT CHECKPOINT COMPACTION",
    "handoff summary",
    "summary for another LLM",
];
fn is_compaction_prompt(text: Option<&str>) -> bool {
    text.is_some_and(|text| COMPACTION_MARKERS.iter().any(|m| text.contains(m)))
}

/// The reply text for a request: scripted, else a summary for a compaction prompt, else the
/// deterministic echo of the last user message.
fn reply_text(reply: &ScriptedReply, conversation: &[Value]) -> String {
    if let Some(text) = &reply.text {
        return text.clone();
    }
    if let Some(text) = default_reply_text_for(conversation) {
        return text;
    }
    let last_user = last_user_text(conversation);
    if is_compaction_prompt(last_user.as_deref()) {
        let users = crate::record::message_texts(conversation, "user");
        let turns = users.len().saturating_sub(1);
        return format!("mock summary of {turns} earlier user messages");
    }
    default_reply_text(last_user.as_deref())
}

/// What a request got, as the recording keeps it: the response id and text, or only the
/// scripted HTTP status when the reply is an error.
fn record_outcome(record: &mut RecordedRequest, reply: &ScriptedReply, id: &str, text: &str) {
    if let ReplyOutcome::HttpError { status, .. } = &reply.outcome {
        record.status = *status;
        record.response_id = None;
        record.reply_text = None;
    } else {
        record.response_id = Some(id.to_owned());
        record.reply_text = Some(text.to_owned());
    }
}

pub(super) async fn responses(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let body_len = incoming.body_len;
    let mut record = incoming.record(RequestKind::Responses);
    if let Err(response) = shared.reject_non_json(&mut record).await {
        return response;
    }
    let reply = shared.next_reply(&record);
    let model = record
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned();

    if let Err(response) = shared.resolve_chain(&mut record).await {
        return response;
    }

    if reply.tool_call.is_some() {
        return tool_call_response(&shared, record, reply, &model, body_len).await;
    }
    let text = reply_text(&reply, &record.conversation);
    let response_id = new_id("resp");
    let item_id = new_id("msg");
    let usage = reply
        .usage
        .unwrap_or_else(|| Usage::new(estimate_tokens(body_len), estimate_tokens(text.len())));
    let item = sse::assistant_message(&item_id, &text);
    record_outcome(&mut record, &reply, &response_id, &text);
    if reply.outcome == ReplyOutcome::Complete {
        shared.keep_output(&record, &response_id, &item);
    }
    shared.remember(&record).await;
    tracing::debug!(seq = record.seq, path = %record.path, status = record.status, "mock model request");

    if let Some(delay) = reply.delay {
        hold(delay).await;
    }

    let deltas = sse::split_deltas(&text, shared.delta_chunks);
    let mut events = vec![
        sse::response_created(&response_id, &model),
        sse::output_item_added(&item_id),
    ];
    match reply.outcome {
        ReplyOutcome::HttpError {
            status,
            code,
            message,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return json_error(
                status,
                error_type_for(status.as_u16()),
                &code,
                &message,
                None,
            );
        }
        ReplyOutcome::Complete => {
            events.extend(deltas.iter().map(|d| sse::output_text_delta(&item_id, d)));
            events.push(sse::output_item_done(&item));
            events.push(sse::response_completed(&response_id, &model, &item, usage));
        }
        ReplyOutcome::DropAfterDeltas { deltas: keep } => {
            events.extend(
                deltas
                    .iter()
                    .take(keep)
                    .map(|d| sse::output_text_delta(&item_id, d)),
            );
        }
        ReplyOutcome::Failed { code, message } => {
            events.extend(deltas.iter().map(|d| sse::output_text_delta(&item_id, d)));
            events.push(sse::response_failed(&response_id, &model, &code, &message));
        }
    }
    event_stream(&events)
}
/// A scripted function call: the response's only output item is a `function_call`; stored (in
/// stateful mode) so the client's `function_call_output` can chain on it.
async fn tool_call_response(
    shared: &Shared,
    mut record: RecordedRequest,
    reply: ScriptedReply,
    model: &str,
    body_len: usize,
) -> Response {
    let Some(call) = reply.tool_call else {
        return json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "no_tool_call",
            "mock: tool call reply without a call",
            None,
        );
    };
    let response_id = new_id("resp");
    let item_id = new_id("fc");
    let call_id = call.call_id.unwrap_or_else(|| new_id("call"));
    let item = sse::function_call(&item_id, &call_id, &call.name, &call.arguments);
    let usage = reply.usage.unwrap_or_else(|| {
        Usage::new(
            estimate_tokens(body_len),
            estimate_tokens(call.arguments.len()),
        )
    });
    record.response_id = Some(response_id.clone());
    record.reply_text = None;
    shared.keep_output(&record, &response_id, &item);
    shared.remember(&record).await;
    tracing::debug!(seq = record.seq, tool = %call.name, "mock model: scripted tool call");
    if let Some(delay) = reply.delay {
        hold(delay).await;
    }
    let events = [
        sse::response_created(&response_id, model),
        sse::item_added(&item),
        sse::output_item_done(&item),
        sse::response_completed(&response_id, model, &item, usage),
    ];
    event_stream(&events)
}

/// The unary compaction endpoint: the user messages of the conversation followed by one
/// `compaction` item whose opaque content is a readable summary.
pub(super) async fn compact(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let body_len = incoming.body_len;
    let mut record = incoming.record(RequestKind::Compact);
    if let Err(response) = shared.reject_non_json(&mut record).await {
        return response;
    }
    let reply = shared.next_reply(&record);
    if let Err(response) = shared.resolve_chain(&mut record).await {
        return response;
    }
    let users: Vec<Value> = record
        .conversation
        .iter()
        .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .cloned()
        .collect();
    let summary = reply
        .text
        .clone()
        .unwrap_or_else(|| format!("mock summary of {} earlier user messages", users.len()));
    let id = new_id("cmp");
    record_outcome(&mut record, &reply, &id, &summary);
    shared.remember(&record).await;
    if let Some(delay) = reply.delay {
        hold(delay).await;
    }
    if let ReplyOutcome::HttpError {
        status,
        code,
        message,
    } = reply.outcome
    {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return json_error(
            status,
            error_type_for(status.as_u16()),
            &code,
            &message,
            None,
        );
    }
    let mut output = users;
    output.push(json!({
        "type": "compaction",
        "id": new_id("cmpitem"),
        "encrypted_content": summary,
    }));
    let usage = reply
        .usage
        .unwrap_or_else(|| Usage::new(estimate_tokens(body_len), estimate_tokens(summary.len())));
    let body = json!({
        "id": id,
        "object": "response.compaction",
        "created_at": now_ms() / 1000,
        "output": output,
        "usage": sse::usage_json(usage),
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
