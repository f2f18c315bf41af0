//! The SSE framer at any chunking: fed in random chunks (sizes drawn from the input's first
//! bytes), it must give exactly the events, and the error, of the same stream fed at once;
//! and every event must be well-formed (data within the cap, no CR, `multiline` iff a LF).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rapidsse::framing::{Framer, FramingError, Retry};

#[derive(Debug, PartialEq, Eq)]
struct Ev {
    event: Vec<u8>,
    data: Vec<u8>,
    multiline: bool,
    id: Vec<u8>,
    retry: Option<Retry>,
    index: u64,
    offset: u64,
}

/// Feeds `chunks` in order; returns the events and whether (and in which chunk) it failed.
fn run<'a>(cap: Option<usize>, chunks: impl Iterator<Item = &'a [u8]>) -> (Vec<Ev>, bool, Vec<u8>) {
    let mut framer = Framer::new(cap);
    let mut events = Vec::new();
    let mut failed = false;
    for chunk in chunks {
        let res = framer.feed(chunk, |e| {
            if let Some(max) = cap {
                assert!(e.data.len() <= max, "data of {} bytes over the cap {max}", e.data.len());
            }
            assert!(!e.data.contains(&b'\r'), "CR in data");
            assert_eq!(e.multiline, e.data.contains(&b'\n'), "multiline flag");
            assert!(!e.event.contains(&b'\n') && !e.event.contains(&b'\r'));
            assert!(!e.id.contains(&0), "NUL in id");
            assert_eq!(e.index, events.len() as u64);
            events.push(Ev {
                event: e.event.to_vec(),
                data: e.data.to_vec(),
                multiline: e.multiline,
                id: e.id.to_vec(),
                retry: e.retry.cloned(),
                index: e.index,
                offset: e.offset,
            });
        });
        match res {
            Ok(()) => {}
            Err(FramingError::TooLarge(err)) => {
                assert_eq!(Some(err.limit), cap);
                failed = true;
                // Poisoned until reset.
                assert_eq!(framer.feed(b"data: x\n\n", |_| panic!("event after an error")), Err(FramingError::Poisoned));
                framer.reset();
                if cap.map_or(true, |max| max >= 64) {
                    let mut n = 0;
                    framer.feed(b"data: after reset\n\n", |e| {
                        assert_eq!(e.data, b"after reset");
                        n += 1;
                    })
                    .unwrap();
                    assert_eq!(n, 1);
                }
                break;
            }
            Err(FramingError::Poisoned) => panic!("poisoned without an error first"),
        }
    }
    let last_id = framer.last_event_id().to_vec();
    framer.close();
    (events, failed, last_id)
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 3 {
        return;
    }
    let cap = match input[0] {
        0 => None,
        255 => Some(0),
        b => Some(usize::from(b) * 4),
    };
    let mut seed = u32::from(input[1]) << 8 | u32::from(input[2]) | 1;
    let stream = &input[3..];

    let (whole, whole_failed, whole_id) = run(cap, std::iter::once(stream));

    // Random chunking: sizes 0..=max_chunk, max_chunk drawn from the seed too.
    let max_chunk = (seed % 17) as usize + 1;
    let mut chunks = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let n = ((seed as usize) % (max_chunk + 1)).min(rest.len());
        chunks.push(&rest[..n]);
        rest = &rest[n..];
    }
    let (parts, parts_failed, parts_id) = run(cap, chunks.iter().copied());
    assert_eq!(whole_failed, parts_failed, "an error at one chunking and not at another");
    assert_eq!(whole, parts, "events differ between chunkings");
    if !whole_failed {
        assert_eq!(whole_id, parts_id);
    }
});
