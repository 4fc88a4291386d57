//! Endpoint URLs built from the base URL with a URL library, and their redacted form for every
//! place a URL is printed (errors, `Debug`, logs).
//!
//! A base URL may carry a secret: a key in the userinfo (`http://user:sk-…@host/v1`) or in a
//! query value (`…/v1?api-key=sk-…`). Endpoints keep both (the query stays after the joined
//! path: `…/v1/responses?api-key=…`); [`redact_url`] replaces the userinfo and every query value
//! by `***`.

use url::Url;

/// What stands in for a secret part of a URL.
pub const REDACTED: &str = "***";

/// The base URL parsed and checked: an `http` or `https` URL that can have a path. On failure,
/// the reason (with the URL redacted).
pub fn parse_base_url(base_url: &str) -> Result<Url, String> {
    let url = Url::parse(base_url.trim()).map_err(|error| {
        format!(
            "base URL {} is not a valid URL: {error}",
            redact_url_str(base_url)
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(format!(
            "base URL {} is not an http(s) URL",
            redact_url(&url)
        ));
    }
    Ok(url)
}

/// `base` with `segments` appended to its path (each one percent-encoded as needed, a trailing
/// slash of the base ignored); the query of `base` is kept.
pub fn endpoint(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    url.set_fragment(None);
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty();
        path.extend(segments);
    }
    // `path_segments_mut` fails only for URLs that cannot be a base, which `parse_base_url`
    // rejects; such a URL is returned unchanged.
    url
}

/// The URL with any userinfo replaced by `***` (no password), every query value (and every
/// query key without a value) replaced by `***`, and no fragment.
pub fn redact_url(url: &Url) -> String {
    let mut redacted = url.clone();
    if !redacted.username().is_empty() || redacted.password().is_some() {
        // Both calls fail only for URLs without a host, which have no userinfo to hide.
        let _ = redacted.set_username(REDACTED);
        let _ = redacted.set_password(None);
    }
    if url.query().is_some() {
        let keys: Vec<String> = url
            .query_pairs()
            .map(|(key, value)| {
                if value.is_empty() {
                    REDACTED.to_owned()
                } else {
                    key.into_owned()
                }
            })
            .collect();
        redacted.set_query(None);
        if !keys.is_empty() {
            let mut pairs = redacted.query_pairs_mut();
            for key in &keys {
                pairs.append_pair(key, REDACTED);
            }
        }
    }
    redacted.set_fragment(None);
    redacted.to_string()
}

/// [`redact_url`] of a URL given as text; text that does not parse as a URL is not shown at all.
pub fn redact_url_str(url: &str) -> String {
    match Url::parse(url.trim()) {
        Ok(url) => redact_url(&url),
        Err(_) => format!("(an unparseable URL of {} characters)", url.len()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Joining keeps the base's query after the new path segments, and a trailing slash of the
    /// base adds no empty segment.
    #[test]
    fn endpoint_keeps_the_query_after_the_path() {
        let base = parse_base_url("http://127.0.0.1:9/v1?api-key=sk-secret").unwrap();
        assert_eq!(
            endpoint(&base, &["responses"]).as_str(),
            "http://127.0.0.1:9/v1/responses?api-key=sk-secret"
        );
        let slash = parse_base_url("http://127.0.0.1:9/v1/").unwrap();
        assert_eq!(
            endpoint(&slash, &["responses", "compact"]).as_str(),
            "http://127.0.0.1:9/v1/responses/compact"
        );
        assert_eq!(
            endpoint(&slash, &["conversations", "conv a/b"]).as_str(),
            "http://127.0.0.1:9/v1/conversations/conv%20a%2Fb"
        );
    }

    /// Redaction hides the userinfo and every query value, keeps host, path and query keys.
    #[test]
    fn redaction_hides_userinfo_and_query_values() {
        let url = Url::parse("http://u:sk-user@host:8080/v1/responses?api-key=sk-query&x=1#frag")
            .unwrap();
        let shown = redact_url(&url);
        assert_eq!(shown, "http://***@host:8080/v1/responses?api-key=***&x=***");
        let bare_key = Url::parse("https://host/v1?sk-bare").unwrap();
        assert_eq!(redact_url(&bare_key), "https://host/v1?***=***");
        let plain = Url::parse("https://api.openai.com/v1").unwrap();
        assert_eq!(redact_url(&plain), "https://api.openai.com/v1");
    }

    /// Invalid or non-http base URLs are refused with a reason that does not show the secret.
    #[test]
    fn bad_base_urls_are_refused_without_the_secret() {
        let error = parse_base_url("ftp://u:sk-secret@host/v1").unwrap_err();
        assert!(error.contains("not an http(s) URL"), "{error}");
        assert!(!error.contains("sk-secret"), "{error}");
        let error = parse_base_url("127.0.0.1:80 sk-secret").unwrap_err();
        assert!(!error.contains("sk-secret"), "{error}");
    }
}
