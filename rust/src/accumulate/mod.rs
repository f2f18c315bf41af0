//! Accumulation: the final object of a stream, built from its events.
//!
//! - [`ResponseAccumulator`]: Responses API events -> a `Response` object;
//! - [`ChatAccumulator`]: Chat Completions chunks -> a `ChatCompletion` object;
//! - [`RealtimeAccumulator`]: Realtime server events -> `{response_id: realtime response}`;
//! - [`GeminiAccumulator`]: Gemini `GenerateContentResponse` chunks -> one `GenerateContentResponse`;
//! - [`CompletionsAccumulator`]: legacy Completions chunks -> one `text_completion`.
//! - [`AnthropicAccumulator`]: Anthropic Messages events -> a `Message` object.
//!
//! Each takes one event's JSON payload per [`add_json`](ResponseAccumulator::add_json) call
//! (the SSE `data`, or one WebSocket message) and hands back the object built so far as
//! JSON bytes from `snapshot_json()`, at any point: a stream cut short still snapshots
//! everything received. Text grows in place (`String::push_str` into the kept JSON value),
//! so the cost is linear in the input whatever the number of deltas.
//!
//! Rules shared by the three (the Python twin keeps the same ones):
//!
//! - A payload that is exactly `[DONE]` (ASCII whitespace around it allowed) is ignored:
//!   not an error, not counted in `events()`.
//! - A payload that is not JSON, not UTF-8 (anywhere, read fields or not), or JSON but not an object is an
//!   [`AccumulateError`]; the accumulator is left unchanged and `events()` does not count it.
//! - Every other payload counts in `events()`. A Responses/Realtime event whose read fields
//!   have unexpected types (strings: `type`, `item_id`, `response_id`, `delta`, `text`,
//!   `refusal`, `arguments`, `input`, `transcript`, `name`, `call_id`; non-negative integers:
//!   `sequence_number`, `output_index`, `content_index`, `summary_index`,
//!   `annotation_index`; `null` always counts as absent), or with a duplicated read field,
//!   is not an error: it counts in `unknown_events()` and, when its type is one the
//!   accumulator uses, pushes the warning `"{type}: malformed event ignored"`.
//! - Servers' `.done` events and final objects are authoritative: their item (part, text)
//!   replaces ours, except that a server value that is missing, `null`, `""` or `[]` never
//!   replaces ours (when ours is present and not null) for these keys: item-level
//!   `arguments`, `input`, `code`, `content`, `summary`; part-level `text`, `refusal`,
//!   `transcript`, `annotations`. (Servers send `content_part.done` with an empty part,
//!   `output_item.done` without `content`, a final response with an empty `output`.)
//!   When both `content` (or `summary`) arrays are non-empty, the server's array wins and
//!   each of its parts is settled against ours at the same position (ours beyond its length
//!   are dropped). When the server's and our text are both non-empty and differ, the
//!   server's wins and the warning
//!   `"{event type}: item {id} {path} differs from the accumulated deltas"` is pushed
//!   (`{id}` is the item id, or `#{position}` when the item has none; `{path}` is e.g.
//!   `arguments`, `content[0].text`, `summary[1].text`, `content[0].transcript`).
//! - `error` events (chunks with an `error` object for Chat) push the warning
//!   `"error event: {message}"` (`{message}` is the error's `message`, or `(no message)`)
//!   and count in `unknown_events()`; they never change the result and are never fatal.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::framing::{Framer, RawEvent, Sink, Wholes};

/// The getters of the counts an accumulator keeps in a [`Tally`] (`warnings()`,
/// `unknown_events()`, `events()`), each with its docs.
macro_rules! tally_getters {
    ($(#[$w:meta])* warnings; $(#[$u:meta])* unknown_events; $(#[$e:meta])* events;) => {
        $(#[$w])*
        pub fn warnings(&self) -> &[String] {
            &self.tally.warnings
        }

        $(#[$u])*
        pub fn unknown_events(&self) -> u64 {
            self.tally.unknown_events
        }

        $(#[$e])*
        pub fn events(&self) -> u64 {
            self.tally.events
        }
    };
}

mod anthropic;
mod chat;
mod completions;
pub(crate) mod fast;
mod gemini;
pub(crate) mod json;
pub use json::Step;
#[cfg(test)]
mod tap_tests;
pub(crate) use fast::Shape;
mod realtime;
mod responses;

pub use anthropic::AnthropicAccumulator;
pub use chat::ChatAccumulator;
pub use completions::CompletionsAccumulator;
pub use gemini::GeminiAccumulator;
pub use realtime::RealtimeAccumulator;
pub use responses::text_field;
pub use responses::ResponseAccumulator;
#[cfg(feature = "python")]
pub(crate) use responses::TextEvent;

/// What the three accumulators have in common, for code that drives any of them
/// (the binding layer's tap, which frames bytes and adds each payload).
pub trait Accumulate {
    /// One event's JSON payload.
    fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError>;
    /// The payload of an SSE event named `name`: [`add_json`](Self::add_json), and an
    /// accumulator that reads whole events itself (see [`add_framed`](Self::add_framed))
    /// learns from the name how they are framed.
    fn add_sse(&mut self, name: &[u8], payload: &[u8]) -> Result<(), AccumulateError> {
        let _ = name;
        self.add_json(payload)
    }
    /// Raw SSE bytes at an event boundary (no CR among them): when the accumulator can take
    /// the whole event at their start itself — an optional `event: NAME` line, one
    /// `data: PAYLOAD` line no longer than `max_line`, a blank line, exactly as the framer
    /// frames them — it adds the payload and returns the bytes the event takes, the payload's
    /// range in `bytes` and what [`add_json`](Self::add_json) of it returns. None otherwise
    /// (the default): nothing was added, and the framer frames the event.
    fn add_framed(
        &mut self,
        bytes: &[u8],
        max_line: usize,
    ) -> Option<(usize, std::ops::Range<usize>, Result<(), AccumulateError>)> {
        let _ = (bytes, max_line);
        None
    }
    /// Whether [`add_framed`](Self::add_framed) may take an event (a shape is learned and
    /// framed). The default: never.
    fn takes_framed(&self) -> bool {
        false
    }
    /// The SSE name of the events [`add_framed`](Self::add_framed) takes.
    fn framed_name(&self) -> &[u8] {
        b""
    }
    /// Whether `bytes` (the end of a chunk, at an event boundary) is the start of an event
    /// [`add_framed`](Self::add_framed) could take, that the framer would hold back for the
    /// next chunk (see `framing::Sink::wholes`). False says nothing (the default).
    fn framed_prefix(&self, bytes: &[u8], max_line: usize) -> bool {
        let _ = (bytes, max_line);
        false
    }
    /// The object built so far, as JSON (None before anything to build from).
    fn snapshot_json(&mut self) -> Option<Vec<u8>>;
    fn warnings(&self) -> &[String];
    fn unknown_events(&self) -> u64;
    fn events(&self) -> u64;
}

macro_rules! impl_accumulate {
    // An accumulator that takes whole events itself: its `add_framed` and `takes_framed`.
    ($t:ty, framed $(, $extra:item)*) => {
        impl_accumulate!(
            $t,
            #[inline]
            fn add_framed(
                &mut self,
                bytes: &[u8],
                max_line: usize,
            ) -> Option<(usize, std::ops::Range<usize>, Result<(), AccumulateError>)> {
                <$t>::add_framed(self, bytes, max_line)
            },
            #[inline]
            fn takes_framed(&self) -> bool {
                <$t>::takes_framed(self)
            }
            $(, $extra)*
        );
    };
    ($t:ty $(, $extra:item)*) => {
        impl Accumulate for $t {
            fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
                <$t>::add_json(self, payload)
            }
            fn snapshot_json(&mut self) -> Option<Vec<u8>> {
                <$t>::snapshot_json(self)
            }
            fn warnings(&self) -> &[String] {
                <$t>::warnings(self)
            }
            fn unknown_events(&self) -> u64 {
                <$t>::unknown_events(self)
            }
            fn events(&self) -> u64 {
                <$t>::events(self)
            }
            $($extra)*
        }
    };
}

/// `new()` (texts capped at [`DEFAULT_TEXT_CAP`] bytes each) and `Default` (the same) for the
/// accumulators, each of which has `with_text_cap(limit)`.
macro_rules! impl_new {
    ($($t:ty),*) => {$(
        impl $t {
            /// An accumulator whose texts are capped at [`DEFAULT_TEXT_CAP`] bytes each.
            pub fn new() -> Self {
                Self::with_text_cap(Some(DEFAULT_TEXT_CAP))
            }
        }

        impl Default for $t {
            fn default() -> Self {
                Self::new()
            }
        }
    )*};
}

impl_new!(
    ResponseAccumulator,
    ChatAccumulator,
    RealtimeAccumulator,
    GeminiAccumulator,
    CompletionsAccumulator,
    AnthropicAccumulator
);

impl_accumulate!(
    ResponseAccumulator,
    framed,
    fn add_sse(&mut self, name: &[u8], payload: &[u8]) -> Result<(), AccumulateError> {
        ResponseAccumulator::add_sse(self, name, payload)
    },
    fn framed_name(&self) -> &[u8] {
        ResponseAccumulator::framed_name(self)
    },
    fn framed_prefix(&self, bytes: &[u8], max_line: usize) -> bool {
        ResponseAccumulator::framed_prefix(self, bytes, max_line)
    }
);
impl_accumulate!(ChatAccumulator, framed);
impl_accumulate!(RealtimeAccumulator);
impl_accumulate!(GeminiAccumulator);
impl_accumulate!(CompletionsAccumulator);
impl_accumulate!(
    AnthropicAccumulator,
    framed,
    fn framed_name(&self) -> &[u8] {
        b"content_block_delta"
    },
    fn framed_prefix(&self, bytes: &[u8], max_line: usize) -> bool {
        AnthropicAccumulator::framed_prefix(self, bytes, max_line)
    }
);

/// A payload an accumulator refused while tapping (see [`Tap`]).
#[derive(Debug)]
pub struct Refusal {
    pub error: AccumulateError,
    /// The event's index among the stream's dispatched events.
    pub index: u64,
    /// Its SSE name (`event:`), as sent.
    pub event: Vec<u8>,
    /// The stream offset of its first line.
    pub offset: u64,
    /// Its payload.
    pub data: Vec<u8>,
}

/// The tap: a [`Sink`] for a [`Framer`] that adds every event's payload to an accumulator,
/// keeping the refused ones, and lets the accumulator take the events it can read whole
/// straight from the bytes ([`Accumulate::add_framed`]), with the same result.
pub struct Tap<'a, A> {
    acc: &'a mut A,
    /// The framer's cap on a line.
    max_line: usize,
    /// The payloads refused so far, in order.
    pub refused: Vec<Refusal>,
    /// The events the accumulator took whole.
    pub taken: u64,
}

impl<'a, A: Accumulate> Tap<'a, A> {
    /// A tap into `acc` for bytes fed to `framer`.
    pub fn new(acc: &'a mut A, framer: &Framer) -> Self {
        Tap {
            acc,
            max_line: framer.max_event_size().unwrap_or(usize::MAX),
            refused: Vec::new(),
            taken: 0,
        }
    }
}

impl<A: Accumulate> Sink for Tap<'_, A> {
    #[inline]
    fn event(&mut self, e: RawEvent<'_>) {
        if let Err(error) = self.acc.add_sse(e.event, e.data) {
            self.refused.push(Refusal {
                error,
                index: e.index,
                event: e.event.to_vec(),
                offset: e.offset,
                data: e.data.to_vec(),
            });
        }
    }

    #[inline]
    fn takes_whole(&self) -> bool {
        self.acc.takes_framed()
    }

    #[inline]
    fn whole(&mut self, rest: &[u8], index: u64, offset: u64) -> Option<usize> {
        let (used, payload, result) = self.acc.add_framed(rest, self.max_line)?;
        self.taken += 1;
        if let Err(error) = result {
            self.refuse(error, index, offset, &rest[payload]);
        }
        Some(used)
    }

    #[inline]
    fn wholes(&mut self, rest: &[u8], index: u64, offset: u64) -> Wholes {
        let (mut used, mut events) = (0, 0);
        while let Some((n, payload, result)) = self.acc.add_framed(&rest[used..], self.max_line) {
            if let Err(error) = result {
                let at = used + payload.start..used + payload.end;
                self.refuse(error, index + events, offset + used as u64, &rest[at]);
            }
            used += n;
            events += 1;
        }
        self.taken += events;
        Wholes {
            used,
            events,
            then_prefix: self.acc.framed_prefix(&rest[used..], self.max_line),
        }
    }
}

impl<A: Accumulate> Tap<'_, A> {
    #[cold]
    fn refuse(&mut self, error: AccumulateError, index: u64, offset: u64, data: &[u8]) {
        self.refused.push(Refusal {
            error,
            index,
            event: self.acc.framed_name().to_vec(),
            offset,
            data: data.to_vec(),
        });
    }
}

/// The default cap on one accumulated text (and on one event, in the bindings): 16 MiB.
pub const DEFAULT_TEXT_CAP: usize = 16 * 1024 * 1024;

/// How many bytes of a bad payload an error message quotes.
const EXCERPT_BYTES: usize = 80;

/// A payload the accumulators cannot read at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccumulateError {
    /// Not valid JSON (or not valid UTF-8). `line`/`column` are 1-based, as serde_json reports.
    InvalidJson {
        message: String,
        event_index: u64,
        line: usize,
        column: usize,
        excerpt: String,
    },
    /// Valid JSON, but not an object.
    NotAnObject { event_index: u64, excerpt: String },
    /// A delta would have taken one accumulated text past the cap (`max_event_size`): its
    /// text was not appended. Unlike the other two, the event was read and counts in
    /// `events()`, and whatever else it did (an item or part it created) stands.
    TextTooLarge {
        event_index: u64,
        limit: usize,
        length: usize,
    },
}

impl fmt::Display for AccumulateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccumulateError::InvalidJson { message, event_index, line, column, excerpt } => write!(
                f,
                "invalid JSON in event {event_index} at line {line} column {column}: {message}: {excerpt:?}"
            ),
            AccumulateError::NotAnObject { event_index, excerpt } => {
                write!(f, "event {event_index} is not a JSON object: {excerpt:?}")
            }
            AccumulateError::TextTooLarge { event_index, limit, length } => write!(
                f,
                "event {event_index} would take an accumulated text to {length} bytes, past \
                 max_event_size={limit} bytes: its delta was not appended"
            ),
        }
    }
}

impl std::error::Error for AccumulateError {}

/// The first [`EXCERPT_BYTES`] bytes of `payload`, decoded lossily.
fn excerpt(payload: &[u8]) -> String {
    String::from_utf8_lossy(&payload[..payload.len().min(EXCERPT_BYTES)]).into_owned()
}

/// Whether the payload is the Chat Completions end marker `[DONE]`.
pub(crate) fn is_done_marker(payload: &[u8]) -> bool {
    payload.trim_ascii() == b"[DONE]"
}

/// What became of a payload that did not parse into the typed event.
pub(crate) enum Rejected {
    /// Unreadable: the caller returns this error.
    Error(AccumulateError),
    /// A well-formed object whose fields have unexpected types; carries its `type` (or `?`).
    Malformed(String),
}

/// Parses a payload into the typed event `T`, telling unreadable input from odd fields.
///
/// Only an object is accepted: serde's derived structs would also take a JSON array.
pub(crate) fn parse_event<'a, T: Deserialize<'a>>(
    payload: &'a [u8],
    event_index: u64,
) -> Result<T, Rejected> {
    if let Err(e) = std::str::from_utf8(payload) {
        // serde_json only checks the strings it decodes; a payload must be text throughout.
        let at = e.valid_up_to();
        let line = 1 + payload[..at].iter().filter(|&&b| b == b'\n').count();
        let column = at
            - payload[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1)
            + 1;
        return Err(Rejected::Error(AccumulateError::InvalidJson {
            message: format!("invalid UTF-8 at line {line} column {column}"),
            event_index,
            line,
            column,
            excerpt: excerpt(payload),
        }));
    }
    let starts_object = payload.trim_ascii_start().first() == Some(&b'{');
    if starts_object {
        match serde_json::from_slice::<T>(payload) {
            Ok(event) => return Ok(event),
            Err(e) if e.is_data() => {
                // The object may still be broken further on: only a clean one is "malformed".
                if serde_json::from_slice::<IgnoredAny>(payload).is_ok() {
                    #[derive(Deserialize)]
                    struct Head<'a> {
                        #[serde(borrow, rename = "type")]
                        kind: Option<Str<'a>>,
                    }
                    let kind = serde_json::from_slice::<Head>(payload)
                        .ok()
                        .and_then(|h| h.kind)
                        .map_or_else(|| "?".to_owned(), |k| k.0.into_owned());
                    return Err(Rejected::Malformed(kind));
                }
            }
            Err(_) => {}
        }
    }
    Err(Rejected::Error(
        match serde_json::from_slice::<IgnoredAny>(payload) {
            Ok(_) => AccumulateError::NotAnObject {
                event_index,
                excerpt: excerpt(payload),
            },
            Err(e) => AccumulateError::InvalidJson {
                message: e.to_string(),
                event_index,
                line: e.line(),
                column: e.column(),
                excerpt: excerpt(payload),
            },
        },
    ))
}

/// Reads one Responses / Realtime payload into `ev`: the fast reader, with serde as the referee.
/// `[DONE]` gives `Ok(false)` and counts nothing. A malformed event (a read field of the wrong
/// type, or twice) is counted here, in `events` and `unknown`, with a warning when its type is
/// `used`; then the result is `Ok(false)` too.
pub(crate) fn read_stream_event<'a>(
    payload: &'a [u8],
    ev: &mut StreamEvent<'a>,
    shape: &mut fast::Shape,
    tally: &mut Tally,
    used: fn(&str) -> bool,
) -> Result<bool, AccumulateError> {
    if shape.is_learned() {
        if shape.read(payload, ev) {
            return Ok(true);
        }
        *ev = StreamEvent::default();
    }
    if is_done_marker(payload) {
        return Ok(false);
    }
    if fast::parse_into(payload, ev) {
        shape.missed(payload);
        return Ok(true);
    }
    match parse_event(payload, tally.events) {
        Ok(parsed) => {
            *ev = parsed;
            Ok(true)
        }
        Err(Rejected::Error(e)) => Err(e),
        Err(Rejected::Malformed(kind)) => {
            tally.events += 1;
            tally.unknown_events += 1;
            if used(&kind) {
                tally
                    .warnings
                    .push(format!("{kind}: malformed event ignored"));
            }
            Ok(false)
        }
    }
}

/// A string field borrowed from the payload when it has no escapes.
///
/// (`#[serde(borrow)]` does not reach a `Cow` inside an `Option`; a newtype does.)
#[derive(Deserialize, Debug)]
#[serde(transparent)]
pub(crate) struct Str<'a>(#[serde(borrow)] pub Cow<'a, str>);

/// A JSON object's entries in order, keys borrowed, values left unparsed.
pub(crate) struct RawEntries<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for RawEntries<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for EntriesVisitor<'a> {
            type Value = RawEntries<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((key, value)) = map.next_entry::<Str<'a>, &'a RawValue>()? {
                    entries.push((key.0, value));
                }
                Ok(RawEntries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor(std::marker::PhantomData))
    }
}

/// Parses a kept fragment (item, part, response object) into an owned object, if it is one.
pub(crate) fn raw_object(raw: Option<&RawValue>) -> Option<Map<String, Value>> {
    let json = raw?.get();
    if let Some(map) = fast::object(json) {
        return Some(map);
    }
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// The warning for an error: `"error event: {message}"`, `(no message)` when not a string.
pub(crate) fn error_warning(message: Option<&Value>) -> String {
    format!(
        "error event: {}",
        message.and_then(Value::as_str).unwrap_or("(no message)")
    )
}

/// The warning for an `error` event: the `message` of its `error` object (Realtime), else
/// its own `message` (the flat Responses API event).
pub(crate) fn event_error_warning(ev: &StreamEvent<'_>) -> String {
    let nested = ev
        .object("error")
        .and_then(|mut e| e.remove("message"))
        .filter(Value::is_string);
    let flat = || ev.value("message");
    error_warning(nested.or_else(flat).as_ref())
}

/// For the unit tests: each recording under the corpus's `kind` folder (`""`: all of it) as its
/// lines, an SSE `data:` prefix taken off and trimmed (WebSocket recordings: a message a line).
#[cfg(test)]
pub(crate) fn corpus_lines(kind: &str) -> Vec<Vec<String>> {
    let mut files = vec![corpus_dir(kind)];
    let mut out = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        out.push(
            text.lines()
                .map(|line| line.strip_prefix("data:").unwrap_or(line).trim().to_owned())
                .collect(),
        );
    }
    out
}

/// For the unit tests: the recorded corpus's `kind` folder (`""`: the whole corpus), found as
/// `rust/tests/accumulate_support` finds it for the integration tests.
#[cfg(test)]
pub(crate) fn corpus_dir(kind: &str) -> std::path::PathBuf {
    let manifest = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    [
        std::env::var_os("RAPIDSSE_CORPUS").map(std::path::PathBuf::from),
        Some(manifest.join("tests/corpus")),
    ]
    .into_iter()
    .flatten()
    .map(|root| root.join(kind))
    .find(|dir| dir.is_dir())
    .expect("corpus directory; set RAPIDSSE_CORPUS")
}

/// The cap on one accumulated text, in UTF-8 bytes (`None`: no cap), and the first refusal
/// since the accumulator last looked.
#[derive(Debug, Default)]
pub(crate) struct TextCap {
    pub limit: Option<usize>,
    refused: Option<usize>,
}

impl TextCap {
    pub fn new(limit: Option<usize>) -> TextCap {
        TextCap {
            limit,
            refused: None,
        }
    }

    /// Whether a text of `len` bytes may grow by `add` bytes; a refusal is remembered.
    #[inline]
    pub fn admits(&mut self, len: usize, add: usize) -> bool {
        match self.limit {
            Some(limit) if len.saturating_add(add) > limit => {
                self.refused.get_or_insert(len.saturating_add(add));
                false
            }
            _ => true,
        }
    }

    /// The error for the event just applied, if it had a delta refused.
    pub fn check(&mut self, event_index: u64) -> Result<(), AccumulateError> {
        match (self.refused.take(), self.limit) {
            (Some(length), Some(limit)) => Err(AccumulateError::TextTooLarge {
                event_index,
                limit,
                length,
            }),
            _ => Ok(()),
        }
    }
}

/// The top-level fields a fast path saw replaced (`usage`, `usageMetadata`, ...: the last
/// non-null one wins), kept as their JSON text until the object is read instead of being built
/// at every chunk only to be replaced at the next. Each kept key holds a placeholder in the
/// object, so that it keeps the place it would have had; [`Replaced::flush`] (before the object
/// is changed another way) and [`Replaced::write`] (when it is written) build the kept values
/// with serde, as the general path builds them.
#[derive(Debug, Default)]
pub(crate) struct Replaced {
    kept: Vec<(&'static str, String)>,
}

impl Replaced {
    /// Keeps `raw` as the value of `top[key]` if it is not null, returning false (nothing
    /// changed) if serde might not build it (see [`fast::Raw::buildable`]). A string equal to
    /// the one in place is not kept (the usual `modelVersion`, `responseId`).
    pub fn keep(&mut self, top: &mut Map<String, Value>, key: &'static str, raw: fast::Raw<'_>) {
        if raw.is_null() {
            return;
        }
        let slot = self.kept.iter().position(|(k, _)| *k == key);
        if slot.is_none() && raw.first() == b'"' {
            if let (Some(Value::String(ours)), Some(theirs)) = (member(top, key), raw.string()) {
                if *ours == theirs {
                    return;
                }
            }
        }
        // A kept key has its placeholder (or, after a flush, its value) already.
        if slot.is_none() && member(top, key).is_none() {
            top.insert(key.to_owned(), Value::Null);
        }
        match slot {
            Some(i) => {
                let json = &mut self.kept[i].1;
                json.clear();
                json.push_str(raw.json());
            }
            None => self.kept.push((key, raw.json().to_owned())),
        }
    }

    /// [`keep`](Self::keep) of each of `raws` (values of `keys`), noting the kept values that
    /// are not strings as holes of the chunk's shape (a string stays in the shape: a chunk of
    /// the shape replaces it with itself).
    pub fn keep_all<'a, A, const N: usize>(
        &mut self,
        top: &mut Map<String, Value>,
        keys: [&'static str; N],
        raws: [Option<fast::Raw<'a>>; N],
        learn: &mut fast::Learn<'a, A>,
        action: impl Fn(&'static str) -> A,
    ) {
        for (key, raw) in keys.into_iter().zip(raws) {
            if let Some(raw) = raw {
                self.keep(top, key, raw);
                if raw.first() != b'"' {
                    learn.holes.push((raw, false, action(key)));
                }
            }
        }
    }

    /// Whether `keep` would keep (or skip) every one of `raws` (none unbuildable).
    fn can_keep(raws: &[Option<fast::Raw<'_>>]) -> bool {
        raws.iter()
            .flatten()
            .all(|raw| raw.is_null() || raw.first() == b'"' || raw.buildable())
    }

    /// Builds the kept values into `top`.
    pub fn flush(&mut self, top: &mut Map<String, Value>) {
        for (key, json) in self.kept.drain(..) {
            if let Ok(value) = serde_json::from_str::<Value>(&json) {
                top.insert(key.to_owned(), value);
            }
        }
    }

    /// Writes `top[key]` (the kept value if there is one).
    pub fn write(&self, out: &mut Vec<u8>, key: &str, value: &Value) {
        let kept = self.kept.iter().find(|(k, _)| *k == key);
        if let Some((_, json)) = kept {
            // Kept only where it builds: valid JSON, as `write_as_serde` needs.
            if json::write_as_serde(out, json.as_bytes()) {
                return;
            }
        }
        match kept.and_then(|(_, json)| serde_json::from_str::<Value>(json).ok()) {
            Some(kept) => json::write_value(out, &kept),
            None => json::write_value(out, value),
        }
    }
}

/// An accumulator's counts (`warnings()`, `unknown_events()`, `events()`), and how the
/// chunk-per-object ones (Chat, Completions, Gemini) read a chunk first ([`Tally::admit`]).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub warnings: Vec<String>,
    pub unknown_events: u64,
    pub events: u64,
}

/// A chunk type of [`Tally::admit`]: its `error` and `object` fields.
pub(crate) trait ChunkHead<'a>: Deserialize<'a> {
    fn error(&self) -> Option<&'a RawValue>;
    fn object(&self) -> Option<&str> {
        None
    }
}

impl Tally {
    /// Reads `payload` as a chunk `T` and counts it in `events`. `Ok(None)` when the chunk is
    /// kept out of the result and counted in `unknown_events`: malformed (with the warning
    /// `"{label}: malformed chunk ignored"`), an `error` that is not null (with the warning
    /// `"error event: {error.message}"`), or an `object` that is not `object` (when given).
    /// An unreadable payload is the error, and counts nowhere.
    pub fn admit<'a, T: ChunkHead<'a>>(
        &mut self,
        payload: &'a [u8],
        label: &str,
        object: Option<&str>,
    ) -> Result<Option<T>, AccumulateError> {
        let chunk: T = match parse_event(payload, self.events) {
            Ok(chunk) => chunk,
            Err(Rejected::Error(e)) => return Err(e),
            Err(Rejected::Malformed(_)) => {
                self.events += 1;
                self.unknown_events += 1;
                self.warnings
                    .push(format!("{label}: malformed chunk ignored"));
                return Ok(None);
            }
        };
        self.events += 1;
        if let Some(error) = chunk.error() {
            let message = raw_object(Some(error)).and_then(|mut e| e.remove("message"));
            self.warnings.push(error_warning(message.as_ref()));
            self.unknown_events += 1;
            return Ok(None);
        }
        if let (Some(expected), Some(theirs)) = (object, chunk.object()) {
            if theirs != expected {
                self.unknown_events += 1;
                return Ok(None);
            }
        }
        Ok(Some(chunk))
    }
}

/// A later chunk's replaced top-level fields (Chat, Completions, Gemini): each value that is
/// there, not null, and parses replaces `top`'s (in place when the key is there: no key
/// allocated per chunk).
pub(crate) fn replace_fields<'k>(
    top: &mut Map<String, Value>,
    fields: impl IntoIterator<Item = (&'k str, Option<&'k RawValue>)>,
) {
    for (key, raw) in fields {
        let Some(value) = raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok()) else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        match top.get_mut(key) {
            Some(slot) => *slot = value,
            None => {
                top.insert(key.to_owned(), value);
            }
        }
    }
}

/// The top level of a Chat or Completions result from its first chunk: the chunk's members but
/// `dropped`, `choices` left as a placeholder, `object` set, and `id`, `created`, `model` and
/// the `nulls` (as null) where the chunk lacks them.
pub(crate) fn openai_top_level(
    payload: &[u8],
    object: &str,
    dropped: &[&str],
    nulls: &[&str],
) -> Map<String, Value> {
    let top = openai_members(payload, dropped).unwrap_or_else(|| {
        let mut top: Map<String, Value> = serde_json::from_slice(payload).unwrap_or_default();
        for key in dropped {
            top.shift_remove(*key);
        }
        top
    });
    openai_top_level_of(top, object, nulls)
}

/// [`openai_top_level`] from the chunk's members (but the dropped ones) as serde builds them.
pub(crate) fn openai_top_level_of(
    mut top: Map<String, Value>,
    object: &str,
    nulls: &[&str],
) -> Map<String, Value> {
    top.insert("choices".to_owned(), Value::Null);
    top.insert("object".to_owned(), Value::String(object.to_owned()));
    for (key, default) in [
        ("id", Value::String(String::new())),
        ("created", Value::from(0)),
        ("model", Value::String(String::new())),
    ] {
        top.entry(key).or_insert(default);
    }
    for key in nulls {
        top.entry(*key).or_insert(Value::Null);
    }
    top
}

/// The members of `payload` but `dropped` as serde builds them, `choices` as null, read by
/// [`fast::entries`] so that the first chunk's `choices` (read again by the caller) is checked
/// but not built only to be thrown away; `None` where serde must decide, or a value (a dropped
/// one too) would not build, which makes serde's whole parse fail.
fn openai_members(payload: &[u8], dropped: &[&str]) -> Option<Map<String, Value>> {
    let mut top = Map::new();
    fast::entries(payload, |key, raw| {
        if key == "choices" || dropped.contains(&key) {
            if !raw.buildable() {
                return None;
            }
            if key == "choices" {
                top.insert(key.to_owned(), Value::Null);
            }
        } else {
            // A repeated key keeps its first place and takes the last value, as serde's map.
            top.insert(key.to_owned(), raw.build()?);
        }
        Some(())
    })?;
    Some(top)
}

/// A first chunk's members for [`openai_top_level_of`] and its `choices` (when not null), read
/// once by [`fast::entries`]: the members but `dropped` as [`openai_members`] builds them,
/// `choices` as null. `None` where the general path must decide (it reads the chunk whole with
/// serde, which refuses some members twice and takes others' last value): a member twice, an
/// `error` that is not null, an `object` that is neither null nor the string `object`, a
/// `choices` that is not null nor an array, or a value (a dropped one too) that would not build.
pub(crate) fn openai_first_members<'a>(
    payload: &'a [u8],
    object: &str,
    dropped: &[&str],
) -> Option<(Map<String, Value>, Option<fast::Raw<'a>>)> {
    // Room for a chunk's usual dozen members: the map does not grow as it is filled.
    let mut top = Map::with_capacity(12);
    let mut choices = None;
    let mut dropped_seen = 0u64;
    fast::entries(payload, |key, raw| {
        if let Some(at) = dropped.iter().position(|d| *d == key) {
            if at >= 64 || dropped_seen & (1 << at) != 0 || !raw.buildable() {
                return None;
            }
            dropped_seen |= 1 << at;
            return Some(());
        }
        let value = match key {
            "choices" => {
                if !raw.is_null() {
                    if raw.first() != b'[' || !raw.buildable() {
                        return None;
                    }
                    choices = Some(raw);
                }
                Value::Null
            }
            "error" if !raw.is_null() => return None,
            "object" if !raw.is_null() => {
                if !is_plain_string(raw, object) {
                    return None;
                }
                Value::String(object.to_owned())
            }
            _ => raw.build()?,
        };
        top.insert(key.to_owned(), value).is_none().then_some(())
    })?;
    Some((top, choices))
}

/// Whether `raw` is the JSON string `expected`, written without an escape (how the fast paths
/// take a chunk's `object`; an escaped one is left to serde).
fn is_plain_string(raw: fast::Raw<'_>, expected: &str) -> bool {
    let json = raw.json();
    json.len() == expected.len() + 2
        && raw.first() == b'"'
        && &json[1..expected.len() + 1] == expected
}

/// The objects of `raw` (a chunk's `choices`, `candidates`) as serde builds them; none when it
/// is not an array, and an entry that is not an object skipped.
pub(crate) fn raw_objects(raw: Option<&RawValue>) -> Vec<Map<String, Value>> {
    match raw.map(|r| serde_json::from_str::<Value>(r.get())) {
        Some(Ok(Value::Array(items))) => items
            .into_iter()
            .filter_map(|item| match item {
                Value::Object(map) => Some(map),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A later chunk's top level as the Gemini and Completions fast paths read it: the values of
/// the `replaced` fields and of the `list` (`candidates`, `choices`), read by [`fast::entries`].
/// `None` (the general path decides) when a read field is there twice, `error` is not null,
/// `object` is there and is neither null nor the string `object` (when given), a replaced
/// value might not build (see [`fast::Raw::buildable`]), or the reader leaves it to serde.
pub(crate) fn fast_top<'a, const N: usize>(
    payload: &'a [u8],
    replaced: &[&'static str; N],
    list: &str,
    object: Option<&str>,
) -> Option<([Option<fast::Raw<'a>>; N], Option<fast::Raw<'a>>)> {
    fast_top_with(payload, replaced, list, object, |_, _| Some(()))
}

/// [`fast_top`], with each of the other members (not read there) given to `other`, in order
/// (the Chat tap's vendor members and the strings it does not read); `None` when `other` says.
pub(crate) fn fast_top_with<'a, const N: usize>(
    payload: &'a [u8],
    replaced: &[&'static str; N],
    list: &str,
    object: Option<&str>,
    mut other: impl FnMut(&'a str, fast::Raw<'a>) -> Option<()>,
) -> Option<([Option<fast::Raw<'a>>; N], Option<fast::Raw<'a>>)> {
    let (mut top, mut items) = ([None; N], None);
    let mut seen = 0u32;
    fast::entries(payload, |key, value| {
        let n = if key == list {
            N
        } else if key == "error" {
            N + 1
        } else if key == "object" && object.is_some() {
            N + 2
        } else {
            match replaced.iter().position(|k| *k == key) {
                Some(n) => n,
                None => return other(key, value),
            }
        };
        if seen & (1 << n) != 0 {
            return None;
        }
        seen |= 1 << n;
        if n < N {
            top[n] = Some(value);
            return Some(());
        }
        match n - N {
            0 => items = Some(value),
            1 => return value.is_null().then_some(()),
            _ => {
                let same = is_plain_string(value, object.unwrap_or_default());
                return (same || value.is_null()).then_some(());
            }
        }
        Some(())
    })?;
    if !Replaced::can_keep(&top) {
        return None;
    }
    Some((top, items.filter(|i| !i.is_null())))
}

/// For the tests' random edits: a deterministic xorshift (failures reproduce).
#[cfg(test)]
pub(crate) fn xorshift() -> impl FnMut() -> u64 {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// Variants of `payload` for the differential tests of the fast paths: each byte replaced by
/// bytes that change JSON's meaning (quotes, escapes, brackets, numbers, literals), bytes cut,
/// and spans repeated (duplicated keys and values).
#[cfg(test)]
pub(crate) fn mutations(payload: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let step = (payload.len() / 97).max(1);
    for at in (0..payload.len()).step_by(step) {
        for b in *b"\"\\{}[],:0-e.n \xc3" {
            let mut m = payload.to_vec();
            m[at] = b;
            out.push(m);
        }
        let mut cut = payload.to_vec();
        cut.remove(at);
        out.push(cut);
        let end = (at + 24).min(payload.len());
        let mut twice = payload[..end].to_vec();
        twice.extend_from_slice(&payload[at..]);
        out.push(twice);
    }
    for escaped in [
        &b"\\u00e9"[..],
        b"\\n",
        b"\\ud83d\\ude00",
        b"\\ud800",
        b"1e400",
        b"-0",
    ] {
        for at in (0..payload.len()).step_by(step * 3) {
            let mut m = payload[..at].to_vec();
            m.extend_from_slice(escaped);
            m.extend_from_slice(&payload[at..]);
            out.push(m);
        }
    }
    out
}

#[cfg(test)]
mod top_level_tests {
    use super::*;

    /// What `openai_top_level` built before it read members with the tap's reader: serde's
    /// whole parse, the dropped keys removed.
    fn by_serde(payload: &[u8], dropped: &[&str]) -> Map<String, Value> {
        let mut top: Map<String, Value> = serde_json::from_slice(payload).unwrap_or_default();
        for key in dropped {
            top.shift_remove(*key);
        }
        top.insert("choices".to_owned(), Value::Null);
        top
    }

    #[test]
    fn the_first_chunks_top_level_is_what_serde_builds() {
        let (mut read, mut payloads) = (0, 0);
        for lines in corpus_lines("chat") {
            for line in lines.iter().filter(|l| l.starts_with('{')).take(2) {
                for payload in
                    std::iter::once(line.as_bytes().to_vec()).chain(mutations(line.as_bytes()))
                {
                    let dropped = &["obfuscation"];
                    let ours = openai_top_level(
                        &payload,
                        "chat.completion",
                        dropped,
                        &["system_fingerprint"],
                    );
                    let mut theirs = by_serde(&payload, dropped);
                    theirs.insert(
                        "object".to_owned(),
                        Value::String("chat.completion".to_owned()),
                    );
                    for (key, default) in [
                        ("id", Value::String(String::new())),
                        ("created", Value::from(0)),
                        ("model", Value::String(String::new())),
                        ("system_fingerprint", Value::Null),
                    ] {
                        theirs.entry(key).or_insert(default);
                    }
                    assert_eq!(
                        serde_json::to_string(&ours).unwrap(),
                        serde_json::to_string(&theirs).unwrap(),
                        "{}",
                        String::from_utf8_lossy(&payload)
                    );
                    payloads += 1;
                    read += usize::from(openai_members(&payload, dropped).is_some());
                }
            }
        }
        // Most variants are still read by the reader (the rest are left to serde).
        assert!(
            payloads > 10_000 && read * 3 > payloads,
            "{read} of {payloads}"
        );
    }
}

/// The most entries a map may have for [`member`] and [`member_mut`] to find a key by comparing
/// it with each key in turn rather than by hashing it: SipHash over a short key costs more than
/// comparing it with the dozen keys at most of a choice, a message, a tool call or a top level.
const SCANNED: usize = 12;

/// `map.get(key)`, found by comparing keys when the map is small (see [`SCANNED`]). A map's keys
/// are unique, so both find the same entry.
#[inline]
pub(crate) fn member<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m Value> {
    if map.len() <= SCANNED {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// `map.get_mut(key)`, found as [`member`] finds it.
#[inline]
pub(crate) fn member_mut<'m>(map: &'m mut Map<String, Value>, key: &str) -> Option<&'m mut Value> {
    if map.len() <= SCANNED {
        map.iter_mut().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get_mut(key)
    }
}

/// `value[key]` for an object (`Value::get` with a key), found as [`member`] finds it.
#[inline]
pub(crate) fn value_member<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    member(value.as_object()?, key)
}

/// Where the entry whose `index` is `index` is in `entries` (a choice, a candidate): looked up
/// at `entries[index]` first, where it usually is.
pub(crate) fn position_by_index(entries: &[Map<String, Value>], index: u64) -> Option<usize> {
    let has = |c: &Map<String, Value>| member(c, "index").and_then(Value::as_u64) == Some(index);
    match entries.get(index as usize) {
        Some(c) if has(c) => Some(index as usize),
        _ => entries.iter().position(has),
    }
}

/// Appends `delta` to the string at `map[key]`, creating it (or replacing a non-string) first,
/// unless that would take the text past the cap.
pub(crate) fn append_text(map: &mut Map<String, Value>, key: &str, delta: &str, cap: &mut TextCap) {
    match map.get_mut(key) {
        Some(Value::String(text)) => {
            if cap.admits(text.len(), delta.len()) {
                text.push_str(delta)
            }
        }
        _ => {
            if cap.admits(0, delta.len()) {
                map.insert(key.to_owned(), Value::String(delta.to_owned()));
            }
        }
    }
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Where a warning points: the event type that brought the server's value and the item.
pub(crate) struct Origin<'a> {
    pub source: &'a str,
    pub item: &'a str,
}

impl Origin<'_> {
    fn warn(&self, warnings: &mut Vec<String>, path: &str) {
        warnings.push(format!(
            "{}: item {} {} differs from the accumulated deltas",
            self.source, self.item, path
        ));
    }
}

/// Sets `map[key]` to the server's text, unless that is empty and the deltas built some.
pub(crate) fn settle_text(
    map: &mut Map<String, Value>,
    key: &str,
    server: &str,
    origin: &Origin<'_>,
    path: &str,
    warnings: &mut Vec<String>,
) {
    let ours = non_empty_str(map.get(key));
    if server.is_empty() {
        if ours.is_none() {
            map.insert(key.to_owned(), Value::String(String::new()));
        }
        return;
    }
    if let Some(ours) = ours {
        if ours != server {
            origin.warn(warnings, path);
        }
    }
    map.insert(key.to_owned(), Value::String(server.to_owned()));
}

const ITEM_TEXT_KEYS: [&str; 3] = ["arguments", "input", "code"];
const PART_TEXT_KEYS: [&str; 3] = ["text", "refusal", "transcript"];
const PART_ARRAYS: [&str; 2] = ["content", "summary"];

fn is_empty_value(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// When the server's `key` is missing, null, `""` or `[]` and ours is present and not null,
/// moves ours into the server's object and returns true.
fn keep_ours(ours: &mut Map<String, Value>, server: &mut Map<String, Value>, key: &str) -> bool {
    if !is_empty_value(server.get(key)) || ours.get(key).is_none_or(Value::is_null) {
        return false;
    }
    let kept = ours.remove(key).unwrap_or(Value::Null);
    server.insert(key.to_owned(), kept);
    true
}

/// Warns when our and the server's `key` are both non-empty strings and differ.
fn compare_text(
    ours: &Map<String, Value>,
    server: &Map<String, Value>,
    key: &str,
    origin: &Origin<'_>,
    path: impl FnOnce() -> String,
    warnings: &mut Vec<String>,
) {
    if let (Some(mine), Some(theirs)) =
        (non_empty_str(ours.get(key)), non_empty_str(server.get(key)))
    {
        if mine != theirs {
            origin.warn(warnings, &path());
        }
    }
}

/// Replaces one content/summary part by the server's, keeping our `text`, `refusal`,
/// `transcript` and `annotations` where the server's are empty (see [`keep_ours`]).
pub(crate) fn settle_part(
    ours: &mut Map<String, Value>,
    mut server: Map<String, Value>,
    origin: &Origin<'_>,
    prefix: &str,
    warnings: &mut Vec<String>,
) {
    keep_ours(ours, &mut server, "annotations");
    for key in PART_TEXT_KEYS {
        if !keep_ours(ours, &mut server, key) {
            compare_text(
                ours,
                &server,
                key,
                origin,
                || format!("{prefix}{key}"),
                warnings,
            );
        }
    }
    *ours = server;
}

/// Replaces an item by the server's version of it, keeping our `arguments`, `input`, `code`,
/// `content` and `summary` where the server's are empty (see [`keep_ours`]). When both have a
/// non-empty `content` / `summary` array, the server's (its length) wins and each of its
/// parts is settled against ours at the same position.
pub(crate) fn settle_item(
    ours: &mut Map<String, Value>,
    mut server: Map<String, Value>,
    origin: &Origin<'_>,
    warnings: &mut Vec<String>,
) {
    for array_key in PART_ARRAYS {
        if keep_ours(ours, &mut server, array_key) {
            continue;
        }
        let (Some(Value::Array(our_parts)), Some(Value::Array(server_parts))) =
            (ours.get_mut(array_key), server.get_mut(array_key))
        else {
            continue;
        };
        for (i, server_part) in server_parts.iter_mut().enumerate() {
            if let (Some(Value::Object(mine)), Value::Object(theirs)) =
                (our_parts.get_mut(i), &mut *server_part)
            {
                let theirs = std::mem::take(theirs);
                settle_part(
                    mine,
                    theirs,
                    origin,
                    &format!("{array_key}[{i}]."),
                    warnings,
                );
                *server_part = Value::Object(std::mem::take(mine));
            }
        }
    }
    for key in ITEM_TEXT_KEYS {
        if !keep_ours(ours, &mut server, key) {
            compare_text(ours, &server, key, origin, || key.to_owned(), warnings);
        }
    }
    *ours = server;
}

/// The item types a delta may write into, and the type it creates when none fits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ItemKind {
    Message,
    Reasoning,
    FunctionCall,
    CustomToolCall,
    McpCall,
    CodeInterpreterCall,
    /// Parts of an unknown type: any item; a `message` when one must be created.
    Any,
}

impl ItemKind {
    fn type_name(self) -> &'static str {
        match self {
            ItemKind::Message | ItemKind::Any => "message",
            ItemKind::Reasoning => "reasoning",
            ItemKind::FunctionCall => "function_call",
            ItemKind::CustomToolCall => "custom_tool_call",
            ItemKind::McpCall => "mcp_call",
            ItemKind::CodeInterpreterCall => "code_interpreter_call",
        }
    }

    fn fits(self, item: &Map<String, Value>) -> bool {
        self == ItemKind::Any || item.get("type").and_then(Value::as_str) == Some(self.type_name())
    }
}

/// Which API's item shapes to create.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Flavor {
    Responses,
    Realtime,
}

/// The item an event names: `item_id` and/or `output_index`, both optional.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ItemRef<'a> {
    pub item_id: Option<&'a str>,
    pub output_index: Option<u64>,
}

/// The output items of one response, in output order, found by id or output index.
///
/// Keying: an item is found by its `id` first; `output_index` is only a fallback (vendors
/// reuse or omit it). Both maps point at the latest item that claimed the key.
#[derive(Debug)]
pub(crate) struct ItemStore {
    flavor: Flavor,
    items: Vec<Map<String, Value>>,
    done: Vec<bool>,
    by_id: HashMap<String, usize>,
    by_index: HashMap<u64, usize>,
}

fn item_id(item: &Map<String, Value>) -> Option<&str> {
    non_empty_str(item.get("id"))
}

impl ItemStore {
    pub fn new(flavor: Flavor) -> Self {
        ItemStore {
            flavor,
            items: Vec::new(),
            done: Vec::new(),
            by_id: HashMap::new(),
            by_index: HashMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn items(&self) -> &[Map<String, Value>] {
        &self.items
    }

    pub fn get_mut(&mut self, position: usize) -> &mut Map<String, Value> {
        &mut self.items[position]
    }

    /// How warnings name the item at `position`.
    pub fn label(&self, position: usize) -> String {
        match item_id(&self.items[position]) {
            Some(id) => id.to_owned(),
            None => format!("#{position}"),
        }
    }

    fn push(&mut self, item: Map<String, Value>, output_index: Option<u64>) -> usize {
        let position = self.items.len();
        if let Some(id) = item_id(&item) {
            self.by_id.insert(id.to_owned(), position);
        }
        if let Some(index) = output_index {
            self.by_index.insert(index, position);
        }
        self.items.push(item);
        self.done.push(false);
        position
    }

    /// The earlier item an `output_item.added/done` for `item` refers to, if any: the one
    /// with its id, else (when it has no id) the id-less one at its output index, provided
    /// the types agree and, for `.added`, that item is not finished yet.
    fn existing(
        &self,
        item: &Map<String, Value>,
        output_index: Option<u64>,
        for_done: bool,
    ) -> Option<usize> {
        let same_type = |p: usize| self.items[p].get("type") == item.get("type");
        let open = |p: usize| for_done || !self.done[p];
        match item_id(item) {
            Some(id) => self
                .by_id
                .get(id)
                .copied()
                .filter(|&p| same_type(p) && open(p)),
            None => output_index
                .and_then(|i| self.by_index.get(&i).copied())
                .filter(|&p| same_type(p) && open(p) && item_id(&self.items[p]).is_none()),
        }
    }

    /// `output_item.added`: a new item, unless it re-announces one that deltas already
    /// created (same id and type, not finished), which is then settled with the server's.
    pub fn added(
        &mut self,
        item: Map<String, Value>,
        output_index: Option<u64>,
        source: &str,
        warnings: &mut Vec<String>,
    ) -> usize {
        match self.existing(&item, output_index, false) {
            Some(p) => {
                self.settle(p, item, source, warnings);
                if let Some(index) = output_index {
                    self.by_index.insert(index, p);
                }
                p
            }
            None => self.push(item, output_index),
        }
    }

    /// `output_item.done`: the server's item settles ours (or is added if it never was).
    pub fn done(
        &mut self,
        item: Map<String, Value>,
        output_index: Option<u64>,
        source: &str,
        warnings: &mut Vec<String>,
    ) -> usize {
        let p = match self.existing(&item, output_index, true) {
            Some(p) => {
                self.settle(p, item, source, warnings);
                p
            }
            None => self.push(item, output_index),
        };
        self.done[p] = true;
        p
    }

    fn settle(
        &mut self,
        p: usize,
        server: Map<String, Value>,
        source: &str,
        warnings: &mut Vec<String>,
    ) {
        let label = self.label(p);
        let origin = Origin {
            source,
            item: &label,
        };
        settle_item(&mut self.items[p], server, &origin, warnings);
        if let Some(id) = item_id(&self.items[p]) {
            self.by_id.insert(id.to_owned(), p);
        }
    }

    /// The item a delta or part event writes into; created (in_progress) when none fits.
    ///
    /// With an `item_id`: the item with that id if its type fits; else an id-less fitting item
    /// at the `output_index` (which adopts the id); else a new item with that id.
    /// Without: the fitting item at the `output_index`; or, when there is no index either,
    /// the last item if it fits and is not finished; else a new item (id `""`).
    pub fn resolve(&mut self, at: ItemRef<'_>, kind: ItemKind) -> usize {
        let fits = |store: &Self, p: usize| kind.fits(&store.items[p]);
        if let Some(id) = at.item_id.filter(|id| !id.is_empty()) {
            if let Some(&p) = self.by_id.get(id) {
                if fits(self, p) {
                    return p;
                }
            }
            if let Some(&p) = at.output_index.and_then(|i| self.by_index.get(&i)) {
                if fits(self, p) && item_id(&self.items[p]).is_none() {
                    self.items[p].insert("id".to_owned(), Value::String(id.to_owned()));
                    self.by_id.insert(id.to_owned(), p);
                    return p;
                }
            }
        } else if let Some(index) = at.output_index {
            if let Some(&p) = self.by_index.get(&index) {
                if fits(self, p) {
                    return p;
                }
            }
        } else if let Some(p) = self.items.len().checked_sub(1) {
            if fits(self, p) && !self.done[p] {
                return p;
            }
        }
        let item = self.new_item(at.item_id.unwrap_or(""), kind);
        self.push(item, at.output_index)
    }

    /// A minimal in-progress item of `kind`, valid for the SDK schemas.
    fn new_item(&self, id: &str, kind: ItemKind) -> Map<String, Value> {
        let mut item = Map::new();
        item.insert("id".to_owned(), Value::String(id.to_owned()));
        if self.flavor == Flavor::Realtime {
            item.insert(
                "object".to_owned(),
                Value::String("realtime.item".to_owned()),
            );
        }
        item.insert(
            "type".to_owned(),
            Value::String(kind.type_name().to_owned()),
        );
        let empty = || Value::String(String::new());
        let in_progress = || Value::String("in_progress".to_owned());
        match kind {
            ItemKind::Message | ItemKind::Any => {
                item.insert("status".to_owned(), in_progress());
                item.insert("role".to_owned(), Value::String("assistant".to_owned()));
                item.insert("content".to_owned(), Value::Array(Vec::new()));
            }
            ItemKind::Reasoning => {
                item.insert("summary".to_owned(), Value::Array(Vec::new()));
                item.insert("content".to_owned(), Value::Array(Vec::new()));
            }
            ItemKind::FunctionCall | ItemKind::CustomToolCall => {
                item.insert("status".to_owned(), in_progress());
                item.insert("call_id".to_owned(), empty());
                item.insert("name".to_owned(), empty());
                let field = if kind == ItemKind::FunctionCall {
                    "arguments"
                } else {
                    "input"
                };
                item.insert(field.to_owned(), empty());
            }
            ItemKind::McpCall => {
                item.insert("status".to_owned(), in_progress());
                item.insert("name".to_owned(), empty());
                item.insert("server_label".to_owned(), empty());
                item.insert("arguments".to_owned(), empty());
            }
            ItemKind::CodeInterpreterCall => {
                item.insert("status".to_owned(), in_progress());
                item.insert("code".to_owned(), empty());
                item.insert("container_id".to_owned(), empty());
                item.insert("outputs".to_owned(), Value::Null);
            }
        }
        item
    }

    /// The final object's non-empty `output` replaces the items: each server item is paired
    /// with ours by id (the n-th server item with a given id with our n-th item with that id),
    /// or, when it has no id, with our id-less item of the same type at the same position,
    /// and settled against it (warnings on differing texts). Unpaired server items are taken
    /// as they are; our items the server does not list are dropped.
    pub fn replace_with(&mut self, output: Vec<Value>, source: &str, warnings: &mut Vec<String>) {
        let mut ours_by_id: HashMap<String, std::collections::VecDeque<usize>> = HashMap::new();
        for (p, item) in self.items.iter().enumerate() {
            if let Some(id) = item_id(item) {
                ours_by_id.entry(id.to_owned()).or_default().push_back(p);
            }
        }
        let mut old = std::mem::take(&mut self.items);
        let old_labels: Vec<String> = (0..old.len())
            .map(|p| item_id(&old[p]).map_or_else(|| format!("#{p}"), str::to_owned))
            .collect();
        self.done.clear();
        self.by_id.clear();
        self.by_index.clear();
        for (k, server) in output.into_iter().enumerate() {
            let Value::Object(server) = server else {
                continue;
            };
            let partner = match item_id(&server) {
                Some(id) => ours_by_id.get_mut(id).and_then(|q| q.pop_front()),
                None => Some(k).filter(|&p| {
                    old.get(p).is_some_and(|o| {
                        item_id(o).is_none() && o.get("type") == server.get("type")
                    })
                }),
            };
            let item = match partner {
                Some(p) => {
                    let mut mine = std::mem::take(&mut old[p]);
                    let origin = Origin {
                        source,
                        item: &old_labels[p],
                    };
                    settle_item(&mut mine, server, &origin, warnings);
                    mine
                }
                None => server,
            };
            let p = self.push(item, Some(k as u64));
            self.done[p] = true;
        }
    }
}

/// Parts past the end of an item's array that an index may skip (filled with fresh parts).
const MAX_PART_GAP: u64 = 256;

/// The part at `array_key[index]` of an item (`content` or `summary`), created when missing.
///
/// With an index, the array is padded with fresh parts up to it; an index more than
/// [`MAX_PART_GAP`] past the end gives `None` (the caller ignores the event with a warning).
/// Without an index, the last part is used when its type is one of `types`, else a fresh
/// part is appended. A fresh part is `new_part()`. The part's `text_key` is made a string
/// if it is not one.
pub(crate) fn part_mut<'m>(
    item: &'m mut Map<String, Value>,
    array_key: &str,
    index: Option<u64>,
    types: &[&str],
    text_key: Option<&str>,
    new_part: impl Fn() -> Map<String, Value>,
) -> Option<(usize, &'m mut Map<String, Value>)> {
    if !matches!(item.get(array_key), Some(Value::Array(_))) {
        item.insert(array_key.to_owned(), Value::Array(Vec::new()));
    }
    let Some(Value::Array(parts)) = item.get_mut(array_key) else {
        unreachable!("just set")
    };
    let position = match index {
        Some(i) => {
            if i > parts.len() as u64 + MAX_PART_GAP {
                return None;
            }
            let i = i as usize;
            while parts.len() <= i {
                parts.push(Value::Object(new_part()));
            }
            i
        }
        None => {
            let last_fits = parts.last().is_some_and(|p| {
                p.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| types.contains(&t))
            });
            if !last_fits {
                parts.push(Value::Object(new_part()));
            }
            parts.len() - 1
        }
    };
    if !parts[position].is_object() {
        parts[position] = Value::Object(Map::new());
    }
    let Value::Object(part) = &mut parts[position] else {
        unreachable!("just checked")
    };
    if let Some(key) = text_key {
        if !matches!(part.get(key), Some(Value::String(_))) {
            part.insert(key.to_owned(), Value::String(String::new()));
        }
    }
    Some((position, part))
}

/// A fresh part `{"type": part_type, text_key: ""}` (+ `"annotations": []` for `output_text`).
pub(crate) fn fresh_part(part_type: &str, text_key: &str) -> Map<String, Value> {
    let mut part = Map::new();
    part.insert("type".to_owned(), Value::String(part_type.to_owned()));
    part.insert(text_key.to_owned(), Value::String(String::new()));
    if part_type == "output_text" {
        part.insert("annotations".to_owned(), Value::Array(Vec::new()));
    }
    part
}

/// The fields of a Responses / Realtime event that the accumulators read; others are skipped.
/// Strings borrow from the payload when they have no escapes; kept objects stay raw until used.
#[derive(Deserialize, Debug, Default)]
pub(crate) struct StreamEvent<'a> {
    #[serde(borrow, rename = "type")]
    pub kind: Option<Str<'a>>,
    pub sequence_number: Option<u64>,
    #[serde(borrow)]
    pub item_id: Option<Str<'a>>,
    #[serde(borrow)]
    pub response_id: Option<Str<'a>>,
    pub output_index: Option<u64>,
    pub content_index: Option<u64>,
    pub summary_index: Option<u64>,
    pub annotation_index: Option<u64>,
    #[serde(borrow)]
    pub delta: Option<Str<'a>>,
    #[serde(borrow)]
    pub text: Option<Str<'a>>,
    #[serde(borrow)]
    pub refusal: Option<Str<'a>>,
    #[serde(borrow)]
    pub arguments: Option<Str<'a>>,
    #[serde(borrow)]
    pub input: Option<Str<'a>>,
    #[serde(borrow)]
    pub transcript: Option<Str<'a>>,
    /// The code of `code_interpreter_call_code.done`; also the `code` of a flat `error` event.
    #[serde(borrow)]
    pub code: Option<&'a RawValue>,
    #[serde(borrow)]
    pub name: Option<Str<'a>>,
    #[serde(borrow)]
    pub call_id: Option<Str<'a>>,
    #[serde(borrow)]
    pub item: Option<&'a RawValue>,
    #[serde(borrow)]
    pub part: Option<&'a RawValue>,
    #[serde(borrow)]
    pub response: Option<&'a RawValue>,
    #[serde(borrow)]
    pub annotation: Option<&'a RawValue>,
    #[serde(borrow)]
    pub error: Option<&'a RawValue>,
    #[serde(borrow)]
    pub usage: Option<&'a RawValue>,
    /// The `message` of a flat `error` event (Responses API).
    #[serde(borrow)]
    pub message: Option<&'a RawValue>,
    /// The event's other read fields (the eight kept as raw JSON above), given as values already
    /// built instead (see [`StreamEvent::from_value`]; the fast reader builds them too); then
    /// the raw fields are all `None`.
    /// [`StreamEvent::value`] takes each out (no copy): every raw field is read once at most.
    #[serde(skip)]
    pub built: Option<Box<std::cell::RefCell<Map<String, Value>>>>,
}

/// The fields of [`StreamEvent`] kept as raw JSON until used (or built at once, see `built`),
/// in the order of `fast::field`'s numbers 16 to 23.
const RAW_FIELDS: [&str; 8] = [
    "code",
    "item",
    "part",
    "response",
    "annotation",
    "error",
    "usage",
    "message",
];

#[cfg(any(feature = "python", test))]
impl StreamEvent<'static> {
    /// The event whose JSON parses to `map` (for an event given as a value, e.g. a typed
    /// Python event walked field by field): what `add_json` of that JSON would read, or `None`
    /// when a read field has a type serde would refuse (then the JSON path must decide).
    pub(crate) fn from_value(mut map: Map<String, Value>) -> Option<StreamEvent<'static>> {
        fn text(map: &mut Map<String, Value>, key: &str) -> Option<Option<Str<'static>>> {
            match map.remove(key) {
                None | Some(Value::Null) => Some(None),
                Some(Value::String(s)) => Some(Some(Str(Cow::Owned(s)))),
                Some(_) => None,
            }
        }
        fn index(map: &mut Map<String, Value>, key: &str) -> Option<Option<u64>> {
            match map.remove(key) {
                None | Some(Value::Null) => Some(None),
                Some(value) => value.as_u64().map(Some),
            }
        }
        let ev = StreamEvent {
            kind: text(&mut map, "type")?,
            sequence_number: index(&mut map, "sequence_number")?,
            item_id: text(&mut map, "item_id")?,
            response_id: text(&mut map, "response_id")?,
            output_index: index(&mut map, "output_index")?,
            content_index: index(&mut map, "content_index")?,
            summary_index: index(&mut map, "summary_index")?,
            annotation_index: index(&mut map, "annotation_index")?,
            delta: text(&mut map, "delta")?,
            text: text(&mut map, "text")?,
            refusal: text(&mut map, "refusal")?,
            arguments: text(&mut map, "arguments")?,
            input: text(&mut map, "input")?,
            transcript: text(&mut map, "transcript")?,
            name: text(&mut map, "name")?,
            call_id: text(&mut map, "call_id")?,
            ..StreamEvent::default()
        };
        // Only the raw fields stay, a null one absent (serde reads it as `None`).
        map.retain(|key, value| RAW_FIELDS.contains(&key.as_str()) && !value.is_null());
        Some(StreamEvent {
            built: Some(Box::new(std::cell::RefCell::new(map))),
            ..ev
        })
    }
}

impl<'a> StreamEvent<'a> {
    /// The raw field `name` (one of [`RAW_FIELDS`]) as a value. An event's appliers read each
    /// raw field once at most, so a built value is taken out, not copied.
    pub(crate) fn value(&self, name: &str) -> Option<Value> {
        if let Some(built) = &self.built {
            return built.borrow_mut().remove(name);
        }
        let raw = match name {
            "code" => self.code,
            "item" => self.item,
            "part" => self.part,
            "response" => self.response,
            "annotation" => self.annotation,
            "error" => self.error,
            "usage" => self.usage,
            "message" => self.message,
            _ => None,
        }?;
        match raw_object(Some(raw)) {
            Some(map) => Some(Value::Object(map)),
            None => serde_json::from_str::<Value>(raw.get()).ok(),
        }
    }

    /// The raw field `name` (one of [`RAW_FIELDS`]) when it is an object.
    pub(crate) fn object(&self, name: &str) -> Option<Map<String, Value>> {
        match self.value(name)? {
            Value::Object(map) => Some(map),
            _ => None,
        }
    }

    pub fn kind(&self) -> &str {
        self.kind.as_ref().map_or("", |k| &k.0)
    }

    pub fn item_ref(&self) -> ItemRef<'_> {
        ItemRef {
            item_id: self.item_id.as_ref().map(|s| &*s.0),
            output_index: self.output_index,
        }
    }

    /// The value of the string field that a `.done` event carries its full text in.
    fn full_text(&self, field: &str) -> Option<Cow<'_, str>> {
        match field {
            "text" => self.text.as_ref().map(|s| Cow::Borrowed(&*s.0)),
            "refusal" => self.refusal.as_ref().map(|s| Cow::Borrowed(&*s.0)),
            "arguments" => self.arguments.as_ref().map(|s| Cow::Borrowed(&*s.0)),
            "input" => self.input.as_ref().map(|s| Cow::Borrowed(&*s.0)),
            "transcript" => self.transcript.as_ref().map(|s| Cow::Borrowed(&*s.0)),
            "code" => match &self.built {
                Some(_) => match self.value("code")? {
                    Value::String(code) => Some(Cow::Owned(code)),
                    _ => None,
                },
                None => self
                    .code
                    .and_then(|raw| serde_json::from_str::<Str<'_>>(raw.get()).ok())
                    .map(|s| s.0),
            },
            _ => None,
        }
    }
}

/// Where a text delta (and its `.done` twin) goes.
#[derive(Debug)]
pub(crate) enum TextTarget {
    /// A string field of the item itself (`arguments`, `input`, `code`).
    Item(&'static str),
    /// A string field of a part in the item's `content` (index: `content_index`) or
    /// `summary` (index: `summary_index`) array.
    Part {
        array: &'static str,
        /// Part types that an index-less delta may continue (the last part's type).
        types: &'static [&'static str],
        /// The type of a part the delta has to create.
        new_type: &'static str,
        key: &'static str,
    },
}

/// One family of text events: `X.delta` appends, `X.done` settles with its `done_field`.
#[derive(Debug)]
pub(crate) struct TextSpec {
    pub kind: ItemKind,
    pub target: TextTarget,
    pub done_field: &'static str,
}

/// Where a delta's text went: the item at `position`, then the part `array[index]` if any,
/// then the string field `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TextAt {
    pub position: usize,
    pub part: Option<(&'static str, usize)>,
    pub key: &'static str,
}

impl TextAt {
    fn target<'s>(&self, store: &'s mut ItemStore) -> Option<&'s mut Map<String, Value>> {
        let item = store.get_mut(self.position);
        match self.part {
            None => Some(item),
            Some((array, index)) => match item.get_mut(array) {
                Some(Value::Array(parts)) => match parts.get_mut(index) {
                    Some(Value::Object(part)) => Some(part),
                    _ => None,
                },
                _ => None,
            },
        }
    }

    /// Appends to the string this location names (a delta put it there), the cap already
    /// checked by the caller.
    pub fn append(&self, store: &mut ItemStore, text: &str) {
        if let Some(target) = self.target(store) {
            append_text(target, self.key, text, &mut TextCap::new(None));
        }
    }

    /// The length in bytes of the text there (0 when there is none).
    pub fn len(&self, store: &mut ItemStore) -> usize {
        self.target(store)
            .and_then(|t| t.get(self.key))
            .and_then(Value::as_str)
            .map_or(0, str::len)
    }
}

/// The text families both the Responses and the Realtime events use.
pub(crate) const FUNCTION_CALL_ARGUMENTS: TextSpec = TextSpec {
    kind: ItemKind::FunctionCall,
    target: TextTarget::Item("arguments"),
    done_field: "arguments",
};
pub(crate) const MCP_CALL_ARGUMENTS: TextSpec = TextSpec {
    kind: ItemKind::McpCall,
    target: TextTarget::Item("arguments"),
    done_field: "arguments",
};

/// Applies a text delta (`is_done == false`) or its `.done` twin. Returns whether the event
/// was used (one without its text field changes nothing and counts as unknown), and for an
/// applied delta where its text went.
pub(crate) fn apply_text(
    store: &mut ItemStore,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
    ev: &StreamEvent<'_>,
    spec: &TextSpec,
    is_done: bool,
) -> (bool, Option<TextAt>) {
    let value = if is_done {
        ev.full_text(spec.done_field)
    } else {
        ev.delta.as_ref().map(|d| Cow::Borrowed(&*d.0))
    };
    let Some(value) = value else {
        return (false, None);
    };
    let p = store.resolve(ev.item_ref(), spec.kind);
    let label = if is_done {
        store.label(p)
    } else {
        String::new()
    };
    let origin = Origin {
        source: ev.kind(),
        item: &label,
    };
    let item = store.get_mut(p);
    match spec.target {
        TextTarget::Item(key) => {
            if is_done {
                settle_text(item, key, &value, &origin, key, warnings);
            } else {
                append_text(item, key, &value, cap);
                return (
                    true,
                    Some(TextAt {
                        position: p,
                        part: None,
                        key,
                    }),
                );
            }
        }
        TextTarget::Part {
            array,
            types,
            new_type,
            key,
        } => {
            let index = if array == "summary" {
                ev.summary_index
            } else {
                ev.content_index
            };
            let Some((i, part)) = part_mut(item, array, index, types, Some(key), || {
                fresh_part(new_type, key)
            }) else {
                warnings.push(index_warning(ev.kind(), index));
                return (true, None);
            };
            if is_done {
                settle_text(
                    part,
                    key,
                    &value,
                    &origin,
                    &format!("{array}[{i}].{key}"),
                    warnings,
                );
            } else {
                append_text(part, key, &value, cap);
                return (
                    true,
                    Some(TextAt {
                        position: p,
                        part: Some((array, i)),
                        key,
                    }),
                );
            }
        }
    }
    (true, None)
}

fn index_warning(kind: &str, index: Option<u64>) -> String {
    format!(
        "{kind}: index {} out of range, event ignored",
        index.unwrap_or(0)
    )
}

/// The field holding a part's text, by part type.
fn part_text_key(part_type: &str) -> Option<&'static str> {
    match part_type {
        "output_text" | "text" | "reasoning_text" | "summary_text" => Some("text"),
        "refusal" => Some("refusal"),
        "audio" | "output_audio" => Some("transcript"),
        _ => None,
    }
}

/// `content_part.added/.done` and the reasoning part events: the event's `part` is put at
/// `array[index]` of the item, settled against what deltas built there. Without an index,
/// `.added` appends and `.done` targets the last part of the same type. An event without a
/// `part` object (xAI's `content_part.done`) changes nothing but counts as used.
pub(crate) fn apply_part(
    store: &mut ItemStore,
    warnings: &mut Vec<String>,
    ev: &StreamEvent<'_>,
    array: &'static str,
    kind: ItemKind,
    is_done: bool,
) -> bool {
    let Some(part) = ev.object("part") else {
        return true;
    };
    let part_type = part
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let kind = match (kind, part_type.as_str()) {
        (ItemKind::Any, "output_text" | "refusal" | "text" | "audio" | "output_audio") => {
            ItemKind::Message
        }
        (ItemKind::Any, "reasoning_text") => ItemKind::Reasoning,
        (kind, _) => kind,
    };
    let index = if array == "summary" {
        ev.summary_index
    } else {
        ev.content_index
    };
    let p = store.resolve(ev.item_ref(), kind);
    let label = store.label(p);
    let origin = Origin {
        source: ev.kind(),
        item: &label,
    };
    let item = store.get_mut(p);
    let types: &[&str] = if is_done { &[part_type.as_str()] } else { &[] };
    let text_key = part_text_key(&part_type);
    // A bare slot: the server's part brings its own fields (e.g. no `annotations` from Friendli).
    let new_part = || Map::from_iter([("type".to_owned(), Value::String(part_type.clone()))]);
    let Some((i, slot)) = part_mut(item, array, index, types, text_key, new_part) else {
        warnings.push(index_warning(ev.kind(), index));
        return true;
    };
    settle_part(slot, part, &origin, &format!("{array}[{i}]."), warnings);
    true
}
