//! Where Codex keeps its state (login, `config.toml`, threads) for ctxbridge: as Codex itself
//! decides, `$CODEX_HOME`, else `~/.codex`, unless `backend.codexHome` names another. A user
//! logged in through the Codex CLI is then logged in here too.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::Config;

/// Why the Codex home is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodexHomeSource {
    /// `backend.codexHome`.
    Configured,
    /// The `CODEX_HOME` environment variable.
    Environment,
    /// `~/.codex`, Codex's own default.
    UserHome,
    /// No home directory is known: beside the state store.
    StateDir,
}

impl CodexHomeSource {
    /// How doctor names it.
    pub fn as_str(self) -> &'static str {
        match self {
            CodexHomeSource::Configured => "backend.codexHome",
            CodexHomeSource::Environment => "CODEX_HOME",
            CodexHomeSource::UserHome => "~/.codex, Codex's default",
            CodexHomeSource::StateDir => "beside the state store: no home directory is known",
        }
    }
}

/// The Codex home ctxbridge runs Codex with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodexHome {
    pub path: PathBuf,
    pub source: CodexHomeSource,
}

impl CodexHome {
    /// Whether Codex has a login there (its `auth.json`).
    pub fn has_login(&self) -> bool {
        self.path.join("auth.json").is_file()
    }
}

/// The Codex home from what decides it: `backend.codexHome`, the `CODEX_HOME` variable, the
/// user's home directory and the state directory (pure).
pub fn resolve_codex_home(
    configured: Option<&Path>,
    codex_home_var: Option<OsString>,
    user_home: Option<PathBuf>,
    state_dir: &Path,
) -> CodexHome {
    let (path, source) = match (
        configured,
        codex_home_var.filter(|v| !v.is_empty()),
        user_home,
    ) {
        (Some(path), _, _) => (path.to_path_buf(), CodexHomeSource::Configured),
        (None, Some(var), _) => (PathBuf::from(var), CodexHomeSource::Environment),
        (None, None, Some(home)) => (home.join(".codex"), CodexHomeSource::UserHome),
        (None, None, None) => (state_dir.join("codex-home"), CodexHomeSource::StateDir),
    };
    CodexHome { path, source }
}

/// The Codex home for `config` in this process's environment.
pub fn codex_home(config: &Config, configured: Option<&Path>) -> CodexHome {
    resolve_codex_home(
        configured,
        std::env::var_os("CODEX_HOME"),
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from),
        &config.state_dir(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `backend.codexHome` wins; then `CODEX_HOME` (an empty one counts as unset); then
    /// `~/.codex`; without a home directory, beside the state store.
    #[test]
    fn the_codex_home_is_decided_as_codex_decides_it() {
        let state = Path::new("/state");
        let home = || Some(PathBuf::from("/home/u"));
        let var = || Some(OsString::from("/env/codex"));
        let at = |h: CodexHome| (h.path, h.source);
        assert_eq!(
            at(resolve_codex_home(
                Some(Path::new("/conf")),
                var(),
                home(),
                state
            )),
            (PathBuf::from("/conf"), CodexHomeSource::Configured)
        );
        assert_eq!(
            at(resolve_codex_home(None, var(), home(), state)),
            (PathBuf::from("/env/codex"), CodexHomeSource::Environment)
        );
        assert_eq!(
            at(resolve_codex_home(
                None,
                Some(OsString::new()),
                home(),
                state
            )),
            (PathBuf::from("/home/u/.codex"), CodexHomeSource::UserHome)
        );
        assert_eq!(
            at(resolve_codex_home(None, None, None, state)),
            (
                PathBuf::from("/state/codex-home"),
                CodexHomeSource::StateDir
            )
        );
    }
}
