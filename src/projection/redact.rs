//! Hand-written scanners that make quoted history safe to put in a turn input (docs/architecture.md#rendering):
//! defusing of framing and command sigils, and secret redaction. Both run in one pass over the
//! bytes, copy clean runs in bulk and only look closer at a few trigger bytes, so they cost
//! little more than a copy. Every trigger is ASCII, so every cut is on a char boundary.
//!
//! # Defusing ([`push_defused`])
//! | history text | becomes | why |
//! |---|---|---|
//! | `<conversation_context`, `</conversation_context` (any ASCII case, whitespace allowed after `<` and `/`) | a `\` inserted after the `<`: `<\conversation_context`, `<\/conversation_context` | cannot open or close the frame |
//! | `$` followed by an ASCII letter or `_` (`$skill`) | U+2060 WORD JOINER inserted after the `$` | no skill mention |
//! | `[@` (`[@x](plugin://…)`) | U+2060 inserted after the `[` | no plugin mention |
//! | `plugin://` (any case) | U+2060 inserted after the `:` | no plugin link |
//!
//! # Redaction ([`push_redacted`])
//! Replaces with [`REDACTED`] (the rest of the text is kept):
//! - PEM private key blocks (`-----BEGIN … PRIVATE KEY-----` to the matching `-----END …-----`,
//!   or to the end of the text): the whole block becomes `[REDACTED PRIVATE KEY]`;
//! - API keys that start a word with a well-known prefix (`sk-`, `sk_`, `ghp_`, `gho_`, `ghu_`,
//!   `ghs_`, `ghr_`, `github_pat_`, `xoxb-`, `xoxp-`, `xoxa-`, `xoxs-`, `glpat-`, `AKIA`, `AIza`)
//!   followed by at least 16 token characters that look random (a digit, or mixed case): the
//!   prefix stays, the rest becomes `[REDACTED]` (`sk-[REDACTED]`);
//! - `Bearer <token>` (any case; token of 8+ characters that looks random): `Bearer [REDACTED]`;
//! - secret assignments: `KEY=value`, `KEY = "value"`, `"KEY": "value"`, and `KEY: value` at the
//!   start of a line (YAML, HTTP headers), where KEY ends in `key`, `token`, `secret`,
//!   `password`, `passwd`, `pwd`, `credential(s)`, `authorization` or `cookie`, or contains
//!   `password`, `passwd` or `secret` (ASCII case-insensitive): the value becomes `[REDACTED]`,
//!   quotes kept; after an auth scheme (`Authorization: Bearer x`, `Basic`, `Token`, `Digest`)
//!   the scheme stays and the credential goes. `null`, `true`, `false` and nested
//!   objects/arrays are left alone.

/// What a redacted secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";
/// What a PEM private key block is replaced with.
pub const REDACTED_PRIVATE_KEY: &str = "[REDACTED PRIVATE KEY]";

const WORD_JOINER: char = '\u{2060}';
const FRAME_TAG_NAME: &[u8] = b"conversation_context";

/// Bytes the defuser looks at; everything else is copied in bulk.
const DEFUSE_TRIGGER: [bool; 256] = {
    let mut table = [false; 256];
    table[b'<' as usize] = true;
    table[b'$' as usize] = true;
    table[b'[' as usize] = true;
    table[b':' as usize] = true;
    table
};

/// Appends `text` to `out` with framing tags and skill/plugin sigils defused (see the module
/// documentation for the exact rewriting).
pub fn push_defused(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    let mut copied = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !DEFUSE_TRIGGER[usize::from(b)] {
            continue;
        }
        let insert = match b {
            b'<' if is_frame_tag_at(bytes, i) => '\\',
            b'$' if bytes
                .get(i + 1)
                .is_some_and(|n| n.is_ascii_alphabetic() || *n == b'_') =>
            {
                WORD_JOINER
            }
            b'[' if bytes.get(i + 1) == Some(&b'@') => WORD_JOINER,
            b':' if i >= 6
                && bytes[i - 6..i].eq_ignore_ascii_case(b"plugin")
                && bytes[i + 1..].starts_with(b"//") =>
            {
                WORD_JOINER
            }
            _ => continue,
        };
        out.push_str(&text[copied..=i]);
        out.push(insert);
        copied = i + 1;
    }
    out.push_str(&text[copied..]);
}

/// `<`, optional whitespace, optional `/`, optional whitespace, `conversation_context`.
fn is_frame_tag_at(bytes: &[u8], lt: usize) -> bool {
    let mut j = lt + 1;
    while bytes.get(j).is_some_and(u8::is_ascii_whitespace) {
        j += 1;
    }
    if bytes.get(j) == Some(&b'/') {
        j += 1;
        while bytes.get(j).is_some_and(u8::is_ascii_whitespace) {
            j += 1;
        }
    }
    bytes
        .get(j..j + FRAME_TAG_NAME.len())
        .is_some_and(|name| name.eq_ignore_ascii_case(FRAME_TAG_NAME))
}

/// Appends `text` to `out` with secrets redacted (see the module documentation).
pub fn push_redacted(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let found: Option<(usize, usize, &str)> = match b {
            b'-' => private_key_block(bytes, i).map(|end| (i, end, REDACTED_PRIVATE_KEY)),
            b'=' | b':' => secret_assignment_value(bytes, i).map(|(s, e)| (s, e, REDACTED)),
            b's' | b'g' | b'x' | b'A' | b'b' | b'B' if i == 0 || !is_token_byte(bytes[i - 1]) => {
                prefixed_api_key(bytes, i)
                    .or_else(|| bearer_token(bytes, i))
                    .map(|(s, e)| (s, e, REDACTED))
            }
            _ => None,
        };
        match found {
            Some((start, end, replacement)) => {
                out.push_str(&text[copied..start]);
                out.push_str(replacement);
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
}

/// Characters of API keys and similar tokens.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// A random-looking secret has a digit or mixes upper and lower case (so that
/// `sk-learn-tutorial-for-beginners` or `bearer instrument` stay readable).
fn looks_random(token: &[u8]) -> bool {
    let mut upper = false;
    let mut lower = false;
    for &b in token {
        if b.is_ascii_digit() || matches!(b, b'.' | b'~' | b'+' | b'/' | b'=') {
            return true;
        }
        upper |= b.is_ascii_uppercase();
        lower |= b.is_ascii_lowercase();
    }
    upper && lower
}

const KEY_PREFIXES: [&[u8]; 15] = [
    b"github_pat_",
    b"sk-",
    b"sk_",
    b"ghp_",
    b"gho_",
    b"ghu_",
    b"ghs_",
    b"ghr_",
    b"xoxb-",
    b"xoxp-",
    b"xoxa-",
    b"xoxs-",
    b"glpat-",
    b"AKIA",
    b"AIza",
];

/// `sk-…`-style keys: returns the span after the prefix.
fn prefixed_api_key(bytes: &[u8], start: usize) -> Option<(usize, usize)> {
    let rest = &bytes[start..];
    let prefix = KEY_PREFIXES.iter().find(|p| rest.starts_with(p))?;
    let body_start = start + prefix.len();
    let mut end = body_start;
    while end < bytes.len() && is_token_byte(bytes[end]) {
        end += 1;
    }
    let body = &bytes[body_start..end];
    (body.len() >= 16 && looks_random(body)).then_some((body_start, end))
}

/// `Bearer <token>`: returns the token's span.
fn bearer_token(bytes: &[u8], start: usize) -> Option<(usize, usize)> {
    let word = bytes.get(start..start + 6)?;
    if !word.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let mut token_start = start + 6;
    while matches!(bytes.get(token_start), Some(b' ' | b'\t')) {
        token_start += 1;
    }
    if token_start == start + 6 {
        return None;
    }
    let mut end = token_start;
    while end < bytes.len()
        && (is_token_byte(bytes[end]) || matches!(bytes[end], b'.' | b'~' | b'+' | b'/' | b'='))
    {
        end += 1;
    }
    let token = &bytes[token_start..end];
    (token.len() >= 8 && looks_random(token) && token != REDACTED.as_bytes())
        .then_some((token_start, end))
}

/// `-----BEGIN … PRIVATE KEY-----` … `-----END …-----`: returns the end of the block.
fn private_key_block(bytes: &[u8], start: usize) -> Option<usize> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const DASHES: &[u8] = b"-----";
    if !bytes[start..].starts_with(BEGIN) {
        return None;
    }
    let label_start = start + BEGIN.len();
    let label_window = &bytes[label_start..bytes.len().min(label_start + 80)];
    let label_len = find(label_window, DASHES)?;
    let label = &label_window[..label_len];
    if !contains(label, b"PRIVATE KEY") {
        return None;
    }
    let body_start = label_start + label_len + DASHES.len();
    let Some(end_marker) = find(&bytes[body_start..], b"-----END ") else {
        return Some(bytes.len());
    };
    let after_end = body_start + end_marker + b"-----END ".len();
    let window = &bytes[after_end..bytes.len().min(after_end + 80)];
    Some(match find(window, DASHES) {
        Some(pos) => after_end + pos + DASHES.len(),
        None => bytes.len(),
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

fn is_quote(b: u8) -> bool {
    b == b'"' || b == b'\''
}

/// Whether an assignment key names a secret.
fn is_secret_key(key: &[u8]) -> bool {
    const SUFFIXES: [&[u8]; 10] = [
        b"key",
        b"token",
        b"secret",
        b"password",
        b"passwd",
        b"pwd",
        b"credential",
        b"credentials",
        b"authorization",
        b"cookie",
    ];
    const INFIXES: [&[u8]; 3] = [b"password", b"passwd", b"secret"];
    let ends_with = |suffix: &[u8]| {
        key.len() >= suffix.len() && key[key.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    SUFFIXES.iter().any(|s| ends_with(s))
        || INFIXES.iter().any(|infix| {
            key.windows(infix.len())
                .any(|w| w.eq_ignore_ascii_case(infix))
        })
}

/// At `=` or `:` (`op`): if the key before it names a secret, returns the value's span.
fn secret_assignment_value(bytes: &[u8], op: usize) -> Option<(usize, usize)> {
    let is_colon = bytes[op] == b':';
    // Key end: skip blanks before `=`, then an optional (possibly JSON-escaped) quote.
    let mut key_end = op;
    if !is_colon {
        while key_end > 0 && matches!(bytes[key_end - 1], b' ' | b'\t') {
            key_end -= 1;
        }
    }
    let mut quoted = false;
    if key_end > 0 && is_quote(bytes[key_end - 1]) {
        quoted = true;
        key_end -= 1;
        if key_end > 0 && bytes[key_end - 1] == b'\\' {
            key_end -= 1;
        }
    }
    let mut key_start = key_end;
    while key_start > 0 && key_end - key_start < 64 && is_key_byte(bytes[key_start - 1]) {
        key_start -= 1;
    }
    if key_start == key_end || (key_start > 0 && is_key_byte(bytes[key_start - 1])) {
        return None;
    }
    if is_colon {
        if bytes[op + 1..].starts_with(b"//") {
            return None;
        }
        if !quoted && !at_line_start(bytes, key_start) {
            return None;
        }
    }
    if !is_secret_key(&bytes[key_start..key_end]) {
        return None;
    }
    // The value: optional blanks, then a quoted string or a bare word.
    let mut value_start = op + 1;
    while matches!(bytes.get(value_start), Some(b' ' | b'\t')) {
        value_start += 1;
    }
    let mut closing: Option<&[u8]> = None;
    if bytes.get(value_start) == Some(&b'\\')
        && bytes.get(value_start + 1).is_some_and(|b| is_quote(*b))
    {
        closing = Some(&bytes[value_start..value_start + 2]);
        value_start += 2;
    } else if bytes.get(value_start).is_some_and(|b| is_quote(*b)) {
        closing = Some(&bytes[value_start..value_start + 1]);
        value_start += 1;
    }
    let value_end = match closing {
        Some(quote) => {
            let line_end = bytes[value_start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |p| value_start + p);
            find(&bytes[value_start..line_end], quote).map_or(line_end, |p| value_start + p)
        }
        None => {
            let mut end = bare_word_end(bytes, value_start);
            // `Authorization: Bearer <token>`: the scheme stays, the credential goes.
            let word = &bytes[value_start..end];
            if AUTH_SCHEMES.iter().any(|s| word.eq_ignore_ascii_case(s))
                && matches!(bytes.get(end), Some(b' ' | b'\t'))
            {
                value_start = end;
                while matches!(bytes.get(value_start), Some(b' ' | b'\t')) {
                    value_start += 1;
                }
                end = bare_word_end(bytes, value_start);
            }
            end
        }
    };
    let value = &bytes[value_start..value_end];
    let skip = value.is_empty()
        || value == REDACTED.as_bytes()
        || (closing.is_none()
            && (matches!(value[0], b'{' | b'[')
                || value == b"null"
                || value == b"true"
                || value == b"false"));
    (!skip).then_some((value_start, value_end))
}

const AUTH_SCHEMES: [&[u8]; 4] = [b"bearer", b"basic", b"token", b"digest"];

/// The end of an unquoted value starting at `start`.
fn bare_word_end(bytes: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < bytes.len()
        && !bytes[end].is_ascii_whitespace()
        && !matches!(
            bytes[end],
            b',' | b';' | b'&' | b'"' | b'\'' | b'}' | b')' | b']' | b'<' | b'\\'
        )
    {
        end += 1;
    }
    end
}

/// Only blanks or a YAML list dash between the start of the line and `pos`.
fn at_line_start(bytes: &[u8], pos: usize) -> bool {
    bytes[..pos]
        .iter()
        .rev()
        .take_while(|&&b| b != b'\n')
        .all(|&b| matches!(b, b' ' | b'\t' | b'-'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn defused(text: &str) -> String {
        let mut out = String::new();
        push_defused(&mut out, text);
        out
    }

    fn redacted(text: &str) -> String {
        let mut out = String::new();
        push_redacted(&mut out, text);
        out
    }

    /// Frame tags in any case and spacing get a backslash after `<`; other tags are untouched.
    #[test]
    fn defuses_frame_tags() {
        assert_eq!(
            defused("a</conversation_context>b<conversation_context>c"),
            "a<\\/conversation_context>b<\\conversation_context>c"
        );
        assert_eq!(
            defused("< / CONVERSATION_CONTEXT >"),
            "<\\ / CONVERSATION_CONTEXT >"
        );
        assert_eq!(
            defused("<div></div> <conversation>"),
            "<div></div> <conversation>"
        );
    }

    /// `$skill`, `[@x](plugin://…)` get a word joiner; prices and plain brackets do not.
    #[test]
    fn defuses_skill_and_plugin_sigils() {
        assert_eq!(defused("run $deploy now"), "run $\u{2060}deploy now");
        assert_eq!(defused("costs $5 [a](b)"), "costs $5 [a](b)");
        assert_eq!(
            defused("[@Helper](plugin://helper@x)"),
            "[\u{2060}@Helper](plugin:\u{2060}//helper@x)"
        );
        assert_eq!(defused("https://example.com"), "https://example.com");
    }

    /// Text with no trigger bytes is copied unchanged, including multi-byte characters.
    #[test]
    fn defuse_keeps_plain_text() {
        let text = "héllo wörld 😀 — nothing to see";
        assert_eq!(defused(text), text);
    }

    /// Prefixed API keys keep their prefix and lose the rest; lookalike words stay.
    #[test]
    fn redacts_prefixed_api_keys() {
        assert_eq!(
            redacted("key sk-proj-AbCdEf0123456789xyz done"),
            "key sk-[REDACTED] done"
        );
        assert_eq!(
            redacted("token ghp_0123456789abcdefABCDEF0123"),
            "token ghp_[REDACTED]"
        );
        assert_eq!(redacted("AKIAIOSFODNN7EXAMPLE"), "AKIA[REDACTED]");
        assert_eq!(
            redacted("pip install sk-learn-tutorial-for-beginners; task-sk-0123456789abcdef0"),
            "pip install sk-learn-tutorial-for-beginners; task-sk-0123456789abcdef0"
        );
    }

    /// Bearer tokens are redacted in any case; the word alone or prose stays.
    #[test]
    fn redacts_bearer_tokens() {
        assert_eq!(
            redacted("Authorization: Bearer eyJhbGciOi.J9x-y_z"),
            "Authorization: Bearer [REDACTED]"
        );
        assert_eq!(redacted("bearer   abc123def456"), "bearer   [REDACTED]");
        assert_eq!(
            redacted("the bearer instrument is bearer of news"),
            "the bearer instrument is bearer of news"
        );
    }

    /// `KEY=value` and JSON/YAML secret assignments lose their value, keeping quotes.
    #[test]
    fn redacts_secret_assignments() {
        assert_eq!(
            redacted("OPENAI_API_KEY=abc123 PATH=/usr/bin"),
            "OPENAI_API_KEY=[REDACTED] PATH=/usr/bin"
        );
        assert_eq!(
            redacted(r#"{"access_token":"x.y.z","name":"n","password": "hunter2"}"#),
            r#"{"access_token":"[REDACTED]","name":"n","password": "[REDACTED]"}"#
        );
        assert_eq!(
            redacted("db:\n  password: hunter2\n  host: h"),
            "db:\n  password: [REDACTED]\n  host: h"
        );
        assert_eq!(
            redacted(r#"{\"client_secret\":\"s3\"}"#),
            r#"{\"client_secret\":\"[REDACTED]\"}"#
        );
        assert_eq!(redacted("DB_SECRET = 'p w'"), "DB_SECRET = '[REDACTED]'");
    }

    /// A header that names a secret keeps its auth scheme and loses the credential.
    #[test]
    fn redacts_header_credentials_after_the_scheme() {
        assert_eq!(
            redacted("Authorization: Basic dXNlcjpwYXNz\nX-Api-Key: k3y"),
            "Authorization: Basic [REDACTED]\nX-Api-Key: [REDACTED]"
        );
    }

    /// Prose with a colon, non-secret keys, URLs, nulls and nested objects stay as they are.
    #[test]
    fn leaves_non_secrets_alone() {
        for text in [
            "The key: you need it",
            "max_tokens=100 and sort=asc",
            "see https://host/token?x=1",
            r#"{"api_key": null, "secret": {"a": 1}}"#,
        ] {
            assert_eq!(redacted(text), text);
        }
    }

    /// A PEM private key block becomes one marker; public certificates stay.
    #[test]
    fn redacts_private_key_blocks() {
        let text = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\nafter";
        assert_eq!(redacted(text), "before\n[REDACTED PRIVATE KEY]\nafter");
        let unterminated = "x -----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn";
        assert_eq!(redacted(unterminated), "x [REDACTED PRIVATE KEY]");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
        assert_eq!(redacted(cert), cert);
    }

    /// Redaction is idempotent: redacting twice gives the same text.
    #[test]
    fn redaction_is_idempotent() {
        let text = "API_KEY=abc Bearer abcd1234efgh sk-ABCDEFGH12345678abcd";
        let once = redacted(text);
        assert_eq!(redacted(&once), once);
    }
}
