//! The accumulators' `add_json` never panics, whatever the payloads: the input is split on LF
//! into payloads, each added to the three accumulators (Responses, Chat, Realtime); snapshots,
//! warnings and counters are read along the way and every snapshot must be valid JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rapidsse::accumulate::{Accumulate, ChatAccumulator, RealtimeAccumulator, ResponseAccumulator};

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
    let mut responses = ResponseAccumulator::new();
    let mut chat = ChatAccumulator::new();
    let mut realtime = RealtimeAccumulator::new();
    let mut added = 0u64;
    for (i, payload) in input.split(|&b| b == b'\n').enumerate() {
        added += 1;
        let before = (responses.events(), chat.events(), realtime.events());
        let r = responses.add_json(payload);
        let c = chat.add_json(payload);
        let t = realtime.add_json(payload);
        // A rejected payload leaves the accumulator unchanged and is not counted.
        if r.is_err() {
            assert_eq!(responses.events(), before.0);
        }
        if c.is_err() {
            assert_eq!(chat.events(), before.1);
        }
        if t.is_err() {
            assert_eq!(realtime.events(), before.2);
        }
        if i % 8 == 7 {
            check(&mut responses, added);
            check(&mut chat, added);
            check(&mut realtime, added);
            let _ = responses.output_text();
        }
    }
    check(&mut responses, added);
    check(&mut chat, added);
    check(&mut realtime, added);
    let _ = responses.output_text();
});
