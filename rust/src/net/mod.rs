//! The native network engine: the gateway's data path in Rust (tokio, hyper, rustls,
//! tokio-tungstenite), plain Rust like the rest of the core; the binding layer drives it.
//!
//! - [`gateway`]: the HTTP/1.1 server, the pooled upstream client and the relay of each reply,
//!   tapped as it goes, with one [`gateway::Record`] per exchange handed to a bounded queue;
//! - [`realtime`]: WebSocket exchanges, proxied both ways;
//! - [`tap`]: the protocol's accumulator fed the forwarded bytes, and the first output;
//! - [`client`]: the upstream client and its TLS roots;
//! - [`serve`]: the server of `rapidsse serve --engine native`, pacing the streams of
//!   [`synthetic`] or the recordings of [`replay`];
//! - [`measure`]: the benchmark client of `rapidsse measure --engine native`, counting with
//!   [`tokens`];
//! - [`stop`]: the stop signal the connections and requests wait for beside their work.

pub mod client;
pub mod gateway;
mod guard;
pub mod measure;
pub mod realtime;
pub mod replay;
pub mod serve;
pub mod stop;
pub mod synthetic;
pub mod tap;
pub mod tokens;

pub use gateway::{Config, Decision, ErrorText, Gateway, Hooks, Record, RequestHead};
pub use tap::{Protocol, Refused, StreamTap, TapError};
