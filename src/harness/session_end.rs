//! Ending sessions and running engine commands (docs/engine-protocol.md#the-engine-process-protocol, §14): `ctxbridge reset` / `/reset`
//! fire `before_reset` then `session_end`, archive the session file as OpenClaw does
//! (`<file>.reset.<timestamp>`) and drop the binding and the transcript, so the next turn
//! starts a new session id on a new thread (and `session_start` fires again); the retention
//! sweep fires `session_end` for the sessions it removed; `ctxbridge command` and `/name args`
//! in chat run an engine's registered command through `commands/call`.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use super::session::SessionGuard;
use super::{store_err, Harness, HarnessError, SESSION_NAMESPACE};
use crate::contract::{
    CommandCallParams, CommandReply, ContextEngine, EngineCommand, HookCall, SessionEndReason,
    HOOK_BEFORE_RESET, HOOK_SESSION_END,
};
use crate::quarantine::QuarantineEngine;
use crate::store::StateStoreExt;
use crate::store::SweepReport;
use crate::util::iso_timestamp;
use crate::util::now_ms;

/// What a reset did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetReport {
    /// The session key.
    pub session_key: String,
    /// The session id that ended.
    pub session_id: String,
    /// The session id the next turn uses.
    pub next_session_id: String,
    /// Transcript messages the ended session had.
    pub message_count: usize,
    /// Where the session file was archived, when there was one.
    pub archived_session_file: Option<String>,
}

/// `session_end`'s event (OpenClaw's `PluginHookSessionEndEvent`).
fn session_end_event(
    session_id: &str,
    session_key: Option<&str>,
    message_count: u64,
    reason: SessionEndReason,
    session_file: Option<&str>,
    next_session_id: Option<&str>,
) -> Value {
    let mut event = json!({
        "sessionId": session_id,
        "messageCount": message_count,
        "reason": reason.as_str(),
    });
    if let Some(key) = session_key {
        event["sessionKey"] = json!(key);
    }
    if let Some(file) = session_file {
        event["sessionFile"] = json!(file);
        event["transcriptArchived"] = json!(true);
    }
    if let Some(next) = next_session_id {
        event["nextSessionId"] = json!(next);
        if let Some(key) = session_key {
            event["nextSessionKey"] = json!(key);
        }
    }
    event
}

/// Fires `session_end` (reason `idle`) on `engine` for every session a retention sweep
/// removed. A failed hook is logged (the wrapper quarantines a failing engine).
pub async fn fire_swept_session_ends(
    engine: &QuarantineEngine,
    agent_id: &str,
    report: &SweepReport,
) {
    if !engine.hooks().iter().any(|h| h == HOOK_SESSION_END) {
        return;
    }
    for swept in &report.swept_sessions {
        let call = HookCall {
            event: session_end_event(
                &swept.session_id,
                None,
                swept.transcript_entries,
                SessionEndReason::Idle,
                None,
                None,
            ),
            ctx: json!({"agentId": agent_id, "sessionId": swept.session_id}),
        };
        if let Err(e) = engine.call_hook(HOOK_SESSION_END, call).await {
            tracing::warn!(error = %e, session = %swept.session_id, "session_end hook failed");
        }
    }
}

impl Harness {
    /// The slash commands the serving engine registered (none once it is quarantined).
    pub fn commands(&self) -> Vec<EngineCommand> {
        self.engine.commands()
    }

    /// Runs the engine command `name` (without its `/`) with `args` in the session
    /// `session_key` (`commands/call`) and returns its reply. A command the engine does not
    /// list is an error naming the commands it has.
    pub async fn run_command(
        &self,
        session_key: &str,
        name: &str,
        args: Option<&str>,
    ) -> Result<CommandReply, HarnessError> {
        let name = name.strip_prefix('/').unwrap_or(name);
        let engine_error = |source| HarnessError::Engine {
            operation: "commands/call",
            session: session_key.to_string(),
            source,
        };
        if !self.commands().iter().any(|c| c.name == name) {
            let known: Vec<String> = self
                .commands()
                .iter()
                .map(|c| format!("/{}", c.name))
                .collect();
            return Err(engine_error(crate::contract::EngineError::failed(
                crate::contract::EngineMethod::CallCommand,
                format!(
                    "context engine \"{}\" has no command /{name} (it has: {})",
                    self.engine.active_engine_id(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )));
        }
        let session_id = self.session_id(session_key)?;
        let params = CommandCallParams {
            name: name.to_string(),
            args: args
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_string),
            session_id: Some(session_id),
            session_key: Some(session_key.to_string()),
        };
        self.engine.call_command(params).await.map_err(engine_error)
    }

    /// Whether any turn left a trace of `session_key` in the store: a session id, a thread
    /// binding or a transcript. `ctxbridge reset` and `compact` refuse a session without one
    /// rather than "resetting" or "compacting" nothing with exit 0.
    pub fn has_session(&self, session_key: &str) -> Result<bool, HarnessError> {
        let store = self.store_for(session_key);
        if store
            .load_document(SESSION_NAMESPACE, session_key)
            .map_err(store_err("load session id"))?
            .is_some()
        {
            return Ok(true);
        }
        if store
            .load_binding(&self.binding_key_for(session_key))
            .map_err(store_err("load binding"))?
            .is_some()
        {
            return Ok(true);
        }
        Ok(!store
            .load_transcript(session_key)
            .map_err(store_err("load transcript"))?
            .is_empty())
    }

    /// Resets a session (`ctxbridge reset`, `/reset`): fires `before_reset {sessionFile,
    /// messages, reason: "reset"}`, archives the session file to `<file>.reset.<timestamp>`,
    /// fires `session_end {…, reason: "reset", nextSessionId}`, then drops the thread binding
    /// and the transcript and names a new session id for the key. The next turn bootstraps the
    /// new session on a new thread. Hook failures are logged; the reset goes on.
    pub async fn reset_session(&self, session_key: &str) -> Result<ResetReport, HarnessError> {
        let key = self.binding_key_for(session_key);
        let mut guard = self.lock_session(session_key, &key).await?;
        // What the last turn learnt of the session may not hold after this: the next turn reads
        // the store again.
        guard.take_facts();
        let result = self.reset_locked(&guard, session_key, &key).await;
        if let Err(e) = guard.release().await {
            tracing::warn!(error = %e, "could not release the session lease; it will expire");
        }
        result
    }

    async fn reset_locked(
        &self,
        guard: &SessionGuard,
        session_key: &str,
        key: &str,
    ) -> Result<ResetReport, HarnessError> {
        let session_id = self.session_id(session_key)?;
        // The session's queued commits go to the engine before it hears of the reset; what
        // still cannot be delivered moves to the next session id below.
        self.flush_outbox(session_key, &session_id).await;
        let store = guard.store();
        let messages = store
            .load_transcript(&session_id)
            .map_err(store_err("load transcript"))?
            .into_iter()
            .map(|e| e.message)
            .collect::<Vec<_>>();
        let hooks = self.engine.hooks();
        let session_file = self.session_file_path(&session_id).filter(|p| p.exists());
        let ctx = self.hook_ctx(session_key, &session_id);
        if hooks.iter().any(|h| h == HOOK_BEFORE_RESET) {
            let mut event = json!({"messages": messages, "reason": "reset"});
            if let Some(file) = &session_file {
                event["sessionFile"] = json!(file.display().to_string());
            }
            let call = HookCall {
                event,
                ctx: ctx.clone(),
            };
            if let Err(e) = self.engine.call_hook(HOOK_BEFORE_RESET, call).await {
                tracing::warn!(error = %e, "before_reset hook failed");
            }
        }
        // OpenClaw archives the transcript file on reset rather than deleting it.
        let archived = session_file.and_then(|file| {
            let stamp = iso_timestamp(now_ms()).replace(':', "-");
            let target = file.with_file_name(format!(
                "{}.reset.{stamp}",
                file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
            ));
            match std::fs::rename(&file, &target) {
                Ok(()) => Some(target.display().to_string()),
                Err(error) => {
                    tracing::warn!(file = %file.display(), %error, "cannot archive the session file");
                    None
                }
            }
        });
        let next_session_id = format!(
            "{session_key}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        if hooks.iter().any(|h| h == HOOK_SESSION_END) {
            let call = HookCall {
                event: session_end_event(
                    &session_id,
                    Some(session_key),
                    messages.len() as u64,
                    SessionEndReason::Reset,
                    archived.as_deref(),
                    Some(&next_session_id),
                ),
                ctx,
            };
            if let Err(e) = self.engine.call_hook(HOOK_SESSION_END, call).await {
                tracing::warn!(error = %e, "session_end hook failed");
            }
        }
        self.clear_binding(guard, key).await?;
        // The next id first: from here on the key's turns run in the next session, which
        // then holds the old session's undelivered commits (retried before its first turn).
        store
            .save_document(SESSION_NAMESPACE, session_key, &next_session_id)
            .map_err(store_err("record the reset session's next id"))?;
        let undelivered = store
            .move_outbox(&session_id, &next_session_id)
            .map_err(store_err("carry undelivered commits to the next session"))?;
        if undelivered > 0 {
            tracing::warn!(session = session_key, from = %session_id, to = %next_session_id, commits = undelivered, "undelivered commits of the reset session are retried before the next session's turns");
        }
        store
            .delete_session(&session_id)
            .map_err(store_err("delete session"))?;
        self.transcripts.invalidate(&session_id).await;
        tracing::info!(session = session_key, from = %session_id, to = %next_session_id, "session reset");
        Ok(ResetReport {
            session_key: session_key.to_string(),
            session_id,
            next_session_id,
            message_count: messages.len(),
            archived_session_file: archived,
        })
    }

    /// A listener for the retention sweep that fires `session_end` (reason `idle`) on this
    /// harness's engine for each swept session.
    pub fn sweep_listener(&self) -> crate::store::SweepListener {
        let engine: Arc<QuarantineEngine> = self.engine.clone();
        let agent_id = self.cfg.agent_id.clone();
        Arc::new(move |report: SweepReport| {
            let engine = engine.clone();
            let agent_id = agent_id.clone();
            Box::pin(async move { fire_swept_session_ends(&engine, &agent_id, &report).await })
        })
    }
}
