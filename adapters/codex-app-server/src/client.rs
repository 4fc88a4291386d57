//! The public client: spawn + handshake, typed calls, turns.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::child::ChildConnection;
use crate::config::{AppServerConfig, TurnLimits};
use crate::connection::{self, Health};
use crate::error::AppServerError;
use crate::transport::{Route, Transport};
use crate::turn::{Interrupter, Responder, TurnHandle};
use crate::version::CodexVersion;

/// Parameters of `thread/start`; `None` fields are left out.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStartParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_provider: Option<String>,
    /// Replaces Codex's built-in base prompt (sent first in every model request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_instructions: Option<String>,
    /// The thread's developer instructions. Codex does not persist them across an app-server
    /// restart: re-send them on every `thread/resume` (see [`ThreadResumeParams`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_instructions: Option<String>,
    /// Per-thread config overrides (same keys as `-c`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Map<String, Value>>,
    /// Not persisted (cannot be resumed after a restart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<bool>,
    /// Tools the client executes (experimental API): the model may call them, and Codex then
    /// sends an `item/tool/call` request, surfaced as [`crate::TurnEvent::ToolCall`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_tools: Option<Vec<DynamicToolSpec>>,
}

/// One entry of `thread/start.dynamicTools`: `{type: "function", name, description,
/// inputSchema}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolSpec {
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub name: String,
    pub description: String,
    /// The JSON Schema of the arguments.
    pub input_schema: Value,
}

impl DynamicToolSpec {
    /// A function tool.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        Self {
            kind: "function",
            name: name.into(),
            description: description.into(),
            input_schema,
        }
    }
}

/// Parameters of `thread/resume` (always with `excludeTurns: true`); `None` fields are left
/// out.
///
/// Codex does not persist a thread's developer instructions across an app-server restart: a
/// thread resumed in a new process without `developer_instructions` loses them from model
/// requests after its next compaction (openai/codex#19045). Re-send the thread's instructions on
/// every resume.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResumeParams {
    pub thread_id: String,
    /// Replaces the base prompt for the resumed thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_instructions: Option<String>,
    /// The thread's developer instructions, re-sent (see the type's documentation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_instructions: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_provider: Option<String>,
    /// Per-thread config overrides (same keys as `-c`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Map<String, Value>>,
}

impl ThreadResumeParams {
    /// Resume `thread_id` with nothing re-sent.
    pub fn new(thread_id: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            ..Self::default()
        }
    }
}

/// How Codex presents an [`AdditionalContext`] entry to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AdditionalContextKind {
    /// A developer message `<KEY>value</KEY>` just before the turn's user message.
    Application,
    /// A synthetic tool output (namespace `agent`, named by `name`).
    Untrusted,
}

/// One entry of `turn/start.additionalContext` (experimental API). Codex keeps the entry in the
/// thread's history, re-sends nothing for an unchanged value, adds a new item for a changed
/// one, and forgets its per-thread store on a turn without `additionalContext`; send the whole
/// map on every turn. Whether the entry survives compaction depends on the version, see
/// [`crate::keeps_additional_context_across_compaction`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdditionalContext {
    pub kind: AdditionalContextKind,
    pub value: String,
    /// Label of an `Untrusted` entry's tool output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl AdditionalContext {
    /// An `application` entry: developer text placed before the user message.
    pub fn application(value: impl Into<String>) -> Self {
        Self {
            kind: AdditionalContextKind::Application,
            value: value.into(),
            name: None,
        }
    }
}

/// Parameters of [`AppServerClient::turn_start_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnStartParams {
    /// The user's text (the only input item).
    pub text: String,
    /// `additionalContext` by source key; empty leaves the field out.
    pub additional_context: BTreeMap<String, AdditionalContext>,
}

impl TurnStartParams {
    /// A turn with this text and no additional context.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// Add (or replace) one additional-context entry.
    pub fn with_context(mut self, key: impl Into<String>, context: AdditionalContext) -> Self {
        self.additional_context.insert(key.into(), context);
        self
    }
}

/// What `initialize` answered.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    #[serde(default)]
    pub user_agent: Option<String>,
    #[serde(default)]
    pub codex_home: Option<PathBuf>,
    #[serde(default)]
    pub platform_family: Option<String>,
    #[serde(default)]
    pub platform_os: Option<String>,
}

impl ServerInfo {
    /// The Codex version in `user_agent`, when it has one.
    pub fn codex_version(&self) -> Option<CodexVersion> {
        self.user_agent
            .as_deref()
            .and_then(CodexVersion::from_user_agent)
    }
}

#[derive(Debug, Deserialize)]
struct ThreadEnvelope {
    thread: ThreadFields,
    #[serde(default)]
    model: Option<String>,
    #[serde(default, rename = "modelProvider")]
    model_provider: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ThreadFields {
    id: String,
    #[serde(default)]
    path: Option<PathBuf>,
}

/// The result of `thread/start`.
#[derive(Debug, Clone)]
pub struct ThreadStarted {
    pub thread_id: String,
    pub model: Option<String>,
    pub model_provider: Option<String>,
    /// The rollout file persisting the thread (absent for ephemeral threads).
    pub path: Option<PathBuf>,
    /// The whole result, for fields not modelled here.
    pub raw: Value,
}

/// The result of `thread/resume`.
#[derive(Debug, Clone)]
pub struct ThreadResumed {
    pub thread_id: String,
    pub model: Option<String>,
    pub model_provider: Option<String>,
    pub path: Option<PathBuf>,
    pub raw: Value,
}

/// One running `codex app-server` child. Cheap to clone: clones share the child, which many
/// threads and sessions can use at once. The child is killed when the last clone is dropped.
#[derive(Clone)]
pub struct AppServerClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where requests go.
    transport: Arc<dyn Transport>,
    /// The client's own child, when it spawned one (kill, shutdown, pid).
    child: Option<Arc<ChildConnection>>,
    turn_limits: TurnLimits,
    server_info: ServerInfo,
    codex_version: Option<CodexVersion>,
}

impl std::fmt::Debug for AppServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppServerClient")
            .field("pid", &self.pid())
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

/// A developer message as a raw Responses item (what `thread/inject_items` takes).
pub fn developer_message(text: &str) -> Value {
    json!({
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": text}],
    })
}

/// `thread/resume`'s params for `params`, with `excludeTurns: true`.
fn resume_request(params: &ThreadResumeParams) -> Result<Value, AppServerError> {
    let mut request =
        serde_json::to_value(params).map_err(|source| AppServerError::Deserialize {
            method: "thread/resume".to_owned(),
            source,
        })?;
    if let Some(object) = request.as_object_mut() {
        object.insert("excludeTurns".to_owned(), Value::Bool(true));
    }
    Ok(request)
}

fn decode<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, AppServerError> {
    serde_json::from_value(value).map_err(|source| AppServerError::Deserialize {
        method: method.to_owned(),
        source,
    })
}

impl AppServerClient {
    /// Spawn the child (creating `CODEX_HOME` if needed) and perform the `initialize` /
    /// `initialized` handshake.
    pub async fn spawn(config: AppServerConfig) -> Result<Self, AppServerError> {
        let Some(program) = config.command.first().cloned() else {
            return Err(AppServerError::Spawn {
                program: String::new(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
            });
        };
        std::fs::create_dir_all(&config.codex_home).map_err(|source| {
            AppServerError::CodexHome {
                path: config.codex_home.clone(),
                source,
            }
        })?;
        let command = config.process(&program);
        let piped =
            ctxbridge_jsonrpc::spawn_piped(command).map_err(|source| AppServerError::Spawn {
                program: program.clone(),
                source,
            })?;
        let pid = piped.child.id();
        tracing::info!(%program, ?pid, codex_home = %config.codex_home.display(), "spawned codex app-server");
        let health = Arc::new(Health::default());
        let commands = connection::start(piped, config.max_line_bytes, health.clone());
        let child = Arc::new(ChildConnection::new(
            commands,
            health,
            config.request_timeout,
            pid,
        ));
        let transport: Arc<dyn Transport> = child.clone();
        let params = json!({
            "clientInfo": {"name": "ctxbridge", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": {"experimentalApi": true},
        });
        let result = transport.request("initialize", params, None).await?;
        let server_info: ServerInfo = decode("initialize", result)?;
        let client = Self::with_inner(Inner {
            transport,
            child: Some(child),
            turn_limits: config.turn_limits,
            codex_version: server_info.codex_version(),
            server_info,
        });
        match client.codex_version() {
            Some(version) if crate::version::is_below_tested(version) => tracing::warn!(
                %version,
                oldest_tested = %crate::version::OLDEST_TESTED,
                "codex app-server: this Codex is older than any version tested with this client"
            ),
            Some(version) => tracing::debug!(%version, "codex app-server: version"),
            None => tracing::warn!(
                user_agent = ?client.server_info().user_agent,
                "codex app-server: no version in the initialize user agent"
            ),
        }
        if let Some(child) = &client.inner.child {
            child.notify("initialized", None).await?;
        }
        Ok(client)
    }

    /// A client over a connection someone else owns and has initialized (`server_info` is
    /// its `initialize` answer): ctxbridge serve's shared upstream. Turns run under `limits`;
    /// [`Self::kill`] and [`Self::shutdown`] leave the connection alone.
    pub fn over(
        transport: Arc<dyn Transport>,
        server_info: ServerInfo,
        limits: TurnLimits,
    ) -> Self {
        Self::with_inner(Inner {
            transport,
            child: None,
            turn_limits: limits,
            codex_version: server_info.codex_version(),
            server_info,
        })
    }

    fn with_inner(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// What the server said in the handshake.
    pub fn server_info(&self) -> &ServerInfo {
        &self.inner.server_info
    }

    /// The Codex version, parsed from the handshake's `userAgent` (`None` when it has none).
    pub fn codex_version(&self) -> Option<&CodexVersion> {
        self.inner.codex_version.as_ref()
    }

    /// Whether this Codex keeps `additionalContext` across compaction (false when the version
    /// is unknown).
    pub fn keeps_additional_context_across_compaction(&self) -> bool {
        self.codex_version()
            .is_some_and(crate::version::keeps_additional_context_across_compaction)
    }

    /// The limits every turn of this client runs under.
    pub fn turn_limits(&self) -> TurnLimits {
        self.inner.turn_limits
    }

    /// The child's process id (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.inner.child.as_ref().and_then(|child| child.pid())
    }

    /// Whether the child is still running and its stdio open. Becomes false as soon as the
    /// process exits; a new client must then be spawned (threads are resumed with
    /// [`Self::thread_resume`]).
    pub fn is_alive(&self) -> bool {
        self.inner.transport.is_alive()
    }

    /// Why the connection closed, once it has.
    pub fn death_reason(&self) -> Option<String> {
        self.inner.transport.death_reason()
    }

    /// Any request, answered with the raw result.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, AppServerError> {
        self.inner.transport.request(method, params, None).await
    }

    /// `thread/start`.
    pub async fn thread_start(
        &self,
        params: ThreadStartParams,
    ) -> Result<ThreadStarted, AppServerError> {
        const METHOD: &str = "thread/start";
        let params =
            serde_json::to_value(&params).map_err(|source| AppServerError::Deserialize {
                method: METHOD.to_owned(),
                source,
            })?;
        let raw = self.inner.transport.request(METHOD, params, None).await?;
        let envelope: ThreadEnvelope = decode(METHOD, raw.clone())?;
        Ok(ThreadStarted {
            thread_id: envelope.thread.id,
            model: envelope.model,
            model_provider: envelope.model_provider,
            path: envelope.thread.path,
            raw,
        })
    }

    /// `thread/resume` with `excludeTurns: true` and nothing re-sent: load a persisted thread
    /// into this server (needed after a restart before `turn/start`). Fails with
    /// [`AppServerError::is_no_rollout_found`] when the thread was never persisted. Prefer
    /// [`Self::thread_resume_with`] re-sending the developer instructions.
    pub async fn thread_resume(&self, thread_id: &str) -> Result<ThreadResumed, AppServerError> {
        self.thread_resume_with(ThreadResumeParams::new(thread_id))
            .await
    }

    /// `thread/resume` with `excludeTurns: true` and the given fields (developer instructions,
    /// base instructions, …).
    pub async fn thread_resume_with(
        &self,
        params: ThreadResumeParams,
    ) -> Result<ThreadResumed, AppServerError> {
        const METHOD: &str = "thread/resume";
        let params = resume_request(&params)?;
        let raw = self.inner.transport.request(METHOD, params, None).await?;
        let envelope: ThreadEnvelope = decode(METHOD, raw.clone())?;
        Ok(ThreadResumed {
            thread_id: envelope.thread.id,
            model: envelope.model,
            model_provider: envelope.model_provider,
            path: envelope.thread.path,
            raw,
        })
    }

    /// `thread/resume` (as [`Self::thread_resume_with`]) unless this connection has the thread
    /// loaded already — started, resumed or forked on it — as Codex requires before a turn.
    pub async fn attach(&self, params: ThreadResumeParams) -> Result<(), AppServerError> {
        let request = resume_request(&params)?;
        self.inner
            .transport
            .attach(&params.thread_id, request)
            .await
    }

    /// `thread/inject_items`: append raw Responses items to the thread's model-visible history
    /// without running a turn.
    pub async fn thread_inject_items(
        &self,
        thread_id: &str,
        items: Vec<Value>,
    ) -> Result<(), AppServerError> {
        let params = json!({"threadId": thread_id, "items": items});
        self.inner
            .transport
            .request("thread/inject_items", params, None)
            .await?;
        Ok(())
    }

    /// Inject one developer message (the only way to add developer text to an existing thread).
    pub async fn inject_developer_message(
        &self,
        thread_id: &str,
        text: &str,
    ) -> Result<(), AppServerError> {
        self.thread_inject_items(thread_id, vec![developer_message(text)])
            .await
    }

    /// `thread/compact/start`: Codex runs the compaction as a separate turn, whose events the
    /// handle streams (a `contextCompaction` item, then `Completed`).
    pub async fn thread_compact_start(
        &self,
        thread_id: &str,
    ) -> Result<TurnHandle, AppServerError> {
        const METHOD: &str = "thread/compact/start";
        let (tx, rx) = mpsc::unbounded_channel();
        let route = Route {
            thread_id: thread_id.to_owned(),
            tx,
            turn_from_result: false,
        };
        let params = json!({"threadId": thread_id});
        self.inner
            .transport
            .request(METHOD, params, Some(route))
            .await?;
        Ok(TurnHandle::new(
            thread_id.to_owned(),
            None,
            METHOD,
            rx,
            self.inner.turn_limits,
            Some(self.interrupter()),
        )
        .with_responder(self.responder()))
    }

    /// `turn/start` with one text input. The handle streams the turn's events.
    pub async fn turn_start(
        &self,
        thread_id: &str,
        text: &str,
    ) -> Result<TurnHandle, AppServerError> {
        self.turn_start_with(thread_id, TurnStartParams::text(text))
            .await
    }

    /// `turn/start` with one text input and optional `additionalContext`. The handle streams
    /// the turn's events, under the client's [`TurnLimits`].
    pub async fn turn_start_with(
        &self,
        thread_id: &str,
        params: TurnStartParams,
    ) -> Result<TurnHandle, AppServerError> {
        const METHOD: &str = "turn/start";
        let (tx, rx) = mpsc::unbounded_channel();
        let route = Route {
            thread_id: thread_id.to_owned(),
            tx,
            turn_from_result: true,
        };
        let TurnStartParams {
            text,
            additional_context,
        } = params;
        let mut request = json!({
            "threadId": thread_id,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        });
        if !additional_context.is_empty() {
            let context = serde_json::to_value(&additional_context).map_err(|source| {
                AppServerError::Deserialize {
                    method: METHOD.to_owned(),
                    source,
                }
            })?;
            if let Some(object) = request.as_object_mut() {
                object.insert("additionalContext".to_owned(), context);
            }
        }
        let result = self
            .inner
            .transport
            .request(METHOD, request, Some(route))
            .await?;
        let turn_id = result
            .pointer("/turn/id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if turn_id.is_none() {
            tracing::warn!(%thread_id, "codex app-server: turn/start result without turn.id");
        }
        Ok(TurnHandle::new(
            thread_id.to_owned(),
            turn_id,
            METHOD,
            rx,
            self.inner.turn_limits,
            Some(self.interrupter()),
        )
        .with_responder(self.responder()))
    }

    /// Sends `turn/interrupt` in a background task, for a turn handle whose limit was hit. Holds
    /// the client weakly: once every client clone is gone there is nothing to interrupt.
    fn interrupter(&self) -> Interrupter {
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        Arc::new(move |thread_id: &str, turn_id: &str| {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let params = json!({"threadId": thread_id, "turnId": turn_id});
            let (thread_id, turn_id) = (thread_id.to_owned(), turn_id.to_owned());
            tokio::spawn(async move {
                match inner
                    .transport
                    .request("turn/interrupt", params, None)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(%thread_id, %turn_id, "codex app-server: interrupted a turn over its limit")
                    }
                    Err(error) => {
                        tracing::warn!(%thread_id, %turn_id, %error, "codex app-server: turn/interrupt failed")
                    }
                }
            });
        })
    }

    /// Answers server requests routed to a turn (dynamic tool calls) in a background task. Holds
    /// the client weakly, like [`Self::interrupter`].
    fn responder(&self) -> Responder {
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        Arc::new(move |id: Value, result: Result<Value, String>| {
            if let Some(inner) = inner.upgrade() {
                inner.transport.respond(id, result);
            }
        })
    }

    /// `turn/interrupt`; the turn's stream then ends with status `Interrupted`.
    pub async fn turn_interrupt(
        &self,
        thread_id: &str,
        turn_id: &str,
    ) -> Result<(), AppServerError> {
        let params = json!({"threadId": thread_id, "turnId": turn_id});
        self.inner
            .transport
            .request("turn/interrupt", params, None)
            .await?;
        Ok(())
    }

    /// SIGKILL the child and wait until every pending call and turn has been failed (nothing
    /// for a client [`Self::over`] a connection it does not own).
    pub async fn kill(&self) {
        if let Some(child) = &self.inner.child {
            child.kill().await;
        }
    }

    /// Close stdin (the app-server exits on EOF) and wait for the exit; the child is killed if
    /// it does not exit within a few seconds (nothing for a client [`Self::over`] a connection
    /// it does not own).
    pub async fn shutdown(self) {
        if let Some(child) = &self.inner.child {
            child.shutdown().await;
        }
    }
}
