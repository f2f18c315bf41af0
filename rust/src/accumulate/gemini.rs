//! The Gemini accumulator: `GenerateContentResponse` chunks in, one `GenerateContentResponse` out.
//!
//! Every chunk of a `streamGenerateContent?alt=sse` stream is a whole response holding the next
//! parts of each candidate; the google-genai SDK hands them out one by one and leaves joining
//! them to the caller. This joins them:
//!
//! - A chunk with a non-null `error` pushes the warning `"error event: {error.message}"` and
//!   counts in `unknown_events()`; it changes nothing else. A chunk whose read fields
//!   (`candidates`, `usageMetadata`, `modelVersion`, `responseId`, `promptFeedback`,
//!   `createTime`, `error`) are duplicated is malformed: it counts in `unknown_events()` with
//!   the warning `"gemini: malformed chunk ignored"`.
//! - The first accepted chunk gives the top level: all its fields, `candidates` being built
//!   below. Later chunks replace `usageMetadata`, `modelVersion`, `responseId`,
//!   `promptFeedback` and `createTime` with theirs when not null (so the last chunk's win);
//!   their other top-level fields are not read.
//! - `candidates[]` are matched by their `index` (absent: 0), in order of first appearance. A
//!   candidate seen for the first time is `{content: {}, index, ...}`; each chunk's candidate
//!   fields but `content` and `index` (`finishReason`, `safetyRatings`, `citationMetadata`,
//!   `groundingMetadata`, `urlContextMetadata`, `finishMessage`, `tokenCount`, ...) replace the
//!   candidate's when not null. A `candidates` that is not an array, or an entry that is not an
//!   object, is skipped.
//! - `content`: its fields but `parts` replace ours when not null (`role`); its `parts` (an
//!   array) are appended in order, except that a *text part* joins the last part when that is
//!   a text part of the same kind. A text part is an object whose `text` is a string and whose
//!   other keys are only `thought` (a bool or null) and `thoughtSignature` (a string or null);
//!   its kind is whether `thought` is true. Joining appends the text and takes the new part's
//!   `thoughtSignature` when the last part has none; when both carry one, the new part is
//!   appended instead (each signature stays with the text it came with). Function calls,
//!   executable code, code results, inline and file data and every other part are kept as
//!   they came, with their signatures.
//! - Text cap: a text that would grow past the cap is not appended (a new text part over it
//!   is kept with `text: ""`), see [`AccumulateError::TextTooLarge`].

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::fast::{self, Hole, Raw, Template};
use super::{
    fast_top, json, position_by_index, raw_objects, replace_fields, AccumulateError, ChunkHead,
    Replaced, Tally, TextCap,
};

/// The top-level fields later chunks replace when not null.
const REPLACED: [&str; 5] = [
    "usageMetadata",
    "modelVersion",
    "responseId",
    "promptFeedback",
    "createTime",
];

/// The chunk fields read on every chunk; the first chunk is also parsed whole.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(borrow)]
    candidates: Option<&'a RawValue>,
    #[serde(borrow)]
    usage_metadata: Option<&'a RawValue>,
    #[serde(borrow)]
    model_version: Option<&'a RawValue>,
    #[serde(borrow)]
    response_id: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt_feedback: Option<&'a RawValue>,
    #[serde(borrow)]
    create_time: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

impl<'a> ChunkHead<'a> for Chunk<'a> {
    fn error(&self) -> Option<&'a RawValue> {
        self.error
    }
}

/// What a learned chunk did with one hole of its [`Template`].
#[derive(Debug)]
enum Action {
    /// Merged a text part (without a signature) into a candidate's parts: the candidate's
    /// position, the part's kind, and the part without its text.
    Part {
        candidate: usize,
        thought: bool,
        part: Map<String, Value>,
    },
    /// Replaced a top-level field.
    Replace(&'static str),
}

type Learn<'a> = fast::Learn<'a, Action>;

/// Builds one `GenerateContentResponse` from a stream's chunks. See the module docs.
#[derive(Debug)]
pub struct GeminiAccumulator {
    /// The top level from the first chunk; its `candidates` value is a placeholder.
    response: Option<Map<String, Value>>,
    /// Replaced top-level fields not yet built into `response` (the fast path's).
    replaced: Replaced,
    /// The shape of the last chunk [`add_fast`](Self::add_fast) read, and what it did.
    template: Template,
    actions: Vec<Action>,
    candidates: Vec<Map<String, Value>>,
    tally: Tally,
    cap: TextCap,
}

impl GeminiAccumulator {
    /// An accumulator whose joined texts (one part's text) are capped at `limit` bytes each
    /// (`None`: no cap); see [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        GeminiAccumulator {
            response: None,
            replaced: Replaced::default(),
            template: Template::default(),
            actions: Vec::new(),
            candidates: Vec::new(),
            tally: Tally::default(),
            cap: TextCap::new(limit),
        }
    }

    /// One chunk's JSON payload (the SSE `data`).
    pub fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        if self.response.is_some() {
            if let Some(holes) = self.template.read(payload) {
                self.add_templated(holes);
                self.tally.events += 1;
                return self.cap.check(self.tally.events - 1);
            }
            if self.add_fast(payload).is_some() {
                self.tally.events += 1;
                return self.cap.check(self.tally.events - 1);
            }
        }
        self.template.clear();
        self.add_general(payload)
    }

    /// A chunk of the learned shape: what the learned chunk did, with this one's holes.
    fn add_templated(&mut self, holes: fast::Holes<'_>) {
        let Some(response) = self.response.as_mut() else {
            return;
        };
        for (hole, action) in holes.into_iter().flatten().zip(&self.actions) {
            match (hole, action) {
                (
                    Hole::Text(text),
                    Action::Part {
                        candidate,
                        thought,
                        part,
                    },
                ) => {
                    let parts = self.candidates[*candidate]
                        .get_mut("content")
                        .and_then(|c| c.get_mut("parts"));
                    if let Some(Value::Array(parts)) = parts {
                        let build = || {
                            let mut part = part.clone();
                            part.insert("text".to_owned(), Value::String(text.to_string()));
                            part
                        };
                        merge_text_part(parts, *thought, &text, None, build, &mut self.cap);
                    }
                }
                (Hole::Value(raw), Action::Replace(key)) => self.replaced.keep(response, key, raw),
                // Never: the holes are read in the order they were learned with their actions.
                _ => debug_assert!(false, "a hole of another kind"),
            }
        }
    }

    /// [`add_json`](Self::add_json) without the fast path (its reference, in the tests).
    fn add_general(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        if let Some(response) = &mut self.response {
            self.replaced.flush(response);
        }
        let Some(chunk) = self.tally.admit::<Chunk<'_>>(payload, "gemini", None)? else {
            return Ok(());
        };
        match &mut self.response {
            None => {
                let mut top: Map<String, Value> =
                    serde_json::from_slice(payload).unwrap_or_default();
                top.insert("candidates".to_owned(), Value::Null);
                self.response = Some(top);
            }
            Some(response) => replace_fields(
                response,
                REPLACED.into_iter().zip([
                    chunk.usage_metadata,
                    chunk.model_version,
                    chunk.response_id,
                    chunk.prompt_feedback,
                    chunk.create_time,
                ]),
            ),
        }
        for candidate in raw_objects(chunk.candidates) {
            self.add_candidate(candidate);
        }
        self.cap.check(self.tally.events - 1)
    }

    /// A later chunk the usual way round (see `docs/internals.md`): read with the tap's reader,
    /// building only the parts that are not joined text and the candidate fields that replace
    /// others, and keeping replaced top-level fields as JSON (see [`Replaced`]). `None` (nothing
    /// changed) for anything else: the first chunk, an error chunk, a malformed one, a
    /// `candidates` that is not an array of objects, an `index` that is not a plain integer,
    /// a field twice, or whatever the reader leaves to serde. The chunk is read twice: once
    /// checking every read that can fail, then applied (the same reads, which then succeed).
    fn add_fast(&mut self, payload: &[u8]) -> Option<()> {
        let (top, candidates) = fast_top(payload, &REPLACED, "candidates", None)?;
        let mut learn = Learn::new();
        if let Some(candidates) = candidates {
            candidates.items(|c| self.fast_candidate(c, None))?;
            candidates.items(|c| self.fast_candidate(c, Some(&mut learn)))?;
        }
        let response = self.response.as_mut()?;
        self.replaced
            .keep_all(response, REPLACED, top, &mut learn, Action::Replace);
        self.template.learn_from(payload, learn, &mut self.actions);
        Some(())
    }

    /// One candidate of [`add_fast`](Self::add_fast): checked (`learn` None: nothing changes)
    /// or applied (what it did noted in `learn`).
    fn fast_candidate<'a>(
        &mut self,
        candidate: Raw<'a>,
        learn: Option<&mut Learn<'a>>,
    ) -> Option<()> {
        let apply = learn.is_some();
        let (mut index, mut seen) = (None, 0u8);
        candidate.entries(|key, value| {
            let bit = match key {
                "index" => 1,
                "content" => 2,
                _ => {
                    if !apply && !value.is_null() {
                        value.build()?;
                    }
                    return Some(());
                }
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            if bit == 1 {
                index = Some(value.unsigned()?);
            } else if !apply && value.first() == b'{' {
                fast_content(value, None, &mut self.cap, &mut Learn::new(), 0)?;
            }
            Some(())
        })?;
        let Some(learn) = learn else {
            return Some(());
        };
        let candidate_at = self.candidate(index.unwrap_or(0));
        let cap = &mut self.cap;
        let ours = &mut self.candidates[candidate_at];
        candidate.entries(|key, value| {
            match key {
                "index" => {}
                "content" => {
                    if let (b'{', Some(Value::Object(content))) =
                        (value.first(), ours.get_mut("content"))
                    {
                        fast_content(value, Some(content), cap, learn, candidate_at)?;
                    }
                }
                _ if value.is_null() => {}
                _ => {
                    ours.insert(key.to_owned(), value.build()?);
                }
            }
            Some(())
        })
    }

    /// Where the candidate `index` is, created (`{content: {}, index}`) if new.
    fn candidate(&mut self, index: u64) -> usize {
        position_by_index(&self.candidates, index).unwrap_or_else(|| {
            let mut fresh = Map::new();
            fresh.insert("content".to_owned(), Value::Object(Map::new()));
            fresh.insert("index".to_owned(), Value::from(index));
            self.candidates.push(fresh);
            self.candidates.len() - 1
        })
    }

    fn add_candidate(&mut self, mut fields: Map<String, Value>) {
        let index = fields.get("index").and_then(Value::as_u64).unwrap_or(0);
        let at = self.candidate(index);
        let candidate = &mut self.candidates[at];
        let content = fields.shift_remove("content");
        for (key, value) in fields {
            if key != "index" && !value.is_null() {
                candidate.insert(key, value);
            }
        }
        if let (Some(Value::Object(content)), Some(Value::Object(ours))) =
            (content, candidate.get_mut("content"))
        {
            merge_content(ours, content, &mut self.cap);
        }
    }

    /// The `GenerateContentResponse` built so far as JSON bytes (`None` before the first chunk).
    pub fn snapshot_json(&self) -> Option<Vec<u8>> {
        let response = self.response.as_ref()?;
        let mut out = Vec::with_capacity(256);
        json::write_entries(&mut out, response, |out, key, value| {
            if key == "candidates" {
                json::write_objects(out, &self.candidates);
            } else {
                self.replaced.write(out, key, value);
            }
        });
        Some(out)
    }

    tally_getters! {
        /// Error chunks and malformed chunks, in order.
        warnings;
        /// Chunks kept out of the result: error chunks and malformed chunks.
        unknown_events;
        /// Chunks added.
        events;
    }
}

/// Merges one chunk's `content` of a candidate into ours (see the module docs).
fn merge_content(ours: &mut Map<String, Value>, content: Map<String, Value>, cap: &mut TextCap) {
    for (key, value) in content {
        match (key.as_str(), value) {
            ("parts", Value::Array(parts)) => {
                let entry = ours
                    .entry("parts")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(list) = entry {
                    for part in parts {
                        merge_part(list, part, cap);
                    }
                }
            }
            ("parts", _) | (_, Value::Null) => {}
            (_, value) => {
                ours.insert(key, value);
            }
        }
    }
}

/// A chunk's `content` (an object) merged into `ours` as [`merge_content`] merges it, built
/// only where it is kept; `ours` None: only checked (every read that can fail is made).
fn fast_content<'a>(
    content: Raw<'a>,
    mut ours: Option<&mut Map<String, Value>>,
    cap: &mut TextCap,
    learn: &mut Learn<'a>,
    candidate: usize,
) -> Option<()> {
    let mut parts_seen = false;
    content.entries(|key, value| {
        if key == "parts" {
            // A repeated key: serde's map keeps the last value, at the first one's place.
            if std::mem::replace(&mut parts_seen, true) {
                return None;
            }
            if value.first() != b'[' {
                return Some(());
            }
            let Some(ours) = ours.as_deref_mut() else {
                return value.items(|part| fast_part(part, None, cap, learn, candidate));
            };
            let entry = ours
                .entry("parts")
                .or_insert_with(|| Value::Array(Vec::new()));
            let Value::Array(list) = entry else {
                return Some(());
            };
            return value.items(|part| fast_part(part, Some(list), cap, learn, candidate));
        }
        if value.is_null() {
            return Some(());
        }
        match ours.as_deref_mut() {
            None => {
                value.build()?;
            }
            Some(ours) => {
                // The usual `role: "model"`, unchanged, is not built again.
                if let (Some(Value::String(s)), Some(text)) = (ours.get(key), value.string()) {
                    if *s == text {
                        return Some(());
                    }
                }
                ours.insert(key.to_owned(), value.build()?);
            }
        }
        Some(())
    })
}

/// One part merged into `parts` as [`merge_part`] merges it; a text part is not built unless
/// it starts a new part. `parts` None: only checked. What was done is noted in `learn`.
fn fast_part<'a>(
    part: Raw<'a>,
    parts: Option<&mut Vec<Value>>,
    cap: &mut TextCap,
    learn: &mut Learn<'a>,
    candidate: usize,
) -> Option<()> {
    // A text part's entries (at most three, each key once), else None.
    let mut entries: [(&str, Raw<'_>); 3] = [("", part); 3];
    let mut n = 0;
    let (mut text, mut thought, mut signature) = (None, false, None);
    let mut text_raw = part;
    let mut is_text = part.first() == b'{';
    if is_text {
        part.entries(|key, value| {
            if !is_text {
                return Some(());
            }
            let known = match key {
                "text" if value.first() == b'"' => {
                    text = Some(value.string()?);
                    text_raw = value;
                    true
                }
                "thought" => match value.boolean() {
                    Some(b) => {
                        thought = b;
                        true
                    }
                    None => value.is_null(),
                },
                "thoughtSignature" if value.is_null() => true,
                "thoughtSignature" if value.first() == b'"' => {
                    signature = Some(value.string()?);
                    true
                }
                _ => false,
            };
            if !known || entries[..n].iter().any(|(k, _)| *k == key) {
                is_text = false;
            } else {
                entries[n] = (key, value);
                n += 1;
            }
            Some(())
        })?;
    }
    let Some(text) = text.filter(|_| is_text) else {
        let value = part.build()?;
        if let Some(parts) = parts {
            merge_part(parts, value, cap);
            learn.ok = false;
        }
        return Some(());
    };
    let Some(parts) = parts else {
        return Some(());
    };
    let build = || {
        let mut map = Map::new();
        for &(key, value) in &entries[..n] {
            let value = match key {
                "text" => Value::String(text.clone().into_owned()),
                "thought" => value.boolean().map_or(Value::Null, Value::Bool),
                _ => signature
                    .as_ref()
                    .map_or(Value::Null, |s| Value::String(s.clone().into_owned())),
            };
            map.insert(key.to_owned(), value);
        }
        map
    };
    if signature.is_none() {
        let mut part = build();
        part.insert("text".to_owned(), Value::String(String::new()));
        learn.holes.push((
            text_raw,
            true,
            Action::Part {
                candidate,
                thought,
                part,
            },
        ));
    } else {
        learn.ok = false;
    }
    merge_text_part(parts, thought, &text, signature.as_deref(), build, cap);
    Some(())
}

/// Joins a text part of kind `thought` (its text and signature) to the last part of `parts`
/// when that is a text part of the same kind and at most one of them has a signature; else
/// appends it, built by `build`, its text cleared when over the cap (see the module docs).
fn merge_text_part(
    parts: &mut Vec<Value>,
    thought: bool,
    text: &str,
    signature: Option<&str>,
    build: impl FnOnce() -> Map<String, Value>,
    cap: &mut TextCap,
) {
    if let Some(Value::Object(last)) = parts.last_mut() {
        if let Some(ours) = joinable_text(last, thought, signature.is_some()) {
            if cap.admits(ours.len(), text.len()) {
                ours.push_str(text);
            }
            if let Some(sig) = signature {
                last.insert("thoughtSignature".to_owned(), Value::String(sig.to_owned()));
            }
            return;
        }
    }
    let mut part = build();
    if let Some(Value::String(text)) = part.get_mut("text") {
        if !cap.admits(0, text.len()) {
            text.clear();
        }
    }
    parts.push(Value::Object(part));
}

/// The kind of a text part (whether it is a thought), None when `part` is not one.
fn text_kind(part: &Map<String, Value>) -> Option<bool> {
    if !part.get("text").is_some_and(Value::is_string) {
        return None;
    }
    let mut thought = false;
    for (key, value) in part {
        match (key.as_str(), value) {
            ("text", _) | ("thought", Value::Null) | ("thoughtSignature", Value::Null) => {}
            ("thought", Value::Bool(b)) => thought = *b,
            ("thoughtSignature", Value::String(_)) => {}
            _ => return None,
        }
    }
    Some(thought)
}

/// The text of `last` if a text part of kind `thought` (and `signed`: with a signature) joins
/// it: `last` is a text part of that kind, and not both have a signature. One pass over its
/// entries ([`text_kind`] and [`signature`] in one).
fn joinable_text(
    last: &mut Map<String, Value>,
    thought: bool,
    signed: bool,
) -> Option<&mut String> {
    let (mut text, mut kind, mut sig) = (None, false, false);
    for (key, value) in last.iter_mut() {
        match (key.as_str(), value) {
            ("text", Value::String(t)) => text = Some(t),
            ("thought", Value::Bool(b)) => kind = *b,
            ("thoughtSignature", Value::String(_)) => sig = true,
            ("thought", Value::Null) | ("thoughtSignature", Value::Null) => {}
            _ => return None,
        }
    }
    (kind == thought && !(sig && signed)).then_some(text?)
}

fn signature(part: &Map<String, Value>) -> Option<&Value> {
    part.get("thoughtSignature").filter(|s| !s.is_null())
}

/// Appends `part` to `parts`, or joins it to the last part (see the module docs).
fn merge_part(parts: &mut Vec<Value>, part: Value, cap: &mut TextCap) {
    let Value::Object(part) = part else {
        parts.push(part);
        return;
    };
    let Some(kind) = text_kind(&part) else {
        parts.push(Value::Object(part));
        return;
    };
    let text = part.get("text").and_then(Value::as_str).unwrap_or_default();
    let sig = signature(&part).and_then(Value::as_str);
    merge_text_part(parts, kind, text, sig, || part.clone(), cap);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::{corpus_lines, is_done_marker};

    fn accumulate(lines: &[&str]) -> Value {
        let mut acc = GeminiAccumulator::new();
        for line in lines {
            acc.add_json(line.as_bytes()).unwrap();
        }
        serde_json::from_slice(&acc.snapshot_json().unwrap()).unwrap()
    }

    #[test]
    fn joins_text_of_the_same_kind_and_keeps_other_parts() {
        let got = accumulate(&[
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Let me","thought":true}]}}],"responseId":"r1"}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":" think","thought":true},{"text":"Hel"}]}}],"usageMetadata":{"totalTokenCount":3}}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"lo","thoughtSignature":"sig1"},{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"sig2"},{"text":"!"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"totalTokenCount":9},"modelVersion":"m2"}"#,
        ]);
        let expected: Value = serde_json::from_str(
            r#"{"candidates":[{"content":{"role":"model","parts":[
                {"text":"Let me think","thought":true},
                {"text":"Hello","thoughtSignature":"sig1"},
                {"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"sig2"},
                {"text":"!"}]},"index":0,"finishReason":"STOP"}],
              "responseId":"r1","usageMetadata":{"totalTokenCount":9},"modelVersion":"m2"}"#,
        )
        .unwrap();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_second_signature_starts_a_new_part() {
        let got = accumulate(&[
            r#"{"candidates":[{"content":{"parts":[{"text":"a","thoughtSignature":"s1"}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"b"}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"s2"}]}}]}"#,
        ]);
        assert_eq!(
            got["candidates"][0]["content"]["parts"],
            serde_json::json!([{"text":"ab","thoughtSignature":"s1"},{"text":"","thoughtSignature":"s2"}])
        );
    }

    #[test]
    fn candidates_by_index_and_error_chunks() {
        let mut acc = GeminiAccumulator::new();
        acc.add_json(br#"{"candidates":[{"index":1,"content":{"parts":[{"text":"B"}]}},{"content":{"parts":[{"text":"A"}]}}]}"#).unwrap();
        acc.add_json(br#"{"candidates":[{"index":0,"content":{"parts":[{"text":"a"}]}},{"index":1,"content":{"parts":[{"text":"b"}]}}]}"#).unwrap();
        acc.add_json(br#"{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}"#)
            .unwrap();
        acc.add_json(br#"{"candidates":[],"candidates":[]}"#)
            .unwrap();
        let got: Value = serde_json::from_slice(&acc.snapshot_json().unwrap()).unwrap();
        assert_eq!(got["candidates"][0]["index"], 1);
        assert_eq!(got["candidates"][0]["content"]["parts"][0]["text"], "Bb");
        assert_eq!(got["candidates"][1]["content"]["parts"][0]["text"], "Aa");
        assert_eq!(
            acc.warnings(),
            ["error event: overloaded", "gemini: malformed chunk ignored"]
        );
        assert_eq!((acc.events(), acc.unknown_events()), (4, 2));
        assert!(acc.add_json(b"[1]").is_err());
        assert!(acc.add_json(b"{").is_err());
        assert_eq!(acc.events(), 4);
    }

    #[test]
    fn text_cap() {
        let mut acc = GeminiAccumulator::with_text_cap(Some(4));
        acc.add_json(br#"{"candidates":[{"content":{"parts":[{"text":"abc"}]}}]}"#)
            .unwrap();
        let err = acc
            .add_json(br#"{"candidates":[{"content":{"parts":[{"text":"de"}]}}]}"#)
            .unwrap_err();
        assert!(matches!(
            err,
            AccumulateError::TextTooLarge {
                length: 5,
                limit: 4,
                ..
            }
        ));
        acc.add_json(br#"{"candidates":[{"content":{"parts":[{"text":"d"}]}}]}"#)
            .unwrap();
        let got: Value = serde_json::from_slice(&acc.snapshot_json().unwrap()).unwrap();
        assert_eq!(got["candidates"][0]["content"]["parts"][0]["text"], "abcd");
    }

    /// Feeds `lines` through the fast path and through the general one alone: the same results
    /// (after every chunk), errors, warnings and counts.
    fn agree(lines: &[&[u8]], cap: Option<usize>) {
        let mut fast = GeminiAccumulator::with_text_cap(cap);
        let mut general = GeminiAccumulator::with_text_cap(cap);
        for line in lines {
            assert_eq!(
                fast.add_json(line),
                general.add_general(line),
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(fast.events(), general.events());
            assert_eq!(fast.snapshot_json(), general.snapshot_json());
        }
        assert_eq!(fast.snapshot_json(), general.snapshot_json());
        assert_eq!(fast.warnings(), general.warnings());
        assert_eq!(fast.unknown_events(), general.unknown_events());
    }

    const CHUNKS: [&str; 6] = [
        r#"{"candidates": [{"content": {"parts": [{"text": "Let","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 5,"totalTokenCount": 5},"modelVersion": "m1","responseId": "r1"}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": " me\n\u00e9\ud83d\ude00","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 5,"totalTokenCount": 7,"details": [{"modality": "TEXT","tokenCount": 2}]},"modelVersion": "m1","responseId": "r1","vendor": {"x": [1, 2.5e3]}}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": "Hel","thought": null,"thoughtSignature": null},{"functionCall": {"name": "f","args": {"a": 1}},"thoughtSignature": "s1"}],"role": "model","extra": 1},"index": 0,"safetyRatings": []},{"content": {"parts": [{"text": "B"}]},"index": 1}],"usageMetadata": {"totalTokenCount": 9},"createTime": "t","modelVersion": "m2"}"#,
        r#"{"candidates": [{"index": 1,"content": {"parts": [{"text": "b","thoughtSignature": "s2"},{"text": "c"}]}},{"content": {"parts": [{"text": "lo"},{"executableCode": {"code": "x"}}]},"finishReason": "STOP"}],"promptFeedback": {"blockReason": null},"usageMetadata": null}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": "!","thought": false}]},"index": 0}],"usageMetadata": {"totalTokenCount": 12},"error": null}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "s3"}],"role": "model"},"index": 0,"finishReason": "STOP","citationMetadata": {"citations": [{"uri": "u"}]}}],"responseId": "r2"}"#,
    ];

    #[test]
    fn fast_path_agrees_with_the_general_one() {
        let chunks: Vec<&[u8]> = CHUNKS.iter().map(|c| c.as_bytes()).collect();
        // Every chunk but the first (and `[DONE]`) goes the fast way.
        let mut acc = GeminiAccumulator::new();
        acc.add_json(chunks[0]).unwrap();
        for chunk in chunks[1..].iter().filter(|c| !is_done_marker(c)) {
            assert!(
                acc.add_fast(chunk).is_some(),
                "{}",
                String::from_utf8_lossy(chunk)
            );
        }
        for cap in [None, Some(6), Some(1 << 20)] {
            agree(&chunks, cap);
        }
        // Error, malformed and odd chunks in between.
        let mut odd = chunks.clone();
        for extra in [
            &br#"{"error": {"message": "busy"}}"#[..],
            br#"{"candidates": [], "candidates": []}"#,
            br#"{"candidates": [{"index": 0, "index": 1}]}"#,
            br#"{"candidates": [{"index": 1.0, "content": {"parts": [{"text": "x"}]}}]}"#,
            br#"{"candidates": {"x": 1}}"#,
            br#"{"candidates": [3, {"content": {"parts": [{"text": "y"}, 5, {"text": 5}]}}]}"#,
            br#"{"candidates": [{"content": {"parts": [{"text": "y", "text": "z"}]}}]}"#,
            br#"{"candidates": [{"content": {"parts": [{"text": "y"}], "parts": []}}]}"#,
            br#"{"usageMetadata": {"n": 1e400}}"#,
            br#"{"usageMetadata": {"n": 123456789012345678901234}}"#,
            br#"{"modelVersion": "m\u0041"}"#,
            br#"{"responseId": "r\ud800"}"#,
            b"{\"candidates\": []}\n",
            b"[1]",
        ] {
            odd.insert(3, extra);
        }
        agree(&odd, None);
    }

    /// Runs of one shape (read by the template after the first of the run), with the texts, usage
    /// and kinds changing, and each chunk of the run mutated.
    #[test]
    fn template_agrees_with_the_general_path() {
        let run = [
            r#"{"candidates": [{"content": {"parts": [{"text": "a","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"n": 1},"modelVersion": "m"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "b\n\"\u00e9","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"n": 2, "d": [{"m": "TEXT"}]},"modelVersion": "m"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "c","thought": true}],"role": "model"},"index": 0}],"usageMetadata": null,"modelVersion": "m"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "d","thought": true}],"role": "model"},"index": 0}],"usageMetadata": 7,"modelVersion": "m"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "e"}],"role": "model"},"index": 0}],"usageMetadata": {"n": 3},"modelVersion": "m"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "f"}],"role": "model"},"index": 0}],"usageMetadata": {"n": 4},"modelVersion": "m"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "g"}],"role": "model"},"index": 0}],"usageMetadata": {"n": 1e400},"modelVersion": "m"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "h"}],"role": "model"},"index": 0}],"usageMetadata": {"n": 5},"modelVersion": "m2"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "i"}, {"text": "j"}],"role": "model"},"index": 1}],"usageMetadata": {"n": 6},"modelVersion": "m2"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "k"}, {"text": "l"}],"role": "model"},"index": 1}],"usageMetadata": {"n": 7},"modelVersion": "m2"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "s"}],"role": "model"},"index": 0,"finishReason": "STOP"}],"usageMetadata": {"n": 8},"modelVersion": "m2"}"#,
        ];
        let lines: Vec<&[u8]> = run.iter().map(|c| c.as_bytes()).collect();
        let mut acc = GeminiAccumulator::new();
        for line in &lines[..2] {
            acc.add_json(line).unwrap();
        }
        // The texts and the usage's numbers are the holes.
        let same_shape = br#"{"candidates": [{"content": {"parts": [{"text": "zz\t","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"n": -42.5e1, "d": [{"m": "TEXT"}]},"modelVersion": "m"}"#;
        assert!(
            acc.template.read(same_shape).is_some(),
            "a run is read by the template"
        );
        for cap in [None, Some(3), Some(12)] {
            agree(&lines, cap);
        }
        for at in 1..lines.len() {
            for mutated in crate::accumulate::mutations(lines[at]) {
                let mut mutated_lines = lines.clone();
                mutated_lines[at] = &mutated;
                agree(&mutated_lines, Some(12));
            }
        }
    }

    #[test]
    fn fast_path_agrees_on_mutated_chunks() {
        for at in 1..CHUNKS.len() {
            for mutated in crate::accumulate::mutations(CHUNKS[at].as_bytes()) {
                let mut lines: Vec<&[u8]> = CHUNKS.iter().map(|c| c.as_bytes()).collect();
                lines[at] = &mutated;
                agree(&lines, Some(16));
            }
        }
    }

    #[test]
    fn fast_path_agrees_on_the_corpus() {
        for lines in corpus_lines("gemini") {
            let lines: Vec<&[u8]> = lines
                .iter()
                .filter(|l| !l.is_empty())
                .map(|l| l.as_bytes())
                .collect();
            agree(&lines, None);
            agree(&lines, Some(64));
        }
    }

    /// Every recording: the joined texts are the chunks' texts, the other parts all there, the
    /// last chunk's usage and finish reason kept.
    #[test]
    fn corpus() {
        let streams = corpus_lines("gemini");
        assert_eq!(streams.len(), 9);
        for lines in streams {
            let chunks: Vec<Value> = lines
                .iter()
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let mut acc = GeminiAccumulator::new();
            for line in lines.iter().filter(|l| !l.is_empty()) {
                acc.add_json(line.as_bytes()).unwrap();
            }
            let got: Value = serde_json::from_slice(&acc.snapshot_json().unwrap()).unwrap();
            let (mut text, mut thoughts, mut others) = (String::new(), String::new(), Vec::new());
            for chunk in &chunks {
                for part in chunk["candidates"][0]["content"]["parts"]
                    .as_array()
                    .unwrap()
                {
                    match (part.get("text"), part.get("thought")) {
                        (Some(Value::String(t)), Some(Value::Bool(true))) => thoughts.push_str(t),
                        (Some(Value::String(t)), _) => text.push_str(t),
                        _ => others.push(part.clone()),
                    }
                }
            }
            let parts = got["candidates"][0]["content"]["parts"].as_array().unwrap();
            let joined = |thought: bool| -> String {
                parts
                    .iter()
                    .filter(|p| p.get("text").is_some())
                    .filter(|p| (p.get("thought") == Some(&Value::Bool(true))) == thought)
                    .map(|p| p["text"].as_str().unwrap())
                    .collect()
            };
            assert_eq!(joined(false), text);
            assert_eq!(joined(true), thoughts);
            let kept: Vec<&Value> = parts.iter().filter(|p| p.get("text").is_none()).collect();
            assert_eq!(kept, others.iter().collect::<Vec<_>>());
            let last = chunks.last().unwrap();
            assert_eq!(got["usageMetadata"], last["usageMetadata"]);
            assert_eq!(got["responseId"], last["responseId"]);
            let reason = chunks
                .iter()
                .rev()
                .find_map(|c| c["candidates"][0].get("finishReason"));
            assert_eq!(got["candidates"][0].get("finishReason"), reason);
        }
    }
}
