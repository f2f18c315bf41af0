//! Server-Sent Events framing: bytes in, events out, exactly per the WHATWG
//! "parsing an event stream" rules (HTML Living Standard, §9.2.6).
//!
//! The framer is push-style and chunking-agnostic: every byte is scanned once
//! (`memchr` over the new chunk only) and copied at most once into the line or
//! data buffer, so the cost is linear in the input whatever the chunk sizes.
//! Completed events are handed to a callback as borrowed slices; the caller
//! decides what objects to build (Python strings, JSON payloads, nothing).

use std::fmt;

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// A `retry:` value. The spec sets no upper bound, so values beyond `u64`
/// keep their digits (leading zeros stripped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retry {
    Small(u64),
    Big(String),
}

impl Retry {
    /// Parses a `retry` field value: only a non-empty run of ASCII digits counts.
    pub fn parse(value: &[u8]) -> Option<Retry> {
        if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut n: u64 = 0;
        for &b in value {
            match n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(b - b'0')))
            {
                Some(v) => n = v,
                None => {
                    let digits = std::str::from_utf8(value).unwrap_or("0");
                    let trimmed = digits.trim_start_matches('0');
                    return Some(Retry::Big(trimmed.to_owned()));
                }
            }
        }
        Some(Retry::Small(n))
    }
}

impl fmt::Display for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Retry::Small(n) => write!(f, "{n}"),
            Retry::Big(s) => f.write_str(s),
        }
    }
}

/// One dispatched event, borrowed from the framer's buffers.
#[derive(Debug)]
pub struct RawEvent<'a> {
    /// The `event:` type as sent; empty means the default type `message`.
    pub event: &'a [u8],
    /// The data buffer without its trailing LF (raw bytes: may hold invalid UTF-8).
    pub data: &'a [u8],
    /// The data came from more than one `data:` line (so it holds LFs).
    pub multiline: bool,
    /// The stream's last event id at dispatch (sticky across events).
    pub id: &'a [u8],
    /// Bumped whenever the committed last event id changes, so a caller can
    /// cache the object it built for `id`.
    pub id_generation: u64,
    /// `retry:` set in this event's block, if any.
    pub retry: Option<&'a Retry>,
    /// 0-based number of this event among the dispatched events of the stream.
    pub index: u64,
    /// Byte offset in the stream of the first line of this event's block.
    pub offset: u64,
}

/// Raised when one event's data, or one unterminated line, exceeds the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTooLarge {
    pub limit: usize,
    /// Bytes of the stream consumed when the cap was hit.
    pub stream_offset: u64,
    /// Events dispatched before it.
    pub events_dispatched: u64,
    /// Whether an unterminated line (rather than the event's data) hit the cap.
    pub in_line: bool,
}

impl fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.in_line {
            "a line without line end"
        } else {
            "an event's data"
        };
        write!(
            f,
            "{what} exceeds max_event_size={} bytes (at byte {} of the stream, after {} events)",
            self.limit, self.stream_offset, self.events_dispatched
        )
    }
}

impl std::error::Error for EventTooLarge {}

/// Errors from [`Framer::feed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FramingError {
    TooLarge(EventTooLarge),
    /// The framer failed earlier and must be [`Framer::reset`] first.
    Poisoned,
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FramingError::TooLarge(e) => e.fmt(f),
            FramingError::Poisoned => f.write_str(
                "the decoder stopped at an oversized event; call reset() to continue with a new stream",
            ),
        }
    }
}

impl std::error::Error for FramingError {}

/// Where in `chunk` the event begun in `tail` ends: just after its first blank line (`tail`
/// holds no blank line and no CR). None when the event goes on past `chunk`, or a CR comes
/// first (then the line-by-line path decides).
fn event_end(tail: &[u8], chunk: &[u8]) -> Option<usize> {
    if tail.last() == Some(&b'\n') && chunk.first() == Some(&b'\n') {
        return Some(1);
    }
    let mut from = 0;
    while let Some(i) = memchr::memchr2(b'\n', b'\r', &chunk[from..]) {
        let at = from + i;
        if chunk[at] == b'\r' {
            return None;
        }
        if chunk.get(at + 1) == Some(&b'\n') {
            return Some(at + 2);
        }
        from = at + 1;
    }
    None
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bom {
    /// How many BOM bytes have been matched at the very start of the stream.
    Matching(u8),
    Done,
}

/// What bytes at an event boundary start with (see `Framer::quick`).
enum Quick<'c> {
    /// A whole event of the usual shape: its name, its payload and the bytes it takes.
    Event(&'c [u8], &'c [u8], usize),
    /// The start of one.
    Prefix,
    Other,
}

/// Where a [`Framer`] sends the events it frames (a closure taking [`RawEvent`]s is one, via
/// [`Framer::feed`]).
pub trait Sink {
    /// One dispatched event.
    fn event(&mut self, event: RawEvent<'_>);

    /// Offered the bytes at each event boundary where the framer would try to take a whole
    /// event at once (nothing of the next event's block seen yet). A sink that takes the
    /// event at their start itself returns how many bytes it took; it must take exactly an
    /// event the framer would have taken whole there (an optional `event: NAME` line, one
    /// `data: PAYLOAD` line, a blank line, no CR anywhere, no line over the size cap) and do
    /// with it what [`Sink::event`] would have done. The framer then counts the event
    /// as dispatched. `index` and `offset` are those the event would have been dispatched
    /// with. The default takes nothing.
    #[inline(always)]
    fn whole(&mut self, rest: &[u8], index: u64, offset: u64) -> Option<usize> {
        let _ = (rest, index, offset);
        None
    }

    /// Whether [`Sink::whole`] may take an event now: when false, the framer does not copy
    /// bytes to offer it. The default: never.
    #[inline(always)]
    fn takes_whole(&self) -> bool {
        false
    }

    /// [`Sink::whole`] as many times as it takes an event, each at the end of the one before:
    /// returns the bytes and the events taken (the framer takes the rest of `rest`). A sink
    /// may do this in one loop of its own, with the same result.
    ///
    /// It may also tell that the bytes after those are the start of an event the framer would
    /// hold back for the next chunk (no CR, no LF but the `event:` line's, or one ending
    /// `rest`, and no line over the size cap), saving the framer the look; false says
    /// nothing.
    #[inline]
    fn wholes(&mut self, rest: &[u8], index: u64, offset: u64) -> Wholes {
        let (mut used, mut events) = (0, 0);
        while let Some(n) = self.whole(&rest[used..], index + events, offset + used as u64) {
            used += n;
            events += 1;
        }
        Wholes {
            used,
            events,
            then_prefix: false,
        }
    }
}

/// What [`Sink::wholes`] took.
pub struct Wholes {
    /// The bytes taken.
    pub used: usize,
    /// The events taken.
    pub events: u64,
    /// The bytes after them start an event to hold back (see [`Sink::wholes`]).
    pub then_prefix: bool,
}

/// A closure as a [`Sink`].
struct Events<F>(F);

impl<F: FnMut(RawEvent<'_>)> Sink for Events<F> {
    #[inline(always)]
    fn event(&mut self, event: RawEvent<'_>) {
        (self.0)(event)
    }
}

/// Push-style SSE framer.
#[derive(Debug)]
pub struct Framer {
    max_event_size: Option<usize>,
    bom: Bom,
    /// The previous chunk ended with CR: a LF starting the next chunk is part of that line end.
    swallow_lf: bool,
    /// An unterminated line carried over from earlier chunks.
    line: Vec<u8>,
    /// Or: the unterminated line is a `data:` line whose value goes straight into `data`
    /// (a huge event's bytes are copied once, not into `line` and then into `data`); its
    /// length so far, for the line cap.
    data_line: Option<usize>,
    /// Or: the start of an event of the usual shape, not framed yet (see `Framer::quick`).
    tail: Vec<u8>,
    tail_offset: u64,
    line_offset: u64,
    /// Bytes consumed before the current chunk.
    consumed: u64,

    data: Vec<u8>,
    has_data: bool,
    multiline: bool,
    event_type: Vec<u8>,
    id_buffer: Vec<u8>,
    /// An `id` field was seen since the last dispatch (so the committed id may change).
    id_dirty: bool,
    block_offset: Option<u64>,
    block_retry: Option<Retry>,

    last_event_id: Vec<u8>,
    id_generation: u64,
    retry: Option<Retry>,
    dispatched: u64,
    poisoned: bool,
    /// The name of the last event taken whole (no CR or LF in it): the next `event:` line
    /// that repeats it is told by a comparison, not a search for its end.
    known_name: Vec<u8>,
}

impl Framer {
    pub fn new(max_event_size: Option<usize>) -> Framer {
        Framer {
            max_event_size,
            bom: Bom::Matching(0),
            swallow_lf: false,
            line: Vec::new(),
            data_line: None,
            tail: Vec::new(),
            tail_offset: 0,
            line_offset: 0,
            consumed: 0,
            data: Vec::new(),
            has_data: false,
            multiline: false,
            event_type: Vec::new(),
            id_buffer: Vec::new(),
            id_dirty: false,
            block_offset: None,
            block_retry: None,
            last_event_id: Vec::new(),
            id_generation: 0,
            retry: None,
            dispatched: 0,
            poisoned: false,
            known_name: Vec::new(),
        }
    }

    pub fn max_event_size(&self) -> Option<usize> {
        self.max_event_size
    }

    /// The last event id committed by a dispatch (raw bytes).
    pub fn last_event_id(&self) -> &[u8] {
        &self.last_event_id
    }

    pub fn id_generation(&self) -> u64 {
        self.id_generation
    }

    /// The latest valid reconnection time seen.
    pub fn retry(&self) -> Option<&Retry> {
        self.retry.as_ref()
    }

    /// Bytes fed so far.
    pub fn bytes_consumed(&self) -> u64 {
        self.consumed
    }

    /// Events dispatched so far.
    pub fn events_dispatched(&self) -> u64 {
        self.dispatched
    }

    /// Ends the stream: an unfinished event (and an id seen only in it) is
    /// discarded, per spec. The framer is then ready for a new stream; the last
    /// event id and reconnection time are kept, as a reconnecting client needs them.
    pub fn close(&mut self) {
        self.bom = Bom::Matching(0);
        self.swallow_lf = false;
        self.line = Vec::new();
        self.tail = Vec::new();
        self.line_offset = 0;
        self.consumed = 0;
        self.dispatched = 0;
        self.clear_block();
        self.id_buffer.clear();
        self.id_buffer.extend_from_slice(&self.last_event_id);
        self.id_dirty = false;
        self.poisoned = false;
    }

    /// Same as [`Framer::close`]: the way out after an [`EventTooLarge`].
    pub fn reset(&mut self) {
        self.close();
    }

    fn clear_block(&mut self) {
        self.data_line = None;
        self.data = Vec::new();
        self.has_data = false;
        self.multiline = false;
        self.event_type.clear();
        self.block_offset = None;
        self.block_retry = None;
    }

    /// Feeds one chunk; `on_event` is called for every event it completes, in order.
    pub fn feed<F: FnMut(RawEvent<'_>)>(
        &mut self,
        chunk: &[u8],
        on_event: F,
    ) -> Result<(), FramingError> {
        self.feed_into(chunk, &mut Events(on_event))
    }

    /// Feeds one chunk; every event it completes goes to `sink`, in order.
    pub fn feed_into<S: Sink>(
        &mut self,
        mut chunk: &[u8],
        on_event: &mut S,
    ) -> Result<(), FramingError> {
        if self.poisoned {
            return Err(FramingError::Poisoned);
        }
        let chunk_start = self.consumed;
        let total = chunk.len();

        if let Bom::Matching(mut matched) = self.bom {
            while matched < 3 && !chunk.is_empty() {
                if chunk[0] == BOM[matched as usize] {
                    matched += 1;
                    chunk = &chunk[1..];
                } else {
                    // Not a BOM after all: the bytes matched so far start the first line.
                    self.line.extend_from_slice(&BOM[..matched as usize]);
                    matched = 4;
                }
            }
            self.bom = match matched {
                0..=2 => Bom::Matching(matched),
                _ => Bom::Done,
            };
            if let Bom::Matching(_) = self.bom {
                self.consumed += total as u64;
                return Ok(());
            }
        }
        if self.swallow_lf && !chunk.is_empty() {
            self.swallow_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        // Offsets below are relative to the stream; `base` is where `chunk` starts.
        let base = chunk_start + (total - chunk.len()) as u64;

        let mut result = Ok(());
        let mut from = 0usize;
        if !self.tail.is_empty() {
            // The start of an event of the usual shape, held back from the previous chunk.
            let mut tail = std::mem::take(&mut self.tail);
            let tail_offset = self.tail_offset;
            let held = tail.len();
            match event_end(&tail, chunk) {
                Some(end) => {
                    // The event, whole: first offered to the sink (only its bytes are copied).
                    tail.extend_from_slice(&chunk[..end]);
                    from = end;
                    let offered = if on_event.takes_whole() {
                        on_event.whole(&tail, self.dispatched, tail_offset)
                    } else {
                        None
                    };
                    if let Some(used) = offered {
                        // The held-back bytes hold no blank line: the event ends in this chunk.
                        debug_assert!(used > held);
                        debug_assert_eq!(used, tail.len());
                        debug_assert!(
                            matches!(self.quick(&tail), Quick::Event(_, _, u) if u == used)
                        );
                        self.dispatched += 1;
                    } else {
                        match self.quick(&tail) {
                            Quick::Event(name, data, used) => {
                                debug_assert_eq!(used, tail.len());
                                self.dispatch_whole(name, data, tail_offset, on_event);
                            }
                            _ => result = self.lines(&tail, tail_offset, false, on_event),
                        }
                    }
                }
                // The event goes on past this chunk (or a CR comes first): the held-back
                // bytes go the line-by-line way, and so does the chunk. (Never held back
                // twice: each byte is looked at a bounded number of times.)
                None => result = self.lines(&tail, tail_offset, false, on_event),
            }
            tail.clear();
            self.tail = tail; // keep the allocation
        }
        let result =
            result.and_then(|()| self.lines(&chunk[from..], base + from as u64, true, on_event));
        self.consumed = chunk_start + total as u64;
        if let Err(FramingError::TooLarge(_)) = &result {
            self.poisoned = true;
            self.line = Vec::new();
            self.tail = Vec::new();
            self.clear_block();
        }
        result
    }

    /// Frames `chunk` (at stream offset `base`) line by line, taking whole events of the usual
    /// shape at once when `quick`; an unterminated line is kept in `line`, or, when `quick`
    /// and it is the start of an event of the usual shape, in `tail`.
    fn lines<S: Sink>(
        &mut self,
        chunk: &[u8],
        base: u64,
        quick: bool,
        on_event: &mut S,
    ) -> Result<(), FramingError> {
        let mut start = 0usize;
        loop {
            if quick && self.line.is_empty() && self.data_line.is_none() && self.block_is_clean() {
                let taken = on_event.wholes(&chunk[start..], self.dispatched, base + start as u64);
                if taken.events > 0 {
                    debug_assert_eq!(
                        self.quick_run(&chunk[start..start + taken.used]),
                        taken.events
                    );
                    self.dispatched += taken.events;
                    start += taken.used;
                }
                let rest = &chunk[start..];
                if taken.then_prefix && !rest.is_empty() {
                    debug_assert!(matches!(self.quick(rest), Quick::Prefix));
                    self.tail.clear();
                    self.tail.extend_from_slice(rest);
                    self.tail_offset = base + start as u64;
                    return Ok(());
                }
                match self.quick(rest) {
                    Quick::Event(name, data, used) => {
                        self.dispatch_whole(name, data, base + start as u64, on_event);
                        start += used;
                        continue;
                    }
                    Quick::Prefix if !rest.is_empty() => {
                        self.tail.clear();
                        self.tail.extend_from_slice(rest);
                        self.tail_offset = base + start as u64;
                        return Ok(());
                    }
                    _ => {}
                }
            }
            let Some(rel) = memchr::memchr2(b'\n', b'\r', &chunk[start..]) else {
                break;
            };
            let end = start + rel;
            let res = if let Some(held) = self.data_line {
                self.end_data_line(held, &chunk[start..end], base + end as u64)
            } else if self.line.is_empty() {
                self.process_line(&chunk[start..end], base + start as u64, on_event)
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&chunk[start..end]);
                let res = self.process_line(&line, self.line_offset, on_event);
                line.clear();
                self.line = line;
                res
            };
            res?;
            start = end + 1;
            if chunk[end] == b'\r' {
                if start < chunk.len() {
                    if chunk[start] == b'\n' {
                        start += 1;
                    }
                } else {
                    self.swallow_lf = true;
                }
            }
        }
        let rest = &chunk[start..];
        if rest.is_empty() {
            return Ok(());
        }
        let at = base + chunk.len() as u64;
        if let Some(held) = self.data_line {
            self.check_line(held + rest.len(), at)?;
            self.data.extend_from_slice(rest);
            self.data_line = Some(held + rest.len());
            return Ok(());
        }
        if self.line.is_empty() {
            self.line_offset = base + start as u64;
        }
        self.check_line(self.line.len() + rest.len(), at)?;
        self.line.extend_from_slice(rest);
        self.begin_data_line();
        Ok(())
    }

    /// When the unterminated line is a `data:` line with a byte of its value (so that the one
    /// optional space is known), moves its value into `data`, where the rest of the line will
    /// go: what `process_line` would do with the whole line, but for the data cap, checked at
    /// the line end (`end_data_line`).
    fn begin_data_line(&mut self) {
        const DATA: &[u8] = b"data:";
        if self.line.len() <= DATA.len() || !self.line.starts_with(DATA) {
            return;
        }
        let value = &self.line[DATA.len()..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if self.block_offset.is_none() {
            self.block_offset = Some(self.line_offset);
        }
        if self.has_data {
            self.data.push(b'\n');
            self.multiline = true;
        }
        self.data.extend_from_slice(value);
        self.has_data = true;
        self.data_line = Some(self.line.len());
        self.line.clear();
    }

    /// The `data:` line held in `data` ends with `last` (its bytes in the chunk, before the
    /// line end at stream offset `at`): the checks `process_line` makes of a whole line.
    fn end_data_line(&mut self, held: usize, last: &[u8], at: u64) -> Result<(), FramingError> {
        self.data_line = None;
        self.check_line(held + last.len(), at)?;
        if let Some(max) = self.max_event_size {
            if self.data.len() + last.len() > max {
                return Err(self.too_large(at, false));
            }
        }
        self.data.extend_from_slice(last);
        Ok(())
    }

    /// Dispatches an event taken whole by `Framer::quick` (its block is clean: no id,
    /// no retry).
    #[inline]
    fn dispatch_whole<S: Sink>(&mut self, name: &[u8], data: &[u8], offset: u64, on_event: &mut S) {
        if !crate::lex::same(name, &self.known_name) {
            self.known_name.clear();
            self.known_name.extend_from_slice(name);
        }
        on_event.event(RawEvent {
            event: name,
            data,
            multiline: false,
            id: &self.last_event_id,
            id_generation: self.id_generation,
            retry: None,
            index: self.dispatched,
            offset,
        });
        self.dispatched += 1;
    }

    /// Nothing of an event block seen yet (the state after a dispatch).
    #[inline]
    fn block_is_clean(&self) -> bool {
        !self.has_data
            && !self.id_dirty
            && self.block_offset.is_none()
            && self.event_type.is_empty()
            && self.block_retry.is_none()
    }

    /// What `rest` (bytes at an event boundary) starts with:
    ///
    /// - [`Quick::Event`]: the usual shape of an event, whole: an optional `event: NAME` line,
    ///   one `data: PAYLOAD` line and a blank line, with no CR and no line over the size cap. Given with
    ///   the name, the payload and the bytes used; the line-by-line path would frame it the same.
    /// - [`Quick::Prefix`]: no such event yet, but `rest` (up to its end) can be the start of
    ///   one, with no CR and no line over the cap: then it may wait for the next chunk, since framing its
    ///   lines now would change nothing visible (its complete lines are `event:` and `data:`
    ///   lines, which only matter at the dispatch). An empty `rest` is a prefix too.
    /// - [`Quick::Other`]: anything else, for the line-by-line path.
    #[inline]
    fn quick<'c>(&self, rest: &'c [u8]) -> Quick<'c> {
        const EVENT: &[u8] = b"event: ";
        const DATA: &[u8] = b"data: ";
        let max = self.max_event_size.unwrap_or(usize::MAX);
        let fits = |len: usize| {
            if len <= max {
                Quick::Prefix
            } else {
                Quick::Other
            }
        };
        let mut pos = 0;
        let mut name: &[u8] = &[];
        if rest.starts_with(EVENT) {
            let after = &rest[EVENT.len()..];
            let known = self.known_name.len();
            let end = if known > 0
                && after.get(known) == Some(&b'\n')
                && crate::lex::same(&after[..known], &self.known_name)
            {
                // The name of the last event again (it holds no CR or LF): the line ends here.
                EVENT.len() + known
            } else {
                let Some(i) = memchr::memchr2(b'\n', b'\r', after) else {
                    return fits(rest.len());
                };
                EVENT.len() + i
            };
            if rest[end] == b'\r' || end > max {
                return Quick::Other;
            }
            name = &rest[EVENT.len()..end];
            pos = end + 1;
        } else if EVENT.starts_with(rest) {
            return fits(rest.len());
        }
        let line = &rest[pos..];
        if line.len() < DATA.len() {
            return if DATA.starts_with(line) {
                fits(line.len())
            } else {
                Quick::Other
            };
        }
        if !line.starts_with(DATA) {
            return Quick::Other;
        }
        let Some(i) = memchr::memchr2(b'\n', b'\r', &line[DATA.len()..]) else {
            return fits(line.len());
        };
        let end = DATA.len() + i;
        if line[end] == b'\r' || end > max {
            return Quick::Other;
        }
        match line.get(end + 1) {
            Some(b'\n') => Quick::Event(name, &line[DATA.len()..end], pos + end + 2),
            None => Quick::Prefix,
            Some(_) => Quick::Other,
        }
    }

    /// For the debug checks: the number of whole events of the usual shape that `bytes` is
    /// exactly (0 when it is not).
    fn quick_run(&self, mut bytes: &[u8]) -> u64 {
        let mut events = 0;
        while !bytes.is_empty() {
            let Quick::Event(_, _, used) = self.quick(bytes) else {
                return 0;
            };
            bytes = &bytes[used..];
            events += 1;
        }
        events
    }

    fn too_large(&self, at: u64, in_line: bool) -> FramingError {
        FramingError::TooLarge(EventTooLarge {
            limit: self.max_event_size.unwrap_or(usize::MAX),
            stream_offset: at,
            events_dispatched: self.dispatched,
            in_line,
        })
    }

    #[inline]
    fn check_line(&self, len: usize, at: u64) -> Result<(), FramingError> {
        match self.max_event_size {
            Some(max) if len > max => Err(self.too_large(at, true)),
            _ => Ok(()),
        }
    }

    #[inline]
    fn process_line<S: Sink>(
        &mut self,
        line: &[u8],
        offset: u64,
        on_event: &mut S,
    ) -> Result<(), FramingError> {
        if line.is_empty() {
            self.dispatch(on_event);
            return Ok(());
        }
        self.check_line(line.len(), offset + line.len() as u64)?;
        if line[0] == b':' {
            return Ok(());
        }
        if self.block_offset.is_none() {
            self.block_offset = Some(offset);
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (&line[..colon], value)
            }
            None => (line, &line[line.len()..]),
        };
        match name {
            b"data" => {
                if let Some(max) = self.max_event_size {
                    // The data buffer holds value + LF per line; the trailing LF is dropped at dispatch.
                    let new_len = self.data.len() + value.len() + usize::from(self.has_data);
                    if new_len > max {
                        return Err(self.too_large(offset + line.len() as u64, false));
                    }
                }
                if self.has_data {
                    self.data.push(b'\n');
                    self.multiline = true;
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event_type.clear();
                self.event_type.extend_from_slice(value);
            }
            // An id with a NUL is ignored.
            b"id" if memchr::memchr(0, value).is_none() => {
                self.id_buffer.clear();
                self.id_buffer.extend_from_slice(value);
                self.id_dirty = true;
            }
            b"retry" => {
                if let Some(retry) = Retry::parse(value) {
                    self.retry = Some(retry.clone());
                    self.block_retry = Some(retry);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch<S: Sink>(&mut self, on_event: &mut S) {
        if self.id_dirty {
            self.id_dirty = false;
            if self.last_event_id != self.id_buffer {
                self.last_event_id.clear();
                self.last_event_id.extend_from_slice(&self.id_buffer);
                self.id_generation += 1;
            }
        }
        if self.has_data {
            on_event.event(RawEvent {
                event: &self.event_type,
                data: &self.data,
                multiline: self.multiline,
                id: &self.last_event_id,
                id_generation: self.id_generation,
                retry: self.block_retry.as_ref(),
                index: self.dispatched,
                offset: self.block_offset.unwrap_or(self.consumed),
            });
            self.dispatched += 1;
            // Keep the allocation: the next event is likely of similar size.
            self.data.clear();
        }
        self.has_data = false;
        self.multiline = false;
        self.event_type.clear();
        self.block_offset = None;
        self.block_retry = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Eq, Clone)]
    struct Ev {
        event: String,
        data: String,
        id: String,
        retry: Option<Retry>,
    }

    fn ev(event: &str, data: &str, id: &str) -> Ev {
        Ev {
            event: event.into(),
            data: data.into(),
            id: id.into(),
            retry: None,
        }
    }

    fn feed_chunks(framer: &mut Framer, chunks: &[&[u8]]) -> Vec<Ev> {
        let mut out = Vec::new();
        for chunk in chunks {
            framer
                .feed(chunk, |e| {
                    out.push(Ev {
                        event: if e.event.is_empty() {
                            "message".into()
                        } else {
                            String::from_utf8_lossy(e.event).into_owned()
                        },
                        data: String::from_utf8_lossy(e.data).into_owned(),
                        id: String::from_utf8_lossy(e.id).into_owned(),
                        retry: e.retry.cloned(),
                    })
                })
                .unwrap();
        }
        out
    }

    /// Frames `input` in one chunk and at every chunk size from 1 to 8; all must agree.
    fn frame(input: &[u8]) -> Vec<Ev> {
        let whole = feed_chunks(&mut Framer::new(None), &[input]);
        for size in 1..=8 {
            let chunks: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(
                feed_chunks(&mut Framer::new(None), &chunks),
                whole,
                "chunk size {size}"
            );
        }
        // Also with an empty chunk between every byte.
        let mut chunks: Vec<&[u8]> = Vec::new();
        for b in input.chunks(1) {
            chunks.push(b"");
            chunks.push(b);
        }
        assert_eq!(
            feed_chunks(&mut Framer::new(None), &chunks),
            whole,
            "empty chunks"
        );
        whole
    }

    #[test]
    fn basic_event_and_default_type() {
        assert_eq!(frame(b"data: hello\n\n"), vec![ev("message", "hello", "")]);
        assert_eq!(frame(b"event: add\ndata: 1\n\n"), vec![ev("add", "1", "")]);
    }

    #[test]
    fn line_endings_cr_lf_crlf_mixed() {
        assert_eq!(
            frame(b"data: a\r\n\r\ndata: b\r\rdata: c\n\r\n"),
            vec![
                ev("message", "a", ""),
                ev("message", "b", ""),
                ev("message", "c", ""),
            ]
        );
        // "\n\r\n" is a line end then a blank line.
        assert_eq!(frame(b"data: x\n\r\n"), vec![ev("message", "x", "")]);
    }

    #[test]
    fn cr_at_chunk_end_dispatches_at_once() {
        let mut framer = Framer::new(None);
        let mut n = 0;
        framer.feed(b"data: a\r\r", |_| n += 1).unwrap();
        assert_eq!(n, 1, "the event must not wait for the next chunk");
        // The LF that follows belongs to the CR line end: no extra blank line effect.
        framer.feed(b"\ndata: b\n\n", |_| n += 1).unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn bom_stripped_once_even_split() {
        let mut input = BOM.to_vec();
        input.extend_from_slice(b"data: a\n\n");
        assert_eq!(frame(&input), vec![ev("message", "a", "")]);
        // A second BOM is part of the field name: the line is ignored.
        let mut twice = BOM.to_vec();
        twice.extend_from_slice(&BOM);
        twice.extend_from_slice(b"data: a\n\ndata: b\n\n");
        assert_eq!(frame(&twice), vec![ev("message", "b", "")]);
        // A partial BOM is ordinary bytes of the first line.
        assert_eq!(
            frame(b"\xEF\xBBdata: a\n\ndata: b\n\n"),
            vec![ev("message", "b", "")]
        );
    }

    #[test]
    fn comments_fields_without_colon_and_spaces() {
        assert_eq!(frame(b": ping\n\ndata\n\n"), vec![ev("message", "", "")]);
        assert_eq!(
            frame(b"data:no space\n\n"),
            vec![ev("message", "no space", "")]
        );
        assert_eq!(frame(b"data:  two\n\n"), vec![ev("message", " two", "")]);
        assert_eq!(frame(b"data:\ttab\n\n"), vec![ev("message", "\ttab", "")]);
        assert_eq!(frame(b"Data: x\nDATA: y\n\n"), vec![]);
        assert_eq!(frame(b"data: a:b\n\n"), vec![ev("message", "a:b", "")]);
    }

    #[test]
    fn multi_line_data() {
        assert_eq!(
            frame(b"data: a\ndata\ndata: b\n\n"),
            vec![ev("message", "a\n\nb", "")]
        );
        assert_eq!(frame(b"data:\ndata:\n\n"), vec![ev("message", "\n", "")]);
    }

    #[test]
    fn ids_sticky_nul_ignored_empty_resets() {
        assert_eq!(
            frame(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\0x\ndata: c\n\nid\ndata: d\n\n"),
            vec![
                ev("message", "a", "1"),
                ev("message", "b", "1"),
                ev("message", "c", "1"),
                ev("message", "d", "")
            ]
        );
        let mut framer = Framer::new(None);
        feed_chunks(&mut framer, &[b"id: 7\n\n"]);
        assert_eq!(
            framer.last_event_id(),
            b"7",
            "an id-only block commits the id"
        );
        feed_chunks(&mut framer, &[b"id: 8\ndata: x\n"]);
        framer.close();
        assert_eq!(
            framer.last_event_id(),
            b"7",
            "an id in an unfinished event is not committed"
        );
    }

    #[test]
    fn retry_digits_only() {
        let mut framer = Framer::new(None);
        let evs = feed_chunks(&mut framer, &[b"retry: 03000\ndata: a\n\ndata: b\n\n"]);
        assert_eq!(evs[0].retry, Some(Retry::Small(3000)));
        assert_eq!(evs[1].retry, None, "retry belongs to the block that set it");
        for bad in [&b"+5"[..], b"-1", b" 5", b"1_0", b"", b"\xd9\xa1", b"5s"] {
            let mut line = b"retry: ".to_vec();
            line.extend_from_slice(bad);
            line.extend_from_slice(b"\ndata: x\n\n");
            let mut f = Framer::new(None);
            let evs = feed_chunks(&mut f, &[&line]);
            assert_eq!(evs[0].retry, None, "{:?}", bad);
            assert_eq!(f.retry(), None);
        }
        assert_eq!(
            Retry::parse(b"000123456789012345678901234567890"),
            Some(Retry::Big("123456789012345678901234567890".into()))
        );
        assert_eq!(framer.retry(), Some(&Retry::Small(3000)));
    }

    #[test]
    fn no_phantom_events_and_type_reset() {
        assert_eq!(
            frame(b"id: 1\n\n: c\n\nevent: ping\n\ndata: x\n\n"),
            vec![ev("message", "x", "1")]
        );
    }

    #[test]
    fn unfinished_event_discarded() {
        let mut framer = Framer::new(None);
        assert_eq!(
            feed_chunks(&mut framer, &[b"data: a\n\ndata: b\n"]),
            vec![ev("message", "a", "")]
        );
        framer.close();
        assert_eq!(
            feed_chunks(&mut framer, &[b"data: c\n\n"]),
            vec![ev("message", "c", "")]
        );
    }

    #[test]
    fn unicode_line_separators_are_not_line_ends() {
        let input = "data: a\u{2028}b\u{2029}c\u{85}d\x0Ce\x0Bf\n\n".as_bytes();
        assert_eq!(
            frame(input),
            vec![ev("message", "a\u{2028}b\u{2029}c\u{85}d\x0Ce\x0Bf", "")]
        );
    }

    #[test]
    fn invalid_utf8_passes_through_raw() {
        let mut framer = Framer::new(None);
        let mut data = Vec::new();
        framer
            .feed(b"data: \xff\xe2\x82\n\n", |e| data = e.data.to_vec())
            .unwrap();
        assert_eq!(data, b"\xff\xe2\x82");
    }

    #[test]
    fn offsets_and_indices() {
        let mut framer = Framer::new(None);
        let mut seen = Vec::new();
        for chunk in b": hi\n\ndata: a\n\nevent: x\ndata: b\n\n".chunks(3) {
            framer
                .feed(chunk, |e| seen.push((e.index, e.offset)))
                .unwrap();
        }
        assert_eq!(seen, vec![(0, 6), (1, 15)]);
    }

    #[test]
    fn size_cap_on_data_and_on_unterminated_line() {
        let mut framer = Framer::new(Some(12));
        let err = framer
            .feed(b"data:0123456\ndata:0123456\n\n", |_| {})
            .unwrap_err();
        assert!(matches!(
            err,
            FramingError::TooLarge(EventTooLarge { in_line: false, .. })
        ));
        assert_eq!(
            framer.feed(b"data: a\n\n", |_| {}),
            Err(FramingError::Poisoned)
        );
        framer.reset();
        let mut n = 0;
        framer
            .feed(b"data:012345\ndata:01234\n\n", |_| n += 1)
            .unwrap();
        assert_eq!(n, 1, "exactly the limit is allowed");
        // A line longer than the cap fails whatever the chunking.
        let mut framer = Framer::new(Some(10));
        assert!(framer.feed(b"data: 123456\n\n", |_| {}).is_err());

        let mut framer = Framer::new(Some(16));
        let mut total = 0;
        let mut err = None;
        for _ in 0..10 {
            if let Err(e) = framer.feed(b"xxxx", |_| {}) {
                err = Some(e);
                break;
            }
            total += 4;
        }
        match err {
            Some(FramingError::TooLarge(e)) => {
                assert!(e.in_line);
                assert_eq!(total, 16);
                assert_eq!(e.to_string(), "a line without line end exceeds max_event_size=16 bytes (at byte 20 of the stream, after 0 events)");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn large_event_in_small_chunks_is_linear() {
        // 8 MiB in one line fed 1 KiB at a time: quadratic copying would take minutes.
        let mut input = b"data: ".to_vec();
        input.extend(std::iter::repeat_n(b'x', 8 << 20));
        input.extend_from_slice(b"\n\n");
        let mut framer = Framer::new(None);
        let mut len = 0;
        for chunk in input.chunks(1024) {
            framer.feed(chunk, |e| len = e.data.len()).unwrap();
        }
        assert_eq!(len, 8 << 20);
    }

    #[test]
    fn data_lines_held_across_chunks_frame_as_in_one_chunk() {
        // Data lines longer than the chunks (their values go straight into the data buffer)
        // in every position: alone, after and before other data lines, with and without the
        // space, ending in LF, CR or CRLF, next to a comment and an id; under caps that the
        // line or the event's data reaches.
        let long = "y".repeat(40);
        let stream = format!(
            "data: {long}\n\ndata:{long}\r\ndata: {long}\rdata: short\n\n: {long}\n\
             id: 3\ndata: x\ndata:  {long}\n\nevent: e\ndata: {long}\r\n\r\ndata: {long}"
        );
        let stream = stream.as_bytes();
        let (whole, _) = framed(&[stream], None);
        assert_eq!(whole.len(), 4, "{whole:?}");
        for size in 1..stream.len() {
            let chunks: Vec<&[u8]> = stream.chunks(size).collect();
            assert_eq!(framed(&chunks, None).0, whole, "chunks of {size}");
        }
        // (The offset an over-long line is reported at is where it was seen to be too long:
        // the end of a chunk, or of the line.)
        let error = |chunks: &[&[u8]], max: usize| {
            let mut framer = Framer::new(Some(max));
            chunks
                .iter()
                .find_map(|chunk| match framer.feed(chunk, |_| {}) {
                    Err(FramingError::TooLarge(e)) => Some((e.in_line, e.events_dispatched)),
                    _ => None,
                })
        };
        for max in [20, 41, 42, 46, 60, 85] {
            let reference = framed(&[stream], Some(max));
            let reference_error = error(&[stream], max);
            assert!(reference_error.is_some(), "max {max}");
            for size in 1..stream.len() {
                let chunks: Vec<&[u8]> = stream.chunks(size).collect();
                assert_eq!(
                    framed(&chunks, Some(max)),
                    reference,
                    "max {max} chunks of {size}"
                );
                assert_eq!(
                    error(&chunks, max),
                    reference_error,
                    "max {max} chunks of {size}"
                );
            }
        }
    }

    /// Events with their offsets and indices, for comparing chunkings.
    fn framed(chunks: &[&[u8]], max: Option<usize>) -> (Vec<(Ev, u64, u64, bool)>, bool) {
        let mut framer = Framer::new(max);
        let mut out = Vec::new();
        let mut failed = false;
        for chunk in chunks {
            let result = framer.feed(chunk, |e| {
                out.push((
                    Ev {
                        event: String::from_utf8_lossy(e.event).into_owned(),
                        data: String::from_utf8_lossy(e.data).into_owned(),
                        id: String::from_utf8_lossy(e.id).into_owned(),
                        retry: e.retry.cloned(),
                    },
                    e.index,
                    e.offset,
                    e.multiline,
                ))
            });
            if result.is_err() {
                failed = true;
                break;
            }
        }
        (out, failed)
    }

    #[test]
    fn whole_events_taken_at_once_match_the_line_by_line_path_at_any_chunking() {
        // The usual shape (taken whole, or held back across chunks) mixed with every other
        // kind of line, so that both paths and the switches between them are exercised.
        let stream: &[u8] =
            b"event: a\ndata: {\"x\":1}\n\ndata: plain\n\n: comment\ndata: after comment\n\n\
            event: b\ndata: one\ndata: two\n\nid: 7\ndata: with id\n\nevent: c\ndata: x\n\n\
            retry: 10\ndata: r\n\ndata:no space\n\nevent:  spaced\ndata:  two spaces\n\n\
            data: cr\r\n\r\nevent: d\ndata: {\"y\":2}\n\nevent: e\n\ndata: last\n\n";
        let (whole, _) = framed(&[stream], None);
        assert_eq!(whole.len(), 12, "{whole:?}");
        for size in 1..stream.len() {
            let chunks: Vec<&[u8]> = stream.chunks(size).collect();
            assert_eq!(framed(&chunks, None).0, whole, "chunks of {size}");
        }
        // Under a cap: the same events before the same error, at any chunking.
        for max in [5, 9, 12, 14, 30] {
            let (reference, failed) = framed(&[stream], Some(max));
            for size in 1..stream.len() {
                let chunks: Vec<&[u8]> = stream.chunks(size).collect();
                let (got, got_failed) = framed(&chunks, Some(max));
                assert_eq!(got_failed, failed, "max {max} chunks of {size}");
                assert_eq!(got, reference, "max {max} chunks of {size}");
            }
        }
    }

    #[test]
    fn an_event_line_repeating_the_last_name_or_near_it_is_framed_as_line_by_line() {
        // After `event: ab` is taken whole, the next `event:` lines are the same name, a
        // longer or shorter one, one ending in CR, a prefix at a chunk's end.
        let stream: &[u8] = b"event: ab\ndata: 1\n\nevent: ab\ndata: 2\n\nevent: abc\ndata: 3\n\n\
            event: ab\ndata: 4\n\nevent: a\ndata: 5\n\nevent: ab\ndata: 6\n\nevent: ab\r\ndata: 7\n\n\
            event: ab\ndata: 8\n\nevent: ab\n\nevent: ab\ndata: 9\n\nevent: abab\ndata: 10\n\n\
            event: ab\ndata: 11\n\n";
        let (whole, _) = framed(&[stream], None);
        let names: Vec<&str> = whole.iter().map(|e| e.0.event.as_str()).collect();
        assert_eq!(
            names,
            ["ab", "ab", "abc", "ab", "a", "ab", "ab", "ab", "ab", "abab", "ab"],
            "{whole:?}"
        );
        for size in 1..stream.len() {
            let chunks: Vec<&[u8]> = stream.chunks(size).collect();
            assert_eq!(framed(&chunks, None).0, whole, "chunks of {size}");
        }
        for max in [2, 8, 9, 10] {
            let (reference, failed) = framed(&[stream], Some(max));
            for size in [1, 5, 13, stream.len()] {
                let chunks: Vec<&[u8]> = stream.chunks(size).collect();
                assert_eq!(
                    framed(&chunks, Some(max)),
                    (reference.clone(), failed),
                    "max {max} chunks of {size}"
                );
            }
        }
    }
}
