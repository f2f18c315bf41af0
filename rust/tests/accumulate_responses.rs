//! `ResponseAccumulator` on the recorded Responses API streams and on synthetic quirks.

mod accumulate_support;

use accumulate_support::{
    corpus_files, event_type, file_name, item_texts, json, sse_payloads, unused_events,
};
use rapidsse::accumulate::{AccumulateError, ResponseAccumulator};
use serde_json::{json, Value};

const FINAL_TYPES: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];

/// The event types the accumulator reads (module docs of `accumulate::responses`).
const USED_TYPES: [&str; 31] = [
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.reasoning_part.added",
    "response.reasoning_part.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.output_text.annotation.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.refusal.delta",
    "response.refusal.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done",
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
];

fn feed(payloads: &[String]) -> ResponseAccumulator {
    let mut acc = ResponseAccumulator::new();
    for payload in payloads {
        acc.add_json(payload.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    acc
}

fn feed_values(events: &[Value]) -> ResponseAccumulator {
    let payloads: Vec<String> = events.iter().map(Value::to_string).collect();
    feed(&payloads)
}

fn snapshot(acc: &mut ResponseAccumulator) -> Value {
    serde_json::from_slice(&acc.snapshot_json().expect("a snapshot")).expect("snapshot is JSON")
}

fn final_response(payloads: &[String]) -> Value {
    let last = payloads
        .iter()
        .rev()
        .find(|p| FINAL_TYPES.contains(&event_type(p).as_str()))
        .expect("a final lifecycle event");
    json(last)["response"].clone()
}

fn output_text_of(response: &Value) -> String {
    let mut text = String::new();
    for item in response["output"].as_array().unwrap() {
        if item["type"] != "message" {
            continue;
        }
        for part in item["content"].as_array().unwrap() {
            if part["type"] == "output_text" {
                text.push_str(part["text"].as_str().unwrap());
            }
        }
    }
    text
}

#[test]
fn corpus_snapshot_equals_the_final_response() {
    for path in corpus_files("responses") {
        let name = file_name(&path);
        let payloads = sse_payloads(&path);
        let mut acc = feed(&payloads);
        let expected = final_response(&payloads);
        assert_eq!(snapshot(&mut acc), expected, "{name}");
        assert!(acc.warnings().is_empty(), "{name}: {:?}", acc.warnings());
        assert_eq!(acc.output_text(), output_text_of(&expected), "{name}");
        assert_eq!(acc.events(), payloads.len() as u64, "{name}");
        assert_eq!(
            acc.unknown_events(),
            unused_events(&payloads, &USED_TYPES),
            "{name}"
        );
    }
}

#[test]
fn corpus_texts_come_from_deltas_alone() {
    for path in corpus_files("responses") {
        let name = file_name(&path);
        let payloads = sse_payloads(&path);
        let expected = final_response(&payloads);
        let withheld: Vec<String> = payloads
            .iter()
            .filter(|p| {
                let t = event_type(p);
                !t.ends_with(".done") && !FINAL_TYPES.contains(&t.as_str())
            })
            .cloned()
            .collect();
        assert!(withheld.len() < payloads.len(), "{name}: nothing withheld");
        let mut acc = feed(&withheld);
        let got = snapshot(&mut acc);
        assert_eq!(got["id"], expected["id"], "{name}");
        let ours = got["output"].as_array().unwrap();
        let theirs = expected["output"].as_array().unwrap();
        assert_eq!(ours.len(), theirs.len(), "{name}: item count");
        for (mine, server) in ours.iter().zip(theirs) {
            assert_eq!(mine["id"], server["id"], "{name}");
            assert_eq!(mine["type"], server["type"], "{name}");
            // Items whose text never streams (a web search, a tool list) have it only in `.done`.
            let streamed = payloads.iter().any(|p| {
                let e = json(p);
                e["item_id"] == server["id"]
                    && e["type"].as_str().is_some_and(|t| t.ends_with(".delta"))
            });
            if streamed {
                assert_eq!(
                    item_texts(mine),
                    item_texts(server),
                    "{name}: item {}",
                    server["id"]
                );
                if let (Some(a), Some(b)) =
                    (mine["content"].as_array(), server["content"].as_array())
                {
                    for (pa, pb) in a.iter().zip(b) {
                        if let Some(annotations) = pb.get("annotations").filter(|v| !v.is_null()) {
                            assert_eq!(&pa["annotations"], annotations, "{name}: annotations");
                        }
                    }
                }
            }
        }
        assert_eq!(acc.output_text(), output_text_of(&expected), "{name}");
        for w in acc.warnings() {
            assert!(
                w.starts_with("sequence gap: "),
                "{name}: unexpected warning {w}"
            );
        }
    }
}

#[test]
fn corpus_resumed_mid_stream_builds_what_it_can() {
    // Background mode resumed with `starting_after`: no lifecycle event before the items.
    for path in corpus_files("responses") {
        let name = file_name(&path);
        let payloads = sse_payloads(&path);
        let resumed: Vec<String> = payloads
            .iter()
            .filter(|p| {
                let t = event_type(p);
                !t.starts_with("response.")
                    || !matches!(
                        t.as_str(),
                        "response.created"
                            | "response.queued"
                            | "response.in_progress"
                            | "response.completed"
                            | "response.incomplete"
                            | "response.failed"
                    )
            })
            .cloned()
            .collect();
        let mut acc = feed(&resumed);
        let expected = final_response(&payloads);
        let got = snapshot(&mut acc);
        assert_eq!(got["id"], "", "{name}");
        assert_eq!(got["object"], "response", "{name}");
        assert_eq!(got["status"], "in_progress", "{name}");
        assert_eq!(acc.output_text(), output_text_of(&expected), "{name}");
    }
}

fn created(id: &str) -> Value {
    json!({"type": "response.created", "response": {
        "id": id, "object": "response", "status": "in_progress", "output": [], "usage": null}})
}

#[test]
fn llama_cpp_style_deltas_without_ids_indices_or_sequence_numbers() {
    let mut acc = feed_values(&[
        created("resp_1"),
        json!({"type": "response.reasoning_text.delta", "delta": "Think"}),
        json!({"type": "response.reasoning_text.delta", "delta": "ing."}),
        json!({"type": "response.output_text.delta", "delta": "Hel"}),
        json!({"type": "response.output_text.delta", "delta": "lo"}),
        json!({"type": "response.function_call_arguments.delta", "delta": "{\"a\":"}),
        json!({"type": "response.function_call_arguments.delta", "delta": "1}"}),
    ]);
    let got = snapshot(&mut acc);
    let output = got["output"].as_array().unwrap();
    assert_eq!(output.len(), 3, "{got}");
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(
        output[0]["content"],
        json!([{"type": "reasoning_text", "text": "Thinking."}])
    );
    assert_eq!(output[1]["type"], "message");
    assert_eq!(output[1]["role"], "assistant");
    assert_eq!(output[1]["status"], "in_progress");
    assert_eq!(
        output[1]["content"],
        json!([{"type": "output_text", "text": "Hello", "annotations": []}])
    );
    assert_eq!(output[2]["type"], "function_call");
    assert_eq!(output[2]["arguments"], "{\"a\":1}");
    assert_eq!(acc.output_text(), "Hello");
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
    assert_eq!(acc.unknown_events(), 0);
}

#[test]
fn deltas_for_unannounced_items_create_them_under_their_id() {
    let mut acc = feed_values(&[
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
               "content_index": 1, "delta": "second part"}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
               "content_index": 0, "delta": "first "}),
    ]);
    let got = snapshot(&mut acc);
    assert_eq!(got["id"], "");
    assert_eq!(got["output"][0]["id"], "msg_1");
    assert_eq!(got["output"][0]["content"][0]["text"], "first ");
    assert_eq!(got["output"][0]["content"][1]["text"], "second part");
    assert_eq!(acc.output_text(), "first second part");
}

#[test]
fn reused_output_index_keys_items_by_id() {
    // xAI / SGLang: every item at output_index 0.
    let mut acc = feed_values(&[
        created("resp_1"),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "msg_a", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_a", "output_index": 0, "content_index": 0, "delta": "Let me check."}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "fc_b", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_b", "output_index": 0, "delta": "{}"}),
        json!({"type": "response.output_text.delta", "item_id": "msg_a", "output_index": 0, "content_index": 0, "delta": " Done."}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "object": "response", "status": "completed", "output": []}}),
    ]);
    let got = snapshot(&mut acc);
    assert_eq!(got["status"], "completed");
    assert_eq!(
        got["output"][0]["content"][0]["text"],
        "Let me check. Done."
    );
    assert_eq!(got["output"][1]["arguments"], "{}");
    assert_eq!(got["output"].as_array().unwrap().len(), 2);
}

#[test]
fn reused_item_id_after_done_starts_a_new_item() {
    // SGLang may give every message the same id.
    let message = |text: &str, status: &str| {
        json!({"id": "msg", "type": "message", "role": "assistant", "status": status,
               "content": [{"type": "output_text", "text": text, "annotations": []}]})
    };
    let mut acc = feed_values(&[
        json!({"type": "response.output_item.added", "output_index": 0, "item": message("", "in_progress")}),
        json!({"type": "response.output_text.delta", "item_id": "msg", "content_index": 0, "delta": "one"}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": message("one", "completed")}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": message("", "in_progress")}),
        json!({"type": "response.output_text.delta", "item_id": "msg", "content_index": 0, "delta": "two"}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": message("two", "completed")}),
        json!({"type": "response.completed", "response": {"id": "r", "object": "response", "status": "completed",
               "output": [message("one", "completed"), message("two", "completed")]}}),
    ]);
    assert_eq!(acc.output_text(), "onetwo");
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
    assert_eq!(snapshot(&mut acc)["output"].as_array().unwrap().len(), 2);
}

#[test]
fn sequence_gap_is_a_warning() {
    let mut events = vec![created("r")];
    events[0]["sequence_number"] = json!(0);
    events.push(json!({"type": "response.output_text.delta", "item_id": "m", "delta": "a", "sequence_number": 1}));
    events.push(json!({"type": "response.output_text.delta", "item_id": "m", "delta": "b", "sequence_number": 3}));
    events.push(json!({"type": "keepalive"}));
    events.push(json!({"type": "response.output_text.delta", "item_id": "m", "delta": "c", "sequence_number": 4}));
    let mut acc = feed_values(&events);
    assert_eq!(acc.warnings(), ["sequence gap: expected 2, got 3"]);
    assert_eq!(acc.output_text(), "abc");
}

#[test]
fn done_text_differing_from_deltas_wins_with_a_warning() {
    let mut acc = feed_values(&[
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "content_index": 0, "delta": "Hello"}),
        json!({"type": "response.output_text.done", "item_id": "msg_1", "content_index": 0, "text": "Hullo"}),
    ]);
    assert_eq!(acc.output_text(), "Hullo");
    assert_eq!(
        acc.warnings(),
        ["response.output_text.done: item msg_1 content[0].text differs from the accumulated deltas"]
    );
}

#[test]
fn final_response_differing_from_deltas_wins_with_a_warning() {
    let call = |args: &str| json!({"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": args, "status": "completed"});
    let mut acc = feed_values(&[
        json!({"type": "response.output_item.added", "output_index": 0, "item": call("")}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{\"x\":1}"}),
        json!({"type": "response.completed", "response": {"id": "r", "object": "response", "status": "completed",
               "output": [call("{\"x\":2}")], "usage": {"total_tokens": 3}}}),
    ]);
    let got = snapshot(&mut acc);
    assert_eq!(got["output"][0]["arguments"], "{\"x\":2}");
    assert_eq!(got["usage"]["total_tokens"], 3);
    assert_eq!(
        acc.warnings(),
        ["response.completed: item fc_1 arguments differs from the accumulated deltas"]
    );
}

#[test]
fn empty_server_values_do_not_wipe_deltas() {
    let mut acc = feed_values(&[
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "m", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.content_part.added", "item_id": "m", "content_index": 0,
               "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_text.delta", "item_id": "m", "content_index": 0, "delta": "kept"}),
        json!({"type": "response.content_part.done", "item_id": "m", "content_index": 0,
               "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "m", "type": "message", "role": "assistant", "status": "completed"}}),
        json!({"type": "response.completed", "response": {"id": "r", "object": "response", "status": "completed", "output": []}}),
    ]);
    let got = snapshot(&mut acc);
    assert_eq!(got["output"][0]["status"], "completed");
    assert_eq!(
        got["output"][0]["content"],
        json!([{"type": "output_text", "text": "kept"}])
    );
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
}

#[test]
fn cut_short_stream_snapshots_what_was_received() {
    let mut acc = feed_values(&[
        created("resp_cut"),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "rs", "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "item_id": "rs", "summary_index": 0,
               "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs", "summary_index": 0, "delta": "Plan"}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"id": "m", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "m", "content_index": 0, "delta": "Partial answ"}),
    ]);
    let got = snapshot(&mut acc);
    assert_eq!(got["id"], "resp_cut");
    assert_eq!(got["status"], "in_progress");
    assert_eq!(
        got["output"][0]["summary"],
        json!([{"type": "summary_text", "text": "Plan"}])
    );
    assert_eq!(got["output"][1]["status"], "in_progress");
    assert_eq!(acc.output_text(), "Partial answ");
}

#[test]
fn vllm_reasoning_parts_and_annotations() {
    let mut acc = feed_values(&[
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "rs", "type": "reasoning", "summary": [], "content": []}}),
        json!({"type": "response.reasoning_part.added", "item_id": "rs", "content_index": 0,
               "part": {"type": "reasoning_text", "text": ""}}),
        json!({"type": "response.reasoning_text.delta", "item_id": "rs", "content_index": 0, "delta": "hmm"}),
        json!({"type": "response.reasoning_part.done", "item_id": "rs", "content_index": 0,
               "part": {"type": "reasoning_text", "text": "hmm"}}),
        json!({"type": "response.output_text.delta", "item_id": "m", "output_index": 1, "content_index": 0, "delta": "See [1]."}),
        json!({"type": "response.output_text.annotation.added", "item_id": "m", "content_index": 0,
               "annotation_index": 0, "annotation": {"type": "url_citation", "url": "https://a"}}),
        json!({"type": "response.output_text.annotation.added", "item_id": "m", "content_index": 0,
               "annotation_index": 1, "annotation": {"type": "url_citation", "url": "https://b"}}),
    ]);
    let got = snapshot(&mut acc);
    assert_eq!(
        got["output"][0]["content"],
        json!([{"type": "reasoning_text", "text": "hmm"}])
    );
    assert_eq!(
        got["output"][1]["content"][0]["annotations"],
        json!([{"type": "url_citation", "url": "https://a"}, {"type": "url_citation", "url": "https://b"}])
    );
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
}

#[test]
fn other_item_kinds_accumulate_their_fields() {
    let mut acc = feed_values(&[
        json!({"type": "response.custom_tool_call_input.delta", "item_id": "ct", "delta": "print("}),
        json!({"type": "response.custom_tool_call_input.delta", "item_id": "ct", "delta": "1)"}),
        json!({"type": "response.mcp_call_arguments.delta", "item_id": "mcp", "delta": "{}"}),
        json!({"type": "response.code_interpreter_call_code.delta", "item_id": "ci", "delta": "x = 1"}),
        json!({"type": "response.code_interpreter_call_code.done", "item_id": "ci", "code": "x = 1"}),
        json!({"type": "response.refusal.delta", "item_id": "m", "content_index": 0, "delta": "No."}),
    ]);
    let got = snapshot(&mut acc);
    let types: Vec<&str> = got["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "custom_tool_call",
            "mcp_call",
            "code_interpreter_call",
            "message"
        ]
    );
    assert_eq!(got["output"][0]["input"], "print(1)");
    assert_eq!(got["output"][1]["arguments"], "{}");
    assert_eq!(got["output"][2]["code"], "x = 1");
    assert_eq!(
        got["output"][3]["content"],
        json!([{"type": "refusal", "refusal": "No."}])
    );
    assert_eq!(acc.output_text(), "");
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
}

#[test]
fn unknown_and_error_events_are_counted_not_fatal() {
    let mut acc = feed_values(&[
        json!({"type": "keepalive"}),
        json!({"type": "response.rate_limits.updated", "rate_limits": []}),
        json!({"type": "response.web_search_call.searching", "item_id": "ws", "output_index": 0}),
        json!({"type": "error", "code": "server_error", "message": "boom", "param": null}),
        json!({"no_type": true}),
        json!({"type": "response.image_generation_call.partial_image", "delta": {"odd": "shape"}}),
    ]);
    assert_eq!(acc.events(), 6);
    assert_eq!(acc.unknown_events(), 6);
    assert_eq!(acc.warnings(), ["error event: boom"]);
    assert!(acc.snapshot_json().is_none(), "no event implied a response");
}

#[test]
fn malformed_used_event_is_a_warning() {
    let mut acc = ResponseAccumulator::new();
    acc.add_json(
        br#"{"type":"response.output_text.delta","item_id":"m","output_index":"zero","delta":"x"}"#,
    )
    .unwrap();
    assert_eq!(
        acc.warnings(),
        ["response.output_text.delta: malformed event ignored"]
    );
    assert_eq!((acc.events(), acc.unknown_events()), (1, 1));
    assert!(acc.snapshot_json().is_none());
}

#[test]
fn invalid_json_is_an_error_and_changes_nothing() {
    let mut acc = ResponseAccumulator::new();
    acc.add_json(created("r").to_string().as_bytes()).unwrap();
    let before = acc.snapshot_json();
    match acc.add_json(br#"{"type":"response.output_text.delta","delta":"x""#) {
        Err(AccumulateError::InvalidJson {
            event_index, line, ..
        }) => assert_eq!((event_index, line), (1, 1)),
        other => panic!("expected InvalidJson, got {other:?}"),
    }
    match acc.add_json(b"[1, 2]") {
        Err(e @ AccumulateError::NotAnObject { event_index: 1, .. }) => {
            assert!(e.to_string().contains("not a JSON object"), "{e}")
        }
        other => panic!("expected NotAnObject, got {other:?}"),
    }
    let err = acc.add_json(b"\xff{}").unwrap_err();
    assert!(
        matches!(err, AccumulateError::InvalidJson { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("invalid JSON in event 1"),
        "{err}"
    );
    acc.add_json(b"[DONE]").unwrap();
    assert_eq!(acc.events(), 1);
    assert_eq!(acc.snapshot_json(), before);
}

#[test]
fn lifecycle_events_update_status_and_usage() {
    let mut acc = feed_values(&[
        created("r"),
        json!({"type": "response.output_text.delta", "item_id": "m", "delta": "hi"}),
        json!({"type": "response.incomplete", "response": {"id": "r", "object": "response", "status": "incomplete",
               "incomplete_details": {"reason": "max_output_tokens"}, "output": [], "usage": {"output_tokens": 1}}}),
        json!({"type": "response.rate_limits.updated"}),
    ]);
    let got = snapshot(&mut acc);
    assert_eq!(got["status"], "incomplete");
    assert_eq!(got["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(got["usage"]["output_tokens"], 1);
    assert_eq!(acc.output_text(), "hi");
    assert_eq!(acc.unknown_events(), 1);
    // `output` keeps its place among the response's keys.
    let text = String::from_utf8(acc.snapshot_json().unwrap()).unwrap();
    assert!(
        text.starts_with(
            r#"{"id":"r","object":"response","status":"incomplete","incomplete_details""#
        ),
        "{text}"
    );
}

#[test]
fn friendli_style_stream_equals_its_final_response() {
    // Parts without `annotations`, deltas without `logprobs`, sequence numbers from 0.
    let item = |text: &str, status: &str| {
        json!({"id": "msg_f", "type": "message", "role": "assistant", "status": status,
               "content": if text.is_empty() { json!([]) } else { json!([{"type": "output_text", "text": text}]) }})
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_f", "object": "response", "created_at": 1, "status": status, "model": "m",
               "output": output, "usage": if status == "completed" { json!({"total_tokens": 5}) } else { Value::Null }})
    };
    let mut events = vec![
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
        json!({"type": "response.in_progress", "response": response("in_progress", json!([]))}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item("", "in_progress")}),
        json!({"type": "response.content_part.added", "item_id": "msg_f", "output_index": 0, "content_index": 0,
               "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_f", "output_index": 0, "content_index": 0, "delta": "Hi "}),
        json!({"type": "response.output_text.delta", "item_id": "msg_f", "output_index": 0, "content_index": 0, "delta": "there"}),
        json!({"type": "response.output_text.done", "item_id": "msg_f", "output_index": 0, "content_index": 0, "text": "Hi there"}),
        json!({"type": "response.content_part.done", "item_id": "msg_f", "output_index": 0, "content_index": 0,
               "part": {"type": "output_text", "text": "Hi there"}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item("Hi there", "completed")}),
        json!({"type": "response.completed", "response": response("completed", json!([item("Hi there", "completed")]))}),
    ];
    for (n, event) in events.iter_mut().enumerate() {
        event["sequence_number"] = json!(n);
    }
    let mut acc = feed_values(&events);
    assert_eq!(
        snapshot(&mut acc),
        response("completed", json!([item("Hi there", "completed")]))
    );
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
    assert_eq!(acc.unknown_events(), 0);
}

#[test]
fn server_item_without_content_keeps_ours_even_empty() {
    let mut acc = feed_values(&[
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "m", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "m", "type": "message", "role": "assistant", "status": "completed"}}),
    ]);
    assert_eq!(
        snapshot(&mut acc)["output"][0],
        json!({"id": "m", "type": "message", "role": "assistant", "status": "completed", "content": []})
    );
}

#[test]
fn many_small_deltas_stay_linear() {
    // Quadratic appends would take minutes here; linear ones take well under a second.
    const N: usize = 100_000;
    let mut acc = ResponseAccumulator::new();
    acc.add_json(created("r").to_string().as_bytes()).unwrap();
    let delta = br#"{"type":"response.output_text.delta","item_id":"msg","output_index":0,"content_index":0,"delta":"abcdefgh"}"#;
    let args = br#"{"type":"response.function_call_arguments.delta","item_id":"fc","output_index":1,"delta":"12345678"}"#;
    for _ in 0..N {
        acc.add_json(delta).unwrap();
        acc.add_json(args).unwrap();
    }
    assert_eq!(acc.output_text().len(), 8 * N);
    let got = snapshot(&mut acc);
    assert_eq!(got["output"][1]["arguments"].as_str().unwrap().len(), 8 * N);
    assert_eq!(acc.events(), 2 * N as u64 + 1);
}

#[test]
fn one_text_is_capped_and_the_refused_delta_is_not_appended() {
    let delta = |item: &str, text: &str| {
        json!({"type": "response.output_text.delta", "item_id": item, "output_index": 0,
               "content_index": 0, "delta": text})
        .to_string()
    };
    let mut acc = ResponseAccumulator::with_text_cap(Some(10));
    acc.add_json(delta("a", "12345").as_bytes()).unwrap();
    // Consecutive deltas into one text are write-combined: the cap counts what is pending too.
    acc.add_json(delta("a", "678").as_bytes()).unwrap();
    let err = acc.add_json(delta("a", "9é").as_bytes()).unwrap_err(); // 8 + 3 bytes
    assert_eq!(
        err,
        AccumulateError::TextTooLarge {
            event_index: 2,
            limit: 10,
            length: 11
        }
    );
    assert!(
        err.to_string().contains("past max_event_size=10 bytes"),
        "{err}"
    );
    acc.add_json(delta("a", "90").as_bytes()).unwrap(); // exactly at the cap
    acc.add_json(delta("b", "other").as_bytes()).unwrap(); // another text has its own budget
    assert_eq!(acc.events(), 5); // the refused event was read and counts
    assert_eq!(acc.output_text(), "1234567890other");
    // Nothing pending: the check reads the text in the tree.
    acc.snapshot_json();
    assert!(matches!(
        acc.add_json(delta("a", "!").as_bytes()),
        Err(AccumulateError::TextTooLarge { length: 11, .. })
    ));
    let mut unbounded = ResponseAccumulator::with_text_cap(None);
    for _ in 0..100 {
        unbounded
            .add_json(delta("a", "0123456789").as_bytes())
            .unwrap();
    }
    assert_eq!(unbounded.output_text().len(), 1000);
}
