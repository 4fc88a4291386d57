//! Redaction of the password in a PostgreSQL URL or key/value connection string, for messages.

/// How an unparsable `store.url` is named in messages (never by its text).
pub(super) const UNPARSABLE_URL: &str = "(store.url, not shown: it does not parse)";

/// The URL as it may be shown: the password (in the user info, a `password` query parameter or
/// a `password=` key of a key/value connection string) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let split = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(split);
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, hosts)) => match userinfo.split_once(':') {
                    Some((user, _password)) => format!("{user}:***@{hosts}"),
                    None => authority.to_string(),
                },
                None => authority.to_string(),
            };
            let tail = match tail.split_once('?') {
                Some((path, query)) => {
                    let query: Vec<String> = query
                        .split('&')
                        .map(|pair| match pair.split_once('=') {
                            Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                                format!("{key}=***")
                            }
                            _ => pair.to_string(),
                        })
                        .collect();
                    format!("{path}?{}", query.join("&"))
                }
                None => tail.to_string(),
            };
            format!("{scheme}://{authority}{tail}")
        }
        None => redact_key_value(url),
    }
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
