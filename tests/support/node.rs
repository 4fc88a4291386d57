//! The Node the OpenClaw plugin tests run on: the pinned one (`npm ci` in
//! `hosts/openclaw-node`), else `node` on PATH.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// `(major, minor)` of a Node binary, or None when it does not run.
pub fn node_version(node: &str) -> Option<(u32, u32)> {
    let out = Command::new(node)
        .args(["-p", "process.versions.node"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.trim().split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The pinned Node, else `node` on PATH, when it is at least `min`; None (with a loud note
/// naming `test`) otherwise.
pub fn node_at_least(min: (u32, u32), test: &str) -> Option<String> {
    let pinned = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("hosts/openclaw-node/node_modules/.bin/node");
    for candidate in [pinned.display().to_string(), "node".to_string()] {
        if node_version(&candidate).is_some_and(|v| v >= min) {
            return Some(candidate);
        }
    }
    eprintln!(
        "SKIPPED {test}: no Node >= {}.{} (run `npm ci` in hosts/openclaw-node for the pinned one)",
        min.0, min.1
    );
    None
}
