//! What the Responses front keeps of its clients' responses and conversations, in the state
//! store's documents: the client's view only (its input items and the model's answer, under
//! the front's own ids), and the engine session each belongs to. Projected context is never
//! part of it.

use std::sync::Arc;
use std::time::Duration;

use responses_client::ApiKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::{self, ApiError, FunctionCall, ModelSettings, ResponseView, Status, TokenUsage};
use crate::store::{StateStore, StateStoreExt, StoreError, TurnWrite};
use crate::util::sha256_hex;

/// The documents namespace of response records (key: the response id).
pub const RESPONSES_NAMESPACE: &str = "responses-front/responses";
/// The documents namespace of conversation records (key: the conversation id).
pub const CONVERSATIONS_NAMESPACE: &str = "responses-front/conversations";
/// The documents namespace of each engine session's latest response (key: the session key;
/// value: the response id as a JSON string).
pub const HEADS_NAMESPACE: &str = "responses-front/heads";

/// A new id with the API's prefix (`resp`, `msg`, `conv`): time-ordered, unique.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// The engine session of a chain that starts at response `first_id`, or of conversation
/// `conversation_id`: every response of a chain or a conversation is a turn of one session.
pub fn session_key_of(thread: &str) -> String {
    format!("responses:{thread}")
}

/// Who asks. With `serve.responses.passThroughAuth` a client is its key: the key goes on with
/// its turns, and the records it makes are its own (another key finds nothing); otherwise
/// every client is the same caller.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's key, passed on to the upstream.
    pub api_key: Option<ApiKey>,
    /// Its owner mark: the SHA-256 of the key.
    pub owner: Option<String>,
    /// The lane serving its connection: which of the upstream's connection pools its
    /// requests use (see [`crate::serve::lanes`]).
    pub lane: usize,
}

impl Caller {
    /// The caller whose requests carry `authorization` (pass-through): its bearer key, or
    /// `None` when it is no `Bearer` credential.
    pub fn with_bearer(authorization: &str) -> Option<Caller> {
        let (scheme, key) = authorization.split_once(' ')?;
        let key = key.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then(|| Caller {
            owner: Some(sha256_hex(key)),
            api_key: Some(ApiKey::new(key)),
            lane: 0,
        })
    }

    /// Whether a record marked `owner` is this caller's.
    pub fn owns(&self, owner: &Option<String>) -> bool {
        &self.owner == owner
    }
}

/// One answered response, as its client sees it (a failed one is not kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseRecord {
    pub id: String,
    /// The engine session the response was a turn of.
    pub session_key: String,
    pub created_at: u64,
    pub model: String,
    /// The client's input items of this response, as sent.
    pub input: Vec<Value>,
    pub message_id: String,
    /// The model's answer (empty when it only called functions).
    pub text: String,
    /// The model's calls of the client's functions, which the next response's
    /// `function_call_output` items answer.
    #[serde(default)]
    pub calls: Vec<FunctionCall>,
    pub previous_response_id: Option<String>,
    pub conversation: Option<String>,
    pub metadata: Value,
    pub store: bool,
    /// What the client asked of the model (echoed).
    #[serde(default)]
    pub settings: ModelSettings,
    /// Whose it is (see [`Caller`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The tokens of the model's last response of the turn (unknown for a response that
    /// ended with the model's calls: the turn has not ended).
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// The text of the system and developer messages of the chain's inputs up to this
    /// response, in order: the instructions its continuations keep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standing_instructions: Vec<String>,
}

impl ResponseRecord {
    /// The response object of this record.
    pub fn object(&self) -> Value {
        wire::response_object(&ResponseView {
            id: &self.id,
            created_at: self.created_at,
            status: Status::Completed,
            model: &self.model,
            output: self.output_items(),
            previous_response_id: self.previous_response_id.as_deref(),
            conversation: self.conversation.as_deref(),
            metadata: &self.metadata,
            store: self.store,
            settings: &self.settings,
            usage: self.usage,
            error: None,
        })
    }

    /// The input items with the ids the API gives them (`msg_…` derived from the response's
    /// id and the item's place, so that every read shows the same ids).
    pub fn input_items(&self) -> Vec<Value> {
        self.input
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let mut item = item.clone();
                if let Value::Object(fields) = &mut item {
                    let suffix = self.id.strip_prefix("resp_").unwrap_or(&self.id);
                    fields
                        .entry("id")
                        .or_insert_with(|| Value::from(format!("msg_{suffix}_{index}")));
                    fields
                        .entry("type")
                        .or_insert_with(|| Value::from("message"));
                    fields
                        .entry("status")
                        .or_insert_with(|| Value::from("completed"));
                    if let Some(Value::String(text)) = fields.get("content").cloned() {
                        fields.insert(
                            "content".into(),
                            serde_json::json!([{"type": "input_text", "text": text}]),
                        );
                    }
                }
                item
            })
            .collect()
    }

    /// The output items as the response object shows them: the assistant message (unless
    /// the model only called functions), then the function calls.
    pub fn output_items(&self) -> Vec<Value> {
        let message = (!self.text.is_empty() || self.calls.is_empty())
            .then(|| wire::message_item(&self.message_id, &self.text, Status::Completed));
        message
            .into_iter()
            .chain(
                self.calls
                    .iter()
                    .map(|call| wire::function_call_item(call, Status::Completed)),
            )
            .collect()
    }
}

/// One conversation, as its client created it, and the responses made in it, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationRecord {
    pub id: String,
    pub created_at: u64,
    pub metadata: Value,
    pub responses: Vec<String>,
    /// Items the client added outside a response.
    #[serde(default)]
    pub added: Vec<AddedItem>,
    /// Whose it is (see [`Caller`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The text of the system and developer messages of its responses' inputs, in order: the
    /// instructions its later responses keep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standing_instructions: Vec<String>,
}

/// An item the client added to a conversation outside a response (a user message), with its
/// place: after how many of the conversation's responses it came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddedItem {
    pub after_responses: usize,
    /// The item as listed (with its id).
    pub item: Value,
}

impl ConversationRecord {
    /// The text of the items added since the last response: they join the user's turn of the
    /// next response, before its input.
    pub fn added_since_last_response(&self) -> Vec<String> {
        self.added
            .iter()
            .filter(|added| added.after_responses == self.responses.len())
            .filter_map(|added| wire::user_message_text(&added.item, "items").ok())
            .map(|parts| parts.join("\n"))
            .collect()
    }

    /// The conversation object.
    pub fn object(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        })
    }
}

/// What continuing from a response needs of it: none of it changes once the response is kept
/// (a deletion is told by the store, see [`Records::link_for`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// The engine session the response was a turn of.
    pub session_key: String,
    /// Whose it is (see [`Caller`]).
    pub owner: Option<String>,
    /// The instructions its continuations keep (see [`ResponseRecord::standing_instructions`]).
    pub standing_instructions: Vec<String>,
}

impl From<&ResponseRecord> for Link {
    fn from(record: &ResponseRecord) -> Link {
        Link {
            session_key: record.session_key.clone(),
            owner: record.owner.clone(),
            standing_instructions: record.standing_instructions.clone(),
        }
    }
}

/// The latest response of an engine session, as its head document says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Head {
    /// The latest response's id (stored as a bare JSON string).
    Latest(String),
    /// The latest response was deleted: the chain cannot be continued.
    Deleted { deleted: String },
}

/// Links remembered at most, and for how long unused.
const LINKS_KEPT: u64 = 10_000;
const LINKS_IDLE: Duration = Duration::from_secs(15 * 60);

/// The front's records in a state store.
#[derive(Clone)]
pub struct Records {
    store: Arc<dyn StateStore>,
    /// The links of responses this process kept or read, by response id: continuing a chain
    /// reads only its head from the store (see [`Records::link_for`]).
    links: moka::sync::Cache<String, Arc<Link>>,
}

fn store_error(operation: &str, error: StoreError) -> ApiError {
    tracing::error!(%error, operation, "responses front: state store");
    ApiError::server(format!("ctxbridge could not {operation}: {error}"))
}

impl Records {
    pub fn new(store: Arc<dyn StateStore>) -> Records {
        Records {
            store,
            links: moka::sync::Cache::builder()
                .max_capacity(LINKS_KEPT)
                .time_to_idle(LINKS_IDLE)
                .build(),
        }
    }

    async fn save(&self, namespace: &str, key: &str, json: String) -> Result<(), StoreError> {
        self.store
            .submit(TurnWrite::SaveDocument {
                namespace: namespace.to_owned(),
                key: key.to_owned(),
                json,
            })
            .await
            .map(drop)
    }

    fn load<T: serde::de::DeserializeOwned>(
        &self,
        namespace: &str,
        key: &str,
        what: &str,
    ) -> Result<Option<T>, ApiError> {
        let Some(json) = self
            .store
            .load_document(namespace, key)
            .map_err(|e| store_error("read a record", e))?
        else {
            return Ok(None);
        };
        // A deleted record is kept as `null`.
        serde_json::from_str::<Option<T>>(&json).map_err(|e| {
            ApiError::server(format!("the stored {what} {key:?} does not decode: {e}"))
        })
    }

    /// The response `id`, unless unknown or deleted.
    pub fn response(&self, id: &str) -> Result<Option<ResponseRecord>, ApiError> {
        self.load(RESPONSES_NAMESPACE, id, "response")
    }

    /// Keeps `record` (also a response made with `store: false`: it stays the chain's link,
    /// as the engine session holds the turn anyway).
    pub async fn save_response(&self, record: &ResponseRecord) -> Result<(), ApiError> {
        let json = serde_json::to_string(record)
            .map_err(|e| ApiError::server(format!("cannot encode the response record: {e}")))?;
        self.save(RESPONSES_NAMESPACE, &record.id, json)
            .await
            .map_err(|e| store_error("record the response", e))
    }

    /// The response `id` if `caller` may see it.
    pub fn response_for(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<ResponseRecord>, ApiError> {
        Ok(self.response(id)?.filter(|r| caller.owns(&r.owner)))
    }

    /// The conversation `id` if `caller` may see it.
    pub fn conversation_for(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<ConversationRecord>, ApiError> {
        Ok(self.conversation(id)?.filter(|c| caller.owns(&c.owner)))
    }

    /// The link of response `id` if `caller` may see it, and whether it was remembered rather
    /// than read. A remembered link saves a read of the store on every continued turn; whether
    /// the response was deleted since (by another process on the same store) is for the
    /// caller to ask the store when the session's head is not this response: a deleted
    /// latest response leaves [`Head::Deleted`] (see [`Records::delete_response`]).
    pub fn link_for(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<(Arc<Link>, bool)>, ApiError> {
        if let Some(link) = self.links.get(id) {
            return Ok(caller.owns(&link.owner).then_some((link, true)));
        }
        let Some(record) = self.response_for(id, caller)? else {
            return Ok(None);
        };
        let link = Arc::new(Link::from(&record));
        self.links.insert(id.to_owned(), link.clone());
        Ok(Some((link, false)))
    }

    /// The latest response of engine session `session_key`, if it has one.
    pub fn head(&self, session_key: &str) -> Result<Option<Head>, ApiError> {
        self.load(HEADS_NAMESPACE, session_key, "session head")
    }

    async fn save_head(&self, session_key: &str, head: &Head) -> Result<(), ApiError> {
        let json = serde_json::to_string(head)
            .map_err(|e| ApiError::server(format!("cannot encode the session head: {e}")))?;
        self.save(HEADS_NAMESPACE, session_key, json)
            .await
            .map_err(|e| store_error("record the session's latest response", e))
    }

    /// Keeps `record` and makes it its session's latest response.
    pub async fn save_response_as_head(&self, record: &ResponseRecord) -> Result<(), ApiError> {
        let head = Head::Latest(record.id.clone());
        let (saved, headed) = tokio::join!(
            self.save_response(record),
            self.save_head(&record.session_key, &head)
        );
        saved?;
        headed?;
        self.links
            .insert(record.id.clone(), Arc::new(Link::from(record)));
        Ok(())
    }

    /// Forgets the response `record` (its turn stays in the engine session's transcript). When
    /// it is its session's latest, the session's head says it was deleted: a process that
    /// remembers its link then asks the store, which has it no more.
    pub async fn delete_response(&self, record: &ResponseRecord) -> Result<(), ApiError> {
        self.links.invalidate(&record.id);
        self.save(RESPONSES_NAMESPACE, &record.id, "null".into())
            .await
            .map_err(|e| store_error("delete the response", e))?;
        if self.head(&record.session_key)? == Some(Head::Latest(record.id.clone())) {
            let deleted = Head::Deleted {
                deleted: record.id.clone(),
            };
            self.save_head(&record.session_key, &deleted).await?;
        }
        Ok(())
    }

    /// The conversation `id`, unless unknown or deleted.
    pub fn conversation(&self, id: &str) -> Result<Option<ConversationRecord>, ApiError> {
        self.load(CONVERSATIONS_NAMESPACE, id, "conversation")
    }

    pub async fn save_conversation(&self, record: &ConversationRecord) -> Result<(), ApiError> {
        let json = serde_json::to_string(record)
            .map_err(|e| ApiError::server(format!("cannot encode the conversation record: {e}")))?;
        self.save(CONVERSATIONS_NAMESPACE, &record.id, json)
            .await
            .map_err(|e| store_error("record the conversation", e))
    }

    pub async fn delete_conversation(&self, id: &str) -> Result<(), ApiError> {
        self.save(CONVERSATIONS_NAMESPACE, id, "null".into())
            .await
            .map_err(|e| store_error("delete the conversation", e))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A head is stored as the bare id it always was (heads written before deletions were told
    /// still read), and a deleted latest response as an object naming it.
    #[test]
    fn heads_read_as_written_before_and_tell_a_deletion() {
        let latest: Head = serde_json::from_str(r#""resp_1""#).unwrap();
        assert_eq!(latest, Head::Latest("resp_1".into()));
        assert_eq!(serde_json::to_string(&latest).unwrap(), r#""resp_1""#);
        let deleted = Head::Deleted {
            deleted: "resp_2".into(),
        };
        let json = serde_json::to_string(&deleted).unwrap();
        assert_eq!(json, r#"{"deleted":"resp_2"}"#);
        assert_eq!(serde_json::from_str::<Head>(&json).unwrap(), deleted);
    }
}
