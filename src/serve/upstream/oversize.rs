//! What an upstream line over the limit was, read from the ends the line codec kept.

use ctxbridge_jsonrpc::Overlong;

/// How many bytes of each end of an over-long upstream line are kept to tell whose it was.
pub(super) const OVERSIZE_ENDS: usize = 4 * 1024;

/// An upstream message over the line limit (never held whole): its length, the limit, and
/// what its first and last bytes name — the answer's id, or the notification's method, thread
/// and turn — so the request or the turn it belongs to can be failed instead of waiting
/// forever for a message that will not come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OversizeLine {
    /// The line's length in bytes.
    pub len: usize,
    /// The line limit it went over.
    pub limit: usize,
    /// A response's id (the message starts `{"id":N`).
    pub response_id: Option<i64>,
    /// A notification's or request's method.
    pub method: Option<String>,
    /// The `threadId` it names.
    pub thread: Option<String>,
    /// The `turnId` it names.
    pub turn: Option<String>,
}

impl OversizeLine {
    /// Reads what the kept ends of a dropped line name. Codex writes compact JSON whose first
    /// key is `id` (a response) or `method` (a notification or request); `threadId` and
    /// `turnId` stand before or after the bulk of the params.
    pub fn read(over: &Overlong, limit: usize) -> OversizeLine {
        let response_id = over
            .head
            .strip_prefix(b"{\"id\":")
            .filter(|_| !over.head.starts_with(b"{\"id\":\""))
            .and_then(|rest| {
                let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
            });
        let field =
            |key: &str| string_field(&over.head, key).or_else(|| string_field(&over.tail, key));
        OversizeLine {
            len: over.len,
            limit,
            response_id,
            method: over
                .head
                .starts_with(b"{\"method\":")
                .then(|| string_field(&over.head, "method"))
                .flatten(),
            thread: field("threadId"),
            turn: field("turnId"),
        }
    }
}

/// The first `"key":"value"` string of `text` (ids and method names: no escapes in them).
fn string_field(text: &[u8], key: &str) -> Option<String> {
    let pattern = format!("\"{key}\":\"");
    let pattern = pattern.as_bytes();
    let start = text.windows(pattern.len()).position(|w| w == pattern)? + pattern.len();
    let len = text[start..].iter().position(|b| *b == b'"')?;
    let value = std::str::from_utf8(&text[start..start + len]).ok()?;
    (!value.is_empty() && !value.contains('\\')).then(|| value.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn over(head: &str, tail: &str) -> Overlong {
        Overlong {
            len: 99,
            head: head.as_bytes().to_vec().into(),
            tail: tail.as_bytes().to_vec().into(),
        }
    }

    /// The ends of a dropped line name its answer's id, or its method, thread and turn, from
    /// whichever end holds them; nothing is made up where they do not.
    #[test]
    fn oversize_lines_are_read_from_their_ends() {
        let line = OversizeLine::read(
            &over(
                r#"{"method":"item/completed","params":{"item":{"text":"xx"#,
                r#"xx"},"threadId":"th-1","turnId":"tu-1"}}"#,
            ),
            10,
        );
        assert_eq!(line.method.as_deref(), Some("item/completed"));
        assert_eq!(line.thread.as_deref(), Some("th-1"));
        assert_eq!(line.turn.as_deref(), Some("tu-1"));
        assert_eq!(line.response_id, None);
        let line = OversizeLine::read(&over(r#"{"id":42,"result":{"thread":{"id":"x"#, "}}"), 10);
        assert_eq!((line.response_id, line.method), (Some(42), None));
        let line = OversizeLine::read(&over(r#"{"id":"s-1","result":"#, ""), 10);
        assert_eq!(line.response_id, None);
        let line = OversizeLine::read(&over("garbage", "more"), 10);
        assert_eq!(
            line,
            OversizeLine {
                len: 99,
                limit: 10,
                response_id: None,
                method: None,
                thread: None,
                turn: None
            }
        );
    }
}
