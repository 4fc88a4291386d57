//! Node versions and the `engines.node` ranges of plugins' `package.json`, for the check doctor
//! makes of each Node-hosted engine. Versions and comparators are the `semver` crate's; the
//! only code here is the translation of npm's range syntax, which `semver` (Cargo's flavour)
//! does not read as it is: alternatives with `||`, comparators separated by spaces, a bare
//! version meaning exactly that version, hyphen ranges and a `v` prefix.

use semver::{Version, VersionReq};

/// The Node version below which `node:sqlite` is missing (what OpenClaw plugins commonly need).
pub const NODE_SQLITE_MIN: Version = Version::new(22, 5, 0);

/// `"22.5.1"`, `"v22.5.1\n"`, `"22.5"` → the version (missing parts are 0).
pub fn parse_node_version(text: &str) -> Option<Version> {
    let text = text.trim().trim_start_matches('v');
    let core = text.split(['-', '+']).next().unwrap_or(text);
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    if parts.next().is_some() {
        return None;
    }
    Some(Version::new(major, minor, patch))
}

/// An npm version range (`engines.node`): any of its alternatives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRange {
    alternatives: Vec<VersionReq>,
}

impl NodeRange {
    /// Reads an npm range (`>=22.5`, `>= 22.5.0 <25`, `^20.1 || >=22`, `22.x`, `18 - 20`, `*`);
    /// `None` for anything `semver` cannot express (`latest`, a tag).
    pub fn parse(range: &str) -> Option<NodeRange> {
        let alternatives = range
            .split("||")
            .map(|alternative| VersionReq::parse(&cargo_comparators(alternative.trim())?).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(NodeRange { alternatives })
    }

    /// Whether `version` is in the range.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|req| req.matches(version))
    }
}

/// One npm alternative as Cargo comparators (`>=22.5.0 <25` → `>=22.5.0, <25`).
fn cargo_comparators(alternative: &str) -> Option<String> {
    if alternative.is_empty() || alternative == "*" || alternative == "x" {
        return Some("*".to_owned());
    }
    let tokens: Vec<&str> = alternative.split_whitespace().collect();
    if let [low, "-", high] = tokens.as_slice() {
        return Some(format!(">={}, <={}", bare(low), bare(high)));
    }
    let mut comparators = Vec::new();
    let mut pending_operator: Option<&str> = None;
    for token in tokens {
        let split = token
            .find(|c: char| c.is_ascii_digit() || c == 'v' || c == '*' || c == 'x' || c == 'X')
            .unwrap_or(token.len());
        let (operator, version) = token.split_at(split);
        if version.is_empty() {
            // An operator written apart from its version (`>= 22.5`).
            pending_operator = Some(operator);
            continue;
        }
        let operator = match pending_operator.take() {
            Some(written) if operator.is_empty() => written,
            Some(_) => return None,
            None => operator,
        };
        // npm reads a bare version as exactly that version; Cargo as a caret requirement.
        let operator = if operator.is_empty() && !version.contains(['x', 'X', '*']) {
            "="
        } else {
            operator
        };
        comparators.push(format!("{operator}{}", bare(version)));
    }
    (pending_operator.is_none() && !comparators.is_empty()).then(|| comparators.join(", "))
}

fn bare(version: &str) -> &str {
    version.trim_start_matches('v')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn matches(range: &str, version: &str) -> bool {
        NodeRange::parse(range)
            .unwrap_or_else(|| panic!("{range:?} did not parse"))
            .matches(&parse_node_version(version).unwrap())
    }

    /// Node prints its version with a `v` and a newline; partial versions fill in zeros.
    #[test]
    fn node_versions_parse() {
        assert_eq!(parse_node_version("v22.5.1"), Some(Version::new(22, 5, 1)));
        assert_eq!(
            parse_node_version("20.20.2\n"),
            Some(Version::new(20, 20, 2))
        );
        assert_eq!(parse_node_version("22.5"), Some(Version::new(22, 5, 0)));
        assert_eq!(
            parse_node_version("22.5.0-nightly"),
            Some(Version::new(22, 5, 0))
        );
        assert_eq!(parse_node_version("node"), None);
        assert_eq!(parse_node_version("1.2.3.4"), None);
    }

    /// npm's range syntax: lower bounds, upper bounds with spaces between comparators, an
    /// operator written apart, carets and tildes, alternatives, x-ranges, hyphen ranges, a bare
    /// version (exactly it); what semver cannot express is None.
    #[test]
    fn npm_ranges_are_read_as_npm_reads_them() {
        assert!(matches(">=22.5", "22.23.3"));
        assert!(!matches(">=22.5", "20.20.2"));
        assert!(matches(">= 22.5.0 <25", "24.1.0"));
        assert!(!matches(">= 22.5.0 <25", "25.0.0"));
        assert!(matches("^20.1", "20.9.0"));
        assert!(!matches("^20.1", "21.0.0"));
        assert!(matches("~22.5", "22.5.9"));
        assert!(!matches("~22.5", "22.6.0"));
        assert!(matches("<22", "20.20.2"));
        assert!(matches("18 || >=22.5", "22.23.3"));
        assert!(matches("^18 || >=22.5", "18.2.0"));
        assert!(!matches("^18 || >=22.5", "20.20.2"));
        assert!(matches("22.x", "22.23.3"));
        assert!(!matches("22.x", "23.0.0"));
        assert!(matches("20 - 22.5", "21.0.0"));
        assert!(!matches("20 - 22.5", "22.6.0"));
        assert!(matches("22.5.0", "22.5.0"));
        assert!(!matches("22.5.0", "22.6.0"));
        assert!(matches(">=v22.5.0", "22.5.0"));
        assert!(matches("*", "4.0.0"));
        assert_eq!(NodeRange::parse("latest"), None);
        assert_eq!(NodeRange::parse(">="), None);
    }
}
