//! The Chat Completions accumulator: `chat.completion.chunk` objects in, a `ChatCompletion` out.
//!
//! It merges chunks the way the openai SDK's `ChatCompletionStreamState` does
//! (`openai/lib/streaming/chat/_completions.py` and `_deltas.accumulate_delta`), except where
//! that is plainly broken; the differences are marked **(SDK: ...)**.
//!
//! - A chunk with a non-null `error` pushes the warning `"error event: {error.message}"` and
//!   counts in `unknown_events()`. A chunk whose `object` is present and is not
//!   `chat.completion.chunk` (Azure's content-filter chunks have `""`) is skipped and counted
//!   there too, as the SDK skips it. A chunk without `object` is accepted.
//! - The first accepted chunk gives the top level: all its fields (minus `obfuscation`), with
//!   `object: "chat.completion"`, and `id: ""`, `created: 0`, `model: ""`,
//!   `system_fingerprint: null` when missing. Later chunks update `usage`,
//!   `system_fingerprint`, `moderation`, and the members the chunk schema does not know
//!   (vendor members such as Groq's `x_groq`, whose last chunk carries its usage), in that
//!   order, when theirs is not null **(SDK: `usage` and `system_fingerprint` become each
//!   chunk's value, null included; other members keep the first chunk's)**.
//! - `choices[]` are matched by their `index` (default 0) **(SDK: by list position; the same
//!   when indices are 0, 1, 2, ...)**. A choice seen for the first time is
//!   `{index, finish_reason: null, logprobs: null, ...its own fields but delta, message}` with
//!   `message` = the delta merged into `{role: "assistant", content: null, refusal: null}`
//!   **(SDK: `role` stays null when never sent)**.
//! - Later, for a known choice: its `delta` is merged into `message` (below); a non-empty
//!   `finish_reason` replaces the choice's; a non-null `logprobs` is taken whole when the
//!   choice has none (`{content, refusal}`), else its non-empty `content` / `refusal` lists
//!   are appended to the choice's.
//! - Merging a delta (the SDK's `accumulate_delta`), key by key: a key absent or null in the
//!   message takes the delta's value (a list with `index`ed objects is merged into `[]`
//!   instead); keys `index`, `type`, `role` and `id` are replaced by a non-null delta value
//!   **(SDK: `role` and `id` are concatenated, which yields `"assistantassistant..."` from
//!   servers that repeat `role` in every delta; `index`/`type` also take null)**; strings are
//!   concatenated; numbers added; objects merged recursively; lists: when the message's list
//!   holds only scalars (and is non-empty, or the delta's has no `index`ed objects) the
//!   delta's items are appended, otherwise each delta object with an integer `index` is
//!   merged into the message's object with that `index` (appended when there is none); a
//!   delta object without an `index` is merged into the object with the same `id`, else
//!   appended **(SDK: raises)**; a non-object entry is skipped with the warning
//!   `"chat: non-object list entry ignored"` **(SDK: raises)**. Any other combination
//!   (e.g. a bool, or a string onto an object) keeps the message's value.
//!   So `tool_calls` merge by tool-call `index`: `id`/`type` set, `function.name` and
//!   `function.arguments` concatenated; `reasoning`, `reasoning_content` and any other
//!   string field are concatenated.
//! - Mistral's `content` as a list of typed parts: the `text` of `text` parts is appended to
//!   `content`; the text of `thinking` parts (a string, or a list of `text` parts) to
//!   `reasoning_content`; other part types are ignored **(SDK: raises)**.
//! - Deltas' unknown keys are merged by the same rules and kept in `message`.

use std::borrow::Cow;

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

use super::{
    is_done_marker, json, openai_top_level, replace_fields, AccumulateError, ChunkHead, RawEntries,
    Str, Tally, TextCap,
};

/// The chunk fields read on every chunk (the first chunk is also parsed whole), and the
/// members the chunk schema does not know (vendor members such as Groq's `x_groq`), unparsed,
/// in wire order.
struct Chunk<'a> {
    object: Option<Str<'a>>,
    choices: Option<Vec<RawEntries<'a>>>,
    usage: Option<&'a RawValue>,
    system_fingerprint: Option<&'a RawValue>,
    moderation: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
    vendor: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> ChunkHead<'a> for Chunk<'a> {
    fn error(&self) -> Option<&'a RawValue> {
        self.error
    }
    fn object(&self) -> Option<&str> {
        self.object.as_ref().map(|o| &*o.0)
    }
}

/// The other members of the chunk schema (`rapidsse.chat.ChatCompletionChunk`): not read.
const SCHEMA_KEYS: [&str; 5] = ["id", "created", "model", "service_tier", "obfuscation"];

impl<'de: 'a, 'a> Deserialize<'de> for Chunk<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChunkVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for ChunkVisitor<'a> {
            type Value = Chunk<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("struct Chunk")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
                    map: &mut A,
                    slot: &mut Option<Option<T>>,
                    name: &'static str,
                ) -> Result<(), A::Error> {
                    if slot.is_some() {
                        return Err(de::Error::duplicate_field(name));
                    }
                    *slot = Some(map.next_value()?);
                    Ok(())
                }
                let (mut object, mut choices, mut usage) = (None, None, None);
                let (mut system_fingerprint, mut moderation, mut error) = (None, None, None);
                let mut vendor = Vec::new();
                while let Some(key) = map.next_key::<Str<'a>>()? {
                    match &*key.0 {
                        "object" => once(&mut map, &mut object, "object")?,
                        "choices" => once(&mut map, &mut choices, "choices")?,
                        "usage" => once(&mut map, &mut usage, "usage")?,
                        "system_fingerprint" => {
                            once(&mut map, &mut system_fingerprint, "system_fingerprint")?
                        }
                        "moderation" => once(&mut map, &mut moderation, "moderation")?,
                        "error" => once(&mut map, &mut error, "error")?,
                        name if SCHEMA_KEYS.contains(&name) => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        _ => vendor.push((key.0, map.next_value()?)),
                    }
                }
                Ok(Chunk {
                    object: object.flatten(),
                    choices: choices.flatten(),
                    usage: usage.flatten(),
                    system_fingerprint: system_fingerprint.flatten(),
                    moderation: moderation.flatten(),
                    error: error.flatten(),
                    vendor,
                })
            }
        }
        deserializer.deserialize_map(ChunkVisitor(std::marker::PhantomData))
    }
}

/// Keys whose delta value replaces the accumulated one instead of being merged into it.
const REPLACED_KEYS: [&str; 4] = ["index", "type", "role", "id"];

/// Builds a `ChatCompletion` from its stream chunks. See the module docs.
#[derive(Debug)]
pub struct ChatAccumulator {
    /// The top level from the first chunk; its `choices` value is a placeholder.
    completion: Option<Map<String, Value>>,
    choices: Vec<Map<String, Value>>,
    tally: Tally,
    cap: TextCap,
}

impl ChatAccumulator {
    /// An accumulator whose texts (content, refusal, reasoning, tool call arguments, any
    /// string merged from deltas) are capped at `limit` bytes each (`None`: no cap); see
    /// [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        ChatAccumulator {
            completion: None,
            choices: Vec::new(),
            tally: Tally::default(),
            cap: TextCap::new(limit),
        }
    }

    /// One chunk's JSON payload (the SSE `data`); `[DONE]` is ignored.
    pub fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        if is_done_marker(payload) {
            return Ok(());
        }
        let Some(chunk) =
            self.tally
                .admit::<Chunk<'_>>(payload, "chat", Some("chat.completion.chunk"))?
        else {
            return Ok(());
        };
        match &mut self.completion {
            None => {
                self.completion = Some(openai_top_level(
                    payload,
                    "chat.completion",
                    &["obfuscation"],
                    &["system_fingerprint"],
                ))
            }
            Some(completion) => {
                let known = [
                    ("usage", chunk.usage),
                    ("system_fingerprint", chunk.system_fingerprint),
                    ("moderation", chunk.moderation),
                ];
                let vendor = chunk.vendor.iter().map(|(key, raw)| (&**key, Some(*raw)));
                replace_fields(completion, known.into_iter().chain(vendor));
            }
        }
        for choice in chunk.choices.unwrap_or_default() {
            self.add_choice(choice);
        }
        self.cap.check(self.tally.events - 1)
    }

    fn add_choice(&mut self, entries: RawEntries<'_>) {
        let mut index = 0u64;
        let mut delta = None;
        let mut finish_reason = None;
        let mut logprobs = None;
        for (key, raw) in &entries.0 {
            match &**key {
                "index" => index = serde_json::from_str(raw.get()).unwrap_or(0),
                "delta" => delta = Some(*raw),
                "finish_reason" => finish_reason = serde_json::from_str::<Value>(raw.get()).ok(),
                "logprobs" => logprobs = serde_json::from_str::<Value>(raw.get()).ok(),
                _ => {}
            }
        }
        let known = match self.choices.get(index as usize) {
            Some(c) if c.get("index").and_then(Value::as_u64) == Some(index) => {
                Some(index as usize)
            }
            _ => self
                .choices
                .iter()
                .position(|c| c.get("index").and_then(Value::as_u64) == Some(index)),
        };
        let Some(position) = known else {
            let mut choice = Map::new();
            choice.insert("index".to_owned(), Value::from(index));
            choice.insert("finish_reason".to_owned(), Value::Null);
            choice.insert("logprobs".to_owned(), Value::Null);
            for (key, raw) in &entries.0 {
                if key != "delta" && key != "index" {
                    if let Ok(value) = serde_json::from_str::<Value>(raw.get()) {
                        choice.insert(key.clone().into_owned(), value);
                    }
                }
            }
            let mut message = Map::new();
            message.insert("role".to_owned(), Value::String("assistant".to_owned()));
            message.insert("content".to_owned(), Value::Null);
            message.insert("refusal".to_owned(), Value::Null);
            if let Some(delta) = delta {
                merge_delta(&mut message, delta, &mut self.tally.warnings, &mut self.cap);
            }
            choice.insert("message".to_owned(), Value::Object(message));
            self.choices.push(choice);
            return;
        };
        let choice = &mut self.choices[position];
        if let Some(delta) = delta {
            if let Some(Value::Object(message)) = choice.get_mut("message") {
                merge_delta(message, delta, &mut self.tally.warnings, &mut self.cap);
            }
        }
        if let Some(reason) = finish_reason.filter(|r| !r.is_null() && r.as_str() != Some("")) {
            choice.insert("finish_reason".to_owned(), reason);
        }
        if let Some(Value::Object(mut chunk_logprobs)) = logprobs {
            match choice.get_mut("logprobs") {
                Some(Value::Object(ours)) => {
                    for key in ["content", "refusal"] {
                        let Some(Value::Array(new)) = chunk_logprobs.remove(key) else {
                            continue;
                        };
                        if new.is_empty() {
                            continue;
                        }
                        match ours.get_mut(key) {
                            Some(Value::Array(list)) => list.extend(new),
                            _ => {
                                ours.insert(key.to_owned(), Value::Array(new));
                            }
                        }
                    }
                }
                _ => {
                    let mut taken = Map::new();
                    for key in ["content", "refusal"] {
                        taken.insert(
                            key.to_owned(),
                            chunk_logprobs.remove(key).unwrap_or(Value::Null),
                        );
                    }
                    choice.insert("logprobs".to_owned(), Value::Object(taken));
                }
            }
        }
    }

    /// The `ChatCompletion` built so far as JSON bytes (`None` before the first chunk).
    pub fn snapshot_json(&self) -> Option<Vec<u8>> {
        let completion = self.completion.as_ref()?;
        let mut out = Vec::with_capacity(256);
        json::write_entries(&mut out, completion, |out, key, value| {
            if key == "choices" {
                json::write_objects(out, &self.choices);
            } else {
                json::write_value(out, value);
            }
        });
        Some(out)
    }

    tally_getters! {
        /// Error chunks, malformed chunks and list entries that could not be merged, in order.
        warnings;
        /// Chunks kept out of the result: error chunks, other `object`s, malformed chunks.
        unknown_events;
        /// Chunks added (every accepted payload but `[DONE]`).
        events;
    }
}

/// Merges one `delta` object into the message (see the module docs).
fn merge_delta(
    message: &mut Map<String, Value>,
    delta: &RawValue,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
) {
    let Ok(entries) = serde_json::from_str::<RawEntries<'_>>(delta.get()) else {
        return;
    };
    for (key, raw) in entries.0 {
        let text = raw.get();
        if key == "content" && text.starts_with('[') {
            merge_content_parts(message, text, cap);
        } else if text.starts_with('"') {
            if let Ok(s) = serde_json::from_str::<Str<'_>>(text) {
                merge_string(message, &key, s.0, cap);
            }
        } else if let Ok(value) = serde_json::from_str::<Value>(text) {
            accumulate_entry(message, &key, value, warnings, cap);
        }
    }
}

/// The string fast path of [`accumulate_entry`]: no `Value` is built for the delta.
fn merge_string(
    message: &mut Map<String, Value>,
    key: &str,
    delta: Cow<'_, str>,
    cap: &mut TextCap,
) {
    match message.get_mut(key) {
        None | Some(Value::Null) => {
            if cap.admits(0, delta.len()) {
                message.insert(key.to_owned(), Value::String(delta.into_owned()));
            }
        }
        Some(Value::String(acc)) => {
            if REPLACED_KEYS.contains(&key) {
                *acc = delta.into_owned();
            } else if cap.admits(acc.len(), delta.len()) {
                acc.push_str(&delta);
            }
        }
        Some(other) => {
            if REPLACED_KEYS.contains(&key) {
                *other = Value::String(delta.into_owned());
            }
        }
    }
}

/// Mistral's typed content parts: `text` parts into `content`, `thinking` into `reasoning_content`.
fn merge_content_parts(message: &mut Map<String, Value>, parts: &str, cap: &mut TextCap) {
    let Ok(parts) = serde_json::from_str::<Vec<Value>>(parts) else {
        return;
    };
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    merge_string(message, "content", Cow::Borrowed(text), cap);
                }
            }
            Some("thinking") => match part.get("thinking") {
                Some(Value::String(text)) => {
                    merge_string(message, "reasoning_content", Cow::Borrowed(text), cap)
                }
                Some(Value::Array(inner)) => {
                    for p in inner {
                        if p.get("type").and_then(Value::as_str) == Some("text") {
                            if let Some(text) = p.get("text").and_then(Value::as_str) {
                                merge_string(
                                    message,
                                    "reasoning_content",
                                    Cow::Borrowed(text),
                                    cap,
                                );
                            }
                        }
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
}

fn has_indexed_entries(value: &Value) -> bool {
    value.as_array().is_some_and(|list| {
        list.iter()
            .any(|e| e.as_object().is_some_and(|o| o.contains_key("index")))
    })
}

/// The SDK's `accumulate_delta` for one key (with the documented differences).
fn accumulate_entry(
    acc: &mut Map<String, Value>,
    key: &str,
    delta: Value,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
) {
    match acc.get(key) {
        None | Some(Value::Null) => {
            if !has_indexed_entries(&delta) {
                acc.insert(key.to_owned(), delta);
                return;
            }
            acc.insert(key.to_owned(), Value::Array(Vec::new()));
        }
        Some(_) if REPLACED_KEYS.contains(&key) => {
            if !delta.is_null() {
                acc.insert(key.to_owned(), delta);
            }
            return;
        }
        Some(_) => {}
    }
    let Some(current) = acc.get_mut(key) else {
        return;
    };
    match (current, delta) {
        (Value::String(a), Value::String(b)) if cap.admits(a.len(), b.len()) => a.push_str(&b),
        (Value::String(_), Value::String(_)) => {}
        (Value::Number(a), Value::Number(b)) => {
            if let Some(sum) = add_numbers(a, &b) {
                *a = sum;
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                accumulate_entry(a, &k, v, warnings, cap);
            }
        }
        (Value::Array(a), Value::Array(b)) => merge_list(a, b, warnings, cap),
        _ => {}
    }
}

fn add_numbers(a: &Number, b: &Number) -> Option<Number> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if let Some(sum) = x.checked_add(y) {
            return Some(Number::from(sum));
        }
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        if let Some(sum) = x.checked_add(y) {
            return Some(Number::from(sum));
        }
    }
    Number::from_f64(a.as_f64()? + b.as_f64()?)
}

fn merge_list(
    acc: &mut Vec<Value>,
    delta: Vec<Value>,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
) {
    let scalars = acc
        .iter()
        .all(|v| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)));
    if scalars
        && (!acc.is_empty()
            || !delta
                .iter()
                .any(|e| e.as_object().is_some_and(|o| o.contains_key("index"))))
    {
        acc.extend(delta);
        return;
    }
    for entry in delta {
        let Value::Object(entry) = entry else {
            warnings.push("chat: non-object list entry ignored".to_owned());
            continue;
        };
        let target = match entry.get("index").and_then(Value::as_u64) {
            Some(index) => {
                let has = |v: &Value| v.get("index").and_then(Value::as_u64) == Some(index);
                match acc.get(index as usize) {
                    Some(v) if has(v) => Some(index as usize),
                    _ => acc.iter().position(has),
                }
            }
            None => match entry.get("id").filter(|id| !id.is_null()) {
                Some(id) => acc.iter().position(|v| v.get("id") == Some(id)),
                None => None,
            },
        };
        match target.map(|p| &mut acc[p]) {
            Some(Value::Object(existing)) => {
                for (k, v) in entry {
                    accumulate_entry(existing, &k, v, warnings, cap);
                }
            }
            _ => acc.push(Value::Object(entry)),
        }
    }
}
