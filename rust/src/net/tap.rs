//! The tap of one forwarded exchange: the protocol's accumulator fed the bytes as they are
//! forwarded, in place (no copy, no Python), and the first output noticed for the time to first
//! token.

use serde_json::Value;

use crate::accumulate::{
    Accumulate, AccumulateError, AnthropicAccumulator, ChatAccumulator, CompletionsAccumulator,
    GeminiAccumulator, RealtimeAccumulator, ResponseAccumulator, Tap, DEFAULT_TEXT_CAP,
};
use crate::framing::{Framer, FramingError};

/// The APIs the gateway taps, told from the request's path (see [`Protocol::for_path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Responses,
    Chat,
    Completions,
    Anthropic,
    Gemini,
    Realtime,
}

impl Protocol {
    /// The protocol of an HTTP path, as `rapidsse.integrations.protocol_for_path(path,
    /// default=None)` tells it (Realtime is told by the WebSocket upgrade, not here).
    pub fn for_path(path: &str) -> Option<Protocol> {
        let path = path.trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Protocol::Chat)
        } else if path.ends_with("/completions") {
            Some(Protocol::Completions)
        } else if path.ends_with("/messages") {
            Some(Protocol::Anthropic)
        } else if path.ends_with(":streamGenerateContent") || path.ends_with(":generateContent") {
            Some(Protocol::Gemini)
        } else if path.ends_with("/responses") {
            Some(Protocol::Responses)
        } else {
            None
        }
    }

    /// The name records and metrics use.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Responses => "responses",
            Protocol::Chat => "chat",
            Protocol::Completions => "completions",
            Protocol::Anthropic => "anthropic",
            Protocol::Gemini => "gemini",
            Protocol::Realtime => "realtime",
        }
    }

    /// The member of the final object that holds its output (for the first output).
    fn output_key(self) -> &'static str {
        match self {
            Protocol::Responses => "output",
            Protocol::Chat | Protocol::Completions => "choices",
            Protocol::Anthropic => "content",
            Protocol::Gemini => "candidates",
            Protocol::Realtime => "output",
        }
    }
}

/// One of the six accumulators. (One per stream, inside its tap, never moved on the data path: the
/// size of the largest variant costs nothing, a box would cost an allocation per stream.)
#[allow(clippy::large_enum_variant)]
pub enum Accumulator {
    Responses(ResponseAccumulator),
    Chat(ChatAccumulator),
    Completions(CompletionsAccumulator),
    Anthropic(AnthropicAccumulator),
    Gemini(GeminiAccumulator),
    Realtime(RealtimeAccumulator),
}

macro_rules! with_acc {
    ($self:expr, $acc:ident => $body:expr) => {
        match $self {
            Accumulator::Responses($acc) => $body,
            Accumulator::Chat($acc) => $body,
            Accumulator::Completions($acc) => $body,
            Accumulator::Anthropic($acc) => $body,
            Accumulator::Gemini($acc) => $body,
            Accumulator::Realtime($acc) => $body,
        }
    };
}

impl Accumulator {
    fn new(protocol: Protocol) -> Accumulator {
        let cap = Some(DEFAULT_TEXT_CAP);
        match protocol {
            Protocol::Responses => Accumulator::Responses(ResponseAccumulator::with_text_cap(cap)),
            Protocol::Chat => Accumulator::Chat(ChatAccumulator::with_text_cap(cap)),
            Protocol::Completions => {
                Accumulator::Completions(CompletionsAccumulator::with_text_cap(cap))
            }
            Protocol::Anthropic => Accumulator::Anthropic(AnthropicAccumulator::with_text_cap(cap)),
            Protocol::Gemini => Accumulator::Gemini(GeminiAccumulator::with_text_cap(cap)),
            Protocol::Realtime => Accumulator::Realtime(RealtimeAccumulator::with_text_cap(cap)),
        }
    }

    pub fn events(&self) -> u64 {
        with_acc!(self, acc => Accumulate::events(acc))
    }

    pub fn snapshot_json(&mut self) -> Option<Vec<u8>> {
        with_acc!(self, acc => Accumulate::snapshot_json(acc))
    }
}

/// A payload the tap could not read, as the Python accumulator reports it (`reason`, the event's
/// index, its SSE name, its stream offset, its payload, and the cap for a text past it).
#[derive(Debug, Clone)]
pub struct Refused {
    pub reason: String,
    pub index: u64,
    pub event: Vec<u8>,
    pub offset: i64,
    pub raw: Vec<u8>,
    pub limit: Option<usize>,
}

/// What went wrong first while tapping: a payload refused, or the framing given up.
#[derive(Debug, Clone)]
pub enum TapError {
    Refused(Refused),
    /// The record's error text (`EventTooLarge: ...`, `SSEError: ...`).
    Framing(String),
}

/// The tap of one exchange.
pub struct StreamTap {
    pub protocol: Protocol,
    pub framer: Framer,
    pub acc: Accumulator,
    /// The first thing the tap could not read (the stream is still forwarded untouched).
    pub error: Option<TapError>,
    /// Events counted when the output was last looked for; None once output was found.
    seen: Option<u64>,
    /// Bytes forwarded after the first output and not fed yet (see [`forwarded`](Self::forwarded)).
    held: Vec<u8>,
}

/// Bytes of a stream held, once its first output came, before they are fed in one go.
pub const TAP_BATCH: usize = 4096;

impl StreamTap {
    pub fn new(protocol: Protocol) -> StreamTap {
        StreamTap {
            protocol,
            framer: Framer::new(Some(DEFAULT_TEXT_CAP)),
            acc: Accumulator::new(protocol),
            error: None,
            seen: Some(0),
            held: Vec::new(),
        }
    }

    /// Takes one chunk as forwarded. Until the stream's first output each chunk is fed at once
    /// (true: this one brought it, the time to first token); from then on chunks are held and
    /// fed about [`TAP_BATCH`] bytes at a time. Fed chunk by chunk, a stream's tap ran each time
    /// on caches the kernel's work for the socket had just cooled: in the gateway at 256 streams
    /// that made it cost five to ten times what it costs on warm ones. The framer and the
    /// accumulators read any chunking alike, so the tap ends as if fed chunk by chunk once
    /// [`finish`](Self::finish) fed the rest.
    pub fn forwarded(&mut self, chunk: &[u8]) -> bool {
        if self.seen.is_some() {
            return self.feed(chunk);
        }
        if self.held.is_empty() && chunk.len() >= TAP_BATCH {
            self.feed(chunk);
            return false;
        }
        if self.held.capacity() == 0 {
            self.held.reserve_exact(TAP_BATCH);
        }
        self.held.extend_from_slice(chunk);
        if self.held.len() >= TAP_BATCH {
            let mut held = std::mem::take(&mut self.held);
            self.feed(&held);
            held.clear();
            self.held = held;
        }
        false
    }

    /// Feeds what [`forwarded`](Self::forwarded) holds, and lets its buffer go: the stream
    /// ended (or was cut, or its client left).
    pub fn finish(&mut self) {
        let held = std::mem::take(&mut self.held);
        if !held.is_empty() {
            self.feed(&held);
        }
    }

    /// Feeds one chunk of an event stream as forwarded. True when this chunk brought the
    /// stream's first output (text, refusal, reasoning or tool arguments).
    pub fn feed(&mut self, chunk: &[u8]) -> bool {
        let framed = with_acc!(&mut self.acc, acc => feed_one(&mut self.framer, acc, chunk, &mut self.error));
        if let Err(err) = framed {
            if self.error.is_none() {
                self.error = Some(TapError::Framing(match err {
                    FramingError::TooLarge(e) => format!("EventTooLarge: {e}"),
                    other => format!("SSEError: {other}"),
                }));
            }
        }
        self.look_for_output()
    }

    /// Adds one WebSocket message (Realtime). True when it brought the session's first output.
    pub fn add_message(&mut self, message: &[u8]) -> bool {
        let index = self.acc.events();
        let result = with_acc!(&mut self.acc, acc => Accumulate::add_json(acc, message));
        if let Err(error) = result {
            if self.error.is_none() {
                self.error = Some(TapError::Refused(refused(
                    error, index, b"message", -1, message,
                )));
            }
        }
        self.look_for_output()
    }

    /// Whether output came, looked for only after events were added and until it is found.
    fn look_for_output(&mut self) -> bool {
        let Some(seen) = self.seen else {
            return false;
        };
        let events = self.acc.events();
        if events == seen {
            return false;
        }
        let found = self
            .acc
            .snapshot_json()
            .is_some_and(|json| has_output(self.protocol, &json));
        self.seen = if found { None } else { Some(events) };
        found
    }
}

fn feed_one<A: Accumulate>(
    framer: &mut Framer,
    acc: &mut A,
    chunk: &[u8],
    error: &mut Option<TapError>,
) -> Result<(), FramingError> {
    let mut sink = Tap::new(acc, framer);
    let result = framer.feed_into(chunk, &mut sink);
    if error.is_none() {
        if let Some(r) = sink.refused.into_iter().next() {
            *error = Some(TapError::Refused(refused(
                r.error,
                r.index,
                &r.event,
                r.offset as i64,
                &r.data,
            )));
        }
    }
    result
}

fn refused(error: AccumulateError, index: u64, event: &[u8], offset: i64, raw: &[u8]) -> Refused {
    let limit = match &error {
        AccumulateError::TextTooLarge { limit, .. } => Some(*limit),
        _ => None,
    };
    Refused {
        reason: error.to_string(),
        index,
        event: event.to_vec(),
        offset,
        raw: raw.to_vec(),
        limit,
    }
}

/// The members that hold generated output (the gateway's `_TEXT_KEYS`).
const TEXT_KEYS: [&str; 9] = [
    "text",
    "content",
    "arguments",
    "refusal",
    "thinking",
    "reasoning",
    "reasoning_content",
    "input",
    "partial_json",
];

/// Whether the JSON of the object built so far holds output (as the asyncio engine's
/// `_has_output`: a non-empty string or object under one of [`TEXT_KEYS`] at any depth of the
/// output member; for Realtime, of any response's `output`).
pub fn has_output(protocol: Protocol, snapshot: &[u8]) -> bool {
    let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(snapshot) else {
        return false;
    };
    if protocol == Protocol::Realtime {
        return top.values().any(|response| {
            response
                .as_object()
                .and_then(|r| r.get("output"))
                .is_some_and(has_text)
        });
    }
    top.get(protocol.output_key()).is_some_and(has_text)
}

fn has_text(node: &Value) -> bool {
    match node {
        Value::Object(map) => map.iter().any(|(key, value)| {
            (TEXT_KEYS.contains(&key.as_str())
                && match value {
                    Value::String(s) => !s.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    _ => false,
                })
                || has_text(value)
        }),
        Value::Array(items) => items.iter().any(has_text),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_by_path() {
        assert_eq!(
            Protocol::for_path("/v1/chat/completions"),
            Some(Protocol::Chat)
        );
        assert_eq!(
            Protocol::for_path("/v1/completions/"),
            Some(Protocol::Completions)
        );
        assert_eq!(
            Protocol::for_path("/v1/messages"),
            Some(Protocol::Anthropic)
        );
        assert_eq!(
            Protocol::for_path("/v1beta/models/g:streamGenerateContent"),
            Some(Protocol::Gemini)
        );
        assert_eq!(
            Protocol::for_path("/v1/responses"),
            Some(Protocol::Responses)
        );
        assert_eq!(Protocol::for_path("/v1/models"), None);
    }

    #[test]
    fn first_output_is_the_chunk_that_brings_text() {
        let mut tap = StreamTap::new(Protocol::Chat);
        let head = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert!(!tap.feed(head));
        let text = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
        // Cut mid-event: the first half completes no event.
        assert!(!tap.feed(&text[..40]));
        assert!(tap.feed(&text[40..]));
        assert!(!tap.feed(text), "found once");
        assert!(tap.error.is_none());
        assert_eq!(tap.acc.events(), 3);
    }

    #[test]
    fn a_bad_payload_is_kept_as_the_first_error_and_the_rest_is_read() {
        let mut tap = StreamTap::new(Protocol::Responses);
        tap.feed(b"data: {nope\n\ndata: [1]\n\n");
        match &tap.error {
            Some(TapError::Refused(r)) => {
                assert_eq!(r.index, 0);
                assert_eq!(r.raw, b"{nope");
                assert!(r.limit.is_none());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn realtime_output_is_found_once_in_a_recorded_session() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/corpus/realtime/test_openai_ws_sideband__test_webrtc_sideband_text_turn.jsonl"
        );
        let text = std::fs::read_to_string(path).expect("the corpus recording");
        let mut tap = StreamTap::new(Protocol::Realtime);
        let found: Vec<usize> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .filter_map(|(i, line)| tap.add_message(line.as_bytes()).then_some(i))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0] > 0, "the session starts with no output");
        assert!(tap.error.is_none());
    }

    #[test]
    fn held_and_fed_in_batches_the_tap_ends_as_fed_chunk_by_chunk_on_the_corpus() {
        let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");
        let mut recordings = 0;
        for (folder, protocol) in [
            ("responses", Protocol::Responses),
            ("chat", Protocol::Chat),
            ("anthropic", Protocol::Anthropic),
            ("gemini", Protocol::Gemini),
        ] {
            let mut paths: Vec<_> = std::fs::read_dir(format!("{corpus}/{folder}"))
                .expect("the corpus")
                .map(|entry| entry.expect("an entry").path())
                .filter(|path| path.extension().is_some_and(|e| e == "sse"))
                .collect();
            paths.sort();
            for path in paths {
                let stream = std::fs::read(&path).expect("a recording");
                // Small pieces (many per event) and large ones (several events, some past
                // TAP_BATCH on their own).
                for size in [37, 1000, 5000] {
                    let (mut one, mut held) = (StreamTap::new(protocol), StreamTap::new(protocol));
                    let mut first = (None, None);
                    for (i, piece) in stream.chunks(size).enumerate() {
                        if one.feed(piece) && first.0.is_none() {
                            first.0 = Some(i);
                        }
                        if held.forwarded(piece) && first.1.is_none() {
                            first.1 = Some(i);
                        }
                    }
                    held.finish();
                    let name = format!("{} in pieces of {size}", path.display());
                    assert_eq!(first.0, first.1, "first output: {name}");
                    assert_eq!(one.acc.events(), held.acc.events(), "{name}");
                    assert_eq!(one.error.is_some(), held.error.is_some(), "{name}");
                    assert_eq!(one.acc.snapshot_json(), held.acc.snapshot_json(), "{name}");
                    assert_eq!(held.held.capacity(), 0, "the buffer let go: {name}");
                }
                recordings += 1;
            }
        }
        assert!(recordings >= 20, "{recordings} recordings");
    }
}
