//! `RealtimeAccumulator` on recorded Realtime sessions and on synthetic quirks.

mod accumulate_support;

use accumulate_support::{
    corpus_files, event_type, file_name, item_texts, json, jsonl_payloads, unused_events,
};
use rapidsse::accumulate::{AccumulateError, RealtimeAccumulator};
use serde_json::{json, Map, Value};

const USED_TYPES: [&str; 16] = [
    "response.created",
    "response.done",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.text.delta",
    "response.text.done",
    "response.output_audio_transcript.delta",
    "response.output_audio_transcript.done",
    "response.audio_transcript.delta",
    "response.audio_transcript.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
];

fn feed(payloads: &[String]) -> RealtimeAccumulator {
    let mut acc = RealtimeAccumulator::new();
    for payload in payloads {
        acc.add_json(payload.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    acc
}

fn feed_values(events: &[Value]) -> RealtimeAccumulator {
    feed(&events.iter().map(Value::to_string).collect::<Vec<_>>())
}

fn snapshot(acc: &RealtimeAccumulator) -> Map<String, Value> {
    serde_json::from_slice(&acc.snapshot_json().expect("a snapshot"))
        .expect("snapshot is a JSON object")
}

/// Each `response.done`'s response, with xAI's event-level usage when the response's is empty.
fn final_responses(payloads: &[String]) -> Vec<Value> {
    payloads
        .iter()
        .map(|p| json(p))
        .filter(|e| e["type"] == "response.done")
        .map(|e| {
            let mut response = e["response"].clone();
            let empty = response
                .get("usage")
                .is_none_or(|u| u.is_null() || u == &json!({}));
            if empty && e["usage"].is_object() {
                response["usage"] = e["usage"].clone();
            }
            response
        })
        .collect()
}

#[test]
fn corpus_responses_equal_their_response_done() {
    for path in corpus_files("realtime") {
        let name = file_name(&path);
        let payloads = jsonl_payloads(&path);
        let acc = feed(&payloads);
        let got = snapshot(&acc);
        let finals = final_responses(&payloads);
        assert!(!finals.is_empty(), "{name}");
        let ids: Vec<&str> = finals.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(
            got.keys().map(String::as_str).collect::<Vec<_>>(),
            ids,
            "{name}"
        );
        for response in &finals {
            assert_eq!(&got[response["id"].as_str().unwrap()], response, "{name}");
        }
        assert!(acc.warnings().is_empty(), "{name}: {:?}", acc.warnings());
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
    for path in corpus_files("realtime") {
        let name = file_name(&path);
        let payloads = jsonl_payloads(&path);
        let finals = final_responses(&payloads);
        let withheld: Vec<String> = payloads
            .iter()
            .filter(|p| !event_type(p).ends_with(".done"))
            .cloned()
            .collect();
        let acc = feed(&withheld);
        let got = snapshot(&acc);
        for response in &finals {
            let id = response["id"].as_str().unwrap();
            let ours = got[id]["output"].as_array().unwrap();
            let theirs = response["output"].as_array().unwrap();
            assert_eq!(ours.len(), theirs.len(), "{name}: {id}");
            for (mine, server) in ours.iter().zip(theirs) {
                assert_eq!(
                    (&mine["id"], &mine["type"]),
                    (&server["id"], &server["type"]),
                    "{name}"
                );
                assert_eq!(
                    item_texts(mine),
                    item_texts(server),
                    "{name}: item {}",
                    server["id"]
                );
            }
            assert_eq!(got[id]["status"], "in_progress", "{name}");
        }
        assert!(acc.warnings().is_empty(), "{name}: {:?}", acc.warnings());
    }
}

fn created(id: &str) -> Value {
    json!({"type": "response.created", "event_id": "e", "response": {"id": id, "object": "realtime.response",
           "status": "in_progress", "status_details": null, "output": [], "usage": null, "max_output_tokens": "inf"}})
}

#[test]
fn beta_names_and_implicit_parts() {
    let acc = feed_values(&[
        created("r1"),
        json!({"type": "response.output_item.added", "response_id": "r1", "output_index": 0,
               "item": {"id": "i1", "object": "realtime.item", "type": "message", "role": "assistant", "content": []}}),
        json!({"type": "response.text.delta", "response_id": "r1", "item_id": "i1", "content_index": 0, "delta": "Hel"}),
        json!({"type": "response.text.delta", "response_id": "r1", "item_id": "i1", "content_index": 0, "delta": "lo"}),
        json!({"type": "response.audio_transcript.delta", "response_id": "r1", "item_id": "i1", "content_index": 1, "delta": "Hi"}),
        json!({"type": "response.audio.delta", "response_id": "r1", "item_id": "i1", "content_index": 1, "delta": "AAAA"}),
        json!({"type": "response.output_audio.delta", "response_id": "r1", "item_id": "i1", "content_index": 1, "delta": "AAAA"}),
    ]);
    let got = snapshot(&acc);
    assert_eq!(
        got["r1"]["output"][0]["content"],
        json!([{"type": "text", "text": "Hello"}, {"type": "audio", "transcript": "Hi"}])
    );
    assert_eq!(got["r1"]["max_output_tokens"], "inf");
    assert_eq!(acc.unknown_events(), 2, "audio deltas are not accumulated");
}

#[test]
fn xai_reused_output_index_missing_fields_and_event_usage() {
    let acc = feed_values(&[
        created("r"),
        json!({"type": "response.output_item.added", "response_id": "r", "output_index": 0,
               "item": {"id": "msg", "object": "realtime.item", "type": "message", "status": "in_progress", "role": "assistant"}}),
        json!({"type": "response.content_part.added", "response_id": "r", "item_id": "msg", "content_index": 0, "output_index": 0,
               "part": {"type": "audio", "transcript": ""}}),
        json!({"type": "response.output_audio_transcript.delta", "response_id": "r", "item_id": "msg", "content_index": 0,
               "output_index": 0, "delta": "Checking."}),
        json!({"type": "response.content_part.done", "response_id": "r", "item_id": "msg", "content_index": 0, "output_index": 0}),
        json!({"type": "response.output_item.done", "response_id": "r", "output_index": 0,
               "item": {"id": "msg", "object": "realtime.item", "type": "message", "status": "completed", "role": "assistant"}}),
        json!({"type": "response.output_item.added", "response_id": "r", "output_index": 0,
               "item": {"id": "fc", "object": "realtime.item", "type": "function_call", "status": "in_progress",
                        "call_id": "call_1", "name": "get_weather", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "response_id": "r", "item_id": "fc",
               "call_id": "call_1", "delta": "{\"city\":\"London\"}"}),
        json!({"type": "response.done", "response_id": "r", "response": {"id": "r", "object": "realtime.response",
               "status": "completed", "status_details": "unimplemented", "output": [], "usage": {}},
               "usage": {"total_tokens": 9}}),
    ]);
    let got = snapshot(&acc);
    let response = &got["r"];
    assert_eq!(response["status"], "completed");
    assert_eq!(response["usage"], json!({"total_tokens": 9}));
    assert_eq!(response["output"][0]["status"], "completed");
    assert_eq!(
        response["output"][0]["content"],
        json!([{"type": "audio", "transcript": "Checking."}])
    );
    assert_eq!(response["output"][1]["arguments"], "{\"city\":\"London\"}");
    assert!(acc.warnings().is_empty(), "{:?}", acc.warnings());
}

#[test]
fn done_events_are_authoritative_with_warnings() {
    let acc = feed_values(&[
        created("r"),
        json!({"type": "response.output_text.delta", "response_id": "r", "item_id": "m", "output_index": 0,
               "content_index": 0, "delta": "colour"}),
        json!({"type": "response.output_text.done", "response_id": "r", "item_id": "m", "content_index": 0, "text": "color"}),
        json!({"type": "response.function_call_arguments.delta", "response_id": "r", "item_id": "f", "delta": "{}"}),
        json!({"type": "response.function_call_arguments.done", "response_id": "r", "item_id": "f",
               "call_id": "c9", "name": "lookup", "arguments": "{}"}),
        json!({"type": "response.done", "response": {"id": "r", "object": "realtime.response", "status": "cancelled",
               "status_details": {"type": "cancelled", "reason": "turn_detected"}, "max_output_tokens": "inf",
               "output": [
                   {"id": "m", "object": "realtime.item", "type": "message", "role": "assistant", "status": "incomplete",
                    "content": [{"type": "output_text", "text": "colr"}]},
                   {"id": "f", "object": "realtime.item", "type": "function_call", "call_id": "c9", "name": "lookup",
                    "arguments": "{}", "status": "completed"}]}}),
    ]);
    let got = snapshot(&acc);
    assert_eq!(got["r"]["status"], "cancelled");
    assert_eq!(got["r"]["max_output_tokens"], "inf");
    assert_eq!(
        got["r"]["output"][0]["content"],
        json!([{"type": "output_text", "text": "colr"}])
    );
    assert_eq!(
        acc.warnings(),
        [
            "response.output_text.done: item m content[0].text differs from the accumulated deltas",
            "response.done: item m content[0].text differs from the accumulated deltas",
        ]
    );
}

#[test]
fn call_id_and_name_fill_an_implicit_function_call() {
    let acc = feed_values(&[
        json!({"type": "response.function_call_arguments.delta", "response_id": "r", "item_id": "f",
               "call_id": "c1", "delta": "{\"a\""}),
        json!({"type": "response.function_call_arguments.delta", "response_id": "r", "item_id": "f", "delta": ":1}"}),
        json!({"type": "response.function_call_arguments.done", "response_id": "r", "item_id": "f",
               "name": "f1", "arguments": "{\"a\":1}"}),
    ]);
    let item = &snapshot(&acc)["r"]["output"][0];
    assert_eq!(
        item,
        &json!({"id": "f", "object": "realtime.item", "type": "function_call", "status": "in_progress",
                "call_id": "c1", "name": "f1", "arguments": "{\"a\":1}"})
    );
}

#[test]
fn responses_are_kept_apart_and_in_order() {
    let acc = feed_values(&[
        json!({"type": "session.created", "session": {}}),
        created("r2"),
        json!({"type": "response.output_text.delta", "item_id": "a", "content_index": 0, "delta": "to r2"}),
        created("r1"),
        json!({"type": "response.output_text.delta", "response_id": "r2", "item_id": "a", "content_index": 0, "delta": "!"}),
        json!({"type": "response.output_text.delta", "item_id": "b", "content_index": 0, "delta": "to r1"}),
        json!({"type": "error", "event_id": "e", "error": {"type": "invalid_request_error", "message": "nope"}}),
        json!({"type": "ping"}),
    ]);
    let got = snapshot(&acc);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["r2", "r1"]);
    assert_eq!(got["r2"]["output"][0]["content"][0]["text"], "to r2!");
    assert_eq!(got["r1"]["output"][0]["content"][0]["text"], "to r1");
    assert_eq!(acc.warnings(), ["error event: nope"]);
    assert_eq!((acc.events(), acc.unknown_events()), (8, 3));
}

#[test]
fn events_before_any_response_start_an_anonymous_one_and_bad_json_fails() {
    let mut acc = RealtimeAccumulator::new();
    assert!(acc.snapshot_json().is_none());
    acc.add_json(br#"{"type":"rate_limits.updated","rate_limits":[]}"#)
        .unwrap();
    assert!(acc.snapshot_json().is_none());
    acc.add_json(
        br#"{"type":"response.output_audio_transcript.delta","item_id":"x","delta":"hey"}"#,
    )
    .unwrap();
    let got = snapshot(&acc);
    assert_eq!(got[""]["status"], "in_progress");
    assert_eq!(
        got[""]["output"][0]["content"],
        json!([{"type": "audio", "transcript": "hey"}])
    );
    let err = acc.add_json(b"{\"type\": \"response.done\", ").unwrap_err();
    assert!(
        matches!(err, AccumulateError::InvalidJson { event_index: 2, .. }),
        "{err:?}"
    );
    assert_eq!(acc.events(), 2);
}

#[test]
fn realtime_texts_are_capped() {
    let delta = |text: &str| {
        json!({"type": "response.output_audio_transcript.delta", "response_id": "r", "item_id": "i",
               "output_index": 0, "content_index": 0, "delta": text})
        .to_string()
    };
    let mut acc = RealtimeAccumulator::with_text_cap(Some(4));
    acc.add_json(delta("abc").as_bytes()).unwrap();
    assert!(matches!(
        acc.add_json(delta("de").as_bytes()),
        Err(AccumulateError::TextTooLarge {
            event_index: 1,
            limit: 4,
            length: 5
        })
    ));
    acc.add_json(delta("d").as_bytes()).unwrap();
    let text = serde_json::to_string(&snapshot(&acc)).unwrap();
    assert!(text.contains("\"abcd\""), "{text}");
}
