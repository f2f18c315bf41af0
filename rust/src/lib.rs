//! rapidsse core: Server-Sent Events framing, JSON event scanning and stream
//! accumulation for LLM streaming APIs, in plain Rust.
//!
//! - [`framing`]: bytes in, SSE events out (WHATWG rules, linear time, size cap);
//! - [`lex`]: a strict JSON lexer, for the typed objects the binding layer builds itself;
//! - [`scan`]: a cheap look at a JSON payload's top-level `type`, to batch payloads for decoding;
//! - [`net`]: the native network engine (the gateway's data path on tokio and hyper);
//! - [`accumulate`]: the final Response / ChatCompletion / Realtime responses / Gemini response / text completion built from deltas.
//!
//! The PyO3 binding layer lives in `bindings` and is compiled only with the `python` feature.

pub mod accumulate;
pub mod batch;
pub mod framing;
pub mod lex;
pub mod net;
pub mod scan;

#[cfg(feature = "python")]
mod bindings;
