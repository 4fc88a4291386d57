//! Which Codex `doctor` finds: the program and home it runs with, and the version its
//! app-server reports.

use codex_app_server_client::CodexVersion;

use crate::backend::codex::CodexBackend;
use crate::backend::codex_home::CodexHome;
use crate::backend::ThreadedBackend;

/// Which Codex ctxbridge runs and where its state is.
#[derive(Debug, Clone, PartialEq)]
pub struct CodexSetup {
    /// The Codex home and why it is there.
    pub home: CodexHome,
    /// The home holds a login (`auth.json`).
    pub logged_in: bool,
    /// The program started (`None`: `backend.url`, nothing is started).
    pub binary: Option<String>,
}

/// What doctor learned from the Codex app-server's `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub enum CodexCheck {
    /// The version Codex reported.
    Version(CodexVersion),
    /// Codex answered, with a user agent that names no version.
    Unknown,
    /// The app-server did not start or did not answer `initialize`.
    Unreachable { error: String },
}

/// Spawns the app-server once, reads the version from `initialize`, and shuts it down.
pub async fn check_codex(backend: &CodexBackend) -> CodexCheck {
    let check = match backend.codex_version().await {
        Ok(Some(version)) => CodexCheck::Version(version),
        Ok(None) => CodexCheck::Unknown,
        Err(error) => CodexCheck::Unreachable {
            error: error.to_string(),
        },
    };
    backend.shutdown().await;
    check
}
