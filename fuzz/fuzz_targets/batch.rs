//! The batch router: payloads (the input split on 0xFF; the first line lists known tags for a
//! tagged router, or is empty for the untagged one) are routed and batched without panicking;
//! a batched payload has a known type (tagged) or is not blank (untagged), and the batch is
//! exactly the batched payloads joined by LF.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rapidsse::batch::{Batch, Route, Router};
use rapidsse::scan::{type_tag, TypeTag};

fuzz_target!(|input: &[u8]| {
    let mut parts = input.split(|&b| b == 0xFF);
    let head = parts.next().unwrap_or_default();
    let tags: Vec<String> = head
        .split(|&b| b == b',')
        .filter(|t| !t.is_empty())
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect();
    let tagged = !tags.is_empty();
    let router = if tagged { Router::tagged(tags.clone()) } else { Router::untagged() };
    let mut batch = Batch::new();
    let mut expected: Vec<&[u8]> = Vec::new();
    for payload in parts {
        let multiline = payload.contains(&b'\n');
        let route = router.route(payload, multiline);
        if multiline {
            assert_eq!(route, Route::Careful);
        }
        if route == Route::Batch {
            if tagged {
                match type_tag(payload) {
                    TypeTag::Found(t) => assert!(tags.iter().any(|k| k == t), "unknown tag batched"),
                    other => panic!("batched without a tag: {other:?}"),
                }
            } else {
                assert!(!payload.iter().all(u8::is_ascii_whitespace), "blank payload batched");
            }
            batch.push(payload);
            expected.push(payload);
        }
    }
    assert_eq!(batch.len(), expected.len());
    assert_eq!(batch.is_empty(), expected.is_empty());
    match batch.as_bytes() {
        None => assert!(expected.is_empty()),
        Some(bytes) => assert_eq!(bytes, expected.join(&b'\n').as_slice()),
    }
    batch.clear();
    assert_eq!(batch.as_bytes(), None);
});
