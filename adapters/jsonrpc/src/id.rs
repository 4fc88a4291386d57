//! A request id exactly as the peer wrote it.
//!
//! JSON-RPC says a peer answers a request under the id it was sent, and a client may choose any
//! JSON value for it. serde_json's `Value` keeps integers only within 64 bits: an id such as
//! `1180591620717411303424` would come back as `1.1805916207174113e+21`, and the client would
//! never match the answer. [`RequestId`] keeps the id's own JSON text, and [`answer_text`]
//! writes an answer around it without going through a `Value`.

use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::RpcError;

/// A request id as JSON text, echoed verbatim in the answer.
#[derive(Debug, Clone)]
pub struct RequestId(Box<RawValue>);

/// Only the `id` member of a message, borrowed as written.
#[derive(Deserialize)]
struct IdOnly<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
}

impl RequestId {
    /// The id of a message whose text is `text`, given the `id` member its parse to a `Value`
    /// produced. Strings, integers, booleans and `null` are exact in a `Value`; any other id
    /// (a number beyond 64 bits or with a fraction, an object, an array) is read again from
    /// the text, as written.
    pub fn of_message(text: &str, parsed: &Value) -> RequestId {
        let exact = match parsed {
            Value::Number(number) => !number.is_f64(),
            Value::Object(_) | Value::Array(_) => false,
            _ => true,
        };
        if !exact {
            if let Ok(IdOnly { id: Some(raw) }) = serde_json::from_str::<IdOnly<'_>>(text) {
                return RequestId(raw.to_owned());
            }
        }
        RequestId::from_value(parsed)
    }

    /// The `id` member of a message's text, when the text is a JSON object that has one (a
    /// message that is otherwise malformed can still name the request it answers).
    pub fn in_text(text: &str) -> Option<RequestId> {
        match serde_json::from_str::<IdOnly<'_>>(text) {
            Ok(IdOnly { id: Some(raw) }) if raw.get() != "null" => Some(RequestId(raw.to_owned())),
            _ => None,
        }
    }

    /// The `id` member of one line (see [`RequestId::in_text`]); `None` for a line that is not
    /// UTF-8.
    pub fn in_line(line: &[u8]) -> Option<RequestId> {
        std::str::from_utf8(line).ok().and_then(RequestId::in_text)
    }

    /// The id `value` (its JSON text).
    pub fn from_value(value: &Value) -> RequestId {
        // Serialising a `Value` to text cannot fail (its map keys are strings), and its text
        // is valid JSON; `null` stands in should either ever not hold.
        let raw = serde_json::to_string(value)
            .ok()
            .and_then(|text| RawValue::from_string(text).ok());
        RequestId(raw.unwrap_or_else(null_raw))
    }

    /// `null`: the id of an answer to a message whose id could not be read.
    pub fn null() -> RequestId {
        RequestId(null_raw())
    }

    /// The id's JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// The id as an integer, when it is one (ids a peer itself issued are).
    pub fn as_i64(&self) -> Option<i64> {
        self.as_json().parse().ok()
    }

    /// The id as a `Value`; a number beyond what a `Value` keeps exactly is rounded, so use it
    /// for logs and comparisons, never for an answer.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.as_json()).unwrap_or(Value::Null)
    }
}

fn null_raw() -> Box<RawValue> {
    // serde_json's default raw value is `null`.
    Box::<RawValue>::default()
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl PartialEq for RequestId {
    fn eq(&self, other: &RequestId) -> bool {
        self.as_json() == other.as_json()
    }
}

impl Eq for RequestId {}

impl Hash for RequestId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_json().hash(state);
    }
}

/// Compares with a `Value` by JSON text (`RequestId::from_value(v) == id`).
impl PartialEq<Value> for RequestId {
    fn eq(&self, other: &Value) -> bool {
        *self == RequestId::from_value(other)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

#[derive(Serialize)]
struct ResultAnswer<'a> {
    id: &'a RequestId,
    result: &'a Value,
}

#[derive(Serialize)]
struct ErrorAnswer<'a> {
    id: &'a RequestId,
    error: &'a RpcError,
}

/// The text of the answer to request `id`: `{"id": …, "result": …}` or `{"id": …, "error": …}`,
/// the id written as the request had it.
pub fn answer_text(id: &RequestId, outcome: Result<&Value, &RpcError>) -> String {
    let text = match outcome {
        Ok(result) => serde_json::to_string(&ResultAnswer { id, result }),
        Err(error) => serde_json::to_string(&ErrorAnswer { id, error }),
    };
    // Neither struct can fail to serialise: string keys, an id that is valid JSON text, and
    // `Value`s. The fallback keeps the id should that ever not hold.
    text.unwrap_or_else(|e| {
        format!(
            r#"{{"id":{id},"error":{{"code":{},"message":"could not write the answer: {}"}}}}"#,
            crate::codes::INTERNAL_ERROR,
            e.to_string().replace(['"', '\\'], "'")
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn id_of(text: &str) -> RequestId {
        let parsed: Value = serde_json::from_str(text).unwrap();
        RequestId::of_message(text, parsed.get("id").unwrap_or(&Value::Null))
    }

    /// An id beyond 64 bits, or with a fraction or an exponent, is answered as the client
    /// wrote it; ordinary ids are unchanged.
    #[test]
    fn ids_are_answered_as_written() {
        for id in [
            "1180591620717411303424",
            "-99999999999999999999999",
            "1.50",
            "1e3",
            "7",
            "-1",
            "18446744073709551615",
            "\"req-1\"",
            "null",
            "{\"b\": 1, \"a\": 2.000}",
            "[1, 2]",
        ] {
            let text = format!(r#"{{"method":"m","id":{id},"params":{{}}}}"#);
            let request_id = id_of(&text);
            let answer = answer_text(&request_id, Ok(&json!({"ok": true})));
            assert_eq!(answer, format!(r#"{{"id":{id},"result":{{"ok":true}}}}"#));
            let error = RpcError::new(crate::codes::INVALID_REQUEST, "no");
            let answer = answer_text(&request_id, Err(&error));
            assert_eq!(
                answer,
                format!(r#"{{"id":{id},"error":{{"code":-32600,"message":"no"}}}}"#)
            );
        }
    }

    /// Integer ids compare with `Value`s and read as integers; the rounded `Value` of a huge id
    /// is not mistaken for it.
    #[test]
    fn ids_compare_by_text() {
        assert_eq!(RequestId::from_value(&json!(5)), json!(5));
        assert_eq!(RequestId::from_value(&json!(5)).as_i64(), Some(5));
        assert_eq!(RequestId::from_value(&json!("5")).as_i64(), None);
        let huge = id_of(r#"{"id":1180591620717411303424}"#);
        assert_ne!(huge, huge.to_value());
        assert_eq!(huge.as_i64(), None);
        assert_eq!(RequestId::null(), Value::Null);
        assert_eq!(huge.to_string(), "1180591620717411303424");
    }
}
