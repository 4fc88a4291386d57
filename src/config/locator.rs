//! Finding a key path in JSON5 text: where a deserialization error's key sits in the file.
//!
//! The typed sections are deserialized from the parsed `serde_json::Value`, which knows no
//! positions. `json5` attaches a line and column to an error raised while deserializing straight
//! from the text, but that route cannot load the configuration itself: it reads every number
//! through `f64` with `as` casts (a negative or fractional `tokenBudget` would silently become
//! another number), turns a duplicated key into an error where the `Value` route keeps the last
//! one, and has no positions inside the `kind`-tagged `backend`, which must be buffered. So the
//! locator uses `json5`'s parser another way: a visitor walks the parsed text along the key path
//! and fails at the value (or key) it names, and `json5` reports where that failure happened.
//! A duplicated key resolves to its last occurrence, as the `Value` route keeps the last value.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a key path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    Key(String),
    Index(usize),
}

/// Renders a key path the way serde_path_to_error does: `a.b[2].c`; `.` for the root.
pub fn display_path(path: &[PathSegment]) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let mut out = String::new();
    for segment in path {
        match segment {
            PathSegment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PathSegment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// What [`locate`] reports for an object member: its value, or its key (an unknown key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Where the value starts.
    Value,
    /// Where the member's key starts (for an array element: where the element starts).
    Key,
}

/// Finds `path` in the JSON5 `source` (which should already have parsed) and returns the
/// 1-based line and column (in characters) of its value, or of its key under [`Target::Key`].
/// When the full path is not in the text (a missing key), the value of the deepest ancestor
/// found is reported; a duplicated key resolves to its last occurrence.
pub fn locate(source: &str, path: &[PathSegment], target: Target) -> (usize, usize) {
    // Which occurrence of each level's key to follow: the last one, counted level by level.
    let mut picks = Vec::with_capacity(path.len());
    for (level, segment) in path.iter().enumerate() {
        match segment {
            PathSegment::Index(_) => picks.push(0),
            PathSegment::Key(_) => match walk(source, path, &picks, Some(level), target) {
                Ok(count) => picks.push(count.saturating_sub(1)),
                // An ancestor is missing: the walk stopped there.
                Err(position) => return position,
            },
        }
    }
    // Without a count to take, every walk ends in a stop: `Ok` cannot happen.
    match walk(source, path, &picks, None, target) {
        Ok(_) => (1, 1),
        Err(position) => position,
    }
}

/// One walk over the text. `Ok(n)`: the number of occurrences of the key at level `count_at`.
/// `Err(position)`: where the walk stopped (the target, or the deepest ancestor found).
fn walk(
    source: &str,
    path: &[PathSegment],
    picks: &[usize],
    count_at: Option<usize>,
    target: Target,
) -> Result<usize, (usize, usize)> {
    let Ok(mut deserializer) = json5::Deserializer::from_str(source) else {
        return Err((1, 1));
    };
    let walk = Walk {
        path,
        picks,
        count_at,
        target,
    };
    walk.deserialize(&mut deserializer).map_err(|error| {
        let json5::Error::Message { location, .. } = error;
        location.map_or((1, 1), |l| (l.line, l.column))
    })
}

/// The walk from one value down the rest of the path. Its errors are raised while `json5`
/// deserializes the value (or key) where the walk stops, so they carry that position.
struct Walk<'a> {
    path: &'a [PathSegment],
    picks: &'a [usize],
    count_at: Option<usize>,
    target: Target,
}

impl Walk<'_> {
    fn stop<T, E: de::Error>() -> Result<T, E> {
        Err(E::custom("located"))
    }

    fn deeper(&self) -> Walk<'_> {
        Walk {
            path: self.path.get(1..).unwrap_or_default(),
            picks: self.picks.get(1..).unwrap_or_default(),
            count_at: self.count_at.and_then(|level| level.checked_sub(1)),
            target: self.target,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON5 value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let Some(PathSegment::Key(wanted)) = self.path.first() else {
            return Self::stop();
        };
        if self.count_at == Some(0) {
            let mut count = 0;
            while let Some(key) = map.next_key::<String>()? {
                if &key == wanted {
                    count += 1;
                }
                map.next_value::<IgnoredAny>()?;
            }
            return Ok(count);
        }
        let pick = self.picks.first().copied().unwrap_or(0);
        let mut seen = 0;
        loop {
            let key = KeySeed {
                wanted,
                // Fail at the key itself when it is the target.
                stop_here: self.target == Target::Key && self.path.len() == 1 && seen == pick,
            };
            match map.next_key_seed(key)? {
                None => return Self::stop(),
                Some(true) if seen == pick => return map.next_value_seed(self.deeper()),
                Some(true) => seen += 1,
                Some(false) => {}
            }
            map.next_value::<IgnoredAny>()?;
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let Some(PathSegment::Index(wanted)) = self.path.first() else {
            return Self::stop();
        };
        for _ in 0..*wanted {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Self::stop();
            }
        }
        match seq.next_element_seed(self.deeper())? {
            Some(found) => Ok(found),
            None => Self::stop(),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<usize, E> {
        Self::stop()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<usize, E> {
        Self::stop()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<usize, E> {
        Self::stop()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<usize, E> {
        Self::stop()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<usize, E> {
        Self::stop()
    }

    fn visit_unit<E: de::Error>(self) -> Result<usize, E> {
        Self::stop()
    }
}

/// Reads an object key; `true` when it is the wanted one. Fails (at the key) when the key is
/// the target.
struct KeySeed<'a> {
    wanted: &'a str,
    stop_here: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        let found = key == self.wanted;
        if found && self.stop_here {
            return Err(E::custom("located"));
        }
        Ok(found)
    }
}

/// 1-based line and column (in characters) of byte offset `pos`.
pub fn line_column(source: &str, pos: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    let mut chars = source.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if i >= pos {
            break;
        }
        match c {
            '\r' => {
                if chars.peek().map(|&(_, n)| n) != Some('\n') {
                    line += 1;
                    column = 1;
                }
            }
            '\n' | '\u{2028}' | '\u{2029}' => {
                line += 1;
                column = 1;
            }
            _ => column += 1,
        }
    }
    (line, column)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn key(k: &str) -> PathSegment {
        PathSegment::Key(k.to_string())
    }

    fn at(source: &str, path: &[PathSegment]) -> (usize, usize) {
        locate(source, path, Target::Value)
    }

    /// The locator handles quoted and unquoted keys, comments, strings with delimiters and
    /// escapes, nested arrays, and duplicated keys (last wins). (`-Infinity`, not `+Infinity`:
    /// json5 0.4 cannot read the latter, so no configuration containing it ever loads.)
    #[test]
    fn locator_walks_json5() {
        let src = r#"// leading comment with { braces ]
{
  /* a: 1 */ 'a': "x,}]\"//",
  "b\u0041": [1, /* , */ [2, 3], { c: 'd' }],
  $e_1: { f: 1, f: 2 },
  g: 'it\'s',
  h: "line\
continued", i: -Infinity, j: .5, k: 0x1F,
}"#;
        assert_eq!(at(src, &[key("a")]), (3, 19));
        assert_eq!(
            at(
                src,
                &[key("bA"), PathSegment::Index(1), PathSegment::Index(1)]
            ),
            (4, 30)
        );
        assert_eq!(
            at(src, &[key("bA"), PathSegment::Index(2), key("c")]),
            (4, 39)
        );
        assert_eq!(at(src, &[key("$e_1"), key("f")]), (5, 20));
        assert_eq!(at(src, &[key("g")]), (6, 6));
        assert_eq!(at(src, &[key("i")]), (8, 16));
        assert_eq!(at(src, &[key("k")]), (8, 37));
        // A missing member reports the deepest ancestor found.
        assert_eq!(at(src, &[key("$e_1"), key("zz")]), (5, 9));
        assert_eq!(locate(src, &[key("$e_1"), key("zz")], Target::Key), (5, 9));
        assert_eq!(locate(src, &[key("$e_1")], Target::Key), (5, 3));
        // A duplicated key's own position is its last occurrence too.
        assert_eq!(locate(src, &[key("$e_1"), key("f")], Target::Key), (5, 17));
        // An index past the end stops at the array.
        assert_eq!(
            at(src, &[key("bA"), PathSegment::Index(9)]),
            at(src, &[key("bA")])
        );
    }

    /// Renders JSON values as JSON5 in varied styles, recording where each value starts.
    struct Json5Writer {
        out: String,
        seed: u64,
        starts: Vec<(Vec<PathSegment>, usize)>,
    }

    impl Json5Writer {
        fn coin(&mut self, one_in: u64) -> bool {
            // A small LCG: the style choices only need to vary, not to be good random numbers.
            self.seed = self
                .seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.seed >> 33) % one_in == 0
        }

        fn trivia(&mut self) {
            if self.coin(3) {
                self.out.push_str("\n  ");
            }
            if self.coin(5) {
                self.out.push_str("/* a, } ] 'comment' */ ");
            }
            if self.coin(6) {
                self.out.push_str("// line comment: { [\n");
            }
            if self.coin(4) {
                self.out.push('\t');
            }
        }

        fn key(&mut self, key: &str) {
            let identifier = key
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
            if identifier && self.coin(2) {
                self.out.push_str(key);
            } else if self.coin(2) {
                self.out.push('\'');
                self.out
                    .push_str(&key.replace('\\', "\\\\").replace('\'', "\\'"));
                self.out.push('\'');
            } else {
                self.out.push_str(&serde_json::to_string(key).unwrap());
            }
        }

        fn value(&mut self, path: &mut Vec<PathSegment>, value: &Value) {
            self.trivia();
            self.starts.push((path.clone(), self.out.len()));
            match value {
                Value::Object(map) => {
                    self.out.push('{');
                    for (i, (k, v)) in map.iter().enumerate() {
                        if i > 0 {
                            self.out.push(',');
                        }
                        self.trivia();
                        self.key(k);
                        self.trivia();
                        self.out.push(':');
                        path.push(PathSegment::Key(k.clone()));
                        self.value(path, v);
                        path.pop();
                        self.trivia();
                    }
                    if !map.is_empty() && self.coin(2) {
                        self.out.push(',');
                    }
                    self.trivia();
                    self.out.push('}');
                }
                Value::Array(items) => {
                    self.out.push('[');
                    for (i, v) in items.iter().enumerate() {
                        if i > 0 {
                            self.out.push(',');
                        }
                        path.push(PathSegment::Index(i));
                        self.value(path, v);
                        path.pop();
                        self.trivia();
                    }
                    if !items.is_empty() && self.coin(2) {
                        self.out.push(',');
                    }
                    self.out.push(']');
                }
                Value::String(text) if self.coin(2) => {
                    self.out.push('\'');
                    self.out
                        .push_str(&text.replace('\\', "\\\\").replace('\'', "\\'"));
                    self.out.push('\'');
                }
                other => self.out.push_str(&other.to_string()),
            }
        }
    }

    fn json_tree() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let key = prop_oneof![
            "[a-z_$][a-z0-9_]{0,6}",
            "[a-z]{1,3}[-. /:,{}\\[\\]'\"\\\\]{1,2}[a-z]{0,2}",
            "[éü]{1,2}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "[a-z ,:{}\\[\\]/*'\"\\\\é]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// For any JSON tree rendered as JSON5 with comments, quoted and unquoted keys, trailing
        /// commas and line breaks, the locator finds every value where it was written, and the
        /// text is JSON5 that parses back to the same tree.
        #[test]
        fn locator_finds_every_value(tree in json_tree(), seed in proptest::prelude::any::<u64>()) {
            let mut writer = Json5Writer { out: String::new(), seed, starts: Vec::new() };
            writer.value(&mut Vec::new(), &tree);
            let parsed: Value = json5::from_str(&writer.out).unwrap();
            proptest::prop_assert_eq!(&parsed, &tree, "source: {}", writer.out);
            for (path, start) in &writer.starts {
                let found = locate(&writer.out, path, Target::Value);
                proptest::prop_assert_eq!(found, line_column(&writer.out, *start), "path {:?} in {}", path, writer.out);
            }
        }
    }

    /// Columns count characters, not bytes, and CRLF counts as one line break.
    #[test]
    fn columns_count_characters() {
        let src = "{\r\n  ü: 'é', x: 1 }";
        assert_eq!(at(src, &[key("x")]), (2, 14));
        assert_eq!(at(src, &[key("ü")]), (2, 6));
    }
}
