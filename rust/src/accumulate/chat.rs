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

use super::fast::{self, Hole, Raw, Template};
use super::{
    fast_top_with, is_done_marker, json, member, member_mut, openai_first_members,
    openai_top_level, openai_top_level_of, position_by_index, replace_fields, value_member,
    AccumulateError, ChunkHead, RawEntries, Replaced, Str, Tally, TextCap,
};

/// The top-level fields later chunks replace when not null, before the vendor members.
const REPLACED: [&str; 3] = ["usage", "system_fingerprint", "moderation"];

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

/// One step from a choice's `message` down to an object a delta merges into: a member, or a
/// list entry (`tool_calls`, then the call at position 2, then its `function`, say).
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Pos(usize),
}

/// What a learned chunk did with one hole of its [`Template`].
#[derive(Debug)]
enum Action {
    /// Merged a string (appended it) at `key` of the object at `path` under the `message` of
    /// the choice at position `choice` (see [`merge_string`]). `route`: where the string was
    /// found last time, each map's entry by its position (see [`routed_text`]), so that a chunk
    /// of the shape appends without hashing a key; empty until found.
    Text {
        choice: usize,
        path: Vec<Step>,
        key: String,
        route: Vec<usize>,
    },
    /// Replaced a top-level field.
    Replace(&'static str),
}

type Learn<'a> = fast::Learn<'a, Action>;

/// The most shapes a [`ChatAccumulator`] keeps: an `n = 4` stream's choices taking turns, or
/// two choices' text and tool call deltas.
const SHAPES: usize = 8;

/// A shape learned from a chunk [`add_fast`](ChatAccumulator::add_fast) read.
#[derive(Debug, Default)]
struct Shape {
    template: Template,
    /// What the chunk did with each of the template's holes, in order.
    actions: Vec<Action>,
    /// What a chunk of the shape sets whatever the state (see [`fast::Learn`] and
    /// [`note_entry`]), which it leaves as it is: so the shape holds only while nothing sets
    /// those otherwise.
    sets: String,
    /// The [`ChatAccumulator::clock`] when it was learned or last read (0: free): the least
    /// recently used goes first.
    used: u64,
    /// The shape read after this one last time, tried first after it.
    next: usize,
}

/// The value noted for a top-level field a shape replaces by a hole (see [`note_entry`]):
/// never JSON, so it agrees only with another hole.
const HOLE: &str = "\u{2}";

/// Builds a `ChatCompletion` from its stream chunks. See the module docs.
#[derive(Debug)]
pub struct ChatAccumulator {
    /// The top level from the first chunk; its `choices` value is a placeholder.
    completion: Option<Map<String, Value>>,
    /// Replaced top-level fields not yet built into `completion` (the fast path's).
    replaced: Replaced,
    /// The shapes of the last chunks [`add_fast`](Self::add_fast) read that make one (at most
    /// [`SHAPES`]), and the one learned or read last: the chunks of an `n = 2` stream take
    /// turns, and so do a choice's text and tool call deltas with another's. Kept together only
    /// when what they set agrees (see [`agree`]).
    shapes: Vec<Shape>,
    last: usize,
    /// Counts the shapes' uses (their [`Shape::used`]).
    clock: u64,
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
            replaced: Replaced::default(),
            shapes: Vec::new(),
            last: 0,
            clock: 0,
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
        if self.completion.is_none() {
            if self.add_first(payload).is_some() {
                self.tally.events += 1;
                return self.cap.check(self.tally.events - 1);
            }
        } else {
            if let Some((at, holes, _)) = self.read_shape(payload, false) {
                return self.add_shaped(at, holes);
            }
            if self.add_fast(payload).is_some() {
                self.tally.events += 1;
                return self.cap.check(self.tally.events - 1);
            }
        }
        self.forget_shapes();
        self.add_general(payload)
    }

    /// The shape that reads `payload` and its holes: first the one read after the last one
    /// last time (the turns of an `n`-choice stream come round in order), then the others. Any
    /// that reads it would do: no two shapes read the same payload, as one is learned only when
    /// every kept one misses.
    ///
    /// `framed`: `payload` may go on after the payload (see [`add_framed`](Self::add_framed));
    /// the holes are given with where the payload ends (else it ends `payload`).
    fn read_shape<'p>(
        &mut self,
        payload: &'p [u8],
        framed: bool,
    ) -> Option<(usize, fast::Holes<'p>, usize)> {
        let guess = self.guess();
        let read = |template: &mut Template| {
            let (holes, end) = template.read_at(payload)?;
            (framed || end == payload.len()).then_some((holes, end))
        };
        if let Some(shape) = self.shapes.get_mut(guess) {
            if let Some((holes, end)) = read(&mut shape.template) {
                return Some((guess, holes, end));
            }
        }
        if framed {
            // The others are tried when the framer gives the payload alone (a miss here is
            // often an event that goes on in the next chunk).
            return None;
        }
        self.shapes
            .iter_mut()
            .enumerate()
            .filter(|&(at, _)| at != guess)
            .find_map(|(at, shape)| {
                let (holes, end) = read(&mut shape.template)?;
                Some((at, holes, end))
            })
    }

    /// The shape tried first: the one read after the last one last time.
    fn guess(&self) -> usize {
        self.shapes
            .get(self.last)
            .map_or(usize::MAX, |shape| shape.next)
    }

    /// A chunk the shape at `at` read, with its holes.
    fn add_shaped(&mut self, at: usize, holes: fast::Holes<'_>) -> Result<(), AccumulateError> {
        self.clock += 1;
        self.shapes[at].used = self.clock;
        if let Some(before) = self.shapes.get_mut(self.last) {
            before.next = at;
        }
        self.last = at;
        self.add_templated(at, holes);
        self.tally.events += 1;
        self.cap.check(self.tally.events - 1)
    }

    /// The chunk at the start of `bytes` (raw SSE at an event boundary) taken whole, if it is
    /// `data: PAYLOAD` and a blank line with a payload a kept shape reads (see
    /// `Accumulate::add_framed`): added as [`add_json`](Self::add_json) adds it, so the framer
    /// need not look for its line ends. A shape's payload has no CR or LF (see
    /// [`Template::read_at`]), so these are the bytes the framer would frame as this event.
    /// Returns the bytes taken, the payload's range and what `add_json` returns.
    pub fn add_framed(
        &mut self,
        bytes: &[u8],
        max_line: usize,
    ) -> Option<(usize, std::ops::Range<usize>, Result<(), AccumulateError>)> {
        const DATA: &[u8] = b"data: ";
        // Too short for the shape tried (the start of an event that goes on in the next
        // chunk, most often), or not a data line.
        let shortest = self.shapes.get(self.guess())?.template.shortest();
        if self.completion.is_none()
            || shortest == 0
            || bytes.len() < DATA.len() + shortest + 2
            || !bytes.starts_with(DATA)
        {
            return None;
        }
        let (at, holes, len) = self.read_shape(&bytes[DATA.len()..], true)?;
        let end = DATA.len() + len;
        if bytes.get(end..end + 2)? != b"\n\n" || end > max_line {
            return None;
        }
        Some((end + 2, DATA.len()..end, self.add_shaped(at, holes)))
    }

    /// Whether [`add_framed`](Self::add_framed) may take a chunk: the shape it tries is kept.
    pub fn takes_framed(&self) -> bool {
        self.completion.is_some()
            && self
                .shapes
                .get(self.guess())
                .is_some_and(|shape| shape.template.is_learned())
    }

    fn forget_shapes(&mut self) {
        self.shapes.clear();
    }

    /// A chunk of a learned shape: what the learned chunk did, with this one's holes.
    fn add_templated(&mut self, slot: usize, mut holes: fast::Holes<'_>) {
        let Some(completion) = self.completion.as_mut() else {
            return;
        };
        // The holes taken one by one (they come first, in order): `into_iter` would copy the
        // whole array into the iterator, a tenth of a templated chunk's time.
        let holes = holes.iter_mut().map_while(Option::take);
        for (hole, action) in holes.zip(&mut self.shapes[slot].actions) {
            match (hole, action) {
                (
                    Hole::Text(text),
                    Action::Text {
                        choice,
                        path,
                        key,
                        route,
                    },
                ) => {
                    // A text hole's key is never one of `REPLACED_KEYS` (those are set, not
                    // appended): so a string there is appended to, as `merge_string` does.
                    let ours = &mut self.choices[*choice];
                    if append_routed(ours, path, key, route, &text, &mut self.cap) {
                        continue;
                    }
                    let target = self.choices[*choice]
                        .get_mut("message")
                        .and_then(|message| walk(message, path));
                    match target {
                        Some(map) => merge_string(map, key, text, &mut self.cap, path.is_empty()),
                        // Never: a learned chunk's path is there (nothing is removed).
                        None => debug_assert!(false, "no object at {path:?}"),
                    }
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
                let known = REPLACED.into_iter().zip([
                    chunk.usage,
                    chunk.system_fingerprint,
                    chunk.moderation,
                ]);
                let vendor = chunk.vendor.iter().map(|(key, raw)| (&**key, Some(*raw)));
                replace_fields(completion, known.chain(vendor));
            }
        }
        for choice in chunk.choices.unwrap_or_default() {
            self.add_choice(choice);
        }
        self.cap.check(self.tally.events - 1)
    }

    /// The first chunk the usual way round: its top level read once with the tap's reader and
    /// built as [`openai_top_level`] builds it, its choices checked, then applied as
    /// [`add_fast`](Self::add_fast) applies a new choice. No shape is learned: a first chunk's
    /// (the role, an empty content) does not come again. `None` (nothing changed) where the
    /// general path must decide (see [`openai_first_members`] and [`ChoiceRead::check`]).
    fn add_first(&mut self, payload: &[u8]) -> Option<()> {
        let (top, choices) =
            openai_first_members(payload, "chat.completion.chunk", &["obfuscation"])?;
        let read = match choices {
            Some(choices) => ChoiceRead::check_all(choices)?,
            None => Vec::new(),
        };
        self.completion = Some(openai_top_level_of(
            top,
            "chat.completion",
            &["system_fingerprint"],
        ));
        let mut learn = Learn::new();
        for choice in read {
            self.fast_choice(choice, &mut learn);
        }
        Some(())
    }

    /// A later chunk the usual way round (see `docs/internals.md`): read with the tap's reader,
    /// each delta merged from its JSON without building it (strings appended, tool calls
    /// merged by index), `usage`, `system_fingerprint` and `moderation` kept as JSON (see
    /// [`Replaced`]), the vendor members, `finish_reason`, `logprobs` and a new choice's
    /// fields built. `None` (nothing changed) for anything else: an error chunk, another
    /// `object`, a malformed chunk, a `choices` that is not an array of objects, an `index`
    /// that is not a plain integer, a choice field twice, a delta value serde might read
    /// otherwise (an object with a key twice, say), or whatever the reader leaves to serde. Every
    /// read that can fail is made before anything changes: the choices' members are read and
    /// checked first ([`ChoiceRead`]), then applied from what was read (a delta is read again
    /// as it is merged, its reads checked by [`check_delta`]).
    fn add_fast(&mut self, payload: &[u8]) -> Option<()> {
        let mut learn = Learn::new();
        // Its notes are written piece by piece: room for the usual few at once.
        learn.sets.reserve(128);
        let mut vendor: Vec<(&str, Raw<'_>)> = Vec::new();
        let (top, choices) = fast_top_with(
            payload,
            &REPLACED,
            "choices",
            Some("chat.completion.chunk"),
            |key, value| {
                if SCHEMA_KEYS.contains(&key) {
                    // Not read: any string there (an `obfuscation`, Groq's `id` per chunk) is
                    // the same to the result.
                    if value.first() == b'"' {
                        learn.skips.push(value);
                    }
                } else {
                    if !value.is_null() && !value.buildable() {
                        return None;
                    }
                    vendor.push((key, value));
                }
                Some(())
            },
        )?;
        let read = match choices {
            Some(choices) => ChoiceRead::check_all(choices)?,
            None => Vec::new(),
        };
        let completion = self.completion.as_mut()?;
        for (key, raw) in REPLACED.into_iter().zip(top) {
            // A string stays in the shape (see `Replaced::keep_all`): set again by each chunk.
            if let Some(raw) = raw.filter(|raw| raw.first() == b'"') {
                noted_set(&mut learn, What::Top(key), raw);
            }
        }
        self.replaced
            .keep_all(completion, REPLACED, top, &mut learn, Action::Replace);
        for (key, raw) in vendor {
            if raw.is_null() {
                continue;
            }
            noted_set(&mut learn, What::Top(key), raw);
            // A vendor member of the shape replaces itself with the same value at every hit.
            let value = value_of(raw);
            match member_mut(completion, key) {
                Some(slot) => *slot = value,
                None => {
                    completion.insert(key.to_owned(), value);
                }
            }
        }
        for choice in read {
            self.fast_choice(choice, &mut learn);
        }
        // Into a free slot, else the least recently used one's.
        let slot = match self
            .shapes
            .iter()
            .position(|shape| !shape.template.is_learned())
        {
            Some(free) => free,
            None if self.shapes.len() < SHAPES => {
                self.shapes.push(Shape::default());
                self.shapes.len() - 1
            }
            None => (0..self.shapes.len())
                .min_by_key(|&at| self.shapes[at].used)
                .unwrap_or(0),
        };
        let mut sets = std::mem::take(&mut learn.sets);
        let shape = &mut self.shapes[slot];
        shape
            .template
            .learn_from(payload, learn, &mut shape.actions);
        if !shape.template.is_learned() {
            self.forget_shapes();
            return Some(());
        }
        // The top-level fields it replaces that are not strings (those are noted already): by
        // a hole (its numbers), or, a value without numbers, fixed in the shape and so set.
        for (key, raw) in REPLACED.into_iter().zip(top) {
            let Some(raw) = raw.filter(|raw| !raw.is_null() && raw.first() != b'"') else {
                continue;
            };
            let by_hole = shape
                .actions
                .iter()
                .any(|action| matches!(action, Action::Replace(k) if *k == key));
            note_entry(
                &mut sets,
                What::Top(key),
                if by_hole { HOLE } else { raw.json() },
            );
        }
        // The kept shapes whose sets this chunk changed would no longer do what they did.
        for (at, other) in self.shapes.iter_mut().enumerate() {
            if at != slot && !agree(&sets, &other.sets) {
                other.template.clear();
                other.used = 0;
            }
        }
        self.clock += 1;
        let shape = &mut self.shapes[slot];
        shape.sets = sets;
        shape.used = self.clock;
        shape.next = slot;
        if let Some(before) = self.shapes.get_mut(self.last) {
            before.next = slot;
        }
        self.last = slot;
        Some(())
    }

    /// One choice of [`add_fast`](Self::add_fast), checked by [`ChoiceRead::check`], applied as
    /// [`add_choice`](Self::add_choice) applies it (what it did noted in `learn`).
    fn fast_choice<'a>(&mut self, read: ChoiceRead<'a>, learn: &mut Learn<'a>) {
        let ChoiceRead {
            raw: choice,
            index,
            delta,
            finish_reason,
            logprobs,
        } = read;
        let (warnings, cap) = (&mut self.tally.warnings, &mut self.cap);
        let Some(at) = position_by_index(&self.choices, index) else {
            learn.ok = false;
            let mut fields = Vec::new();
            choice.entries(|key, value| {
                // Not built only to be left out (see `fresh_choice`).
                if key != "delta" && key != "index" {
                    fields.push((key.to_owned(), value_of(value)));
                }
                Some(())
            });
            let mut fresh = fresh_choice(index, fields);
            if let (Some(delta), Some(Value::Object(message))) =
                (delta, member_mut(&mut fresh, "message"))
            {
                fast_delta(message, delta, self.choices.len(), learn, warnings, cap);
            }
            self.choices.push(fresh);
            return;
        };
        let ours = &mut self.choices[at];
        if let (Some(delta), Some(Value::Object(message))) = (delta, member_mut(ours, "message")) {
            fast_delta(message, delta, at, learn, warnings, cap);
        }
        if let Some(reason) = finish_reason {
            if !reason.is_null() && reason.json() != "\"\"" {
                noted_set(learn, What::Choice(at, "finish_reason"), reason);
            }
            set_finish_reason(ours, value_of(reason));
        }
        if let Some(raw) = logprobs.filter(|raw| raw.first() == b'{') {
            let value = value_of(raw);
            // Its lists are appended: not the same when done again, unless the choice holds a
            // logprobs object already and this one's lists are all null or empty (Snowflake's
            // `{"content":null,"refusal":null}` at every chunk), which changes nothing.
            if !(matches!(member(ours, "logprobs"), Some(Value::Object(_)))
                && logprobs_add_nothing(&value))
            {
                learn.ok = false;
            }
            merge_logprobs(ours, value);
        }
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
        let Some(position) = position_by_index(&self.choices, index) else {
            let fields = entries.0.iter().filter_map(|(key, raw)| {
                let value = serde_json::from_str::<Value>(raw.get()).ok()?;
                Some((key.clone().into_owned(), value))
            });
            let mut choice = fresh_choice(index, fields);
            if let (Some(delta), Some(Value::Object(message))) = (delta, choice.get_mut("message"))
            {
                merge_delta(message, delta, &mut self.tally.warnings, &mut self.cap);
            }
            self.choices.push(choice);
            return;
        };
        let choice = &mut self.choices[position];
        if let Some(delta) = delta {
            if let Some(Value::Object(message)) = choice.get_mut("message") {
                merge_delta(message, delta, &mut self.tally.warnings, &mut self.cap);
            }
        }
        if let Some(reason) = finish_reason {
            set_finish_reason(choice, reason);
        }
        if let Some(chunk_logprobs) = logprobs {
            merge_logprobs(choice, chunk_logprobs);
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
                self.replaced.write(out, key, value);
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

/// One choice of a chunk the fast path takes, read and checked once ([`ChoiceRead::check`])
/// before any is applied, so that the apply pass does not read its members again.
#[derive(Clone, Copy)]
struct ChoiceRead<'a> {
    raw: Raw<'a>,
    index: u64,
    delta: Option<Raw<'a>>,
    finish_reason: Option<Raw<'a>>,
    logprobs: Option<Raw<'a>>,
}

impl<'a> ChoiceRead<'a> {
    /// Every read of `choice` that can fail: `None` for a key twice (the general path takes
    /// the last value, at the first one's place), an `index` that is not a plain integer, a
    /// `delta` [`check_delta`] refuses, another value that might not build.
    fn check(choice: Raw<'a>) -> Option<Self> {
        let mut keys: [&str; 8] = [""; 8];
        let mut n = 0;
        let (mut index, mut delta, mut finish_reason, mut logprobs) = (None, None, None, None);
        choice.entries(|key, value| {
            if keys[..n].contains(&key) || n == keys.len() {
                return None;
            }
            keys[n] = key;
            n += 1;
            match key {
                "index" => index = Some(value.unsigned()?),
                "delta" => {
                    check_delta(value)?;
                    delta = Some(value);
                }
                _ => {
                    if !value.buildable() {
                        return None;
                    }
                    match key {
                        "finish_reason" => finish_reason = Some(value),
                        "logprobs" => logprobs = Some(value),
                        _ => {}
                    }
                }
            }
            Some(())
        })?;
        Some(ChoiceRead {
            raw: choice,
            index: index.unwrap_or(0),
            delta,
            finish_reason,
            logprobs,
        })
    }

    /// The choices of `choices` (not null), each checked; `None` if it is not an array of
    /// choices that all pass.
    fn check_all(choices: Raw<'a>) -> Option<Vec<Self>> {
        if choices.first() != b'[' {
            return None;
        }
        let mut read = Vec::new();
        choices.items(|choice| {
            read.push(Self::check(choice)?);
            Some(())
        })?;
        Some(read)
    }
}

/// The choice seen for the first time (see the module docs): `{index, finish_reason: null,
/// logprobs: null, ...its fields but delta and index, message}`, its message without the delta.
fn fresh_choice(
    index: u64,
    fields: impl IntoIterator<Item = (String, Value)>,
) -> Map<String, Value> {
    // Sized for the usual members, so that neither map grows as it is filled.
    let mut choice = Map::with_capacity(8);
    choice.insert("index".to_owned(), Value::from(index));
    choice.insert("finish_reason".to_owned(), Value::Null);
    choice.insert("logprobs".to_owned(), Value::Null);
    for (key, value) in fields {
        if key != "delta" && key != "index" {
            set_member(&mut choice, &key, value);
        }
    }
    let mut message = Map::with_capacity(6);
    message.insert("role".to_owned(), Value::String("assistant".to_owned()));
    message.insert("content".to_owned(), Value::Null);
    message.insert("refusal".to_owned(), Value::Null);
    choice.insert("message".to_owned(), Value::Object(message));
    choice
}

/// A known choice's `finish_reason`: replaces the choice's unless null or empty.
fn set_finish_reason(choice: &mut Map<String, Value>, reason: Value) {
    if !reason.is_null() && reason.as_str() != Some("") {
        set_member(choice, "finish_reason", reason);
    }
}

/// `map.insert(key, value)` without hashing `key` or making a `String` of it when `key` is
/// there already (replaced where it is, as `insert` replaces it).
fn set_member(map: &mut Map<String, Value>, key: &str, value: Value) {
    match member_mut(map, key) {
        Some(slot) => *slot = value,
        None => {
            map.insert(key.to_owned(), value);
        }
    }
}

/// Whether [`merge_logprobs`] leaves a choice that holds a logprobs object as it was: the
/// chunk's `content` and `refusal` are each missing, not a list, or an empty list.
fn logprobs_add_nothing(logprobs: &Value) -> bool {
    ["content", "refusal"]
        .iter()
        .all(|key| match logprobs.get(key) {
            Some(Value::Array(list)) => list.is_empty(),
            _ => true,
        })
}

/// A known choice's `logprobs` (an object: else ignored): taken whole when the choice has none,
/// else its non-empty `content` / `refusal` lists appended to the choice's.
fn merge_logprobs(choice: &mut Map<String, Value>, logprobs: Value) {
    let Value::Object(mut chunk_logprobs) = logprobs else {
        return;
    };
    match member_mut(choice, "logprobs") {
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

/// A value the fast path checked with [`Raw::buildable`], built as serde builds it.
fn value_of(raw: Raw<'_>) -> Value {
    raw.build()
        .or_else(|| serde_json::from_str(raw.json()).ok())
        .unwrap_or(Value::Null)
}

/// Whether [`fast_delta`] can merge `delta` (a choice's `delta`) exactly as [`merge_delta`]
/// would: every value it reads reads, every value it builds builds, and each object it walks
/// has its keys once and unescaped (serde's map would merge a repeated key).
fn check_delta(delta: Raw<'_>) -> Option<()> {
    if delta.first() != b'{' {
        return Some(());
    }
    delta.entries(|key, value| match value.first() {
        // A raw value is valid JSON, so its strings read (`string` is not called to check that:
        // it would unescape each string only to drop it).
        b'"' => {
            debug_assert!(value.string().is_some());
            Some(())
        }
        b'[' if key == "content" => value.buildable().then_some(()),
        _ => {
            if !value.buildable() {
                return None;
            }
            walkable(value)
        }
    })
}

/// Whether [`fast_entry`] can walk `value`: its objects' keys unescaped and each once (its
/// strings read, as every string of a raw value does).
fn walkable(value: Raw<'_>) -> Option<()> {
    match value.first() {
        b'{' => {
            let mut keys: [&str; 16] = [""; 16];
            let mut n = 0;
            value.entries(|key, value| {
                if n == keys.len() || keys[..n].contains(&key) {
                    return None;
                }
                keys[n] = key;
                n += 1;
                walkable(value)
            })
        }
        b'[' => value.items(walkable),
        b'"' => {
            debug_assert!(value.string().is_some());
            Some(())
        }
        _ => Some(()),
    }
}

/// The object at `path` under `message` (see [`Step`]).
fn walk<'m>(message: &'m mut Value, path: &[Step]) -> Option<&'m mut Map<String, Value>> {
    let mut at = message;
    for step in path {
        at = match step {
            Step::Key(key) => member_mut(at.as_object_mut()?, key)?,
            Step::Pos(n) => at.as_array_mut()?.get_mut(*n)?,
        };
    }
    at.as_object_mut()
}

/// Appends `text` to the string at `key` of the object at `path` under a choice's `message`
/// as [`merge_string`] would (capped), reaching it by `route` (the position of each map's entry
/// on the way: `message`, each key of `path`, `key`) without hashing a key, each entry's key
/// compared with the one expected there. When the route is empty or leads elsewhere (nothing is
/// removed from these maps, so never once found: but checked), it is found again by looking the
/// keys up, and kept. False (nothing done) when there is no string there: [`merge_string`]
/// decides.
fn append_routed(
    choice: &mut Map<String, Value>,
    path: &[Step],
    key: &str,
    route: &mut Vec<usize>,
    text: &str,
    cap: &mut TextCap,
) -> bool {
    for attempt in 0..2 {
        if attempt == 1 {
            match find_route(choice, path, key) {
                Some(found) => *route = found,
                None => return false,
            }
        }
        if let Some(Value::String(ours)) = follow(choice, path, key, route) {
            if cap.admits(ours.len(), text.len()) {
                ours.push_str(text);
            }
            return true;
        }
    }
    false
}

/// The value at position `at` of `map` if its key is `key`.
fn entry_at<'v>(map: &'v mut Map<String, Value>, at: usize, key: &str) -> Option<&'v mut Value> {
    let (k, v) = map.iter_mut().nth(at)?;
    (k == key).then_some(v)
}

/// The value [`append_routed`]'s `route` leads to: `None` at the first entry that is not where
/// the route says (or a route too short).
fn follow<'m>(
    choice: &'m mut Map<String, Value>,
    path: &[Step],
    key: &str,
    route: &[usize],
) -> Option<&'m mut Value> {
    let mut positions = route.iter().copied();
    let mut at = entry_at(choice, positions.next()?, "message")?;
    for step in path {
        at = match step {
            Step::Key(k) => entry_at(at.as_object_mut()?, positions.next()?, k)?,
            Step::Pos(n) => at.as_array_mut()?.get_mut(*n)?,
        };
    }
    entry_at(at.as_object_mut()?, positions.next()?, key)
}

/// The route [`append_routed`] takes to the value at `key` of the object at `path` under the
/// choice's `message`, looked up key by key; `None` when there is no value there.
fn find_route(choice: &Map<String, Value>, path: &[Step], key: &str) -> Option<Vec<usize>> {
    fn position<'v>(
        route: &mut Vec<usize>,
        map: &'v Map<String, Value>,
        key: &str,
    ) -> Option<&'v Value> {
        let (at, (_, value)) = map.iter().enumerate().find(|(_, (k, _))| *k == key)?;
        route.push(at);
        Some(value)
    }
    let mut route = Vec::with_capacity(2 + path.len());
    let mut at = position(&mut route, choice, "message")?;
    for step in path {
        at = match step {
            Step::Key(k) => position(&mut route, at.as_object()?, k)?,
            Step::Pos(n) => at.as_array()?.get(*n)?,
        };
    }
    position(&mut route, at.as_object()?, key)?;
    Some(route)
}

/// [`merge_delta`] of a delta [`check_delta`] passed, from its JSON: strings appended without
/// a `Value` built for them, objects and lists walked by [`fast_entry`]. Each appended string
/// is noted in `learn` as a text hole; anything that would not do the same when done again
/// (a value inserted, a list extended, numbers added, content parts) makes it no shape.
fn fast_delta<'a>(
    message: &mut Map<String, Value>,
    delta: Raw<'a>,
    choice: usize,
    learn: &mut Learn<'a>,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
) {
    if delta.first() != b'{' {
        return;
    }
    let mut path = Vec::new();
    let merged = delta.entries(|key, value| {
        match value.first() {
            b'[' if key == "content" => {
                learn.ok = false;
                if let Value::Array(parts) = value_of(value) {
                    merge_content_parts(message, parts, cap);
                }
            }
            b'"' => {
                merge_string(message, key, value.string()?, cap, true);
                if REPLACED_KEYS.contains(&key) {
                    noted_set(learn, What::Choice(choice, key), value);
                } else {
                    let path = Vec::new();
                    let key = key.to_owned();
                    let route = Vec::new();
                    let text = Action::Text {
                        choice,
                        path,
                        key,
                        route,
                    };
                    learn.holes.push((value, true, text));
                }
            }
            _ => fast_entry(message, key, value, choice, &mut path, learn, warnings, cap),
        }
        Some(())
    });
    debug_assert!(merged.is_some(), "checked first");
}

/// [`accumulate_entry`] of a value [`check_delta`] passed, from its JSON. `path` leads from the
/// message to `acc`.
#[allow(clippy::too_many_arguments)]
fn fast_entry<'a>(
    acc: &mut Map<String, Value>,
    key: &str,
    delta: Raw<'a>,
    choice: usize,
    path: &mut Vec<Step>,
    learn: &mut Learn<'a>,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
) {
    match member(acc, key) {
        None | Some(Value::Null) => {
            if !raw_has_indexed_entries(delta) {
                // Done again, the value would be merged, not inserted (a null stays null).
                learn.ok &= delta.is_null();
                set_member(acc, key, value_of(delta));
                return;
            }
            learn.ok = false;
            set_member(acc, key, Value::Array(Vec::new()));
        }
        Some(_) if REPLACED_KEYS.contains(&key) => {
            // A value of the shape: set again when done again.
            if !delta.is_null() {
                noted_set(learn, What::Under(choice, path, key), delta);
                set_member(acc, key, value_of(delta));
            }
            return;
        }
        Some(_) => {}
    }
    let Some(current) = member_mut(acc, key) else {
        return;
    };
    match (current, delta.first()) {
        (Value::String(ours), b'"') => {
            let Some(text) = delta.string() else {
                return debug_assert!(false, "checked first");
            };
            if cap.admits(ours.len(), text.len()) {
                ours.push_str(&text);
            }
            let (path, key, route) = (path.clone(), key.to_owned(), Vec::new());
            let text = Action::Text {
                choice,
                path,
                key,
                route,
            };
            learn.holes.push((delta, true, text));
        }
        (Value::Number(ours), b'-' | b'0'..=b'9') => {
            learn.ok = false;
            if let Value::Number(theirs) = value_of(delta) {
                if let Some(sum) = add_numbers(ours, &theirs) {
                    *ours = sum;
                }
            }
        }
        (Value::Object(ours), b'{') => {
            path.push(Step::Key(key.to_owned()));
            delta.entries(|k, v| {
                fast_entry(ours, k, v, choice, path, learn, warnings, cap);
                Some(())
            });
            path.pop();
        }
        (Value::Array(ours), b'[') => {
            path.push(Step::Key(key.to_owned()));
            fast_list(ours, delta, choice, path, learn, warnings, cap);
            path.pop();
        }
        _ => {}
    }
}

/// [`merge_list`] of a list [`check_delta`] passed, from its JSON (see [`fast_entry`]).
fn fast_list<'a>(
    acc: &mut Vec<Value>,
    delta: Raw<'a>,
    choice: usize,
    path: &mut Vec<Step>,
    learn: &mut Learn<'a>,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
) {
    if only_scalars(acc) && (!acc.is_empty() || !raw_has_indexed_entries(delta)) {
        if let Value::Array(items) = value_of(delta) {
            learn.ok &= items.is_empty();
            acc.extend(items);
        }
        return;
    }
    delta.items(|entry| {
        if entry.first() != b'{' {
            learn.ok = false;
            warnings.push("chat: non-object list entry ignored".to_owned());
            return Some(());
        }
        let (mut index, mut id) = (None, None);
        entry.entries(|key, value| {
            match key {
                "index" => index = value.unsigned(),
                "id" if !value.is_null() => id = Some(value_of(value)),
                _ => {}
            }
            Some(())
        });
        match list_target(acc, index, id.as_ref()) {
            Some(at) => {
                let Value::Object(existing) = &mut acc[at] else {
                    unreachable!("list_target finds objects only")
                };
                path.push(Step::Pos(at));
                entry.entries(|k, v| {
                    fast_entry(existing, k, v, choice, path, learn, warnings, cap);
                    Some(())
                });
                path.pop();
            }
            None => {
                learn.ok = false;
                acc.push(value_of(entry));
            }
        }
        Some(())
    });
}

/// What a chunk set, as a [`Shape`]'s sets name it: a top-level field (`top/{key}`), a field of
/// the choice at a position (`{choice}/{key}`), or one under a path in its message
/// (`{choice}/["tool_calls",0,"function"]/{key}`).
#[derive(Clone, Copy)]
enum What<'k> {
    Top(&'k str),
    Choice(usize, &'k str),
    Under(usize, &'k [Step], &'k str),
}

impl What<'_> {
    /// Appends the name (pushed piece by piece, paths too: the formatting machinery was a
    /// tenth of a short stream's feed, paid at each chunk learned).
    fn write(self, out: &mut String) {
        match self {
            What::Top(key) => {
                out.push_str("top/");
                out.push_str(key);
            }
            What::Choice(choice, key) => {
                out.push_str(itoa::Buffer::new().format(choice));
                out.push('/');
                out.push_str(key);
            }
            What::Under(choice, path, key) => {
                // `{choice}/["tool_calls",0,"function"]/{key}`: a key the reader takes has no
                // quote, so no two paths are written alike.
                out.push_str(itoa::Buffer::new().format(choice));
                out.push_str("/[");
                for (at, step) in path.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    match step {
                        Step::Key(key) => {
                            out.push('"');
                            out.push_str(key);
                            out.push('"');
                        }
                        Step::Pos(n) => out.push_str(itoa::Buffer::new().format(*n)),
                    }
                }
                out.push_str("]/");
                out.push_str(key);
            }
        }
    }
}

/// Notes in `learn.sets` that the chunk set `what` to `value` (see [`fast::Learn`]).
fn noted_set(learn: &mut Learn<'_>, what: What<'_>, value: Raw<'_>) {
    note_entry(&mut learn.sets, what, value.json());
}

/// One entry of a [`Shape`]'s sets: `what`, `\u{1}`, the value's JSON (or [`HOLE`]), `\u{0}`.
/// Neither byte is in a JSON text the tap reads (it leaves control bytes to serde), nor in a
/// `what` (made of such keys and choice positions).
fn note_entry(sets: &mut String, what: What<'_>, value: &str) {
    what.write(sets);
    sets.push('\u{1}');
    sets.push_str(value);
    sets.push('\u{0}');
}

/// Whether two shapes' sets agree: what both set, they set to the same value. Then a chunk of
/// either leaves what the other set as it found it (a text hole never appends to what a shape
/// sets: those are `index`, `type`, `role`, `id`, a `finish_reason`, top-level fields).
fn agree(ours: &str, theirs: &str) -> bool {
    if ours.is_empty() || theirs.is_empty() || ours == theirs {
        return true;
    }
    // Each entry's `what` and value (neither holds `\u{1}`), theirs split once.
    let theirs: Vec<(&[u8], &[u8])> = set_entries(theirs).collect();
    set_entries(ours).all(|(what, value)| {
        theirs
            .iter()
            .all(|&(other, theirs)| other != what || theirs == value)
    })
}

/// The entries of a shape's sets (see [`note_entry`]), each as its `what` and its value, split
/// at their marks by `memchr`.
fn set_entries(sets: &str) -> impl Iterator<Item = (&[u8], &[u8])> {
    let bytes = sets.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = bytes.get(at..).filter(|rest| !rest.is_empty())?;
        let end = memchr::memchr(0, rest).unwrap_or(rest.len());
        at += end + 1;
        let entry = &rest[..end];
        Some(match memchr::memchr(1, entry) {
            Some(mark) => (&entry[..mark], &entry[mark + 1..]),
            None => (entry, &[][..]),
        })
    })
}

/// Whether `raw` is a list with an object that has an `index` (see [`has_indexed_entries`]).
fn raw_has_indexed_entries(raw: Raw<'_>) -> bool {
    if raw.first() != b'[' {
        return false;
    }
    // Stops at the first `index` found (a tool call's is most often its first key).
    let mut found = false;
    raw.items(|item| {
        if item.first() == b'{' {
            item.entries(|key, _| {
                found = key == "index";
                (!found).then_some(())
            });
        }
        (!found).then_some(())
    });
    found
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
            if let Ok(parts) = serde_json::from_str::<Vec<Value>>(text) {
                merge_content_parts(message, parts, cap);
            }
        } else if text.starts_with('"') {
            if let Ok(s) = serde_json::from_str::<Str<'_>>(text) {
                merge_string(message, &key, s.0, cap, true);
            }
        } else if let Ok(value) = serde_json::from_str::<Value>(text) {
            accumulate_entry(message, &key, value, warnings, cap);
        }
    }
}

/// The string fast path of [`accumulate_entry`]: no `Value` is built for the delta. A string
/// that is new (no value, or null) is inserted whatever its length unless `capped` (as a
/// delta's own members are: nested ones are merged by [`accumulate_entry`], uncapped).
fn merge_string(
    message: &mut Map<String, Value>,
    key: &str,
    delta: Cow<'_, str>,
    cap: &mut TextCap,
    capped: bool,
) {
    match member_mut(message, key) {
        None | Some(Value::Null) => {
            if !capped || cap.admits(0, delta.len()) {
                set_member(message, key, Value::String(delta.into_owned()));
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
fn merge_content_parts(message: &mut Map<String, Value>, parts: Vec<Value>, cap: &mut TextCap) {
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    merge_string(message, "content", Cow::Borrowed(text), cap, true);
                }
            }
            Some("thinking") => match part.get("thinking") {
                Some(Value::String(text)) => {
                    merge_string(message, "reasoning_content", Cow::Borrowed(text), cap, true)
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
                                    true,
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
    value
        .as_array()
        .is_some_and(|list| has_indexed_entries_in(list))
}

fn has_indexed_entries_in(list: &[Value]) -> bool {
    list.iter()
        .any(|e| e.as_object().is_some_and(|o| o.contains_key("index")))
}

/// The SDK's `accumulate_delta` for one key (with the documented differences).
fn accumulate_entry(
    acc: &mut Map<String, Value>,
    key: &str,
    delta: Value,
    warnings: &mut Vec<String>,
    cap: &mut TextCap,
) {
    match member(acc, key) {
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
    let Some(current) = member_mut(acc, key) else {
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
    let scalars = only_scalars(acc);
    if scalars && (!acc.is_empty() || !has_indexed_entries_in(&delta)) {
        acc.extend(delta);
        return;
    }
    for entry in delta {
        let Value::Object(entry) = entry else {
            warnings.push("chat: non-object list entry ignored".to_owned());
            continue;
        };
        let index = member(&entry, "index").and_then(Value::as_u64);
        let id = member(&entry, "id").filter(|id| !id.is_null());
        match list_target(acc, index, id) {
            Some(at) => {
                if let Value::Object(existing) = &mut acc[at] {
                    for (k, v) in entry {
                        accumulate_entry(existing, &k, v, warnings, cap);
                    }
                }
            }
            None => acc.push(Value::Object(entry)),
        }
    }
}

/// Whether every item of a merged list is a string, number or bool (none is an object).
fn only_scalars(list: &[Value]) -> bool {
    list.iter()
        .all(|v| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)))
}

/// Where a list delta entry with this `index` (a `u64`), else this `id` (not null), merges:
/// the object with the same `index` (looked for at `acc[index]` first), else the one with the
/// same `id`; `None` (appended) when there is none.
fn list_target(acc: &[Value], index: Option<u64>, id: Option<&Value>) -> Option<usize> {
    let at = match index {
        Some(index) => {
            let has = |v: &Value| value_member(v, "index").and_then(Value::as_u64) == Some(index);
            match acc.get(index as usize) {
                Some(v) if has(v) => Some(index as usize),
                _ => acc.iter().position(has),
            }
        }
        None => {
            let id = id?;
            acc.iter().position(|v| value_member(v, "id") == Some(id))
        }
    }?;
    acc[at].is_object().then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_named_as_formatted() {
        let path = [Step::Key("tool_calls".to_owned()), Step::Pos(3)];
        for (what, formatted) in [
            (What::Top("usage"), "top/usage".to_owned()),
            (
                What::Choice(0, "finish_reason"),
                "0/finish_reason".to_owned(),
            ),
            (What::Choice(12345, "role"), "12345/role".to_owned()),
            (
                What::Under(7, &path, "id"),
                r#"7/["tool_calls",3]/id"#.to_owned(),
            ),
            (What::Under(0, &[], "content"), "0/[]/content".to_owned()),
        ] {
            let mut out = String::from("x\u{0}");
            what.write(&mut out);
            assert_eq!(out, format!("x\u{0}{formatted}"));
        }
        let mut sets = String::new();
        note_entry(&mut sets, What::Choice(1, "role"), "\"assistant\"");
        assert_eq!(sets, "1/role\u{1}\"assistant\"\u{0}");
        assert!(super::agree("", &sets) && super::agree(&sets, "") && super::agree(&sets, &sets));
        assert!(!super::agree(&sets, "1/role\u{1}\"user\"\u{0}"));
        assert!(super::agree(&sets, "2/role\u{1}\"user\"\u{0}"));
    }

    /// `agree` splits the other shape's sets once: what it says is what comparing each pair
    /// of entries by their splits says, on random sets of a few names and values.
    #[test]
    fn agreeing_sets_are_found_as_pair_by_pair() {
        fn pairwise(ours: &str, theirs: &str) -> bool {
            let what = |entry: &str| entry.split('\u{1}').next().unwrap_or_default().to_owned();
            ours.is_empty()
                || theirs.is_empty()
                || ours.split_terminator('\u{0}').all(|entry| {
                    theirs
                        .split_terminator('\u{0}')
                        .all(|other| other == entry || what(other) != what(entry))
                })
        }
        let mut next = xorshift();
        let random_sets = |next: &mut dyn FnMut() -> u64| {
            let mut sets = String::new();
            for _ in 0..next() % 5 {
                let what =
                    ["top/usage", "0/role", "0/finish_reason", "1/role"][next() as usize % 4];
                let value = ["\"a\"", "\"b\"", "null"][next() as usize % 3];
                sets.push_str(&format!("{what}\u{1}{value}\u{0}"));
            }
            sets
        };
        let (mut yes, mut no) = (0, 0);
        for _ in 0..5000 {
            let (ours, theirs) = (random_sets(&mut next), random_sets(&mut next));
            let expected = pairwise(&ours, &theirs);
            assert_eq!(
                super::agree(&ours, &theirs),
                expected,
                "{ours:?} {theirs:?}"
            );
            if expected {
                yes += 1
            } else {
                no += 1
            }
        }
        assert!(yes > 100 && no > 100, "{yes} {no}");
    }
    use crate::accumulate::{corpus_lines, mutations, xorshift};

    /// Feeds `lines` through the fast path and through the general one alone: the same results
    /// (after every chunk), errors, warnings and counts. Returns the chunks the template read.
    fn agree(lines: &[&[u8]], cap: Option<usize>) -> usize {
        agree_every(lines, cap, 1)
    }

    /// [`agree`], the results compared after every `every`-th chunk and at the end (the
    /// mutation tests, thousands of streams, compare fewer).
    fn agree_every(lines: &[&[u8]], cap: Option<usize>, every: usize) -> usize {
        let mut fast = ChatAccumulator::with_text_cap(cap);
        let mut general = ChatAccumulator::with_text_cap(cap);
        let mut templated = 0;
        for (n, line) in lines.iter().enumerate() {
            templated += usize::from(fast.read_shape(line, false).is_some());
            assert_eq!(
                fast.add_json(line),
                general.add_general(line),
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(fast.events(), general.events());
            if n % every == 0 || n + 1 == lines.len() {
                assert_eq!(
                    fast.snapshot_json().map(String::from_utf8),
                    general.snapshot_json().map(String::from_utf8),
                    "after {}",
                    String::from_utf8_lossy(line)
                );
            }
        }
        assert_eq!(fast.warnings(), general.warnings());
        assert_eq!(fast.unknown_events(), general.unknown_events());
        templated
    }

    fn bytes(lines: &[&'static str]) -> Vec<&'static [u8]> {
        lines.iter().map(|l| l.as_bytes()).collect()
    }

    /// What real chat streams carry, one of each: `n > 1`, tool calls by index (and one by id),
    /// reasoning, refusals, logprobs, Mistral content parts, `obfuscation`, usage with vendor
    /// extras, a legacy `function_call`, numbers and lists merged.
    const CHUNKS: [&str; 16] = [
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","usage":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"obfuscation":"ab","x_groq":{"id":"req_1"}}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","usage":null,"choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":{"content":[{"token":"Hel","logprob":-0.5,"bytes":[72],"top_logprobs":[]}],"refusal":null},"finish_reason":null}],"obfuscation":"abcdef"}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","usage":null,"choices":[{"index":0,"delta":{"content":"lo\n\u00e9\ud83d\ude00"},"logprobs":{"content":[{"token":"lo","logprob":-0.25,"bytes":null,"top_logprobs":[]}],"refusal":null},"finish_reason":null}],"obfuscation":"a"}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"role":"assistant","reasoning_content":"Think"},"finish_reason":null,"native":"x"}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"reasoning_content":"ing","reasoning":"r"}},{"index":0,"delta":{"refusal":"No"}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":""}}]}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}},{"index":1,"id":"call_2","type":"function","function":{"name":"put","arguments":"{}"}}]}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"tool_calls":[{"id":"call_2","function":{"arguments":" "}},{"function":{"arguments":"?"}},7]}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":[{"type":"text","text":" Mis"},{"type":"thinking","thinking":[{"type":"text","text":"hm"}]},{"type":"image"}]}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"function_call":{"name":"f","arguments":"{"}}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"function_call":{"arguments":"}"},"n":1,"tags":["a"],"flag":true,"audio":null}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"n":2.5,"tags":["b"],"flag":false,"role":"assistant","type":null}}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp2","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14,"prompt_cache_hit_tokens":3,"prompt_cache_miss_tokens":2},"x_groq":{"id":"req_1","usage":{"queue_time":0.01}},"moderation":{"flagged":false}}"#,
        "[DONE]",
    ];

    #[test]
    fn fast_path_agrees_with_the_general_one() {
        let chunks = bytes(&CHUNKS);
        // Every chunk but `[DONE]` goes the fast way, the first one's too.
        let mut acc = ChatAccumulator::new();
        assert!(acc.add_first(chunks[0]).is_some());
        for chunk in chunks[1..].iter().filter(|c| !is_done_marker(c)) {
            assert!(
                acc.add_fast(chunk).is_some(),
                "{}",
                String::from_utf8_lossy(chunk)
            );
        }
        for cap in [None, Some(3), Some(6), Some(1 << 20)] {
            agree(&chunks, cap);
        }
        let extras = [
            &br#"{"error":{"message":"busy"}}"#[..],
            br#"{"object":"","choices":[{"index":0,"delta":{"content":"filtered"}}]}"#,
            br#"{"object":5,"choices":[]}"#,
            br#"{"object":"chat.completion.chunk","object":"chat.completion.chunk"}"#,
            br#"{"choices":[{"index":0,"index":1}]}"#,
            br#"{"choices":[{"index":-1,"delta":{"content":"x"}}]}"#,
            br#"{"choices":[{"index":"0","delta":{"content":"x"}}]}"#,
            br#"{"choices":[{"delta":{"content":"y","content":"z"}}]}"#,
            br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"index":0}]}}]}"#,
            br#"{"choices":[{"delta":{"tool_calls":[{"index":1.0,"function":{"arguments":"q"}}]}}]}"#,
            br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"w","arguments":"v"}}]}}]}"#,
            br#"{"choices":{"delta":{}}}"#,
            br#"{"choices":[3,{"delta":{"content":"w"}}]}"#,
            br#"{"choices":[{"delta":"text"}]}"#,
            br#"{"choices":[{"delta":{"n":1e400}}]}"#,
            br#"{"choices":[{"delta":{"n":-0}}]}"#,
            br#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
            br#"{"choices":[{"delta":{"content":5}}]}"#,
            br#"{"choices":[{"delta":{"\u0063ontent":"esc"}}]}"#,
            br#"{"choices":[{"finish_reason":1e400}]}"#,
            br#"{"choices":[{"index":4,"delta":{"content":"new"},"logprobs":{"content":[]},"extra":[1]}]}"#,
            br#"{"usage":{"n":1e400}}"#,
            br#"{"x_vendor":{"n":1e400}}"#,
            br#"{"x_vendor":1,"x_vendor":2}"#,
            br#"{"system_fingerprint":"f\ud800"}"#,
            b"{\"choices\":[]}\r",
            b"\"text\"",
            br#"{"obfuscation":"a","obfuscation":"b","choices":[]}"#,
            br#"{"choices":null,"choices":[]}"#,
            br#"{"error":null,"object":null,"choices":null,"id":"n"}"#,
            br#"{"object":"chat.completion.chunk ","choices":[]}"#,
            br#"{"obfuscation":1e400,"choices":[]}"#,
            br#"{"choices":[{"delta":{}}],"choices":[]}"#,
            br#"{"id":"a","id":"b","choices":[]}"#,
            br#"{"usage":null,"usage":{"total_tokens":1}}"#,
        ];
        let mut odd = chunks.clone();
        for extra in extras {
            odd.insert(5, extra);
        }
        agree(&odd, None);
        agree(&odd, Some(4));
        // Each as the first chunk, which is read without the completion built so far.
        for extra in extras {
            let mut first = vec![extra];
            first.extend(&chunks);
            agree(&first, None);
            agree(&first, Some(4));
        }
    }

    #[test]
    fn fast_path_agrees_on_mutated_chunks() {
        for at in 0..CHUNKS.len() - 1 {
            for mutated in mutations(CHUNKS[at].as_bytes()) {
                let mut lines = bytes(&CHUNKS);
                lines[at] = &mutated;
                agree_every(&lines, Some(8), 4);
            }
        }
    }

    /// Runs of one shape (read by the template after the first of the run): OpenAI's text
    /// deltas with an `obfuscation` of every length, tool call arguments, reasoning of a second
    /// choice, usage changing, and each chunk of the runs mutated.
    #[test]
    fn template_agrees_with_the_general_path() {
        let run = [
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"obfuscation":"x"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}],"obfuscation":"xyz"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"content":"b\n\"\u00e9"},"logprobs":null,"finish_reason":null}],"obfuscation":""}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"content":"c"},"logprobs":null,"finish_reason":null}],"obfuscation":"x\"y"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":{"n":1},"choices":[{"index":0,"delta":{"content":"d"},"logprobs":null,"finish_reason":null}],"obfuscation":"q"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":{"n":-12.5e-3},"choices":[{"index":0,"delta":{"content":"e"},"logprobs":null,"finish_reason":null}],"obfuscation":"qq"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":{"n":1e400},"choices":[{"index":0,"delta":{"content":"f"},"logprobs":null,"finish_reason":null}],"obfuscation":"qq"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},"logprobs":null,"finish_reason":null}],"obfuscation":"q"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]},"logprobs":null,"finish_reason":null}],"obfuscation":"qqq"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"a\":"}}]},"logprobs":null,"finish_reason":null}],"obfuscation":"q"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"logprobs":null,"finish_reason":null}],"obfuscation":"qqqq"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"role":"assistant","reasoning":"r"}}]}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"reasoning":"s"}}]}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"reasoning":"t"}}]}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"content":"u"}},{"index":0,"delta":{"content":"v"}}]}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"content":"w"}},{"index":0,"delta":{"content":"x"}}]}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"obfuscation":"q"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":10},"obfuscation":"qq"}"#,
        ];
        let lines = bytes(&run);
        let mut acc = ChatAccumulator::new();
        for line in &lines[..2] {
            acc.add_json(line).unwrap();
        }
        assert!(
            acc.read_shape(lines[2], false).is_some(),
            "a run is read by the template"
        );
        let mut templated = 0;
        for cap in [None, Some(3), Some(7)] {
            templated += agree(&lines, cap);
        }
        assert!(templated >= 15, "{templated} chunks read by the template");
        for at in 1..lines.len() {
            for mutated in mutations(lines[at]) {
                let mut mutated_lines = lines.clone();
                mutated_lines[at] = &mutated;
                agree_every(&mutated_lines, Some(7), 4);
            }
        }
    }

    /// Snowflake's chunks carry `logprobs: {"content":null,"refusal":null}` at every chunk: once
    /// the choice holds a logprobs object such a chunk changes nothing there, so a run of them is
    /// read by the template; one with a list in it still is not (its lists are appended).
    #[test]
    fn null_logprobs_objects_are_templated_once_held() {
        let lines = bytes(&[
            r#"{"choices":[{"delta":{"content":"","role":"assistant"},"index":0,"logprobs":{"content":null,"refusal":null}}],"id":"","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"delta":{"content":"a","role":"assistant"},"index":0,"logprobs":{"content":null,"refusal":null}}],"id":"","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"delta":{"content":"b","role":"assistant"},"index":0,"logprobs":{"content":null,"refusal":null}}],"id":"","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"delta":{"content":"c","role":"assistant"},"index":0,"logprobs":{"content":[],"refusal":null}}],"id":"","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"delta":{"content":"d","role":"assistant"},"index":0,"logprobs":{"content":[{"token":"d","logprob":-1.0}],"refusal":null}}],"id":"","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"delta":{"content":"e","role":"assistant"},"index":0,"logprobs":{"content":[{"token":"e","logprob":-2.0}],"refusal":null}}],"id":"","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"delta":{"content":"f","role":"assistant"},"index":0,"logprobs":{"content":null,"refusal":null}}],"id":"","model":"m","object":"chat.completion.chunk"}"#,
        ]);
        let mut acc = ChatAccumulator::new();
        for line in &lines[..2] {
            acc.add_json(line).unwrap();
        }
        assert!(
            acc.read_shape(lines[2], false).is_some(),
            "null logprobs, held: templated"
        );
        for line in &lines[2..5] {
            acc.add_json(line).unwrap();
        }
        assert!(
            acc.read_shape(lines[5], false).is_none(),
            "a logprobs list is never templated"
        );
        let templated = agree(&lines, None);
        assert!(templated >= 1, "{templated} chunks read by the template");
        for at in 0..lines.len() {
            for mutated in mutations(lines[at]) {
                let mut mutated_lines = lines.clone();
                mutated_lines[at] = &mutated;
                agree_every(&mutated_lines, None, 3);
            }
        }
    }

    /// An `n = 2` stream, its choices taking turns (two shapes kept), with turns that set
    /// something (a `role`, a `finish_reason`, a `system_fingerprint`, a vendor member) the
    /// other shape does not, and each chunk mutated.
    #[test]
    fn two_shapes_taking_turns_agree_with_the_general_path() {
        let mut run = vec![
            r#"{"id":"c","object":"chat.completion.chunk","model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""}},{"index":1,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":""}}]}}],"obfuscation":"x"}"#.to_owned(),
        ];
        for i in 0..12 {
            let (choice, fp) = (i % 2, if i == 7 { "fp2" } else { "fp" });
            let text = ["a", "b\\n", "\\u00e9", "d"][i % 4];
            let extra = match i {
                5 => r#","finish_reason":"length""#,
                9 => r#","x":1"#,
                _ => "",
            };
            run.push(format!(
                r#"{{"id":"c","object":"chat.completion.chunk","model":"m","system_fingerprint":"{fp}","choices":[{{"index":{choice},"delta":{{"content":"{text}"}}{extra}}}],"obfuscation":"{}"}}"#,
                "q".repeat(i)
            ));
        }
        for i in 0..8 {
            let (choice, role) = (i % 2, if i == 4 { r#""role":"tool","# } else { "" });
            run.push(format!(
                r#"{{"id":"c","object":"chat.completion.chunk","model":"m","system_fingerprint":"fp","choices":[{{"index":{choice},"delta":{{{role}"content":"{i}","tool_calls":[{{"index":0,"function":{{"arguments":"{i}"}}}}]}}}}]}}"#
            ));
        }
        let lines: Vec<&[u8]> = run.iter().map(|l| l.as_bytes()).collect();
        let mut templated = 0;
        for cap in [None, Some(5)] {
            templated += agree(&lines, cap);
        }
        assert!(templated >= 8, "{templated} chunks read by a template");
        for at in 1..lines.len() {
            for mutated in mutations(lines[at]).into_iter().step_by(3) {
                let mut mutated_lines = lines.clone();
                mutated_lines[at] = &mutated;
                agree_every(&mutated_lines, Some(5), 4);
            }
        }
    }

    /// A stream of `n` choices (each with a tool call) and `rounds` turns of each, every chunk one
    /// choice's: `kind(turn, choice)` picks a text delta (0), a tool call's arguments (1) or a
    /// reasoning delta with the SDK's `finish_reason: null` (2).
    fn rotation(n: usize, rounds: usize, kind: impl Fn(usize, usize) -> usize) -> Vec<String> {
        let head = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","usage":null,"choices":["#;
        let first: Vec<String> = (0..n)
            .map(|c| format!(r#"{{"index":{c},"delta":{{"role":"assistant","content":"","tool_calls":[{{"index":0,"id":"t{c}","type":"function","function":{{"name":"f","arguments":""}}}}]}}}}"#))
            .collect();
        let mut out = vec![format!(r#"{head}{}],"obfuscation":"x"}}"#, first.join(","))];
        for turn in 0..rounds {
            for c in 0..n {
                let text = ["a", "b\\n", "\\u00e9", "\\\"q"][(turn + c) % 4];
                let delta = match kind(turn, c) {
                    0 => format!(r#"{{"content":"{text}"}}"#),
                    1 => format!(
                        r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":"{text}"}}}}]}}"#
                    ),
                    _ => format!(r#"{{"reasoning":"{text}"}},"finish_reason":null"#),
                };
                out.push(format!(
                    r#"{head}{{"index":{c},"delta":{delta}}}],"obfuscation":"{}"}}"#,
                    "q".repeat(turn % 5)
                ));
            }
        }
        out
    }

    /// The shapes an accumulator holds.
    fn kept(acc: &ChatAccumulator) -> usize {
        acc.shapes
            .iter()
            .filter(|s| s.template.is_learned())
            .count()
    }

    /// Several shapes kept (see [`SHAPES`]): `n = 3` choices taking turns, two choices' text and
    /// tool call deltas taking turns, more choices than shapes (each evicted and relearned), a
    /// choice's two kinds of delta, each chunk mutated.
    #[test]
    fn shapes_taking_turns_agree_with_the_general_path() {
        // Choices, rounds, which kind of delta each turn is (see `rotation`), shapes kept.
        type Case = (usize, usize, fn(usize, usize) -> usize, usize);
        let cases: [Case; 5] = [
            (3, 12, |_, _| 0, 3),
            (2, 12, |turn, c| (turn + c) % 2, 4),
            (3, 8, |turn, c| if c == 2 { 2 } else { (turn + c) % 2 }, 5),
            (SHAPES + 1, 3, |_, _| 0, SHAPES),
            (1, 16, |turn, _| turn % 2, 2),
        ];
        for (n, rounds, kind, shapes) in cases {
            let run = rotation(n, rounds, kind);
            let lines: Vec<&[u8]> = run.iter().map(|l| l.as_bytes()).collect();
            let mut acc = ChatAccumulator::new();
            for line in &lines {
                acc.add_json(line).unwrap();
            }
            assert_eq!(kept(&acc), shapes, "n = {n}");
            let templated = agree(&lines, None);
            agree(&lines, Some(9));
            if n <= SHAPES {
                // All but the first round (a new delta key is inserted: no shape) and each
                // shape's first chunk after it.
                let missed = lines.len() - templated;
                assert!(
                    missed <= 1 + n + shapes,
                    "n = {n}: {missed} not read by shapes"
                );
            }
            for at in (1..lines.len()).step_by(3) {
                for mutated in mutations(lines[at]).into_iter().step_by(5) {
                    let mut mutated_lines = lines.clone();
                    mutated_lines[at] = &mutated;
                    agree_every(&mutated_lines, Some(9), 4);
                }
            }
        }
        // Evicted and relearned: nine choices once each, then the first two taking turns.
        let mut run = rotation(SHAPES + 1, 1, |_, _| 0);
        let rest = rotation(2, 6, |_, _| 1);
        run.extend(rest.into_iter().skip(1));
        let lines: Vec<&[u8]> = run.iter().map(|l| l.as_bytes()).collect();
        assert!(agree(&lines, None) >= 10, "relearned shapes read");
    }

    /// Shapes kept together only when what they set agrees: a `finish_reason` or `role` set to
    /// another value, a top-level value fixed in one shape (no numbers) and replaced by a hole
    /// (its numbers) or set as a string in another; and shapes that differ only in a hole's
    /// type (a number where a text was, a string where a number was, a skipped string that is
    /// not one), which no template reads.
    #[test]
    fn shapes_that_disagree_are_not_kept_together() {
        let head = r#"{"id":"c","object":"chat.completion.chunk","model":"m","#;
        let first = format!(
            r#"{head}"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}}}},{{"index":1,"delta":{{"content":""}}}}]}}"#
        );
        let tails = [
            r#""choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
            r#""choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}]}"#,
            r#""choices":[{"index":1,"delta":{"content":"c","role":"tool"}}]}"#,
            r#""choices":[{"index":1,"delta":{"content":"d","role":"user"}}]}"#,
            r#""moderation":{"flagged":false},"choices":[{"index":0,"delta":{"content":"e"}}]}"#,
            r#""moderation":{"score":1},"choices":[{"index":1,"delta":{"content":"f"}}]}"#,
            r#""usage":"u","choices":[{"index":0,"delta":{"content":"g"}}]}"#,
            r#""usage":{"n":2},"choices":[{"index":1,"delta":{"content":"h"}}]}"#,
            r#""x_v":{"k":true},"choices":[{"index":0,"delta":{"content":"i"}}]}"#,
            r#""x_v":{"k":false},"choices":[{"index":1,"delta":{"content":"j"}}]}"#,
            r#""usage":{"n":3},"choices":[{"index":0,"delta":{"content":5}}]}"#,
            r#""usage":{"n":"3"},"choices":[{"index":0,"delta":{"content":"k"}}]}"#,
            r#""obfuscation":"o","choices":[{"index":1,"delta":{"content":"l"}}]}"#,
            r#""obfuscation":7,"choices":[{"index":1,"delta":{"content":"m"}}]}"#,
        ];
        for (n, pair) in tails.chunks(2).enumerate() {
            let mut run = vec![first.clone()];
            for i in 0..8 {
                run.push(format!("{head}{}", pair[i % 2]));
                if i == 5 {
                    // A third shape between the two.
                    run.push(format!(
                        r#"{head}"choices":[{{"index":1,"delta":{{"refusal":"r"}}}}]}}"#
                    ));
                }
            }
            let lines: Vec<&[u8]> = run.iter().map(|l| l.as_bytes()).collect();
            agree(&lines, None);
            agree(&lines, Some(3));
            let mut acc = ChatAccumulator::new();
            for line in &lines[..2] {
                acc.add_json(line).unwrap();
            }
            if n < 5 {
                acc.add_json(lines[2]).unwrap();
                assert_eq!(kept(&acc), 1, "{pair:?} kept together");
            } else {
                assert!(
                    acc.read_shape(lines[2], false).is_none(),
                    "{pair:?} read as one"
                );
            }
            for at in 1..lines.len() {
                for mutated in mutations(lines[at]).into_iter().step_by(7) {
                    let mut mutated_lines = lines.clone();
                    mutated_lines[at] = &mutated;
                    agree_every(&mutated_lines, None, 3);
                }
            }
        }
    }

    /// A text hole's route (see [`append_routed`]): found, followed, found again when it leads
    /// elsewhere (an entry moved, a key renamed), and no string there left to `merge_string`.
    #[test]
    fn routed_appends_find_their_way_again() {
        let json = r#"{"index":0,"finish_reason":null,"message":{"role":"assistant","content":"a","tool_calls":[{"index":0,"function":{"name":"f","arguments":"{"}}]}}"#;
        let Ok(Value::Object(mut choice)) = serde_json::from_str::<Value>(json) else {
            unreachable!()
        };
        let path = [
            Step::Key("tool_calls".to_owned()),
            Step::Pos(0),
            Step::Key("function".to_owned()),
        ];
        let mut cap = TextCap::new(None);
        let mut route = Vec::new();
        assert!(append_routed(
            &mut choice,
            &path,
            "arguments",
            &mut route,
            "x",
            &mut cap
        ));
        assert_eq!(route, [2, 2, 1, 1]);
        assert!(append_routed(
            &mut choice,
            &path,
            "arguments",
            &mut route,
            "y",
            &mut cap
        ));
        let (mut content, mut empty) = (Vec::new(), Vec::new());
        assert!(append_routed(
            &mut choice,
            &[],
            "content",
            &mut content,
            "b",
            &mut cap
        ));
        assert_eq!(content, [2, 1]);
        // The message moved to another position, a key before `content` gone.
        let message = choice.shift_remove("message").unwrap();
        choice.insert("logprobs".to_owned(), Value::Null);
        choice.insert("message".to_owned(), message);
        choice["message"]
            .as_object_mut()
            .unwrap()
            .shift_remove("role");
        assert!(append_routed(
            &mut choice,
            &path,
            "arguments",
            &mut route,
            "z",
            &mut cap
        ));
        assert_eq!(route, [3, 1, 1, 1]);
        assert!(append_routed(
            &mut choice,
            &[],
            "content",
            &mut content,
            "c",
            &mut cap
        ));
        assert_eq!(content, [3, 0]);
        // Not a string (found, nothing done), or not there (not found).
        choice["message"]["content"] = Value::Null;
        assert!(!append_routed(
            &mut choice,
            &[],
            "content",
            &mut content,
            "d",
            &mut cap
        ));
        assert_eq!(content, [3, 0]);
        assert!(!append_routed(
            &mut choice,
            &[],
            "refusal",
            &mut empty,
            "d",
            &mut cap
        ));
        assert!(empty.is_empty());
        assert_eq!(choice["message"]["content"], Value::Null);
        let mut capped = TextCap::new(Some(4));
        assert!(append_routed(
            &mut choice,
            &path,
            "arguments",
            &mut route,
            "toolong",
            &mut capped
        ));
        assert_eq!(
            choice["message"]["tool_calls"][0]["function"]["arguments"],
            "{xyz"
        );
    }

    /// Every recording, and every recording with its chunks' order disturbed (each chunk after
    /// the next), at a few text caps; most chunks are read by the template.
    #[test]
    fn fast_path_agrees_on_the_corpus() {
        let streams = corpus_lines("chat");
        assert_eq!(streams.len(), 37);
        let (mut templated, mut chunks) = (0, 0);
        for lines in &streams {
            let lines: Vec<&[u8]> = lines
                .iter()
                .filter(|l| !l.is_empty())
                .map(|l| l.as_bytes())
                .collect();
            chunks += lines.len();
            templated += agree(&lines, None);
            agree(&lines, Some(16));
            let mut swapped = lines.clone();
            for pair in swapped.chunks_mut(2) {
                pair.reverse();
            }
            agree(&swapped, None);
        }
        assert!(
            templated * 2 > chunks,
            "{templated} of {chunks} chunks read by the template"
        );
    }

    /// Random edits of the corpus's chunks (deterministic xorshift, so failures reproduce).
    #[test]
    fn fast_path_agrees_on_random_edits_of_the_corpus() {
        let edits: &[u8] = b"\"\\}{[]:, a1-.e\x00\xc3\xa9";
        let mut next = xorshift();
        for lines in corpus_lines("chat") {
            let lines: Vec<Vec<u8>> = lines
                .iter()
                .filter(|l| !l.is_empty())
                .map(|l| l.as_bytes().to_vec())
                .collect();
            for _ in 0..12 {
                let mut edited = lines.clone();
                for _ in 0..1 + next() % 3 {
                    let line = &mut edited[(next() % lines.len() as u64) as usize];
                    if line.is_empty() {
                        continue;
                    }
                    let at = (next() % line.len() as u64) as usize;
                    let b = edits[(next() % edits.len() as u64) as usize];
                    match next() % 3 {
                        0 => line[at] = b,
                        1 => line.insert(at, b),
                        _ => {
                            line.remove(at);
                        }
                    }
                }
                let refs: Vec<&[u8]> = edited.iter().map(Vec::as_slice).collect();
                agree(&refs, [None, Some(8)][(next() % 2) as usize]);
            }
        }
    }
}
