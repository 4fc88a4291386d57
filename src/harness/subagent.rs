//! Subagent hooks (docs/architecture.md#subagents).

use super::{Harness, HarnessError, SubagentSpawn};
use crate::contract::{
    ContextEngine, EngineMethod, HostOperation, OnSubagentEndedParams, PrepareSubagentSpawnParams,
    RollbackSubagentSpawnParams, SubagentContextMode, SubagentEndReason,
};
use crate::host::requirements::check_host_requirements;

impl Harness {
    /// Spawns a subagent (docs/architecture.md#subagents): `prepareSubagentSpawn` (skipped for a light isolated spawn),
    /// then `launch`; if the launch fails after a successful prepare, the rollback runs.
    pub async fn spawn_subagent<T, E, F, Fut>(
        &self,
        spawn: SubagentSpawn,
        launch: F,
    ) -> Result<T, HarnessError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
        E: std::fmt::Display,
    {
        let info = self.engine.info();
        check_host_requirements(
            &info,
            HostOperation::SubagentSpawn,
            self.backend.label(),
            &self.backend.capabilities(),
        )?;
        let skip = spawn.light_context && spawn.context_mode == SubagentContextMode::Isolated;
        let mut rollback = None;
        if !skip
            && self
                .engine
                .methods()
                .contains(EngineMethod::PrepareSubagentSpawn)
        {
            let prepared = self
                .engine
                .prepare_subagent_spawn(PrepareSubagentSpawnParams {
                    parent_session_key: spawn.parent_session_key.clone(),
                    child_session_key: spawn.child_session_key.clone(),
                    context_mode: spawn.context_mode,
                    parent_session_id: Some(self.session_id(&spawn.parent_session_key)?),
                    child_session_id: Some(spawn.child_session_key.clone()),
                    ttl_ms: spawn.ttl_ms,
                    extra: Default::default(),
                })
                .await
                .map_err(|source| HarnessError::Engine {
                    operation: "prepareSubagentSpawn",
                    session: spawn.parent_session_key.clone(),
                    source,
                })?;
            rollback = prepared.rollback_id;
        }
        match launch().await {
            Ok(v) => Ok(v),
            Err(e) => {
                if let Some(rollback_id) = rollback {
                    if self
                        .engine
                        .methods()
                        .contains(EngineMethod::RollbackSubagentSpawn)
                    {
                        if let Err(err) = self
                            .engine
                            .rollback_subagent_spawn(RollbackSubagentSpawnParams { rollback_id })
                            .await
                        {
                            tracing::warn!(error = %err, "subagent spawn rollback failed");
                        }
                    }
                }
                Err(HarnessError::SubagentLaunch(e.to_string()))
            }
        }
    }

    /// Tells the engine a subagent ended.
    pub async fn end_subagent(&self, child_session_key: &str, reason: SubagentEndReason) {
        if self
            .engine
            .methods()
            .contains(EngineMethod::OnSubagentEnded)
        {
            if let Err(e) = self
                .engine
                .on_subagent_ended(OnSubagentEndedParams {
                    child_session_key: child_session_key.to_string(),
                    reason,
                })
                .await
            {
                tracing::warn!(error = %e, "onSubagentEnded failed");
            }
        }
    }
}
