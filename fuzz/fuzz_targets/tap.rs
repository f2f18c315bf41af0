//! The tap (a framer whose sink lets the accumulator take whole events of its learned shape
//! straight from the bytes) gives what framing every event and adding its payload gives: the
//! same snapshot, warnings, counts, refused payloads (index, name, offset, payload, error) and
//! framing errors. The first three bytes choose the chunk size, the line cap and the text cap;
//! the rest is the stream (seeded with recorded Responses, Chat, Gemini and Anthropic streams and
//! the synthetic Completions ones), tapped by each of those accumulators.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rapidsse::accumulate::{
    Accumulate, AnthropicAccumulator, ChatAccumulator, CompletionsAccumulator, GeminiAccumulator,
    ResponseAccumulator, Tap,
};
use rapidsse::framing::Framer;

type Refused = (u64, Vec<u8>, u64, Vec<u8>, String);

#[derive(Debug, PartialEq)]
struct Outcome {
    snapshot: Option<Vec<u8>>,
    warnings: Vec<String>,
    counts: (u64, u64, u64),
    refused: Vec<Refused>,
    errors: Vec<(usize, String)>,
}

fn outcome<A: Accumulate>(acc: &mut A, framer: &Framer, refused: Vec<Refused>, errors: Vec<(usize, String)>) -> Outcome {
    Outcome {
        snapshot: acc.snapshot_json(),
        warnings: acc.warnings().to_vec(),
        counts: (acc.events(), acc.unknown_events(), framer.events_dispatched()),
        refused,
        errors,
    }
}

fn plain<A: Accumulate>(mut acc: A, cap: Option<usize>, chunks: &[&[u8]]) -> Outcome {
    let mut framer = Framer::new(cap);
    let (mut refused, mut errors) = (Vec::new(), Vec::new());
    for (i, chunk) in chunks.iter().enumerate() {
        let result = framer.feed(chunk, |e| {
            if let Err(err) = acc.add_json(e.data) {
                refused.push((e.index, e.event.to_vec(), e.offset, e.data.to_vec(), err.to_string()));
            }
        });
        if let Err(err) = result {
            errors.push((i, err.to_string()));
        }
    }
    outcome(&mut acc, &framer, refused, errors)
}

fn tapped<A: Accumulate>(mut acc: A, cap: Option<usize>, chunks: &[&[u8]]) -> Outcome {
    let mut framer = Framer::new(cap);
    let (mut refused, mut errors) = (Vec::new(), Vec::new());
    for (i, chunk) in chunks.iter().enumerate() {
        let mut tap = Tap::new(&mut acc, &framer);
        let result = framer.feed_into(chunk, &mut tap);
        refused.extend(tap.refused.into_iter().map(|r| (r.index, r.event, r.offset, r.data, r.error.to_string())));
        if let Err(err) = result {
            errors.push((i, err.to_string()));
        }
    }
    outcome(&mut acc, &framer, refused, errors)
}

fuzz_target!(|input: &[u8]| {
    let [size, cap, text_cap, stream @ ..] = input else {
        return;
    };
    let size = 1 + usize::from(*size) * 3;
    let cap = (*cap != 0).then(|| usize::from(*cap) * 8);
    let text_cap = (*text_cap != 0).then(|| usize::from(*text_cap) * 4);
    let chunks: Vec<&[u8]> = stream.chunks(size).collect();
    assert_eq!(
        tapped(ResponseAccumulator::with_text_cap(text_cap), cap, &chunks),
        plain(ResponseAccumulator::with_text_cap(text_cap), cap, &chunks)
    );
    assert_eq!(
        tapped(ChatAccumulator::with_text_cap(text_cap), cap, &chunks),
        plain(ChatAccumulator::with_text_cap(text_cap), cap, &chunks)
    );
    assert_eq!(
        tapped(GeminiAccumulator::with_text_cap(text_cap), cap, &chunks),
        plain(GeminiAccumulator::with_text_cap(text_cap), cap, &chunks)
    );
    assert_eq!(
        tapped(CompletionsAccumulator::with_text_cap(text_cap), cap, &chunks),
        plain(CompletionsAccumulator::with_text_cap(text_cap), cap, &chunks)
    );
    assert_eq!(
        tapped(AnthropicAccumulator::with_text_cap(text_cap), cap, &chunks),
        plain(AnthropicAccumulator::with_text_cap(text_cap), cap, &chunks)
    );
});
