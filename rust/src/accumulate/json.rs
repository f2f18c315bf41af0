//! JSON text of the accumulated objects, byte for byte what `serde_json::to_vec` writes, with
//! strings escaped sixteen bytes at a time.
//!
//! A snapshot is mostly its texts (tens of kilobytes for a long answer); serde_json escapes a
//! string byte by byte, which made writing them the larger part of taking a snapshot. Only
//! strings are written differently: numbers go through serde_json itself.

use serde_json::{Map, Number, Value};

/// Appends `value` as compact JSON.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            // Writing into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, n);
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => write_array(out, items),
        Value::Object(map) => write_object(out, map.iter()),
    }
}

/// The keys of one object [`write_as_serde`] compares a new key with (beyond: false).
const AS_IS_KEYS: usize = 32;

/// Appends to `out` what [`write_value`] writes of the value serde_json parses `json` (one valid
/// JSON value) to, without building that value: `json` copied, each number that serde would
/// write otherwise (`0.000015` is written `1.5e-5`, `1E3` `1000.0`) parsed as serde parses it and
/// written as serde writes it. False, with `out` as it was, where that is not sure: whitespace
/// between tokens, an escape in a string, an object with a repeated key (serde's map keeps one)
/// or more than [`AS_IS_KEYS`] keys, a number serde does not parse. What `usage` objects and
/// vendor members full of scores are, as servers send them.
pub(crate) fn write_as_serde(out: &mut Vec<u8>, json: &[u8]) -> bool {
    let before = out.len();
    if copy_as_serde(out, json).is_none() {
        out.truncate(before);
        return false;
    }
    true
}

fn copy_as_serde(out: &mut Vec<u8>, json: &[u8]) -> Option<()> {
    // Per open container: is it an object, and where its keys start in `keys`.
    let mut open: Vec<(bool, usize)> = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    // The next string of the innermost object is a key.
    let mut key_next = false;
    // `json[copied..]` is still to be copied.
    let mut copied = 0;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                let start = i + 1;
                let len = crate::lex::quote_or_backslash(json, start)? - start;
                if json[start + len] == b'\\' {
                    return None;
                }
                if key_next {
                    let &(_, first) = open.last()?;
                    let key = &json[start..start + len];
                    if keys.len() - first == AS_IS_KEYS || keys[first..].contains(&key) {
                        return None;
                    }
                    keys.push(key);
                    key_next = false;
                }
                i = start + len + 1;
                continue;
            }
            b'{' => {
                open.push((true, keys.len()));
                key_next = true;
            }
            b'[' => open.push((false, keys.len())),
            b'}' | b']' => {
                let (_, first) = open.pop()?;
                keys.truncate(first);
                key_next = false;
            }
            b',' => key_next = matches!(open.last(), Some((true, _))),
            b':' => key_next = false,
            b'-' | b'0'..=b'9' => {
                let len = json[i..]
                    .iter()
                    .position(|b| !b.is_ascii_alphanumeric() && !matches!(b, b'.' | b'+' | b'-'))
                    .unwrap_or(json.len() - i);
                let number = &json[i..i + len];
                // An unsigned integer of at most 18 digits, no leading zero: written as it is.
                let plain = len <= 18
                    && number.iter().all(u8::is_ascii_digit)
                    && (len == 1 || number[0] != b'0');
                if !plain {
                    let parsed = serde_json::from_slice::<Number>(number).ok()?;
                    out.extend_from_slice(&json[copied..i]);
                    let _ = serde_json::to_writer(&mut *out, &parsed);
                    copied = i + len;
                }
                i += len;
                continue;
            }
            b't' | b'r' | b'u' | b'e' | b'f' | b'a' | b'l' | b's' | b'n' => {}
            // Whitespace, anything else.
            _ => return None,
        }
        i += 1;
    }
    if !open.is_empty() {
        return None;
    }
    out.extend_from_slice(&json[copied..]);
    Some(())
}

/// Appends a JSON array of `items`.
pub(crate) fn write_array<'v, I>(out: &mut Vec<u8>, items: I)
where
    I: IntoIterator<Item = &'v Value>,
{
    write_list(out, items, |out, _, item| write_value(out, item));
}

/// Appends a JSON object of `entries`, in their order.
pub(crate) fn write_object<'v, I>(out: &mut Vec<u8>, entries: I)
where
    I: IntoIterator<Item = (&'v String, &'v Value)>,
{
    write_entries(out, entries, |out, _, value| write_value(out, value));
}

/// Appends a JSON array of `items`, each written by `write` (given its index).
pub(crate) fn write_list<T, I, F>(out: &mut Vec<u8>, items: I, mut write: F)
where
    I: IntoIterator<Item = T>,
    F: FnMut(&mut Vec<u8>, usize, T),
{
    out.push(b'[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, i, item);
    }
    out.push(b']');
}

/// Appends a JSON object of `entries`, each value written by `write` (given its key).
pub(crate) fn write_entries<'v, V: 'v, I, F>(out: &mut Vec<u8>, entries: I, mut write: F)
where
    I: IntoIterator<Item = (&'v String, &'v V)>,
    F: FnMut(&mut Vec<u8>, &'v str, &'v V),
{
    out.push(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, key);
        out.push(b':');
        write(out, key, value);
    }
    out.push(b'}');
}

/// Appends a list of objects (the items of a response, the choices of a completion).
pub(crate) fn write_objects(out: &mut Vec<u8>, objects: &[Map<String, Value>]) {
    write_list(out, objects, |out, _, object| {
        write_object(out, object.iter())
    });
}

/// A document written with its long texts set aside: the JSON, and each text with its path
/// (see [`Splice`]).
pub type Spliced<'v> = (Vec<u8>, Vec<(Vec<Step<'v>>, &'v str)>);

/// One step of a path into a JSON document: an object's key or an array's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<'v> {
    Key(&'v str),
    Index(usize),
}

/// Writing a document with its long texts set aside: a string of at least `min_len` bytes under
/// one of `keys` is written as `""`, and kept with its path (see [`Splice::texts`]). A reader
/// that puts each text back at its path has the document [`write_value`] writes, without
/// escaping the texts here and unescaping them there.
pub(crate) struct Splice<'v> {
    min_len: usize,
    keys: &'static [&'static str],
    path: Vec<Step<'v>>,
    /// The texts set aside, in document order, each with its path.
    pub texts: Vec<(Vec<Step<'v>>, &'v str)>,
}

impl<'v> Splice<'v> {
    pub(crate) fn new(min_len: usize, keys: &'static [&'static str]) -> Self {
        Splice {
            min_len,
            keys,
            path: Vec::new(),
            texts: Vec::new(),
        }
    }

    /// [`write_value`], setting texts aside.
    pub(crate) fn value(&mut self, out: &mut Vec<u8>, value: &'v Value) {
        match value {
            Value::Array(items) => self.array(out, items),
            Value::Object(map) => self.object(out, map.iter()),
            Value::String(text) if text.len() >= self.min_len => match self.path.last() {
                Some(Step::Key(key)) if self.keys.contains(key) => {
                    out.extend_from_slice(b"\"\"");
                    self.texts.push((self.path.clone(), text));
                }
                _ => write_value(out, value),
            },
            _ => write_value(out, value),
        }
    }

    /// [`write_array`], setting texts aside.
    pub(crate) fn array<I>(&mut self, out: &mut Vec<u8>, items: I)
    where
        I: IntoIterator<Item = &'v Value>,
    {
        write_list(out, items, |out, i, item| {
            self.under(Step::Index(i), |s| s.value(out, item))
        });
    }

    /// [`write_object`], setting texts aside.
    pub(crate) fn object<I>(&mut self, out: &mut Vec<u8>, entries: I)
    where
        I: IntoIterator<Item = (&'v String, &'v Value)>,
    {
        write_entries(out, entries, |out, key, value| {
            self.under(Step::Key(key), |s| s.value(out, value))
        });
    }

    /// [`write_objects`], setting texts aside.
    pub(crate) fn objects(&mut self, out: &mut Vec<u8>, objects: &'v [Map<String, Value>]) {
        write_list(out, objects, |out, i, object| {
            self.under(Step::Index(i), |s| s.object(out, object.iter()))
        });
    }

    /// `write` with `step` on the path (for a caller writing some of a document itself).
    pub(crate) fn under(&mut self, step: Step<'v>, write: impl FnOnce(&mut Self)) {
        self.path.push(step);
        write(self);
        self.path.pop();
    }
}

/// Appends `s` as a JSON string, escaped as serde_json escapes: `"` and `\` with a backslash,
/// the control characters `\b \t \n \f \r` by name and the others as `\u00XX` (lowercase);
/// everything else (DEL and non-ASCII included) as it is.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut from = 0;
    while let Some(at) = needs_escape(bytes, from) {
        out.extend_from_slice(&bytes[from..at]);
        escape(out, bytes[at]);
        from = at + 1;
    }
    out.extend_from_slice(&bytes[from..]);
    out.push(b'"');
}

fn escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]),
    }
}

/// The first byte at or after `from` that needs an escape: `"`, `\` or one below 0x20.
#[inline]
fn needs_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is in the x86-64 baseline; each load reads the 16 bytes at `i`, inside
        // `bytes` (`i + 16 <= bytes.len()`), unaligned loads allowed.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let control = _mm_set1_epi8(0x1f);
            while i + 16 <= bytes.len() {
                let v = _mm_loadu_si128(bytes.as_ptr().add(i).cast::<__m128i>());
                let hits = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                    _mm_cmpeq_epi8(_mm_min_epu8(v, control), v),
                );
                let mask = _mm_movemask_epi8(hits) as u32;
                if mask != 0 {
                    return Some(i + mask.trailing_zeros() as usize);
                }
                i += 16;
            }
        }
    }
    bytes[i..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|p| i + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &Value) {
        let mut ours = Vec::new();
        write_value(&mut ours, value);
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(value).unwrap()
        );
    }

    #[test]
    fn every_byte_is_written_as_serde_writes_it() {
        for byte in 0u8..0x80 {
            for len in [0, 1, 15, 16, 17, 40] {
                for at in 0..=len {
                    let mut s = "é".repeat(len / 2) + &"a".repeat(len - len / 2);
                    let byte_at = at.min(s.len());
                    let byte_at = (0..=byte_at)
                        .rev()
                        .find(|&i| s.is_char_boundary(i))
                        .unwrap();
                    s.insert(byte_at, char::from(byte));
                    check(&Value::String(s));
                }
            }
        }
    }

    #[test]
    fn values_are_written_as_serde_writes_them() {
        let values = serde_json::json!({
            "a": [null, true, false, 0, -1, 18446744073709551615u64, -9223372036854775808i64,
                  1.5, -2.5e-300, 1e300, 0.1],
            "nested": {"k\"ey\n": {"x": [[], {}, [{"y": "\u{1}\u{1f}\u{7f}\u{80}\u{10ffff}"}]]}},
            "": ""
        });
        check(&values);
        for text in [
            "",
            "\"",
            "\\",
            "a\"b\\c\nd\re\tf\u{8}g\u{c}h",
            "\u{0}\u{10}\u{1b}",
        ] {
            check(&Value::String(text.to_owned()));
        }
    }

    #[test]
    fn corpus_objects_are_written_as_serde_writes_them() {
        let mut written = 0;
        for lines in crate::accumulate::corpus_lines("") {
            for json in &lines {
                if let Ok(value) = serde_json::from_str::<Value>(json) {
                    check(&value);
                    written += 1;
                }
            }
        }
        assert!(written > 1000, "{written}");
    }

    /// Puts each set-aside text back at its path in the parsed spliced JSON.
    fn put_back(mut doc: Value, texts: &[(Vec<Step<'_>>, &str)]) -> Value {
        for (path, text) in texts {
            let mut node = &mut doc;
            for step in path {
                node = match (step, node) {
                    (Step::Key(key), Value::Object(map)) => map.get_mut(*key).unwrap(),
                    (Step::Index(i), Value::Array(items)) => &mut items[*i],
                    (step, node) => panic!("{step:?} does not lead into {node}"),
                };
            }
            assert_eq!(node, &Value::String(String::new()));
            *node = Value::String((*text).to_owned());
        }
        doc
    }

    #[test]
    fn a_spliced_document_with_its_texts_put_back_is_the_document() {
        const KEYS: &[&str] = &["text", "delta", "arguments", "id", "type"];
        let (mut documents, mut set_aside) = (0, 0);
        for lines in crate::accumulate::corpus_lines("") {
            for json in &lines {
                let Ok(value) = serde_json::from_str::<Value>(json) else {
                    continue;
                };
                for min_len in [0, 1, 5, 100] {
                    let mut splice = Splice::new(min_len, KEYS);
                    let mut out = Vec::new();
                    splice.value(&mut out, &value);
                    let parsed: Value = serde_json::from_slice(&out).unwrap();
                    assert!(splice.texts.iter().all(|(_, t)| t.len() >= min_len));
                    set_aside += splice.texts.len();
                    assert_eq!(put_back(parsed, &splice.texts), value, "{json}");
                }
                documents += 1;
            }
        }
        assert!(
            documents > 1000 && set_aside > 1000,
            "{documents} {set_aside}"
        );
        // Only strings under the keys: an object or a number under one is written as it is.
        let value: Value =
            serde_json::from_str(r#"{"text":{"text":"abc"},"id":7,"x":"abc","y":["abc"]}"#)
                .unwrap();
        let mut splice = Splice::new(0, KEYS);
        let mut out = Vec::new();
        splice.value(&mut out, &value);
        assert_eq!(out, br#"{"text":{"text":""},"id":7,"x":"abc","y":["abc"]}"#);
        assert_eq!(
            splice.texts,
            vec![(vec![Step::Key("text"), Step::Key("text")], "abc")]
        );
    }

    #[test]
    fn what_is_written_as_serde_writes_it_is_what_serde_writes() {
        let as_serde = |json: &str| {
            let mut out = b"x".to_vec();
            write_as_serde(&mut out, json.as_bytes())
                .then(|| String::from_utf8(out[1..].to_vec()).unwrap())
        };
        for same in [
            r#"{"prompt_tokens":364,"completion_tokens":40,"details":{"cached_tokens":0},"a":[1,true,null,"x"]}"#,
            r#"{"a":{"b":1},"c":{"b":2}}"#, // the same key in two objects
            r#"[{"a":1},{"a":2}]"#,
            "\"caf\u{e9}\"", // UTF-8 is written as it is
            r#"{"a":1.0,"b":-1,"c":1234567890123456789,"d":-2.5e-7,"e":0.5}"#,
        ] {
            assert_eq!(as_serde(same).as_deref(), Some(same));
        }
        // Numbers serde writes otherwise: rewritten as it writes them.
        let serde = |json: &str| {
            let mut out = Vec::new();
            write_value(&mut out, &serde_json::from_str::<Value>(json).unwrap());
            String::from_utf8(out).unwrap()
        };
        for json in [
            r#"{"a":1e3}"#,
            r#"{"s":0.000015598027633743823,"t":[2E-6,1.5e+300]}"#,
            r#"[0.10,-0.0,12345678901234567890123]"#,
        ] {
            let ours = as_serde(json);
            assert_eq!(ours.as_deref(), Some(&*serde(json)), "{json}");
            assert_ne!(ours.as_deref(), Some(json));
        }
        assert_eq!(as_serde("[1e3]").as_deref(), Some("[1000.0]"));
        for not in [
            r#"{"a": 1}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":{"b":1},"a":2}"#,
            r#"{"a":1e400}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"a":"\n"}"#,
            "{\"a\":1}\n",
        ] {
            assert_eq!(as_serde(not), None, "{not}");
        }
        // Against serde on the corpus: each line, and each of its one-byte changes that stays
        // JSON, written this way only as serde writes it.
        let (mut lines, mut kept, mut rewritten) = (0, 0, 0);
        let mut check = |json: &str| {
            let Ok(value) = serde_json::from_str::<Value>(json) else {
                return;
            };
            if let Some(ours) = as_serde(json) {
                let mut out = Vec::new();
                write_value(&mut out, &value);
                assert_eq!(ours, String::from_utf8(out).unwrap(), "{json}");
                kept += 1;
                rewritten += usize::from(ours != json);
            }
        };
        for corpus in crate::accumulate::corpus_lines("") {
            for json in &corpus {
                check(json);
                lines += 1;
                if lines % 25 == 0 {
                    for (at, _) in json.char_indices().filter(|(_, c)| c.is_ascii()).take(200) {
                        for b in ["1", "-", "0", " ", "\\", "\"", ".", "e", ",", "{", "}"] {
                            let mut mutated = json.clone();
                            mutated.replace_range(at..at + 1, b);
                            check(&mutated);
                        }
                    }
                }
            }
        }
        assert!(
            lines > 1000 && kept > 500 && rewritten > 50,
            "{lines} {kept} {rewritten}"
        );
    }
}
