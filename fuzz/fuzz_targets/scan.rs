//! The type scanner (`rapidsse::scan::type_tag`): never panics, and whenever the payload is a
//! valid JSON object it is right: `Found(t)` only when the top-level `type` is the string `t`,
//! `Missing` only when there is no top-level `type`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rapidsse::scan::{type_tag, TypeTag};
use serde_json::Value;

fuzz_target!(|input: &[u8]| {
    let tag = type_tag(input);
    if let TypeTag::Found(t) = tag {
        assert!(!t.contains('"') && !t.contains('\\'));
    }
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(input) else {
        return;
    };
    // With duplicate keys serde_json keeps the last value and the scanner the first: skip those.
    let mentions = input.windows(6).filter(|w| w == b"\"type\"").count();
    match tag {
        TypeTag::Found(t) => {
            if mentions == 1 {
                assert_eq!(map.get("type"), Some(&Value::String(t.to_owned())), "wrong tag");
            } else {
                assert!(map.contains_key("type"));
            }
        }
        TypeTag::Missing => assert!(!map.contains_key("type"), "missed a `type` key"),
        TypeTag::Unusual => {}
    }
});
