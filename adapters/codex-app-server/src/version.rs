//! The Codex version a server runs, read from the `userAgent` of its `initialize` result, and
//! what this client knows about versions: the range the end-to-end tests cover and which
//! behaviours depend on the version.
//!
//! Codex builds the user agent as `<originator>/<version> (<os>; <arch>) <terminal> (<client
//! name>; <client version>)`, where the originator is the `clientInfo.name` of the handshake, e.g.
//! `ctxbridge/0.171.0 (Debian 12.0.0; x86_64) xterm (ctxbridge; 0.1.0)`.

use std::fmt;

use semver::{BuildMetadata, Version};

/// A Codex release version: `MAJOR.MINOR.PATCH` with an optional pre-release tag
/// (`0.172.0-alpha.1`), a `semver` version whose build metadata is dropped. Orders as
/// semantic versions do: a pre-release before its release.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodexVersion(Version);

impl CodexVersion {
    /// A release version (no pre-release tag).
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self(Version::new(major, minor, patch))
    }

    /// Parse `MAJOR.MINOR.PATCH[-PRE][+BUILD]` (build metadata is dropped); `None` for anything
    /// else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut version = Version::parse(text.trim()).ok()?;
        version.build = BuildMetadata::EMPTY;
        Some(Self(version))
    }

    /// The version in a Codex user agent: the part after the first `/` of its first word
    /// (`ctxbridge/0.171.0 (…)` → 0.171.0). `None` when the user agent has no parsable version.
    pub fn from_user_agent(user_agent: &str) -> Option<Self> {
        let first_word = user_agent.split_whitespace().next()?;
        let (_originator, version) = first_word.split_once('/')?;
        Self::parse(version)
    }

    /// The version as `semver` has it.
    pub fn as_semver(&self) -> &Version {
        &self.0
    }
}

impl fmt::Display for CodexVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The oldest Codex the end-to-end tests run against (a smoke run of start, turn and resume).
pub const OLDEST_TESTED: CodexVersion = CodexVersion::new(0, 169, 0);

/// The Codex the project pins (`package.json`) and runs every real-Codex test against.
pub const NEWEST_TESTED: CodexVersion = CodexVersion::new(0, 171, 0);

/// The first version seen to keep a `turn/start.additionalContext` fragment in the thread across
/// a local compaction (0.169.0 dropped it and did not re-inject it; there is no 0.170).
pub const ADDITIONAL_CONTEXT_SURVIVES_COMPACTION_SINCE: CodexVersion = CodexVersion::new(0, 171, 0);

/// Whether `version` is older than any version the tests cover (it may still work; callers
/// typically warn).
pub fn is_below_tested(version: &CodexVersion) -> bool {
    *version < OLDEST_TESTED
}

/// Whether this Codex keeps an `additionalContext` fragment in the model-visible history after
/// a compaction. Where it does not, context sent that way is silently lost at the first
/// compaction, so a bridge must not rely on `additionalContext` there.
pub fn keeps_additional_context_across_compaction(version: &CodexVersion) -> bool {
    *version >= ADDITIONAL_CONTEXT_SURVIVES_COMPACTION_SINCE
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Versions parse from both observed user agents and from bare strings; junk is rejected.
    #[test]
    fn versions_parse_from_user_agents() {
        assert_eq!(
            CodexVersion::from_user_agent(
                "ctxbridge/0.171.0 (Debian 12.0.0; x86_64) xterm (ctxbridge; x)"
            ),
            Some(CodexVersion::new(0, 171, 0))
        );
        assert_eq!(
            CodexVersion::from_user_agent("codex_cli_rs/0.169.0 (Mac OS 15.1.0; arm64)"),
            Some(CodexVersion::new(0, 169, 0))
        );
        let pre = CodexVersion::from_user_agent("fake/1.2.3-alpha.4+build.5").unwrap();
        assert_eq!(pre.to_string(), "1.2.3-alpha.4");
        assert_eq!(pre.as_semver().pre.as_str(), "alpha.4");
        for junk in [
            "",
            "codex",
            "codex/",
            "codex/1.2",
            "codex/1.2.3.4",
            "codex/1.x.3",
            "codex/1.2.3-",
            "codex/-1.2.3",
        ] {
            assert_eq!(CodexVersion::from_user_agent(junk), None, "{junk:?}");
        }
    }

    /// Ordering is numeric per part, and a pre-release sorts before its release.
    #[test]
    fn versions_order_numerically() {
        let v = |s: &str| CodexVersion::parse(s).unwrap();
        assert!(v("0.99.0") < v("0.169.0"));
        assert!(v("0.169.0") < v("0.171.0"));
        assert!(v("0.171.0-alpha.1") < v("0.171.0"));
        assert!(v("0.171.0") < v("0.171.1"));
        assert!(v("1.0.0") > v("0.999.999"));
        assert_eq!(v("0.171.0").to_string(), "0.171.0");
        assert_eq!(v("0.172.0-beta").to_string(), "0.172.0-beta");
    }

    /// The tested range starts at 0.169.0; only 0.171.0 and later keep `additionalContext`
    /// across compaction.
    #[test]
    fn version_gates() {
        let v = |s: &str| CodexVersion::parse(s).unwrap();
        assert!(is_below_tested(&v("0.168.9")));
        assert!(is_below_tested(&v("0.169.0-alpha.1")));
        assert!(!is_below_tested(&OLDEST_TESTED));
        assert!(!is_below_tested(&NEWEST_TESTED));
        assert!(!keeps_additional_context_across_compaction(&v("0.169.0")));
        assert!(!keeps_additional_context_across_compaction(&v(
            "0.171.0-alpha.2"
        )));
        assert!(keeps_additional_context_across_compaction(&v("0.171.0")));
        assert!(keeps_additional_context_across_compaction(&v("0.180.0")));
    }
}
