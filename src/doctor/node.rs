//! The Node version check of Node-hosted engines.

use std::path::Path;

use crate::config::Config;
use crate::host::node::{parse_node_version, NodeRange, NODE_SQLITE_MIN};

/// The Node check of one Node-hosted engine (`doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCheck {
    pub engine_id: String,
    /// The interpreter (`command[0]`).
    pub interpreter: String,
    /// `process.versions.node`, when the interpreter ran.
    pub version: Option<String>,
    /// The plugin's `package.json` `engines.node`, when found.
    pub required: Option<String>,
    /// Why the engine cannot run (doctor fails).
    pub problem: Option<String>,
    /// Something worth knowing that does not fail doctor.
    pub note: Option<String>,
}

/// A Node-hosted engine command: its interpreter and the plugin argument (the one after the
/// host script), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCommand {
    /// `command[0]` when it is `node`/`nodejs`; `node` when `command[0]` is itself a
    /// `.mjs`/`.cjs`/`.js` script (run through its shebang).
    pub interpreter: String,
    pub plugin: Option<String>,
}

/// Whether an engine command runs Node: `command[0]`'s file name is `node` (or `nodejs`), or
/// `command[0]` is a `.mjs`/`.cjs`/`.js` host script. A command that merely passes a script to
/// another program (a wrapper) is not judged.
pub fn node_hosted(command: &[String]) -> Option<NodeCommand> {
    let program = command.first()?;
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let is_script = |a: &String| a.ends_with(".mjs") || a.ends_with(".cjs") || a.ends_with(".js");
    let interpreter = if name == "node" || name == "nodejs" {
        program.clone()
    } else if is_script(program) {
        "node".to_string()
    } else {
        return None;
    };
    let script = command.iter().position(is_script);
    Some(NodeCommand {
        interpreter,
        plugin: script.and_then(|i| command.get(i + 1).cloned()),
    })
}

/// Judges a Node version against a plugin's `engines.node` (pure).
pub fn judge_node(
    version: Option<&str>,
    required: Option<&str>,
) -> (Option<String>, Option<String>) {
    let Some(version) = version else {
        return (
            Some("the interpreter did not run (`-p process.versions.node` failed)".into()),
            None,
        );
    };
    let Some(have) = parse_node_version(version) else {
        return (
            None,
            Some(format!("cannot read the Node version {version:?}")),
        );
    };
    match required {
        Some(range) => match NodeRange::parse(range) {
            Some(range_ok) if !range_ok.matches(&have) => (
                Some(format!(
                    "Node {version} is not what the plugin requires (engines.node \"{range}\")"
                )),
                None,
            ),
            Some(_) => (None, None),
            None => (None, Some(format!("cannot check engines.node \"{range}\""))),
        },
        None if have < NODE_SQLITE_MIN => (
            None,
            Some(format!(
                "Node {version} lacks node:sqlite (Node >= 22.5); plugins that use it will not load"
            )),
        ),
        None => (None, None),
    }
}

/// The `engines.node` of the plugin at `plugin` (a package directory, or a file whose nearest
/// directory with a `package.json` is the package).
fn plugin_node_requirement(plugin: &Path) -> Option<String> {
    let mut dir = if plugin.is_dir() {
        Some(plugin.to_path_buf())
    } else {
        plugin.parent().map(Path::to_path_buf)
    };
    while let Some(d) = dir {
        let manifest = d.join("package.json");
        if manifest.is_file() {
            let text = std::fs::read_to_string(&manifest).ok()?;
            let value: serde_json::Value = serde_json::from_str(&text).ok()?;
            return value["engines"]["node"].as_str().map(str::to_string);
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    None
}

/// Runs `<command[0]> -p process.versions.node` for every configured Node-hosted engine and
/// judges it against its plugin's `engines.node`.
pub async fn node_checks(config: &Config) -> Vec<NodeCheck> {
    let mut checks = Vec::new();
    for (id, entry) in &config.plugins.entries {
        let Some(command) = &entry.command else {
            continue;
        };
        let Some(NodeCommand {
            interpreter,
            plugin,
        }) = node_hosted(command)
        else {
            continue;
        };
        let base = entry
            .cwd
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default();
        let mut run = tokio::process::Command::new(&interpreter);
        run.args(["-p", "process.versions.node"])
            .current_dir(&base)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let version =
            match tokio::time::timeout(std::time::Duration::from_secs(10), run.output()).await {
                Ok(Ok(out)) if out.status.success() => {
                    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
                }
                _ => None,
            };
        let required = plugin.and_then(|p| plugin_node_requirement(&base.join(p)));
        let (problem, note) = judge_node(version.as_deref(), required.as_deref());
        checks.push(NodeCheck {
            engine_id: id.clone(),
            interpreter,
            version,
            required,
            problem,
            note,
        });
    }
    checks
}
