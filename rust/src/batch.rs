//! Routing and batching of JSON payloads for one decode call per chunk.
//!
//! Payloads whose top-level `type` is known (or every payload, for untagged
//! protocols such as Chat Completions) are joined as JSON lines, which the
//! binding layer hands to the schema's batch decoder (`rapidsse._wire.wrap_lines`,
//! msgspec's `decode_lines`) in a single call. Only payloads of one line shaped as an object
//! ([`object_shaped`]) are batched: msgspec reads whitespace-separated values across lines, and
//! of such lines it cannot make one value of two, so a count of values equal to the count of lines
//! pairs each payload with its own event. Anything else (a multi-line `data:`, a blank payload,
//! an array, a cut object) takes the careful path, one payload at a time, like anything of
//! unknown type. (The decoder batches without routing until a batch fails; see
//! `bindings::decoding`.)

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::scan::{raw_type_tag, TypeTag};

/// Where a payload goes.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Route {
    /// Into the batch: one line with a known type (untagged: any non-blank line). Invalid UTF-8
    /// is left to msgspec to refuse, which sends the whole batch the careful way.
    Batch,
    /// Decoded alone by the careful path: unknown or missing type, invalid UTF-8, odd JSON.
    Careful,
}

/// Decides the route of payloads for one protocol.
#[derive(Debug, Clone)]
pub struct Router {
    /// `None`: untagged protocol, every payload is batched. Shared: a router is built once per
    /// protocol and cloned into each decoder (a stream's decoder then costs no set of its own).
    known: Option<Arc<Tags>>,
}

/// The known `type` tags of a protocol.
type Tags = HashSet<Box<[u8]>, BuildHasherDefault<EndsHash>>;

/// A hash of the length and the first and last 8 bytes: the keys are a few dozen type names,
/// which differ there, and a full comparison settles any collision. SipHash (or any byte-by-byte
/// hash) costs more than the rest of routing an event.
#[derive(Default)]
pub struct EndsHash(u64);

impl Hasher for EndsHash {
    fn write(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        let (head, tail) = if n >= 8 {
            (word(&bytes[..8]), word(&bytes[n - 8..]))
        } else {
            (word(bytes), 0)
        };
        let mixed = (head ^ tail.rotate_left(29) ^ (n as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = (self.0 ^ mixed)
            .rotate_left(31)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

impl Router {
    /// A router for a protocol tagged on `type`, knowing these tags.
    pub fn tagged<I: IntoIterator<Item = S>, S: AsRef<str>>(tags: I) -> Router {
        Router {
            known: Some(Arc::new(
                tags.into_iter()
                    .map(|t| t.as_ref().as_bytes().into())
                    .collect(),
            )),
        }
    }

    /// A router for an untagged protocol (one schema for every payload).
    pub fn untagged() -> Router {
        Router { known: None }
    }

    /// The route of an untagged protocol: any one-line payload shaped as an object
    /// ([`object_shaped`]) is batched.
    #[inline]
    pub fn untagged_route(payload: &[u8], multiline: bool) -> Route {
        if multiline || !object_shaped(payload) {
            Route::Careful
        } else {
            Route::Batch
        }
    }

    /// `multiline`: the payload came from several `data:` lines (so it holds a LF).
    pub fn route(&self, payload: &[u8], multiline: bool) -> Route {
        if multiline {
            return Route::Careful;
        }
        match &self.known {
            None => Router::untagged_route(payload, false),
            Some(known) => match raw_type_tag(payload) {
                TypeTag::Found(tag) if known.contains(tag) && object_shaped(payload) => {
                    Route::Batch
                }
                _ => Route::Careful,
            },
        }
    }
}

/// Whether the first and last bytes of `payload` other than JSON whitespace are `{` and `}`: what
/// a batch line must be (`rapidsse._wire.wrap_lines`). No JSON value holds `}` then `{`, so no
/// value of the batch spans two such lines, and a count of values equal to the count of lines
/// means one value a line: `{"a":1} {"a":2}` on one line, or a value cut over two, is found out.
#[inline]
pub fn object_shaped(payload: &[u8]) -> bool {
    let json_ws = |b: &&u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    payload.iter().find(|b| !json_ws(b)) == Some(&b'{')
        && payload.iter().rev().find(|b| !json_ws(b)) == Some(&b'}')
}

/// JSON lines under construction: `p0\np1\n...`.
#[derive(Debug, Default)]
pub struct Batch {
    buf: Vec<u8>,
    len: usize,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn push(&mut self, payload: &[u8]) {
        if self.len > 0 {
            self.buf.push(b'\n');
        }
        self.buf.extend_from_slice(payload);
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The lines so far (`None` when empty).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        (self.len > 0).then_some(&self.buf[..])
    }

    /// Empties the batch, keeping its allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_known_type() {
        let router = Router::tagged(["response.created", "error"]);
        assert_eq!(
            router.route(br#"{"type":"error","code":"x"}"#, false),
            Route::Batch
        );
        assert_eq!(
            router.route(br#"{"type":"response.created"}"#, false),
            Route::Batch
        );
        assert_eq!(
            router.route(br#"{"type":"response.future"}"#, false),
            Route::Careful
        );
        assert_eq!(router.route(br#"{"type":"errorr"}"#, false), Route::Careful);
        assert_eq!(router.route(br#"{"type":""}"#, false), Route::Careful);
        assert_eq!(router.route(br#"{"no_type":1}"#, false), Route::Careful);
        assert_eq!(router.route(b"[DONE]", false), Route::Careful);
        assert_eq!(
            router.route(b"{\"type\":\n\"error\"}", true),
            Route::Careful
        );
        let chat = Router::untagged();
        assert_eq!(chat.route(br#"{"id":"x"}"#, false), Route::Batch);
        assert_eq!(chat.route(b" \t", false), Route::Careful);
        assert_eq!(chat.route(b"[1]", false), Route::Careful);
        assert_eq!(chat.route(br#"{"id":"x""#, false), Route::Careful);
        assert_eq!(chat.route(br#"} {"id":"x"}"#, false), Route::Careful);
        assert_eq!(chat.route(b" {} \t", false), Route::Batch);
        assert_eq!(router.route(br#"{"type":"error""#, false), Route::Careful);
        assert_eq!(chat.route(b"{}\n{}", true), Route::Careful);
    }

    #[test]
    fn builds_json_lines() {
        let mut batch = Batch::new();
        assert_eq!(batch.as_bytes(), None);
        batch.push(b"{\"a\":1}");
        batch.push(b" 2 ");
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.as_bytes(), Some(&b"{\"a\":1}\n 2 "[..]));
        batch.clear();
        batch.push(b"3");
        assert_eq!(batch.as_bytes(), Some(&b"3"[..]));
    }
}
