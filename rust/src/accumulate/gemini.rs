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

use super::{
    error_warning, json, parse_event, raw_object, AccumulateError, Rejected, TextCap,
    DEFAULT_TEXT_CAP,
};

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

/// Builds one `GenerateContentResponse` from a stream's chunks. See the module docs.
#[derive(Debug)]
pub struct GeminiAccumulator {
    /// The top level from the first chunk; its `candidates` value is a placeholder.
    response: Option<Map<String, Value>>,
    candidates: Vec<Map<String, Value>>,
    warnings: Vec<String>,
    unknown_events: u64,
    events: u64,
    cap: TextCap,
}

impl Default for GeminiAccumulator {
    fn default() -> Self {
        Self::new()
    }
}

impl GeminiAccumulator {
    /// An accumulator whose texts are capped at [`DEFAULT_TEXT_CAP`] bytes each.
    pub fn new() -> Self {
        Self::with_text_cap(Some(DEFAULT_TEXT_CAP))
    }

    /// An accumulator whose joined texts (one part's text) are capped at `limit` bytes each
    /// (`None`: no cap); see [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        GeminiAccumulator {
            response: None,
            candidates: Vec::new(),
            warnings: Vec::new(),
            unknown_events: 0,
            events: 0,
            cap: TextCap::new(limit),
        }
    }

    /// One chunk's JSON payload (the SSE `data`).
    pub fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        let chunk: Chunk<'_> = match parse_event(payload, self.events) {
            Ok(chunk) => chunk,
            Err(Rejected::Error(e)) => return Err(e),
            Err(Rejected::Malformed(_)) => {
                self.events += 1;
                self.unknown_events += 1;
                self.warnings
                    .push("gemini: malformed chunk ignored".to_owned());
                return Ok(());
            }
        };
        self.events += 1;
        if let Some(error) = chunk.error {
            let message = raw_object(Some(error)).and_then(|mut e| e.remove("message"));
            self.warnings.push(error_warning(message.as_ref()));
            self.unknown_events += 1;
            return Ok(());
        }
        match &mut self.response {
            None => {
                let mut top: Map<String, Value> =
                    serde_json::from_slice(payload).unwrap_or_default();
                top.insert("candidates".to_owned(), Value::Null);
                self.response = Some(top);
            }
            Some(response) => {
                for (key, raw) in [
                    ("usageMetadata", chunk.usage_metadata),
                    ("modelVersion", chunk.model_version),
                    ("responseId", chunk.response_id),
                    ("promptFeedback", chunk.prompt_feedback),
                    ("createTime", chunk.create_time),
                ] {
                    if let Some(value) =
                        raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                    {
                        response.insert(key.to_owned(), value);
                    }
                }
            }
        }
        if let Some(Ok(Value::Array(candidates))) = chunk
            .candidates
            .map(|r| serde_json::from_str::<Value>(r.get()))
        {
            for candidate in candidates {
                if let Value::Object(candidate) = candidate {
                    self.add_candidate(candidate);
                }
            }
        }
        self.cap.check(self.events - 1)
    }

    fn add_candidate(&mut self, mut fields: Map<String, Value>) {
        let index = fields.get("index").and_then(Value::as_u64).unwrap_or(0);
        let has = |c: &Map<String, Value>| c.get("index").and_then(Value::as_u64) == Some(index);
        let position = match self.candidates.get(index as usize) {
            Some(c) if has(c) => Some(index as usize),
            _ => self.candidates.iter().position(has),
        };
        let candidate = match position {
            Some(p) => &mut self.candidates[p],
            None => {
                let mut fresh = Map::new();
                fresh.insert("content".to_owned(), Value::Object(Map::new()));
                fresh.insert("index".to_owned(), Value::from(index));
                self.candidates.push(fresh);
                self.candidates.last_mut().expect("just pushed")
            }
        };
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
                json::write_value(out, value);
            }
        });
        Some(out)
    }

    /// Error chunks and malformed chunks, in order.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Chunks kept out of the result: error chunks and malformed chunks.
    pub fn unknown_events(&self) -> u64 {
        self.unknown_events
    }

    /// Chunks added.
    pub fn events(&self) -> u64 {
        self.events
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

fn signature(part: &Map<String, Value>) -> Option<&Value> {
    part.get("thoughtSignature").filter(|s| !s.is_null())
}

/// Appends `part` to `parts`, or joins it to the last part (see the module docs).
fn merge_part(parts: &mut Vec<Value>, part: Value, cap: &mut TextCap) {
    let Value::Object(mut part) = part else {
        parts.push(part);
        return;
    };
    let Some(kind) = text_kind(&part) else {
        parts.push(Value::Object(part));
        return;
    };
    if let Some(Value::Object(last)) = parts.last_mut() {
        if text_kind(last) == Some(kind)
            && (signature(last).is_none() || signature(&part).is_none())
        {
            if let (Some(Value::String(text)), Some(Value::String(add))) =
                (last.get_mut("text"), part.get("text"))
            {
                if cap.admits(text.len(), add.len()) {
                    text.push_str(add);
                }
            }
            if let Some(sig) = part
                .shift_remove("thoughtSignature")
                .filter(|s| !s.is_null())
            {
                last.insert("thoughtSignature".to_owned(), sig);
            }
            return;
        }
    }
    if let Some(Value::String(text)) = part.get_mut("text") {
        if !cap.admits(0, text.len()) {
            text.clear();
        }
    }
    parts.push(Value::Object(part));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::corpus_lines;

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
