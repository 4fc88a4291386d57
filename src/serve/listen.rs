//! Where `serve` listens and who may connect: the `--listen` URL (`ws://IP:PORT`,
//! `unix://PATH`, `stdio://`, the same forms as `codex app-server --listen`), WebSocket
//! capability-token auth (`--ws-auth capability-token --ws-token-file F`) and which browser
//! origins may open a WebSocket (`--allow-origin`).
//!
//! Everything here is pure except reading the token file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A parsed `--listen` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// WebSocket (text frames, one JSON-RPC message each) plus `/readyz` and `/healthz`.
    Ws(SocketAddr),
    /// WebSocket over a unix socket (an HTTP upgrade on any path, then text frames, as Codex's
    /// `--listen unix://PATH`); the socket file gets mode 0600.
    Unix(PathBuf),
    /// One client on this process's stdin/stdout, newline-delimited JSON-RPC.
    Stdio,
}

/// A `--listen` or auth setting that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// The URL is not one of the accepted forms.
    #[error("--listen {url}: {reason} (expected ws://IP:PORT, unix://PATH or stdio://)")]
    BadUrl { url: String, reason: String },
    /// A non-loopback WebSocket address without auth would expose the backend to the network.
    #[error("--listen {addr}: refusing a non-loopback address without auth; use a loopback address or --ws-auth capability-token --ws-token-file FILE")]
    NonLoopbackWithoutAuth { addr: SocketAddr },
    /// Auth was given for a transport that has no handshake to carry it.
    #[error("--ws-auth applies only to ws:// listeners")]
    AuthWithoutWs,
    /// The token file could not be read.
    #[error("reading the WebSocket token file {path}")]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The token file holds no token.
    #[error("the WebSocket token file {path} is empty")]
    EmptyToken { path: PathBuf },
    /// The Responses front's `--listen` is not `http://IP:PORT`.
    #[error("--listen {url}: {reason} (the Responses front listens on http://IP:PORT)")]
    BadHttpUrl { url: String, reason: String },
    /// `--ws-token-sha256` is not a SHA-256 digest in hex.
    #[error("--ws-token-sha256: {reason} (expected the SHA-256 of the token as 64 hex digits, e.g. from `printf %s TOKEN | sha256sum`)")]
    BadTokenDigest { reason: String },
}

impl ListenAddr {
    /// Parses `ws://IP:PORT`, `unix://PATH` or `stdio://`.
    pub fn parse(url: &str) -> Result<ListenAddr, ListenError> {
        let bad = |reason: &str| ListenError::BadUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        if url == "stdio://" || url == "stdio" {
            return Ok(ListenAddr::Stdio);
        }
        if let Some(path) = url.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(bad("a unix socket path is required"));
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = url.strip_prefix("ws://") {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            return rest
                .parse::<SocketAddr>()
                .map(ListenAddr::Ws)
                .map_err(|_| bad("the address must be IP:PORT"));
        }
        Err(bad("unknown scheme"))
    }
}

/// The capability token a WebSocket client must present as `Authorization: Bearer TOKEN`.
/// Only its SHA-256 digest is kept, so comparisons take the same time whatever the input.
#[derive(Clone)]
pub struct CapabilityToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for CapabilityToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapabilityToken(<redacted>)")
    }
}

impl CapabilityToken {
    /// A token given directly (surrounding whitespace ignored).
    pub fn new(token: &str) -> CapabilityToken {
        CapabilityToken {
            digest: Sha256::digest(token.trim().as_bytes()).into(),
        }
    }

    /// The token held by a file (surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<CapabilityToken, ListenError> {
        let text = std::fs::read_to_string(path).map_err(|source| ListenError::TokenFile {
            path: path.to_owned(),
            source,
        })?;
        if text.trim().is_empty() {
            return Err(ListenError::EmptyToken {
                path: path.to_owned(),
            });
        }
        Ok(CapabilityToken::new(&text))
    }

    /// A token known only by its SHA-256 digest, given as 64 hex digits (either case;
    /// surrounding whitespace ignored), as Codex's `--ws-token-sha256`. Clients present the
    /// token itself; it is hashed and compared in constant time.
    pub fn from_sha256_hex(hex_digest: &str) -> Result<CapabilityToken, ListenError> {
        let text = hex_digest.trim();
        let bad = |reason: String| ListenError::BadTokenDigest { reason };
        if text.len() != 64 {
            return Err(bad(format!("{} characters", text.len())));
        }
        let mut digest = [0u8; 32];
        hex::decode_to_slice(text, &mut digest).map_err(|e| bad(format!("not hex: {e}")))?;
        Ok(CapabilityToken { digest })
    }

    /// Whether an `Authorization` header value carries this token, compared in constant time.
    pub fn accepts(&self, authorization: Option<&str>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some((scheme, token)) = value.trim().split_once(' ') else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return false;
        }
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        bool::from(digest.ct_eq(&self.digest))
    }
}

/// Which `Origin` headers a WebSocket upgrade may carry. Browsers send `Origin` on every
/// WebSocket upgrade and CLI clients (the Codex TUI, `codex exec`, the SDKs) never do, so —
/// as the real `codex app-server --listen ws://` — an upgrade that carries one is refused
/// (HTTP 403) unless its origin is listed with `--allow-origin`. Without this any web page the
/// user opens could drive the server on loopback (cross-site WebSocket hijacking).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    /// The allowed origins, normalised by [`normalize_origin`].
    allowed: Vec<String>,
}

/// An `--allow-origin` value that is not an origin.
#[derive(Debug, thiserror::Error)]
#[error("--allow-origin {value:?}: {reason} (expected an origin such as http://localhost:3000, or null)")]
pub struct BadOrigin {
    value: String,
    reason: &'static str,
}

impl OriginPolicy {
    /// The policy allowing exactly `origins` (each `scheme://host[:port]`, or `null`).
    pub fn allowing<I, S>(origins: I) -> Result<OriginPolicy, BadOrigin>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut allowed = Vec::new();
        for origin in origins {
            let value = origin.as_ref();
            let bad = |reason| BadOrigin {
                value: value.to_owned(),
                reason,
            };
            let normalized = normalize_origin(value);
            if normalized != "null" {
                let url = url::Url::parse(&normalized).map_err(|_| bad("not a URL"))?;
                if url.host_str().is_none() {
                    return Err(bad("it names no host"));
                }
                if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
                    return Err(bad("an origin has no path, query or fragment"));
                }
            }
            allowed.push(normalized);
        }
        Ok(OriginPolicy { allowed })
    }

    /// Whether an upgrade carrying `origin` (the header's value; `None` without the header)
    /// may proceed.
    pub fn admits(&self, origin: Option<&str>) -> bool {
        match origin {
            None => true,
            Some(value) => {
                let value = normalize_origin(value);
                self.allowed.contains(&value)
            }
        }
    }
}

/// An origin as compared: trimmed, without a trailing `/`, scheme and host in lower case (the
/// parts of an origin that are case-insensitive; an origin has nothing else).
pub fn normalize_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// Parses the Responses front's `--listen http://IP:PORT`.
pub fn parse_http_listen(url: &str) -> Result<SocketAddr, ListenError> {
    let bad = |reason: &str| ListenError::BadHttpUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("the scheme must be http"))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    rest.parse::<SocketAddr>()
        .map_err(|_| bad("the address must be IP:PORT"))
}

/// Refuses listener settings that would expose the backend: a non-loopback WebSocket address
/// without auth, or auth on a transport without a handshake.
pub fn check_exposure(
    addr: &ListenAddr,
    auth: Option<&CapabilityToken>,
) -> Result<(), ListenError> {
    match (addr, auth) {
        (ListenAddr::Ws(socket), None) if !socket.ip().is_loopback() => {
            Err(ListenError::NonLoopbackWithoutAuth { addr: *socket })
        }
        (ListenAddr::Unix(_) | ListenAddr::Stdio, Some(_)) => Err(ListenError::AuthWithoutWs),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The three URL forms parse; anything else is a usage error naming the URL.
    #[test]
    fn listen_urls_parse() {
        assert_eq!(
            ListenAddr::parse("ws://127.0.0.1:4500").unwrap(),
            ListenAddr::Ws("127.0.0.1:4500".parse().unwrap())
        );
        assert_eq!(
            ListenAddr::parse("unix:///tmp/x.sock").unwrap(),
            ListenAddr::Unix(PathBuf::from("/tmp/x.sock"))
        );
        assert_eq!(ListenAddr::parse("stdio://").unwrap(), ListenAddr::Stdio);
        for bad in [
            "http://127.0.0.1:1",
            "ws://localhost",
            "unix://",
            "ws://1.2.3.4",
        ] {
            let error = ListenAddr::parse(bad).unwrap_err().to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    /// Without an allow-list only upgrades without `Origin` pass; `null` and foreign origins
    /// are refused; listed origins pass whatever their case or trailing slash.
    #[test]
    fn origin_policy() {
        let closed = OriginPolicy::default();
        assert!(closed.admits(None));
        for origin in ["http://evil.example", "null", "http://127.0.0.1:4500", ""] {
            assert!(!closed.admits(Some(origin)), "{origin}");
        }
        let open = OriginPolicy::allowing(["http://localhost:3000/", "null"]).unwrap();
        assert!(open.admits(Some("HTTP://LOCALHOST:3000")));
        assert!(open.admits(Some("null")));
        assert!(!open.admits(Some("http://localhost:3001")));
        assert!(!open.admits(Some("http://evil.example")));
        for bad in ["localhost", "http://x/path", "not a url", "http://x/?q"] {
            let error = OriginPolicy::allowing([bad]).unwrap_err().to_string();
            assert!(
                error.contains("--allow-origin") && error.contains(bad),
                "{error}"
            );
        }
    }

    /// A non-loopback ws address needs auth; loopback does not; auth needs ws.
    #[test]
    fn exposure_rules() {
        let open = ListenAddr::parse("ws://0.0.0.0:1").unwrap();
        let token = CapabilityToken::new("secret");
        assert!(matches!(
            check_exposure(&open, None),
            Err(ListenError::NonLoopbackWithoutAuth { .. })
        ));
        assert!(check_exposure(&open, Some(&token)).is_ok());
        assert!(check_exposure(&ListenAddr::parse("ws://[::1]:1").unwrap(), None).is_ok());
        assert!(matches!(
            check_exposure(&ListenAddr::Stdio, Some(&token)),
            Err(ListenError::AuthWithoutWs)
        ));
    }

    /// Only `Bearer <the token>` is accepted; the token's debug form never shows it.
    #[test]
    fn bearer_token_check() {
        let token = CapabilityToken::new("s3cret\n");
        assert!(token.accepts(Some("Bearer s3cret")));
        assert!(token.accepts(Some("bearer s3cret")));
        assert!(!token.accepts(Some("Bearer wrong")));
        assert!(!token.accepts(Some("Basic s3cret")));
        assert!(!token.accepts(Some("s3cret")));
        assert!(!token.accepts(None));
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    /// A token given by its SHA-256 hex accepts exactly the token whose digest it is; a
    /// malformed digest is refused with an error saying what is expected.
    #[test]
    fn token_by_sha256() {
        let hex_digest = hex::encode(Sha256::digest(b"s3cret"));
        let token = CapabilityToken::from_sha256_hex(&format!(" {} \n", hex_digest.to_uppercase()))
            .unwrap();
        assert!(token.accepts(Some("Bearer s3cret")));
        assert!(!token.accepts(Some("Bearer s3cret2")));
        assert!(!token.accepts(Some(&format!("Bearer {hex_digest}"))));
        for bad in [
            "",
            "abc",
            &hex_digest[..63],
            &format!("{}zz", &hex_digest[..62]),
        ] {
            let error = CapabilityToken::from_sha256_hex(bad)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("--ws-token-sha256") && error.contains("64 hex digits"),
                "{error}"
            );
        }
    }
}
