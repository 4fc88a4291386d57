//! What one peer reads from the other, classified once for every user of the crate, and the
//! lines it writes back.
//!
//! Reading is strict about the envelope and nothing else: a line is a request (`method` and a
//! non-null `id`), a notification (`method`, no id), or an answer (`id` with exactly one of
//! `result` and a well-formed `error`). Anything else is [`Malformed`], and the caller decides
//! what that costs: the engine protocol fails the engine (the framing of what follows is
//! suspect), the Codex client and `serve` skip the line with a warning.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::RpcError;
use crate::id::{answer_text, RequestId};

/// A message from the other peer.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request that wants an answer under `id`.
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    /// A notification (no answer).
    Notification { method: String, params: Value },
    /// The answer to one of this peer's requests.
    Response {
        id: RequestId,
        outcome: Result<Value, RpcError>,
    },
}

/// Why a line is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    #[error("not JSON ({0})")]
    NotJson(String),
    #[error("{0}, not a JSON-RPC object")]
    NotAnObject(&'static str),
    #[error("neither a request nor a response")]
    Unclassifiable,
    #[error("a response with both `result` and `error`")]
    ResultAndError,
    #[error("a malformed `error` object")]
    BadErrorObject,
    #[error("`method` is not a string")]
    BadMethod,
}

impl Incoming {
    /// Classifies one line (one trailing `\r` ignored). `Ok(None)`: a blank line.
    pub fn parse(line: &[u8]) -> Result<Option<Incoming>, Malformed> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let value: Value =
            serde_json::from_slice(line).map_err(|e| Malformed::NotJson(e.to_string()))?;
        let Value::Object(object) = value else {
            return Err(Malformed::NotAnObject(json_kind(&value)));
        };
        // The id's text, for an id a `Value` does not keep exactly (see `RequestId`).
        let text = std::str::from_utf8(line).unwrap_or_default();
        Incoming::of_object(object, text).map(Some)
    }

    /// Classifies one parsed message whose text was `text` (the text is read again only for
    /// an id a `Value` does not keep exactly; pass `""` when there is none).
    pub fn of_object(mut object: Map<String, Value>, text: &str) -> Result<Incoming, Malformed> {
        let id = object
            .remove("id")
            .filter(|id| !id.is_null())
            .map(|id| RequestId::of_message(text, &id));
        if let Some(method) = object.remove("method") {
            let Value::String(method) = method else {
                return Err(Malformed::BadMethod);
            };
            let params = object.remove("params").unwrap_or(Value::Null);
            return Ok(match id {
                Some(id) => Incoming::Request { id, method, params },
                None => Incoming::Notification { method, params },
            });
        }
        let outcome = match (object.remove("result"), object.remove("error")) {
            (Some(_), Some(_)) => return Err(Malformed::ResultAndError),
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(error_object(error)?),
            (None, None) => return Err(Malformed::Unclassifiable),
        };
        Ok(Incoming::Response {
            id: id.unwrap_or_else(RequestId::null),
            outcome,
        })
    }
}

fn error_object(error: Value) -> Result<RpcError, Malformed> {
    let Value::Object(mut object) = error else {
        return Err(Malformed::BadErrorObject);
    };
    let code = object
        .get("code")
        .and_then(Value::as_i64)
        .ok_or(Malformed::BadErrorObject)?;
    let message = match object.remove("message") {
        Some(Value::String(message)) => message,
        _ => return Err(Malformed::BadErrorObject),
    };
    Ok(RpcError {
        code,
        message,
        data: object.remove("data"),
    })
}

/// What kind of JSON value `value` is, with its article ("an array").
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether a peer's messages carry `"jsonrpc": "2.0"` (JSON-RPC 2.0 as written) or leave it
/// out (the Codex app-server's dialect, which is otherwise the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `"jsonrpc": "2.0"` in every message.
    JsonRpc2,
    /// No `jsonrpc` member.
    Bare,
}

impl Dialect {
    fn version(self) -> Option<&'static str> {
        match self {
            Dialect::JsonRpc2 => Some("2.0"),
            Dialect::Bare => None,
        }
    }

    /// A request line (with its `\n`); the params are serialised straight from `params`, so
    /// an absent optional field stays absent.
    pub fn request_line<P: Serialize + ?Sized>(
        self,
        id: i64,
        method: &str,
        params: &P,
    ) -> Result<String, serde_json::Error> {
        #[derive(Serialize)]
        struct Request<'a, P: Serialize + ?Sized> {
            #[serde(skip_serializing_if = "Option::is_none")]
            jsonrpc: Option<&'static str>,
            id: i64,
            method: &'a str,
            params: &'a P,
        }
        line(&Request {
            jsonrpc: self.version(),
            id,
            method,
            params,
        })
    }

    /// A notification line (with its `\n`); `params: None` leaves the member out.
    pub fn notification_line<P: Serialize + ?Sized>(
        self,
        method: &str,
        params: Option<&P>,
    ) -> Result<String, serde_json::Error> {
        #[derive(Serialize)]
        struct Notification<'a, P: Serialize + ?Sized> {
            #[serde(skip_serializing_if = "Option::is_none")]
            jsonrpc: Option<&'static str>,
            method: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            params: Option<&'a P>,
        }
        line(&Notification {
            jsonrpc: self.version(),
            method,
            params,
        })
    }

    /// The answer line (with its `\n`) to the other peer's request `id`.
    pub fn answer_line(self, id: &RequestId, outcome: Result<&Value, &RpcError>) -> String {
        let mut line = match self {
            Dialect::Bare => answer_text(id, outcome),
            Dialect::JsonRpc2 => {
                #[derive(Serialize)]
                struct Answer<'a> {
                    jsonrpc: &'static str,
                    id: &'a RequestId,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    result: Option<&'a Value>,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    error: Option<&'a RpcError>,
                }
                let answer = Answer {
                    jsonrpc: "2.0",
                    id,
                    result: outcome.ok(),
                    error: outcome.err(),
                };
                // As in `answer_text`: this cannot fail; the bare answer keeps the id if it did.
                serde_json::to_string(&answer).unwrap_or_else(|_| answer_text(id, outcome))
            }
        };
        line.push('\n');
        line
    }
}

fn line<T: Serialize>(message: &T) -> Result<String, serde_json::Error> {
    let mut line = serde_json::to_string(message)?;
    line.push('\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn parse(line: &[u8]) -> Result<Incoming, Malformed> {
        Incoming::parse(line).map(|incoming| incoming.unwrap())
    }

    /// Responses, errors, requests and notifications are told apart; garbage is malformed.
    #[test]
    fn messages_are_classified() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":3,"result":null}"#).unwrap(),
            Incoming::Response {
                id: RequestId::from_value(&json!(3)),
                outcome: Ok(Value::Null)
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"boom"}}"#).unwrap(),
            Incoming::Response {
                id: RequestId::from_value(&json!(4)),
                outcome: Err(RpcError {
                    code: -1,
                    message: "boom".into(),
                    data: None
                })
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"x","method":"runtime/llmComplete","params":{"a":1}}"#)
                .unwrap(),
            Incoming::Request {
                id: RequestId::from_value(&json!("x")),
                method: "runtime/llmComplete".into(),
                params: json!({"a":1})
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"$/progress"}"#).unwrap(),
            Incoming::Notification {
                method: "$/progress".into(),
                params: Value::Null
            }
        );
        assert_eq!(
            parse(br#"{"method":"m","id":null,"params":[1]}"#).unwrap(),
            Incoming::Notification {
                method: "m".into(),
                params: json!([1])
            }
        );
        assert!(matches!(parse(b"hello world"), Err(Malformed::NotJson(_))));
        assert_eq!(parse(b"[1,2]"), Err(Malformed::NotAnObject("an array")));
        assert_eq!(parse(br#"{"id":1}"#), Err(Malformed::Unclassifiable));
        assert_eq!(
            parse(br#"{"id":1,"error":"no"}"#),
            Err(Malformed::BadErrorObject)
        );
        assert_eq!(
            parse(br#"{"id":1,"result":1,"error":{"code":1,"message":"x"}}"#),
            Err(Malformed::ResultAndError)
        );
        assert_eq!(parse(br#"{"method":5,"id":1}"#), Err(Malformed::BadMethod));
        assert_eq!(Incoming::parse(b"  \r").unwrap(), None);
        // A request id beyond 64 bits is kept as written.
        let Incoming::Request { id, .. } =
            parse(br#"{"id":1180591620717411303424,"method":"m"}"#).unwrap()
        else {
            panic!("not a request")
        };
        assert_eq!(id.as_json(), "1180591620717411303424");
    }

    /// Both dialects write one line per message; JSON-RPC 2.0 names its version, the bare
    /// dialect does not; absent params stay absent.
    #[test]
    fn lines_are_written_in_the_dialect() {
        let params = json!({"a": 1});
        assert_eq!(
            Dialect::JsonRpc2
                .request_line(7, "assemble", &params)
                .unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"assemble\",\"params\":{\"a\":1}}\n"
        );
        assert_eq!(
            Dialect::Bare
                .request_line(7, "turn/start", &params)
                .unwrap(),
            "{\"id\":7,\"method\":\"turn/start\",\"params\":{\"a\":1}}\n"
        );
        assert_eq!(
            Dialect::Bare
                .notification_line::<Value>("initialized", None)
                .unwrap(),
            "{\"method\":\"initialized\"}\n"
        );
        let id = RequestId::from_value(&json!("x"));
        assert_eq!(
            Dialect::JsonRpc2.answer_line(&id, Ok(&json!(1))),
            "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":1}\n"
        );
        let error = RpcError::new(-32601, "no");
        assert_eq!(
            Dialect::Bare.answer_line(&id, Err(&error)),
            "{\"id\":\"x\",\"error\":{\"code\":-32601,\"message\":\"no\"}}\n"
        );
    }
}
