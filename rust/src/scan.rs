//! A quick look at a JSON payload's top-level `"type"` string, without parsing it.
//!
//! The decoder batches payloads whose type the schemas know into one msgspec
//! call per chunk; anything else takes the careful (slow) path. So this scanner
//! only has to be right when it answers [`TypeTag::Found`]: when the input is
//! odd in any way (escapes in keys or in the type, broken syntax) it answers
//! [`TypeTag::Unusual`] and lets the slow path, which fully parses, decide.
//! OpenAI-style events put `type` first, so the usual cost is a few bytes.

/// What the scanner saw.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum TypeTag<'a, T: ?Sized = str> {
    /// The top-level object has `"type": "<this>"` (no escapes in it).
    Found(&'a T),
    /// A well-formed top-level object without a `type` key.
    Missing,
    /// Not an object, a non-string `type`, escapes, or broken JSON.
    Unusual,
}

/// Scans `json` for the top-level `"type"` key and returns its string value.
pub fn type_tag(json: &[u8]) -> TypeTag<'_> {
    match raw_type_tag(json) {
        TypeTag::Found(tag) => match std::str::from_utf8(tag) {
            Ok(tag) => TypeTag::Found(tag),
            Err(_) => TypeTag::Unusual,
        },
        TypeTag::Missing => TypeTag::Missing,
        TypeTag::Unusual => TypeTag::Unusual,
    }
}

/// [`type_tag`] without the UTF-8 check of the tag (for a lookup among known tags, which are
/// text: bytes equal to one are text too).
pub fn raw_type_tag(json: &[u8]) -> TypeTag<'_, [u8]> {
    let mut s = Scanner { buf: json, pos: 0 };
    s.object_type().unwrap_or(TypeTag::Unusual)
}

struct Scanner<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.buf.get(self.pos) {
            self.pos += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    #[inline]
    fn expect(&mut self, byte: u8) -> Option<()> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    fn object_type(&mut self) -> Option<TypeTag<'a, [u8]>> {
        self.skip_ws();
        self.expect(b'{')?;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            return Some(TypeTag::Missing);
        }
        loop {
            self.skip_ws();
            let key = self.plain_string()?;
            self.skip_ws();
            self.expect(b':')?;
            self.skip_ws();
            if key == b"type" {
                return match self.peek() {
                    Some(b'"') => Some(TypeTag::Found(self.plain_string()?)),
                    _ => Some(TypeTag::Unusual),
                };
            }
            self.skip_value()?;
            self.skip_ws();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => return Some(TypeTag::Missing),
                _ => return None,
            }
        }
    }

    /// A string without escapes; `None` (so: unusual) when it has any.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.pos;
        let rel = memchr::memchr2(b'"', b'\\', &self.buf[start..])?;
        if self.buf[start + rel] == b'\\' {
            return None;
        }
        self.pos = start + rel + 1;
        Some(&self.buf[start..start + rel])
    }

    /// Skips any string, escapes included.
    fn skip_string(&mut self) -> Option<()> {
        self.expect(b'"')?;
        loop {
            let rel = memchr::memchr2(b'"', b'\\', &self.buf[self.pos..])?;
            self.pos += rel;
            if self.buf[self.pos] == b'"' {
                self.pos += 1;
                return Some(());
            }
            self.pos += 2; // the backslash and the escaped byte
            if self.pos > self.buf.len() {
                return None; // a backslash as the last byte: unterminated
            }
        }
    }

    /// Skips one value. Nested containers are skipped by depth; their syntax is
    /// not checked, since a payload that reaches the batch is parsed for real anyway.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    let rel = memchr::memchr3(b'"', b'{', b'}', &self.buf[self.pos..]);
                    let bracket = memchr::memchr2(b'[', b']', &self.buf[self.pos..]);
                    let rel = match (rel, bracket) {
                        (Some(a), Some(b)) => a.min(b),
                        (a, b) => a.or(b)?,
                    };
                    self.pos += rel;
                    match self.buf[self.pos] {
                        b'"' => self.skip_string()?,
                        b'{' | b'[' => {
                            depth += 1;
                            self.pos += 1;
                        }
                        _ => {
                            depth -= 1;
                            self.pos += 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                    }
                }
            }
            _ => {
                // A number or literal runs to the next delimiter.
                let start = self.pos;
                while let Some(b) = self.peek() {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.pos += 1;
                }
                (self.pos > start).then_some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_type_first_or_later() {
        assert_eq!(
            type_tag(br#"{"type":"response.created","x":1}"#),
            TypeTag::Found("response.created")
        );
        assert_eq!(
            type_tag(br#" { "a" : {"type":"inner","b":[1,{"c":"}"}]}, "n": -1.5e3, "t": true, "type" : "outer" }"#),
            TypeTag::Found("outer")
        );
        assert_eq!(
            type_tag(br#"{"s":"quote \" and \\","type":"x"}"#),
            TypeTag::Found("x")
        );
    }

    #[test]
    fn missing_and_unusual() {
        assert_eq!(type_tag(br#"{"a":1,"b":"type"}"#), TypeTag::Missing);
        assert_eq!(type_tag(b"{}"), TypeTag::Missing);
        assert_eq!(type_tag(b"[1]"), TypeTag::Unusual);
        assert_eq!(type_tag(b"[DONE]"), TypeTag::Unusual);
        assert_eq!(type_tag(br#"{"type":5}"#), TypeTag::Unusual);
        assert_eq!(type_tag(br#"{"type":"a\u0062"}"#), TypeTag::Unusual);
        assert_eq!(type_tag(br#"{"t\u0079pe":"a"}"#), TypeTag::Unusual);
        assert_eq!(type_tag(br#"{"type":"#), TypeTag::Unusual);
        assert_eq!(type_tag(br#"{"a":[1,2"#), TypeTag::Unusual);
        assert_eq!(type_tag(b""), TypeTag::Unusual);
        assert_eq!(type_tag(b"{\"a\":}"), TypeTag::Unusual);
        // A backslash as the very last byte (found by fuzz/fuzz_targets/scan.rs).
        assert_eq!(type_tag(b"{\"a\":\"\\"), TypeTag::Unusual);
        assert_eq!(type_tag(b"{\"a\":[\"\\"), TypeTag::Unusual);
    }
}
