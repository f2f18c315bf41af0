//! The synthetic streams of `rapidsse serve --synthetic`, as bytes: what each of the five HTTP
//! APIs sends for a request, byte for byte what the Python server
//! (`rapidsse.serving.serve._SYNTHETIC_STREAMS`) sends for the same request, and when.
//!
//! A request becomes a [`Plan`] (model, token count, truncation, prompt words, usage wanted, id,
//! creation time) and the plan a [`Writer`], which renders the parts of its chunks that do not
//! change once, so that a token costs a copy of those pieces and of its word.
//! [`serve`](super::serve) paces the tokens.

use bytes::Bytes;
use serde_json::Value;

/// The words of the synthetic text, token `i` being `WORDS[i % 14]` (`_SYNTHETIC_WORDS`).
pub const WORDS: [&str; 14] = [
    "Hello",
    " there",
    ",",
    " this",
    " is",
    " a",
    " synthetic",
    " stream",
    " of",
    " tokens",
    " paced",
    " by",
    " rapidsse",
    ".",
];

/// The text of token `index`.
pub fn token(index: usize) -> &'static str {
    WORDS[index % WORDS.len()]
}

/// The whole text of a stream of `tokens` tokens.
pub fn text(tokens: usize) -> String {
    (0..tokens).map(token).collect()
}

/// What the server streams: `tokens` tokens per stream (fewer when a request asks), the first
/// `ttft` seconds after the request, then `rate` tokens per second (`0`: all at once).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    pub tokens: usize,
    pub rate: f64,
    pub ttft: f64,
}

impl Spec {
    /// The spec, or why it is not one (as `Synthetic` in Python refuses it).
    pub fn new(tokens: usize, rate: f64, ttft: f64) -> Result<Spec, String> {
        if tokens < 1 {
            return Err("tokens must be at least 1".to_owned());
        }
        if !(rate.is_finite() && ttft.is_finite() && rate >= 0.0 && ttft >= 0.0) {
            return Err("ttft and rate must not be negative".to_owned());
        }
        Ok(Spec { tokens, rate, ttft })
    }

    /// Seconds after the request at which token `index` (0-based) is due: `ttft + index / rate`,
    /// always from the request's arrival, so that a late token does not delay the next.
    pub fn due(&self, index: usize) -> f64 {
        let pacing = super::replay::Pacing {
            ttft: self.ttft,
            rate: self.rate,
        };
        pacing.due(index)
    }
}

/// The five streaming APIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Responses,
    Chat,
    Completions,
    Anthropic,
    Gemini,
}

impl Api {
    /// The request's field that holds the prompt (`_PROMPT_KEYS`).
    fn prompt_key(self) -> &'static str {
        match self {
            Api::Responses => "input",
            Api::Chat | Api::Anthropic => "messages",
            Api::Completions => "prompt",
            Api::Gemini => "contents",
        }
    }
}

/// One synthetic stream: what to send, decided when the request arrives (`_Plan`).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub api: Api,
    pub model: String,
    pub tokens: usize,
    /// The request's limit cut the stream (`finish_reason: "length"` and the like).
    pub truncated: bool,
    pub prompt_tokens: u64,
    /// Chat and Completions: `stream_options.include_usage` was true.
    pub include_usage: bool,
    pub id: String,
    /// Unix seconds.
    pub created: u64,
}

impl Plan {
    /// The plan for a request's JSON `body` (an object) to `api`; `path_model` is Gemini's model
    /// (from the path), `number` the route's count of streams so far (the id).
    pub fn new(
        api: Api,
        body: &serde_json::Map<String, Value>,
        path_model: Option<&str>,
        spec: &Spec,
        number: u64,
        created: u64,
    ) -> Plan {
        let limit = limit(api, body);
        let tokens = limit.map_or(spec.tokens, |l| l.min(spec.tokens as u64) as usize);
        let model = match api {
            Api::Gemini => path_model,
            _ => body.get("model").and_then(Value::as_str),
        };
        let include_usage = matches!(
            body.get("stream_options"),
            Some(Value::Object(options)) if options.get("include_usage") == Some(&Value::Bool(true))
        );
        Plan {
            api,
            model: model.unwrap_or("synthetic").to_owned(),
            tokens,
            truncated: limit.is_some_and(|l| l <= tokens as u64),
            prompt_tokens: body.get(api.prompt_key()).map_or(0, words),
            include_usage,
            id: format!("synthetic{number:08}"),
            created,
        }
    }
}

/// The token limit a request asks for (`_limit`): the first of the API's fields that is not
/// null, when it is a positive integer.
fn limit(api: Api, body: &serde_json::Map<String, Value>) -> Option<u64> {
    let keys: &[&str] = match api {
        Api::Responses => &["max_output_tokens"],
        Api::Chat => &["max_completion_tokens", "max_tokens"],
        Api::Completions | Api::Anthropic => &["max_tokens"],
        Api::Gemini => {
            return match body.get("generationConfig") {
                Some(Value::Object(config)) => positive(config.get("maxOutputTokens")),
                _ => None,
            }
        }
    };
    let value = keys
        .iter()
        .filter_map(|key| body.get(*key))
        .find(|value| !value.is_null());
    positive(value)
}

/// A JSON integer above zero. (Integers past `u64` parse as floats and are refused, where Python
/// takes them; either way such a limit is above any stream's length, so the stream is the same.)
fn positive(value: Option<&Value>) -> Option<u64> {
    value.and_then(Value::as_u64).filter(|&n| n > 0)
}

/// Whether Python's `str.split()` splits at `c`: Unicode White_Space, plus the four ASCII
/// separators U+001C..U+001F that Python counts as whitespace and Rust does not.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Words in the prompt texts of `value` (`_words`): strings, and the text fields of messages
/// and parts.
pub fn words(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.split(is_python_space).filter(|w| !w.is_empty()).count() as u64,
        Value::Array(items) => items.iter().map(words).sum(),
        Value::Object(map) => map
            .iter()
            .filter(|(key, _)| {
                matches!(
                    key.as_str(),
                    "content" | "text" | "input" | "prompt" | "parts"
                )
            })
            .map(|(_, item)| words(item))
            .sum(),
        _ => 0,
    }
}

/// A JSON string as msgspec writes it (the same escapes as serde_json's: `"`, `\`, and control
/// characters; everything else as UTF-8).
fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serializes")
}

/// An SSE event block with an `event:` line (`_sse(data, event)`).
fn named(event: &str, data: &str) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// The bytes of one stream: [`opening`](Writer::opening) at once, then [`token`](Writer::token)
/// `i` for each token, the last one carrying the closing events.
pub struct Writer {
    plan: Plan,
    /// What comes before a token's word (`"` included) and after it, for a token that is neither
    /// the first (Chat's has the role) nor the last; the variable numbers (Responses' sequence
    /// number, Gemini's counts) are written between further pieces, see [`Writer::token`].
    before: String,
    after: String,
    /// Gemini: what comes between the finish reason and the candidates count, and after the
    /// total count.
    usage: String,
    end: String,
}

impl Writer {
    pub fn new(plan: Plan) -> Writer {
        let id = &plan.id;
        let model = json_str(&plan.model);
        let usage_null = if plan.include_usage {
            ",\"usage\":null"
        } else {
            ""
        };
        let (before, after) = match plan.api {
            Api::Responses => (
                format!(
                    ",\"item_id\":\"msg_{id}\",\"output_index\":0,\"content_index\":0,\"delta\":"
                ),
                ",\"logprobs\":[]}\n\n".to_owned(),
            ),
            Api::Chat => (
                format!(
                    "data: {{\"id\":\"chatcmpl-{id}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{model},\"choices\":[{{\"index\":0,\"delta\":{{",
                    plan.created
                ),
                format!("}},\"logprobs\":null,\"finish_reason\":null}}]{usage_null}}}\n\n"),
            ),
            Api::Completions => (
                format!(
                    "data: {{\"id\":\"cmpl-{id}\",\"object\":\"text_completion\",\"created\":{},\"model\":{model},\"choices\":[{{\"index\":0,\"text\":",
                    plan.created
                ),
                ",\"logprobs\":null,\"finish_reason\":".to_owned(),
            ),
            Api::Anthropic => (
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":".to_owned(),
                "}}\n\n".to_owned(),
            ),
            Api::Gemini => (
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":".to_owned(),
                "}],\"role\":\"model\"},\"index\":0".to_owned(),
            ),
        };
        let (usage, end) = match plan.api {
            Api::Gemini => (
                format!(
                    "}}],\"usageMetadata\":{{\"promptTokenCount\":{},\"candidatesTokenCount\":",
                    plan.prompt_tokens
                ),
                format!("}},\"modelVersion\":{model},\"responseId\":\"{id}\"}}\r\n\r\n"),
            ),
            _ => (String::new(), String::new()),
        };
        Writer {
            plan,
            before,
            after,
            usage,
            end,
        }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What is sent as soon as the request is read (Responses' and Anthropic's opening events);
    /// None for the APIs that start with the first token.
    pub fn opening(&self) -> Option<Bytes> {
        let plan = &self.plan;
        let id = &plan.id;
        let model = json_str(&plan.model);
        match plan.api {
            Api::Responses => {
                let response = self.response("in_progress", "[]", false);
                let item = format!(
                    "{{\"id\":\"msg_{id}\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}"
                );
                let mut out = String::new();
                out += &self.event("response.created", 0, &format!(",\"response\":{response}"));
                out += &self.event(
                    "response.in_progress",
                    1,
                    &format!(",\"response\":{response}"),
                );
                out += &self.event(
                    "response.output_item.added",
                    2,
                    &format!(",\"output_index\":0,\"item\":{item}"),
                );
                out += &self.event(
                    "response.content_part.added",
                    3,
                    &format!(
                        ",\"item_id\":\"msg_{id}\",\"output_index\":0,\"content_index\":0,\"part\":{{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}"
                    ),
                );
                Some(Bytes::from(out))
            }
            Api::Anthropic => {
                let message = format!(
                    "{{\"id\":\"msg_{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":{model},\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":{},\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}}",
                    plan.prompt_tokens
                );
                let mut out = named(
                    "message_start",
                    &format!("{{\"type\":\"message_start\",\"message\":{message}}}"),
                );
                out += &named(
                    "content_block_start",
                    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
                );
                out += &named("ping", "{\"type\":\"ping\"}");
                Some(Bytes::from(out))
            }
            Api::Chat | Api::Completions | Api::Gemini => None,
        }
    }

    /// The bytes of token `index` (below `plan.tokens`), with the closing events after the last.
    pub fn token(&self, index: usize) -> Bytes {
        let plan = &self.plan;
        let last = index + 1 == plan.tokens;
        let word = token(index);
        let mut out = Vec::with_capacity(self.before.len() + self.after.len() + 64);
        let quoted = |out: &mut Vec<u8>| {
            out.push(b'"');
            out.extend_from_slice(word.as_bytes());
            out.push(b'"');
        };
        match plan.api {
            Api::Responses => {
                out.extend_from_slice(
                    b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":",
                );
                out.extend_from_slice(itoa::Buffer::new().format(4 + index).as_bytes());
                out.extend_from_slice(self.before.as_bytes());
                quoted(&mut out);
                out.extend_from_slice(self.after.as_bytes());
            }
            Api::Chat => {
                out.extend_from_slice(self.before.as_bytes());
                if index == 0 {
                    out.extend_from_slice(b"\"role\":\"assistant\",");
                }
                out.extend_from_slice(b"\"content\":");
                quoted(&mut out);
                out.extend_from_slice(self.after.as_bytes());
            }
            Api::Completions => {
                out.extend_from_slice(self.before.as_bytes());
                quoted(&mut out);
                out.extend_from_slice(self.after.as_bytes());
                out.extend_from_slice(match (last, plan.truncated) {
                    (false, _) => b"null".as_slice(),
                    (true, true) => b"\"length\"",
                    (true, false) => b"\"stop\"",
                });
                out.extend_from_slice(b"}]");
                if plan.include_usage {
                    out.extend_from_slice(b",\"usage\":null");
                }
                out.extend_from_slice(b"}\n\n");
            }
            Api::Anthropic => {
                out.extend_from_slice(self.before.as_bytes());
                quoted(&mut out);
                out.extend_from_slice(self.after.as_bytes());
            }
            Api::Gemini => {
                let prompt = plan.prompt_tokens;
                let count = index as u64 + 1;
                out.extend_from_slice(self.before.as_bytes());
                quoted(&mut out);
                out.extend_from_slice(self.after.as_bytes());
                if last {
                    out.extend_from_slice(if plan.truncated {
                        b",\"finishReason\":\"MAX_TOKENS\"".as_slice()
                    } else {
                        b",\"finishReason\":\"STOP\""
                    });
                }
                let mut number = itoa::Buffer::new();
                out.extend_from_slice(self.usage.as_bytes());
                out.extend_from_slice(number.format(count).as_bytes());
                out.extend_from_slice(b",\"totalTokenCount\":");
                out.extend_from_slice(number.format(prompt + count).as_bytes());
                out.extend_from_slice(self.end.as_bytes());
            }
        }
        if last {
            out.extend_from_slice(self.closing().as_bytes());
        }
        Bytes::from(out)
    }

    /// The whole stream's bytes, as a client reads them.
    pub fn body(&self) -> Vec<u8> {
        let mut out = self.opening().map(|b| b.to_vec()).unwrap_or_default();
        for index in 0..self.plan.tokens {
            out.extend_from_slice(&self.token(index));
        }
        out
    }

    /// What follows the last token's own chunk.
    fn closing(&self) -> String {
        let plan = &self.plan;
        let (id, tokens, prompt) = (&plan.id, plan.tokens, plan.prompt_tokens);
        match plan.api {
            Api::Responses => {
                let text = json_str(&text(tokens));
                let part =
                    format!("{{\"type\":\"output_text\",\"text\":{text},\"annotations\":[]}}");
                let item = format!(
                    "{{\"id\":\"msg_{id}\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{part}]}}"
                );
                let status = if plan.truncated {
                    "incomplete"
                } else {
                    "completed"
                };
                let at = 4 + tokens;
                let ids =
                    format!(",\"item_id\":\"msg_{id}\",\"output_index\":0,\"content_index\":0");
                let mut out = self.event(
                    "response.output_text.done",
                    at,
                    &format!("{ids},\"text\":{text},\"logprobs\":[]"),
                );
                out += &self.event(
                    "response.content_part.done",
                    at + 1,
                    &format!("{ids},\"part\":{part}"),
                );
                out += &self.event(
                    "response.output_item.done",
                    at + 2,
                    &format!(",\"output_index\":0,\"item\":{item}"),
                );
                let response = self.response(status, &format!("[{item}]"), true);
                out += &self.event(
                    &format!("response.{status}"),
                    at + 3,
                    &format!(",\"response\":{response}"),
                );
                out
            }
            Api::Chat => {
                let reason = if plan.truncated { "length" } else { "stop" };
                let usage_null = if plan.include_usage {
                    ",\"usage\":null"
                } else {
                    ""
                };
                let mut out = format!(
                    "data: {{\"id\":\"chatcmpl-{id}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"{reason}\"}}]{usage_null}}}\n\n",
                    plan.created,
                    json_str(&plan.model)
                );
                out += &self.openai_end("chatcmpl-", "chat.completion.chunk");
                out
            }
            Api::Completions => self.openai_end("cmpl-", "text_completion"),
            Api::Anthropic => {
                let reason = if plan.truncated {
                    "max_tokens"
                } else {
                    "end_turn"
                };
                let mut out = named(
                    "content_block_stop",
                    "{\"type\":\"content_block_stop\",\"index\":0}",
                );
                out += &named(
                    "message_delta",
                    &format!(
                        "{{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{reason}\",\"stop_sequence\":null}},\"usage\":{{\"input_tokens\":{prompt},\"output_tokens\":{tokens}}}}}"
                    ),
                );
                out += &named("message_stop", "{\"type\":\"message_stop\"}");
                out
            }
            Api::Gemini => String::new(),
        }
    }

    /// A Responses event: `{"type": kind, "sequence_number": seq` then `fields` (each with its
    /// leading comma).
    fn event(&self, kind: &str, seq: usize, fields: &str) -> String {
        named(
            kind,
            &format!("{{\"type\":\"{kind}\",\"sequence_number\":{seq}{fields}}}"),
        )
    }

    /// A Responses `response` object.
    fn response(&self, status: &str, output: &str, last: bool) -> String {
        let plan = &self.plan;
        let (prompt, tokens) = (plan.prompt_tokens, plan.tokens);
        let details = if last && plan.truncated {
            "{\"reason\":\"max_output_tokens\"}"
        } else {
            "null"
        };
        let usage = if last {
            format!(
                "{{\"input_tokens\":{prompt},\"input_tokens_details\":{{\"cached_tokens\":0}},\"output_tokens\":{tokens},\"output_tokens_details\":{{\"reasoning_tokens\":0}},\"total_tokens\":{}}}",
                prompt + tokens as u64
            )
        } else {
            "null".to_owned()
        };
        format!(
            "{{\"id\":\"resp_{}\",\"object\":\"response\",\"created_at\":{},\"status\":\"{status}\",\"model\":{},\"output\":{output},\"incomplete_details\":{details},\"usage\":{usage}}}",
            plan.id,
            plan.created,
            json_str(&plan.model)
        )
    }

    /// What ends a Chat or Completions stream: the usage chunk when it was asked for, then
    /// `[DONE]`.
    fn openai_end(&self, prefix: &str, object: &str) -> String {
        let plan = &self.plan;
        let mut out = String::new();
        if plan.include_usage {
            let (prompt, tokens) = (plan.prompt_tokens, plan.tokens);
            out = format!(
                "data: {{\"id\":\"{prefix}{}\",\"object\":\"{object}\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{tokens},\"total_tokens\":{}}}}}\n\n",
                plan.id,
                plan.created,
                json_str(&plan.model),
                prompt + tokens as u64
            );
        }
        out + "data: [DONE]\n\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The whole streams of a plan of two tokens (model `m"é`, three prompt words, id 7), as
    /// `rapidsse.serving.serve._SYNTHETIC_STREAMS` writes them.
    const GOLDEN: [(Api, bool, bool, &str); 5] = [
        (Api::Responses, true, false, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_synthetic00000007\",\"object\":\"response\",\"created_at\":1700000000,\"status\":\"in_progress\",\"model\":\"m\\\"é\",\"output\":[],\"incomplete_details\":null,\"usage\":null}}\n\nevent: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_synthetic00000007\",\"object\":\"response\",\"created_at\":1700000000,\"status\":\"in_progress\",\"model\":\"m\\\"é\",\"output\":[],\"incomplete_details\":null,\"usage\":null}}\n\nevent: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_synthetic00000007\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\nevent: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":3,\"item_id\":\"msg_synthetic00000007\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"item_id\":\"msg_synthetic00000007\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hello\",\"logprobs\":[]}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":5,\"item_id\":\"msg_synthetic00000007\",\"output_index\":0,\"content_index\":0,\"delta\":\" there\",\"logprobs\":[]}\n\nevent: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"sequence_number\":6,\"item_id\":\"msg_synthetic00000007\",\"output_index\":0,\"content_index\":0,\"text\":\"Hello there\",\"logprobs\":[]}\n\nevent: response.content_part.done\ndata: {\"type\":\"response.content_part.done\",\"sequence_number\":7,\"item_id\":\"msg_synthetic00000007\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"Hello there\",\"annotations\":[]}}\n\nevent: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"sequence_number\":8,\"output_index\":0,\"item\":{\"id\":\"msg_synthetic00000007\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello there\",\"annotations\":[]}]}}\n\nevent: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":9,\"response\":{\"id\":\"resp_synthetic00000007\",\"object\":\"response\",\"created_at\":1700000000,\"status\":\"incomplete\",\"model\":\"m\\\"é\",\"output\":[{\"id\":\"msg_synthetic00000007\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello there\",\"annotations\":[]}]}],\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":2,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":5}}}\n\n"),
        (Api::Chat, false, true, "data: {\"id\":\"chatcmpl-synthetic00000007\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\\"é\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\ndata: {\"id\":\"chatcmpl-synthetic00000007\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\\"é\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\ndata: {\"id\":\"chatcmpl-synthetic00000007\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\\"é\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\ndata: {\"id\":\"chatcmpl-synthetic00000007\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\\"é\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\ndata: [DONE]\n\n"),
        (Api::Completions, true, true, "data: {\"id\":\"cmpl-synthetic00000007\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"m\\\"é\",\"choices\":[{\"index\":0,\"text\":\"Hello\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\ndata: {\"id\":\"cmpl-synthetic00000007\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"m\\\"é\",\"choices\":[{\"index\":0,\"text\":\" there\",\"logprobs\":null,\"finish_reason\":\"length\"}],\"usage\":null}\n\ndata: {\"id\":\"cmpl-synthetic00000007\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"m\\\"é\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\ndata: [DONE]\n\n"),
        (Api::Anthropic, false, false, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_synthetic00000007\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\\\"é\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        (Api::Gemini, true, false, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":1,\"totalTokenCount\":4},\"modelVersion\":\"m\\\"é\",\"responseId\":\"synthetic00000007\"}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\" there\"}],\"role\":\"model\"},\"index\":0,\"finishReason\":\"MAX_TOKENS\"}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":2,\"totalTokenCount\":5},\"modelVersion\":\"m\\\"é\",\"responseId\":\"synthetic00000007\"}\r\n\r\n"),
    ];

    fn plan(api: Api, truncated: bool, include_usage: bool) -> Plan {
        Plan {
            api,
            model: "m\"é".to_owned(),
            tokens: 2,
            truncated,
            prompt_tokens: 3,
            include_usage,
            id: "synthetic00000007".to_owned(),
            created: 1_700_000_000,
        }
    }

    #[test]
    fn bodies_are_the_python_servers_byte_for_byte() {
        for (api, truncated, usage, expected) in GOLDEN {
            let writer = Writer::new(plan(api, truncated, usage));
            assert_eq!(
                String::from_utf8(writer.body()).unwrap(),
                expected,
                "{api:?}"
            );
        }
    }

    #[test]
    fn each_token_is_one_chunk_the_opening_comes_first() {
        let writer = Writer::new(plan(Api::Anthropic, false, false));
        let opening = writer.opening().unwrap();
        assert!(opening.ends_with(b"event: ping\ndata: {\"type\":\"ping\"}\n\n"));
        let first = writer.token(0);
        assert!(first.starts_with(b"event: content_block_delta\n") && first.ends_with(b"}}\n\n"));
        assert_eq!(first.iter().filter(|&&b| b == b'\n').count(), 3);
        assert!(writer
            .token(1)
            .ends_with(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        assert!(Writer::new(plan(Api::Gemini, false, false))
            .opening()
            .is_none());
        let chat = Writer::new(plan(Api::Chat, false, false));
        assert!(chat.token(0).windows(6).any(|w| w == b"\"role\""));
        assert!(!chat.token(1).windows(6).any(|w| w == b"\"role\""));
        assert!(!chat.token(0).windows(7).any(|w| w == b"\"usage\""));
    }

    #[test]
    fn the_text_cycles_through_the_words() {
        assert_eq!(text(3), "Hello there,");
        assert_eq!(token(14), "Hello");
        assert_eq!(text(14).len(), WORDS.iter().map(|w| w.len()).sum::<usize>());
    }

    #[test]
    fn the_schedule_is_ttft_then_one_token_per_period_from_the_start() {
        let spec = Spec::new(10, 4.0, 0.5).unwrap();
        assert_eq!(spec.due(0), 0.5);
        assert_eq!(spec.due(2), 1.0);
        assert_eq!(spec.due(9), 0.5 + 9.0 / 4.0);
        let at_once = Spec::new(10, 0.0, 0.25).unwrap();
        assert_eq!(at_once.due(100), 0.25);
        assert!(Spec::new(0, 1.0, 0.0).is_err());
        assert!(Spec::new(1, -1.0, 0.0).is_err());
        assert!(Spec::new(1, 1.0, f64::NAN).is_err());
    }

    fn object(value: serde_json::Value) -> serde_json::Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_plan_takes_the_requests_limit_model_usage_and_prompt_words() {
        let spec = Spec::new(8, 50.0, 0.1).unwrap();
        let body = object(json!({
            "model": "gpt-x", "max_completion_tokens": null, "max_tokens": 5,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a b\u{1c}c"}], "input": "x y"},
                         "one  two"],
        }));
        let chat = Plan::new(Api::Chat, &body, None, &spec, 12, 99);
        assert_eq!(
            (
                chat.model.as_str(),
                chat.tokens,
                chat.truncated,
                chat.prompt_tokens
            ),
            ("gpt-x", 5, true, 7)
        );
        assert!(chat.include_usage);
        assert_eq!((chat.id.as_str(), chat.created), ("synthetic00000012", 99));
        // a limit above the spec's tokens: not truncated; a limit that is not a positive
        // integer: none
        for (limit, tokens, truncated) in [
            (json!(8), 8, true),
            (json!(9), 8, false),
            (json!(0), 8, false),
            (json!(true), 8, false),
            (json!(3.0), 8, false),
            (json!("3"), 8, false),
        ] {
            let body = object(json!({"max_tokens": limit, "model": 3}));
            let plan = Plan::new(Api::Anthropic, &body, None, &spec, 0, 0);
            assert_eq!(
                (plan.tokens, plan.truncated),
                (tokens, truncated),
                "{limit}"
            );
            assert_eq!(plan.model, "synthetic");
        }
        let first_not_null = object(json!({"max_completion_tokens": "x", "max_tokens": 4}));
        assert_eq!(
            Plan::new(Api::Chat, &first_not_null, None, &spec, 0, 0).tokens,
            8
        );
        let gemini = object(
            json!({"generationConfig": {"maxOutputTokens": 2}, "model": "no",
                                   "contents": [{"parts": [{"text": "one two"}]}]}),
        );
        let plan = Plan::new(Api::Gemini, &gemini, Some("gemini-x"), &spec, 0, 0);
        assert_eq!(
            (
                plan.model.as_str(),
                plan.tokens,
                plan.truncated,
                plan.prompt_tokens
            ),
            ("gemini-x", 2, true, 2)
        );
        let usage_not_true = object(json!({"stream_options": {"include_usage": 1}}));
        assert!(!Plan::new(Api::Chat, &usage_not_true, None, &spec, 0, 0).include_usage);
    }
}
