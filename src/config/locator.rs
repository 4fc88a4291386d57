//! Finding a key path in JSON5 text: where a deserialization error's key sits in the file.
//!
//! The typed sections are deserialized from the parsed `serde_json::Value`, which knows no
//! positions; this scanner walks the original text to the value (or key) a key path names. It
//! exists because `json5`'s own positions cannot replace it: they are only attached when
//! deserializing straight from the text, and that route reads every number through `f64` with
//! `as` casts (a negative or fractional `tokenBudget` would silently become another number),
//! turns a duplicated key into an error where the `Value` route keeps the last one, and loses
//! positions inside the `kind`-tagged `backend`, which has to be buffered.

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

/// Where a key path sits in the text: byte offsets of the value and (for object members) of
/// its key. When the full path is not in the text (a missing key), the deepest existing
/// ancestor is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub key: Option<usize>,
    pub value: usize,
    /// How many segments of the path were found.
    pub depth: usize,
}

/// Finds `path` in the JSON5 `source` (which should already have parsed). Handles quoted and
/// unquoted keys, comments, all string forms and nesting; a duplicated key resolves to its last
/// occurrence, as the parser keeps the last value.
pub fn locate(source: &str, path: &[PathSegment]) -> Located {
    let mut scanner = Scanner {
        src: source,
        pos: 0,
    };
    scanner.skip_trivia();
    let root = scanner.pos;
    scanner.descend(
        path,
        Located {
            key: None,
            value: root,
            depth: 0,
        },
    )
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

struct Scanner<'a> {
    src: &'a str,
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        let mut chars = self.src[self.pos..].chars();
        chars.next();
        chars.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Skips whitespace (JSON5 allows any Unicode space and the BOM) and comments.
    fn skip_trivia(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() || c == '\u{FEFF}' => {
                    self.bump();
                }
                Some('/') if self.peek_second() == Some('/') => {
                    while let Some(c) = self.peek() {
                        if matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}') {
                            break;
                        }
                        self.bump();
                    }
                }
                Some('/') if self.peek_second() == Some('*') => {
                    self.pos += 2;
                    match self.src[self.pos..].find("*/") {
                        Some(end) => self.pos += end + 2,
                        None => self.pos = self.src.len(),
                    }
                }
                _ => return,
            }
        }
    }

    /// Reads a quoted string starting at the opening quote; returns its decoded value.
    fn string(&mut self) -> String {
        let Some(quote) = self.bump() else {
            return String::new();
        };
        let mut out = String::new();
        while let Some(c) = self.bump() {
            match c {
                c if c == quote => break,
                '\\' => match self.bump() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('b') => out.push('\u{8}'),
                    Some('f') => out.push('\u{c}'),
                    Some('v') => out.push('\u{b}'),
                    Some('0') => out.push('\0'),
                    Some('x') => {
                        let hex = self.take_hex(2);
                        out.extend(hex.and_then(char::from_u32));
                    }
                    Some('u') => out.extend(self.unicode_escape()),
                    // A backslash before a line terminator continues the line.
                    Some('\r') => {
                        if self.peek() == Some('\n') {
                            self.bump();
                        }
                    }
                    Some('\n' | '\u{2028}' | '\u{2029}') => {}
                    Some(other) => out.push(other),
                    None => break,
                },
                c => out.push(c),
            }
        }
        out
    }

    fn take_hex(&mut self, digits: usize) -> Option<u32> {
        let end = self.pos + digits;
        let hex = self.src.get(self.pos..end)?;
        let value = u32::from_str_radix(hex, 16).ok()?;
        self.pos = end;
        Some(value)
    }

    /// After `\u`: four hex digits, combining a surrogate pair when one follows.
    fn unicode_escape(&mut self) -> Option<char> {
        let first = self.take_hex(4)?;
        if (0xD800..0xDC00).contains(&first) && self.src[self.pos..].starts_with("\\u") {
            let save = self.pos;
            self.pos += 2;
            if let Some(second) = self.take_hex(4) {
                if (0xDC00..0xE000).contains(&second) {
                    return char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00));
                }
            }
            self.pos = save;
        }
        char::from_u32(first)
    }

    /// An object key: quoted, or an identifier name (which may contain `\u` + four-hex-digit
    /// escapes).
    fn key(&mut self) -> String {
        match self.peek() {
            Some('"' | '\'') => self.string(),
            _ => {
                let mut out = String::new();
                while let Some(c) = self.peek() {
                    if c == '\\' {
                        self.bump();
                        if self.peek() == Some('u') {
                            self.bump();
                            out.extend(self.unicode_escape());
                        }
                    } else if c.is_alphanumeric() || c == '_' || c == '$' || is_id_continue_extra(c)
                    {
                        out.push(c);
                        self.bump();
                    } else {
                        break;
                    }
                }
                out
            }
        }
    }

    /// Skips one value of any kind.
    fn skip_value(&mut self) {
        self.skip_trivia();
        match self.peek() {
            Some('{') => {
                self.bump();
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None => return,
                        Some('}') => {
                            self.bump();
                            return;
                        }
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let before = self.pos;
                            self.key();
                            self.skip_trivia();
                            if self.peek() == Some(':') {
                                self.bump();
                            }
                            self.skip_value();
                            if self.pos == before {
                                // Not a key, not a value: stop rather than loop forever.
                                self.bump();
                            }
                        }
                    }
                }
            }
            Some('[') => {
                self.bump();
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None => return,
                        Some(']') => {
                            self.bump();
                            return;
                        }
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let before = self.pos;
                            self.skip_value();
                            if self.pos == before {
                                self.bump();
                            }
                        }
                    }
                }
            }
            Some('"' | '\'') => {
                self.string();
            }
            _ => {
                // A number, `true`, `false`, `null`, `Infinity`, `NaN`: up to a delimiter.
                while let Some(c) = self.peek() {
                    if matches!(c, ',' | '}' | ']' | '/' | ':') || c.is_whitespace() {
                        break;
                    }
                    self.bump();
                }
            }
        }
    }

    /// With the scanner at a value (trivia skipped), follows `path` into it.
    fn descend(&mut self, path: &[PathSegment], here: Located) -> Located {
        let Some((segment, rest)) = path.split_first() else {
            return here;
        };
        match (segment, self.peek()) {
            (PathSegment::Key(wanted), Some('{')) => {
                self.bump();
                // (key offset, value offset) of the last member named `wanted`.
                let mut last_match: Option<(usize, usize)> = None;
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None | Some('}') => break,
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let key_pos = self.pos;
                            let key = self.key();
                            self.skip_trivia();
                            if self.peek() == Some(':') {
                                self.bump();
                            }
                            self.skip_trivia();
                            let value_pos = self.pos;
                            if &key == wanted {
                                last_match = Some((key_pos, value_pos));
                            }
                            self.skip_value();
                            if self.pos == key_pos {
                                break;
                            }
                        }
                    }
                }
                match last_match {
                    Some((key_pos, value_pos)) => {
                        self.pos = value_pos;
                        self.descend(
                            rest,
                            Located {
                                key: Some(key_pos),
                                value: value_pos,
                                depth: here.depth + 1,
                            },
                        )
                    }
                    None => here,
                }
            }
            (PathSegment::Index(wanted), Some('[')) => {
                self.bump();
                let mut index = 0;
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None | Some(']') => return here,
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let value_pos = self.pos;
                            if index == *wanted {
                                return self.descend(
                                    rest,
                                    Located {
                                        key: None,
                                        value: value_pos,
                                        depth: here.depth + 1,
                                    },
                                );
                            }
                            self.skip_value();
                            if self.pos == value_pos {
                                return here;
                            }
                            index += 1;
                        }
                    }
                }
            }
            _ => here,
        }
    }
}

/// Identifier characters beyond alphanumerics that ES5 allows (ZWNJ, ZWJ, combining marks are
/// covered by `is_alphanumeric` only partly; these two are common enough to name).
fn is_id_continue_extra(c: char) -> bool {
    matches!(c, '\u{200C}' | '\u{200D}')
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
        line_column(source, locate(source, path).value)
    }

    /// The locator handles quoted and unquoted keys, comments, strings with delimiters and
    /// escapes, nested arrays, and duplicated keys (last wins).
    #[test]
    fn locator_walks_json5() {
        let src = r#"// leading comment with { braces ]
{
  /* a: 1 */ 'a': "x,}]\"//",
  "b\u0041": [1, /* , */ [2, 3], { c: 'd' }],
  $e_1: { f: 1, f: 2 },
  g: 'it\'s',
  h: "line\
continued", i: +Infinity, j: .5, k: 0x1F,
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
        let located = locate(src, &[key("$e_1"), key("zz")]);
        assert_eq!(located.depth, 1);
        assert_eq!(line_column(src, located.value), (5, 9));
        assert_eq!(line_column(src, located.key.unwrap()), (5, 3));
        // An index past the end stops at the array.
        assert_eq!(locate(src, &[key("bA"), PathSegment::Index(9)]).depth, 1);
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
                let found = locate(&writer.out, path);
                proptest::prop_assert_eq!(found.depth, path.len(), "path {:?} in {}", path, writer.out);
                proptest::prop_assert_eq!(found.value, *start, "path {:?} in {}", path, writer.out);
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
