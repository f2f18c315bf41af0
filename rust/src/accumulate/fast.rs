//! A fast reader of [`StreamEvent`]s for the common case, with serde as the referee.
//!
//! serde_json spends most of an accumulator's time on a delta event (~200 bytes: a few ids,
//! indices, the delta, and fields nobody reads). This reader does the same job in one
//! validating pass over compact JSON, borrowing strings where it can. It is conservative: it
//! only answers when it is sure serde would produce the very same event, and gives up
//! (`None`) on anything unusual — raw control characters or line breaks, a lone surrogate,
//! nesting deeper than 64, a duplicated or mistyped read field, a non-integer index — so that
//! serde, the reference, decides those cases (and words the errors). The differential tests
//! below hold it to that. Its strings, escapes, numbers and skipping are the crate's one JSON
//! reader's, [`crate::lex`] (`docs/internals-json.md`); this module is the event-specific part.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::{Map, Number, Value};

use super::{Str, StreamEvent, RAW_FIELDS};
use crate::lex::{
    number_syntax, quote_or_backslash, same, simple_escape, skip_string_at, string_stop,
    unicode_escape_at, Lexer,
};

use crate::lex::MAX_DEPTH;

/// Reads `payload` into `ev` (a default one), or returns false when serde must decide.
/// (An out-parameter: the event is large, and returning it by value costs copies.)
pub(crate) fn parse_into<'a>(payload: &'a [u8], ev: &mut StreamEvent<'a>) -> bool {
    parse_checked(payload, ev).is_some()
}

fn parse_checked<'a>(payload: &'a [u8], ev: &mut StreamEvent<'a>) -> Option<()> {
    let mut r = Reader::checked(payload)?;
    r.event(ev)?;
    r.skip_spaces();
    (r.pos == r.buf.len()).then_some(())
}

/// Bit 0: `bytes` holds a byte below 0x20; bit 7: a byte of 0x80 or above. Thirty-two bytes
/// at a time with SSE2 (part of every x86-64 CPU), the last ones by overlapping loads.
#[inline]
fn control_or_high(bytes: &[u8]) -> u8 {
    let mut i = 0;
    let mut seen = 0u8;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8, _mm_setzero_si128,
        };
        // SAFETY: SSE2 is in the x86-64 baseline; every load reads 16 bytes inside `bytes`
        // (`i + 32 <= len` for the pair, `at + 16 <= len` for a last one), unaligned loads
        // allowed.
        unsafe {
            let limit = _mm_set1_epi8(0x1f);
            let mut high = _mm_setzero_si128();
            let mut control = _mm_setzero_si128();
            while i + 32 <= bytes.len() {
                let a = _mm_loadu_si128(bytes.as_ptr().add(i).cast::<__m128i>());
                let b = _mm_loadu_si128(bytes.as_ptr().add(i + 16).cast::<__m128i>());
                high = _mm_or_si128(high, _mm_or_si128(a, b));
                control = _mm_or_si128(
                    control,
                    _mm_or_si128(
                        _mm_cmpeq_epi8(_mm_min_epu8(a, limit), a),
                        _mm_cmpeq_epi8(_mm_min_epu8(b, limit), b),
                    ),
                );
                i += 32;
            }
            // The last bytes (fewer than 32): one or two loads of sixteen, the last ending
            // `bytes` (overlapping bytes already looked at, which changes nothing).
            if bytes.len() >= 16 && i < bytes.len() {
                let mut tail = |at: usize| {
                    let a = _mm_loadu_si128(bytes.as_ptr().add(at).cast::<__m128i>());
                    high = _mm_or_si128(high, a);
                    control = _mm_or_si128(control, _mm_cmpeq_epi8(_mm_min_epu8(a, limit), a));
                };
                if i + 16 < bytes.len() {
                    tail(i);
                }
                tail(bytes.len() - 16);
                i = bytes.len();
            }
            if _mm_movemask_epi8(high) != 0 {
                seen |= 0x80;
            }
            if _mm_movemask_epi8(control) != 0 {
                seen |= 1;
            }
        }
    }
    bytes[i..]
        .iter()
        .fold(seen, |seen, &b| seen | (b & 0x80) | u8::from(b < 0x20))
}

/// The longest payload a [`Shape`] is learned from.
const MAX_LEARNED: usize = 4096;

/// The most pieces a [`Shape`] holds (a delta event has seven: four fixed runs, three holes).
const MAX_PIECES: usize = 24;

/// A string value read from a hole without building it: the text itself, or (with escapes) its
/// JSON contents between the quotes, validated, for [`unescape_into`].
#[derive(Debug)]
pub(crate) enum Text<'a> {
    Plain(&'a str),
    Escaped(&'a str),
}

/// Appends the text of `raw`, the contents of a JSON string read as [`Text::Escaped`] (UTF-8,
/// no control byte, no escape but `\" \\ \/ \b \f \n \r \t`), unescaped.
pub(crate) fn unescape_into(out: &mut String, raw: &str) {
    let bytes = raw.as_bytes();
    out.reserve(bytes.len());
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\\', &bytes[from..]) {
        let at = from + i;
        out.push_str(&raw[from..at]);
        let c = match bytes.get(at + 1).copied().and_then(simple_escape) {
            Some(c) => c,
            other => {
                // Not from `Reader::hole_text`, which refuses any other escape.
                debug_assert!(false, "unexpected escape {other:?}");
                b'\\'
            }
        };
        out.push(char::from(c));
        from = at + 2;
    }
    out.push_str(&raw[from.min(raw.len())..]);
}

/// One piece of a [`Shape`]: bytes matched exactly, or a hole read afresh.
#[derive(Clone, Copy, Debug)]
enum Piece {
    /// Bytes `start..end` of the learned payload.
    Fixed { start: u32, end: u32 },
    /// A string read into string slot `n`.
    Str(u8),
    /// A non-negative integer read into integer slot `n`.
    Int(u8),
    /// A value nobody reads: validated and skipped.
    Skip,
}

impl Piece {
    fn fixed_len(&self) -> usize {
        match *self {
            Piece::Fixed { start, end } => (end - start) as usize,
            _ => 0,
        }
    }
}

/// The shape of the last payload that went the general way, to read the next ones faster.
///
/// A stream is mostly runs of one event shape: deltas whose keys, type, item id and indices
/// repeat byte for byte, while the sequence number, the delta and fields nobody reads (e.g.
/// `obfuscation`) change. A shape keeps such a payload's bytes cut into fixed pieces and holes.
/// A payload that matches every fixed piece exactly, with a value of the hole's kind in every
/// hole, is read by comparing the pieces and parsing the holes only; its fixed fields are
/// borrowed from the new payload at the places the learned one had them. Exactness is by
/// construction: such a payload differs from the learned one (which this reader accepted)
/// only inside holes, each read by the very method [`Reader::event`] uses for that field, so
/// it gives the event `event` would. Any other payload is a miss and goes the general way.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    learned: Vec<u8>,
    pieces: Vec<Piece>,
    /// Fixed string fields: slot, fixed piece, offset in it, length.
    strs: Vec<(u8, u8, u32, u32)>,
    /// Fixed integer fields: slot, value.
    ints: Vec<(u8, u64)>,
    /// Hits since the shape was learned.
    hits: u32,
    /// Changes whenever the shape does (learned anew or dropped).
    generation: u64,
    /// The fields that place a delta (type, item id, the output, content and summary
    /// indices) are all fixed: every hit places its delta where the learned event did.
    keyed: bool,
    /// Shapes learned in a row that never hit (events whose shape keeps changing).
    barren: u32,
    /// Misses since the last learning.
    misses: u32,
    /// The bytes of the fixed pieces: no payload of this shape is shorter.
    fixed_len: usize,
    /// A delta hole and no hole of another read string (integer holes are sequence numbers).
    delta_only: bool,
    /// The shape framed as whole SSE events (see [`Shape::set_frame`]): the bytes of its fixed
    /// pieces, the pieces (fixed ones as ranges of `framed`), the length of the prefix and the
    /// shortest such event.
    framed: Vec<u8>,
    framed_pieces: Vec<Piece>,
    framed_prefix: usize,
    framed_len: usize,
}

impl Shape {
    /// Whether a shape is learned (else every payload misses).
    pub(crate) fn is_learned(&self) -> bool {
        !self.pieces.is_empty()
    }

    /// The shape's identity: two payloads read through the same generation of a keyed shape
    /// have equal fixed fields.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether every field that places a delta is fixed (see [`Shape::keyed`]).
    pub(crate) fn is_keyed(&self) -> bool {
        self.keyed
    }

    /// Whether the shape has a delta hole and no hole of another read string (see
    /// [`read_framed_delta`](Self::read_framed_delta)).
    pub(crate) fn reads_a_delta(&self) -> bool {
        self.delta_only
    }

    /// Hits so far of this generation.
    pub(crate) fn hits(&self) -> u32 {
        self.hits
    }

    /// Reads `payload` into `ev` (a default one) if it has this shape; false on a miss, which
    /// may leave `ev` partly written.
    pub(crate) fn read<'a>(&mut self, payload: &'a [u8], ev: &mut StreamEvent<'a>) -> bool {
        let hit = (|| {
            let mut r = Reader::checked(payload)?;
            self.fill::<false>(&mut r, ev)
        })()
        .is_some();
        if hit {
            self.hits += 1;
        }
        hit
    }

    /// Reads the pieces from `r`. `FRAMED`: `r` is raw stream bytes, not validated as a whole,
    /// read up to where the pieces end (see [`Shape::read_framed`]); otherwise `r` is a checked
    /// payload, read to its end.
    fn fill<'a, const FRAMED: bool>(
        &self,
        r: &mut Reader<'a>,
        ev: &mut StreamEvent<'a>,
    ) -> Option<()> {
        let mut starts = [0usize; MAX_PIECES];
        for (i, piece) in self.pieces.iter().enumerate() {
            match *piece {
                Piece::Fixed { start, end } => {
                    let fixed = &self.learned[start as usize..end as usize];
                    let at = r.pos;
                    if !same(r.buf.get(at..at + fixed.len())?, fixed) {
                        return None;
                    }
                    starts[i] = at;
                    r.pos = at + fixed.len();
                }
                Piece::Str(n) => {
                    let text = if FRAMED {
                        r.hole_string()?
                    } else {
                        r.string()?
                    };
                    *str_slot(ev, n.into()) = Some(Str(text));
                }
                Piece::Int(n) => *int_slot(ev, n.into()) = Some(r.unsigned()?),
                Piece::Skip if FRAMED => r.hole_skip()?,
                Piece::Skip => r.skip_value()?,
            }
        }
        if !FRAMED && r.pos != r.buf.len() {
            return None;
        }
        for &(n, piece, offset, len) in &self.strs {
            let at = starts[usize::from(piece)] + offset as usize;
            let text = if FRAMED {
                let bytes = r.buf.get(at..at + len as usize)?;
                debug_assert!(std::str::from_utf8(bytes).is_ok());
                // SAFETY: a fixed piece equals the learned payload's bytes at the same place,
                // where this was a whole string value (quote-delimited, no escapes) of a
                // payload that `Reader::checked` found to be UTF-8.
                unsafe { std::str::from_utf8_unchecked(bytes) }
            } else {
                r.text.get(at..at + len as usize)?
            };
            *str_slot(ev, n.into()) = Some(Str(Cow::Borrowed(text)));
        }
        for &(n, value) in &self.ints {
            *int_slot(ev, n.into()) = Some(value);
        }
        Some(())
    }

    /// Reads a whole SSE event at the start of `buf` (raw stream bytes, not validated) if it is
    /// `prefix` (the event's `event:` line, if any, and `data: `), a payload of this shape and
    /// a blank line (`\n\n`), with its data line at most `max_line` bytes long. Returns the
    /// payload's end and the bytes the event takes; None on a miss (then `ev` may be partly
    /// written).
    ///
    /// The bytes are validated as [`Reader::checked`] would validate the payload, but only
    /// where they can differ from the learned payload: the fixed pieces equal bytes of a
    /// payload that passed that check, and they begin and end next to ASCII delimiters, so
    /// they are UTF-8 without control bytes themselves; each hole is checked on its own. No
    /// byte of a hit is a CR or LF (those are control bytes) except the blank line's, so the
    /// framer would have framed exactly this event from these bytes.
    pub(crate) fn read_framed<'a>(
        &mut self,
        buf: &'a [u8],
        prefix: &[u8],
        max_line: usize,
        ev: &mut StreamEvent<'a>,
    ) -> Option<(usize, usize)> {
        // Too short to hold the event (at the end of a chunk, say), or no shape.
        if self.pieces.is_empty()
            || buf.len() < prefix.len() + self.fixed_len + 2
            || !same(&buf[..prefix.len()], prefix)
        {
            return None;
        }
        let from = prefix.len();
        // Only methods that read `buf` are used: `text` would claim bytes not validated.
        let mut r = Reader {
            buf,
            text: "",
            pos: from,
        };
        self.fill::<true>(&mut r, ev)?;
        let end = r.pos;
        // The data line is `data: ` and the payload.
        // The event line, if any, is the prefix without its LF and `data: `.
        let event_line = prefix.len().saturating_sub(7);
        if buf.get(end..end + 2)? != b"\n\n" || end - from + 6 > max_line || event_line > max_line {
            return None;
        }
        self.hits += 1;
        Some((end, end + 2))
    }

    /// [`read_framed`](Self::read_framed) of a delta, for a caller that needs only its text
    /// and sequence number (a delta that continues a run: see
    /// `ResponseAccumulator::add_framed`). Returns the payload's end, the bytes the event
    /// takes, the sequence number and the delta; None on a miss, or when the shape has no
    /// delta hole, or a hole of another read string (see [`reads_a_delta`](Self::reads_a_delta)):
    /// the bytes it compares and validates are those [`read_framed`](Self::read_framed) would,
    /// so a miss here is a miss there.
    #[inline]
    pub(crate) fn read_framed_delta<'a>(
        &mut self,
        buf: &'a [u8],
        prefix: &[u8],
        max_line: usize,
    ) -> Option<(usize, usize, Option<u64>, Text<'a>)> {
        // Too short to hold the event (at the end of a chunk, say), no shape, or not framed
        // with this prefix (see `set_frame`).
        if self.framed_pieces.is_empty()
            || buf.len() < self.framed_len
            || self.framed_prefix != prefix.len()
        {
            return None;
        }
        debug_assert!(self.framed.starts_with(prefix));
        // Only methods that read `buf` are used: `text` would claim bytes not validated.
        let mut r = Reader {
            buf,
            text: "",
            pos: 0,
        };
        let (mut delta, mut sequence) = (None, None);
        for piece in &self.framed_pieces {
            match *piece {
                Piece::Fixed { start, end } => {
                    let fixed = &self.framed[start as usize..end as usize];
                    let at = r.pos;
                    if !same(buf.get(at..at + fixed.len())?, fixed) {
                        return None;
                    }
                    r.pos = at + fixed.len();
                }
                Piece::Str(3) => delta = Some(r.hole_text()?),
                Piece::Int(11) => sequence = Some(r.unsigned()?),
                Piece::Str(_) | Piece::Int(_) => return None,
                Piece::Skip => r.hole_skip()?,
            }
        }
        // The last piece ends with the blank line.
        let used = r.pos;
        let end = used - 2;
        let event_line = prefix.len().saturating_sub(7);
        if end - prefix.len() + 6 > max_line || event_line > max_line {
            return None;
        }
        let delta = delta?;
        self.hits += 1;
        Some((end, used, sequence, delta))
    }

    /// Frames the learned shape as whole SSE events for
    /// [`read_framed_delta`](Self::read_framed_delta): `prefix` (the event's SSE lines before
    /// its payload) joined to the first fixed piece, and the blank line to the last, so that
    /// each is one comparison. Undone by the next learning.
    pub(crate) fn set_frame(&mut self, prefix: &[u8]) {
        self.framed.clear();
        self.framed_pieces.clear();
        self.framed.extend_from_slice(prefix);
        let last = self.pieces.len().saturating_sub(1);
        let mut open: Option<u32> = Some(0);
        for (i, piece) in self.pieces.iter().enumerate() {
            match *piece {
                Piece::Fixed { start, end } => {
                    let from = open.take().unwrap_or(self.framed.len() as u32);
                    self.framed
                        .extend_from_slice(&self.learned[start as usize..end as usize]);
                    if i == last {
                        self.framed.extend_from_slice(b"\n\n");
                    }
                    self.framed_pieces.push(Piece::Fixed {
                        start: from,
                        end: self.framed.len() as u32,
                    });
                }
                hole => {
                    if let Some(from) = open.take() {
                        // A hole first (never, from `learn`): the prefix alone.
                        self.framed_pieces.push(Piece::Fixed {
                            start: from,
                            end: self.framed.len() as u32,
                        });
                    }
                    self.framed_pieces.push(hole);
                }
            }
        }
        if !matches!(self.pieces.last(), Some(Piece::Fixed { .. })) {
            // Never, from `learn`: a shape always ends with its closing brace.
            self.framed_pieces.clear();
        }
        self.framed_prefix = prefix.len();
        self.framed_len = prefix.len() + self.fixed_len + 2;
    }

    /// After a miss and a general read of `payload`: learns its shape, unless shapes keep
    /// failing to hit (then only every 32nd miss), or the payload does not suit one.
    pub(crate) fn missed(&mut self, payload: &[u8]) {
        if !self.pieces.is_empty() {
            if self.hits == 0 {
                self.barren = self.barren.saturating_add(1);
            } else {
                self.barren = 0;
            }
        }
        self.misses = self.misses.wrapping_add(1);
        if self.barren >= 8 && self.misses % 32 != 0 {
            self.pieces.clear();
            self.framed_pieces.clear();
            self.generation += 1;
            return;
        }
        self.misses = 0;
        self.hits = 0;
        self.generation += 1;
        if self.learn(payload).is_none() {
            self.pieces.clear();
        }
    }

    fn learn(&mut self, payload: &[u8]) -> Option<()> {
        self.pieces.clear();
        self.strs.clear();
        self.ints.clear();
        self.keyed = true;
        self.delta_only = false;
        self.framed_pieces.clear();
        // Events this long carry items, parts or whole responses, which are never learned
        // (below): not worth a pass over them to find out.
        if payload.len() > MAX_LEARNED {
            return None;
        }
        let mut r = Reader::checked(payload)?;
        let mut fixed_from = 0;
        r.skip_spaces();
        r.eat(b'{')?;
        r.skip_spaces();
        if r.peek()? == b'}' {
            return None;
        }
        loop {
            r.next_byte()?;
            let key = r.plain_key()?;
            if r.next_byte()? != b':' {
                return None;
            }
            r.pos += 1;
            r.next_byte()?;
            let start = r.pos;
            let first = r.peek()?;
            let hole = match field(key) {
                Field::Str(n) if first == b'"' => {
                    let value = r.string()?;
                    // Texts change from event to event; so does anything escaped.
                    if matches!(n, 3..=8) || matches!(value, Cow::Owned(_)) {
                        self.keyed &= !matches!(n, 0 | 1);
                        Some(Piece::Str(n as u8))
                    } else {
                        let piece = u8::try_from(self.pieces.len()).ok()?;
                        let offset = u32::try_from(start + 1 - fixed_from).ok()?;
                        let len = u32::try_from(value.len()).ok()?;
                        self.strs.push((n as u8, piece, offset, len));
                        None
                    }
                }
                Field::Int(n) if first != b'n' => {
                    let value = r.unsigned()?;
                    if n == 11 {
                        Some(Piece::Int(n as u8))
                    } else {
                        self.ints.push((n as u8, value));
                        None
                    }
                }
                Field::Str(_) | Field::Int(_) | Field::Raw(_) if first == b'n' => {
                    r.literal(b"null")?;
                    None
                }
                // Items, parts and whole responses: events too rare and too large to gain.
                Field::Str(_) | Field::Int(_) | Field::Raw(_) => return None,
                Field::Other => {
                    r.value(0)?;
                    // Short scalars and empty containers are kept as they are.
                    let kept = matches!(first, b'[' | b'{') && r.pos - start == 2
                        || matches!(first, b't' | b'f' | b'n' | b'-' | b'0'..=b'9');
                    (!kept).then_some(Piece::Skip)
                }
            };
            if let Some(hole) = hole {
                self.fixed(fixed_from, start)?;
                self.pieces.push(hole);
                fixed_from = r.pos;
            }
            match r.next_byte()? {
                b',' => r.pos += 1,
                b'}' => {
                    r.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
        r.skip_spaces();
        if r.pos != r.buf.len() {
            return None;
        }
        self.fixed(fixed_from, r.pos)?;
        if self.pieces.len() > MAX_PIECES {
            return None;
        }
        self.learned.clear();
        self.learned.extend_from_slice(payload);
        self.fixed_len = self.pieces.iter().map(Piece::fixed_len).sum();
        self.delta_only = self.pieces.iter().any(|p| matches!(p, Piece::Str(3)))
            && !self
                .pieces
                .iter()
                .any(|p| matches!(p, Piece::Str(n) if *n != 3));
        Some(())
    }

    fn fixed(&mut self, start: usize, end: usize) -> Option<()> {
        self.pieces.push(Piece::Fixed {
            start: u32::try_from(start).ok()?,
            end: u32::try_from(end).ok()?,
        });
        Some(())
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    text: &'a str,
    pos: usize,
}

#[derive(Clone, Copy)]
enum Field {
    Str(usize),
    Int(usize),
    Raw(usize),
    Other,
}

fn field(key: &[u8]) -> Field {
    // Most keys differ in length or first byte: one comparison each.
    match (key.len(), key.first()) {
        (4, Some(b't')) if key == b"type" => return Field::Str(0),
        (5, Some(b'd')) if key == b"delta" => return Field::Str(3),
        (7, Some(b'i')) if key == b"item_id" => return Field::Str(1),
        (12, Some(b'o')) if key == b"output_index" => return Field::Int(12),
        (13, Some(b'c')) if key == b"content_index" => return Field::Int(13),
        (15, Some(b's')) if key == b"sequence_number" => return Field::Int(11),
        (8, Some(b'l')) | (11, Some(b'o')) => return Field::Other, // logprobs, obfuscation
        _ => {}
    }
    match key {
        b"type" => Field::Str(0),
        b"item_id" => Field::Str(1),
        b"response_id" => Field::Str(2),
        b"delta" => Field::Str(3),
        b"text" => Field::Str(4),
        b"refusal" => Field::Str(5),
        b"arguments" => Field::Str(6),
        b"input" => Field::Str(7),
        b"transcript" => Field::Str(8),
        b"name" => Field::Str(9),
        b"call_id" => Field::Str(10),
        b"sequence_number" => Field::Int(11),
        b"output_index" => Field::Int(12),
        b"content_index" => Field::Int(13),
        b"summary_index" => Field::Int(14),
        b"annotation_index" => Field::Int(15),
        b"code" => Field::Raw(16),
        b"item" => Field::Raw(17),
        b"part" => Field::Raw(18),
        b"response" => Field::Raw(19),
        b"annotation" => Field::Raw(20),
        b"error" => Field::Raw(21),
        b"usage" => Field::Raw(22),
        b"message" => Field::Raw(23),
        _ => Field::Other,
    }
}

/// A run of a string's bytes (between escapes, so cut next to ASCII bytes) as text: validated
/// as UTF-8 unless `ascii` says every byte is below 0x80.
#[inline(always)]
fn run_text(run: &[u8], ascii: bool) -> Option<&str> {
    if ascii {
        // SAFETY: every byte is below 0x80: ASCII, which is valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(run) })
    } else {
        std::str::from_utf8(run).ok()
    }
}

impl<'a> Reader<'a> {
    /// A reader of `payload`, if it is UTF-8 without control bytes.
    #[inline]
    fn checked(payload: &'a [u8]) -> Option<Self> {
        // Compact JSON has no byte below 0x20: inside strings they are errors, outside only
        // whitespace, which serde would also accept; leave those payloads to serde.
        // One pass for both: control bytes (bit 0) and non-ASCII bytes (bit 7).
        let seen = control_or_high(payload);
        if seen & 1 != 0 {
            return None;
        }
        let text = if seen == 0 {
            // SAFETY: every byte is below 0x80: ASCII, which is valid UTF-8.
            unsafe { std::str::from_utf8_unchecked(payload) }
        } else {
            std::str::from_utf8(payload).ok()?
        };
        Some(Reader {
            buf: text.as_bytes(),
            text,
            pos: 0,
        })
    }

    #[inline]
    fn skip_spaces(&mut self) {
        while self.buf.get(self.pos) == Some(&b' ') {
            self.pos += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// The next byte that is not a space, skipping the spaces (compact JSON has none: one
    /// load and one comparison).
    #[inline(always)]
    fn next_byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        if b != b' ' {
            return Some(b);
        }
        self.skip_spaces();
        self.peek()
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.buf[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(())
        } else {
            None
        }
    }

    fn event(&mut self, ev: &mut StreamEvent<'a>) -> Option<()> {
        let mut seen = 0u32;
        self.skip_spaces();
        self.eat(b'{')?;
        self.skip_spaces();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.next_byte()?;
            let key = self.plain_key()?;
            if self.next_byte()? != b':' {
                return None;
            }
            self.pos += 1;
            self.next_byte()?;
            let f = field(key);
            match f {
                Field::Str(n) | Field::Int(n) | Field::Raw(n) => {
                    if seen & (1 << n) != 0 {
                        return None; // serde: duplicate field
                    }
                    seen |= 1 << n;
                }
                Field::Other => {}
            }
            match f {
                Field::Str(n) => {
                    let value = if self.peek()? == b'n' {
                        self.literal(b"null")?;
                        None
                    } else {
                        Some(Str(self.string()?))
                    };
                    *str_slot(ev, n) = value;
                }
                Field::Int(n) => {
                    let value = if self.peek()? == b'n' {
                        self.literal(b"null")?;
                        None
                    } else {
                        Some(self.unsigned()?)
                    };
                    *int_slot(ev, n) = value;
                }
                // Built at once, in the pass that validates it (they are all read when
                // present, and a whole response's text is worth one pass, not two).
                Field::Raw(n) => {
                    if self.buf[self.pos..].starts_with(b"null") {
                        self.pos += 4;
                    } else {
                        let value = self.build(0)?;
                        ev.built
                            .get_or_insert_with(Default::default)
                            .get_mut()
                            .insert(RAW_FIELDS[n - 16].to_owned(), value);
                    }
                }
                Field::Other => self.value(0)?,
            }
            match self.next_byte()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A key without escapes.
    fn plain_key(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.pos;
        let end = quote_or_backslash(self.buf, start)?;
        if self.buf[end] != b'"' {
            return None;
        }
        self.pos = end + 1;
        Some(&self.buf[start..end])
    }

    /// A string value, borrowed when it has no escapes, else unescaped. Inlined: returned
    /// through memory, the `Cow` is written as words and read back as one 16-byte load, which
    /// stalls on store forwarding at every string field.
    #[inline(always)]
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.pos;
        let end = quote_or_backslash(self.buf, start)?;
        if self.buf[end] == b'"' {
            self.pos = end + 1;
            return Some(Cow::Borrowed(&self.text[start..end]));
        }
        // The string's raw length bounds the unescaped one: one allocation, however long the
        // string (a whole response's text, say).
        let mut close = end;
        loop {
            if close + 2 > self.buf.len() {
                return None;
            }
            close = quote_or_backslash(self.buf, close + 2)?;
            if self.buf[close] == b'"' {
                break;
            }
        }
        let mut out = String::with_capacity(close - start);
        out.push_str(&self.text[start..end]);
        self.pos = end;
        loop {
            // `get`: an escape may end the buffer (an unterminated string).
            match *self.buf.get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    self.pos += 1;
                    let escaped = *self.buf.get(self.pos)?;
                    self.pos += 1;
                    match escaped {
                        b'u' => out.push(unicode_escape_at(self.buf, &mut self.pos)?),
                        _ => out.push(char::from(simple_escape(escaped)?)),
                    }
                }
                _ => {
                    let from = self.pos;
                    let end = quote_or_backslash(self.buf, from)?;
                    out.push_str(&self.text[from..end]);
                    self.pos = end;
                }
            }
        }
    }

    /// [`string`](Self::string) in a buffer not validated as a whole (see
    /// [`Shape::read_framed`]): the string's bytes are validated as [`Reader::checked`] does
    /// (a `\u` escape is refused, see [`hole_text`](Self::hole_text)).
    #[inline(always)]
    fn hole_string(&mut self) -> Option<Cow<'a, str>> {
        Some(match self.hole_text()? {
            Text::Plain(text) => Cow::Borrowed(text),
            Text::Escaped(raw) => {
                let mut text = String::with_capacity(raw.len());
                unescape_into(&mut text, raw);
                Cow::Owned(text)
            }
        })
    }

    /// The string at the reader's position, in a buffer not validated as a whole, up to its
    /// first byte that needs a closer look: where it starts, where that byte is, the byte (`"`,
    /// `\`, a control byte) and whether the bytes before it are ASCII.
    #[inline(always)]
    fn hole_run(&self) -> Option<(usize, usize, u8, bool)> {
        let start = self.pos;
        if self.peek()? != b'"' {
            return None;
        }
        let mut ascii = true;
        let (end, stop) = string_stop(self.buf, start + 1, &mut ascii)?;
        Some((start, end, stop, ascii))
    }

    /// A string in a buffer not validated as a whole (see [`Shape::read_framed`]), its bytes
    /// validated as [`Reader::checked`] does, not built: the text, or with escapes their
    /// validated contents (a `\u` escape is refused, as [`skip_string`](Self::skip_string)
    /// refuses it).
    #[inline(always)]
    fn hole_text(&mut self) -> Option<Text<'a>> {
        let (start, end, stop, ascii) = self.hole_run()?;
        match stop {
            b'"' => {
                let text = run_text(&self.buf[start + 1..end], ascii)?;
                self.pos = end + 1;
                Some(Text::Plain(text))
            }
            b'\\' => {
                self.skip_string()?;
                let hole = Reader::checked(&self.buf[start..self.pos])?;
                Some(Text::Escaped(&hole.text[1..hole.text.len() - 1]))
            }
            // A control byte.
            _ => None,
        }
    }

    /// A string in a buffer not validated as a whole (see [`Template::read`]), its bytes
    /// validated as [`Reader::checked`] does: the text, unescaped (any escape, unlike
    /// [`hole_string`](Self::hole_string)).
    #[inline(always)]
    fn hole_any_string(&mut self) -> Option<Cow<'a, str>> {
        let (start, end, stop, mut ascii) = self.hole_run()?;
        match stop {
            b'"' => {
                let text = run_text(&self.buf[start + 1..end], ascii)?;
                self.pos = end + 1;
                Some(Cow::Borrowed(text))
            }
            b'\\' => {
                // Unescaped in one pass, each run between escapes validated as it is copied
                // (a run starts and ends next to ASCII bytes, so no character is cut).
                let mut out = String::with_capacity(end - start + 16);
                let (mut from, mut stop) = (start + 1, end);
                loop {
                    out.push_str(run_text(&self.buf[from..stop], ascii)?);
                    match self.buf[stop] {
                        b'"' => {
                            self.pos = stop + 1;
                            return Some(Cow::Owned(out));
                        }
                        b'\\' => {
                            let escaped = *self.buf.get(stop + 1)?;
                            from = stop + 2;
                            match escaped {
                                b'u' => out.push(unicode_escape_at(self.buf, &mut from)?),
                                _ => out.push(char::from(simple_escape(escaped)?)),
                            }
                        }
                        // A control byte.
                        _ => return None,
                    }
                    ascii = true;
                    stop = string_stop(self.buf, from, &mut ascii)?.0;
                }
            }
            // A control byte.
            _ => None,
        }
    }

    /// [`skip_value`](Self::skip_value) in a buffer not validated as a whole (see
    /// [`Shape::read_framed`]): the value's bytes are validated as [`Reader::checked`] does.
    #[inline(always)]
    fn hole_skip(&mut self) -> Option<()> {
        if self.peek()? == b'"' {
            self.hole_string()?;
            return Some(());
        }
        let start = self.pos;
        self.skip_value()?;
        Reader::checked(&self.buf[start..self.pos]).map(|_| ())
    }

    /// A plain non-negative integer that fits `u64` (no sign, fraction or exponent).
    #[inline(always)]
    fn unsigned(&mut self) -> Option<u64> {
        let (buf, start) = (self.buf, self.pos);
        let mut i = start;
        let mut n: u64 = 0;
        while let Some(&b) = buf.get(i) {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            n = n.wrapping_mul(10).wrapping_add(u64::from(d));
            i += 1;
        }
        let len = i - start;
        if len == 0 || (len > 1 && buf[start] == b'0') {
            return None;
        }
        if len > 19 {
            // Past 19 digits it may not fit: counted again, with overflow checks.
            n = buf[start..i].iter().try_fold(0u64, |n, &d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })?;
        }
        self.pos = i;
        match buf.get(i) {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(n),
        }
    }

    /// Validates (and skips) any JSON value: the lexer's [`Lexer::skip_value`] (strings checked
    /// as the lexer checks them, `\u` escapes included; nesting up to [`MAX_DEPTH`]).
    fn value(&mut self, depth: usize) -> Option<()> {
        let mut lx = Lexer::new(self.buf);
        lx.seek(self.pos);
        lx.skip_value(depth)?;
        self.pos = lx.position();
        Some(())
    }

    /// [`value`](Self::value), with a short string without escapes (the usual unread field)
    /// skipped in line.
    #[inline(always)]
    fn skip_value(&mut self) -> Option<()> {
        if self.peek()? == b'"' {
            let end = quote_or_backslash(self.buf, self.pos + 1)?;
            if self.buf[end] == b'"' {
                self.pos = end + 1;
                return Some(());
            }
        }
        self.value(0)
    }

    /// Skips a string with no `\u` escape (what [`unescape_into`] unescapes; the rest is left
    /// to serde).
    fn skip_string(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.pos = skip_string_at(self.buf, self.pos, false)?.0;
        Some(())
    }

    /// A number by JSON's grammar (the lexer's), skipped.
    fn number(&mut self) -> Option<()> {
        self.pos = number_syntax(self.buf, self.pos)?.0;
        Some(())
    }

    /// Any JSON value, built as serde_json's `Value` (whitespace allowed where JSON allows it).
    fn build(&mut self, depth: usize) -> Option<Value> {
        self.skip_json_spaces();
        let value = match self.peek()? {
            b'"' => Value::String(self.string()?.into_owned()),
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.pos += 1;
                let mut map = Map::new();
                self.skip_json_spaces();
                if self.peek()? == b'}' {
                    self.pos += 1;
                    return Some(Value::Object(map));
                }
                loop {
                    self.skip_json_spaces();
                    let key = self.string()?.into_owned();
                    self.skip_json_spaces();
                    self.eat(b':')?;
                    let value = self.build(depth + 1)?;
                    // serde_json's own visitor inserts too: a repeated key keeps its place
                    // and takes the later value.
                    map.insert(key, value);
                    self.skip_json_spaces();
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b'}' => {
                            self.pos += 1;
                            return Some(Value::Object(map));
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
                let mut items = Vec::new();
                self.skip_json_spaces();
                if self.peek()? == b']' {
                    self.pos += 1;
                    return Some(Value::Array(items));
                }
                loop {
                    items.push(self.build(depth + 1)?);
                    self.skip_json_spaces();
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b']' => {
                            self.pos += 1;
                            return Some(Value::Array(items));
                        }
                        _ => return None,
                    }
                }
            }
            b't' => {
                self.literal(b"true")?;
                Value::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Value::Bool(false)
            }
            b'n' => {
                self.literal(b"null")?;
                Value::Null
            }
            b'-' | b'0'..=b'9' => Value::Number(self.number_value()?),
            _ => return None,
        };
        Some(value)
    }

    /// A number as serde_json makes it: an integer that fits `u64` (or, negative, `i64`) as
    /// one, anything with a fraction or exponent as the nearest `f64` (`float_roundtrip`).
    fn number_value(&mut self) -> Option<Number> {
        let start = self.pos;
        self.number()?;
        let literal = &self.text[start..self.pos];
        if !literal.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            return if literal.starts_with('-') {
                // serde_json makes `-0` a float; leave it (and overflows) to serde.
                match literal.parse::<i64>().ok()? {
                    0 => None,
                    n => Some(Number::from(n)),
                }
            } else {
                literal.parse::<u64>().ok().map(Number::from)
            };
        }
        let f = literal.parse::<f64>().ok()?;
        if f.is_finite() {
            Number::from_f64(f)
        } else {
            None
        }
    }

    /// JSON's whitespace (this reader's other paths only pass spaces, and leave the rest to
    /// serde; a payload with control bytes never reaches them).
    fn skip_json_spaces(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.buf.get(self.pos) {
            self.pos += 1;
        }
    }
}

/// Whether a byte below 0x20 is inside a string of `json` (or a string is not closed).
fn control_in_a_string(json: &[u8]) -> bool {
    let mut i = 0;
    while let Some(at) = json.get(i..).and_then(|rest| memchr::memchr(b'"', rest)) {
        let start = i + at;
        let Some(end) = known_string_end(json, start) else {
            return true;
        };
        if json[start..end].iter().any(|&b| b < 0x20) {
            return true;
        }
        i = end;
    }
    false
}

/// `json` (one JSON object, as validated by serde or this reader) as serde_json would parse
/// it into a map, in one pass and with fewer copies; `None` when serde must decide (anything
/// this reader leaves to serde, an integer out of `u64`/`i64`, `-0`, a float out of range).
pub(crate) fn object(json: &str) -> Option<Map<String, Value>> {
    // Its strings are read as a validated payload's are, which lets a raw control byte inside
    // one through: serde refuses that, so such text goes to serde (whitespace between tokens is
    // fine).
    if control_or_high(json.as_bytes()) & 1 != 0 && control_in_a_string(json.as_bytes()) {
        return None;
    }
    let mut r = Reader {
        buf: json.as_bytes(),
        text: json,
        pos: 0,
    };
    r.skip_spaces();
    if r.peek()? != b'{' {
        return None;
    }
    let Value::Object(map) = r.build(0)? else {
        return None;
    };
    r.skip_spaces();
    (r.pos == r.buf.len()).then_some(map)
}

/// A JSON value inside a payload read by [`entries`]: validated, not built. Read it with its
/// methods, which use this reader's own (so a value reads as it would inside an event).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    fn reader(self) -> Reader<'a> {
        Reader {
            buf: self.0.as_bytes(),
            text: self.0,
            pos: 0,
        }
    }

    /// The value's JSON text, as it came.
    pub(crate) fn json(self) -> &'a str {
        self.0
    }

    pub(crate) fn is_null(self) -> bool {
        self.0 == "null"
    }

    /// The first byte (`"`, `{`, `[`, a digit, `-`, `t`, `f` or `n`).
    pub(crate) fn first(self) -> u8 {
        self.0.as_bytes()[0]
    }

    /// A string's text (unescaped); `None` if not a string.
    pub(crate) fn string(self) -> Option<Cow<'a, str>> {
        let mut r = self.reader();
        (r.peek()? == b'"').then(|| r.string())?
    }

    /// A plain non-negative integer that fits `u64`; `None` for anything else.
    pub(crate) fn unsigned(self) -> Option<u64> {
        let mut r = self.reader();
        let n = r.unsigned()?;
        (r.pos == r.buf.len()).then_some(n)
    }

    /// `true` / `false`; `None` for anything else.
    pub(crate) fn boolean(self) -> Option<bool> {
        match self.0 {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    /// The value as serde_json builds it; `None` when serde must decide (see [`object`]).
    pub(crate) fn build(self) -> Option<Value> {
        self.reader().build(0)
    }

    /// Whether serde_json reads this value as a `Value` (every number finite and, for an
    /// integer, at most 19 digits): then `serde_json::from_str::<Value>(raw.json())` succeeds.
    ///
    /// A raw value is valid JSON already (see [`Raw`]), so only its numbers can say no: a value
    /// whose numbers all have at most 19 digits and no exponent passes without being lexed
    /// again ([`plain_numbers`]); any other is checked by the lexer.
    pub(crate) fn buildable(self) -> bool {
        plain_numbers(self.0.as_bytes())
            || Lexer::new(self.0.as_bytes())
                .skip_buildable_value(0)
                .is_some()
    }

    /// An object's entries in order, as [`entries`] reads a payload's; `None` if not an object
    /// (or when serde must decide).
    pub(crate) fn entries(self, f: impl FnMut(&'a str, Raw<'a>) -> Option<()>) -> Option<()> {
        self.reader().entries::<true>(f)
    }

    /// An array's items in order; `None` if not an array (or when serde must decide).
    pub(crate) fn items(self, mut f: impl FnMut(Raw<'a>) -> Option<()>) -> Option<()> {
        let mut r = self.reader();
        r.eat(b'[')?;
        if r.next_byte()? == b']' {
            return Some(());
        }
        loop {
            f(r.raw::<true>()?)?;
            match r.next_byte()? {
                b',' => r.pos += 1,
                b']' => return Some(()),
                _ => return None,
            }
        }
    }
}

/// Whether every number in `json` (valid JSON) is one serde_json builds as it is written: no
/// exponent and at most 19 digits in a row, so an integer fits 64 bits and a float is finite
/// (a float literal is infinite only past 308 digits or with an exponent). Strings are
/// skipped: only the bytes between them are looked at, where an `e` or `E` after a digit is an
/// exponent (`true` and `false` have theirs after a letter). `false` is not "unbuildable",
/// only "ask the lexer".
fn plain_numbers(json: &[u8]) -> bool {
    let mut i = 0;
    let mut digits = 0usize;
    while let Some(&b) = json.get(i) {
        match b {
            b'0'..=b'9' => {
                digits += 1;
                if digits > 19 {
                    return false;
                }
            }
            b'"' => {
                digits = 0;
                let Some(end) = known_string_end(json, i) else {
                    return false;
                };
                i = end;
                continue;
            }
            b'e' | b'E' if digits > 0 => return false,
            _ => digits = 0,
        }
        i += 1;
    }
    true
}

/// Reads the payload `payload`, one JSON object, entry by entry: `f` gets each key (one
/// without escapes) and its value, validated, not built. `None` (perhaps after some calls of
/// `f`) when `f` says so or serde must decide: what [`Reader::checked`] refuses, an escaped
/// key, anything invalid, anything after the object but spaces. So a caller acts only once
/// this returns `Some`.
///
/// The accumulators' fast paths read a chunk with it: they look at the fields they need, and
/// build (or keep as JSON) only those (`docs/internals.md`).
pub(crate) fn entries<'a>(
    payload: &'a [u8],
    f: impl FnMut(&'a str, Raw<'a>) -> Option<()>,
) -> Option<()> {
    let mut r = Reader::checked(payload)?;
    r.skip_spaces();
    r.entries::<false>(f)?;
    r.skip_spaces();
    (r.pos == r.buf.len()).then_some(())
}

impl<'a> Reader<'a> {
    /// The object at the reader's position, entry by entry (see [`entries`]). `KNOWN`: inside a
    /// value [`entries`] validated, so values are skipped by [`skip_known`](Self::skip_known).
    fn entries<const KNOWN: bool>(
        &mut self,
        mut f: impl FnMut(&'a str, Raw<'a>) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.next_byte()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.next_byte()?;
            let key = self.plain_key()?;
            if self.next_byte()? != b':' {
                return None;
            }
            self.pos += 1;
            let value = self.raw::<KNOWN>()?;
            // SAFETY: a key is delimited by ASCII quotes in text that is UTF-8.
            f(unsafe { std::str::from_utf8_unchecked(key) }, value)?;
            match self.next_byte()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The value at the reader's position (after spaces), validated (unless `KNOWN`: see
    /// [`entries`](Self::entries)) and skipped.
    fn raw<const KNOWN: bool>(&mut self) -> Option<Raw<'a>> {
        self.next_byte()?;
        let start = self.pos;
        if KNOWN {
            self.skip_known()?;
        } else {
            self.skip_value()?;
        }
        Some(Raw(&self.text[start..self.pos]))
    }

    /// Skips a value known to be valid JSON (part of one that [`skip_value`](Self::skip_value)
    /// validated): only its strings and brackets are looked at, to find its end. (A byte at a
    /// time: most values skipped are short. A search sixteen bytes at a time for the next quote
    /// or bracket, tried, cost a tool-call stream's feeds 2% more instructions.)
    fn skip_known(&mut self) -> Option<()> {
        let buf = self.buf;
        let mut i = self.pos;
        let mut depth = 0usize;
        loop {
            match *buf.get(i)? {
                b'"' => i = known_string_end(buf, i)?,
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                    continue;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    i += 1;
                }
                // A scalar: to the byte that ends it.
                _ if depth == 0 => {
                    while !matches!(buf.get(i), None | Some(b',' | b'}' | b']' | b' ')) {
                        i += 1;
                    }
                }
                _ => i += 1,
            }
            if depth == 0 {
                self.pos = i;
                return Some(());
            }
        }
    }
}

/// Where the string whose opening quote is at `quote` ends (after its closing quote), in valid
/// JSON; in other text, the first closing quote that is not escaped, or `None`.
#[inline(always)]
fn known_string_end(buf: &[u8], quote: usize) -> Option<usize> {
    let mut at = quote + 1;
    loop {
        if at >= buf.len() {
            return None; // not closed (only in text that is not valid JSON)
        }
        let stop = quote_or_backslash(buf, at)?;
        if buf[stop] == b'"' {
            return Some(stop + 1);
        }
        at = stop + 2; // the escaped byte (`\u` digits are not quotes)
    }
}

/// The most holes a [`Template`] has.
pub(crate) const MAX_HOLES: usize = 4;

/// The outputs of a payload a [`Template`] read, in order (the first ones; `None` after).
pub(crate) type Holes<'a> = [Option<Hole<'a>>; MAX_HOLES];

/// A hole's value in a chunk read by a [`Template`].
#[derive(Debug)]
pub(crate) enum Hole<'a> {
    /// A string's text (unescaped).
    Text(Cow<'a, str>),
    /// A value, validated, that serde_json builds (see [`Raw::buildable`]).
    Value(Raw<'a>),
}

/// What a fast path notes reading a chunk, for [`Template::learn_from`]: the values that are
/// holes (with whether each is a text) and what the accumulator did with each (`A`); `ok`
/// false when the chunk did something that done again would not give the same (a part
/// appended, logprobs lists extended): then it is no shape. `skips`: strings the accumulator
/// does not read at all (an `obfuscation` padding, an `id` that changes at every chunk),
/// holes that are validated and not given out. `sets`: what the chunk set whatever the state
/// it found (a `finish_reason`, a `role`), written out; a chunk of the shape sets it again, so
/// a tap that keeps several shapes keeps them together only when they set the same.
pub(crate) struct Learn<'a, A> {
    pub ok: bool,
    pub holes: Vec<(Raw<'a>, bool, A)>,
    pub skips: Vec<Raw<'a>>,
    pub sets: String,
}

impl<A> Learn<'_, A> {
    pub(crate) fn new() -> Self {
        Learn {
            ok: true,
            holes: Vec::new(),
            skips: Vec::new(),
            sets: String::new(),
        }
    }
}

/// What one hole of a [`Template`] holds: a text given out, a number inside a value given
/// out, or a string nobody reads (validated, not given out).
#[derive(Clone, Copy, Debug, PartialEq)]
enum HoleKind {
    Text,
    Number,
    Skip,
}

/// The shape of a chunk an accumulator's fast path read, to read the next chunks of the same
/// shape faster (the Gemini and Completions taps' [`Shape`]): its bytes cut into fixed runs and
/// holes. A hole is a text (a string the accumulator appended) or a number inside a value (a
/// field it replaces, such as a usage object: its numbers change from chunk to chunk, its keys
/// and strings do not). A payload whose bytes equal the fixed runs exactly, with a string in
/// each text hole and a number serde builds in each number hole, differs from the learned one
/// only inside the holes: each is one whole JSON string or number read where the learned one
/// was, followed by the same bytes, so the payload is the learned one with other strings and
/// numbers there (and each replaced value is still valid JSON that serde builds). The
/// accumulator, which learned what the chunk did, then does the same with the new texts and
/// values. A skip hole is a string the accumulator does not read (see [`Learn`]): any string
/// there gives the same result. Any other payload is a miss.
#[derive(Debug, Default)]
pub(crate) struct Template {
    learned: Vec<u8>,
    /// Each hole's start and end in `learned`, and what it holds.
    holes: Vec<(usize, usize, HoleKind)>,
    /// What [`read`](Self::read) gives, in order: a text (the next text hole), or a value (its
    /// start and end in `learned`, and its number holes `first..last`).
    outputs: Vec<Output>,
    /// The fewest bytes a payload of the shape takes: its fixed bytes, and the shortest hole
    /// each hole can be (`""`, a digit).
    shortest: usize,
    /// The skip holes (bit `i`: `holes[i]`) a payload read had another string in. The others
    /// are compared with the fixed bytes around them, in one run (see [`read`](Self::read)).
    changing: u64,
}

#[derive(Clone, Copy, Debug)]
enum Output {
    Text,
    Value {
        start: usize,
        end: usize,
        first: usize,
        last: usize,
    },
}

/// The most number holes a [`Template`] has.
const MAX_NUMBERS: usize = 24;

/// The most skip holes a [`Template`] has.
const MAX_SKIPS: usize = 8;

// Every hole has its bit in `Template::changing`.
const _: () = assert!(MAX_NUMBERS + MAX_HOLES + MAX_SKIPS <= 64);

impl Template {
    /// Whether a shape is learned (else every payload misses).
    pub(crate) fn is_learned(&self) -> bool {
        !self.learned.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.learned.clear();
        self.holes.clear();
        self.outputs.clear();
        self.changing = 0;
        self.shortest = 0;
    }

    /// Learns `payload`'s shape with `spans` (values [`entries`] read from this very payload,
    /// in order, each with what it is: a text or a skipped value, both strings, or a value
    /// given out). A value's numbers are its holes; a value without numbers is fixed, and
    /// dropped from the outputs: `kept` says which spans are outputs (a skip never is). None
    /// (nothing learned) if they are not in order, not in `payload`, or too many.
    fn learn(
        &mut self,
        payload: &[u8],
        spans: &[(Raw<'_>, HoleKind)],
        kept: &mut Vec<bool>,
    ) -> Option<()> {
        self.clear();
        kept.clear();
        let base = payload.as_ptr() as usize;
        let mut last = 0;
        let mut skips = 0;
        for &(raw, kind) in spans {
            let start = (raw.0.as_ptr() as usize).checked_sub(base)?;
            let end = start + raw.0.len();
            if start < last
                || end > payload.len()
                || (kind != HoleKind::Number && raw.first() != b'"')
            {
                return None;
            }
            last = end;
            match kind {
                HoleKind::Text => {
                    self.outputs.push(Output::Text);
                    self.holes.push((start, end, kind));
                    kept.push(true);
                    continue;
                }
                HoleKind::Skip => {
                    skips += 1;
                    self.holes.push((start, end, kind));
                    kept.push(false);
                    continue;
                }
                HoleKind::Number => {}
            }
            let first = self.holes.len();
            // The numbers of the value: outside its strings, a run from `-` or a digit.
            let bytes = raw.0.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        let mut at = i + 1;
                        loop {
                            let stop = quote_or_backslash(bytes, at)?;
                            if bytes[stop] == b'"' {
                                i = stop + 1;
                                break;
                            }
                            at = stop + 2;
                        }
                    }
                    b'-' | b'0'..=b'9' => {
                        let (stop, _) = number_syntax(bytes, i)?;
                        self.holes.push((start + i, start + stop, HoleKind::Number));
                        i = stop;
                    }
                    _ => i += 1,
                }
            }
            let numbers = self.holes.len() - first;
            kept.push(numbers > 0);
            if numbers > 0 {
                self.outputs.push(Output::Value {
                    start,
                    end,
                    first,
                    last: self.holes.len(),
                });
            }
        }
        if self.outputs.len() > MAX_HOLES
            || skips > MAX_SKIPS
            || self.holes.len() > MAX_NUMBERS + MAX_HOLES + MAX_SKIPS
        {
            return None;
        }
        self.learned.extend_from_slice(payload);
        self.shortest = self
            .holes
            .iter()
            .fold(payload.len(), |n, &(start, end, kind)| {
                n - (end - start) + if kind == HoleKind::Number { 1 } else { 2 }
            });
        Some(())
    }

    /// The fewest bytes a payload of the learned shape takes (0: none learned).
    pub(crate) fn shortest(&self) -> usize {
        self.shortest
    }

    /// Learns `payload`'s shape from what a fast path noted reading it (see [`Learn`]), with
    /// the outputs' actions in `actions`, in order; clears both if it is not one.
    pub(crate) fn learn_from<A>(
        &mut self,
        payload: &[u8],
        learn: Learn<'_, A>,
        actions: &mut Vec<A>,
    ) {
        let Learn {
            ok,
            mut holes,
            skips,
            ..
        } = learn;
        actions.clear();
        if !ok {
            self.clear();
            return;
        }
        holes.sort_by_key(|(raw, _, _)| raw.0.as_ptr() as usize);
        let kind = |text: bool| {
            if text {
                HoleKind::Text
            } else {
                HoleKind::Number
            }
        };
        let mut spans: Vec<(Raw<'_>, HoleKind)> = Vec::with_capacity(holes.len() + skips.len());
        spans.extend(holes.iter().map(|h| (h.0, kind(h.1))));
        spans.extend(skips.into_iter().map(|raw| (raw, HoleKind::Skip)));
        spans.sort_by_key(|(raw, _)| raw.0.as_ptr() as usize);
        let mut kept = Vec::with_capacity(spans.len());
        if self.learn(payload, &spans, &mut kept).is_none() {
            self.clear();
            return;
        }
        // The holes in order, with whether each is an output (skips left out).
        let outputs = spans
            .iter()
            .zip(kept)
            .filter(|((_, kind), _)| *kind != HoleKind::Skip)
            .map(|(_, kept)| kept);
        actions.extend(
            holes
                .into_iter()
                .zip(outputs)
                .filter_map(|(h, kept)| kept.then_some(h.2)),
        );
    }

    /// The outputs of `payload` if it has the learned shape (see [`Template`]): each text's
    /// string, each value's JSON.
    ///
    /// A skip hole that held the learned string at every read so far (an `id`, a `model`) is
    /// compared as part of the fixed run around it: the payload's bytes equal to the learned
    /// ones there are the same whole string, ended where the learned one ends. Only when the
    /// run differs is it read again hole by hole ([`run`](Self::run)), and a skip hole found
    /// holding another string is read on its own from then on (an `obfuscation` padding).
    pub(crate) fn read<'a>(&mut self, payload: &'a [u8]) -> Option<Holes<'a>> {
        let (out, end) = self.read_at(payload)?;
        (end == payload.len()).then_some(out)
    }

    /// [`read`](Self::read) of a payload at the start of `buf` that may go on after it (the
    /// SSE bytes after a `data: `, see [`ChatAccumulator::add_framed`]): its outputs and where
    /// it ends. The bytes read are validated as `read` validates them, so they hold no CR or
    /// LF (control bytes).
    ///
    /// [`ChatAccumulator::add_framed`]: super::ChatAccumulator::add_framed
    pub(crate) fn read_at<'a>(&mut self, payload: &'a [u8]) -> Option<(Holes<'a>, usize)> {
        if self.learned.is_empty() {
            return None;
        }
        // Not validated as a whole (see [`read_framed`](Shape::read_framed)): the bytes equal to
        // the learned ones are UTF-8 without control bytes, as the learned payload is, and each
        // hole is validated on its own. So only methods that read `buf` are used.
        let mut r = Reader {
            buf: payload,
            text: "",
            pos: 0,
        };
        let mut out = [None, None, None, None];
        // Each output filled as its holes are read (they come in the outputs' order): the next
        // output, and where the value being read starts in `payload`.
        let (mut next, mut value_begin) = (0, 0);
        // Where each value output is in `payload`.
        let mut values = [(0, 0); MAX_HOLES];
        // The run being compared: from `from` in `learned` (at `r.pos` in the payload), its
        // skip holes from `deferred` on.
        let (mut from, mut deferred) = (0, 0);
        for i in 0..self.holes.len() {
            let (start, end, kind) = self.holes[i];
            if kind == HoleKind::Skip && self.changing & (1 << i) == 0 {
                continue;
            }
            self.run(&mut r, from, deferred..i, start)?;
            let begin = r.pos;
            match kind {
                HoleKind::Text => {
                    *out.get_mut(next)? = Some(Hole::Text(r.hole_any_string()?));
                    next += 1;
                }
                HoleKind::Skip => {
                    r.hole_any_string()?;
                }
                HoleKind::Number => {
                    let mut lx = Lexer::new(r.buf);
                    lx.seek(begin);
                    if !matches!(lx.peek()?, b'-' | b'0'..=b'9') {
                        return None;
                    }
                    lx.skip_buildable_value(0)?;
                    r.pos = lx.position();
                    let Some(&Output::Value {
                        start: value_start,
                        end: value_end,
                        first,
                        last,
                    }) = self.outputs.get(next)
                    else {
                        // Never: a number hole is inside the next output, a value.
                        return None;
                    };
                    if i == first {
                        value_begin = begin - (start - value_start);
                    }
                    if i + 1 == last {
                        let stop = r.pos + (value_end - end);
                        // Given out once the whole payload is read (its last bytes are not
                        // compared yet).
                        *values.get_mut(next)? = (value_begin, stop);
                        out[next] = Some(Hole::Value(Raw("")));
                        next += 1;
                    }
                }
            }
            (from, deferred) = (end, i + 1);
        }
        self.run(&mut r, from, deferred..self.holes.len(), self.learned.len())?;
        for (hole, &(start, end)) in out.iter_mut().zip(&values) {
            if let Some(Hole::Value(raw)) = hole {
                let bytes = &payload[start..end];
                debug_assert!(std::str::from_utf8(bytes).is_ok());
                // SAFETY: every byte read is one equal to the learned payload's (UTF-8, cut
                // next to ASCII bytes: delimiters, a number's first and last) or a hole's,
                // validated (a string as `Reader::checked` would, a number by its grammar):
                // UTF-8.
                *raw = Raw(unsafe { std::str::from_utf8_unchecked(bytes) });
            }
        }
        Some((out, r.pos))
    }

    /// Reads the learned bytes `from..to` at `r`'s position, the skip holes `skips` (all inside
    /// it) included: at once when the payload has the very same bytes there, else run by run,
    /// each skip hole's string read (and, if it is another, the hole noted in `changing`).
    #[inline(always)]
    fn run(
        &mut self,
        r: &mut Reader<'_>,
        from: usize,
        skips: Range<usize>,
        to: usize,
    ) -> Option<()> {
        let whole = &self.learned[from..to];
        match r.buf.get(r.pos..r.pos + whole.len()) {
            Some(here) if same(here, whole) => {
                r.pos += whole.len();
                return Some(());
            }
            // A skip hole with a shorter string, perhaps.
            _ if !skips.is_empty() => {}
            _ => return None,
        }
        let mut from = from;
        for i in skips {
            let (start, end, _) = self.holes[i];
            let fixed = &self.learned[from..start];
            if !same(r.buf.get(r.pos..r.pos + fixed.len())?, fixed) {
                return None;
            }
            r.pos += fixed.len();
            let begin = r.pos;
            r.hole_any_string()?;
            if !same(&r.buf[begin..r.pos], &self.learned[start..end]) {
                self.changing |= 1 << i;
            }
            from = end;
        }
        let fixed = &self.learned[from..to];
        if !same(r.buf.get(r.pos..r.pos + fixed.len())?, fixed) {
            return None;
        }
        r.pos += fixed.len();
        Some(())
    }
}

fn str_slot<'e, 'a>(ev: &'e mut StreamEvent<'a>, n: usize) -> &'e mut Option<Str<'a>> {
    match n {
        0 => &mut ev.kind,
        1 => &mut ev.item_id,
        2 => &mut ev.response_id,
        3 => &mut ev.delta,
        4 => &mut ev.text,
        5 => &mut ev.refusal,
        6 => &mut ev.arguments,
        7 => &mut ev.input,
        8 => &mut ev.transcript,
        9 => &mut ev.name,
        _ => &mut ev.call_id,
    }
}

fn int_slot<'e>(ev: &'e mut StreamEvent<'_>, n: usize) -> &'e mut Option<u64> {
    match n {
        11 => &mut ev.sequence_number,
        12 => &mut ev.output_index,
        13 => &mut ev.content_index,
        14 => &mut ev.summary_index,
        _ => &mut ev.annotation_index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hole_text_unescaped_is_the_string_the_reader_builds() {
        let pieces = [
            "a", "\\n", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\r", "\\t", "é", "😀", " ",
            "\\u00e9", "\\q", "\u{1}", "\\",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut checked = 0;
        for _ in 0..20_000 {
            let mut json = String::from("\"");
            for _ in 0..state % 7 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                json.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            json.push_str("\",");
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;

            let mut r = Reader {
                buf: json.as_bytes(),
                text: "",
                pos: 0,
            };
            let Some(text) = r.hole_text() else {
                continue;
            };
            let mut out = String::from("before");
            match text {
                Text::Plain(t) => out.push_str(t),
                Text::Escaped(raw) => unescape_into(&mut out, raw),
            }
            // The reader, on the bytes the hole took, reads the same string from all of them.
            let mut reference = Reader::checked(&json.as_bytes()[..r.pos]).expect("valid");
            let string = reference.string().expect("a string");
            assert_eq!(reference.pos, r.pos, "{json}");
            assert_eq!(&out[6..], &*string, "{json}");
            checked += 1;
        }
        assert!(checked > 5_000, "{checked}");
    }

    /// `hole_any_string` (a template's text and skip holes, in bytes not validated as a whole)
    /// takes exactly the strings the reader takes from the same bytes validated, with the same
    /// text and end: escapes of every kind, surrogate pairs and lone ones, raw UTF-8 and bytes
    /// that are not, control bytes, runs longer than a vector.
    #[test]
    fn hole_any_string_reads_what_the_reader_reads() {
        let pieces: [&[u8]; 22] = [
            b"a",
            b"\\n",
            b"\\\"",
            b"\\\\",
            b"\\/",
            b"\\b",
            b"\\f",
            b"\\r",
            b"\\t",
            "\u{e9}".as_bytes(),
            "\u{1f600}".as_bytes(),
            b" ",
            b"\\u00e9",
            b"\\ud83d\\ude00",
            b"\\ud800",
            b"\\q",
            b"\x01",
            b"\x1f",
            b"\xff",
            b"\xc3",
            b"\\",
            b"abcdefghijklmnopqrstuvwxyz0123456789",
        ];
        let mut next = crate::accumulate::xorshift();
        let (mut read, mut refused) = (0, 0);
        for _ in 0..30_000 {
            let mut json = b"\"".to_vec();
            for _ in 0..next() % 8 {
                json.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
            }
            json.extend_from_slice(b"\",\"rest\"");
            let reference = known_string_end(&json, 0).and_then(|close| {
                let mut r = Reader::checked(&json[..close])?;
                let text = r.string()?.into_owned();
                (r.pos == close).then_some((text, close))
            });
            let mut r = Reader {
                buf: &json,
                text: "",
                pos: 0,
            };
            let got = r.hole_any_string().map(|text| (text.into_owned(), r.pos));
            assert_eq!(got, reference, "{:?}", String::from_utf8_lossy(&json));
            if got.is_some() {
                read += 1;
            } else {
                refused += 1;
            }
        }
        assert!(
            read > 5_000 && refused > 5_000,
            "{read} read, {refused} refused"
        );
    }

    #[test]
    fn unsigned_reads_what_fits_a_u64_and_nothing_else() {
        let read = |text: &str| {
            let mut r = Reader::checked(text.as_bytes()).unwrap();
            r.unsigned().map(|n| (n, r.pos))
        };
        assert_eq!(read("0"), Some((0, 1)));
        assert_eq!(read("7,"), Some((7, 1)));
        assert_eq!(read("1234}"), Some((1234, 4)));
        assert_eq!(
            read("9999999999999999999"),
            Some((9_999_999_999_999_999_999, 19))
        );
        assert_eq!(read("18446744073709551615"), Some((u64::MAX, 20)));
        for bad in [
            "",
            "x",
            "-1",
            "01",
            "00",
            "1.0",
            "1e3",
            "1E3",
            "18446744073709551616",
            "99999999999999999999",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
    }

    #[test]
    fn control_or_high_sees_every_position() {
        let reference = |b: &[u8]| {
            b.iter()
                .fold(0u8, |s, &c| s | (c & 0x80) | u8::from(c < 0x20))
        };
        for len in 0..100 {
            let plain = vec![b'a'; len];
            assert_eq!(control_or_high(&plain), 0);
            for at in 0..len {
                for byte in [0x00, 0x1f, 0x20, 0x7f, 0x80, 0xff, b'"'] {
                    let mut b = plain.clone();
                    b[at] = byte;
                    assert_eq!(control_or_high(&b), reference(&b), "{len} {at} {byte}");
                }
            }
        }
    }

    /// An event as comparable text: its fields, the kept ones (raw JSON from serde, values
    /// built by this reader) as the values the accumulators read.
    fn canonical(mut ev: StreamEvent<'_>) -> String {
        let kept: Vec<(&str, Option<Value>)> = RAW_FIELDS
            .iter()
            .map(|&name| (name, ev.value(name)))
            .collect();
        (ev.code, ev.item, ev.part, ev.response) = (None, None, None, None);
        (ev.annotation, ev.error, ev.usage, ev.message) = (None, None, None, None);
        ev.built = None;
        format!("{ev:?} {kept:?}")
    }

    /// What serde makes of the payload (the reference), as comparable text.
    fn reference(payload: &[u8]) -> Option<String> {
        serde_json::from_slice::<StreamEvent<'_>>(payload)
            .ok()
            .map(canonical)
    }

    fn check(payload: &[u8]) -> bool {
        let mut ev = StreamEvent::default();
        if !parse_into(payload, &mut ev) {
            return false;
        }
        assert_eq!(
            Some(canonical(ev)),
            reference(payload),
            "fast reader disagrees with serde on {}",
            String::from_utf8_lossy(payload)
        );
        true
    }

    #[test]
    fn an_escape_ending_the_payload_is_refused_not_a_panic() {
        // Found by fuzz/fuzz_targets/accumulate.rs: the unescaping loop indexed past the end.
        for payload in [
            &br#"{"type":"x\n"#[..],
            br#"{"type":"a","delta":"b\u00e9"#,
            br#"{"delta":"\""#,
        ] {
            assert!(!check(payload));
        }
    }

    #[test]
    fn reads_typical_events_like_serde() {
        for p in [
            &br#"{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" word","logprobs":[],"obfuscation":"abc"}"#[..],
            br#"{"type":"response.output_text.delta","delta":"line\nnext \"quoted\" \u00e9\ud83d\ude00 \/"}"#,
            br#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fc","type":"function_call","arguments":"","x":[1,-2.5e3,true,false,null,{"a":"b"}]}}"#,
            br#"{ "type" : "x" , "item_id" : null , "n" : 0.5 }"#,
            br#"{}"#,
            br#"{"type":"response.completed","response":{"id":"r","output":[],"usage":{"total_tokens":3}},"code":null}"#,
            // `\u` escapes in a field nobody reads: validated and skipped by the lexer.
            br#"{"other":"\u0041","more":["\ud83d\ude00"]}"#,
        ] {
            assert!(check(p), "{}", String::from_utf8_lossy(p));
        }
    }

    #[test]
    fn leaves_odd_input_to_serde() {
        for p in [
            &b"{\"type\":\"x\",\n\"delta\":\"a\"}"[..],
            br#"{"type":"x","type":"y"}"#,
            br#"{"type":"x","delta":5}"#,
            br#"{"sequence_number":1.0}"#,
            br#"{"sequence_number":-1}"#,
            br#"{"sequence_number":18446744073709551616}"#,
            br#"{"output_index":01}"#,
            br#"{"delta":"\ud800"}"#,
            br#"{"other":"\ud800"}"#,
            br#"{"t\u0079pe":"x"}"#,
            br#"{"a":1,}"#,
            br#"{"a":01}"#,
            br#"{"a":1.}"#,
            br#"{"a":tru}"#,
            br#"{"a":"x"} x"#,
            br#"[1]"#,
            b"{\"a\":\"\xff\"}",
            br#"{"a":"\q"}"#,
        ] {
            assert!(!check(p), "{}", String::from_utf8_lossy(p));
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(!check(deep.as_bytes()));
    }

    /// Random payloads from JSON-ish fragments: whenever the fast reader answers, serde must
    /// agree exactly. (Deterministic xorshift so failures reproduce.)
    #[test]
    fn differential_against_serde() {
        let pieces: &[&[u8]] = &[
            b"{",
            b"}",
            b"[",
            b"]",
            b",",
            b":",
            b" ",
            b"\"type\"",
            b"\"delta\"",
            b"\"item_id\"",
            b"\"output_index\"",
            b"\"item\"",
            b"\"x\"",
            b"\"a\\\"b\"",
            b"\"\\n\"",
            b"\"\\u00e9\"",
            b"0",
            b"12",
            b"-3",
            b"1.5",
            b"2e9",
            b"01",
            b"null",
            b"true",
            b"false",
            b"\"\xc3\xa9\"",
            b"\"response.output_text.delta\"",
            b"18446744073709551616",
            b"\"",
            b"\\",
        ];
        let mut next = crate::accumulate::xorshift();
        let mut answered = 0;
        for _ in 0..200_000 {
            let mut p = b"{".to_vec();
            let n = (next() % 12) as usize;
            for _ in 0..n {
                p.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
            }
            if next() % 2 == 0 {
                p.push(b'}');
            }
            if check(&p) {
                answered += 1;
            }
        }
        // Structured ones: valid objects with random read fields, so many are answered.
        let keys = [
            "type",
            "delta",
            "item_id",
            "output_index",
            "sequence_number",
            "item",
            "z",
        ];
        let values = [
            "\"s\"",
            "null",
            "3",
            "{\"k\":[1,2]}",
            "\"e\\\"\"",
            "[]",
            "-1",
            "1e2",
        ];
        for _ in 0..50_000 {
            let n = (next() % 5) as usize;
            let fields: Vec<String> = (0..n)
                .map(|_| {
                    let k = keys[(next() % keys.len() as u64) as usize];
                    let v = values[(next() % values.len() as u64) as usize];
                    format!("\"{k}\":{v}")
                })
                .collect();
            if check(format!("{{{}}}", fields.join(",")).as_bytes()) {
                answered += 1;
            }
        }
        assert!(
            answered > 10_000,
            "the fast reader should answer most valid events ({answered})"
        );
    }

    /// Reads `payload` through `shape` (learning on a miss, as `read_stream_event` does) and
    /// checks a hit against the general reader; returns whether it hit.
    fn through_shape(shape: &mut Shape, payload: &[u8]) -> bool {
        let mut general = StreamEvent::default();
        let answered = parse_into(payload, &mut general);
        let mut ev = StreamEvent::default();
        if shape.is_learned() && shape.read(payload, &mut ev) {
            assert!(
                answered,
                "a shape hit where the reader declines: {}",
                String::from_utf8_lossy(payload)
            );
            assert_eq!(
                format!("{ev:?}"),
                format!("{general:?}"),
                "shape and reader disagree on {}",
                String::from_utf8_lossy(payload)
            );
            return true;
        }
        if answered {
            shape.missed(payload);
        }
        false
    }

    #[test]
    fn shape_reads_a_run_of_deltas_as_the_reader_does() {
        let mut shape = Shape::default();
        let delta = |seq: u64, text: &str, obf: &str| {
            format!(
                r#"{{"type":"response.output_text.delta","sequence_number":{seq},"item_id":"msg_1","output_index":0,"content_index":2,"delta":{text},"logprobs":[],"obfuscation":{obf}}}"#
            )
        };
        assert!(!through_shape(
            &mut shape,
            delta(1, "\"a\"", "\"x\"").as_bytes()
        ));
        let mut hits = 0;
        for (i, (text, obf)) in [
            ("\" word\"", "\"xyz\""),
            ("\"line\\nnext \\\"q\\\" \\u00e9\\ud83d\\ude00\"", "\"\""),
            ("\"\u{e9}t\u{e9}\"", "\"\\/\""),
            ("\"\"", "\"x\""),
            ("\"12345678901234567890123456789012345\"", "\"y\""),
        ]
        .iter()
        .enumerate()
        {
            hits += usize::from(through_shape(
                &mut shape,
                delta(i as u64 + 2, text, obf).as_bytes(),
            ));
        }
        assert_eq!(hits, 5, "every delta of the run reads through the shape");
        // Anything else misses, and the reader decides.
        for odd in [
            delta(9, "null", "\"x\""),
            delta(9, "5", "\"x\""),
            delta(9, "\"\\ud800\"", "\"x\""),
            delta(9, "\"a\"", "\"\\ud800\""),
            delta(9, "\"a", "\"x\""),
            delta(9, "\"a\"", "\"x\"").replace("msg_1", "msg_2"),
            delta(9, "\"a\"", "\"x\"").replace("\"content_index\":2", "\"content_index\":3"),
            delta(9, "\"a\"", "\"x\"") + " ",
            delta(9, "\"a\"", "\"x\"").replace("\"delta\":", "\"delta\" :"),
            delta(9, "\"a\"", "\"x\"").replace(":9,", ":09,"),
            delta(9, "\"a\"", "\"x\"").replace(":9,", ":9.0,"),
            delta(9, "\"a\"", "\"x\"").replace(":9,", ":-9,"),
            delta(9, "\"a\"", "\"x\"").replace(":9,", ":18446744073709551616,"),
            delta(9, "\"a\"", "\"x\"").replace("}", ",\"z\":1}"),
            delta(9, "\"a\\q\"", "\"x\""),
            format!("{}\u{1}", &delta(9, "\"a\"", "\"x\"")),
        ] {
            let mut fresh = Shape::default();
            through_shape(&mut fresh, delta(1, "\"a\"", "\"x\"").as_bytes());
            assert!(!through_shape(&mut fresh, odd.as_bytes()), "{odd}");
        }
    }

    /// Random mutations of learned payloads: whenever the shape answers, it answers as the
    /// reader does.
    #[test]
    fn shape_differential_against_the_reader() {
        let bases = [
            &br#"{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" word","logprobs":[],"obfuscation":"abc"}"#[..],
            br#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\"a\":","sequence_number":3}"#,
            br#"{ "type" : "x" , "item_id" : null , "n" : 0.5, "o": {"k": [1, "v"]}, "delta": "d" }"#,
            br#"{"type":"response.audio.transcript.delta","response_id":"r","item_id":"i","delta":"hi","extra":[{"a":1}],"flag":true}"#,
        ];
        let alphabet: &[u8] = b"\"\\{}[],:0123456789 -.eEnultrfasx\xc3\xa9";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut hits = 0;
        for _ in 0..100_000 {
            let base = bases[(next() % bases.len() as u64) as usize];
            let mut shape = Shape::default();
            through_shape(&mut shape, base);
            let mut p = base.to_vec();
            for _ in 0..=(next() % 3) {
                let at = (next() % (p.len() as u64 + 1)) as usize;
                let byte = alphabet[(next() % alphabet.len() as u64) as usize];
                match next() % 3 {
                    0 if at < p.len() => p[at] = byte,
                    1 if at < p.len() => {
                        p.remove(at);
                    }
                    _ => p.insert(at, byte),
                }
            }
            if through_shape(&mut shape, &p) {
                hits += 1;
            }
        }
        assert!(hits > 1_000, "mutations inside holes should hit ({hits})");
    }

    /// Every Responses and Realtime recording read in order through one shape each: hits
    /// agree with the reader, and the runs of deltas do hit.
    #[test]
    fn shape_agrees_with_the_reader_on_the_corpus() {
        let (mut events, mut hits) = (0, 0);
        for kind in ["responses", "realtime"] {
            for lines in crate::accumulate::corpus_lines(kind) {
                let mut shape = Shape::default();
                for json in lines.iter().filter(|json| json.starts_with('{')) {
                    events += 1;
                    hits += usize::from(through_shape(&mut shape, json.as_bytes()));
                }
            }
        }
        eprintln!("shape hits on the corpus: {hits} of {events} events");
        assert!(
            hits * 2 > events,
            "most corpus events should read through a shape ({hits} of {events})"
        );
    }

    /// `object` answers exactly as serde_json's `Value` parse does, or not at all.
    fn check_object(json: &str) -> bool {
        let Some(map) = object(json) else {
            return false;
        };
        let reference = serde_json::from_str::<Value>(json);
        assert!(
            matches!(&reference, Ok(Value::Object(m)) if *m == map),
            "object() disagrees with serde on {json}"
        );
        // Same keys in the same order, same number representations.
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            serde_json::to_string(&reference.unwrap()).unwrap()
        );
        true
    }

    #[test]
    fn object_builds_what_serde_builds() {
        for json in [
            r#"{}"#,
            r#"{"a":1,"b":-2,"c":1.5,"d":-2.5e3,"e":1E2,"f":0,"g":0.0,"h":1e-400}"#,
            r#"{"s":"plain","t":"esc \" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00","u":"é😀"}"#,
            r#"{"n":null,"t":true,"f":false,"l":[],"o":{},"nested":[{"x":[1,[2,[3]]]}]}"#,
            "{ \"a\" :\n[ 1 ,\t2 ]\r\n, \"b\" : { } }",
            r#"{"dup":1,"other":2,"dup":3}"#,
            r#"{"max":18446744073709551615,"min":-9223372036854775808}"#,
        ] {
            assert!(check_object(json), "{json}");
        }
        for json in [
            r#"{"big":18446744073709551616}"#,
            r#"{"small":-9223372036854775809}"#,
            r#"{"negzero":-0}"#,
            r#"{"inf":1e400}"#,
            r#"{"lone":"\ud800"}"#,
            r#"[1]"#,
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            // A raw control byte in a key or a string value (serde refuses it).
            "{\"a\nb\":1}",
            "{\"a\":\"x\ty\"}",
            "{\"a\":\"x\\",
        ] {
            assert!(!check_object(json), "{json}");
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(!check_object(&deep));
    }

    /// A raw value walked through `entries` and `items` (each value skipped by `skip_known`) is
    /// the value serde reads, at every depth: on every corpus payload, and on random values with
    /// brackets, quotes and escapes inside strings, nested up to six deep.
    #[test]
    fn skip_known_ends_every_value_where_serde_does() {
        fn walk(raw: Raw<'_>) -> Value {
            match raw.first() {
                b'{' => {
                    let mut map = Map::new();
                    raw.entries(|key, value| {
                        map.insert(key.to_owned(), walk(value));
                        Some(())
                    })
                    .expect("an object");
                    Value::Object(map)
                }
                b'[' => {
                    let mut items = Vec::new();
                    raw.items(|item| {
                        items.push(walk(item));
                        Some(())
                    })
                    .expect("an array");
                    Value::Array(items)
                }
                _ => serde_json::from_str(raw.json()).expect("a scalar"),
            }
        }
        let agrees = |json: &str| -> bool {
            let Ok(expected) = serde_json::from_str::<Value>(json) else {
                return false;
            };
            let mut walked = Map::new();
            let read = entries(json.as_bytes(), |key, value| {
                walked.insert(key.to_owned(), walk(value));
                Some(())
            });
            if read.is_none() {
                return false;
            }
            assert_eq!(Value::Object(walked), expected, "{json}");
            true
        };
        let mut walked = 0;
        for lines in crate::accumulate::corpus_lines("") {
            walked += lines.iter().filter(|json| agrees(json)).count();
        }
        assert!(walked > 1000, "{walked}");
        let leaves = [
            "0",
            "-1.5e3",
            "true",
            "null",
            r#""""#,
            r#""a]b}c""#,
            r#""[{\"\\""#,
            r#""\u005b""#,
            r#""x\\""#,
            r#""é{""#,
            "[]",
            "{}",
        ];
        let mut next = crate::accumulate::xorshift();
        fn value(next: &mut dyn FnMut() -> u64, leaves: &[&str], depth: usize) -> String {
            let n = (next() % 4) as usize;
            match next() % 3 {
                _ if depth == 0 => leaves[(next() % leaves.len() as u64) as usize].to_owned(),
                0 => leaves[(next() % leaves.len() as u64) as usize].to_owned(),
                1 => {
                    let items: Vec<String> =
                        (0..n).map(|_| value(next, leaves, depth - 1)).collect();
                    format!("[{}]", items.join(","))
                }
                _ => {
                    let entries: Vec<String> = (0..n)
                        .map(|k| format!("\"k{k}\":{}", value(next, leaves, depth - 1)))
                        .collect();
                    format!("{{{}}}", entries.join(","))
                }
            }
        }
        for _ in 0..3000 {
            let json = format!(
                r#"{{"a":{},"b":{}}}"#,
                value(&mut next, &leaves, 6),
                value(&mut next, &leaves, 6)
            );
            assert!(agrees(&json), "{json}");
        }
    }

    /// Number literals the random-value tests draw from: integers, floats, an exponent, one that
    /// overflows `f64`.
    const NUMBERS: &[&str] = &["0", "-0", "12", "-3", "1.5", "2e9", "1e999"];

    /// `plain_numbers` never says yes to a value the lexer refuses as unbuildable, and says yes
    /// to most of the corpus: checked on every valid JSON fragment of random numbers, strings
    /// and literals, and on every corpus payload.
    #[test]
    fn plain_numbers_implies_buildable() {
        let lexed = |json: &str| {
            Lexer::new(json.as_bytes())
                .skip_buildable_value(0)
                .is_some()
        };
        let pieces: Vec<&str> = NUMBERS
            .iter()
            .copied()
            .chain([
                "2E9",
                "-1e-999",
                "1.0e+5",
                "9999999999999999999",
                "-9999999999999999999",
                "18446744073709551616",
                "1.00000000000000000000001",
                "1234567890123456789.5",
                "true",
                "false",
                "null",
                r#""1e999""#,
                r#""12345678901234567890""#,
                r#""a\"1e9""#,
                r#""\\""#,
                r#""é3e""#,
            ])
            .collect();
        let mut next = crate::accumulate::xorshift();
        let (mut yes, mut refused) = (0, 0);
        for _ in 0..20_000 {
            let n = 1 + (next() % 4) as usize;
            let items: Vec<&str> = (0..n)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect();
            let json = match next() % 3 {
                0 => format!("[{}]", items.join(",")),
                1 => {
                    let entries: Vec<String> = items.iter().map(|v| format!("\"k\":{v}")).collect();
                    format!("{{{}}}", entries.join(","))
                }
                _ => items[0].to_owned(),
            };
            assert!(
                serde_json::from_str::<serde::de::IgnoredAny>(&json).is_ok(),
                "{json}"
            );
            if plain_numbers(json.as_bytes()) {
                yes += 1;
                assert!(lexed(&json), "{json}");
                assert!(Raw(&json).buildable(), "{json}");
            } else if !lexed(&json) {
                refused += 1;
                assert!(!Raw(&json).buildable(), "{json}");
            }
        }
        assert!(yes > 1000 && refused > 1000, "{yes} {refused}");
        let (mut total, mut plain) = (0, 0);
        for lines in crate::accumulate::corpus_lines("") {
            for json in &lines {
                if serde_json::from_str::<Value>(json).is_err() {
                    continue;
                }
                total += 1;
                if plain_numbers(json.as_bytes()) {
                    plain += 1;
                    assert!(lexed(json), "{json}");
                }
            }
        }
        assert!(plain * 10 > total * 9, "{plain} of {total}");
    }

    /// Every payload of the recorded corpus (and each pretty-printed), when it is an object.
    #[test]
    fn object_agrees_with_serde_on_the_corpus() {
        let mut answered = 0;
        for lines in crate::accumulate::corpus_lines("") {
            for json in &lines {
                let Ok(value @ Value::Object(_)) = serde_json::from_str::<Value>(json) else {
                    continue;
                };
                for form in [
                    json.to_owned(),
                    serde_json::to_string_pretty(&value).unwrap(),
                ] {
                    if check_object(&form) {
                        answered += 1;
                    }
                }
            }
        }
        assert!(
            answered > 1000,
            "object() should answer the corpus ({answered})"
        );
    }

    /// Random objects from JSON-ish fragments: whenever `object` answers, serde agrees.
    #[test]
    fn object_differential_against_serde() {
        let pieces: Vec<&str> = NUMBERS
            .iter()
            .copied()
            .chain(["{", "}", "[", "]", ",", ":", " ", "\n"])
            .chain([
                "\"k\"",
                r#""a\"b""#,
                r#""\u00e9""#,
                r#""\ud800""#,
                "01",
                "null",
                "true",
                "false",
                "\"é\"",
                "18446744073709551616",
                "\"",
                "\\",
            ])
            .collect();
        let mut next = crate::accumulate::xorshift();
        let mut answered = 0;
        for _ in 0..200_000 {
            let mut p = String::from("{");
            for _ in 0..(next() % 12) {
                p.push_str(pieces[(next() % pieces.len() as u64) as usize]);
            }
            if next() % 2 == 0 {
                p.push('}');
            }
            if check_object(&p) {
                answered += 1;
            }
        }
        assert!(answered > 1000, "object() should answer many ({answered})");
    }
}
