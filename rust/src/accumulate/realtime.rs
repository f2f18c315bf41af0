//! The Realtime API accumulator: server events in, `{response_id: response}` out.
//!
//! One JSON server event per call (a WebSocket frame or data-channel message). Responses are
//! kept in the order they appeared, keyed by id. What each event type does:
//!
//! - `response.created`: starts the response `response.id` (or updates it when it exists),
//!   taking the event's `response` as the base object (`status`, `status_details`, ...).
//!   Its `output`, when non-empty, is used only if the response has no item yet.
//! - `response.done`: finishes it, authoritatively: the event's `response` becomes the base
//!   (e.g. `max_output_tokens` stays `"inf"` when sent so); a non-empty `output` replaces the
//!   items, each settled against ours (see [`super`]); an empty one keeps ours. When the
//!   response's `usage` is missing, null or `{}` and the event has a top-level `usage`
//!   object (xAI), that one is used.
//! - Other events find their response by `response_id`; without one, the latest response;
//!   an unknown id (or no response yet) starts a response
//!   `{id, object: "realtime.response", status: "in_progress", status_details: null,
//!   output, usage: null}` (id `""` when the event has none).
//! - `response.output_item.added/.done`, `response.content_part.added/.done`: as in the
//!   Responses accumulator (items keyed by `item.id`, `output_index` only a fallback: xAI
//!   reuses it). xAI's `output_item.done` without `content` and its `content_part.done`
//!   without `part` keep what the deltas built.
//! - Text deltas append, `.done` twins settle (full-text field in brackets): GA
//!   `response.output_text` and beta `response.text` (content part `text`, `text`); GA
//!   `response.output_audio_transcript` and beta `response.audio_transcript` (content part
//!   `audio`, `transcript`); `response.function_call_arguments` (function_call `arguments`;
//!   found by `item_id`, as xAI omits `output_index`); `response.mcp_call_arguments`
//!   (mcp_call `arguments`). Parts a delta creates are `{type: "text", text: ""}` or
//!   `{type: "audio", transcript: ""}`; an index-less delta continues the last part of type
//!   `text`/`output_text` (resp. `audio`/`output_audio`). `call_id` and `name` on argument
//!   events fill the function_call's when those are missing or empty.
//! - Audio (`response.output_audio.delta/.done`, beta `response.audio.delta/.done`, base64)
//!   is not accumulated: like `session.*`, `conversation.*`, `input_audio_buffer.*`,
//!   `rate_limits.updated`, `ping`, `response.render.*` and unknown types, these events count
//!   in `unknown_events()`. `error` pushes `"error event: {error.message}"` and counts there too.
//!
//! The snapshot is a JSON object mapping each response id to its base object with `output`
//! (at its place) replaced by the items; `None` before any response exists.

use std::collections::HashMap;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::{
    apply_part, apply_text, event_error_warning, read_stream_event, AccumulateError, Flavor,
    ItemKind, ItemStore, Shape, StreamEvent, Tally, TextCap, TextSpec, TextTarget,
    FUNCTION_CALL_ARGUMENTS, MCP_CALL_ARGUMENTS,
};

const TEXT: TextSpec = TextSpec {
    kind: ItemKind::Message,
    target: TextTarget::Part {
        array: "content",
        types: &["text", "output_text"],
        new_type: "text",
        key: "text",
    },
    done_field: "text",
};
const TRANSCRIPT: TextSpec = TextSpec {
    kind: ItemKind::Message,
    target: TextTarget::Part {
        array: "content",
        types: &["audio", "output_audio"],
        new_type: "audio",
        key: "transcript",
    },
    done_field: "transcript",
};

fn text_spec(kind: &str) -> Option<(&'static TextSpec, bool)> {
    Some(match kind {
        "response.output_text.delta" | "response.text.delta" => (&TEXT, false),
        "response.output_text.done" | "response.text.done" => (&TEXT, true),
        "response.output_audio_transcript.delta" | "response.audio_transcript.delta" => {
            (&TRANSCRIPT, false)
        }
        "response.output_audio_transcript.done" | "response.audio_transcript.done" => {
            (&TRANSCRIPT, true)
        }
        "response.function_call_arguments.delta" => (&FUNCTION_CALL_ARGUMENTS, false),
        "response.function_call_arguments.done" => (&FUNCTION_CALL_ARGUMENTS, true),
        "response.mcp_call_arguments.delta" => (&MCP_CALL_ARGUMENTS, false),
        "response.mcp_call_arguments.done" => (&MCP_CALL_ARGUMENTS, true),
        _ => return None,
    })
}

fn is_used_type(kind: &str) -> bool {
    text_spec(kind).is_some()
        || matches!(
            kind,
            "response.created"
                | "response.done"
                | "response.output_item.added"
                | "response.output_item.done"
                | "response.content_part.added"
                | "response.content_part.done"
        )
}

#[derive(Debug)]
struct RealtimeResponse {
    /// The key in the snapshot.
    id: String,
    /// The latest `response` object; its `output` value is a placeholder.
    base: Map<String, Value>,
    items: ItemStore,
}

impl RealtimeResponse {
    fn implied(id: &str) -> Self {
        let base = Map::from_iter([
            ("id".to_owned(), Value::String(id.to_owned())),
            (
                "object".to_owned(),
                Value::String("realtime.response".to_owned()),
            ),
            ("status".to_owned(), Value::String("in_progress".to_owned())),
            ("status_details".to_owned(), Value::Null),
            ("output".to_owned(), Value::Null),
            ("usage".to_owned(), Value::Null),
        ]);
        RealtimeResponse {
            id: id.to_owned(),
            base,
            items: ItemStore::new(Flavor::Realtime),
        }
    }
}

impl Serialize for RealtimeResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.base.len()))?;
        for (key, value) in &self.base {
            if key == "output" {
                map.serialize_entry(key, self.items.items())?;
            } else {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// Builds the responses of a Realtime session from its server events. See the module docs.
#[derive(Debug)]
pub struct RealtimeAccumulator {
    responses: Vec<RealtimeResponse>,
    by_id: HashMap<String, usize>,
    tally: Tally,
    /// The shape of recent payloads, to read the next ones faster.
    shape: Shape,
    cap: TextCap,
}

impl RealtimeAccumulator {
    /// An accumulator whose texts are capped at `limit` bytes each (`None`: no cap); see
    /// [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        RealtimeAccumulator {
            responses: Vec::new(),
            by_id: HashMap::new(),
            tally: Tally::default(),
            shape: Shape::default(),
            cap: TextCap::new(limit),
        }
    }

    /// One server event's JSON.
    pub fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        let mut ev = StreamEvent::default();
        if !read_stream_event(
            payload,
            &mut ev,
            &mut self.shape,
            &mut self.tally,
            is_used_type,
        )? {
            return Ok(());
        }
        self.tally.events += 1;
        if !self.apply(&ev) {
            self.tally.unknown_events += 1;
        }
        self.cap.check(self.tally.events - 1)
    }

    fn apply(&mut self, ev: &StreamEvent<'_>) -> bool {
        let kind = ev.kind();
        if let Some((spec, is_done)) = text_spec(kind) {
            let r = self.response_for(ev);
            let response = &mut self.responses[r];
            let (used, _) = apply_text(
                &mut response.items,
                &mut self.tally.warnings,
                &mut self.cap,
                ev,
                spec,
                is_done,
            );
            if used && spec.kind == ItemKind::FunctionCall {
                let p = response
                    .items
                    .resolve(ev.item_ref(), ItemKind::FunctionCall);
                let item = response.items.get_mut(p);
                for (key, value) in [("call_id", &ev.call_id), ("name", &ev.name)] {
                    let missing = item
                        .get(key)
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty);
                    if let (true, Some(value)) = (missing, value) {
                        item.insert(key.to_owned(), Value::String(value.0.clone().into_owned()));
                    }
                }
            }
            return used;
        }
        match kind {
            "response.created" | "response.done" => self.lifecycle(ev, kind == "response.done"),
            "response.output_item.added" | "response.output_item.done" => {
                let Some(item) = ev.object("item") else {
                    return false;
                };
                let r = self.response_for(ev);
                let items = &mut self.responses[r].items;
                if kind.ends_with("added") {
                    items.added(item, ev.output_index, kind, &mut self.tally.warnings);
                } else {
                    items.done(item, ev.output_index, kind, &mut self.tally.warnings);
                }
                true
            }
            "response.content_part.added" | "response.content_part.done" => {
                let r = self.response_for(ev);
                let items = &mut self.responses[r].items;
                apply_part(
                    items,
                    &mut self.tally.warnings,
                    ev,
                    "content",
                    ItemKind::Any,
                    kind.ends_with("done"),
                )
            }
            "error" => {
                self.tally.warnings.push(event_error_warning(ev));
                false
            }
            _ => false,
        }
    }

    /// The response an item/part/text event belongs to (started when unknown).
    fn response_for(&mut self, ev: &StreamEvent<'_>) -> usize {
        match ev.response_id.as_ref().map(|id| &*id.0) {
            Some(id) => self.response_by_id(id),
            None => match self.responses.len() {
                0 => self.response_by_id(""),
                n => n - 1,
            },
        }
    }

    fn response_by_id(&mut self, id: &str) -> usize {
        if let Some(&r) = self.by_id.get(id) {
            return r;
        }
        self.responses.push(RealtimeResponse::implied(id));
        self.by_id.insert(id.to_owned(), self.responses.len() - 1);
        self.responses.len() - 1
    }

    fn lifecycle(&mut self, ev: &StreamEvent<'_>, is_done: bool) -> bool {
        let Some(mut base) = ev.object("response") else {
            return false;
        };
        let id = base
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let output = match base.get_mut("output") {
            Some(output) => std::mem::take(output),
            None => {
                base.insert("output".to_owned(), Value::Null);
                Value::Null
            }
        };
        if is_done {
            let empty_usage = match base.get("usage") {
                None | Some(Value::Null) => true,
                Some(Value::Object(usage)) => usage.is_empty(),
                _ => false,
            };
            if let (true, Some(usage)) = (empty_usage, ev.object("usage")) {
                base.insert("usage".to_owned(), Value::Object(usage));
            }
        }
        let r = self.response_by_id(&id);
        let response = &mut self.responses[r];
        if let Value::Array(output) = output {
            if !output.is_empty() {
                if is_done {
                    response
                        .items
                        .replace_with(output, ev.kind(), &mut self.tally.warnings);
                } else if response.items.is_empty() {
                    for (k, item) in output.into_iter().enumerate() {
                        if let Value::Object(item) = item {
                            response.items.added(
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
        response.base = base;
        true
    }

    /// `{response_id: response}` as JSON bytes, responses in order of appearance (`None`
    /// before any response exists).
    pub fn snapshot_json(&self) -> Option<Vec<u8>> {
        if self.responses.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(256);
        let mut ser = serde_json::Serializer::new(&mut out);
        let mut map = ser.serialize_map(Some(self.responses.len())).ok()?;
        for response in &self.responses {
            map.serialize_entry(&response.id, response).ok()?;
        }
        map.end().ok()?;
        Some(out)
    }

    tally_getters! {
        /// Mismatches between deltas and server values, error events, ... in order.
        warnings;
        /// Events of types it does not use (kept out of the result).
        unknown_events;
        /// Events added (every accepted payload but `[DONE]`).
        events;
    }
}
