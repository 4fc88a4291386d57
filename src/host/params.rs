//! Accepted host params (docs/architecture.md#host-added-parameters-acceptedhostparams).
//!
//! The host adds `sessionKey`, `prompt`, `runtimeSettings`, `sessionTarget`, `runtimeContext` and
//! `abortSignal` to the parameters it passes. An engine that declares `acceptedHostParams` gets
//! only the listed ones (an empty list: none, except that `compact` always keeps its
//! cancellation); without the declaration it gets all of them. Every other key always passes.
//! For out-of-process engines the removed keys are simply absent from the JSON params, since
//! the params types skip `None` fields.

use std::fmt;

use crate::contract::{
    AfterTurnParams, AssembleParams, BootstrapParams, CommitTurnParams, CompactParams, EngineInfo,
    IngestBatchParams, IngestParams, MaintainParams, OnSubagentEndedParams,
    PrepareSubagentSpawnParams, RollbackSubagentSpawnParams,
};

/// A key the host adds to an engine's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostParamKey {
    SessionKey,
    Prompt,
    RuntimeSettings,
    SessionTarget,
    RuntimeContext,
    AbortSignal,
}

impl HostParamKey {
    pub const ALL: [HostParamKey; 6] = [
        HostParamKey::SessionKey,
        HostParamKey::Prompt,
        HostParamKey::RuntimeSettings,
        HostParamKey::SessionTarget,
        HostParamKey::RuntimeContext,
        HostParamKey::AbortSignal,
    ];

    /// The key as named in `acceptedHostParams`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostParamKey::SessionKey => "sessionKey",
            HostParamKey::Prompt => "prompt",
            HostParamKey::RuntimeSettings => "runtimeSettings",
            HostParamKey::SessionTarget => "sessionTarget",
            HostParamKey::RuntimeContext => "runtimeContext",
            HostParamKey::AbortSignal => "abortSignal",
        }
    }
}

impl fmt::Display for HostParamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which host keys an engine accepts: `info.acceptedHostParams`, interpreted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedHostParams(Option<Vec<String>>);

impl AcceptedHostParams {
    /// Every host key passes (no declaration).
    pub fn all() -> Self {
        AcceptedHostParams(None)
    }

    /// Exactly the listed keys pass.
    pub fn only<S: Into<String>>(keys: impl IntoIterator<Item = S>) -> Self {
        AcceptedHostParams(Some(keys.into_iter().map(Into::into).collect()))
    }

    /// The engine's declaration.
    pub fn from_info(info: &EngineInfo) -> Self {
        AcceptedHostParams(info.accepted_host_params.clone())
    }

    pub fn accepts(&self, key: HostParamKey) -> bool {
        match &self.0 {
            None => true,
            Some(list) => list.iter().any(|k| k == key.as_str()),
        }
    }
}

/// Parameters that carry host keys. `retain_host_params` drops the host keys `accepted` does
/// not list.
pub trait HostParams {
    /// The host keys this method's parameters can carry.
    const HOST_KEYS: &'static [HostParamKey];

    fn retain_host_params(&mut self, accepted: &AcceptedHostParams);
}

/// Returns `params` with only the host keys `info` accepts (docs/architecture.md#host-added-parameters-acceptedhostparams).
pub fn project_host_params<P: HostParams>(mut params: P, info: &EngineInfo) -> P {
    params.retain_host_params(&AcceptedHostParams::from_info(info));
    params
}

fn keep<T>(field: &mut Option<T>, accepted: &AcceptedHostParams, key: HostParamKey) {
    if !accepted.accepts(key) {
        *field = None;
    }
}

/// Implements [`HostParams`] for a params type from its host-key fields. Cancellation
/// (`abortSignal`) is listed for `compact` but never stripped: `compact` always keeps it.
macro_rules! host_params {
    ($(#[$doc:meta])* $ty:ty { $($field:ident => $key:ident),* $(,)? } $(keeps $kept:ident)?) => {
        $(#[$doc])*
        impl HostParams for $ty {
            const HOST_KEYS: &'static [HostParamKey] =
                &[$(HostParamKey::$key,)* $(HostParamKey::$kept)?];
            #[allow(unused_variables)]
            fn retain_host_params(&mut self, accepted: &AcceptedHostParams) {
                $(keep(&mut self.$field, accepted, HostParamKey::$key);)*
            }
        }
    };
}

host_params!(IngestParams { session_key => SessionKey });
host_params!(IngestBatchParams { session_key => SessionKey });
host_params!(BootstrapParams {
    session_key => SessionKey,
    session_target => SessionTarget,
    runtime_settings => RuntimeSettings,
    runtime_context => RuntimeContext,
});
host_params!(AssembleParams {
    session_key => SessionKey,
    prompt => Prompt,
    runtime_settings => RuntimeSettings,
    runtime_context => RuntimeContext,
});
host_params!(CompactParams {
    session_key => SessionKey,
    session_target => SessionTarget,
    runtime_settings => RuntimeSettings,
    runtime_context => RuntimeContext,
} keeps AbortSignal);
host_params!(AfterTurnParams {
    session_key => SessionKey,
    session_target => SessionTarget,
    runtime_settings => RuntimeSettings,
    runtime_context => RuntimeContext,
});
host_params!(MaintainParams {
    session_key => SessionKey,
    session_target => SessionTarget,
    runtime_settings => RuntimeSettings,
    runtime_context => RuntimeContext,
});
host_params!(CommitTurnParams {
    session_key => SessionKey,
    session_target => SessionTarget,
    runtime_settings => RuntimeSettings,
    runtime_context => RuntimeContext,
});
host_params!(
    /// Subagent hooks carry only their own keys (`parentSessionKey`, `childSessionKey`, …),
    /// none of which is a host key.
    PrepareSubagentSpawnParams {}
);
host_params!(RollbackSubagentSpawnParams {});
host_params!(OnSubagentEndedParams {});

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::{json, Value};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::contract::{
        AgentMessage, MaintainReason, RuntimeContext, RuntimeFacts, SessionTarget,
    };
    use crate::runtime_settings::RuntimeSettingsBuilder;

    fn info(accepted: Option<&[&str]>) -> EngineInfo {
        let mut info = EngineInfo::new("e", "E");
        info.accepted_host_params = accepted.map(|a| a.iter().map(|s| s.to_string()).collect());
        info
    }

    fn target() -> SessionTarget {
        SessionTarget {
            agent_id: Some("main".into()),
            session_key: Some("k".into()),
            ..Default::default()
        }
    }

    fn context() -> RuntimeContext {
        RuntimeContext {
            facts: RuntimeFacts {
                token_budget: Some(10),
                ..Default::default()
            },
            callbacks: None,
        }
    }

    fn assemble() -> AssembleParams {
        AssembleParams {
            session_id: "s".into(),
            session_key: Some("k".into()),
            messages: vec![AgentMessage::user("hi")].into(),
            token_budget: Some(100),
            available_tools: Some(vec!["shell".into()]),
            citations_mode: Some("on".into()),
            model: Some("m".into()),
            prompt: Some("hi".into()),
            runtime_settings: Some(RuntimeSettingsBuilder::new().build()),
            runtime_context: Some(context()),
        }
    }

    fn compact() -> CompactParams {
        CompactParams {
            session_id: "s".into(),
            session_key: Some("k".into()),
            session_target: Some(target()),
            token_budget: Some(100),
            force: Some(true),
            runtime_settings: Some(RuntimeSettingsBuilder::new().build()),
            runtime_context: Some(context()),
            abort: Some(CancellationToken::new()),
            ..Default::default()
        }
    }

    fn keys(v: &impl serde::Serialize) -> Vec<String> {
        let Value::Object(map) = serde_json::to_value(v).unwrap() else {
            panic!("not an object")
        };
        map.keys().cloned().collect()
    }

    /// Table: declaration → the JSON keys `assemble` params keep. Non-host keys always pass.
    #[test]
    fn assemble_projection_table() {
        let cases: &[(Option<&[&str]>, &[&str])] = &[
            (
                None,
                &[
                    "availableTools",
                    "citationsMode",
                    "messages",
                    "model",
                    "prompt",
                    "runtimeContext",
                    "runtimeSettings",
                    "sessionId",
                    "sessionKey",
                    "tokenBudget",
                ],
            ),
            (
                Some(&[]),
                &[
                    "availableTools",
                    "citationsMode",
                    "messages",
                    "model",
                    "sessionId",
                    "tokenBudget",
                ],
            ),
            (
                Some(&["prompt", "runtimeSettings", "unknownKey"]),
                &[
                    "availableTools",
                    "citationsMode",
                    "messages",
                    "model",
                    "prompt",
                    "runtimeSettings",
                    "sessionId",
                    "tokenBudget",
                ],
            ),
        ];
        for (accepted, expected) in cases {
            let projected = project_host_params(assemble(), &info(*accepted));
            assert_eq!(keys(&projected), *expected, "{accepted:?}");
        }
    }

    /// `compact` keeps its cancellation under `[]` and a partial list, and drops the others.
    #[test]
    fn compact_keeps_cancellation() {
        let none = project_host_params(compact(), &info(Some(&[])));
        assert!(none.abort.is_some(), "abort survives []");
        assert_eq!(none.session_key, None);
        assert_eq!(none.session_target, None);
        assert_eq!(none.runtime_settings, None);
        assert!(none.runtime_context.is_none());
        assert_eq!(none.token_budget, Some(100));
        assert_eq!(none.force, Some(true));

        let partial = project_host_params(compact(), &info(Some(&["sessionTarget"])));
        assert!(partial.abort.is_some());
        assert_eq!(partial.session_target, Some(target()));
        assert_eq!(partial.session_key, None);

        let all = project_host_params(compact(), &info(None));
        assert_eq!(all, compact());
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            json!({"sessionId": "s", "tokenBudget": 100, "force": true})
        );
    }

    /// Lifecycle params with session keys and runtime facts: absent keeps all, [] keeps none,
    /// a partial list keeps exactly the listed ones.
    #[test]
    fn maintain_and_bootstrap_projection() {
        let maintain = MaintainParams {
            session_id: "s".into(),
            session_key: Some("k".into()),
            session_file: None,
            reason: MaintainReason::Turn,
            session_target: Some(target()),
            runtime_settings: Some(RuntimeSettingsBuilder::new().build()),
            runtime_context: Some(context()),
        };
        assert_eq!(project_host_params(maintain.clone(), &info(None)), maintain);
        let p = project_host_params(maintain.clone(), &info(Some(&[])));
        assert_eq!(keys(&p), vec!["reason", "sessionId"]);
        let p = project_host_params(maintain, &info(Some(&["runtimeContext", "sessionKey"])));
        assert_eq!(
            keys(&p),
            vec!["reason", "runtimeContext", "sessionId", "sessionKey"]
        );

        let bootstrap = BootstrapParams {
            session_id: "s".into(),
            session_key: Some("k".into()),
            session_file: Some("/state/sessions/s.jsonl".into()),
            session_target: Some(target()),
            runtime_settings: None,
            runtime_context: Some(context()),
        };
        let p = project_host_params(bootstrap, &info(Some(&["sessionTarget"])));
        // `sessionFile` is not a host-added key: it always passes.
        assert_eq!(keys(&p), vec!["sessionFile", "sessionId", "sessionTarget"]);
    }

    /// Ingest drops `sessionKey` only when it is not accepted.
    #[test]
    fn ingest_projection() {
        let params = IngestParams {
            session_id: "s".into(),
            session_key: Some("k".into()),
            message: Some(AgentMessage::user("x")),
            is_heartbeat: Some(false),
        };
        assert_eq!(
            project_host_params(params.clone(), &info(Some(&["sessionKey"]))).session_key,
            Some("k".into())
        );
        let p = project_host_params(params, &info(Some(&["prompt"])));
        assert_eq!(keys(&p), vec!["isHeartbeat", "message", "sessionId"]);
    }

    /// Every host key the params types name is one of the documented six.
    #[test]
    fn host_keys_are_the_spec_set() {
        let names: Vec<&str> = HostParamKey::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "sessionKey",
                "prompt",
                "runtimeSettings",
                "sessionTarget",
                "runtimeContext",
                "abortSignal"
            ]
        );
        assert!(CompactParams::HOST_KEYS.contains(&HostParamKey::AbortSignal));
        assert!(AssembleParams::HOST_KEYS.contains(&HostParamKey::Prompt));
    }
}
