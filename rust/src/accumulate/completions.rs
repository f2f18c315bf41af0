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

use super::fast::{self, Hole, Raw, Template};
use super::{
    append_text, fast_top, is_done_marker, json, openai_top_level, position_by_index, raw_objects,
    replace_fields, AccumulateError, ChunkHead, Replaced, Str, Tally, TextCap,
};

/// The top-level fields later chunks replace when not null.
const REPLACED: [&str; 2] = ["usage", "system_fingerprint"];

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

impl<'a> ChunkHead<'a> for Chunk<'a> {
    fn error(&self) -> Option<&'a RawValue> {
        self.error
    }
    fn object(&self) -> Option<&str> {
        self.object.as_ref().map(|o| &*o.0)
    }
}

/// The logprobs lists appended chunk by chunk.
const LOGPROB_LISTS: [&str; 4] = ["tokens", "token_logprobs", "top_logprobs", "text_offset"];

/// What a learned chunk did with one hole of its [`Template`].
#[derive(Debug)]
enum Action {
    /// Appended a text to the choice at this position.
    Append(usize),
    /// Replaced a top-level field.
    Replace(&'static str),
}

type Learn<'a> = fast::Learn<'a, Action>;

/// Builds one `text_completion` from its stream chunks. See the module docs.
#[derive(Debug)]
pub struct CompletionsAccumulator {
    /// The top level from the first chunk; its `choices` value is a placeholder.
    completion: Option<Map<String, Value>>,
    /// Replaced top-level fields not yet built into `completion` (the fast path's).
    replaced: Replaced,
    /// The shape of the last chunk [`add_fast`](Self::add_fast) read, and what it did.
    template: Template,
    actions: Vec<Action>,
    choices: Vec<Map<String, Value>>,
    tally: Tally,
    cap: TextCap,
}

impl CompletionsAccumulator {
    /// An accumulator whose choice texts are capped at `limit` bytes each (`None`: no cap);
    /// see [`AccumulateError::TextTooLarge`].
    pub fn with_text_cap(limit: Option<usize>) -> Self {
        CompletionsAccumulator {
            completion: None,
            replaced: Replaced::default(),
            template: Template::default(),
            actions: Vec::new(),
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
        if self.completion.is_some() {
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
        let Some(completion) = self.completion.as_mut() else {
            return;
        };
        for (hole, action) in holes.into_iter().flatten().zip(&self.actions) {
            match (hole, action) {
                (Hole::Text(text), Action::Append(choice)) => {
                    append_text(&mut self.choices[*choice], "text", &text, &mut self.cap)
                }
                (Hole::Value(raw), Action::Replace(key)) => {
                    self.replaced.keep(completion, key, raw)
                }
                // Never: the holes are read in the order they were learned with their actions.
                _ => debug_assert!(false, "a hole of another kind"),
            }
        }
    }

    /// [`add_json`](Self::add_json) without the fast path (its reference, in the tests).
    fn add_general(&mut self, payload: &[u8]) -> Result<(), AccumulateError> {
        if is_done_marker(payload) {
            return Ok(());
        }
        if let Some(completion) = &mut self.completion {
            self.replaced.flush(completion);
        }
        let Some(chunk) =
            self.tally
                .admit::<Chunk<'_>>(payload, "completions", Some("text_completion"))?
        else {
            return Ok(());
        };
        match &mut self.completion {
            None => self.completion = Some(openai_top_level(payload, "text_completion", &[], &[])),
            Some(completion) => replace_fields(
                completion,
                REPLACED
                    .into_iter()
                    .zip([chunk.usage, chunk.system_fingerprint]),
            ),
        }
        for choice in raw_objects(chunk.choices) {
            self.add_choice(choice);
        }
        self.cap.check(self.tally.events - 1)
    }

    /// A later chunk the usual way round (see `docs/internals.md`): read with the tap's reader,
    /// each choice's text appended without building it, `usage` and `system_fingerprint` kept
    /// as JSON (see [`Replaced`]), the other choice fields built. `None` (nothing changed) for
    /// anything else: the first chunk, an error chunk, another `object`, a malformed chunk, a
    /// `choices` that is not an array of objects, an `index` that is not a plain integer, a
    /// field twice, or whatever the reader leaves to serde. The chunk is read twice: once
    /// checking every read that can fail, then applied (the same reads, which then succeed).
    fn add_fast(&mut self, payload: &[u8]) -> Option<()> {
        let (top, choices) = fast_top(payload, &REPLACED, "choices", Some("text_completion"))?;
        let mut learn = Learn::new();
        if let Some(choices) = choices {
            choices.items(|c| self.fast_choice(c, None))?;
            choices.items(|c| self.fast_choice(c, Some(&mut learn)))?;
        }
        let completion = self.completion.as_mut()?;
        self.replaced
            .keep_all(completion, REPLACED, top, &mut learn, Action::Replace);
        self.template.learn_from(payload, learn, &mut self.actions);
        Some(())
    }

    /// One choice of [`add_fast`](Self::add_fast): checked (`learn` None: nothing changes) or
    /// applied as [`add_choice`](Self::add_choice) applies it (what it did noted in `learn`).
    fn fast_choice<'a>(&mut self, choice: Raw<'a>, learn: Option<&mut Learn<'a>>) -> Option<()> {
        let apply = learn.is_some();
        let mut index = None;
        let mut keys: [&str; 8] = [""; 8];
        let mut n = 0;
        choice.entries(|key, value| {
            // A repeated key: serde's map keeps the last value, at the first one's place.
            if keys[..n].contains(&key) || n == keys.len() {
                return None;
            }
            keys[n] = key;
            n += 1;
            if key == "index" {
                index = Some(value.unsigned()?);
            } else if !apply && !value.is_null() {
                if key == "text" && value.first() == b'"' {
                    value.string()?;
                } else {
                    value.build()?;
                }
            }
            Some(())
        })?;
        let Some(learn) = learn else {
            return Some(());
        };
        let at = self.choice(index.unwrap_or(0));
        let (ours, cap) = (&mut self.choices[at], &mut self.cap);
        choice.entries(|key, value| {
            match (key, value.first()) {
                ("index", _) | (_, b'n') => {}
                ("text", b'"') => {
                    append_text(ours, "text", &value.string()?, cap);
                    learn.holes.push((value, true, Action::Append(at)));
                }
                ("text", _) => {}
                // Its lists are appended: not the same when done again.
                ("logprobs", b'{') => {
                    learn.ok = false;
                    set_field(ours, key.to_owned(), value.build()?);
                }
                ("finish_reason", b'"') if value.json() == "\"\"" => {}
                (key, _) => set_field(ours, key.to_owned(), value.build()?),
            }
            Some(())
        })
    }

    /// Where the choice `index` is, created (`{index, text: "", logprobs: null,
    /// finish_reason: null}`) if new.
    fn choice(&mut self, index: u64) -> usize {
        position_by_index(&self.choices, index).unwrap_or_else(|| {
            let mut fresh = Map::new();
            fresh.insert("index".to_owned(), Value::from(index));
            fresh.insert("text".to_owned(), Value::String(String::new()));
            fresh.insert("logprobs".to_owned(), Value::Null);
            fresh.insert("finish_reason".to_owned(), Value::Null);
            self.choices.push(fresh);
            self.choices.len() - 1
        })
    }

    fn add_choice(&mut self, fields: Map<String, Value>) {
        let index = fields.get("index").and_then(Value::as_u64).unwrap_or(0);
        let at = self.choice(index);
        let choice = &mut self.choices[at];
        for (key, value) in fields {
            match (key.as_str(), value) {
                ("index", _) | (_, Value::Null) => {}
                ("text", Value::String(piece)) => {
                    append_text(choice, "text", &piece, &mut self.cap)
                }
                ("text", _) => {}
                ("finish_reason", Value::String(s)) if s.is_empty() => {}
                (_, value) => set_field(choice, key, value),
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
                self.replaced.write(out, key, value);
            }
        });
        Some(out)
    }

    tally_getters! {
        /// Error chunks and malformed chunks, in order.
        warnings;
        /// Chunks kept out of the result: error chunks, other `object`s, malformed chunks.
        unknown_events;
        /// Chunks added (every accepted payload but `[DONE]`).
        events;
    }
}

/// A choice field (not `index`, `text`, null, or an empty `finish_reason`) applied to the choice:
/// `logprobs` (an object) merged, a `logprobs` of another type ignored, any other field set.
fn set_field(choice: &mut Map<String, Value>, key: String, value: Value) {
    match (key.as_str(), value) {
        ("logprobs", Value::Object(new)) => match choice.get_mut("logprobs") {
            Some(Value::Object(ours)) => merge_logprobs(ours, new),
            _ => {
                choice.insert(key, Value::Object(new));
            }
        },
        ("logprobs", _) => {}
        (_, value) => {
            choice.insert(key, value);
        }
    }
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

    /// Feeds `lines` through the fast path and through the general one alone: the same results
    /// (after every chunk), errors, warnings and counts.
    fn agree(lines: &[&[u8]], cap: Option<usize>) {
        let mut fast = CompletionsAccumulator::with_text_cap(cap);
        let mut general = CompletionsAccumulator::with_text_cap(cap);
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
        r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"Hel","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
        r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"lo\n\u00e9\ud83d\ude00","logprobs":{"tokens":["lo"],"token_logprobs":[-0.25],"top_logprobs":[{"lo":-0.25}],"text_offset":[3]},"finish_reason":null,"stop_reason":null}],"usage":null,"vendor":{"a":[1,2.5]}}"#,
        r#"{"id":"c1","object":"text_completion","created":7,"model":"m","choices":[{"index":1,"text":"Bye","finish_reason":"","seed":3},{"text":" there","logprobs":{"tokens":[],"extra":1}}],"system_fingerprint":"fp"}"#,
        r#"{"id":"c1","created":7,"model":"m","choices":[{"index":1,"text":"","finish_reason":"stop","stop_reason":"\n","logprobs":7},{"index":0,"text":5}],"usage":{"prompt_tokens":2}}"#,
        r#"{"id":"c1","object":null,"choices":[{"index":0,"text":"!","finish_reason":"length"}],"usage":{"prompt_tokens":2,"total_tokens":5},"system_fingerprint":"fp","error":null}"#,
        "[DONE]",
    ];

    #[test]
    fn fast_path_agrees_with_the_general_one() {
        let chunks: Vec<&[u8]> = CHUNKS.iter().map(|c| c.as_bytes()).collect();
        // Every chunk but the first (and `[DONE]`) goes the fast way.
        let mut acc = CompletionsAccumulator::new();
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
        let mut odd = chunks.clone();
        for extra in [
            &br#"{"error":{"message":"busy"}}"#[..],
            br#"{"object":"chat.completion.chunk","choices":[{"text":"x"}]}"#,
            br#"{"object":5,"choices":[]}"#,
            br#"{"object":"text_completion","object":"text_completion"}"#,
            br#"{"choices":[{"index":0,"index":1}]}"#,
            br#"{"choices":[{"index":-1,"text":"x"}]}"#,
            br#"{"choices":[{"text":"y","text":"z"}]}"#,
            br#"{"choices":{"text":"y"}}"#,
            br#"{"choices":[3,{"text":"w"}]}"#,
            br#"{"usage":{"n":1e400}}"#,
            br#"{"usage":{"n":-0}}"#,
            br#"{"system_fingerprint":"f\ud800"}"#,
            b"{\"choices\":[]}\r",
            b"\"text\"",
        ] {
            odd.insert(3, extra);
        }
        agree(&odd, None);
    }

    /// Runs of one shape (read by the template after the first of the run), with the texts and
    /// usage changing, and each chunk of the run mutated.
    #[test]
    fn template_agrees_with_the_general_path() {
        let run = [
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"b\n\"\u00e9","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"c","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"d","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"n":1}}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"d2","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"n":-12.5e-3}}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"e","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"n":[2, 3.5]}}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"f","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"n":1e400}}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":1,"text":"g","logprobs":{"tokens":["g"]},"finish_reason":null}],"usage":null}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":1,"text":"h","logprobs":{"tokens":["h"]},"finish_reason":null}],"usage":null}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"i","logprobs":null,"finish_reason":"length","stop_reason":null},{"index":1,"text":"j"}],"usage":null}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"k","logprobs":null,"finish_reason":"length","stop_reason":null},{"index":1,"text":"l"}],"usage":null}"#,
            r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9}}"#,
        ];
        let lines: Vec<&[u8]> = run.iter().map(|c| c.as_bytes()).collect();
        let mut acc = CompletionsAccumulator::new();
        for line in &lines[..2] {
            acc.add_json(line).unwrap();
        }
        assert!(
            acc.template.read(lines[2]).is_some(),
            "a run is read by the template"
        );
        for cap in [None, Some(3), Some(7)] {
            agree(&lines, cap);
        }
        for at in 1..lines.len() {
            for mutated in crate::accumulate::mutations(lines[at]) {
                let mut mutated_lines = lines.clone();
                mutated_lines[at] = &mutated;
                agree(&mutated_lines, Some(7));
            }
        }
    }

    #[test]
    fn fast_path_agrees_on_mutated_chunks() {
        for at in 1..CHUNKS.len() - 1 {
            for mutated in crate::accumulate::mutations(CHUNKS[at].as_bytes()) {
                let mut lines: Vec<&[u8]> = CHUNKS.iter().map(|c| c.as_bytes()).collect();
                lines[at] = &mutated;
                agree(&lines, Some(8));
            }
        }
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
