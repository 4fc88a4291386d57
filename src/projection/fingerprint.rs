//! Hashing and canonical JSON: the building blocks of every fingerprint (docs/architecture.md#bounding, §9.4).
//!
//! Canonical JSON here means: object keys sorted by their UTF-8 bytes, no whitespace, strings
//! escaped exactly as `serde_json` escapes them (`"`, `\`, control characters; nothing else),
//! numbers as `serde_json` prints them. The writer sorts keys itself, so the output does not
//! depend on whether `serde_json::Map` keeps insertion order (`preserve_order`) or not.

use serde_json::Value;

pub use crate::util::digest::sha256_hex;
pub(crate) use crate::util::digest::sha256_hex_bytes;

/// The canonical JSON text of `value` (sorted keys, compact).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_canonical_json(value, &mut out);
    out
}

/// Appends the canonical JSON text of `value` to `out`.
pub fn write_canonical_json(value: &Value, out: &mut String) {
    write_canonical_with(value, out, &|scalar, out| match scalar {
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => push_display(out, n),
        Value::String(s) => write_json_string(s, out),
        _ => out.push_str("null"),
    });
}

/// Appends `value` as canonical JSON (keys sorted by bytes, no whitespace), writing every
/// scalar other than `null` with `scalar` — the one traversal behind both the fingerprints'
/// canonical JSON and the tool-input shapes of a bootstrap rendering.
pub fn write_canonical_with(value: &Value, out: &mut String, scalar: &dyn Fn(&Value, &mut String)) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical_with(item, out, scalar);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // BTreeMap iteration is already sorted; this keeps the output canonical when the
            // `preserve_order` feature of serde_json is switched on by some other crate.
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(key, out);
                out.push(':');
                write_canonical_with(item, out, scalar);
            }
            out.push('}');
        }
        Value::Bool(_) | Value::Number(_) | Value::String(_) => scalar(value, out),
    }
}

/// Appends `s` as a JSON string literal, escaped as `serde_json` does.
pub fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut copied = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Every escaped byte is ASCII, so `i` and `i + 1` are char boundaries.
        out.push_str(&s[copied..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        } else {
            out.push_str(escape);
        }
        copied = i + 1;
    }
    out.push_str(&s[copied..]);
    out.push('"');
}

/// Appends a `u64` in decimal without going through `format!`.
pub(crate) fn push_u64(out: &mut String, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        out.push(char::from(b));
    }
}

/// The number of decimal digits of `n`.
pub(crate) fn decimal_digits(mut n: u64) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

fn push_display(out: &mut String, value: &impl std::fmt::Display) {
    use std::fmt::Write;
    // Writing into a String cannot fail.
    let _ = write!(out, "{value}");
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The canonical writer produces exactly serde_json's compact output for key-sorted values.
    #[test]
    fn canonical_json_matches_serde_json_for_sorted_maps() {
        let value = json!({
            "b": [1, 2.5, -3, true, false, null],
            "a": {"z": "quote \" backslash \\ newline \n tab \t bell \u{7} del \u{7f} é 😀 </x>"},
            "": "",
        });
        assert_eq!(
            canonical_json(&value),
            serde_json::to_string(&value).unwrap()
        );
        assert!(canonical_json(&value).starts_with(r#"{"":"","a":"#));
    }

    /// sha256_hex is the lowercase hex digest (checked against the known digest of "abc").
    #[test]
    fn sha256_hex_of_abc() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// push_u64 and decimal_digits agree with the standard formatting.
    #[test]
    fn decimal_helpers() {
        for n in [0u64, 9, 10, 99, 100, 12_345, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, n);
            assert_eq!(s, n.to_string());
            assert_eq!(decimal_digits(n), n.to_string().len());
        }
    }
}
