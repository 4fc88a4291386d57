//! The conversation routes of the Responses front: create (optionally with items), read,
//! update, delete, and list or add items. A conversation is one engine session; items the
//! client adds outside a response join the user's turn of the conversation's next response.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::Extension;
use axum::Json;
use serde_json::{json, Value};

use super::handlers::Answer;
use super::records::{new_id, session_key_of, AddedItem, Caller, ConversationRecord};
use super::wire::{self, ApiError};
use super::ResponsesFront;
use crate::util::now_ms;

/// The most items one request may add (the API's own limit).
const MAX_ADDED_ITEMS: usize = 20;

impl ResponsesFront {
    /// Adds response `response` to conversation `id`, and the text of the system and
    /// developer messages of its input (`instructions`) to the conversation's.
    pub(super) async fn append_to_conversation(
        &self,
        id: &str,
        response: &str,
        instructions: &[String],
    ) -> Result<(), ApiError> {
        let _serial = self.conversation_updates.lock().await;
        let Some(mut conversation) = self.records.conversation(id)? else {
            return Err(ApiError::not_found(
                None,
                format!("Conversation with id '{id}'"),
            ));
        };
        conversation.responses.push(response.to_owned());
        conversation
            .standing_instructions
            .extend_from_slice(instructions);
        self.records.save_conversation(&conversation).await
    }
}

fn conversation_not_found(id: &str) -> ApiError {
    ApiError::not_found(None, format!("Conversation with id '{id}'"))
}

fn known_conversation(
    front: &ResponsesFront,
    id: &str,
    caller: &Caller,
) -> Result<ConversationRecord, ApiError> {
    front
        .records
        .conversation_for(id, caller)?
        .ok_or_else(|| conversation_not_found(id))
}

/// The `metadata` of a conversation body (absent: empty).
fn body_metadata(body: &Value) -> Result<Value, ApiError> {
    match body.get("metadata") {
        None | Some(Value::Null) => Ok(json!({})),
        Some(Value::Object(m)) => Ok(Value::Object(m.clone())),
        Some(_) => Err(ApiError::invalid(
            Some("metadata"),
            "`metadata` must be an object.",
        )),
    }
}

fn json_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(None, format!("The request body is not valid JSON: {e}.")))
}

/// The items a request adds (`items`): user messages with text, at most [`MAX_ADDED_ITEMS`],
/// each given its id; anything else is refused naming the item.
fn added_items(body: &Value, after_responses: usize) -> Result<Vec<AddedItem>, ApiError> {
    let items = match body.get("items") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ApiError::invalid(
                Some("items"),
                "`items` must be an array.",
            ))
        }
    };
    if items.len() > MAX_ADDED_ITEMS {
        return Err(ApiError::invalid(
            Some("items"),
            format!(
                "At most {MAX_ADDED_ITEMS} items can be added at once; {} were given.",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let param = format!("items[{index}]");
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
            if kind != "message" {
                return Err(ApiError::invalid(
                    Some(&param),
                    format!("Items of type '{kind}' cannot be added to a conversation by ctxbridge's Responses front (only user messages, which join the next response's turn)."),
                ));
            }
            let parts = wire::user_message_text(item, &param)?;
            Ok(AddedItem {
                after_responses,
                item: json!({
                    "id": new_id("msg"),
                    "type": "message",
                    "status": "completed",
                    "role": "user",
                    "content": parts
                        .iter()
                        .map(|text| json!({"type": "input_text", "text": text}))
                        .collect::<Vec<_>>(),
                }),
            })
        })
        .collect()
}

/// `POST /v1/conversations`: a new conversation, which is a new engine session; its `items`
/// join the user's turn of its first response.
pub(super) async fn create_conversation(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Answer {
    let body = json_body(&body)?;
    let record = ConversationRecord {
        id: new_id("conv"),
        created_at: now_ms() / 1000,
        metadata: body_metadata(&body)?,
        responses: Vec::new(),
        added: added_items(&body, 0)?,
        owner: caller.owner,
        standing_instructions: Vec::new(),
    };
    front.records.save_conversation(&record).await?;
    Ok(Json(record.object()))
}

/// `GET /v1/conversations/{id}`.
pub(super) async fn get_conversation(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    Ok(Json(known_conversation(&front, &id, &caller)?.object()))
}

/// `POST /v1/conversations/{id}`: new metadata.
pub(super) async fn update_conversation(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Answer {
    let metadata = body_metadata(&json_body(&body)?)?;
    let _serial = front.conversation_updates.lock().await;
    let mut record = known_conversation(&front, &id, &caller)?;
    record.metadata = metadata;
    front.records.save_conversation(&record).await?;
    Ok(Json(record.object()))
}

/// `DELETE /v1/conversations/{id}`.
pub(super) async fn delete_conversation(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    let _serial = front.conversation_updates.lock().await;
    known_conversation(&front, &id, &caller)?;
    front.records.delete_conversation(&id).await?;
    Ok(Json(
        json!({"id": id, "object": "conversation.deleted", "deleted": true}),
    ))
}

/// `GET /v1/conversations/{id}/items`: the client's inputs (those it added outside a
/// response included) and the model's answers, oldest first (the conversation API's default
/// order is ascending).
pub(super) async fn conversation_items(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    let conversation = known_conversation(&front, &id, &caller)?;
    let added_after = |count: usize| {
        conversation
            .added
            .iter()
            .filter(move |added| added.after_responses == count)
            .map(|added| added.item.clone())
    };
    let mut items: Vec<Value> = added_after(0).collect();
    for (index, response) in conversation.responses.iter().enumerate() {
        // A deleted response leaves its turn out of the list.
        if let Some(record) = front.records.response(response)? {
            items.extend(record.input_items());
            items.extend(record.output_items());
        }
        items.extend(added_after(index + 1));
    }
    Ok(Json(wire::list(items)))
}

/// `POST /v1/conversations/{id}/items`: user messages that join the user's turn of the
/// conversation's next response (the engine hears them then). Refused while a turn of the
/// conversation waits on its client's function outputs.
pub(super) async fn add_conversation_items(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Answer {
    let body = json_body(&body)?;
    let _serial = front.conversation_updates.lock().await;
    let mut conversation = known_conversation(&front, &id, &caller)?;
    if front.waits_on_tool_outputs(&session_key_of(&id)) {
        return Err(ApiError {
            status: 409,
            kind: "invalid_request_error",
            message:
                "The conversation's model turn waits on function call outputs; send them first."
                    .into(),
            param: Some("items".into()),
            code: Some("conversation_busy"),
        });
    }
    let added = added_items(&body, conversation.responses.len())?;
    if added.is_empty() {
        return Err(ApiError::invalid(
            Some("items"),
            "Missing required parameter: 'items'.",
        ));
    }
    conversation.added.extend(added.iter().cloned());
    front.records.save_conversation(&conversation).await?;
    let items = added.into_iter().map(|added| added.item).collect();
    Ok(Json(wire::list(items)))
}
