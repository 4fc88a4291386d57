//! JSON-RPC error codes and the error object.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The error codes of JSON-RPC 2.0, and those the peers here add.
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object. The Codex app-server uses it for every application error
    /// it reports (including "Not initialized").
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// An internal error (a peer that is unavailable or died, a failed callback).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The Codex app-server's backpressure: "Server overloaded; retry later." Its clients
    /// retry with a jittered backoff.
    pub const OVERLOADED: i64 = -32001;
}

/// A JSON-RPC error object: what a peer answered, or what is answered to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The code ([`codes`]).
    pub code: i64,
    /// The message.
    pub message: String,
    /// Extra data, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a message.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Reads an error object as a peer sent it, tolerantly: a missing or non-integer `code`
    /// is [`codes::INTERNAL_ERROR`], a missing `message` says so.
    pub fn from_value(error: &Value) -> RpcError {
        RpcError {
            code: error
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(codes::INTERNAL_ERROR),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_owned(),
            data: error.get("data").cloned(),
        }
    }

    /// The error object as JSON.
    pub fn to_value(&self) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("code".into(), Value::from(self.code));
        object.insert("message".into(), Value::from(self.message.clone()));
        if let Some(data) = &self.data {
            object.insert("data".into(), data.clone());
        }
        Value::Object(object)
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (JSON-RPC error {})", self.message, self.code)?;
        if let Some(data) = &self.data {
            write!(f, ": {data}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    /// An error object survives a round trip; a sloppy one still reads.
    #[test]
    fn error_objects_round_trip() {
        let error = RpcError {
            code: codes::INVALID_REQUEST,
            message: "no".into(),
            data: Some(json!({"x": 1})),
        };
        assert_eq!(RpcError::from_value(&error.to_value()), error);
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            json!({"code": -32600, "message": "no", "data": {"x": 1}})
        );
        let sloppy = RpcError::from_value(&json!({"code": "x"}));
        assert_eq!(sloppy.code, codes::INTERNAL_ERROR);
        assert_eq!(sloppy.message, "(no message)");
        assert_eq!(
            RpcError::new(codes::METHOD_NOT_FOUND, "m").to_string(),
            "m (JSON-RPC error -32601)"
        );
    }
}
