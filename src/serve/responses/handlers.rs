//! The Responses front's routes: responses (create, read, delete, cancel, input items),
//! conversations (create, read, update, delete, items) and the upstream's model list.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde_json::{json, Value};

use super::records::{new_id, session_key_of, Caller, ConversationRecord, Head, ResponseRecord};
use super::stream::{self, CancelGuard};
use super::wire::{self, ApiError, CreateRequest, FunctionCall, TokenUsage};
use super::{answer, ResponsesFront};
use crate::harness::{HarnessError, SessionLockError};
use crate::util::now_ms;

/// A response being made: what it answers, and the ids it will have.
pub(super) struct Pending {
    pub id: String,
    pub message_id: String,
    pub session_key: String,
    /// The user's turn: the request's user text, after the items the client added to its
    /// conversation since the last response.
    pub prompt: String,
    pub created_at: u64,
    pub model: String,
    pub request: CreateRequest,
    /// Who asks (see [`Caller`]).
    pub caller: Caller,
    /// The text of the system and developer messages of the chain's or conversation's inputs
    /// so far, then of this request's: instructions for this turn and the ones after it.
    pub standing_instructions: Vec<String>,
}

impl Pending {
    /// The instructions of this response's turn: the standing ones, then the request's
    /// `instructions` (this response's only, as the API's).
    pub fn instructions(&self) -> Option<String> {
        let parts: Vec<&str> = self
            .standing_instructions
            .iter()
            .map(String::as_str)
            .chain(self.request.settings.instructions.as_deref())
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

/// The engine session a request continues, with what it keeps of it.
struct Continued {
    session_key: String,
    /// The conversation, when the request is in one.
    conversation: Option<ConversationRecord>,
    /// The standing instructions so far (see [`Pending::standing_instructions`]).
    standing_instructions: Vec<String>,
}

impl ResponsesFront {
    /// The engine session `request` continues: its previous response's, its conversation's
    /// (with the conversation), or a new one named after the response `id` that starts it.
    fn session_of(
        &self,
        request: &CreateRequest,
        id: &str,
        caller: &Caller,
    ) -> Result<Continued, ApiError> {
        if let Some(previous) = &request.previous_response_id {
            let not_found = || {
                ApiError::not_found(
                    Some("previous_response_id"),
                    format!("Previous response with id '{previous}'"),
                )
            };
            let (link, remembered) = self
                .records
                .link_for(previous, caller)?
                .ok_or_else(not_found)?;
            // One engine session holds the chain's turns in order: a response can only be
            // continued while it is the latest (branching the session is not served).
            let head = self.records.head(&link.session_key)?;
            let latest = matches!(&head, Some(Head::Latest(id)) if id == previous);
            if remembered && !latest && self.records.response_for(previous, caller)?.is_none() {
                // Deleted since this process remembered it (by another process).
                return Err(not_found());
            }
            let branching = |message: String| ApiError {
                status: 400,
                kind: "invalid_request_error",
                message,
                param: Some("previous_response_id".into()),
                code: Some("chain_branching_not_supported"),
            };
            match head {
                Some(Head::Latest(head)) if &head != previous => {
                    return Err(branching(format!(
                        "Response '{previous}' is not the latest of its chain ('{head}' is): ctxbridge's Responses front keeps a chain as one context-engine session and cannot branch it. Continue from '{head}', or start a new chain."
                    )));
                }
                Some(Head::Deleted { deleted }) => {
                    return Err(branching(format!(
                        "Response '{previous}' is not the latest of its chain (its latest, '{deleted}', was deleted): ctxbridge's Responses front keeps a chain as one context-engine session and cannot branch it. Start a new chain."
                    )));
                }
                _ => {}
            }
            return Ok(Continued {
                session_key: link.session_key.clone(),
                conversation: None,
                standing_instructions: link.standing_instructions.clone(),
            });
        }
        if let Some(conversation) = &request.conversation {
            let record = self
                .records
                .conversation_for(conversation, caller)?
                .ok_or_else(|| {
                    ApiError::not_found(
                        Some("conversation"),
                        format!("Conversation with id '{conversation}'"),
                    )
                })?;
            return Ok(Continued {
                session_key: session_key_of(conversation),
                standing_instructions: record.standing_instructions.clone(),
                conversation: Some(record),
            });
        }
        Ok(Continued {
            session_key: session_key_of(id),
            conversation: None,
            standing_instructions: Vec::new(),
        })
    }

    /// A new response to `request`.
    fn pending(&self, request: CreateRequest, caller: Caller) -> Result<Pending, ApiError> {
        let id = new_id("resp");
        let Continued {
            session_key,
            conversation,
            mut standing_instructions,
        } = self.session_of(&request, &id, &caller)?;
        standing_instructions.extend_from_slice(&request.standing_instructions);
        let mut prompt = match conversation {
            // Function outputs go on with a waiting turn: nothing joins them.
            Some(conversation) if request.tool_outputs.is_empty() => {
                conversation.added_since_last_response()
            }
            _ => Vec::new(),
        };
        prompt.push(request.prompt.clone());
        Ok(Pending {
            message_id: new_id("msg"),
            session_key,
            prompt: prompt.join("\n"),
            created_at: now_ms() / 1000,
            model: self.upstream.model().to_owned(),
            id,
            request,
            caller,
            standing_instructions,
        })
    }

    /// Keeps the response `pending` made: its text and the model's calls of the client's
    /// functions (and adds it to its conversation). A response that cannot be kept still goes
    /// to the client: the failure is logged.
    pub(super) async fn keep(
        &self,
        pending: &Pending,
        text: &str,
        calls: Vec<FunctionCall>,
        usage: Option<TokenUsage>,
    ) -> ResponseRecord {
        let record = response_record(pending, text, calls, usage);
        self.keep_record(pending, &record).await;
        record
    }

    /// Keeps `record`, the response `pending` made (see [`ResponsesFront::keep`]).
    pub(super) async fn keep_record(&self, pending: &Pending, record: &ResponseRecord) {
        if let Err(error) = self.records.save_response_as_head(record).await {
            tracing::error!(response = %record.id, %error, "responses front: the answered response could not be kept; the client has it");
            self.metrics.response_unkept();
        }
        if let Some(conversation) = &record.conversation {
            let added = &pending.request.standing_instructions;
            if let Err(error) = self
                .append_to_conversation(conversation, &record.id, added)
                .await
            {
                tracing::error!(%conversation, response = %record.id, %error, "responses front: the response could not be added to its conversation");
            }
        }
    }
}

/// The record of the response `pending` made, with its text and the model's calls of the
/// client's functions.
pub(super) fn response_record(
    pending: &Pending,
    text: &str,
    calls: Vec<FunctionCall>,
    usage: Option<TokenUsage>,
) -> ResponseRecord {
    ResponseRecord {
        id: pending.id.clone(),
        session_key: pending.session_key.clone(),
        created_at: pending.created_at,
        model: pending.model.clone(),
        input: pending.request.input.clone(),
        message_id: pending.message_id.clone(),
        text: text.to_owned(),
        calls,
        previous_response_id: pending.request.previous_response_id.clone(),
        conversation: pending.request.conversation.clone(),
        metadata: pending.request.metadata.clone(),
        store: pending.request.store,
        settings: pending.request.settings.clone(),
        usage,
        owner: pending.caller.owner.clone(),
        standing_instructions: pending.standing_instructions.clone(),
    }
}

/// What a failed turn tells the client.
pub(super) fn turn_error(error: &HarnessError) -> ApiError {
    match error {
        HarnessError::Backend { .. } => ApiError::upstream(error.to_string()),
        HarnessError::SessionBusy(SessionLockError::Busy { .. }) => ApiError {
            status: 409,
            kind: "invalid_request_error",
            message: format!("{error}; retry when it has finished."),
            param: None,
            code: Some("conversation_busy"),
        },
        HarnessError::ToolConflict { name, .. } => ApiError::invalid(
            Some("tools"),
            format!("The function tool '{name}' has the name of one of the context engine's tools; rename it."),
        ),
        _ => ApiError::server(error.to_string()),
    }
}

/// `POST /v1/responses`.
pub(super) async fn create_response(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let request = match wire::parse_create(&body) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    // What the request continues is read once it is kept (see [`super::settling`]).
    for id in [&request.previous_response_id, &request.conversation]
        .into_iter()
        .flatten()
    {
        front.unsettled.settled(id).await;
    }
    let started = front
        .pending(request, caller)
        .and_then(|pending| Ok((front.turn_for(&pending)?, pending)));
    let (turn, pending) = match started {
        Ok(started) => started,
        Err(error) => return error.into_response(),
    };
    // A client that goes away before the model's answer cancels the turn (the guard); one
    // that goes away later leaves it to finish and be kept. The response follows the turn in
    // a task of its own, so that what is answered is kept whoever still listens.
    let handed_over = Arc::new(AtomicBool::new(false));
    let guard = CancelGuard::new(&turn, handed_over.clone());
    // The turn's task goes first, on to the model's request: the model's time is the turn's
    // long pole, and the response's head and first events can be written while it runs.
    tokio::task::yield_now().await;
    if pending.request.stream {
        return stream::respond(front, pending, turn, guard, handed_over);
    }
    let task = tokio::spawn(answer::follow(front, pending, turn, handed_over, None));
    let _guard = guard;
    match task.await {
        Ok(Ok(record)) => Json(record.object()).into_response(),
        Ok(Err(error)) => error.into_response(),
        Err(ended) => ApiError::server(format!(
            "the response's task ended without an answer: {ended}"
        ))
        .into_response(),
    }
}

fn response_not_found(id: &str) -> ApiError {
    ApiError::not_found(None, format!("Response with id '{id}'"))
}

/// A response the client may read: kept, and made with `store: true` (one made with
/// `store: false` stays only the link of its chain, as the API's).
fn known_response(
    front: &ResponsesFront,
    id: &str,
    caller: &Caller,
) -> Result<ResponseRecord, ApiError> {
    front
        .records
        .response_for(id, caller)?
        .filter(|record| record.store)
        .ok_or_else(|| response_not_found(id))
}

/// What a route answers: a JSON body, or the API's error.
pub(super) type Answer = Result<Json<Value>, ApiError>;

/// `GET /v1/responses/{id}`.
pub(super) async fn get_response(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    Ok(Json(known_response(&front, &id, &caller)?.object()))
}

/// `DELETE /v1/responses/{id}`: the record goes (the turn stays in the engine session).
pub(super) async fn delete_response(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    let record = known_response(&front, &id, &caller)?;
    front.records.delete_response(&record).await?;
    Ok(Json(
        json!({"id": id, "object": "response", "deleted": true}),
    ))
}

/// `POST /v1/responses/{id}/cancel`: only background responses can be cancelled, and the
/// front runs none (a streamed response is cancelled by closing its stream).
pub(super) async fn cancel_response(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    known_response(&front, &id, &caller)?;
    Err(ApiError::invalid(
        None,
        "Only responses created with background=true can be cancelled; this response has finished.",
    ))
}

/// `GET /v1/responses/{id}/input_items`: what the client sent, never the projected context.
pub(super) async fn input_items(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    // The API lists them newest first by default.
    let mut items = known_response(&front, &id, &caller)?.input_items();
    items.reverse();
    Ok(Json(wire::list(items)))
}

/// `GET /v1/models`: the upstream's answer, passed through.
pub(super) async fn models(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
) -> Response {
    if let Some(api_key) = &caller.api_key {
        // The caller's own key asks (pass-through).
        return super::relay::relay_as(&front, "models", api_key, caller.lane).await;
    }
    match front.upstream.client_on(caller.lane).list_models().await {
        Ok(list) => Json(list).into_response(),
        Err(error) => {
            let status = match &error {
                responses_client::ResponsesError::Api { status, .. } => *status,
                _ => 502,
            };
            ApiError {
                status,
                kind: if status >= 500 {
                    "server_error"
                } else {
                    "invalid_request_error"
                },
                message: format!("the upstream's model list: {error}"),
                param: None,
                code: Some("upstream_error"),
            }
            .into_response()
        }
    }
}
