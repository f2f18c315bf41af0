//! Token counting for the benchmark client (`rapidsse measure --engine native`): the response body
//! of one streamed request in, token events counted per read, and what the stream said of its end,
//! its usage and its errors.
//!
//! The counts are those of the asyncio engine's adapters (`_ResponsesAdapter`, `_ChatAdapter`,
//! `_CompletionsAdapter`, `_AnthropicAdapter`, `_GeminiAdapter` in
//! `python/rapidsse/serving/measure.py`), event for event: a *token* is one event that carries
//! output (text, reasoning, refusal, tool-call arguments). Each event's JSON is read with serde
//! into structs of only the fields counted, kept as whether they hold something (no copy of the
//! text); an event whose JSON is not what the API sends is skipped, as the adapters skip it. The
//! Python suite checks the two engines agree on every recording of the corpus.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

use super::tap::Protocol;
use crate::framing::{Framer, FramingError};

/// What the stream said besides its tokens: whether it reached its final event, the first error it
/// reported, and the server's usage counts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub finished: bool,
    pub error: Option<String>,
    pub output_tokens: Option<i64>,
    pub input_tokens: Option<i64>,
}

impl Outcome {
    fn error_once(&mut self, message: impl FnOnce() -> String) {
        if self.error.is_none() {
            self.error = Some(message());
        }
    }
}

/// The token counter of one response body.
pub struct TokenCounter {
    protocol: Protocol,
    framer: Framer,
    outcome: Outcome,
}

/// The Python framer's default cap on one event (`rapidsse.framing.DEFAULT_MAX_EVENT_SIZE`).
const MAX_EVENT_SIZE: usize = 16 * 1024 * 1024;

impl TokenCounter {
    /// A counter for `protocol`'s streams; None for Realtime (a WebSocket, not a stream of events).
    pub fn new(protocol: Protocol) -> Option<TokenCounter> {
        if protocol == Protocol::Realtime {
            return None;
        }
        Some(TokenCounter {
            protocol,
            framer: Framer::new(Some(MAX_EVENT_SIZE)),
            outcome: Outcome::default(),
        })
    }

    /// Takes the next piece of the body; returns how many tokens it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<u32, FramingError> {
        let TokenCounter {
            protocol,
            framer,
            outcome,
        } = self;
        let mut tokens = 0;
        framer.feed(chunk, |event| {
            tokens += count(*protocol, event.data, outcome)
        })?;
        Ok(tokens)
    }

    /// What the stream said so far.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// What this protocol ends a stream with (for the cut-short reason), as the adapters word it.
    pub fn final_event(&self) -> &'static str {
        match self.protocol {
            Protocol::Responses => "response.completed",
            Protocol::Chat => "a finish_reason or [DONE]",
            Protocol::Completions => "[DONE]",
            Protocol::Anthropic => "message_stop",
            Protocol::Gemini | Protocol::Realtime => "a finishReason",
        }
    }
}

/// One event's data: its tokens (0 or 1), and what it says of the end, usage and errors.
fn count(protocol: Protocol, data: &[u8], outcome: &mut Outcome) -> u32 {
    if data == b"[DONE]" {
        if matches!(protocol, Protocol::Chat | Protocol::Completions) {
            outcome.finished = true;
        }
        return 0;
    }
    match protocol {
        Protocol::Responses => serde_json::from_slice(data).map_or(0, |e| responses(e, outcome)),
        Protocol::Chat => serde_json::from_slice(data).map_or(0, |e| chat(e, outcome)),
        Protocol::Completions => {
            serde_json::from_slice(data).map_or(0, |e| completions(e, outcome))
        }
        Protocol::Anthropic => serde_json::from_slice(data).map_or(0, |e| anthropic(e, outcome)),
        Protocol::Gemini => serde_json::from_slice(data).map_or(0, |e| gemini(e, outcome)),
        Protocol::Realtime => 0,
    }
}

// --- Field kinds: whether a field holds something, as Python's truthiness tells it -----------------

/// A `str | None` field, kept as whether it holds text (a non-empty string). Anything but a string
/// or null fails the event, as the adapters' typed decodes fail it.
#[derive(Debug, Default, Clone, Copy)]
struct Text(bool);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(!v.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
                Ok(Text(false))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A `list | None` field, kept as whether it holds an item.
#[derive(Debug, Default, Clone, Copy)]
struct Items(bool);

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Items, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Items;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list or null")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
                let mut any = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(Items(any))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Items, E> {
                Ok(Items(false))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A field whose value is not read, only whether it was there (even as null: Gemini's
/// `functionCall`, which the adapter keeps as raw JSON).
#[derive(Debug, Default, Clone, Copy)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Present, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Present(true))
    }
}

/// An error `code`: a string or an integer (as the adapters' `str | int | None`), kept as Python's
/// `str()` of it when truthy.
#[derive(Debug, Default, Clone)]
struct Code(Option<String>);

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Code, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Code;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, an integer or null")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Code, E> {
                Ok(Code((!v.is_empty()).then(|| v.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Code, E> {
                Ok(Code((v != 0).then(|| v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Code, E> {
                Ok(Code((v != 0).then(|| v.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Code, E> {
                Ok(Code(None))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A message: its text when truthy.
fn truthy(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

/// The error object of Completions, Anthropic and Gemini (and of Chat chunks).
#[derive(Deserialize, Default)]
struct ErrorObject {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    code: Code,
}

impl ErrorObject {
    /// `error event: {message or code or type or 'no message'}`, as the framed adapters word it.
    fn event(self) -> String {
        let text = truthy(self.message)
            .or(self.code.0)
            .or(truthy(self.kind))
            .unwrap_or_else(|| "no message".into());
        format!("error event: {text}")
    }
}

// --- Responses -----------------------------------------------------------------------------------

#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default)]
    response: Option<ResponseObject>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Code,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct ResponseObject {
    #[serde(default)]
    usage: Option<ResponsesUsage>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct ResponsesUsage {
    #[serde(default)]
    input_tokens: Option<i64>,
    #[serde(default)]
    output_tokens: Option<i64>,
}

fn responses(event: ResponsesEvent<'_>, outcome: &mut Outcome) -> u32 {
    match &*event.kind {
        "response.output_text.delta"
        | "response.refusal.delta"
        | "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta"
        | "response.function_call_arguments.delta"
        | "response.custom_tool_call_input.delta" => 1,
        kind @ ("response.completed" | "response.incomplete" | "response.failed") => {
            outcome.finished = true;
            if let Some(response) = event.response {
                if let Some(usage) = response.usage {
                    outcome.output_tokens = usage.output_tokens;
                    outcome.input_tokens = usage.input_tokens;
                }
                if kind == "response.failed" {
                    let message = response.error.and_then(|e| truthy(e.message));
                    outcome.error_once(|| {
                        format!(
                            "response.failed: {}",
                            message.as_deref().unwrap_or("no message")
                        )
                    });
                }
            }
            0
        }
        "error" => {
            let text = truthy(event.message)
                .or_else(|| event.error.and_then(|e| truthy(e.message)))
                .or(event.code.0)
                .unwrap_or_else(|| "no message".into());
            outcome.error_once(|| format!("error event: {text}"));
            0
        }
        _ => 0,
    }
}

// --- Chat Completions --------------------------------------------------------------------------

#[derive(Deserialize)]
struct ChatChunk {
    #[serde(default)]
    choices: Vec<ChatChoice>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct ChatChoice {
    #[serde(default)]
    delta: Option<ChatDelta>,
    #[serde(default)]
    finish_reason: Text,
}

#[derive(Deserialize)]
struct ChatDelta {
    #[serde(default)]
    content: Text,
    #[serde(default)]
    refusal: Text,
    #[serde(default)]
    reasoning: Text,
    #[serde(default)]
    reasoning_content: Text,
    #[serde(default)]
    tool_calls: Items,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: Option<i64>,
    #[serde(default)]
    completion_tokens: Option<i64>,
}

fn chat(chunk: ChatChunk, outcome: &mut Outcome) -> u32 {
    let mut tokens = 0;
    for choice in &chunk.choices {
        if let Some(d) = &choice.delta {
            if d.content.0
                || d.refusal.0
                || d.reasoning.0
                || d.reasoning_content.0
                || d.tool_calls.0
            {
                tokens = 1;
            }
        }
        if choice.finish_reason.0 {
            outcome.finished = true;
        }
    }
    if let Some(usage) = chunk.usage {
        outcome.output_tokens = usage.completion_tokens;
        outcome.input_tokens = usage.prompt_tokens;
    }
    if let Some(error) = chunk.error {
        // (Chat's typed error: message or code.)
        let text = truthy(error.message)
            .or(error.code.0)
            .unwrap_or_else(|| "no message".into());
        outcome.error_once(|| format!("error event: {text}"));
    }
    tokens
}

// --- Completions ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct CompletionChunk {
    #[serde(default)]
    choices: Vec<CompletionChoice>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct CompletionChoice {
    #[serde(default)]
    text: Text,
    #[serde(default)]
    #[allow(dead_code)]
    // read only to fail the event as the adapter does when it is not a string
    finish_reason: Text,
}

fn completions(chunk: CompletionChunk, outcome: &mut Outcome) -> u32 {
    if let Some(usage) = chunk.usage {
        outcome.output_tokens = usage.completion_tokens;
        outcome.input_tokens = usage.prompt_tokens;
    }
    if let Some(error) = chunk.error {
        outcome.error_once(|| error.event());
    }
    u32::from(chunk.choices.iter().any(|c| c.text.0))
}

// --- Anthropic Messages ----------------------------------------------------------------------------

#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default)]
    delta: Option<AnthropicDelta>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
    #[serde(default)]
    message: Option<AnthropicMessage>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct AnthropicDelta {
    #[serde(default)]
    text: Text,
    #[serde(default)]
    thinking: Text,
    #[serde(default)]
    partial_json: Text,
}

#[derive(Deserialize)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Option<i64>,
    #[serde(default)]
    output_tokens: Option<i64>,
}

#[derive(Deserialize)]
struct AnthropicMessage {
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

fn anthropic(event: AnthropicEvent<'_>, outcome: &mut Outcome) -> u32 {
    match &*event.kind {
        "content_block_delta" => u32::from(
            event
                .delta
                .is_some_and(|d| d.text.0 || d.thinking.0 || d.partial_json.0),
        ),
        "message_start" => {
            if let Some(usage) = event.message.and_then(|m| m.usage) {
                outcome.input_tokens = usage.input_tokens;
            }
            0
        }
        "message_delta" => {
            if let Some(usage) = event.usage {
                if usage.output_tokens.is_some() {
                    outcome.output_tokens = usage.output_tokens;
                    if usage.input_tokens.is_some() {
                        outcome.input_tokens = usage.input_tokens;
                    }
                }
            }
            0
        }
        "message_stop" => {
            outcome.finished = true;
            0
        }
        "error" => {
            let error = event.error.unwrap_or_default();
            outcome.error_once(|| error.event());
            0
        }
        _ => 0,
    }
}

// --- Gemini -------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[allow(non_snake_case)] // the API's names
struct GeminiChunk {
    #[serde(default)]
    candidates: Vec<GeminiCandidate>,
    #[serde(default)]
    usageMetadata: Option<GeminiUsage>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct GeminiCandidate {
    #[serde(default)]
    content: Option<GeminiContent>,
    #[serde(default)]
    finishReason: Text,
}

#[derive(Deserialize)]
struct GeminiContent {
    #[serde(default)]
    parts: Vec<GeminiPart>,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct GeminiPart {
    #[serde(default)]
    text: Text,
    #[serde(default)]
    functionCall: Present,
    #[serde(default)]
    executableCode: Present,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct GeminiUsage {
    #[serde(default)]
    promptTokenCount: Option<i64>,
    #[serde(default)]
    candidatesTokenCount: Option<i64>,
    #[serde(default)]
    thoughtsTokenCount: Option<i64>,
}

fn gemini(chunk: GeminiChunk, outcome: &mut Outcome) -> u32 {
    let mut tokens = 0;
    for candidate in &chunk.candidates {
        if let Some(content) = &candidate.content {
            if content
                .parts
                .iter()
                .any(|p| p.text.0 || p.functionCall.0 || p.executableCode.0)
            {
                tokens = 1;
            }
        }
        if candidate.finishReason.0 {
            outcome.finished = true;
        }
    }
    if let Some(usage) = chunk.usageMetadata {
        outcome.input_tokens = usage.promptTokenCount;
        if let Some(candidates) = usage.candidatesTokenCount {
            outcome.output_tokens = Some(candidates + usage.thoughtsTokenCount.unwrap_or(0));
        }
    }
    if let Some(error) = chunk.error {
        outcome.error_once(|| error.event());
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(protocol: Protocol, body: &[u8], size: usize) -> (u32, Outcome) {
        let mut counter = TokenCounter::new(protocol).unwrap();
        let tokens = body.chunks(size).map(|c| counter.feed(c).unwrap()).sum();
        (tokens, counter.outcome().clone())
    }

    #[test]
    fn chat_counts_one_token_per_chunk_with_output_and_reads_usage_and_done() {
        let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}},{\"delta\":{\"content\":\"x\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":5}}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n\
data: [DONE]\n\n";
        for size in [1, 7, body.len()] {
            let (tokens, outcome) = run(Protocol::Chat, body, size);
            assert_eq!(
                tokens, 2,
                "the empty delta and the non-string content count nothing"
            );
            assert!(outcome.finished && outcome.error.is_none());
            assert_eq!(
                (outcome.input_tokens, outcome.output_tokens),
                (Some(3), Some(2))
            );
        }
    }

    #[test]
    fn errors_are_worded_as_the_adapters_word_them() {
        let (_, chat) = run(
            Protocol::Chat,
            b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n",
            5,
        );
        assert_eq!(chat.error.as_deref(), Some("error event: overloaded"));
        let (_, completions) = run(
            Protocol::Completions,
            b"data: {\"error\":{\"code\":503}}\n\n",
            5,
        );
        assert_eq!(completions.error.as_deref(), Some("error event: 503"));
        let (_, anthropic) = run(Protocol::Anthropic, b"data: {\"type\":\"error\"}\n\n", 5);
        assert_eq!(anthropic.error.as_deref(), Some("error event: no message"));
        let failed = b"data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"message\":\"it broke\"}}}\n\n";
        let (_, responses) = run(Protocol::Responses, failed, 3);
        assert!(responses.finished);
        assert_eq!(
            responses.error.as_deref(),
            Some("response.failed: it broke")
        );
    }

    #[test]
    fn gemini_counts_function_calls_and_adds_thoughts_to_output() {
        let body = b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":null}]}}]}\r\n\r\n\
data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"STOP\"}],\
\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":2,\"thoughtsTokenCount\":3}}\r\n\r\n";
        let (tokens, outcome) = run(Protocol::Gemini, body, 11);
        assert_eq!(tokens, 1);
        assert!(outcome.finished);
        assert_eq!(
            (outcome.input_tokens, outcome.output_tokens),
            (Some(4), Some(5))
        );
    }

    #[test]
    fn anthropic_and_completions_end_and_usage() {
        let body = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7}}}\n\n\
data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n\
data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n\
data: {\"type\":\"message_stop\"}\n\n";
        let (tokens, outcome) = run(Protocol::Anthropic, body, 2);
        assert_eq!(tokens, 1);
        assert!(outcome.finished);
        assert_eq!(
            (outcome.input_tokens, outcome.output_tokens),
            (Some(7), Some(9))
        );
        let body =
            b"data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\ndata: [DONE]\n\n";
        let (tokens, outcome) = run(Protocol::Completions, body, 4);
        assert_eq!(tokens, 1);
        assert!(outcome.finished);
        assert!(TokenCounter::new(Protocol::Realtime).is_none());
    }
}
