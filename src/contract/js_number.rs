//! Numbers as JavaScript writes them: the contract's token counts are JS numbers (`f64`), and a
//! whole one goes on the wire as `12`, not serde_json's `12.0`.

use serde::Serializer;

/// The largest integer an `f64` holds exactly (2^53).
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

/// Writes `value` as an integer when it is a whole number an `f64` holds exactly, else as it is.
pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.fract() == 0.0 && value.abs() <= MAX_EXACT {
        // Exact: a whole number within ±2^53 converts to i64 without loss.
        serializer.serialize_i64(*value as i64)
    } else {
        serializer.serialize_f64(*value)
    }
}

/// [`serialize`] for an optional number.
pub fn serialize_option<S: Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serialize(value, serializer),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    #[derive(serde::Serialize)]
    struct N {
        #[serde(serialize_with = "super::serialize")]
        n: f64,
        #[serde(serialize_with = "super::serialize_option")]
        o: Option<f64>,
    }

    fn json(n: f64, o: Option<f64>) -> String {
        serde_json::to_string(&N { n, o }).unwrap()
    }

    /// Whole numbers lose their `.0`; fractions, huge values and non-numbers stay as serde_json
    /// writes them.
    #[test]
    fn whole_numbers_are_written_as_integers() {
        assert_eq!(json(0.0, Some(12.0)), r#"{"n":0,"o":12}"#);
        assert_eq!(json(-3.0, None), r#"{"n":-3,"o":null}"#);
        assert_eq!(json(2.5, Some(0.25)), r#"{"n":2.5,"o":0.25}"#);
        assert_eq!(json(1e300, None), r#"{"n":1e+300,"o":null}"#);
        assert_eq!(json(f64::NAN, None), r#"{"n":null,"o":null}"#);
    }
}
