//! Redaction of the password in a PostgreSQL URL or key/value connection string, for messages.

/// How an unparsable `store.url` is named in messages (never by its text).
pub(super) const UNPARSABLE_URL: &str = "(store.url, not shown: it does not parse)";

/// The URL as it may be shown: the password (in the user info, a `password` query parameter or
/// a `password=` key of a key/value connection string) replaced by `***`. A URL that does not
/// parse is not shown at all ([`UNPARSABLE_URL`]).
pub fn redact_url(url: &str) -> String {
    if !url.contains("://") {
        return redact_key_value(url);
    }
    let Ok(mut parsed) = url::Url::parse(url) else {
        return UNPARSABLE_URL.to_owned();
    };
    if parsed.password().is_some() && parsed.set_password(Some("***")).is_err() {
        // Not reached for a URL with a password (it has an authority to hold one); whatever
        // the reason, a URL whose password stays is not shown.
        return UNPARSABLE_URL.to_owned();
    }
    let is_password = |key: &str| key.eq_ignore_ascii_case("password");
    if parsed.query_pairs().any(|(key, _)| is_password(&key)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(key, value)| {
                let value = if is_password(&key) {
                    "***".to_owned()
                } else {
                    value.into_owned()
                };
                (key.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

/// Redacts `password=` in a `key=value key='quoted value'` connection string.
fn redact_key_value(conn: &str) -> String {
    let mut out = String::with_capacity(conn.len());
    let mut rest = conn;
    while !rest.is_empty() {
        let trimmed = rest.trim_start();
        out.push_str(&rest[..rest.len() - trimmed.len()]);
        rest = trimmed;
        if rest.is_empty() {
            break;
        }
        let key_end = rest.find('=').unwrap_or(rest.len());
        let key = rest[..key_end].trim();
        let value_start = (key_end + 1).min(rest.len());
        let after_eq = rest[value_start..].trim_start();
        let value_offset = rest.len() - after_eq.len();
        let value_len = if let Some(quoted) = after_eq.strip_prefix('\'') {
            // A quoted value ends at the first quote not escaped by a backslash.
            let mut escaped = false;
            let mut end = quoted.len();
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = i + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            1 + end
        } else {
            after_eq.find(char::is_whitespace).unwrap_or(after_eq.len())
        };
        let token_end = (value_offset + value_len).min(rest.len());
        if key.eq_ignore_ascii_case("password") {
            out.push_str(&rest[..value_offset]);
            out.push_str("***");
        } else {
            out.push_str(&rest[..token_end]);
        }
        rest = &rest[token_end..];
    }
    out
}
