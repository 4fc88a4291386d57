//! The conversations endpoints: create, retrieve and delete a conversation, list and add its
//! items.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::json;

use crate::record::{normalize_input, RecordedRequest, RequestKind};

use super::answers::{conversation_not_found, json_error, json_ok, new_id};
use super::state::{lock, now_ms, Incoming, MockConversation, Shared};

/// `POST /v1/conversations`: a new conversation holding the given `items` (if any).
pub(super) async fn create_conversation(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let mut record = incoming.record(RequestKind::Conversations);
    // An empty body is an empty conversation.
    if !body.is_empty() {
        if let Err(response) = shared.reject_non_json(&mut record).await {
            return response;
        }
    }
    let id = new_id("conv");
    let conversation = MockConversation {
        created_at: now_ms() / 1000,
        metadata: record.body.get("metadata").cloned().unwrap_or(json!({})),
        items: normalize_input(record.body.get("items")),
    };
    let object = conversation.object(&id);
    lock(&shared.conversations).insert(id.clone(), conversation);
    record.conversation_id = Some(id);
    shared.remember(&record).await;
    json_ok(&object)
}

/// Records a conversations request (no body) about `id` and answers 404 when the mock does
/// not hold it.
async fn conversation_request(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    id: &str,
) -> Result<RecordedRequest, Response> {
    let incoming = Incoming::new(shared, method, uri, headers, &Bytes::new());
    let mut record = incoming.record(RequestKind::Conversations);
    record.conversation_id = Some(id.to_owned());
    if lock(&shared.conversations).contains_key(id) {
        shared.remember(&record).await;
        return Ok(record);
    }
    record.status = StatusCode::NOT_FOUND.as_u16();
    shared.remember(&record).await;
    Err(conversation_not_found(id))
}

/// `GET /v1/conversations/{id}`.
pub(super) async fn retrieve_conversation(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = conversation_request(&shared, &method, &uri, &headers, &id).await {
        return response;
    }
    match lock(&shared.conversations).get(&id) {
        Some(conversation) => json_ok(&conversation.object(&id)),
        None => conversation_not_found(&id),
    }
}

/// `DELETE /v1/conversations/{id}`.
pub(super) async fn delete_conversation(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = conversation_request(&shared, &method, &uri, &headers, &id).await {
        return response;
    }
    lock(&shared.conversations).remove(&id);
    json_ok(&json!({"id": id, "object": "conversation.deleted", "deleted": true}))
}

/// `GET /v1/conversations/{id}/items`: every item, oldest first, in one page.
pub(super) async fn conversation_items(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = conversation_request(&shared, &method, &uri, &headers, &id).await {
        return response;
    }
    let items = lock(&shared.conversations)
        .get(&id)
        .map(|c| c.items.clone())
        .unwrap_or_default();
    let first_id = items.first().and_then(|i| i.get("id")).cloned();
    let last_id = items.last().and_then(|i| i.get("id")).cloned();
    json_ok(&json!({
        "object": "list",
        "data": items,
        "first_id": first_id,
        "last_id": last_id,
        "has_more": false,
    }))
}

/// The most items one create call may carry (the API's limit).
const MAX_ITEMS_PER_CALL: usize = 20;

/// `POST /v1/conversations/{id}/items`: appends the body's `items` (at most 20) to the
/// conversation and answers them as a list; 404 for an unknown conversation, 400 for a body
/// that is not JSON or carries no items or too many.
pub(super) async fn create_conversation_items(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let mut record = incoming.record(RequestKind::Conversations);
    record.conversation_id = Some(id.clone());
    if let Err(response) = shared.reject_non_json(&mut record).await {
        return response;
    }
    let items = normalize_input(record.body.get("items"));
    if items.is_empty() || items.len() > MAX_ITEMS_PER_CALL {
        record.status = StatusCode::BAD_REQUEST.as_u16();
        shared.remember(&record).await;
        return json_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_value",
            &format!(
                "'items' must hold 1 to {MAX_ITEMS_PER_CALL} items, got {}.",
                items.len()
            ),
            Some("items"),
        );
    }
    let added = {
        let mut conversations = lock(&shared.conversations);
        match conversations.get_mut(&id) {
            Some(conversation) => {
                conversation.items.extend(items.iter().cloned());
                true
            }
            None => false,
        }
    };
    if !added {
        record.status = StatusCode::NOT_FOUND.as_u16();
        shared.remember(&record).await;
        return conversation_not_found(&id);
    }
    shared.remember(&record).await;
    let first_id = items.first().and_then(|i| i.get("id")).cloned();
    let last_id = items.last().and_then(|i| i.get("id")).cloned();
    json_ok(&json!({
        "object": "list",
        "data": items,
        "first_id": first_id,
        "last_id": last_id,
        "has_more": false,
    }))
}
