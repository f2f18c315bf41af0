//! The accumulators' `add_json` never panics, whatever the payloads: the input is split on LF
//! into payloads, each added to the six accumulators (Responses, Chat, Realtime, Gemini,
//! Completions, Anthropic), with a text
//! cap drawn from the first byte; snapshots, warnings and counters are read along the way and
//! every snapshot must be valid JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rapidsse::accumulate::{
    Accumulate, AccumulateError, AnthropicAccumulator, ChatAccumulator, CompletionsAccumulator,
    GeminiAccumulator, RealtimeAccumulator, ResponseAccumulator,
};

fn check(acc: &mut impl Accumulate, added: u64) {
    if let Some(json) = acc.snapshot_json() {
        if let Err(err) = serde_json::from_slice::<serde_json::Value>(&json) {
            panic!("snapshot is not JSON: {err}: {}", String::from_utf8_lossy(&json));
        }
    }
    assert!(acc.events() <= added);
    assert!(acc.unknown_events() <= acc.events());
    let _ = acc.warnings().len();
}

fuzz_target!(|input: &[u8]| {
    // 0: no cap; otherwise small enough for deltas to reach it.
    let cap = match input.first() {
        None | Some(0) => None,
        Some(&b) => Some(usize::from(b) * 4),
    };
    let mut responses = ResponseAccumulator::with_text_cap(cap);
    let mut chat = ChatAccumulator::with_text_cap(cap);
    let mut realtime = RealtimeAccumulator::with_text_cap(cap);
    let mut gemini = GeminiAccumulator::with_text_cap(cap);
    let mut completions = CompletionsAccumulator::with_text_cap(cap);
    let mut anthropic = AnthropicAccumulator::with_text_cap(cap);
    let mut added = 0u64;
    for (i, payload) in input.split(|&b| b == b'\n').enumerate() {
        added += 1;
        let before = (
            responses.events(),
            chat.events(),
            realtime.events(),
            gemini.events(),
            completions.events(),
            anthropic.events(),
        );
        let r = responses.add_json(payload);
        let c = chat.add_json(payload);
        let t = realtime.add_json(payload);
        let g = gemini.add_json(payload);
        let o = completions.add_json(payload);
        let a = anthropic.add_json(payload);
        // A rejected payload leaves the accumulator unchanged and is not counted; a delta
        // refused by the cap was read (counted), and only its text is left out.
        for (result, events, before) in [
            (r, responses.events(), before.0),
            (c, chat.events(), before.1),
            (t, realtime.events(), before.2),
            (g, gemini.events(), before.3),
            (o, completions.events(), before.4),
            (a, anthropic.events(), before.5),
        ] {
            match result {
                Ok(()) => {}
                Err(AccumulateError::TextTooLarge { event_index, limit, length }) => {
                    assert_eq!(Some(limit), cap);
                    assert!(length > limit);
                    assert_eq!(event_index, before);
                    assert_eq!(events, before + 1);
                }
                Err(_) => assert_eq!(events, before),
            }
        }
        if i % 8 == 7 {
            check(&mut responses, added);
            check(&mut chat, added);
            check(&mut realtime, added);
            check(&mut gemini, added);
            check(&mut completions, added);
            check(&mut anthropic, added);
            let _ = responses.output_text();
        }
    }
    check(&mut responses, added);
    check(&mut chat, added);
    check(&mut realtime, added);
    check(&mut gemini, added);
    check(&mut completions, added);
    check(&mut anthropic, added);
    let _ = responses.output_text();
});
