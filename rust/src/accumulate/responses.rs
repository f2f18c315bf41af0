//! The Responses API accumulator: events in, the `Response` object out.
//!
//! Dispatch is on the JSON `type` (never the SSE event name). What each type does:
//!
//! - `response.created` / `.queued` / `.in_progress` / `.completed` / `.incomplete` /
//!   `.failed` (lifecycle): the event's `response` becomes the base object (id, status,
//!   model, usage, error, incomplete_details, ... as last seen). Its `output`:
//!   - final types (`completed`, `incomplete`, `failed`) with a non-empty `output`: it replaces
//!     the items, each server item settled against ours (see [`super`]: mismatch warnings,
//!     server's empty texts do not wipe ours); an empty `output` keeps the accumulated items;
//!   - the others: used only when no item exists yet (a resumed stream), as if each item had
//!     come in an `output_item.added` at its position; otherwise ignored.
//!
//!   A lifecycle event without a `response` object counts as unknown.
//! - `response.output_item.added`: a new item, keyed by `item.id` (fallback `output_index`),
//!   unless it re-announces an unfinished item of the same id and type that deltas created.
//! - `response.output_item.done`: the server's item settles ours (or is appended).
//! - `response.content_part.added/.done` (`item_id`, `content_index`, `part`), vLLM's
//!   `response.reasoning_part.added/.done` (a reasoning item's `content`), and
//!   `response.reasoning_summary_part.added/.done` (`summary_index`; the item's `summary`).
//! - Text deltas append, their `.done` twins settle (field carrying the full text in brackets):
//!   `response.output_text` (message `content[content_index]`, part `output_text`, `text`),
//!   `response.refusal` (message part `refusal`, `refusal`),
//!   `response.reasoning_text` (reasoning `content[content_index]`, part `reasoning_text`, `text`),
//!   `response.reasoning_summary_text` (reasoning `summary[summary_index]`, part
//!   `summary_text`, `text`), `response.function_call_arguments` (function_call
//!   `arguments`), `response.custom_tool_call_input` (custom_tool_call `input`),
//!   `response.mcp_call_arguments` (mcp_call `arguments`),
//!   `response.code_interpreter_call_code` (code_interpreter_call `code`).
//!   A delta whose item or part was never announced creates it (in_progress, minimal fields:
//!   a message `{id, type, status, role: "assistant", content: []}`; a reasoning item
//!   `{id, type, summary: [], content: []}`; a function_call `{id, type, status, call_id: "",
//!   name: "", arguments: ""}`; see `ItemStore::new_item`), and a part `{type, text: ""}`
//!   (`output_text` parts also get `annotations: []`). Deltas' `logprobs` are not kept.
//! - `response.output_text.annotation.added`: `annotation` is stored at `annotation_index` of
//!   the part's `annotations` (replacing one there; appended when the index is missing or
//!   past the end).
//! - `sequence_number`, when present, must be the previous one + 1; otherwise the warning
//!   `"sequence gap: expected {previous + 1}, got {n}"`. Events without it are not checked.
//! - `error` (flat `code`, `message`, `param`): the warning `"error event: {message}"`.
//! - Everything else (`keepalive`, `response.rate_limits.updated`, tool progress events such
//!   as `response.web_search_call.searching`, `response.audio.delta` and
//!   `response.audio.transcript.delta/.done` (audio is not accumulated), unknown types, and
//!   `error`): counted in `unknown_events()`, no effect on the result.
//!
//! The snapshot is the base object with `output` replaced (at its place) by the items in
//! output order. Before any lifecycle event, once an item, part or text event has been used,
//! the base is `{"id": "", "object": "response", "status": "in_progress", "output": [...]}`.
//! Before that (or with only unknown events) there is no snapshot.

use serde_json::{Map, Value};

use crate::lex::same;

use super::{
    apply_part, apply_text, event_error_warning, fast, fast::Text, json, part_mut,
    read_stream_event, AccumulateError, Flavor, ItemKind, ItemStore, Shape, StreamEvent, Tally,
    TextAt, TextCap, TextSpec, TextTarget, FUNCTION_CALL_ARGUMENTS, MCP_CALL_ARGUMENTS,
};

const OUTPUT_TEXT: TextSpec = TextSpec {
    kind: ItemKind::Message,
    target: TextTarget::Part {
        array: "content",
        types: &["output_text"],
        new_type: "output_text",
        key: "text",
    },
    done_field: "text",
};
const REFUSAL: TextSpec = TextSpec {
    kind: ItemKind::Message,
    target: TextTarget::Part {
        array: "content",
        types: &["refusal"],
        new_type: "refusal",
        key: "refusal",
    },
    done_field: "refusal",
};
const REASONING_TEXT: TextSpec = TextSpec {
    kind: ItemKind::Reasoning,
    target: TextTarget::Part {
        array: "content",
        types: &["reasoning_text"],
        new_type: "reasoning_text",
        key: "text",
    },
    done_field: "text",
};
const REASONING_SUMMARY_TEXT: TextSpec = TextSpec {
    kind: ItemKind::Reasoning,
    target: TextTarget::Part {
        array: "summary",
        types: &["summary_text"],
        new_type: "summary_text",
        key: "text",
    },
    done_field: "text",
};
const CUSTOM_TOOL_CALL_INPUT: TextSpec = TextSpec {
    kind: ItemKind::CustomToolCall,
    target: TextTarget::Item("input"),
    done_field: "input",
};
const CODE_INTERPRETER_CALL_CODE: TextSpec = TextSpec {
    kind: ItemKind::CodeInterpreterCall,
    target: TextTarget::Item("code"),
    done_field: "code",
};

/// The text family of a delta / `.done` event type, and whether it is the `.done` one.
fn text_spec(kind: &str) -> Option<(&'static TextSpec, bool)> {
    Some(match kind {
        "response.output_text.delta" => (&OUTPUT_TEXT, false),
        "response.output_text.done" => (&OUTPUT_TEXT, true),
        "response.function_call_arguments.delta" => (&FUNCTION_CALL_ARGUMENTS, false),
        "response.function_call_arguments.done" => (&FUNCTION_CALL_ARGUMENTS, true),
        "response.reasoning_text.delta" => (&REASONING_TEXT, false),
        "response.reasoning_text.done" => (&REASONING_TEXT, true),
        "response.reasoning_summary_text.delta" => (&REASONING_SUMMARY_TEXT, false),
        "response.reasoning_summary_text.done" => (&REASONING_SUMMARY_TEXT, true),
        "response.refusal.delta" => (&REFUSAL, false),
        "response.refusal.done" => (&REFUSAL, true),
        "response.code_interpreter_call_code.delta" => (&CODE_INTERPRETER_CALL_CODE, false),
        "response.code_interpreter_call_code.done" => (&CODE_INTERPRETER_CALL_CODE, true),
        "response.custom_tool_call_input.delta" => (&CUSTOM_TOOL_CALL_INPUT, false),
        "response.custom_tool_call_input.done" => (&CUSTOM_TOOL_CALL_INPUT, true),
        "response.mcp_call_arguments.delta" => (&MCP_CALL_ARGUMENTS, false),
        "response.mcp_call_arguments.done" => (&MCP_CALL_ARGUMENTS, true),
        _ => return None,
    })
}

/// For a text event type whose fields the binding layer may read straight from a typed event
/// (type, item id, indices, sequence number and one string): that string's field, `delta` for
/// a delta, the full text's for a `.done` (except `code`, not read as a plain string).
pub fn text_field(kind: &str) -> Option<&'static str> {
    match text_spec(kind)? {
        (_, false) => Some("delta"),
        (spec, true) => Some(spec.done_field).filter(|&field| field != "code"),
    }
}

/// Whether the accumulator reads events of this type (for the malformed-event warning).
fn is_used_type(kind: &str) -> bool {
    text_spec(kind).is_some()
        || matches!(
            kind,
            "response.created"
                | "response.queued"
                | "response.in_progress"
                | "response.completed"
                | "response.incomplete"
                | "response.failed"
                | "response.output_item.added"
                | "response.output_item.done"
                | "response.content_part.added"
                | "response.content_part.done"
                | "response.reasoning_part.added"
                | "response.reasoning_part.done"
                | "response.reasoning_summary_part.added"
                | "response.reasoning_summary_part.done"
                | "response.output_text.annotation.added"
        )
}

/// The fields whose long texts a spliced snapshot sets aside (see
/// [`ResponseAccumulator::snapshot_spliced`]): free text, never a tag or an enum.
const SPLICED_KEYS: &[&str] = &[
    "text",
    "arguments",
    "refusal",
    "code",
    "input",
    "transcript",
];

/// Builds a Responses API `Response` from its stream events. See the module docs.
#[derive(Debug)]
pub struct ResponseAccumulator {
    /// The latest lifecycle `response`; its `output` value is a placeholder.
    base: Option<Map<String, Value>>,
    /// An item, part or text event was used: a snapshot exists even without `base`.
    implied: bool,
    items: ItemStore,
    last_sequence: Option<u64>,
    tally: Tally,
    /// The shape of recent payloads, to read the next ones faster.
    shape: Shape,
    /// The shape generation and event count of the last delta that went into the open run
    /// through a keyed shape (see [`ResponseAccumulator::add_json`]).
    shape_run: Option<(u64, u64)>,
    /// The SSE lines before the payload the shape was learned from (`event: NAME` and
    /// `data: `), with the shape generation they belong to (see
    /// [`ResponseAccumulator::add_framed`]).
    frame: Vec<u8>,
    frame_generation: Option<u64>,
    run: DeltaRun,
    cap: TextCap,
}

/// Consecutive deltas into the same text (the bulk of any stream) are gathered here and
/// written into the item tree at once: when another event arrives or the result is read.
/// The first delta of a run goes the normal way and tells where its text went; the next
/// ones, having the same event type, item id and indices with nothing in between, would
/// resolve to that same place, so they skip the lookups.
#[derive(Debug, Default)]
struct DeltaRun {
    key: Option<RunKey>,
    /// The length of the text in the tree when the run began (for the cap).
    base: usize,
    text: String,
}

#[derive(Debug)]
struct RunKey {
    kind: String,
    item_id: Option<String>,
    output_index: Option<u64>,
    content_index: Option<u64>,
    summary_index: Option<u64>,
    at: TextAt,
}

impl RunKey {
    fn new(ev: &StreamEvent<'_>, at: TextAt) -> RunKey {
        RunKey {
            kind: ev.kind().to_owned(),
            item_id: ev.item_id.as_ref().map(|s| s.0.clone().into_owned()),
            output_index: ev.output_index,
            content_index: ev.content_index,
            summary_index: ev.summary_index,
            at,
        }
    }

    /// Whether a delta of `kind` for this item and these output, content and summary indices
    /// continues the run.
    fn matches(&self, kind: &str, item_id: Option<&str>, indices: [Option<u64>; 3]) -> bool {
        self.kind == kind
            && self.item_id.as_deref() == item_id
            && [self.output_index, self.content_index, self.summary_index] == indices
    }
}

/// A text event's fields, borrowed (see [`ResponseAccumulator::add_text_event`]): a delta,
/// or the full text of a `.done` when `field` is not `delta`.
#[cfg(any(feature = "python", test))]
pub(crate) struct TextEvent<'a> {
    pub kind: &'a str,
    /// The field `text` came from, as [`text_field`] gives it.
    pub field: &'static str,
    pub text: &'a str,
    pub item_id: Option<&'a str>,
    pub output_index: Option<u64>,
    pub content_index: Option<u64>,
    pub summary_index: Option<u64>,
    pub sequence_number: Option<u64>,
}

#[cfg(any(feature = "python", test))]
impl<'a> TextEvent<'a> {
    /// The event as `add_json` would have read it from its JSON.
    fn event(&self) -> StreamEvent<'a> {
        use super::Str;
        use std::borrow::Cow;

        let mut ev = StreamEvent {
            kind: Some(Str(Cow::Borrowed(self.kind))),
            item_id: self.item_id.map(|s| Str(Cow::Borrowed(s))),
            output_index: self.output_index,
            content_index: self.content_index,
            summary_index: self.summary_index,
            sequence_number: self.sequence_number,
            ..StreamEvent::default()
        };
        let text = Some(Str(Cow::Borrowed(self.text)));
        match self.field {
            "delta" => ev.delta = text,
            "text" => ev.text = text,
            "refusal" => ev.refusal = text,
            "arguments" => ev.arguments = text,
            "input" => ev.input = text,
            "transcript" => ev.transcript = text,
            _ => {}
        }
        ev
    }
}

impl ResponseAccumulator {
    /// An accumulator whose texts are capped at `limit` bytes each (`None`: no cap). A delta
    /// that would go past it is not appended and `add_json` returns
    /// [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        ResponseAccumulator {
            base: None,
            implied: false,
            items: ItemStore::new(Flavor::Responses),
            last_sequence: None,
            tally: Tally::default(),
            shape: Shape::default(),
            shape_run: None,
            frame: Vec::new(),
            frame_generation: None,
            run: DeltaRun::default(),
            cap: TextCap::new(limit),
        }
    }

    /// Writes the gathered deltas into the item tree.
    fn flush_run(&mut self) {
        if let Some(key) = self.run.key.take() {
            if !self.run.text.is_empty() {
                key.at.append(&mut self.items, &self.run.text);
                self.run.text.clear();
            }
        }
    }

    /// One event's JSON payload (the SSE `data`). Dispatches on the JSON `type`.
    ///
    /// A delta read through a keyed shape (its type, item id and indices byte for byte those
    /// of the delta before it, see `fast::Shape`) right after a delta of that shape went into
    /// the open run continues the run: it is appended without the lookups.
    pub fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        let mut ev = StreamEvent::default();
        let before = (self.shape.generation(), self.shape.hits());
        if !read_stream_event(
            payload,
            &mut ev,
            &mut self.shape,
            &mut self.tally,
            is_used_type,
        )? {
            return Ok(());
        }
        // Read through the shape (not learned from this payload), and a keyed one.
        let generation = self.shape.generation();
        let shaped =
            (generation == before.0 && self.shape.hits() > before.1 && self.shape.is_keyed())
                .then_some(generation);
        self.add_read(&ev, shaped)
    }

    /// An event read from its payload; `shaped` is the shape generation when it was read
    /// through a keyed shape.
    #[inline]
    fn add_read(
        &mut self,
        ev: &StreamEvent<'_>,
        shaped: Option<u64>,
    ) -> Result<(), AccumulateError> {
        if let (Some(generation), Some(delta)) = (shaped, &ev.delta) {
            if self.shape_run == Some((generation, self.tally.events)) {
                if let Some(result) = self.continue_run(&delta.0, ev.sequence_number) {
                    self.shape_run = Some((generation, self.tally.events));
                    return result;
                }
            }
        }
        let result = self.add_event(ev);
        self.shape_run = match shaped {
            Some(generation) if ev.delta.is_some() && self.run_is_open() && result.is_ok() => {
                Some((generation, self.tally.events))
            }
            _ => None,
        };
        result
    }

    /// [`add_json`](Self::add_json) of the payload of an SSE event named `name` (empty: no
    /// `event:` line). When the payload's shape is learned from it, the event's SSE lines
    /// before the payload are kept with it, for [`add_framed`](Self::add_framed).
    pub fn add_sse(&mut self, name: &[u8], payload: &[u8]) -> Result<(), AccumulateError> {
        let generation = self.shape.generation();
        let result = self.add_json(payload);
        if self.shape.generation() != generation {
            self.frame_generation = None;
            // Names come from the framer, which never leaves a line break in one.
            if self.shape.is_learned() && !name.iter().any(|&b| b == b'\n' || b == b'\r') {
                self.frame.clear();
                if !name.is_empty() {
                    self.frame.extend_from_slice(b"event: ");
                    self.frame.extend_from_slice(name);
                    self.frame.push(b'\n');
                }
                self.frame.extend_from_slice(b"data: ");
                self.frame_generation = Some(self.shape.generation());
                self.shape.set_frame(&self.frame);
            }
        }
        result
    }

    /// Raw SSE bytes at an event boundary: when they start with a whole event of the learned
    /// shape, framed as the payload's was when the shape was learned (see
    /// [`add_sse`](Self::add_sse) and `fast::Shape::read_framed`), adds its payload without
    /// framing it first. Returns the bytes the event takes, its payload's range in `bytes` and
    /// what [`add_json`](Self::add_json) of that payload returns; None when the bytes do not
    /// start that way (nothing is added).
    ///
    /// `max_line` is the framer's cap on a line: an event with a longer data line is left to
    /// the framer.
    #[inline]
    pub fn add_framed(
        &mut self,
        bytes: &[u8],
        max_line: usize,
    ) -> Option<(usize, std::ops::Range<usize>, Result<(), AccumulateError>)> {
        let generation = self.frame_generation?;
        if generation != self.shape.generation() {
            return None;
        }
        // A delta continuing the open run through a keyed shape (as in `add_read`): only its
        // text and sequence number matter.
        // (When such a delta misses, so would the general read: not tried again.)
        if self.shape_run == Some((generation, self.tally.events))
            && self.run_is_open()
            && self.shape.reads_a_delta()
        {
            let (end, used, sequence, delta) =
                self.shape.read_framed_delta(bytes, &self.frame, max_line)?;
            let result = match delta {
                Text::Plain(text) => self.continue_run(text, sequence)?,
                Text::Escaped(raw) => self.continue_run_escaped(raw, sequence)?,
            };
            self.shape_run = Some((generation, self.tally.events));
            return Some((used, self.frame.len()..end, result));
        }
        let mut ev = StreamEvent::default();
        let (end, used) = self
            .shape
            .read_framed(bytes, &self.frame, max_line, &mut ev)?;
        let shaped = self.shape.is_keyed().then_some(generation);
        let result = self.add_read(&ev, shaped);
        Some((used, self.frame.len()..end, result))
    }

    /// Whether `bytes` (the end of a chunk, at an event boundary) starts an event framed as
    /// [`add_framed`](Self::add_framed) takes them, and is what the framer holds back for the
    /// next chunk: a prefix of the SSE lines before the payload, or those lines and a data
    /// line so far with no CR or LF (but one ending `bytes`), no line over `max_line`.
    pub fn framed_prefix(&self, bytes: &[u8], max_line: usize) -> bool {
        if self.frame_generation.is_none() {
            return false;
        }
        let frame = &self.frame[..];
        // The `event:` line (without its LF), if any, and `data: `: within the cap.
        if frame.len().saturating_sub(7) > max_line || 6 > max_line {
            return false;
        }
        if bytes.len() <= frame.len() {
            return frame.starts_with(bytes);
        }
        if !same(&bytes[..frame.len()], frame) {
            return false;
        }
        let data = &bytes[frame.len()..];
        // The data line so far, `data: ` included.
        let line = data.len() + 6;
        match memchr::memchr2(b'\n', b'\r', data) {
            None => line <= max_line,
            Some(i) => i + 1 == data.len() && data[i] == b'\n' && line - 1 <= max_line,
        }
    }

    /// Whether [`add_framed`](Self::add_framed) may take an event: a shape is learned and
    /// framed.
    #[inline]
    pub fn takes_framed(&self) -> bool {
        self.frame_generation == Some(self.shape.generation())
    }

    /// The SSE name of the events [`add_framed`](Self::add_framed) takes.
    pub fn framed_name(&self) -> &[u8] {
        self.frame
            .strip_prefix(b"event: ")
            .and_then(|rest| rest.strip_suffix(b"\ndata: "))
            .unwrap_or_default()
    }

    /// One event already read (by [`add_json`](Self::add_json), or field by field from a
    /// typed Python event by the binding layer).
    pub(crate) fn add_event(&mut self, ev: &StreamEvent<'_>) -> Result<(), AccumulateError> {
        self.tally.events += 1;
        self.sequence(ev.sequence_number);
        if !self.apply(ev) {
            self.tally.unknown_events += 1;
        }
        self.cap.check(self.tally.events - 1)
    }

    /// A text event given by its fields (as the binding layer reads them off a typed event):
    /// the same as [`add_event`](Self::add_event) of that event, without building one when it
    /// is a delta that continues the text the previous delta went to.
    #[cfg(any(feature = "python", test))]
    pub(crate) fn add_text_event(&mut self, text: &TextEvent<'_>) -> Result<(), AccumulateError> {
        let indices = [text.output_index, text.content_index, text.summary_index];
        let continues = text.field == "delta"
            && self
                .run
                .key
                .as_ref()
                .is_some_and(|key| key.matches(text.kind, text.item_id, indices));
        if !continues {
            return self.add_event(&text.event());
        }
        self.tally.events += 1;
        self.sequence(text.sequence_number);
        self.append_to_run(text.text);
        self.cap.check(self.tally.events - 1)
    }

    /// Whether deltas are being gathered into a run (the last event was a text delta whose
    /// text went into it).
    pub(crate) fn run_is_open(&self) -> bool {
        self.run.key.is_some()
    }

    /// A delta known (by the caller) to be of the kind, item and indices of the delta added just
    /// before it, with no event in between: the same as [`add_text_event`](Self::add_text_event)
    /// of it, given only its text and sequence number. None when no run is open (after a
    /// snapshot, say): then the caller adds it the usual way.
    #[inline]
    pub(crate) fn continue_run(
        &mut self,
        delta: &str,
        sequence_number: Option<u64>,
    ) -> Option<Result<(), AccumulateError>> {
        self.continue_run_with(sequence_number, |text| text.push_str(delta))
    }

    /// [`continue_run`](Self::continue_run) of a delta given as the escaped contents of its
    /// JSON string (see `fast::Text::Escaped`): unescaped straight into the run.
    #[inline]
    fn continue_run_escaped(
        &mut self,
        raw: &str,
        sequence_number: Option<u64>,
    ) -> Option<Result<(), AccumulateError>> {
        self.continue_run_with(sequence_number, |text| fast::unescape_into(text, raw))
    }

    /// Continues the run with the delta `append` writes, taken back if the text cap refuses it.
    #[inline(always)]
    fn continue_run_with(
        &mut self,
        sequence_number: Option<u64>,
        append: impl FnOnce(&mut String),
    ) -> Option<Result<(), AccumulateError>> {
        self.run.key.as_ref()?;
        self.tally.events += 1;
        self.sequence(sequence_number);
        let before = self.run.text.len();
        append(&mut self.run.text);
        let added = self.run.text.len() - before;
        if !self.cap.admits(self.run.base + before, added) {
            self.run.text.truncate(before);
        }
        Some(self.cap.check(self.tally.events - 1))
    }

    /// Appends a delta that continues the run, unless the text cap refuses it.
    #[inline]
    fn append_to_run(&mut self, delta: &str) {
        if self
            .cap
            .admits(self.run.base + self.run.text.len(), delta.len())
        {
            self.run.text.push_str(delta);
        }
    }

    /// Records a gap in `sequence_number`s.
    #[inline]
    fn sequence(&mut self, n: Option<u64>) {
        let Some(n) = n else { return };
        if let Some(previous) = self.last_sequence {
            if previous.checked_add(1) != Some(n) {
                self.tally.warnings.push(format!(
                    "sequence gap: expected {}, got {n}",
                    previous.wrapping_add(1)
                ));
            }
        }
        self.last_sequence = Some(n);
    }

    /// Applies one event; false when the event is not used.
    fn apply(&mut self, ev: &StreamEvent<'_>) -> bool {
        let kind = ev.kind();
        if let (Some(key), Some(delta)) = (&self.run.key, &ev.delta) {
            let indices = [ev.output_index, ev.content_index, ev.summary_index];
            if key.matches(kind, ev.item_id.as_ref().map(|s| &*s.0), indices) {
                self.append_to_run(&delta.0);
                return true;
            }
        }
        self.flush_run();
        if let Some((spec, is_done)) = text_spec(kind) {
            let (used, at) = apply_text(
                &mut self.items,
                &mut self.tally.warnings,
                &mut self.cap,
                ev,
                spec,
                is_done,
            );
            if let Some(at) = at {
                self.run.base = at.len(&mut self.items);
                self.run.key = Some(RunKey::new(ev, at));
            }
            self.implied |= used;
            return used;
        }
        let used = match kind {
            "response.created" | "response.queued" | "response.in_progress" => {
                return self.lifecycle(ev, false)
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                return self.lifecycle(ev, true)
            }
            "response.output_item.added" | "response.output_item.done" => {
                let Some(item) = ev.object("item") else {
                    return false;
                };
                if kind.ends_with("added") {
                    self.items
                        .added(item, ev.output_index, kind, &mut self.tally.warnings);
                } else {
                    self.items
                        .done(item, ev.output_index, kind, &mut self.tally.warnings);
                }
                true
            }
            "response.content_part.added" | "response.content_part.done" => apply_part(
                &mut self.items,
                &mut self.tally.warnings,
                ev,
                "content",
                ItemKind::Any,
                kind.ends_with("done"),
            ),
            "response.reasoning_part.added" | "response.reasoning_part.done" => apply_part(
                &mut self.items,
                &mut self.tally.warnings,
                ev,
                "content",
                ItemKind::Reasoning,
                kind.ends_with("done"),
            ),
            "response.reasoning_summary_part.added" | "response.reasoning_summary_part.done" => {
                apply_part(
                    &mut self.items,
                    &mut self.tally.warnings,
                    ev,
                    "summary",
                    ItemKind::Reasoning,
                    kind.ends_with("done"),
                )
            }
            "response.output_text.annotation.added" => self.annotation(ev),
            "error" => {
                self.tally.warnings.push(event_error_warning(ev));
                false
            }
            _ => false,
        };
        self.implied |= used;
        used
    }

    fn lifecycle(&mut self, ev: &StreamEvent<'_>, is_final: bool) -> bool {
        let Some(mut response) = ev.object("response") else {
            return false;
        };
        let output = match response.get_mut("output") {
            Some(output) => std::mem::take(output),
            None => {
                response.insert("output".to_owned(), Value::Null);
                Value::Null
            }
        };
        if let Value::Array(output) = output {
            if !output.is_empty() {
                if is_final {
                    self.items
                        .replace_with(output, ev.kind(), &mut self.tally.warnings);
                } else if self.items.is_empty() {
                    for (k, item) in output.into_iter().enumerate() {
                        if let Value::Object(item) = item {
                            self.items.added(
                                item,
                                Some(k as u64),
                                ev.kind(),
                                &mut self.tally.warnings,
                            );
                        }
                    }
                }
            }
        }
        self.base = Some(response);
        true
    }

    fn annotation(&mut self, ev: &StreamEvent<'_>) -> bool {
        let Some(annotation) = ev.value("annotation") else {
            return false;
        };
        let p = self.items.resolve(ev.item_ref(), ItemKind::Message);
        let item = self.items.get_mut(p);
        let new_part = || super::fresh_part("output_text", "text");
        let Some((_, part)) = part_mut(
            item,
            "content",
            ev.content_index,
            &["output_text"],
            Some("text"),
            new_part,
        ) else {
            self.tally
                .warnings
                .push(super::index_warning(ev.kind(), ev.content_index));
            return true;
        };
        if !matches!(part.get("annotations"), Some(Value::Array(_))) {
            part.insert("annotations".to_owned(), Value::Array(Vec::new()));
        }
        let Some(Value::Array(annotations)) = part.get_mut("annotations") else {
            unreachable!("just set")
        };
        match ev.annotation_index.and_then(|i| usize::try_from(i).ok()) {
            Some(i) if i < annotations.len() => annotations[i] = annotation,
            _ => annotations.push(annotation),
        }
        true
    }

    /// The `Response` object built so far as JSON bytes (`None` before any event that
    /// carries or implies a response).
    pub fn snapshot_json(&mut self) -> Option<Vec<u8>> {
        self.snapshot_with(|base, items, out| {
            json::write_entries(out, base, |out, key, value| {
                if key == "output" {
                    json::write_objects(out, items);
                } else {
                    json::write_value(out, value);
                }
            });
        })
    }

    /// [`snapshot_json`](Self::snapshot_json) with the texts of at least `min_len` bytes
    /// (`text`, `arguments`, `refusal`, `code`, `input` and `transcript` fields) set
    /// aside: written as `""`, and returned with their paths (see `json::Splice`).
    pub fn snapshot_spliced(&mut self, min_len: usize) -> Option<json::Spliced<'_>> {
        self.flush_run();
        let default_base = self.default_base();
        let base = self.base.as_ref().or(default_base.as_ref())?;
        let items = self.items.items();
        let mut splice = json::Splice::new(min_len, SPLICED_KEYS);
        let mut out = Vec::with_capacity(256);
        json::write_entries(&mut out, base, |out, key, value| {
            if key == "output" {
                splice.under(json::Step::Key("output"), |s| s.objects(out, items));
            } else {
                // Only the output holds long texts (the base's output is a placeholder).
                json::write_value(out, value);
            }
        });
        Some((out, splice.texts))
    }

    /// The base object a snapshot writes around the items (None: no snapshot yet).
    fn snapshot_with(
        &mut self,
        write: impl FnOnce(&Map<String, Value>, &[Map<String, Value>], &mut Vec<u8>),
    ) -> Option<Vec<u8>> {
        self.flush_run();
        let default_base = self.default_base();
        let base = self.base.as_ref().or(default_base.as_ref())?;
        let mut out = Vec::with_capacity(256);
        write(base, self.items.items(), &mut out);
        Some(out)
    }

    /// The base of a snapshot before any lifecycle event, once an item, part or text event was
    /// used; None otherwise.
    fn default_base(&self) -> Option<Map<String, Value>> {
        (self.base.is_none() && self.implied).then(|| {
            Map::from_iter([
                ("id".to_owned(), Value::String(String::new())),
                ("object".to_owned(), Value::String("response".to_owned())),
                ("status".to_owned(), Value::String("in_progress".to_owned())),
                ("output".to_owned(), Value::Null),
            ])
        })
    }

    /// All `output_text` parts of `message` items, concatenated in output order.
    pub fn output_text(&mut self) -> String {
        self.flush_run();
        let mut text = String::new();
        for item in self.items.items() {
            if item.get("type").and_then(Value::as_str) != Some("message") {
                continue;
            }
            let Some(Value::Array(parts)) = item.get("content") else {
                continue;
            };
            for part in parts {
                if part.get("type").and_then(Value::as_str) == Some("output_text") {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                }
            }
        }
        text
    }

    tally_getters! {
        /// Mismatches between deltas and server values, sequence gaps, error events, ... in order.
        warnings;
        /// Events of types it does not use (kept out of the result).
        unknown_events;
        /// Events added (every accepted payload but `[DONE]`).
        events;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `data` of each SSE event in a recording (blocks split on blank lines).
    fn payloads(text: &str) -> Vec<String> {
        text.replace("\r\n", "\n")
            .split("\n\n")
            .filter_map(|block| {
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(|value| value.strip_prefix(' ').unwrap_or(value))
                    .collect();
                (!data.is_empty()).then(|| data.join("\n"))
            })
            .collect()
    }

    /// What the binding layer reads off a typed text event, taken here from its JSON.
    fn text_event<'a>(ev: &'a StreamEvent<'a>) -> Option<TextEvent<'a>> {
        let kind = ev.kind();
        let field = text_field(kind)?;
        let text = match field {
            "delta" => ev.delta.as_ref(),
            "text" => ev.text.as_ref(),
            "refusal" => ev.refusal.as_ref(),
            "arguments" => ev.arguments.as_ref(),
            "input" => ev.input.as_ref(),
            "transcript" => ev.transcript.as_ref(),
            _ => None,
        }?;
        Some(TextEvent {
            kind,
            field,
            text: &text.0,
            item_id: ev.item_id.as_ref().map(|s| &*s.0),
            output_index: ev.output_index,
            content_index: ev.content_index,
            summary_index: ev.summary_index,
            sequence_number: ev.sequence_number,
        })
    }

    /// Text events added field by field, and other events as values (as `add()` of a typed
    /// event does), leave the very state `add_json` leaves, on every Responses recording and
    /// with a text cap that bites.
    #[test]
    fn typed_paths_equal_add_json_on_the_corpus() {
        let dir = crate::accumulate::corpus_dir("responses");
        let mut by_field = 0;
        let mut by_value = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for cap in [None, Some(40)] {
                let mut reference = ResponseAccumulator::with_text_cap(cap);
                let mut fieldwise = ResponseAccumulator::with_text_cap(cap);
                for payload in payloads(&text) {
                    let expected = reference
                        .add_json(payload.as_bytes())
                        .map_err(|e| e.to_string());
                    let mut ev = StreamEvent::default();
                    let read = serde_json::from_str::<StreamEvent<'_>>(&payload)
                        .ok()
                        .map(|parsed| ev = parsed)
                        .is_some();
                    let as_value = || match serde_json::from_str::<Value>(&payload) {
                        Ok(Value::Object(map)) => StreamEvent::from_value(map),
                        _ => None,
                    };
                    let got = match text_event(&ev).filter(|_| read) {
                        Some(t) => {
                            by_field += 1;
                            fieldwise.add_text_event(&t).map_err(|e| e.to_string())
                        }
                        None => match as_value() {
                            Some(built) => {
                                by_value += 1;
                                fieldwise.add_event(&built).map_err(|e| e.to_string())
                            }
                            None => fieldwise
                                .add_json(payload.as_bytes())
                                .map_err(|e| e.to_string()),
                        },
                    };
                    assert_eq!(got, expected, "{path:?}: {payload}");
                }
                assert_eq!(
                    fieldwise.snapshot_json(),
                    reference.snapshot_json(),
                    "{path:?}"
                );
                assert_eq!(fieldwise.warnings(), reference.warnings(), "{path:?}");
                assert_eq!(fieldwise.tally.events, reference.tally.events);
                assert_eq!(
                    fieldwise.tally.unknown_events,
                    reference.tally.unknown_events
                );
            }
        }
        assert!(
            by_field > 1000,
            "few text events in the corpus ({by_field})"
        );
        assert!(
            by_value > 100,
            "few other events in the corpus ({by_value})"
        );
    }
}
