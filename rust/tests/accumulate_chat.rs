//! `ChatAccumulator` on the recorded Chat Completions streams and on synthetic quirks.
//! (Equality with the openai SDK's own accumulation is checked from the Python tests.)

mod accumulate_support;

use std::collections::BTreeMap;

use accumulate_support::{corpus_files, file_name, json, sse_payloads};
use rapidsse::accumulate::{AccumulateError, ChatAccumulator};
use serde_json::{json, Value};

fn feed(payloads: &[String]) -> ChatAccumulator {
    let mut acc = ChatAccumulator::new();
    for payload in payloads {
        acc.add_json(payload.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    acc
}

fn feed_values(chunks: &[Value]) -> ChatAccumulator {
    feed(&chunks.iter().map(Value::to_string).collect::<Vec<_>>())
}

fn snapshot(acc: &ChatAccumulator) -> Value {
    serde_json::from_slice(&acc.snapshot_json().expect("a snapshot")).expect("snapshot is JSON")
}

/// What the chunks say, gathered the obvious way, per choice index.
#[derive(Default, Debug)]
struct Expected {
    content: Option<String>,
    refusal: Option<String>,
    reasoning: Option<String>,
    reasoning_content: Option<String>,
    finish_reason: Value,
    /// tool-call index -> (id, name, arguments)
    tool_calls: BTreeMap<u64, (Option<String>, String, String)>,
}

fn append(slot: &mut Option<String>, value: &Value) {
    if let Some(s) = value.as_str() {
        slot.get_or_insert_with(String::new).push_str(s);
    }
}

#[test]
fn corpus_chunks_merge_into_a_chat_completion() {
    for path in corpus_files("chat") {
        let name = file_name(&path);
        let payloads = sse_payloads(&path);
        let acc = feed(&payloads);
        let got = snapshot(&acc);

        let chunks: Vec<Value> = payloads
            .iter()
            .filter(|p| p.as_str() != "[DONE]")
            .map(|p| json(p))
            .collect();
        let accepted: Vec<&Value> = chunks
            .iter()
            .filter(|c| c.get("error").is_none_or(Value::is_null))
            .filter(|c| c.get("object").is_none_or(|o| o == "chat.completion.chunk"))
            .collect();
        let errors: Vec<String> = chunks
            .iter()
            .filter_map(|c| c.get("error").filter(|e| !e.is_null()))
            .map(|e| format!("error event: {}", e["message"].as_str().unwrap()))
            .collect();
        assert_eq!(acc.warnings(), errors.as_slice(), "{name}");
        assert_eq!(acc.events(), chunks.len() as u64, "{name}");
        assert_eq!(
            acc.unknown_events(),
            (chunks.len() - accepted.len()) as u64,
            "{name}"
        );

        let first = accepted[0];
        assert_eq!(got["object"], "chat.completion", "{name}");
        for key in ["id", "created", "model"] {
            assert_eq!(got[key], first[key], "{name}: {key}");
        }
        let usage = accepted
            .iter()
            .rev()
            .find_map(|c| c.get("usage").filter(|u| !u.is_null()));
        assert_eq!(
            got.get("usage").filter(|u| !u.is_null()),
            usage,
            "{name}: usage"
        );

        let mut expected: BTreeMap<u64, Expected> = BTreeMap::new();
        for chunk in &accepted {
            for choice in chunk["choices"].as_array().unwrap() {
                let e = expected
                    .entry(choice["index"].as_u64().unwrap())
                    .or_default();
                let delta = &choice["delta"];
                append(&mut e.content, &delta["content"]);
                append(&mut e.refusal, &delta["refusal"]);
                append(&mut e.reasoning, &delta["reasoning"]);
                append(&mut e.reasoning_content, &delta["reasoning_content"]);
                if choice["finish_reason"].is_string() {
                    e.finish_reason = choice["finish_reason"].clone();
                }
                for call in delta["tool_calls"].as_array().into_iter().flatten() {
                    let slot = e
                        .tool_calls
                        .entry(call["index"].as_u64().unwrap())
                        .or_default();
                    if let Some(id) = call["id"].as_str() {
                        slot.0 = Some(id.to_owned());
                    }
                    slot.1
                        .push_str(call["function"]["name"].as_str().unwrap_or(""));
                    slot.2
                        .push_str(call["function"]["arguments"].as_str().unwrap_or(""));
                }
            }
        }
        let choices = got["choices"].as_array().unwrap();
        assert_eq!(choices.len(), expected.len(), "{name}");
        for (choice, (index, e)) in choices.iter().zip(&expected) {
            let message = &choice["message"];
            assert_eq!(choice["index"], *index, "{name}");
            assert_eq!(message["role"], "assistant", "{name}");
            assert_eq!(
                message["content"].as_str(),
                e.content.as_deref(),
                "{name}: content"
            );
            assert_eq!(
                message["refusal"].as_str(),
                e.refusal.as_deref(),
                "{name}: refusal"
            );
            assert_eq!(
                message.get("reasoning").and_then(Value::as_str),
                e.reasoning.as_deref(),
                "{name}"
            );
            assert_eq!(
                message.get("reasoning_content").and_then(Value::as_str),
                e.reasoning_content.as_deref(),
                "{name}"
            );
            assert_eq!(
                choice["finish_reason"], e.finish_reason,
                "{name}: finish_reason"
            );
            let calls = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            assert_eq!(calls.len(), e.tool_calls.len(), "{name}: tool calls");
            for (call, (call_index, (id, fname, arguments))) in calls.iter().zip(&e.tool_calls) {
                assert_eq!(call["index"], *call_index, "{name}");
                assert_eq!(call["id"].as_str(), id.as_deref(), "{name}");
                assert_eq!(call["type"], "function", "{name}");
                assert_eq!(call["function"]["name"], fname.as_str(), "{name}");
                assert_eq!(call["function"]["arguments"], arguments.as_str(), "{name}");
                if !arguments.is_empty() {
                    serde_json::from_str::<Value>(arguments)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
        }
    }
}

fn chunk(choices: Value) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": choices})
}

#[test]
fn parallel_tool_calls_and_several_choices() {
    let acc = feed_values(&[
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_a", "arguments": ""}}]}}]),
        ),
        chunk(json!([{"index": 1, "delta": {"role": "assistant", "content": "Hi"}}])),
        chunk(
            json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]}}]),
        ),
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "get_b", "arguments": "{}"}},
            {"index": 0, "function": {"arguments": "1}"}}]}}])),
        chunk(
            json!([{"index": 1, "delta": {"content": " there"}, "finish_reason": "stop"},
                     {"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
        ),
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [],
               "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [], "usage": null}),
    ]);
    let got = snapshot(&acc);
    assert_eq!(
        got["choices"][0]["message"]["tool_calls"],
        json!([
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_a", "arguments": "{\"x\":1}"}},
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "get_b", "arguments": "{}"}}
        ])
    );
    assert_eq!(got["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(got["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(got["choices"][1]["message"]["content"], "Hi there");
    assert_eq!(got["choices"][1]["finish_reason"], "stop");
    assert_eq!(
        got["usage"]["total_tokens"], 3,
        "a later null usage does not erase it"
    );
    assert_eq!(got["system_fingerprint"], Value::Null);
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
}

#[test]
fn repeated_role_is_not_concatenated_and_unknown_fields_merge() {
    let acc = feed_values(&[
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "reasoning_content": "Let", "channel": "analysis"}}]),
        ),
        chunk(json!([{"index": 0, "delta": {"role": "assistant", "reasoning_content": " me"}}])),
        chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": "4", "n_tokens": 2}}])),
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": "2", "n_tokens": 3, "flag": true}}]),
        ),
        chunk(json!([{"index": 0, "delta": {"flag": false, "tags": ["a"]}}])),
        chunk(json!([{"index": 0, "delta": {"tags": ["b"]}}])),
    ]);
    let message = &snapshot(&acc)["choices"][0]["message"];
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["reasoning_content"], "Let me");
    assert_eq!(message["content"], "42");
    assert_eq!(message["channel"], "analysis");
    assert_eq!(message["n_tokens"], 5, "numbers add up, as in the SDK");
    assert_eq!(message["flag"], true, "other scalars keep the first value");
    assert_eq!(message["tags"], json!(["a", "b"]));
}

#[test]
fn logprobs_are_appended() {
    let lp =
        |token: &str| json!({"token": token, "logprob": -0.5, "bytes": null, "top_logprobs": []});
    let acc = feed_values(&[
        chunk(
            json!([{"index": 0, "delta": {"content": "a"}, "logprobs": {"content": [lp("a")], "refusal": null}}]),
        ),
        chunk(
            json!([{"index": 0, "delta": {"content": "b"}, "logprobs": {"content": [lp("b")], "refusal": null}}]),
        ),
        chunk(json!([{"index": 0, "delta": {"content": "c"}, "logprobs": null}])),
    ]);
    let got = snapshot(&acc);
    assert_eq!(
        got["choices"][0]["logprobs"],
        json!({"content": [lp("a"), lp("b")], "refusal": null})
    );
    assert_eq!(got["choices"][0]["message"]["content"], "abc");
}

#[test]
fn azure_filter_chunks_error_chunks_and_done_marker() {
    let mut acc = ChatAccumulator::new();
    let azure_first = json!({"id": "", "object": "", "created": 0, "model": "", "choices": [],
                             "prompt_filter_results": [{"prompt_index": 0}]});
    acc.add_json(azure_first.to_string().as_bytes()).unwrap();
    assert!(acc.snapshot_json().is_none());
    acc.add_json(
        chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]))
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    acc.add_json(
        br#"{"error":{"message":"Tool choice is required","type":"invalid_request_error"}}"#,
    )
    .unwrap();
    acc.add_json(b"[DONE]").unwrap();
    assert_eq!(acc.events(), 3);
    assert_eq!(acc.unknown_events(), 2);
    assert_eq!(acc.warnings(), ["error event: Tool choice is required"]);
    let got = snapshot(&acc);
    assert_eq!(
        (got["id"].as_str(), got["model"].as_str()),
        (Some("c1"), Some("m"))
    );
    assert_eq!(got["choices"][0]["message"]["content"], "ok");
}

#[test]
fn mistral_content_parts() {
    let acc = feed_values(&[
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": [{"type": "text", "text": "Hmm, "}]}]}}]),
        ),
        chunk(
            json!([{"index": 0, "delta": {"content": [{"type": "thinking", "thinking": "fine."}]}}]),
        ),
        chunk(
            json!([{"index": 0, "delta": {"content": [{"type": "text", "text": "Yes"}, {"type": "image_url"}]}}]),
        ),
        chunk(json!([{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}])),
    ]);
    let message = &snapshot(&acc)["choices"][0]["message"];
    assert_eq!(message["content"], "Yes!");
    assert_eq!(message["reasoning_content"], "Hmm, fine.");
}

#[test]
fn tool_call_deltas_without_index_merge_by_id() {
    let acc = feed_values(&[
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{"}}]}}])),
        chunk(
            json!([{"index": 0, "delta": {"tool_calls": [{"id": "a", "function": {"arguments": "}"}}]}}]),
        ),
        chunk(
            json!([{"index": 0, "delta": {"tool_calls": [{"id": "b", "type": "function", "function": {"name": "g", "arguments": "[]"}}]}}]),
        ),
        chunk(json!([{"index": 0, "delta": {"tool_calls": ["junk"]}}])),
    ]);
    let calls = &snapshot(&acc)["choices"][0]["message"]["tool_calls"];
    assert_eq!(calls[0]["function"]["arguments"], "{}");
    assert_eq!(calls[1]["id"], "b");
    assert_eq!(calls[1]["function"]["arguments"], "[]");
    assert_eq!(calls.as_array().unwrap().len(), 2);
    assert_eq!(acc.warnings(), ["chat: non-object list entry ignored"]);
}

#[test]
fn cut_short_stream_and_bad_payloads() {
    let mut acc = ChatAccumulator::new();
    acc.add_json(
        chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": "Par"}}]))
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    acc.add_json(
        chunk(json!([{"index": 0, "delta": {"content": "tial"}}]))
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let err = acc
        .add_json(br#"{"id":"c1","choices":[{"index":0,"delta":{"content":"x"#)
        .unwrap_err();
    assert!(
        matches!(err, AccumulateError::InvalidJson { event_index: 2, .. }),
        "{err:?}"
    );
    assert!(matches!(
        acc.add_json(b"\"text\""),
        Err(AccumulateError::NotAnObject { .. })
    ));
    acc.add_json(br#"{"choices": 5}"#).unwrap();
    assert_eq!(acc.warnings(), ["chat: malformed chunk ignored"]);
    let got = snapshot(&acc);
    assert_eq!(got["choices"][0]["message"]["content"], "Partial");
    assert_eq!(got["choices"][0]["finish_reason"], Value::Null);
    assert_eq!((acc.events(), acc.unknown_events()), (3, 1));
}

#[test]
fn many_small_deltas_stay_linear() {
    const N: usize = 100_000;
    let mut acc = ChatAccumulator::new();
    let text = br#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"abcdefgh"}}]}"#;
    let call = br#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"12345678"}}]}}]}"#;
    for _ in 0..N {
        acc.add_json(text).unwrap();
        acc.add_json(call).unwrap();
    }
    let got = snapshot(&acc);
    assert_eq!(
        got["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .len(),
        8 * N
    );
    assert_eq!(
        got["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap()
            .len(),
        8 * N
    );
}

#[test]
fn chat_texts_are_capped() {
    let chunk = |delta: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": delta}]})
        .to_string()
    };
    let mut acc = ChatAccumulator::with_text_cap(Some(8));
    acc.add_json(chunk(json!({"content": "abcdef"})).as_bytes())
        .unwrap();
    let err = acc
        .add_json(chunk(json!({"content": "ghi"})).as_bytes())
        .unwrap_err();
    assert_eq!(
        err,
        AccumulateError::TextTooLarge {
            event_index: 1,
            limit: 8,
            length: 9
        }
    );
    acc.add_json(chunk(json!({"content": "gh", "reasoning_content": "r"})).as_bytes())
        .unwrap();
    let args = |a: &str| json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]});
    acc.add_json(chunk(args("{\"k\":")).as_bytes()).unwrap();
    assert!(acc.add_json(chunk(args("\"long\"}")).as_bytes()).is_err());
    let message = &snapshot(&acc)["choices"][0]["message"];
    assert_eq!(message["content"], "abcdefgh");
    assert_eq!(message["reasoning_content"], "r");
    assert_eq!(message["tool_calls"][0]["function"]["arguments"], "{\"k\":");
}

#[test]
fn later_chunks_update_usage_and_vendor_members_and_keep_the_first_ids() {
    let acc = feed_values(&[
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "x_groq": {"id": "req_1"}, "choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
        json!({"id": "c2", "created": 2, "model": "n", "obfuscation": "xx", "usage": null,
               "x_groq": null, "service_tier": "flex", "choices": []}),
        json!({"id": "c3", "choices": [], "x_groq": {"id": "req_1", "usage": {"queue_time": 0.1}},
               "usage": {"prompt_tokens": 3, "prompt_cache_hit_tokens": 2}}),
    ]);
    let top = snapshot(&acc);
    assert_eq!(
        (&top["id"], &top["created"], &top["model"]),
        (&json!("c1"), &json!(1), &json!("m"))
    );
    assert_eq!(
        top["x_groq"],
        json!({"id": "req_1", "usage": {"queue_time": 0.1}})
    );
    assert_eq!(
        top["usage"],
        json!({"prompt_tokens": 3, "prompt_cache_hit_tokens": 2})
    );
    assert!(top.get("service_tier").is_none()); // a schema member: the first chunk's (none)
    assert!(top.get("obfuscation").is_none());
}
