//! The Completions accumulator: `text_completion` chunks in, one `text_completion` out.
//!
//! The legacy `POST /v1/completions` stream sends each choice's text in pieces; the openai SDK
//! hands the chunks out as they are (it has no accumulator for this API). This joins them:
//!
//! - A chunk with a non-null `error` pushes the warning `"error event: {error.message}"` and
//!   counts in `unknown_events()`. A chunk whose `object` is present and is not
//!   `text_completion` is skipped and counted there too. A chunk whose `object` is not a
//!   string, or whose read fields (`object`, `choices`, `usage`, `system_fingerprint`,
//!   `error`) are duplicated, is malformed: counted there, with the warning
//!   `"completions: malformed chunk ignored"`. `[DONE]` is ignored.
//! - The first accepted chunk gives the top level: all its fields, with
//!   `object: "text_completion"`, and `id: ""`, `created: 0`, `model: ""` when missing. Later
//!   chunks replace `usage` and `system_fingerprint` with theirs when not null.
//! - `choices[]` are matched by their `index` (default 0), in order of first appearance; a
//!   choice seen for the first time is `{index, text: "", logprobs: null, finish_reason: null}`.
//!   Each chunk's choice: a string `text` is appended; `logprobs` (an object) is taken whole
//!   when the choice has none, else each of its non-empty `tokens`, `token_logprobs`,
//!   `top_logprobs` and `text_offset` lists is appended to the choice's (its other fields
//!   replace the choice's when not null); a non-empty `finish_reason` replaces the choice's;
//!   any other field (`stop_reason`, ...) replaces the choice's when not null. A `choices`
//!   that is not an array, or an entry that is not an object, is skipped.
//! - Text cap: a piece that would take a choice's text past the cap is not appended, see
//!   [`AccumulateError::TextTooLarge`].

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{
    error_warning, is_done_marker, json, parse_event, raw_object, AccumulateError, Rejected, Str,
    TextCap, DEFAULT_TEXT_CAP,
};

/// The chunk fields read on every chunk; the first chunk is also parsed whole.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    object: Option<Str<'a>>,
    #[serde(borrow)]
    choices: Option<&'a RawValue>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(borrow)]
    system_fingerprint: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// The logprobs lists appended chunk by chunk.
const LOGPROB_LISTS: [&str; 4] = ["tokens", "token_logprobs", "top_logprobs", "text_offset"];

/// Builds one `text_completion` from its stream chunks. See the module docs.
#[derive(Debug)]
pub struct CompletionsAccumulator {
    /// The top level from the first chunk; its `choices` value is a placeholder.
    completion: Option<Map<String, Value>>,
    choices: Vec<Map<String, Value>>,
    warnings: Vec<String>,
    unknown_events: u64,
    events: u64,
    cap: TextCap,
}

impl Default for CompletionsAccumulator {
    fn default() -> Self {
        Self::new()
    }
}

impl CompletionsAccumulator {
    /// An accumulator whose texts are capped at [`DEFAULT_TEXT_CAP`] bytes each.
    pub fn new() -> Self {
        Self::with_text_cap(Some(DEFAULT_TEXT_CAP))
    }

    /// An accumulator whose choice texts are capped at `limit` bytes each (`None`: no cap);
    /// see [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        CompletionsAccumulator {
            completion: None,
            choices: Vec::new(),
            warnings: Vec::new(),
            unknown_events: 0,
            events: 0,
            cap: TextCap::new(limit),
        }
    }

    /// One chunk's JSON payload (the SSE `data`); `[DONE]` is ignored.
    pub fn add_json(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        if is_done_marker(payload) {
            return Ok(());
        }
        let chunk: Chunk<'_> = match parse_event(payload, self.events) {
            Ok(chunk) => chunk,
            Err(Rejected::Error(e)) => return Err(e),
            Err(Rejected::Malformed(_)) => {
                self.events += 1;
                self.unknown_events += 1;
                self.warnings
                    .push("completions: malformed chunk ignored".to_owned());
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
        if chunk
            .object
            .as_ref()
            .is_some_and(|o| o.0 != "text_completion")
        {
            self.unknown_events += 1;
            return Ok(());
        }
        match &mut self.completion {
            None => self.completion = Some(first_top_level(payload)),
            Some(completion) => {
                for (key, raw) in [
                    ("usage", chunk.usage),
                    ("system_fingerprint", chunk.system_fingerprint),
                ] {
                    if let Some(value) =
                        raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                    {
                        completion.insert(key.to_owned(), value);
                    }
                }
            }
        }
        if let Some(Ok(Value::Array(choices))) = chunk
            .choices
            .map(|r| serde_json::from_str::<Value>(r.get()))
        {
            for choice in choices {
                if let Value::Object(choice) = choice {
                    self.add_choice(choice);
                }
            }
        }
        self.cap.check(self.events - 1)
    }

    fn add_choice(&mut self, fields: Map<String, Value>) {
        let index = fields.get("index").and_then(Value::as_u64).unwrap_or(0);
        let has = |c: &Map<String, Value>| c.get("index").and_then(Value::as_u64) == Some(index);
        let position = match self.choices.get(index as usize) {
            Some(c) if has(c) => Some(index as usize),
            _ => self.choices.iter().position(has),
        };
        let choice = match position {
            Some(p) => &mut self.choices[p],
            None => {
                let mut fresh = Map::new();
                fresh.insert("index".to_owned(), Value::from(index));
                fresh.insert("text".to_owned(), Value::String(String::new()));
                fresh.insert("logprobs".to_owned(), Value::Null);
                fresh.insert("finish_reason".to_owned(), Value::Null);
                self.choices.push(fresh);
                self.choices.last_mut().expect("just pushed")
            }
        };
        for (key, value) in fields {
            match (key.as_str(), value) {
                ("index", _) | (_, Value::Null) => {}
                ("text", Value::String(piece)) => match choice.get_mut("text") {
                    Some(Value::String(text)) => {
                        if self.cap.admits(text.len(), piece.len()) {
                            text.push_str(&piece);
                        }
                    }
                    _ => {
                        if self.cap.admits(0, piece.len()) {
                            choice.insert(key, Value::String(piece));
                        }
                    }
                },
                ("text", _) => {}
                ("logprobs", Value::Object(new)) => match choice.get_mut("logprobs") {
                    Some(Value::Object(ours)) => merge_logprobs(ours, new),
                    _ => {
                        choice.insert(key, Value::Object(new));
                    }
                },
                ("logprobs", _) => {}
                ("finish_reason", Value::String(s)) if s.is_empty() => {}
                (_, value) => {
                    choice.insert(key, value);
                }
            }
        }
    }

    /// The completion built so far as JSON bytes (`None` before the first chunk).
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

    /// Error chunks and malformed chunks, in order.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Chunks kept out of the result: error chunks, other `object`s, malformed chunks.
    pub fn unknown_events(&self) -> u64 {
        self.unknown_events
    }

    /// Chunks added (every accepted payload but `[DONE]`).
    pub fn events(&self) -> u64 {
        self.events
    }
}

/// The top level of the completion from the first chunk (choices left as a placeholder).
fn first_top_level(payload: &[u8]) -> Map<String, Value> {
    let mut top: Map<String, Value> = serde_json::from_slice(payload).unwrap_or_default();
    top.insert("choices".to_owned(), Value::Null);
    top.insert(
        "object".to_owned(),
        Value::String("text_completion".to_owned()),
    );
    for (key, default) in [
        ("id", Value::String(String::new())),
        ("created", Value::from(0)),
        ("model", Value::String(String::new())),
    ] {
        top.entry(key).or_insert(default);
    }
    top
}

/// Appends a chunk's logprobs lists to the choice's (see the module docs).
fn merge_logprobs(ours: &mut Map<String, Value>, new: Map<String, Value>) {
    for (key, value) in new {
        let is_list = LOGPROB_LISTS.contains(&key.as_str());
        match value {
            Value::Null => {}
            Value::Array(items) if is_list => {
                if items.is_empty() {
                    continue;
                }
                match ours.get_mut(&key) {
                    Some(Value::Array(list)) => list.extend(items),
                    _ => {
                        ours.insert(key, Value::Array(items));
                    }
                }
            }
            _ if is_list => {} // not a list: ours stays
            value => {
                ours.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(acc: &CompletionsAccumulator) -> Value {
        serde_json::from_slice(&acc.snapshot_json().unwrap()).unwrap()
    }

    #[test]
    fn joins_text_and_logprobs_per_choice() {
        let mut acc = CompletionsAccumulator::new();
        for line in [
            r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"Hel","logprobs":{"tokens":["Hel"],"token_logprobs":[-0.5],"top_logprobs":[{"Hel":-0.5}],"text_offset":[0]},"finish_reason":null}]}"#,
            r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[{"index":1,"text":"Bye","finish_reason":null},{"index":0,"text":"lo","logprobs":{"tokens":["lo"],"token_logprobs":[-0.25],"top_logprobs":[{"lo":-0.25}],"text_offset":[3]},"finish_reason":"length","stop_reason":null}]}"#,
            r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[{"index":1,"text":"","finish_reason":"stop","stop_reason":"\n"}]}"#,
            r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}"#,
            "[DONE]",
        ] {
            acc.add_json(line.as_bytes()).unwrap();
        }
        let expected: Value = serde_json::from_str(
            r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[
                {"index":0,"text":"Hello","logprobs":{"tokens":["Hel","lo"],"token_logprobs":[-0.5,-0.25],"top_logprobs":[{"Hel":-0.5},{"lo":-0.25}],"text_offset":[0,3]},"finish_reason":"length"},
                {"index":1,"text":"Bye","logprobs":null,"finish_reason":"stop","stop_reason":"\n"}],
              "usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}"#,
        )
        .unwrap();
        assert_eq!(snapshot(&acc), expected);
        assert_eq!((acc.events(), acc.unknown_events()), (4, 0));
    }

    #[test]
    fn errors_other_objects_and_malformed_chunks() {
        let mut acc = CompletionsAccumulator::new();
        acc.add_json(br#"{"error":{"message":"boom"}}"#).unwrap();
        acc.add_json(br#"{"object":"chat.completion.chunk","choices":[{"text":"x"}]}"#)
            .unwrap();
        acc.add_json(br#"{"object":5,"choices":[]}"#).unwrap();
        acc.add_json(br#"{"choices":[{"text":"ok"}, 3], "model": "m"}"#)
            .unwrap();
        assert_eq!(
            acc.warnings(),
            ["error event: boom", "completions: malformed chunk ignored"]
        );
        assert_eq!((acc.events(), acc.unknown_events()), (4, 3));
        let got = snapshot(&acc);
        assert_eq!(got["choices"][0]["text"], "ok");
        assert_eq!(got["object"], "text_completion");
        assert!(acc.add_json(b"\"text\"").is_err());
        assert!(acc.add_json(b"{\"choices\":").is_err());
    }

    #[test]
    fn text_cap() {
        let mut acc = CompletionsAccumulator::with_text_cap(Some(3));
        acc.add_json(br#"{"choices":[{"text":"ab"}]}"#).unwrap();
        let err = acc.add_json(br#"{"choices":[{"text":"cd"}]}"#).unwrap_err();
        assert!(matches!(
            err,
            AccumulateError::TextTooLarge {
                length: 4,
                limit: 3,
                ..
            }
        ));
        acc.add_json(br#"{"choices":[{"text":"c"}]}"#).unwrap();
        assert_eq!(snapshot(&acc)["choices"][0]["text"], "abc");
    }
}
