//! The Anthropic Messages accumulator: stream events in, a `Message` out.
//!
//! It builds what the anthropic SDK's `MessageStream.get_final_message()` builds
//! (`anthropic/lib/streaming/_beta_messages.py`, `accumulate_event`), and keeps what the SDK's
//! models drop; the differences are marked **(SDK: ...)**.
//!
//! - `message_start`: its `message` object, whole, is the top level; blocks already in its
//!   `content` come first. A later `message_start` is ignored, counted in `unknown_events()`.
//! - `content_block_start`: its `content_block` is appended to `content` (whatever its
//!   `index`, as the SDK does). A `fallback` block sets the message's `model` to its
//!   `to.model`, as the beta SDK does.
//! - `content_block_delta`, on the block at list position `index`, by `delta.type`:
//!   `text_delta` appends to a `text` block's `text`; `thinking_delta` to a `thinking` block's
//!   `thinking`; `signature_delta` replaces its `signature`; `citations_delta` appends its
//!   `citation` to a `text` block's `citations` (created when null or missing);
//!   `compaction_delta` sets a `compaction` block's `content` and `encrypted_content` (null
//!   when absent); `input_json_delta` appends `partial_json` to the input JSON of a
//!   `tool_use`, `server_tool_use` or `mcp_tool_use` block. A delta of another type, or on a
//!   block of another type, changes nothing; an unknown delta type counts in
//!   `unknown_events()`. A delta for a block that does not exist pushes
//!   `"content_block_delta: no content block at index {index}"` **(SDK: raises)**.
//! - A tool block's `input` is its input JSON parsed with jiter's partial mode (what the SDK
//!   does after every delta; here once, at `content_block_stop`, or at the snapshot for a block
//!   that has not stopped): a stream cut mid-JSON gives the partial parse. No input JSON leaves
//!   the block's own `input`. Input JSON that does not parse even partially (or holds `NaN`)
//!   leaves it too and, at `content_block_stop`, pushes
//!   `"content_block_stop: the input JSON of block {index} does not parse"` **(SDK: raises)**.
//! - `message_delta`: the message takes its delta's `stop_reason`, `stop_sequence` and
//!   `stop_details` (null when absent), and every other key of the delta, and its own
//!   `context_management` and `input_transformations`, when not null; its `usage` updates the
//!   message's `usage` key by key, each non-null value replacing ours **(SDK: only the keys
//!   its model knows)**.
//! - `ping`, unknown event types and a repeated `message_start` count in `unknown_events()`;
//!   `message_stop` and `content_block_stop` change nothing else. `error` events push
//!   `"error event: {error.message}"` and count in `unknown_events()`.
//! - An event of a used type whose read fields have the wrong types (or whose `content_block`,
//!   `message` or `delta` is not an object) counts in `unknown_events()` with the warning
//!   `"{type}: malformed event ignored"`.
//! - Events before `message_start` **(SDK: raises)** push the warning
//!   `"{type} before message_start"` once, and start a message
//!   `{"type": "message", "role": "assistant", "content": []}`; a `message_start` coming after
//!   them gives the top level and keeps the blocks.
//! - A block, delta or citation given as an unknown-type wrapper
//!   (`{"type": "__unknown__", "original_type": ..., "data": {...}}`, what a typed
//!   `UnknownVariant` encodes to) is read as its `data`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::lex::{same, Lexer};

use super::{
    append_text, error_warning, is_done_marker, json, parse_event, raw_object, AccumulateError,
    Rejected, Str, TextCap,
};

/// The fields of an event that are read.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    index: Option<u64>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    #[serde(borrow)]
    content_block: Option<&'a RawValue>,
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    context_management: Option<&'a RawValue>,
    #[serde(borrow)]
    input_transformations: Option<&'a RawValue>,
}

/// The fields of a content block delta that are read.
#[derive(Deserialize, Default)]
struct BlockDelta<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    text: Option<Str<'a>>,
    #[serde(borrow)]
    thinking: Option<Str<'a>>,
    #[serde(borrow)]
    signature: Option<Str<'a>>,
    #[serde(borrow)]
    partial_json: Option<Str<'a>>,
    #[serde(borrow)]
    citation: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    encrypted_content: Option<&'a RawValue>,
    #[serde(borrow)]
    original_type: Option<Str<'a>>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

/// The event types that change the message (a malformed one of these is warned about).
const USED: [&str; 6] = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "error",
];

/// The block types whose `input` streams as `input_json_delta`s.
const TOOL_INPUT_BLOCKS: [&str; 3] = ["tool_use", "server_tool_use", "mcp_tool_use"];

/// The tag of a typed `UnknownVariant` once encoded.
const UNKNOWN_TAG: &str = "__unknown__";

/// One content block and, for a tool block, its input JSON so far.
#[derive(Debug)]
struct Block {
    object: Map<String, Value>,
    /// Its `type` (`""` when not a string).
    kind: Box<str>,
    /// The quick delta that grows its text: `Text` for a text block, `Thinking` for a thinking
    /// block (so that a quick delta needs no string comparison), None for other blocks.
    grows: Option<QuickKind>,
    /// The text a text block's `text` (a thinking block's `thinking`) grows in, kept out of
    /// `object` (where its key keeps its place) so that a delta needs no lookup; None when
    /// the block had no such string.
    live: Option<(&'static str, String)>,
    /// `Some` for a tool block; emptied once parsed into `input` at `content_block_stop`.
    input_json: Option<String>,
    /// The `input` of a stopped tool block whose input JSON is one whole value, as JSON (what
    /// [`write_whole`] writes, the bytes the value [`parse_whole`] gives would be written as),
    /// written in place of `input` (which then holds a placeholder, for its key's place).
    input_whole: Option<Vec<u8>>,
}

/// Builds a `Message` from its stream events. See the module docs.
#[derive(Debug)]
pub struct AnthropicAccumulator {
    /// The top level from `message_start`; its `content` is written from `blocks`.
    message: Option<Map<String, Value>>,
    /// Whether `message` came from a `message_start` (not implied by an earlier event).
    started: bool,
    blocks: Vec<Block>,
    warnings: Vec<String>,
    unknown_events: u64,
    events: u64,
    cap: TextCap,
    /// Unescaped text of the quick path ([`quick_delta`]).
    scratch: Vec<u8>,
}

impl AnthropicAccumulator {
    /// An accumulator whose texts (a block's text, thinking, or tool input JSON) are capped at
    /// `limit` bytes each (`None`: no cap); see [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        AnthropicAccumulator {
            message: None,
            started: false,
            blocks: Vec::new(),
            warnings: Vec::new(),
            unknown_events: 0,
            events: 0,
            cap: TextCap::new(limit),
            scratch: Vec::new(),
        }
    }

    /// One event's JSON payload (the SSE `data`).
    pub fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        if let Some((index, kind, text, _)) =
            quick_delta(payload, Some(payload.len()), &mut scratch)
        {
            self.events += 1;
            self.apply_quick(index, kind, text);
            self.scratch = scratch;
            return self.cap.check(self.events - 1);
        }
        self.scratch = scratch;
        if is_done_marker(payload) {
            return Ok(());
        }
        let event: Event<'_> = match parse_event(payload, self.events) {
            Ok(event) => event,
            Err(Rejected::Error(e)) => return Err(e),
            Err(Rejected::Malformed(kind)) => {
                self.events += 1;
                self.malformed(&kind);
                return Ok(());
            }
        };
        self.events += 1;
        let kind = event.kind.as_ref().map_or("", |k| &k.0);
        match kind {
            "message_start" => self.message_start(&event),
            "content_block_start" => self.block_start(&event),
            "content_block_delta" => self.block_delta(&event),
            "content_block_stop" => self.block_stop(&event),
            "message_delta" => self.message_delta(&event),
            "message_stop" => {}
            "error" => {
                let message = raw_object(event.error).and_then(|mut e| e.remove("message"));
                self.warnings.push(error_warning(message.as_ref()));
                self.unknown_events += 1;
            }
            _ => self.unknown_events += 1,
        }
        self.cap.check(self.events - 1)
    }

    /// Raw SSE bytes at an event boundary (no CR among them): when they start with a whole
    /// `content_block_delta` event that [`quick_delta`] reads (`event: content_block_delta`,
    /// one `data: ` line within `max_line`, a blank line), it is added here, without the
    /// framer, and the bytes it takes, its payload's range and the result are returned; None
    /// otherwise (nothing added). The same result as framing it and adding its payload.
    pub fn add_framed(
        &mut self,
        bytes: &[u8],
        max_line: usize,
    ) -> Option<(usize, std::ops::Range<usize>, Result<(), AccumulateError>)> {
        let data = starting_with(bytes, FRAMED_PREFIX)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        // The payload read to its line's end (found as it is read, not searched for first).
        let quick = quick_delta(data, None, &mut scratch);
        let Some((index, kind, text, len)) = quick.filter(|&(_, _, _, len)| {
            data.get(len + 1) == Some(&b'\n')
                && len + 6 <= max_line
                && FRAMED_PREFIX.len() - 7 <= max_line
        }) else {
            self.scratch = scratch;
            return None;
        };
        self.events += 1;
        self.apply_quick(index, kind, text);
        self.scratch = scratch;
        let start = FRAMED_PREFIX.len();
        Some((
            start + len + 2,
            start..start + len,
            self.cap.check(self.events - 1),
        ))
    }

    /// Whether [`add_framed`](Self::add_framed) may take an event: always (it reads the
    /// deltas of any block).
    pub fn takes_framed(&self) -> bool {
        true
    }

    /// Whether `bytes` (the end of a chunk, at an event boundary) starts an event that
    /// [`add_framed`](Self::add_framed) could take, which the framer holds back for the next
    /// chunk: a prefix of `event: content_block_delta\ndata: `, or those lines and a data line
    /// so far with no CR or LF (but one ending `bytes`), no line over `max_line`.
    pub fn framed_prefix(&self, bytes: &[u8], max_line: usize) -> bool {
        if FRAMED_PREFIX.len() - 7 > max_line || 6 > max_line {
            return false;
        }
        let Some(data) = bytes.strip_prefix(FRAMED_PREFIX) else {
            return FRAMED_PREFIX.starts_with(bytes);
        };
        let line = data.len() + 6;
        match memchr::memchr2(b'\n', b'\r', data) {
            None => line <= max_line,
            Some(i) => i + 1 == data.len() && data[i] == b'\n' && line - 1 <= max_line,
        }
    }

    fn malformed(&mut self, kind: &str) {
        self.unknown_events += 1;
        if USED.contains(&kind) {
            self.warnings
                .push(format!("{kind}: malformed event ignored"));
        }
    }

    /// The message, implied (with a warning) when an event comes before `message_start`.
    fn message_for(&mut self, kind: &str) -> &mut Map<String, Value> {
        if self.message.is_none() {
            self.warnings.push(format!("{kind} before message_start"));
            let mut implied = Map::new();
            implied.insert("type".to_owned(), Value::from("message"));
            implied.insert("role".to_owned(), Value::from("assistant"));
            implied.insert("content".to_owned(), Value::Array(Vec::new()));
            self.message = Some(implied);
        }
        self.message.get_or_insert_with(Map::new)
    }

    fn message_start(&mut self, event: &Event<'_>) {
        if self.started {
            self.unknown_events += 1;
            return;
        }
        let Some(mut message) = raw_object(event.message) else {
            return self.malformed("message_start");
        };
        let earlier = std::mem::take(&mut self.blocks);
        if let Some(Value::Array(content)) = message.get_mut("content") {
            for block in std::mem::take(content) {
                if let Value::Object(object) = unwrap_unknown(block) {
                    self.blocks.push(Block::new(object));
                }
            }
        } else {
            message.insert("content".to_owned(), Value::Array(Vec::new()));
        }
        self.blocks.extend(earlier);
        self.message = Some(message);
        self.started = true;
    }

    fn block_start(&mut self, event: &Event<'_>) {
        let block = event
            .content_block
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .map(unwrap_unknown);
        let Some(Value::Object(block)) = block else {
            return self.malformed("content_block_start");
        };
        let fallback_model = (block.get("type").and_then(Value::as_str) == Some("fallback"))
            .then(|| {
                block
                    .get("to")?
                    .get("model")
                    .filter(|m| m.is_string())
                    .cloned()
            })
            .flatten();
        let message = self.message_for("content_block_start");
        if let Some(model) = fallback_model {
            message.insert("model".to_owned(), model);
        }
        self.blocks.push(Block::new(block));
    }

    fn block_delta(&mut self, event: &Event<'_>) {
        // (An object only: serde's derived struct would also take an array.)
        let Some(raw) = event.delta.filter(|raw| raw.get().starts_with('{')) else {
            return self.malformed("content_block_delta");
        };
        let Ok(mut delta) = serde_json::from_str::<BlockDelta<'_>>(raw.get()) else {
            return self.malformed("content_block_delta");
        };
        if delta.kind.as_ref().is_some_and(|k| k.0 == UNKNOWN_TAG) {
            let inner = delta.data.map(RawValue::get).filter(|d| d.starts_with('{'));
            let Some(Ok(inner)) = inner.map(serde_json::from_str::<BlockDelta<'_>>) else {
                return self.malformed("content_block_delta");
            };
            delta = inner;
            if delta.original_type.is_some() {
                self.unknown_events += 1;
                return;
            }
        }
        self.apply_delta(event.index.unwrap_or(0), delta);
    }

    /// A text, thinking, input JSON or signature delta read by [`quick_delta`]: what
    /// [`apply_delta`](Self::apply_delta) does with it, without building a [`BlockDelta`] or
    /// matching its type's name.
    #[inline]
    fn apply_quick(&mut self, index: u64, kind: QuickKind, text: &str) {
        let block = match (&self.message, self.blocks.get_mut(index as usize)) {
            (Some(_), Some(block)) => block,
            // A warning to give: the general way.
            _ => return self.apply_delta(index, kind.delta(text)),
        };
        let cap = &mut self.cap;
        match kind {
            QuickKind::Text | QuickKind::Thinking if block.grows == Some(kind) => {
                match &mut block.live {
                    // Its live text is under the key of its type (see `Block::new`).
                    Some((_, live)) => {
                        if cap.admits(live.len(), text.len()) {
                            live.push_str(text);
                        }
                    }
                    None => block.append(kind.key(), text, cap),
                }
            }
            QuickKind::InputJson => {
                if let Some(json) = &mut block.input_json {
                    if cap.admits(json.len(), text.len()) {
                        json.push_str(text);
                    }
                }
            }
            QuickKind::Signature if block.grows == Some(QuickKind::Thinking) => {
                block
                    .object
                    .insert("signature".to_owned(), Value::String(text.to_owned()));
            }
            _ => {}
        }
    }

    /// A delta of a known or unknown type (not a wrapper) on the block at `index`.
    fn apply_delta(&mut self, index: u64, delta: BlockDelta<'_>) {
        self.message_for("content_block_delta");
        let Some(block) = self.blocks.get_mut(index as usize) else {
            self.warnings.push(format!(
                "content_block_delta: no content block at index {index}"
            ));
            return;
        };
        let block_type = &*block.kind;
        let cap = &mut self.cap;
        match delta.kind.as_ref().map_or("", |k| &k.0) {
            "text_delta" => {
                if let (true, Some(text)) = (block_type == "text", delta.text) {
                    block.append("text", &text.0, cap);
                }
            }
            "thinking_delta" => {
                if let (true, Some(text)) = (block_type == "thinking", delta.thinking) {
                    block.append("thinking", &text.0, cap);
                }
            }
            "signature_delta" => {
                if let (true, Some(signature)) = (block_type == "thinking", delta.signature) {
                    block.object.insert(
                        "signature".to_owned(),
                        Value::String(signature.0.into_owned()),
                    );
                }
            }
            "input_json_delta" => {
                if let (Some(json), Some(piece)) = (&mut block.input_json, delta.partial_json) {
                    if cap.admits(json.len(), piece.0.len()) {
                        json.push_str(&piece.0);
                    }
                }
            }
            "citations_delta" => {
                let citation = delta
                    .citation
                    .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
                    .map(unwrap_unknown);
                if let (true, Some(citation)) = (block_type == "text", citation) {
                    match block.object.get_mut("citations") {
                        Some(Value::Array(list)) => list.push(citation),
                        _ => {
                            block
                                .object
                                .insert("citations".to_owned(), Value::Array(vec![citation]));
                        }
                    }
                }
            }
            "compaction_delta" => {
                if block_type == "compaction" {
                    for (key, raw) in [
                        ("content", delta.content),
                        ("encrypted_content", delta.encrypted_content),
                    ] {
                        let value = raw
                            .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                            .unwrap_or(Value::Null);
                        block.object.insert(key.to_owned(), value);
                    }
                }
            }
            _ => self.unknown_events += 1,
        }
    }

    fn block_stop(&mut self, event: &Event<'_>) {
        let index = event.index.unwrap_or(0);
        let Some(block) = self.blocks.get_mut(index as usize) else {
            return;
        };
        let Some(json) = block.input_json.as_mut().filter(|j| !j.is_empty()) else {
            return;
        };
        // A stopped block's input JSON is almost always whole: written in one pass as its value
        // would be written (the value built only when it is not, or has a repeated key).
        if let Some(written) = write_whole(json) {
            match block.object.get_mut("input") {
                Some(input) => *input = Value::Null,
                None => {
                    block.object.insert("input".to_owned(), Value::Null);
                }
            }
            block.input_whole = Some(written);
            json.clear();
            return;
        }
        match parse_whole(json).or_else(|| parse_partial(json)) {
            Some(input) => {
                block.object.insert("input".to_owned(), input);
                block.input_whole = None;
            }
            None => self.warnings.push(format!(
                "content_block_stop: the input JSON of block {index} does not parse"
            )),
        }
        json.clear();
    }

    fn message_delta(&mut self, event: &Event<'_>) {
        let delta = match event.delta {
            None => Some(Map::new()),
            Some(raw) => raw_object(Some(raw)),
        };
        let usage = match event.usage {
            None => Some(Map::new()),
            Some(raw) if raw.get() == "null" => Some(Map::new()),
            Some(raw) => raw_object(Some(raw)),
        };
        let (Some(delta), Some(usage)) = (delta, usage) else {
            return self.malformed("message_delta");
        };
        let message = self.message_for("message_delta");
        for key in ["stop_reason", "stop_sequence", "stop_details"] {
            message.insert(
                key.to_owned(),
                delta.get(key).cloned().unwrap_or(Value::Null),
            );
        }
        for (key, value) in delta {
            if !value.is_null() {
                message.insert(key, value);
            }
        }
        for (key, raw) in [
            ("context_management", event.context_management),
            ("input_transformations", event.input_transformations),
        ] {
            if let Some(value) = raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok()) {
                if !value.is_null() {
                    message.insert(key.to_owned(), value);
                }
            }
        }
        if usage.is_empty() {
            return;
        }
        let ours = match message.get_mut("usage") {
            Some(Value::Object(ours)) => ours,
            _ => {
                message.insert("usage".to_owned(), Value::Object(Map::new()));
                match message.get_mut("usage") {
                    Some(Value::Object(ours)) => ours,
                    _ => return,
                }
            }
        };
        for (key, value) in usage {
            if !value.is_null() {
                ours.insert(key, value);
            }
        }
    }

    /// The `Message` built so far as JSON bytes (`None` before any event that implies one).
    pub fn snapshot_json(&self) -> Option<Vec<u8>> {
        let message = self.message.as_ref()?;
        let mut out = Vec::with_capacity(256);
        json::write_entries(&mut out, message, |out, key, value| {
            if key == "content" {
                json::write_list(out, &self.blocks, |out, _, block| {
                    block.write(out, |out, _, text| json::write_str(out, text));
                });
            } else {
                json::write_value(out, value);
            }
        });
        Some(out)
    }

    /// [`snapshot_json`](Self::snapshot_json) with the long texts set aside (see
    /// [`json::Splice`]): a block's text or thinking of at least `min_len` bytes is written as
    /// `""` and given with its path (`content`, the block's index, `text` or `thinking`).
    pub fn snapshot_spliced(&self, min_len: usize) -> Option<json::Spliced<'_>> {
        let message = self.message.as_ref()?;
        let mut texts = Vec::new();
        let mut out = Vec::with_capacity(256);
        json::write_entries(&mut out, message, |out, key, value| {
            if key == "content" {
                json::write_list(out, &self.blocks, |out, i, block| {
                    block.write(out, |out, key, text| {
                        if text.len() >= min_len {
                            out.extend_from_slice(b"\"\"");
                            let path = vec![
                                json::Step::Key("content"),
                                json::Step::Index(i),
                                json::Step::Key(key),
                            ];
                            texts.push((path, text));
                        } else {
                            json::write_str(out, text);
                        }
                    });
                });
            } else {
                json::write_value(out, value);
            }
        });
        Some((out, texts))
    }

    /// Error events, malformed events, deltas without their block, input JSON that does not
    /// parse, events before `message_start`, in order.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Events kept out of the result: `ping`, `error`, unknown types and deltas, malformed
    /// events, a repeated `message_start`.
    pub fn unknown_events(&self) -> u64 {
        self.unknown_events
    }

    /// Events added.
    pub fn events(&self) -> u64 {
        self.events
    }
}

impl Block {
    fn new(mut object: Map<String, Value>) -> Block {
        let kind: Box<str> = object
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into();
        let grows = match &*kind {
            "text" => Some(QuickKind::Text),
            "thinking" => Some(QuickKind::Thinking),
            _ => None,
        };
        let live = grows
            .map(QuickKind::key)
            .and_then(|key| match object.get_mut(key) {
                Some(Value::String(text)) => Some((key, std::mem::take(text))),
                _ => None,
            });
        Block {
            object,
            input_json: TOOL_INPUT_BLOCKS.contains(&&*kind).then(String::new),
            input_whole: None,
            kind,
            grows,
            live,
        }
    }

    /// Appends `delta` to the string at `key` (see [`append_text`]).
    #[inline]
    fn append(&mut self, key: &'static str, delta: &str, cap: &mut TextCap) {
        match &mut self.live {
            Some((live_key, text)) if *live_key == key => {
                if cap.admits(text.len(), delta.len()) {
                    text.push_str(delta);
                }
            }
            _ => append_text(&mut self.object, key, delta, cap),
        }
    }

    /// The block's entries, the live text in its place (written by `text`), and `input` (when
    /// given) or the whole input JSON kept at `content_block_stop` in place of its `input`.
    fn write_with<'b>(
        &'b self,
        out: &mut Vec<u8>,
        input: Option<&Value>,
        mut text: impl FnMut(&mut Vec<u8>, &'static str, &'b str),
    ) {
        let live = self.live.as_ref();
        let whole = self.input_whole.as_deref();
        json::write_entries(out, &self.object, |out, key, value| match (live, input) {
            (Some((live_key, live_text)), _) if *live_key == key => text(out, live_key, live_text),
            (_, Some(input)) if key == "input" => json::write_value(out, input),
            _ => match whole {
                Some(whole) if key == "input" => out.extend_from_slice(whole),
                _ => json::write_value(out, value),
            },
        });
    }

    /// The block as JSON, with its input parsed from the input JSON of a block not stopped;
    /// its live text (a tool block has none) written by `text`.
    fn write<'b>(
        &'b self,
        out: &mut Vec<u8>,
        text: impl FnMut(&mut Vec<u8>, &'static str, &'b str),
    ) {
        let input = self
            .input_json
            .as_deref()
            .filter(|j| !j.is_empty())
            .and_then(parse_partial);
        let Some(input) = input else {
            return self.write_with(out, None, text);
        };
        if !self.object.contains_key("input") {
            let mut object = self.object.clone();
            object.insert("input".to_owned(), input);
            return json::write_object(out, object.iter());
        }
        self.write_with(out, Some(&input), text);
    }
}

/// The SSE lines before a delta's payload, as Anthropic frames it.
pub(crate) const FRAMED_PREFIX: &[u8] = b"event: content_block_delta\ndata: ";

/// What a text, thinking, input JSON or signature delta starts with, after its block index.
const QUICK_DELTAS: [(&[u8], QuickKind); 4] = [
    (br#","delta":{"type":"text_delta","text":"#, QuickKind::Text),
    (
        br#","delta":{"type":"thinking_delta","thinking":"#,
        QuickKind::Thinking,
    ),
    (
        br#","delta":{"type":"input_json_delta","partial_json":"#,
        QuickKind::InputJson,
    ),
    (
        br#","delta":{"type":"signature_delta","signature":"#,
        QuickKind::Signature,
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuickKind {
    Text,
    Thinking,
    InputJson,
    Signature,
}

impl QuickKind {
    /// The key of the string this delta grows in its block.
    fn key(self) -> &'static str {
        match self {
            QuickKind::Text => "text",
            QuickKind::Thinking => "thinking",
            QuickKind::InputJson => "partial_json",
            QuickKind::Signature => "signature",
        }
    }

    /// The delta of this type with `text`, as serde reads it.
    fn delta(self, text: &str) -> BlockDelta<'_> {
        let text = Some(Str(Cow::Borrowed(text)));
        let (name, mut delta) = match self {
            QuickKind::Text => (
                "text_delta",
                BlockDelta {
                    text,
                    ..BlockDelta::default()
                },
            ),
            QuickKind::Thinking => (
                "thinking_delta",
                BlockDelta {
                    thinking: text,
                    ..BlockDelta::default()
                },
            ),
            QuickKind::InputJson => (
                "input_json_delta",
                BlockDelta {
                    partial_json: text,
                    ..BlockDelta::default()
                },
            ),
            QuickKind::Signature => (
                "signature_delta",
                BlockDelta {
                    signature: text,
                    ..BlockDelta::default()
                },
            ),
        };
        delta.kind = Some(Str(Cow::Borrowed(name)));
        delta
    }
}

/// The quick path for the bulk of a stream: a `content_block_delta` payload written exactly
/// as Anthropic writes it (`{"type":"content_block_delta","index":N,"delta":{"type":
/// "text_delta","text":"..."}}`, or a thinking, input JSON or signature delta, whitespace allowed only
/// after the delta's string) read without serde: its index, type and string, or None for
/// anything else (then read the general way). It takes only what serde would read the same
/// way: an index of digits within `u64`, a string the lexer validates (escapes, no control
/// characters, no lone surrogate, UTF-8), and nothing after the closing braces but whitespace.
///
/// The payload is `buf[..len]`, or with `len` None, the bytes of `buf` up to its first LF (the
/// rest of a chunk from a `data: ` line on; the payload's length is returned with it). Bytes
/// after the payload never belong to it: a string stops at a control character, and a payload
/// line ends with one.
fn quick_delta<'s>(
    buf: &'s [u8],
    len: Option<usize>,
    scratch: &'s mut Vec<u8>,
) -> Option<(u64, QuickKind, &'s str, usize)> {
    const HEAD: &[u8] = br#"{"type":"content_block_delta","index":"#;
    let payload = match len {
        Some(len) => buf.get(..len)?,
        None => buf,
    };
    let rest = starting_with(payload, HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    let mut index: u64 = 0;
    for &d in &rest[..digits] {
        index = index.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    let rest = &rest[digits..];
    let (head, kind) = QUICK_DELTAS
        .iter()
        .find(|(head, _)| starting_with(rest, head).is_some())?;
    // The string's quote right after the head: `Lexer::string` would skip JSON whitespace to
    // it, and a CR or LF there ends the data line (in raw SSE bytes, `len` None) before it.
    let quote = HEAD.len() + digits + head.len();
    if buf.get(quote) != Some(&b'"') {
        return None;
    }
    let mut lx = Lexer::new(buf);
    lx.seek(quote);
    let text = lx.string(scratch)?;
    let at = lx.position();
    let len = match len {
        Some(len) => (at <= len && closes_twice(&payload[at..])).then_some(len)?,
        None => at + braces_to_line_end(&buf[at..])?,
    };
    let text = if text.ascii {
        // SAFETY: ASCII is UTF-8.
        unsafe { std::str::from_utf8_unchecked(text.bytes) }
    } else {
        std::str::from_utf8(text.bytes).ok()?
    };
    Some((index, *kind, text, len))
}

/// Where the line ends (its LF) in `rest` (the bytes after a delta's string) when they are
/// two closing braces, with spaces and tabs around them only, up to it; None otherwise
/// (another byte, a CR, no LF).
fn braces_to_line_end(rest: &[u8]) -> Option<usize> {
    let mut braces = 0;
    for (i, &b) in rest.iter().enumerate() {
        match b {
            b'}' if braces < 2 => braces += 1,
            b' ' | b'\t' => {}
            b'\n' if braces == 2 => return Some(i),
            _ => return None,
        }
    }
    None
}

/// Whether `rest` is two closing braces, with spaces and tabs around them only (not a CR,
/// which the framer takes as a line end; a payload with one is read the general way).
fn closes_twice(rest: &[u8]) -> bool {
    let mut braces = 0;
    for &b in rest {
        match b {
            b'}' if braces < 2 => braces += 1,
            b' ' | b'\t' => {}
            _ => return false,
        }
    }
    braces == 2
}

/// What follows `prefix` in `bytes` if they start with it (compared without a `memcmp` call).
#[inline(always)]
fn starting_with<'b>(bytes: &'b [u8], prefix: &[u8]) -> Option<&'b [u8]> {
    let head = bytes.get(..prefix.len())?;
    same(head, prefix).then(|| &bytes[prefix.len()..])
}

/// A typed `UnknownVariant`'s encoding (`{"type": "__unknown__", "data": {...}}`) as its data.
fn unwrap_unknown(value: Value) -> Value {
    match value {
        Value::Object(mut object)
            if object.get("type").and_then(Value::as_str) == Some(UNKNOWN_TAG)
                && object.get("data").is_some_and(Value::is_object) =>
        {
            object.remove("data").unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// Input JSON parsed with jiter's partial mode (incomplete strings dropped, as the SDK's
/// `partial_mode=True`), or None when it does not parse.
fn parse_partial(json: &str) -> Option<Value> {
    jiter::JsonValue::parse_with_config(json.as_bytes(), false, jiter::PartialMode::On)
        .ok()
        .and_then(|v| to_value(&v))
}

/// Input JSON that is one whole JSON value (whitespace around it only), parsed in one pass
/// with jiter's own number and string decoders, straight into serde_json values: the value
/// [`parse_partial`] gives, without building jiter's tree first (on a long tool input that
/// tree cost as much as the conversion). None for anything else (cut short, trailing bytes,
/// a non-finite float, nesting past jiter's limit): then [`parse_partial`] decides.
fn parse_whole(json: &str) -> Option<Value> {
    let mut jiter = jiter::Jiter::new(json.as_bytes());
    let peek = jiter.peek().ok()?;
    let value = whole_value(&mut jiter, peek, JITER_DEPTH)?;
    jiter.finish().ok()?;
    Some(value)
}

/// Input JSON that [`parse_whole`] reads, written as [`json::write_value`] writes the value it
/// gives (the very bytes), in one pass with the same jiter calls and without building the
/// value; None when `parse_whole` would give None, or for an object with a repeated key (whose
/// value keeps the key's first place and its last value: then `parse_whole` decides) or more
/// than [`WRITTEN_KEYS`] keys.
fn write_whole(json: &str) -> Option<Vec<u8>> {
    let mut jiter = jiter::Jiter::new(json.as_bytes());
    let peek = jiter.peek().ok()?;
    let mut out = Vec::with_capacity(json.len());
    let mut keys = Vec::new();
    write_whole_value(&mut jiter, peek, JITER_DEPTH, &mut out, &mut keys)?;
    jiter.finish().ok()?;
    Some(out)
}

/// The keys of an object [`write_whole`] compares a new key with (beyond: `parse_whole`).
const WRITTEN_KEYS: usize = 64;

/// [`whole_value`]'s walk, writing what it reads; `keys` holds where the keys of the objects
/// open so far are in `out` (as written: equal keys are written alike).
fn write_whole_value(
    jiter: &mut jiter::Jiter<'_>,
    peek: jiter::Peek,
    depth: u8,
    out: &mut Vec<u8>,
    keys: &mut Vec<std::ops::Range<usize>>,
) -> Option<()> {
    use jiter::{NumberAny, NumberInt, Peek};
    match peek {
        Peek::Null => {
            jiter.known_null().ok()?;
            out.extend_from_slice(b"null");
        }
        Peek::True | Peek::False => {
            let b = jiter.known_bool(peek).ok()?;
            out.extend_from_slice(if b { b"true" } else { b"false" });
        }
        Peek::String => json::write_str(out, jiter.known_str().ok()?),
        Peek::Array => {
            let depth = depth.checked_sub(1)?;
            out.push(b'[');
            let mut next = jiter.known_array().ok()?;
            let mut first = true;
            while let Some(peek) = next {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_whole_value(jiter, peek, depth, out, keys)?;
                next = jiter.array_step().ok()?;
            }
            out.push(b']');
        }
        Peek::Object => {
            let depth = depth.checked_sub(1)?;
            out.push(b'{');
            let open = keys.len();
            let mut key = jiter.known_object().ok()?.map(|k| written_key(out, k));
            while let Some(at) = key {
                if keys.len() - open == WRITTEN_KEYS
                    || keys[open..]
                        .iter()
                        .any(|k| out[k.clone()] == out[at.clone()])
                {
                    return None;
                }
                keys.push(at);
                out.push(b':');
                let peek = jiter.peek().ok()?;
                write_whole_value(jiter, peek, depth, out, keys)?;
                key = jiter.next_key().ok()?.map(|k| {
                    out.push(b',');
                    written_key(out, k)
                });
            }
            keys.truncate(open);
            out.push(b'}');
        }
        _ => {
            let number = match jiter.known_number(peek).ok()? {
                NumberAny::Int(NumberInt::Int(i)) => serde_json::Number::from(i),
                NumberAny::Float(f) => serde_json::Number::from_f64(f)?,
            };
            json::write_value(out, &Value::Number(number));
        }
    }
    Some(())
}

/// Writes `key` (a JSON string) and gives where it is in `out`.
fn written_key(out: &mut Vec<u8>, key: &str) -> std::ops::Range<usize> {
    let start = out.len();
    json::write_str(out, key);
    start..out.len()
}

/// The nesting read in one pass, below jiter's own limit (its `DEFAULT_RECURSION_LIMIT`, 200):
/// deeper input goes to [`parse_partial`], which decides.
const JITER_DEPTH: u8 = 128;

fn whole_value(jiter: &mut jiter::Jiter<'_>, peek: jiter::Peek, depth: u8) -> Option<Value> {
    use jiter::{NumberAny, NumberInt, Peek};
    Some(match peek {
        Peek::Null => {
            jiter.known_null().ok()?;
            Value::Null
        }
        Peek::True | Peek::False => Value::Bool(jiter.known_bool(peek).ok()?),
        Peek::String => Value::String(jiter.known_str().ok()?.to_owned()),
        Peek::Array => {
            let depth = depth.checked_sub(1)?;
            let mut items = Vec::new();
            let mut next = jiter.known_array().ok()?;
            while let Some(peek) = next {
                items.push(whole_value(jiter, peek, depth)?);
                next = jiter.array_step().ok()?;
            }
            Value::Array(items)
        }
        Peek::Object => {
            let depth = depth.checked_sub(1)?;
            let mut map = Map::new();
            let mut key = jiter.known_object().ok()?.map(str::to_owned);
            while let Some(k) = key {
                let peek = jiter.peek().ok()?;
                // A repeated key keeps its first place and takes the last value, as
                // `to_value` inserts jiter's entries.
                map.insert(k, whole_value(jiter, peek, depth)?);
                key = jiter.next_key().ok()?.map(str::to_owned);
            }
            Value::Object(map)
        }
        _ => match jiter.known_number(peek).ok()? {
            NumberAny::Int(NumberInt::Int(i)) => Value::from(i),
            NumberAny::Float(f) => Value::Number(serde_json::Number::from_f64(f)?),
        },
    })
}

/// A jiter value as a serde_json value (None for a non-finite float).
fn to_value(value: &jiter::JsonValue<'_>) -> Option<Value> {
    use jiter::JsonValue as J;
    Some(match value {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Int(i) => Value::from(*i),
        J::Float(f) => Value::Number(serde_json::Number::from_f64(*f)?),
        J::Str(s) => Value::String(s.to_string()),
        J::Array(items) => Value::Array(items.iter().map(to_value).collect::<Option<_>>()?),
        J::Object(entries) => {
            let mut map = Map::with_capacity(entries.len());
            for (key, value) in entries.iter() {
                map.insert(key.to_string(), to_value(value)?);
            }
            Value::Object(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::corpus_lines;

    fn snapshot(acc: &AnthropicAccumulator) -> Value {
        serde_json::from_slice(&acc.snapshot_json().expect("a snapshot")).unwrap()
    }

    fn feed(lines: &[&str]) -> AnthropicAccumulator {
        let mut acc = AnthropicAccumulator::new();
        for line in lines {
            acc.add_json(line.as_bytes()).unwrap();
        }
        acc
    }

    #[test]
    fn corpus_streams_build_a_message_from_their_deltas() {
        let recordings = corpus_lines("anthropic");
        assert_eq!(recordings.len(), 14);
        for lines in recordings {
            let payloads: Vec<&str> = lines
                .iter()
                .filter(|l| l.starts_with('{'))
                .map(String::as_str)
                .collect();
            let acc = feed(&payloads);
            let message = snapshot(&acc);
            assert_eq!(message["type"], "message");
            // Every text delta's text is in its block, in order.
            let mut texts: Vec<String> = Vec::new();
            for p in &payloads {
                let v: Value = serde_json::from_str(p).unwrap();
                if v["type"] == "content_block_start" {
                    texts.push(v["content_block"]["text"].as_str().unwrap_or("").to_owned());
                }
                if v["delta"]["type"] == "text_delta" {
                    let i = v["index"].as_u64().unwrap() as usize;
                    texts[i].push_str(v["delta"]["text"].as_str().unwrap());
                }
            }
            let content = message["content"].as_array().unwrap();
            assert_eq!(content.len(), texts.len());
            for (block, text) in content.iter().zip(&texts) {
                if block["type"] == "text" {
                    assert_eq!(block["text"], text.as_str());
                }
            }
            assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
        }
    }

    #[test]
    fn the_quick_path_reads_what_serde_reads() {
        let mut scratch = Vec::new();
        let cases: &[(&str, Option<(u64, &str)>)] = &[
            (
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"a longer text, \"quoted\", past sixteen bytes"}}"#,
                Some((3, "a longer text, \"quoted\", past sixteen bytes")),
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"} x}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
                Some((0, "Hi")),
            ),
            (
                r#"{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"a\nb\u00e9"}}  "#,
                Some((12, "a\nb\u{e9}")),
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"é"} }"#,
                Some((1, "é")),
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
                Some((1, "{\"a\"")),
            ),
            (
                r#"{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":18446744073709551616,"delta":{"type":"text_delta","text":"x"}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\ud800"}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x","more":1}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"},"index":2}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1.0,"delta":{"type":"text_delta","text":"x"}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"EqQBCkYIBxgCKkDL\/+="}}"#,
                Some((1, "EqQBCkYIBxgCKkDL/+=")),
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"x","index":2}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":7}}"#,
                None,
            ),
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{}}}"#,
                None,
            ),
        ];
        // Each alone, and as the tap gives it: its line with the rest of a chunk after it
        // (which may close a string or a brace the payload left open: never read).
        let tails = [
            "",
            "\n\nevent: content_block_delta\ndata: ",
            "\n\n\"}}\n\n",
            "\n\n}\n\n",
            "\n \"abcdefghijklmnopqrstuvwxyz\"}}",
        ];
        for &(payload, want) in cases {
            // `limit`: the payload's length as the framer gives it, or None as the tap reads it
            // (to the line's end, found while reading).
            let mut check = |buf: String, limit: Option<usize>| {
                let got = quick_delta(buf.as_bytes(), limit, &mut scratch).map(
                    |(index, kind, text, len)| {
                        assert_eq!(len, payload.len());
                        let d = kind.delta(text);
                        let text = d
                            .text
                            .or(d.thinking)
                            .or(d.partial_json)
                            .or(d.signature)
                            .unwrap()
                            .0
                            .into_owned();
                        (index, text)
                    },
                );
                assert_eq!(
                    got,
                    want.map(|(i, t)| (i, t.to_owned())),
                    "{buf:?} {limit:?}"
                );
            };
            for tail in tails {
                check(format!("{payload}{tail}"), Some(payload.len()));
            }
            for tail in ["\n", "\n\n", "\n\nevent: content_block_delta\ndata: {}\n\n"] {
                check(format!("{payload}{tail}"), None);
            }
            // No line end yet, or a CR for one: not taken.
            assert!(quick_delta(payload.as_bytes(), None, &mut scratch).is_none());
            let cr = format!("{payload}\r\n");
            assert!(quick_delta(cr.as_bytes(), None, &mut scratch).is_none());
            // A line end before the string (JSON whitespace to a reader, the end of the data
            // line to the framer), or a space: not taken.
            let head = QUICK_DELTAS.iter().find_map(|(head, _)| {
                let head = std::str::from_utf8(head).expect("ASCII");
                payload.find(head).map(|at| at + head.len())
            });
            if let Some(at) = head.filter(|&at| payload[at..].starts_with('"')) {
                for gap in ["\r\n", "\r", "\n", " "] {
                    let cut = format!("{}{gap}{}\n\n", &payload[..at], &payload[at..]);
                    assert!(
                        quick_delta(cut.as_bytes(), None, &mut scratch).is_none(),
                        "{cut:?}"
                    );
                }
            }
        }
        // On the corpus, every payload it takes gives the message the general path gives.
        let mut taken = 0;
        for lines in corpus_lines("anthropic") {
            let lines: Vec<&str> = lines
                .iter()
                .filter(|l| l.starts_with('{'))
                .map(String::as_str)
                .collect();
            taken += quick_and_general_agree(&lines);
        }
        assert!(taken > 400, "{taken}");
    }

    /// Feeds `lines` with `add_json` (the quick path where it applies) and with every delta
    /// read by serde (the general path): the same message, after every event, the same
    /// warnings and counts. Returns how many the quick path took.
    fn quick_and_general_agree(lines: &[&str]) -> usize {
        let mut scratch = Vec::new();
        let mut taken = 0;
        let mut quick = AnthropicAccumulator::with_text_cap(Some(4096));
        let mut general = AnthropicAccumulator::with_text_cap(Some(4096));
        for line in lines {
            taken +=
                usize::from(quick_delta(line.as_bytes(), Some(line.len()), &mut scratch).is_some());
            let quick_result = quick.add_json(line.as_bytes());
            let event: Option<Event<'_>> = serde_json::from_str(line).ok();
            let general_result = match event {
                Some(event)
                    if event
                        .kind
                        .as_ref()
                        .is_some_and(|k| k.0 == "content_block_delta") =>
                {
                    general.events += 1;
                    general.block_delta(&event);
                    general.cap.check(general.events - 1)
                }
                _ => general.add_json(line.as_bytes()),
            };
            assert_eq!(quick_result, general_result, "{line}");
            assert_eq!(quick.snapshot_json(), general.snapshot_json(), "{line}");
        }
        assert_eq!(quick.warnings(), general.warnings());
        assert_eq!(quick.unknown_events(), general.unknown_events());
        assert_eq!(quick.events(), general.events());
        taken
    }

    #[test]
    fn a_mixed_stream_is_read_the_same_quick_and_general() {
        // Thinking with its signature, text over several blocks with citations, tool input
        // with escapes, and deltas on the wrong blocks, on none, and before message_start.
        let delta = |index: usize, kind: &str, key: &str, text: &str| {
            format!(
                r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"{kind}","{key}":{}}}}}"#,
                serde_json::to_string(text).unwrap()
            )
        };
        let start = |index: usize, block: &str| {
            format!(r#"{{"type":"content_block_start","index":{index},"content_block":{block}}}"#)
        };
        let stop = |index: usize| format!(r#"{{"type":"content_block_stop","index":{index}}}"#);
        let kinds = [
            ("text_delta", "text"),
            ("thinking_delta", "thinking"),
            ("input_json_delta", "partial_json"),
            ("signature_delta", "signature"),
        ];
        let pieces = [
            "Hel",
            "lo \"w\"\n",
            "é ☃ \u{1F600}",
            "",
            "{\"a\": [1, \"x",
            "y\"]}",
        ];
        let mut lines = vec![delta(0, "signature_delta", "signature", "early")];
        lines.push(
            r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}"#
                .to_owned(),
        );
        let blocks = [
            r#"{"type":"thinking","thinking":"","signature":""}"#,
            r#"{"type":"text","text":""}"#,
            r#"{"type":"tool_use","id":"t","name":"f","input":{}}"#,
            r#"{"type":"text","text":"pre","citations":null}"#,
            r#"{"type":"redacted_thinking","data":"x"}"#,
            r#"{"type":"thinking","thinking":"so far"}"#,
            // Text and thinking blocks without a string to grow (no live text).
            r#"{"type":"text","text":null}"#,
            r#"{"type":"thinking"}"#,
        ];
        for (index, block) in blocks.iter().enumerate() {
            lines.push(start(index, block));
            for (i, piece) in pieces.iter().enumerate() {
                for (j, (kind, key)) in kinds.iter().enumerate() {
                    // Every kind on every block, and on the block before and one not there yet.
                    lines.push(delta(index, kind, key, piece));
                    if (i + j) % 3 == 0 {
                        lines.push(delta(index + (i + j) % 2 * 7, kind, key, piece));
                    }
                }
                lines.push(format!(
                    r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"citations_delta","citation":{{"type":"char_location","cited_text":"{i}"}}}}}}"#
                ));
            }
            if index % 2 == 0 {
                lines.push(stop(index));
            }
        }
        // Past the text cap (4096 bytes): refused the same way.
        lines.push(delta(1, "text_delta", "text", &"x".repeat(5000)));
        lines.push(delta(0, "signature_delta", "signature", &"s".repeat(5000)));
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let taken = quick_and_general_agree(&lines);
        assert!(taken > 150, "{taken}");
        // And each line's one-byte mutations.
        for mutated in crate::accumulate::mutations(lines[20..40].join("\n").as_bytes()) {
            let Ok(text) = std::str::from_utf8(&mutated) else {
                continue;
            };
            let mut all: Vec<&str> = lines[..20].to_vec();
            all.extend(text.split('\n'));
            quick_and_general_agree(&all);
        }
    }

    #[test]
    fn a_spliced_snapshot_with_its_texts_put_back_is_the_snapshot() {
        let mut spliced_any = 0;
        for lines in corpus_lines("anthropic") {
            let payloads: Vec<&str> = lines
                .iter()
                .filter(|l| l.starts_with('{'))
                .map(String::as_str)
                .collect();
            // At the end, and mid-stream (a block not stopped yet).
            for n in [payloads.len(), payloads.len() / 2] {
                let acc = feed(&payloads[..n]);
                for min_len in [0, 1, 10, 1024, usize::MAX] {
                    let Some((json, texts)) = acc.snapshot_spliced(min_len) else {
                        assert!(acc.snapshot_json().is_none());
                        continue;
                    };
                    let mut value: Value = serde_json::from_slice(&json).unwrap();
                    for (path, text) in &texts {
                        assert!(text.len() >= min_len);
                        let mut node = &mut value;
                        for step in path {
                            node = match *step {
                                json::Step::Key(k) => &mut node[k],
                                json::Step::Index(i) => &mut node[i],
                            };
                        }
                        assert_eq!(*node, Value::from(""), "{path:?}");
                        *node = Value::from(*text);
                        spliced_any += 1;
                    }
                    let whole: Value =
                        serde_json::from_slice(&acc.snapshot_json().unwrap()).unwrap();
                    assert_eq!(value, whole);
                }
            }
        }
        assert!(spliced_any > 20, "{spliced_any}");
    }

    #[test]
    fn tool_input_is_the_partial_parse_of_its_json() {
        let start = r#"{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}"#;
        let block = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#;
        let d1 = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": [1, \"x"}}"#;
        let d2 = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"y\", 2"}}"#;
        let acc = feed(&[start, block, d1]);
        assert_eq!(
            snapshot(&acc)["content"][0]["input"],
            serde_json::json!({"a": [1]})
        );
        let mut acc = feed(&[start, block, d1, d2]);
        assert_eq!(
            snapshot(&acc)["content"][0]["input"],
            serde_json::json!({"a": [1, "xy", 2]})
        );
        acc.add_json(br#"{"type":"content_block_stop","index":0}"#)
            .unwrap();
        assert_eq!(
            snapshot(&acc)["content"][0]["input"],
            serde_json::json!({"a": [1, "xy", 2]})
        );
        let bad = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"nope"}}"#;
        let mut acc = feed(&[start, block, bad]);
        acc.add_json(br#"{"type":"content_block_stop","index":0}"#)
            .unwrap();
        assert_eq!(snapshot(&acc)["content"][0]["input"], serde_json::json!({}));
        assert_eq!(
            acc.warnings(),
            ["content_block_stop: the input JSON of block 0 does not parse"]
        );
    }

    #[test]
    fn a_whole_input_json_parses_as_the_partial_parse_does() {
        // parse_whole answers only when it gives what jiter's partial parse gives, entries in
        // the same order (compared as written: serde_json's map equality ignores order).
        let written = |v: &Value| serde_json::to_string(v).unwrap();
        let mut inputs: Vec<String> = [
            r#"{"a": [1, -0, 2.5, 1e400, -1.5e-7, 9223372036854775807, 9223372036854775808], "b": {"c": null, "d": true, "e": false}}"#,
            r#"{"k": 1, "j": 2, "k": 3}"#,
            r#"  {"s": "\u00e9\n\ud83d\ude00 \"q\" \/", "t": ""}  "#,
            r#"[{"x": [[], {}]}, "y", 0]"#,
            r#"{"a": 1} trailing"#,
            r#"{"a": 1}{"b": 2}"#,
            r#"{"a": "cut"#,
            r#"{"a": NaN}"#,
            r#"{"a": 1,}"#,
            r#""just a string""#,
            "12",
            "",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        inputs.push(format!("{}{}", "[".repeat(130), "]".repeat(130)));
        inputs.push(format!("{}{}", "[".repeat(300), "]".repeat(300)));
        for lines in corpus_lines("anthropic") {
            let mut json = String::new();
            for line in lines.iter().filter(|l| l.starts_with('{')) {
                let v: Value = serde_json::from_str(line).unwrap();
                if let Some(piece) = v["delta"]["partial_json"].as_str() {
                    json.push_str(piece);
                }
            }
            inputs.push(json);
        }
        let mut whole = 0;
        let base = inputs.clone();
        for input in &base {
            for mutated in crate::accumulate::mutations(input.as_bytes()) {
                if let Ok(text) = String::from_utf8(mutated) {
                    inputs.push(text);
                }
            }
        }
        let (mut kept, mut repeated) = (0, 0);
        for input in &inputs {
            if let Some(value) = parse_whole(input) {
                whole += 1;
                let partial = parse_partial(input).expect("a whole value parses partially");
                assert_eq!(written(&value), written(&partial), "{input:?}");
            }
            // Written in one pass: what parse_whole gives, written, byte for byte.
            if let Some(bytes) = write_whole(input) {
                kept += 1;
                let value = parse_whole(input).expect("written input JSON is whole");
                let mut want = Vec::new();
                json::write_value(&mut want, &value);
                assert_eq!(bytes, want, "{input:?}");
            } else if parse_whole(input).is_some() {
                // Only a repeated key (or over WRITTEN_KEYS keys) leaves it to parse_whole.
                let tree = jiter::JsonValue::parse(input.as_bytes(), false).unwrap();
                assert!(repeats_a_key(&tree), "{input:?}");
                repeated += 1;
            }
        }
        assert!(whole > 100, "{whole}");
        assert!(kept > 100 && repeated < kept / 4, "{kept} {repeated}");
        assert!(write_whole(r#"{"k": 1, "j": {"k": 2}, "l": [{"k": 3}]}"#).is_some());
        assert!(write_whole(r#"{"k": 1, "j": 2, "k": 3}"#).is_none());
        assert!(write_whole(r#"{"\u006b": 1, "k": 3}"#).is_none());
    }

    /// Whether an object in `value` repeats a key or has more than WRITTEN_KEYS.
    fn repeats_a_key(value: &jiter::JsonValue<'_>) -> bool {
        use jiter::JsonValue as J;
        match value {
            J::Array(items) => items.iter().any(repeats_a_key),
            J::Object(entries) => {
                let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_ref()).collect();
                let unique: std::collections::HashSet<&str> = keys.iter().copied().collect();
                unique.len() < keys.len()
                    || keys.len() > WRITTEN_KEYS
                    || entries.iter().any(|(_, v)| repeats_a_key(v))
            }
            _ => false,
        }
    }

    #[test]
    fn a_stopped_tool_block_gives_the_input_the_general_parse_gives() {
        // The input JSON kept as it came (or the value built when it is not whole), in the
        // snapshot, at stop and after more input arrives, against the value built.
        let written = |v: &Value| serde_json::to_string(v).unwrap();
        let start = r#"{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}"#;
        let mut inputs: Vec<String> = vec![
            r#" {"a": [1, -0, 2.5e3, -1.5E-7, 0.0], "b": {"c": null, "d": true}, "a": 3} "#
                .to_owned(),
            r#"{"s": "\u00e9\n\ud83d\ude00 \"q\"", "t": ""}"#.to_owned(),
            r#"{"a": 9223372036854775808}"#.to_owned(),
            r#"{"a": 1e400}"#.to_owned(),
            r#"{"a": "cut"#.to_owned(),
            r#"[1, {"x": []}]"#.to_owned(),
            "nope".to_owned(),
        ];
        for mutated in crate::accumulate::mutations(inputs[0].clone().as_bytes()) {
            if let Ok(text) = String::from_utf8(mutated) {
                inputs.push(text);
            }
        }
        for input in &inputs {
            for (block, has_input) in [
                (
                    r#"{"type":"tool_use","id":"t","name":"f","input":{},"after":1}"#,
                    true,
                ),
                (r#"{"type":"server_tool_use","id":"t","name":"f"}"#, false),
            ] {
                let head = format!(
                    r#"{{"type":"content_block_start","index":0,"content_block":{block}}}"#
                );
                let delta = format!(
                    r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"input_json_delta","partial_json":{}}}}}"#,
                    serde_json::to_string(input).unwrap()
                );
                let stop = r#"{"type":"content_block_stop","index":0}"#;
                let acc = feed(&[start, &head, &delta, stop]);
                let got = snapshot(&acc);
                let want = parse_whole(input)
                    .or_else(|| parse_partial(input))
                    .unwrap_or_else(|| {
                        if has_input {
                            serde_json::json!({})
                        } else {
                            Value::Null
                        }
                    });
                let block = &got["content"][0];
                assert_eq!(written(&block["input"]), written(&want), "{input:?}");
                // The key keeps its place (before "after"; last when the block had none).
                let keys: Vec<&String> = block.as_object().unwrap().keys().collect();
                let input_at = keys.iter().position(|k| *k == "input");
                if has_input {
                    assert_eq!(input_at, Some(3), "{input:?} {keys:?}");
                } else if want != Value::Null {
                    assert_eq!(input_at, Some(keys.len() - 1), "{input:?} {keys:?}");
                }
                // More input after the stop: the new JSON's partial parse when it has one,
                // else the stopped input; a second stop keeps what parses.
                let more = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"[7, "}}"#;
                let later = snapshot(&feed(&[start, &head, &delta, stop, more]));
                assert_eq!(later["content"][0]["input"], serde_json::json!([7]));
                let bad = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"x"}}"#;
                let acc = feed(&[start, &head, &delta, stop, bad, stop]);
                assert_eq!(
                    written(&snapshot(&acc)["content"][0]["input"]),
                    written(&want)
                );
            }
        }
    }

    #[test]
    fn message_delta_updates_usage_key_by_key_and_citations_append() {
        let acc = feed(&[
            r#"{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":3,"output_tokens":1,"cache_read_input_tokens":7}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"a"}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"__unknown__","original_type":"x","data":{"type":"x"}}}}"#,
            r#"{"type":"content_block_delta","index":5,"delta":{"type":"text_delta","text":"lost"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","extra":1},"usage":{"output_tokens":9,"input_tokens":null,"new_key":2}}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ]);
        let m = snapshot(&acc);
        assert_eq!(
            m["usage"],
            serde_json::json!({"input_tokens":3,"output_tokens":9,"cache_read_input_tokens":7,"new_key":2})
        );
        assert_eq!(m["stop_reason"], "end_turn");
        assert_eq!(m["stop_sequence"], Value::Null);
        assert_eq!(m["extra"], 1);
        assert_eq!(
            m["content"][0]["citations"],
            serde_json::json!([{"type":"char_location","cited_text":"a"},{"type":"x"}])
        );
        assert_eq!(
            acc.warnings(),
            [
                "content_block_delta: no content block at index 5",
                "error event: Overloaded"
            ]
        );
        assert_eq!(acc.unknown_events(), 1);
    }

    #[test]
    fn hostile_payloads_are_errors_or_warnings_never_panics() {
        let mut acc = AnthropicAccumulator::with_text_cap(Some(4));
        for payload in [
            &b"not json"[..],
            b"[1]",
            b"{\"type\":\"content_block_delta\",\"index\":\"x\"}",
            b"{\"type\":\"content_block_start\",\"content_block\":3}",
            b"{\"type\":\"message_delta\",\"usage\":[]}",
            b"{\"type\":\"content_block_delta\",\"index\":18446744073709551615,\"delta\":{}}",
            b"\xff",
        ] {
            let _ = acc.add_json(payload);
        }
        acc.add_json(br#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#)
            .unwrap();
        let err = acc
            .add_json(br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"toolong"}}"#)
            .unwrap_err();
        assert!(matches!(
            err,
            AccumulateError::TextTooLarge { limit: 4, .. }
        ));
        assert!(acc.snapshot_json().is_some());
    }
}
