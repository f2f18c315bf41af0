//! A strict JSON lexer for building typed objects straight from a payload.
//!
//! The binding layer builds msgspec Structs from JSON without msgspec (see
//! `bindings/native.rs`) and hands msgspec whatever it declines. So this lexer only has to be
//! right when it accepts: anything odd (a lone `\u` surrogate, an integer beyond `i64`, a float
//! that overflows, a raw control character in a string) makes it answer `None`, and msgspec
//! decides. It is never more lenient than msgspec: what it accepts, msgspec accepts and reads
//! the same way.

/// A JSON number, as its syntax says: an integer literal or a float literal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

/// A string's content: borrowed from the input when it has no escapes, else unescaped into the
/// caller's scratch buffer. `ascii` says no byte is 0x80 or above (non-ASCII bytes are not
/// checked for UTF-8 here: the caller's UTF-8 decoder does that).
#[derive(Debug, PartialEq, Eq)]
pub struct Text<'s> {
    pub bytes: &'s [u8],
    pub ascii: bool,
}

/// The deepest nesting [`Lexer::skip_value`] walks (deeper: declined).
pub const MAX_DEPTH: usize = 64;

/// Whether two byte strings are equal, without a call to `memcmp` (whose call and dispatch
/// cost more than the comparison for the short keys, values and shape pieces compared here):
/// sixteen bytes at a time with SSE2 (part of every x86-64 CPU), the last load overlapping,
/// and words for shorter ones.
#[inline(always)]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if n >= 16 {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_setzero_si128, _mm_xor_si128,
        };
        // SAFETY: SSE2 is in the x86-64 baseline; each load is of the sixteen bytes at `at`,
        // and `at + 16 <= n` for both slices; unaligned loads allowed.
        unsafe {
            let diff = |at: usize| {
                _mm_xor_si128(
                    _mm_loadu_si128(a.as_ptr().add(at).cast::<__m128i>()),
                    _mm_loadu_si128(b.as_ptr().add(at).cast::<__m128i>()),
                )
            };
            // The differences gathered, tested once: unequal strings are the rare case.
            let mut seen = diff(n - 16);
            let mut i = 0;
            while i + 16 < n {
                seen = _mm_or_si128(seen, diff(i));
                i += 16;
            }
            return _mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_setzero_si128())) == 0xffff;
        }
    }
    if n >= 8 {
        // SAFETY: each read is of the eight bytes at `at`, and `at + 8 <= n` for both slices.
        let word =
            |s: &[u8], at: usize| unsafe { s.as_ptr().add(at).cast::<u64>().read_unaligned() };
        let mut i = 0;
        while i + 8 < n {
            if word(a, i) != word(b, i) {
                return false;
            }
            i += 8;
        }
        return word(a, n - 8) == word(b, n - 8);
    }
    if n >= 4 {
        // SAFETY: each read is of the four bytes at `at`, and `at + 4 <= n` for both slices.
        let word =
            |s: &[u8], at: usize| unsafe { s.as_ptr().add(at).cast::<u32>().read_unaligned() };
        return word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4);
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

pub struct Lexer<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Where the next byte of a string needs a closer look, and that byte: `"`, `\`, a control
/// character; bytes of 0x80 or above before it are reported in `ascii`.
#[inline]
pub(crate) fn string_stop(buf: &[u8], from: usize, ascii: &mut bool) -> Option<(usize, u8)> {
    let mut i = from;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is in the x86-64 baseline; each load reads the 16 bytes at `i`, inside
        // `buf` (`i + 16 <= buf.len()`), or the last 16 of `buf` (`buf.len() >= 16`), unaligned
        // loads allowed.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let control = _mm_set1_epi8(0x1f);
            while i + 16 <= buf.len() {
                let v = _mm_loadu_si128(buf.as_ptr().add(i).cast::<__m128i>());
                let special = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                    _mm_cmpeq_epi8(_mm_min_epu8(v, control), v),
                );
                let stop = _mm_movemask_epi8(special) as u32;
                let high = _mm_movemask_epi8(v) as u32;
                if stop != 0 {
                    let at = stop.trailing_zeros();
                    // Only the high bytes before the stop belong to this run.
                    if high & ((1u32 << at) - 1) != 0 {
                        *ascii = false;
                    }
                    let at = i + at as usize;
                    return Some((at, *buf.get_unchecked(at)));
                }
                if high != 0 {
                    *ascii = false;
                }
                i += 16;
            }
            // The last bytes (fewer than 16): the 16 that end `buf`, those before `i` shifted
            // out, rather than a byte at a time (a short string near the end of its payload,
            // as in most deltas).
            if i < buf.len() && buf.len() >= 16 {
                let base = buf.len() - 16;
                let v = _mm_loadu_si128(buf.as_ptr().add(base).cast::<__m128i>());
                let special = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                    _mm_cmpeq_epi8(_mm_min_epu8(v, control), v),
                );
                let shift = i - base;
                let stop = (_mm_movemask_epi8(special) as u32) >> shift;
                let high = (_mm_movemask_epi8(v) as u32) >> shift;
                if stop == 0 {
                    if high != 0 {
                        *ascii = false;
                    }
                    return None;
                }
                let at = stop.trailing_zeros();
                if high & ((1u32 << at) - 1) != 0 {
                    *ascii = false;
                }
                let at = i + at as usize;
                return Some((at, *buf.get_unchecked(at)));
            }
        }
    }
    while let Some(&c) = buf.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return Some((i, c));
        }
        if c >= 0x80 {
            *ascii = false;
        }
        i += 1;
    }
    None
}

#[inline]
fn hex(d: u8) -> Option<u32> {
    (d as char).to_digit(16)
}

/// Finds the first `"` or `\\` at or after `from`, in input known to hold no control byte
/// (the tap's checked payloads: there [`string_stop`] would stop at the same byte): sixteen bytes at a time with SSE2 (part of
/// every x86-64 CPU), then eight at a time (strings here are short: a call into memchr costs
/// more than the scan).
#[inline]
pub(crate) fn quote_or_backslash(buf: &[u8], from: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut i = from;
        // SAFETY: SSE2 is in the x86-64 baseline; every load reads the 16 bytes at `i`, inside
        // `buf` (`i + 16 <= buf.len()`), unaligned loads allowed.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            while i + 16 <= buf.len() {
                let v = _mm_loadu_si128(buf.as_ptr().add(i).cast::<__m128i>());
                let hits = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash));
                let mask = _mm_movemask_epi8(hits) as u32;
                if mask != 0 {
                    return Some(i + mask.trailing_zeros() as usize);
                }
                i += 16;
            }
        }
        quote_or_backslash_swar(buf, i)
    }
    #[cfg(not(target_arch = "x86_64"))]
    quote_or_backslash_swar(buf, from)
}

/// [`quote_or_backslash`], eight bytes at a time.
#[inline]
pub(crate) fn quote_or_backslash_swar(buf: &[u8], from: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while i + 8 <= buf.len() {
        let w = u64::from_le_bytes(buf[i..i + 8].try_into().unwrap_or([0; 8]));
        let q = w ^ (LO * u64::from(b'"'));
        let b = w ^ (LO * u64::from(b'\\'));
        let hit = (q.wrapping_sub(LO) & !q & HI) | (b.wrapping_sub(LO) & !b & HI);
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    buf[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\')
        .map(|p| i + p)
}

/// The byte a one-character escape stands for (`\" \\ \/ \b \f \n \r \t`); None for any other.
#[inline]
pub(crate) fn simple_escape(escaped: u8) -> Option<u8> {
    Some(match escaped {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        _ => return None,
    })
}

/// The character of the `\u` escape whose four hex digits are at `*pos` (and of the second
/// escape of a surrogate pair), `*pos` moved past them; a lone surrogate gives None.
pub(crate) fn unicode_escape_at(buf: &[u8], pos: &mut usize) -> Option<char> {
    let hex4 = |at: usize| -> Option<u32> {
        let d = buf.get(at..at + 4)?;
        Some((hex(d[0])? << 12) | (hex(d[1])? << 8) | (hex(d[2])? << 4) | hex(d[3])?)
    };
    let first = hex4(*pos)?;
    match first {
        0xD800..=0xDBFF => {
            if buf.get(*pos + 4..*pos + 6)? != b"\\u" {
                return None;
            }
            let second = hex4(*pos + 6)?;
            if !(0xDC00..=0xDFFF).contains(&second) {
                return None;
            }
            *pos += 10;
            char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        }
        0xDC00..=0xDFFF => None,
        c => {
            *pos += 4;
            char::from_u32(c)
        }
    }
}

/// Skips the string whose opening quote is at `from`, its escapes checked (`\u` ones only when
/// `unicode`, surrogates paired) and no raw control character; where it ends and whether it is
/// ASCII (its UTF-8 is the caller's to check).
#[inline]
pub(crate) fn skip_string_at(buf: &[u8], from: usize, unicode: bool) -> Option<(usize, bool)> {
    let mut ascii = true;
    let mut i = from + 1;
    loop {
        let (at, stop) = string_stop(buf, i, &mut ascii)?;
        match stop {
            b'"' => return Some((at + 1, ascii)),
            b'\\' => {
                let escaped = *buf.get(at + 1)?;
                if escaped == b'u' && unicode {
                    i = at + 2;
                    if !unicode_escape_at(buf, &mut i)?.is_ascii() {
                        ascii = false;
                    }
                } else {
                    simple_escape(escaped)?;
                    i = at + 2;
                }
            }
            _ => return None,
        }
    }
}

/// The end of the number starting at `from`, by JSON's grammar
/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, and whether it has a fraction or an
/// exponent (a float literal). A leading `0` takes one digit: what follows is the caller's.
#[inline(always)]
pub(crate) fn number_syntax(buf: &[u8], from: usize) -> Option<(usize, bool)> {
    let digits = |mut i: usize| {
        while let Some(b'0'..=b'9') = buf.get(i) {
            i += 1;
        }
        i
    };
    let mut i = from;
    if buf.get(i) == Some(&b'-') {
        i += 1;
    }
    match buf.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(i),
        _ => return None,
    }
    let mut float = false;
    if buf.get(i) == Some(&b'.') {
        let end = digits(i + 1);
        if end == i + 1 {
            return None;
        }
        i = end;
        float = true;
    }
    if let Some(b'e' | b'E') = buf.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = buf.get(i) {
            i += 1;
        }
        let end = digits(i);
        if end == i {
            return None;
        }
        i = end;
        float = true;
    }
    Some((i, float))
}

impl<'a> Lexer<'a> {
    pub fn new(buf: &'a [u8]) -> Lexer<'a> {
        Lexer { buf, pos: 0 }
    }

    /// The input.
    #[inline(always)]
    pub fn input(&self) -> &'a [u8] {
        self.buf
    }

    /// Where the next byte is read.
    #[inline(always)]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Reads on from `pos` (at most the length of the input).
    #[inline(always)]
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.buf.len());
    }

    /// Skips JSON whitespace (space, tab, LF, CR) and returns the next byte.
    #[inline(always)]
    pub fn peek(&mut self) -> Option<u8> {
        loop {
            let b = *self.buf.get(self.pos)?;
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => self.pos += 1,
                _ => return Some(b),
            }
        }
    }

    /// Consumes `byte` (after whitespace) if it is next.
    #[inline(always)]
    pub fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Whether only whitespace is left.
    pub fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Consumes `word` (`true`, `false`, `null`) if it is next (after whitespace).
    #[inline]
    pub fn literal(&mut self, word: &[u8]) -> bool {
        self.peek();
        if self.buf[self.pos..].starts_with(word) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    /// A string without escapes (an object key, a tag), borrowed; `None` if it has escapes or
    /// control characters (the caller declines such a key).
    #[inline(always)]
    pub fn plain_string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        let mut ascii = true;
        let (end, stop) = string_stop(self.buf, start, &mut ascii)?;
        if stop != b'"' {
            return None;
        }
        self.pos = end + 1;
        // SAFETY: `start <= end < self.buf.len()` (`end` is where a byte was found).
        Some(unsafe { self.buf.get_unchecked(start..end) })
    }

    /// A string value. Escapes are resolved into `scratch`; a lone surrogate escape, an unknown
    /// escape, a raw control character or an unterminated string gives `None`.
    #[inline]
    pub fn string<'s>(&mut self, scratch: &'s mut Vec<u8>) -> Option<Text<'s>>
    where
        'a: 's,
    {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        let mut ascii = true;
        let (end, stop) = string_stop(self.buf, start, &mut ascii)?;
        // SAFETY: `start <= end < self.buf.len()` (`end` is where a byte was found).
        let before = unsafe { self.buf.get_unchecked(start..end) };
        match stop {
            b'"' => {
                self.pos = end + 1;
                return Some(Text {
                    bytes: before,
                    ascii,
                });
            }
            b'\\' => {}
            _ => return None,
        }
        scratch.clear();
        scratch.extend_from_slice(before);
        self.pos = end;
        loop {
            match *self.buf.get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return Some(Text {
                        bytes: scratch,
                        ascii,
                    });
                }
                b'\\' => {
                    let escaped = *self.buf.get(self.pos + 1)?;
                    self.pos += 2;
                    let byte = match escaped {
                        b'u' => {
                            let c = unicode_escape_at(self.buf, &mut self.pos)?;
                            if !c.is_ascii() {
                                ascii = false;
                            }
                            let mut utf8 = [0u8; 4];
                            scratch.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                            continue;
                        }
                        other => simple_escape(other)?,
                    };
                    scratch.push(byte);
                }
                _ => {
                    let from = self.pos;
                    let (stop, byte) = string_stop(self.buf, from, &mut ascii)?;
                    if byte < 0x20 {
                        return None;
                    }
                    scratch.extend_from_slice(&self.buf[from..stop]);
                    self.pos = stop;
                }
            }
        }
    }

    /// A number, by JSON's grammar `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`. An integer
    /// literal outside `i64`, `-0`, and a float literal that is not finite give `None`.
    #[inline(always)]
    pub fn number(&mut self) -> Option<Num> {
        self.peek();
        let start = self.pos;
        let (end, float) = number_syntax(self.buf, start)?;
        self.pos = end;
        let literal = &self.buf[start..end];
        if float {
            // SAFETY: the literal is ASCII (sign, digits, '.', 'e', '+', '-'), checked above.
            let text = unsafe { std::str::from_utf8_unchecked(literal) };
            let f: f64 = text.parse().ok()?;
            return f.is_finite().then_some(Num::Float(f));
        }
        let (negative, digits) = match literal.split_first() {
            Some((b'-', digits)) => (true, digits),
            _ => (false, literal),
        };
        let mut n: u64 = 0;
        for &d in digits {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        if !negative {
            return i64::try_from(n).ok().map(Num::Int);
        }
        // -(2^63) fits; anything larger in magnitude does not, and `-0` is left to msgspec.
        (n != 0 && n <= i64::MAX as u64 + 1).then(|| Num::Int((n as i64).wrapping_neg()))
    }

    /// Validates and skips any JSON value (strings checked as [`Lexer::string`] checks them, and
    /// for UTF-8; nesting up to [`MAX_DEPTH`]).
    pub fn skip_value(&mut self, depth: usize) -> Option<()> {
        self.skip::<false>(depth)
    }

    /// [`skip_value`](Self::skip_value), and `None` for a number serde_json could not build (a
    /// float literal that is not finite) or might build differently from its literal (an
    /// integer literal of more than 19 digits): a value this accepts, serde_json reads as a
    /// `Value`.
    pub fn skip_buildable_value(&mut self, depth: usize) -> Option<()> {
        self.skip::<true>(depth)
    }

    fn skip<const BUILDABLE: bool>(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.pos += 1;
                if self.eat(b'}') {
                    return Some(());
                }
                loop {
                    if self.peek()? != b'"' {
                        return None;
                    }
                    self.skip_string()?;
                    if !self.eat(b':') {
                        return None;
                    }
                    self.skip::<BUILDABLE>(depth + 1)?;
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b'}' => {
                            self.pos += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.pos += 1;
                if self.eat(b']') {
                    return Some(());
                }
                loop {
                    self.skip::<BUILDABLE>(depth + 1)?;
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b']' => {
                            self.pos += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true").then_some(()),
            b'f' => self.literal(b"false").then_some(()),
            b'n' => self.literal(b"null").then_some(()),
            b'-' | b'0'..=b'9' => {
                // Any syntactically valid number is fine here, however large (unless BUILDABLE).
                let (end, float) = number_syntax(self.buf, self.pos)?;
                if BUILDABLE {
                    let literal = &self.buf[self.pos..end];
                    if float {
                        // SAFETY: a number literal is ASCII (checked by `number_syntax`).
                        let text = unsafe { std::str::from_utf8_unchecked(literal) };
                        if !text.parse::<f64>().ok()?.is_finite() {
                            return None;
                        }
                    } else if literal.iter().filter(|b| b.is_ascii_digit()).count() > 19 {
                        return None;
                    }
                }
                self.pos = end;
                Some(())
            }
            _ => None,
        }
    }

    fn skip_string(&mut self) -> Option<()> {
        let from = self.pos;
        let (end, ascii) = skip_string_at(self.buf, from, true)?;
        if !ascii && std::str::from_utf8(&self.buf[from..end]).is_err() {
            return None;
        }
        self.pos = end;
        Some(())
    }
}

#[cfg(test)]
mod same_tests {
    use super::same;

    #[test]
    fn same_is_slice_equality_at_every_length_and_position() {
        for len in 0..80usize {
            let a: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            assert!(same(&a, &a.clone()));
            assert!(!same(&a, &a[..len.saturating_sub(1)]) || len == 0);
            for at in 0..len {
                for flip in [1u8, 0x80, 0xff] {
                    let mut b = a.clone();
                    b[at] ^= flip;
                    assert!(!same(&a, &b), "{len} {at} {flip}");
                    assert!(!same(&b, &a), "{len} {at} {flip}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_or_backslash_finds_the_first_at_any_position() {
        let naive = |buf: &[u8], from: usize| {
            buf.get(from..)?
                .iter()
                .position(|&c| c == b'"' || c == b'\\')
                .map(|p| from + p)
        };
        for len in 0..70 {
            for at in 0..=len {
                for (first, second) in [(b'"', b'\\'), (b'\\', b'"'), (b'"', b'x')] {
                    // Bytes near the two, and high bytes, around the hit.
                    let mut buf: Vec<u8> = (0..len)
                        .map(|i| [b'!', b'#', b'[', 0x80, 0xff][i % 5])
                        .collect();
                    if at < len {
                        buf[at] = first;
                        if at + 3 < len {
                            buf[at + 3] = second;
                        }
                    }
                    for from in 0..=len {
                        assert_eq!(
                            quote_or_backslash(&buf, from),
                            naive(&buf, from),
                            "{buf:?} {from}"
                        );
                        assert_eq!(quote_or_backslash_swar(&buf, from), naive(&buf, from));
                    }
                }
            }
        }
    }

    #[test]
    fn string_stop_finds_the_first_stop_and_high_bytes_before_it_at_any_position() {
        // Byte by byte, as the definition says.
        let naive = |buf: &[u8], from: usize| {
            let mut ascii = true;
            for (i, &c) in buf.iter().enumerate().skip(from) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    return (Some((i, c)), ascii);
                }
                ascii &= c < 0x80;
            }
            (None, ascii)
        };
        for len in 0..70usize {
            for at in 0..=len {
                for stop in [b'"', b'\\', 0x01, b'\n', 0x1f, b' '] {
                    for high in [
                        None,
                        Some(at / 2),
                        Some(at + 1),
                        Some(len.saturating_sub(1)),
                    ] {
                        let mut buf: Vec<u8> =
                            (0..len).map(|i| [b'!', b'a', b'~', 0x7f][i % 4]).collect();
                        if let Some(h) = high.filter(|&h| h < len) {
                            buf[h] = 0xc3;
                        }
                        if at < len {
                            buf[at] = stop;
                        }
                        for from in 0..=len {
                            let mut ascii = true;
                            let ours = string_stop(&buf, from, &mut ascii);
                            let (theirs, their_ascii) = naive(&buf, from);
                            assert_eq!(ours, theirs, "{buf:?} {from}");
                            if ours.is_some() {
                                assert_eq!(ascii, their_ascii, "{buf:?} {from}");
                            }
                        }
                    }
                }
            }
        }
    }

    fn string(json: &str) -> Option<(String, bool)> {
        let mut scratch = Vec::new();
        let mut lx = Lexer::new(json.as_bytes());
        let text = lx.string(&mut scratch)?;
        let ascii = text.ascii;
        let s = String::from_utf8(text.bytes.to_vec()).ok()?;
        Some((s, ascii))
    }

    #[test]
    fn strings_agree_with_serde() {
        let cases = [
            r#""""#,
            r#""plain""#,
            r#""a\"b\\c\/d\be\ff\ng\rh\ti""#,
            r#""\u00e9t\u00E9""#,
            r#""\ud83d\ude00 smile""#,
            "\"caf\u{e9} \u{1F600}\"",
            r#""0123456789abcdef0123456789abcdef\n0123456789abcdef""#,
            "\"0123456789abcdef0123456789\u{e9}abcdef\\\"x\"",
            r#""\u0000""#,
        ];
        for case in cases {
            let ours = string(case).unwrap_or_else(|| panic!("refused {case}"));
            let theirs: String = serde_json::from_str(case).unwrap();
            assert_eq!(ours.0, theirs, "{case}");
            assert_eq!(ours.1, theirs.is_ascii(), "{case}");
        }
    }

    #[test]
    fn odd_strings_are_refused() {
        let cases = [
            r#""\ud83d""#,
            r#""\ude00""#,
            r#""\ud83d\u0041""#,
            r#""\x""#,
            r#""\u12""#,
            r#""unterminated"#,
            "\"tab\there\"",
            "\"0123456789abcdef0123\u{1}456789\"",
            r#""ends with \"#,
        ];
        for case in cases {
            assert_eq!(string(case), None, "{case}");
        }
    }

    #[test]
    fn ascii_flag_is_exact_at_every_position() {
        for len in 0..40 {
            for at in 0..len {
                let mut s = "a".repeat(len);
                s.replace_range(at..at + 1, "\u{e9}");
                let json = format!("\"{s}\"");
                let (out, ascii) = string(&json).unwrap();
                assert_eq!(out, s);
                assert!(!ascii, "{json}");
                let json = format!("\"{}\\n{s}\"", "b".repeat(at));
                let (_, ascii) = string(&json).unwrap();
                assert!(!ascii, "{json}");
            }
            let (_, ascii) = string(&format!("\"{}\"", "a".repeat(len))).unwrap();
            assert!(ascii);
            // Non-ASCII after the closing quote is not part of the string.
            let json = format!("\"{}\"\u{e9}", "a".repeat(len));
            let (_, ascii) = string(&json).unwrap();
            assert!(ascii, "{json}");
        }
    }

    fn number(text: &str) -> Option<Num> {
        let mut lx = Lexer::new(text.as_bytes());
        let n = lx.number()?;
        lx.at_end().then_some(n)
    }

    #[test]
    fn numbers() {
        assert_eq!(number("0"), Some(Num::Int(0)));
        assert_eq!(number("-12"), Some(Num::Int(-12)));
        assert_eq!(number("9223372036854775807"), Some(Num::Int(i64::MAX)));
        assert_eq!(number("-9223372036854775808"), Some(Num::Int(i64::MIN)));
        assert_eq!(number("9223372036854775808"), None);
        assert_eq!(number("-9223372036854775809"), None);
        assert_eq!(number("99999999999999999999999"), None);
        assert_eq!(number("-0"), None);
        assert_eq!(number("1.5"), Some(Num::Float(1.5)));
        assert_eq!(number("-0.0"), Some(Num::Float(-0.0)));
        assert_eq!(number("1e3"), Some(Num::Float(1000.0)));
        assert_eq!(number("1E-2"), Some(Num::Float(0.01)));
        assert_eq!(number("2.5e+1"), Some(Num::Float(25.0)));
        assert_eq!(number("1e400"), None);
        for bad in ["01", "1.", ".5", "-", "1e", "1e+", "+1", "--1", "0x1"] {
            let mut lx = Lexer::new(bad.as_bytes());
            let whole = lx.number().is_some() && lx.at_end();
            assert!(!whole, "{bad}");
        }
        for f in [
            "0.1",
            "3.141592653589793",
            "1.7976931348623157e308",
            "5e-324",
            "123456789012345678901234567890.5",
        ] {
            let ours = number(f).unwrap();
            let theirs: f64 = serde_json::from_str(f).unwrap();
            assert_eq!(ours, Num::Float(theirs), "{f}");
        }
    }

    fn skips(json: &str) -> bool {
        let mut lx = Lexer::new(json.as_bytes());
        lx.skip_value(0).is_some() && lx.at_end()
    }

    #[test]
    fn skip_accepts_only_json() {
        for good in [
            r#"{"a": [1, 2.5, -0, 1e999, 123456789012345678901234567890, true, false, null, "x\n"], "b": {}}"#,
            " [ ] ",
            r#""\ud83d\ude00""#,
        ] {
            assert!(skips(good), "{good}");
            assert!(
                serde_json::from_str::<serde_json::Value>(good).is_ok() || good.contains("1e999")
            );
        }
        for bad in [
            r#"{"a": 1,}"#,
            "[1,]",
            r#"{"a" 1}"#,
            r#"{1: 2}"#,
            "tru",
            "nul",
            "[01]",
            r#""\ud800""#,
            "\"\u{1}\"",
            "[",
            "{",
        ] {
            assert!(!skips(bad), "{bad}");
        }
        // Invalid UTF-8 inside a skipped string.
        let mut lx = Lexer::new(b"\"\xff\"");
        assert!(lx.skip_value(0).is_none());
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(!skips(&deep));
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(skips(&ok));
    }

    #[test]
    fn differential_against_serde_on_random_fragments() {
        // Whatever the lexer accepts as a value, serde accepts too (it may refuse more).
        let pieces = [
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\"a\"",
            "\"\\u00e9\"",
            "\"\\ud83d\"",
            "1",
            "-0",
            "1.5",
            "1e5",
            "true",
            "null",
            " ",
            "\"x\\\"y\"",
            "01",
            "\"\\n\"",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = 1 + (seed % 8) as usize;
            let mut s = String::new();
            let mut x = seed;
            for _ in 0..n {
                s.push_str(pieces[(x % pieces.len() as u64) as usize]);
                x /= pieces.len() as u64;
                if x == 0 {
                    x = seed.rotate_left(17);
                }
            }
            if skips(&s) {
                // serde refuses a number out of `f64`'s range, which skipping need not.
                let parsed = serde_json::from_str::<serde_json::Value>(&s);
                let out_of_range = parsed
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("number out of range"));
                assert!(parsed.is_ok() || out_of_range, "{s}");
            }
        }
    }
}
