//! [`ContextEngine`] for [`QuarantineEngine`]: every lifecycle method guarded, with legacy's
//! answer (or the error, for fail-closed methods) when the engine fails.

use std::panic::AssertUnwindSafe;

use async_trait::async_trait;
use futures::FutureExt;

use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommandCallParams, CommandReply, CommitTurnParams, CommitTurnResult, CompactParams,
    CompactResult, ContextEngine, EngineCommand, EngineError, EngineInfo, EngineMethod, EngineTool,
    HookCall, IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, MethodSet, OnSubagentEndedParams, PrepareSubagentSpawnParams,
    PrepareSubagentSpawnResult, RollbackSubagentSpawnParams, ToolCallParams, ToolCallResult,
};
use crate::engines::LegacyEngine;

use super::engine::{panic_message, route, Failure, QuarantineEngine};
use super::record::FailedOperation;
use super::validate::{
    validate_assemble_result, validate_compact_result, validate_ingest_batch_result,
    validate_tool_call_result, CallerSession,
};

#[async_trait]
impl ContextEngine for QuarantineEngine {
    /// The wrapped engine's info, or legacy's after quarantine.
    fn info(&self) -> EngineInfo {
        if self.is_legacy() {
            return self.inner.info();
        }
        if self.is_quarantined() {
            return LegacyEngine::engine_info();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.info())) {
            Ok(info) => info,
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::Info),
                    format!("panicked: {}", panic_message(payload.as_ref())),
                );
                LegacyEngine::engine_info()
            }
        }
    }

    /// The wrapped engine's members unchanged (the host does not call the others), or
    /// legacy's after quarantine.
    fn methods(&self) -> MethodSet {
        if self.is_legacy() {
            return self.inner.methods();
        }
        if self.is_quarantined() {
            return self.legacy.methods();
        }
        let methods = self.inner_methods();
        if self.is_quarantined() {
            return self.legacy.methods();
        }
        methods
    }

    async fn ingest(&self, params: IngestParams) -> Result<IngestResult, EngineError> {
        if self.is_legacy() {
            return self.inner.ingest(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let outcome = self
                .guarded(
                    EngineMethod::Ingest,
                    || self.inner.ingest(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            match route(outcome)? {
                Some(value) => return Ok(value),
                None => return self.legacy.ingest(retry).await,
            }
        }
        self.legacy.ingest(params).await
    }

    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        if self.is_legacy() {
            return self.inner.assemble(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let outcome = self
                .guarded(
                    EngineMethod::Assemble,
                    || self.inner.assemble(params),
                    None,
                    validate_assemble_result,
                )
                .await;
            match route(outcome)? {
                Some(value) => return Ok(value),
                None => return self.legacy.assemble(retry).await,
            }
        }
        self.legacy.assemble(params).await
    }

    /// Fails closed: the failing call's error goes to the caller.
    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError> {
        if self.is_legacy() {
            return self.inner.compact(params).await;
        }
        if self.is_quarantined() {
            return self.legacy.compact(params).await;
        }
        let caller = CallerSession::of_compact(&params);
        let abort = params.abort.clone();
        let outcome = self
            .guarded(
                EngineMethod::Compact,
                || self.inner.compact(params),
                abort.as_ref(),
                |result| validate_compact_result(result, &caller),
            )
            .await;
        match outcome {
            Ok(value) => Ok(value),
            Err(Failure::PassThrough(error) | Failure::Quarantined(error)) => Err(error),
        }
    }

    async fn bootstrap(&self, params: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        if self.is_legacy() {
            return self.inner.bootstrap(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::Bootstrap,
                    || self.inner.bootstrap(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            if let Some(value) = route(outcome)? {
                return Ok(value);
            }
        }
        Ok(Self::legacy_bootstrap())
    }

    async fn maintain(&self, params: MaintainParams) -> Result<MaintainResult, EngineError> {
        if self.is_legacy() {
            return self.inner.maintain(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::Maintain,
                    || self.inner.maintain(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            if let Some(value) = route(outcome)? {
                return Ok(value);
            }
        }
        Ok(Self::legacy_maintain())
    }

    async fn ingest_batch(
        &self,
        params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        if self.is_legacy() {
            return self.inner.ingest_batch(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let count = params.messages.len();
            let outcome = self
                .guarded(
                    EngineMethod::IngestBatch,
                    || self.inner.ingest_batch(params),
                    None,
                    |result| validate_ingest_batch_result(result, count),
                )
                .await;
            match route(outcome)? {
                Some(value) => return Ok(value),
                None => return Ok(self.legacy_ingest_batch(retry).await),
            }
        }
        Ok(self.legacy_ingest_batch(params).await)
    }

    async fn after_turn(&self, params: AfterTurnParams) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.after_turn(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let outcome = self
                .guarded(
                    EngineMethod::AfterTurn,
                    || self.inner.after_turn(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            match route(outcome)? {
                Some(()) => return Ok(()),
                None => return self.legacy.after_turn(retry).await,
            }
        }
        self.legacy.after_turn(params).await
    }

    /// Legacy keeps every turn in the host transcript, so on legacy a turn is committed: the
    /// outbox row of a quarantined engine is settled rather than retried against legacy.
    async fn commit_turn(&self, params: CommitTurnParams) -> Result<CommitTurnResult, EngineError> {
        if self.is_legacy() {
            return self.inner.commit_turn(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::CommitTurn,
                    || self.inner.commit_turn(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            if let Some(value) = route(outcome)? {
                return Ok(value);
            }
        }
        Ok(CommitTurnResult::committed())
    }

    /// Fails closed: the failing call's error goes to the caller (and the spawn fails). After
    /// quarantine legacy prepares nothing.
    async fn prepare_subagent_spawn(
        &self,
        params: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        if self.is_legacy() {
            return self.inner.prepare_subagent_spawn(params).await;
        }
        if self.is_quarantined() {
            return Ok(PrepareSubagentSpawnResult::default());
        }
        let outcome = self
            .guarded(
                EngineMethod::PrepareSubagentSpawn,
                || self.inner.prepare_subagent_spawn(params),
                None,
                |_| Ok(()),
            )
            .await;
        match outcome {
            Ok(value) => Ok(value),
            Err(Failure::PassThrough(error) | Failure::Quarantined(error)) => Err(error),
        }
    }

    async fn rollback_subagent_spawn(
        &self,
        params: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.rollback_subagent_spawn(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::RollbackSubagentSpawn,
                    || self.inner.rollback_subagent_spawn(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            route(outcome)?;
        }
        Ok(())
    }

    async fn on_subagent_ended(&self, params: OnSubagentEndedParams) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.on_subagent_ended(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::OnSubagentEnded,
                    || self.inner.on_subagent_ended(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            route(outcome)?;
        }
        Ok(())
    }

    /// The wrapped engine's tools; none once quarantined (legacy registers no tools).
    fn tools(&self) -> Vec<EngineTool> {
        if self.is_legacy() {
            return self.inner.tools();
        }
        if self.is_quarantined() {
            return Vec::new();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.tools())) {
            Ok(tools) if !self.is_quarantined() => tools,
            Ok(_) => Vec::new(),
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::Info),
                    format!("tools() panicked: {}", panic_message(payload.as_ref())),
                );
                Vec::new()
            }
        }
    }

    /// The wrapped engine's registrations its host does not offer; none once quarantined. A
    /// list the engine reported at start-up, read without calling into it: nothing to isolate.
    fn unoffered(&self) -> Vec<String> {
        if self.is_legacy() || self.is_quarantined() {
            return Vec::new();
        }
        self.inner.unoffered()
    }

    /// The wrapped engine's hooks; none once quarantined (legacy listens to none).
    fn hooks(&self) -> Vec<String> {
        if self.is_legacy() || self.is_quarantined() {
            return Vec::new();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.hooks())) {
            Ok(hooks) if !self.is_quarantined() => hooks,
            Ok(_) => Vec::new(),
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::Hook),
                    format!("hooks() panicked: {}", panic_message(payload.as_ref())),
                );
                Vec::new()
            }
        }
    }

    /// Runs a hook the engine listens to (a hook it does not list answers `null` unsent). A
    /// failure (error, panic, timeout, dead process,
    /// malformed result) is a lifecycle failure: the engine is quarantined and the call
    /// answers `null` (legacy has no hooks), as it does after quarantine.
    async fn call_hook(
        &self,
        name: &str,
        call: HookCall,
    ) -> Result<serde_json::Value, EngineError> {
        if self.is_legacy() || self.is_quarantined() || !self.hooks().iter().any(|h| h == name) {
            return Ok(serde_json::Value::Null);
        }
        let outcome = self
            .guarded(
                EngineMethod::Hook,
                || self.inner.call_hook(name, call),
                None,
                |_| Ok(()),
            )
            .await;
        Ok(route(outcome)?.unwrap_or(serde_json::Value::Null))
    }

    /// Fires a hook the engine listens to; a failure to send quarantines it.
    async fn notify_hook(&self, name: &str, call: HookCall) -> Result<(), EngineError> {
        if self.is_legacy() || self.is_quarantined() || !self.hooks().iter().any(|h| h == name) {
            return Ok(());
        }
        let outcome = self
            .guarded(
                EngineMethod::Hook,
                || self.inner.notify_hook(name, call),
                None,
                |_| Ok(()),
            )
            .await;
        route(outcome)?;
        Ok(())
    }

    /// The wrapped engine's commands; none once quarantined (legacy registers none).
    fn commands(&self) -> Vec<EngineCommand> {
        if self.is_legacy() || self.is_quarantined() {
            return Vec::new();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.commands())) {
            Ok(commands) => commands,
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::CallCommand),
                    format!("commands() panicked: {}", panic_message(payload.as_ref())),
                );
                Vec::new()
            }
        }
    }

    /// Runs a command the engine registered. A command is run by the user, not by a turn: its
    /// failure (error, timeout, malformed reply, panic) is the user's answer and does not
    /// quarantine the engine. A command the engine does not list, or any command once the
    /// engine is quarantined, is refused unsent.
    async fn call_command(&self, params: CommandCallParams) -> Result<CommandReply, EngineError> {
        let method = EngineMethod::CallCommand;
        if self.is_legacy() || self.is_quarantined() {
            return Err(EngineError::failed(
                method,
                format!(
                    "/{} is not available: context engine \"{}\" is quarantined",
                    params.name, self.engine_id
                ),
            ));
        }
        if !self.commands().iter().any(|c| c.name == params.name) {
            return Err(EngineError::NotImplemented { method });
        }
        match AssertUnwindSafe(self.inner.call_command(params))
            .catch_unwind()
            .await
        {
            Ok(result) => result,
            Err(payload) => Err(EngineError::Panicked {
                method,
                message: panic_message(payload.as_ref()),
            }),
        }
    }

    /// Runs an engine tool. The caller (the backend's tool loop) always gets an answer for
    /// the model: a failure of the engine (error, panic, timeout, dead process, malformed
    /// result) quarantines it and comes back as an `is_error` result, as does a call after
    /// quarantine or of a tool the engine does not list (which is not sent to the engine: a
    /// model's made-up name must not quarantine it). `Err` only for a caller's cancellation
    /// or an engine without tools (a host bug).
    async fn call_tool(&self, params: ToolCallParams) -> Result<ToolCallResult, EngineError> {
        if self.is_legacy() {
            return self.inner.call_tool(params).await;
        }
        let name = params.name.clone();
        if self.is_quarantined() {
            return Ok(ToolCallResult::error(format!(
                "tool \"{name}\" is not available: context engine \"{}\" is quarantined",
                self.engine_id
            )));
        }
        if self.inner_methods().contains(EngineMethod::CallTool)
            && !self.tools().iter().any(|tool| tool.name == name)
        {
            return Ok(ToolCallResult::error(format!(
                "unknown tool \"{name}\": context engine \"{}\" has no such tool",
                self.engine_id
            )));
        }
        let outcome = self
            .guarded(
                EngineMethod::CallTool,
                || self.inner.call_tool(params),
                None,
                validate_tool_call_result,
            )
            .await;
        match outcome {
            Ok(result) => Ok(result),
            Err(Failure::PassThrough(error)) => Err(error),
            Err(Failure::Quarantined(error)) => Ok(ToolCallResult::error(format!(
                "tool \"{name}\" failed: {error}"
            ))),
        }
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.dispose().await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::Dispose,
                    || self.inner.dispose(),
                    None,
                    |_| Ok(()),
                )
                .await;
            if route(outcome)?.is_some() {
                return Ok(());
            }
        }
        self.legacy.dispose().await
    }
}
