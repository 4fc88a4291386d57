//! Which configuration file a command reads: `--config FILE`, else the file `CTXBRIDGE_CONFIG`
//! names, else the nearest `ctxbridge.json5` from the working directory upward, else the
//! user's (`$XDG_CONFIG_HOME/ctxbridge/ctxbridge.json5`, `~/.config/ctxbridge/ctxbridge.json5`).
//! None found means the defaults. The rule is a pure function of its inputs ([`locate`]);
//! [`find`] feeds it the process's environment and file system.

use std::path::{Path, PathBuf};

use crate::config::DEFAULT_CONFIG_PATH;

/// The environment variable naming a configuration file.
pub const CONFIG_ENV: &str = "CTXBRIDGE_CONFIG";

/// How the configuration file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// `--config FILE`.
    Flag,
    /// `CTXBRIDGE_CONFIG`.
    Env,
    /// The nearest `ctxbridge.json5` from the working directory upward.
    Nearest,
    /// The user's configuration directory.
    UserDir,
}

impl ConfigOrigin {
    /// As doctor names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigOrigin::Flag => "--config",
            ConfigOrigin::Env => CONFIG_ENV,
            ConfigOrigin::Nearest => "the nearest ctxbridge.json5",
            ConfigOrigin::UserDir => "the user config directory",
        }
    }

    /// Whether the file was named by the user (it must then exist).
    pub fn is_explicit(self) -> bool {
        matches!(self, ConfigOrigin::Flag | ConfigOrigin::Env)
    }
}

/// A configuration file and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub origin: ConfigOrigin,
}

/// What [`locate`] decides from.
#[derive(Debug, Clone, Default)]
pub struct Inputs<'a> {
    /// `--config`.
    pub flag: Option<&'a Path>,
    /// `CTXBRIDGE_CONFIG` (set and not blank).
    pub env: Option<&'a Path>,
    /// The working directory.
    pub cwd: Option<&'a Path>,
    /// `$XDG_CONFIG_HOME`, else `~/.config`.
    pub config_home: Option<&'a Path>,
}

/// The configuration file the inputs select (see the module documentation); `is_file` says
/// whether a candidate exists. An explicit file is returned whether it exists or not (reading
/// it then reports it missing).
pub fn locate(inputs: &Inputs<'_>, is_file: impl Fn(&Path) -> bool) -> Option<ConfigFile> {
    if let Some(path) = inputs.flag {
        return Some(ConfigFile {
            path: path.to_path_buf(),
            origin: ConfigOrigin::Flag,
        });
    }
    if let Some(path) = inputs.env {
        return Some(ConfigFile {
            path: path.to_path_buf(),
            origin: ConfigOrigin::Env,
        });
    }
    if let Some(cwd) = inputs.cwd {
        for dir in cwd.ancestors() {
            let candidate = dir.join(DEFAULT_CONFIG_PATH);
            if is_file(&candidate) {
                // Found in the working directory itself: named as written there.
                let path = if dir == cwd {
                    PathBuf::from(DEFAULT_CONFIG_PATH)
                } else {
                    candidate
                };
                return Some(ConfigFile {
                    path,
                    origin: ConfigOrigin::Nearest,
                });
            }
        }
    }
    let user = inputs
        .config_home?
        .join("ctxbridge")
        .join(DEFAULT_CONFIG_PATH);
    is_file(&user).then_some(ConfigFile {
        path: user,
        origin: ConfigOrigin::UserDir,
    })
}

/// [`locate`] with this process's environment, working directory and file system.
pub fn find(flag: Option<&Path>) -> Option<ConfigFile> {
    let env = std::env::var_os(CONFIG_ENV)
        .filter(|value| !value.to_string_lossy().trim().is_empty())
        .map(PathBuf::from);
    let cwd = std::env::current_dir().ok();
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")));
    let inputs = Inputs {
        flag,
        env: env.as_deref(),
        cwd: cwd.as_deref(),
        config_home: config_home.as_deref(),
    };
    locate(&inputs, Path::is_file)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// --config wins over the variable, the variable over the files; the nearest file from the
    /// working directory upward wins over the user's; nothing found is None.
    #[test]
    fn the_first_source_that_names_a_file_wins() {
        let exists = |files: &'static [&'static str]| {
            move |p: &Path| files.iter().any(|f| Path::new(f) == p)
        };
        let cwd = Path::new("/w/project/sub");
        let home = Path::new("/home/u/.config");
        let all = Inputs {
            flag: Some(Path::new("flag.json5")),
            env: Some(Path::new("/env.json5")),
            cwd: Some(cwd),
            config_home: Some(home),
        };
        let files = exists(&[
            "/w/project/ctxbridge.json5",
            "/home/u/.config/ctxbridge/ctxbridge.json5",
        ]);
        assert_eq!(locate(&all, files).unwrap().origin, ConfigOrigin::Flag);
        let no_flag = Inputs {
            flag: None,
            ..all.clone()
        };
        assert_eq!(
            locate(&no_flag, files).unwrap(),
            ConfigFile {
                path: "/env.json5".into(),
                origin: ConfigOrigin::Env
            }
        );
        let files_only = Inputs {
            env: None,
            ..no_flag.clone()
        };
        assert_eq!(
            locate(&files_only, files).unwrap(),
            ConfigFile {
                path: "/w/project/ctxbridge.json5".into(),
                origin: ConfigOrigin::Nearest
            }
        );
        let here = exists(&[
            "/w/project/sub/ctxbridge.json5",
            "/w/project/ctxbridge.json5",
        ]);
        assert_eq!(
            locate(&files_only, here).unwrap(),
            ConfigFile {
                path: "ctxbridge.json5".into(),
                origin: ConfigOrigin::Nearest
            }
        );
        let user_only = exists(&["/home/u/.config/ctxbridge/ctxbridge.json5"]);
        assert_eq!(
            locate(&files_only, user_only).unwrap(),
            ConfigFile {
                path: "/home/u/.config/ctxbridge/ctxbridge.json5".into(),
                origin: ConfigOrigin::UserDir
            }
        );
        assert_eq!(locate(&files_only, exists(&[])), None);
    }
}
