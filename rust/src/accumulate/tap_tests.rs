//! The tap ([`Tap`]: framing with events taken whole by the accumulator) against the plain way
//! (the framer dispatching every event, each payload added with `add_json`): the same
//! accumulated result, warnings, counts, refusals and framing errors, at any chunking.

use super::*;

/// A refused payload: index, SSE name, offset, payload, error.
type Refused = (u64, Vec<u8>, u64, Vec<u8>, String);

/// Everything visible after feeding a stream one way.
#[derive(Debug, PartialEq)]
struct Outcome {
    snapshot: Option<String>,
    warnings: Vec<String>,
    events: u64,
    unknown: u64,
    refused: Vec<Refused>,
    /// The framing error of each chunk that had one.
    errors: Vec<(usize, String)>,
    dispatched: u64,
}

fn outcome<A: Accumulate>(
    acc: &mut A,
    framer: &Framer,
    refused: Vec<Refused>,
    errors: Vec<(usize, String)>,
) -> Outcome {
    Outcome {
        snapshot: acc.snapshot_json().map(|s| String::from_utf8(s).unwrap()),
        warnings: acc.warnings().to_vec(),
        events: acc.events(),
        unknown: acc.unknown_events(),
        refused,
        errors,
        dispatched: framer.events_dispatched(),
    }
}

/// The plain way: every event dispatched by the framer, its payload added.
fn plain<A: Accumulate>(mut acc: A, cap: Option<usize>, chunks: &[&[u8]]) -> Outcome {
    let mut framer = Framer::new(cap);
    let mut refused = Vec::new();
    let mut errors = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let result = framer.feed(chunk, |e| {
            if let Err(err) = acc.add_json(e.data) {
                refused.push((
                    e.index,
                    e.event.to_vec(),
                    e.offset,
                    e.data.to_vec(),
                    err.to_string(),
                ));
            }
        });
        if let Err(err) = result {
            errors.push((i, err.to_string()));
        }
    }
    outcome(&mut acc, &framer, refused, errors)
}

/// The tap; also returns how many events the accumulator took whole.
fn tapped<A: Accumulate>(mut acc: A, cap: Option<usize>, chunks: &[&[u8]]) -> (Outcome, u64) {
    let mut framer = Framer::new(cap);
    let mut refused = Vec::new();
    let mut errors = Vec::new();
    let mut taken = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        let mut tap = Tap::new(&mut acc, &framer);
        let result = framer.feed_into(chunk, &mut tap);
        taken += tap.taken;
        refused.extend(
            tap.refused
                .into_iter()
                .map(|r| (r.index, r.event, r.offset, r.data, r.error.to_string())),
        );
        if let Err(err) = result {
            errors.push((i, err.to_string()));
        }
    }
    (outcome(&mut acc, &framer, refused, errors), taken)
}

fn split(bytes: &[u8], size: usize) -> Vec<&[u8]> {
    bytes.chunks(size.max(1)).collect()
}

/// Compares the two ways at one chunking for the accumulators `new` makes (from a text cap);
/// returns the events taken whole.
fn both_ways<A: Accumulate>(
    new: fn(Option<usize>) -> A,
    bytes: &[u8],
    size: usize,
    cap: Option<usize>,
    text_cap: Option<usize>,
) -> u64 {
    let chunks = split(bytes, size);
    let expected = plain(new(text_cap), cap, &chunks);
    let (got, taken) = tapped(new(text_cap), cap, &chunks);
    assert_eq!(
        got,
        expected,
        "chunks of {size}, cap {cap:?}, text cap {text_cap:?}:\n{}",
        String::from_utf8_lossy(bytes)
    );
    taken
}

/// [`both_ways`] for the Responses and Chat accumulators; returns the events they took whole.
fn same_both_ways(bytes: &[u8], size: usize, cap: Option<usize>, text_cap: Option<usize>) -> u64 {
    both_ways(
        ResponseAccumulator::with_text_cap,
        bytes,
        size,
        cap,
        text_cap,
    ) + both_ways(ChatAccumulator::with_text_cap, bytes, size, cap, text_cap)
}

/// A Responses stream as OpenAI sends it: lifecycle events, then deltas of every kind of text
/// (plain, escaped, `\u` escapes, raw UTF-8), then the `.done` events and the completion.
fn stream(deltas: usize) -> Vec<u8> {
    let texts = [
        "Hello",
        " world",
        ",",
        " a \\\"quote\\\"",
        "\\n",
        " caf\u{e9}",
        " \\u00e9t\\u00e9",
        " \u{1f600}",
        " tab\\t",
        " back\\\\slash",
        "",
        " 42",
        " \\ud83d\\ude00",
    ];
    let mut out = Vec::new();
    let mut seq = 0;
    let mut event = |out: &mut Vec<u8>, kind: &str, body: &str| {
        out.extend_from_slice(
            format!(
                "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{seq}{body}}}\n\n"
            )
            .as_bytes(),
        );
        seq += 1;
    };
    let response = |status: &str, output: &str| {
        format!(
            ",\"response\":{{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"{status}\",\"output\":[{output}]}}"
        )
    };
    event(&mut out, "response.created", &response("in_progress", ""));
    event(
        &mut out,
        "response.in_progress",
        &response("in_progress", ""),
    );
    event(
        &mut out,
        "response.output_item.added",
        ",\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}",
    );
    let at = ",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0";
    event(
        &mut out,
        "response.content_part.added",
        &format!("{at},\"part\":{{\"type\":\"output_text\",\"annotations\":[],\"text\":\"\"}}"),
    );
    let mut full = String::new();
    for i in 0..deltas {
        let text = texts[i % texts.len()];
        full.push_str(text);
        let pad = "xyzw".repeat(i % 5);
        event(
            &mut out,
            "response.output_text.delta",
            &format!("{at},\"delta\":\"{text}\",\"logprobs\":[],\"obfuscation\":\"{pad}\""),
        );
    }
    event(
        &mut out,
        "response.output_text.done",
        &format!("{at},\"text\":\"{full}\",\"logprobs\":[]"),
    );
    let item = format!(
        "{{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{{\"type\":\"output_text\",\"annotations\":[],\"text\":\"{full}\"}}],\"role\":\"assistant\"}}"
    );
    event(
        &mut out,
        "response.output_item.done",
        &format!(",\"output_index\":0,\"item\":{item}"),
    );
    event(
        &mut out,
        "response.completed",
        &response("completed", &item),
    );
    out
}

const SIZES: &[usize] = &[1, 2, 3, 5, 8, 13, 64, 127, 300, 512, 1000, 4096, usize::MAX];

#[test]
fn a_stream_of_deltas_is_taken_whole_with_the_same_result() {
    let bytes = stream(200);
    for &size in SIZES {
        let taken = same_both_ways(&bytes, size, Some(16 << 20), None);
        // All but the first delta of each run shape, at most (one delta learns the shape, the
        // next one opens the run); fewer at one byte a chunk, where no event is ever whole.
        if size >= 512 {
            assert!(taken >= 150, "chunks of {size}: {taken} taken whole");
        }
    }
}

#[test]
fn caps_refusals_and_errors_are_the_same_both_ways() {
    let bytes = stream(60);
    for &size in &[1, 7, 100, 512, usize::MAX] {
        // Text caps refuse deltas (taken whole or not) at the same events and offsets.
        for text_cap in [Some(0), Some(10), Some(100)] {
            same_both_ways(&bytes, size, Some(16 << 20), text_cap);
        }
        // A line cap at, below and above the size of a delta's data line.
        for cap in [150, 170, 171, 172, 180, 200, 260] {
            same_both_ways(&bytes, size, Some(cap), None);
        }
    }
}

/// A line cap between the shortest and the longest data line of the deltas: the first line over
/// it ends the stream with an error, raised at the same chunk both ways, however the chunks
/// cut that line (the end of a chunk the tap holds back is within the cap).
#[test]
fn a_cap_among_the_line_lengths_errs_at_the_same_chunk_both_ways() {
    let bytes = stream(40);
    let lines: Vec<usize> = bytes
        .split(|&b| b == b'\n')
        .filter(|line| line.starts_with(b"data: {\"type\":\"response.output_text.delta\""))
        .map(<[u8]>::len)
        .collect();
    let (shortest, longest) = (*lines.iter().min().unwrap(), *lines.iter().max().unwrap());
    assert!(longest > shortest + 10);
    for cap in shortest..=longest {
        for size in (40..700).step_by(9) {
            same_both_ways(&bytes, size, Some(cap), None);
        }
    }
}

#[test]
fn odd_framing_is_the_same_both_ways() {
    let base = String::from_utf8(stream(30)).unwrap();
    let variants = [
        base.replace("\n\n", "\r\n\r\n"),
        base.replace("\n", "\r"),
        base.replacen("\n\n", "\n\r\n", 20),
        base.replace("data: ", "data:"),
        base.replace("event: ", "event:"),
        base.replacen("event: response.output_text.delta\n", "", 12),
        base.replacen("event: response.output_text.delta\n", "event: other\n", 9),
        base.replacen("\n\n", "\n\n: keep-alive\n\n", 15),
        base.replacen("\n\n", "\nid: 7\n\n", 15),
        base.replacen("\n\n", "\nretry: 10\n\n", 15),
        base.replacen("\n\n", "\n\n\n", 15),
        base.replacen("\ndata: ", "\ndata: {}\ndata: ", 15),
        format!("\u{feff}{base}"),
        base.replacen("\"delta\":\"", "\"delta\":\"\t", 14),
        base.replacen("\"obfuscation\":\"", "\"obfuscation\":\"\u{1}", 14),
        base.replacen("\"obfuscation\":\"xyzw", "\"obfuscation\":\"\\ud800", 14),
        base.replacen("\"sequence_number\":1", "\"sequence_number\":01", 14),
        base.replacen("\"logprobs\":[]", "\"logprobs\":[1]", 14),
    ];
    for variant in &variants {
        at_odd_chunkings(same_both_ways, variant.as_bytes());
    }
}

/// A way of comparing the two (`same_both_ways`, `chat_both_ways`...).
type BothWays = fn(&[u8], usize, Option<usize>, Option<usize>) -> u64;

/// `both` on `bytes` at odd chunkings.
fn at_odd_chunkings(both: BothWays, bytes: &[u8]) {
    for &size in &[1, 3, 64, 300, 512, usize::MAX] {
        both(bytes, size, Some(16 << 20), None);
    }
}

/// `both` on each of `variants` at odd chunkings, and on 300 random edits of `base`.
fn variants_both_ways(both: BothWays, base: &[u8], variants: &[String]) {
    for variant in variants {
        at_odd_chunkings(both, variant.as_bytes());
    }
    for (s, size, cap) in random_edits(base, 300) {
        both(&s, size, cap, None);
    }
}

/// Random edits of a stream of deltas at random chunkings (deterministic xorshift, so failures
/// reproduce): the tap agrees with the plain way on every one.
#[test]
fn random_edits_are_the_same_both_ways() {
    let base = stream(40);
    for (s, size, cap) in random_edits(&base, 400) {
        same_both_ways(&s, size, cap, None);
    }
}

/// `rounds` random edits of `base` (one to four bytes replaced, inserted or removed; the bytes
/// that matter to SSE and JSON), each with a chunk size and a text cap: a deterministic xorshift,
/// so failures reproduce.
fn random_edits(base: &[u8], rounds: usize) -> Vec<(Vec<u8>, usize, Option<usize>)> {
    let edits: &[u8] = b"\r\n\"\\}{:, a1\x00\x1f\xff\xc3\xa9";
    let mut next = xorshift();
    (0..rounds)
        .map(|_| {
            let mut s = base.to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % s.len() as u64) as usize;
                let b = edits[(next() % edits.len() as u64) as usize];
                match next() % 3 {
                    0 => s[at] = b,
                    1 => s.insert(at, b),
                    _ => {
                        s.remove(at);
                    }
                }
            }
            let size = [1, 2, 50, 299, 512, 4096][(next() % 6) as usize];
            let cap = [Some(16 << 20), Some(180), None][(next() % 3) as usize];
            (s, size, cap)
        })
        .collect()
}

#[test]
fn the_corpus_is_the_same_both_ways() {
    let mut taken = 0;
    let mut files = 0;
    for kind in ["responses", "chat"] {
        let mut dirs = vec![corpus_dir(kind)];
        while let Some(path) = dirs.pop() {
            if path.is_dir() {
                dirs.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            files += 1;
            for &size in &[1, 7, 64, 512, usize::MAX] {
                taken += same_both_ways(&bytes, size, Some(16 << 20), None);
            }
        }
    }
    assert!(files > 10, "{files} recordings");
    assert!(taken > 1000, "{taken} events taken whole");
}

/// [`both_ways`] for the Anthropic accumulator.
fn anthropic_both_ways(
    bytes: &[u8],
    size: usize,
    cap: Option<usize>,
    text_cap: Option<usize>,
) -> u64 {
    both_ways(
        AnthropicAccumulator::with_text_cap,
        bytes,
        size,
        cap,
        text_cap,
    )
}

fn recordings(kind: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir(kind))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    out.sort();
    out
}

/// `both` on every recording of `kind` at five chunkings and three text caps; returns the
/// events taken whole.
fn corpus_both_ways(both: BothWays, kind: &str) -> u64 {
    let mut taken = 0;
    for bytes in recordings(kind) {
        for &size in &[1, 7, 64, 512, usize::MAX] {
            taken += both(&bytes, size, Some(16 << 20), None);
        }
        for text_cap in [Some(0), Some(10), Some(300)] {
            both(&bytes, 100, Some(16 << 20), text_cap);
        }
    }
    taken
}

#[test]
fn anthropic_corpus_is_the_same_both_ways() {
    let taken = corpus_both_ways(anthropic_both_ways, "anthropic");
    assert!(taken > 1000, "{taken} events taken whole");
}

#[test]
fn anthropic_line_caps_and_odd_framing_are_the_same_both_ways() {
    let recordings = recordings("anthropic");
    let base = recordings
        .iter()
        .max_by_key(|r| r.len() < 30_000 && r.len() > 10_000)
        .unwrap();
    let text = String::from_utf8(base.clone()).unwrap();
    for cap in (60..400).step_by(7) {
        for size in [97, 512] {
            anthropic_both_ways(base, size, Some(cap), None);
        }
    }
    let variants = [
        text.replace("\n\n", "\r\n\r\n"),
        text.replace("data: ", "data:"),
        text.replacen("event: content_block_delta\n", "", 12),
        text.replacen("event: content_block_delta\n", "event: other\n", 9),
        text.replacen("\n\n", "\n\n: keep-alive\n\n", 15),
        text.replacen("\n\n", "\nid: 7\n\n", 15),
        text.replacen("\ndata: ", "\ndata: {}\ndata: ", 15),
        text.replacen("\"index\":1", "\"index\":01", 14),
        text.replacen("\"text\":\"", "\"text\":\"\\ud800", 5),
        text.replacen("\"text\":\"", "\"text\":\"\t", 5),
        text.replacen("}}", "},\"x\":1}", 5),
        // A CR ends the data line (the framer's way), even where JSON would take it as space.
        text.replacen("\"}}\n", "\"}\r}\n", 9),
        text.replacen("\"}}\n", "\"}}\r\n", 9),
        text.replacen("\"}}\n", "\"} }\r\n", 9),
    ];
    variants_both_ways(anthropic_both_ways, base, &variants);
}

/// [`both_ways`] for the Chat accumulator.
fn chat_both_ways(bytes: &[u8], size: usize, cap: Option<usize>, text_cap: Option<usize>) -> u64 {
    both_ways(ChatAccumulator::with_text_cap, bytes, size, cap, text_cap)
}

/// The Chat tap takes the chunks a kept shape reads whole (`ChatAccumulator::add_framed`):
/// on every chat recording, at every chunking and text cap, with the plain way's result.
#[test]
fn chat_corpus_is_the_same_both_ways() {
    let taken = corpus_both_ways(chat_both_ways, "chat");
    assert!(taken > 1000, "{taken} chunks taken whole");
}

#[test]
fn chat_line_caps_and_odd_framing_are_the_same_both_ways() {
    let recordings = recordings("chat");
    // The recordings with the longest text run and the most tool call deltas.
    let most = |needle: &str| {
        recordings
            .iter()
            .max_by_key(|r| String::from_utf8_lossy(r).matches(needle).count())
            .unwrap()
    };
    for base in [most("\"content\":\""), most("\"tool_calls\"")] {
        odd_chat_framings(base);
    }
}

fn odd_chat_framings(base: &[u8]) {
    let text = String::from_utf8(base.to_vec()).unwrap();
    // Caps at and next to the data lines' lengths, so that some chunks of a kept shape are
    // the first over the cap.
    let mut lengths: Vec<usize> = text.lines().map(str::len).filter(|&n| n > 0).collect();
    lengths.sort_unstable();
    lengths.dedup();
    assert!(lengths.len() > 3, "{} line lengths", lengths.len());
    let mut taken = 0;
    for &n in lengths.iter().step_by((lengths.len() / 10).max(1)) {
        for cap in [n - 1, n, n + 1] {
            for size in [97, 512] {
                taken += chat_both_ways(base, size, Some(cap), None);
            }
        }
    }
    assert!(taken > 100, "{taken} chunks taken whole under line caps");
    // A chunk of a kept shape longer than any before it (most first chunks are the longest):
    // the first line over caps next to its length.
    let at = text
        .match_indices("\":\"")
        .nth(60)
        .map_or(text.len() / 2, |(at, _)| at + 3);
    let long = format!("{}{}{}", &text[..at], "x".repeat(700), &text[at..]);
    let line = long[..at].rfind('\n').map_or(0, |n| n + 1);
    let n = long[line..].find('\n').unwrap();
    let mut taken = 0;
    for cap in [n - 1, n, n + 1] {
        for size in [97, 512, usize::MAX] {
            taken += chat_both_ways(long.as_bytes(), size, Some(cap), None);
        }
    }
    assert!(
        taken > 10,
        "{taken} chunks taken whole before and after a long one"
    );
    let variants = [
        text.replace("\n\n", "\r\n\r\n"),
        text.replacen("\n\n", "\r\n\n", 40),
        text.replace("data: ", "data:"),
        text.replacen("\ndata: ", "\nevent: chunk\ndata: ", 30),
        text.replacen("\n\n", "\n\n: keep-alive\n\n", 30),
        text.replacen("\n\n", "\nid: 7\n\n", 30),
        text.replacen("\ndata: ", "\ndata: {}\ndata: ", 30),
        text.replacen("\"content\":\"", "\"content\":\"\\ud800", 40),
        text.replacen("\"content\":\"", "\"content\":\"\\u00e9\\n", 40),
        text.replacen("\"content\":\"", "\"content\":\"\t", 40),
        text.replacen("\"content\":\"", "\"content\":\"\u{e9}\u{1f600}", 40),
        text.replacen("\"arguments\":\"", "\"arguments\":\"\\\"\\u00e9", 40),
        text.replacen("\"index\":0", "\"index\":00", 40),
        text.replacen("}]}", "}],\"x\":1}", 40),
        // A CR ends the data line (the framer's way), even where JSON would take it as space.
        text.replacen("}\n", "\r}\n", 40),
        text.replacen("}\n", "}\r\n", 40),
        text.replacen("}\n", "} \r\n", 40),
    ];
    variants_both_ways(chat_both_ways, base, &variants);
}
