//! The native network engine: the gateway's data path in Rust (tokio, hyper, rustls,
//! tokio-tungstenite), plain Rust like the rest of the core; the binding layer drives it.
//!
//! - [`gateway`]: the HTTP/1.1 server, the pooled upstream client and the relay of each reply,
//!   tapped as it goes, with one [`gateway::Record`] per exchange handed to a bounded queue;
//! - [`realtime`]: WebSocket exchanges, proxied both ways;
//! - [`tap`]: the protocol's accumulator fed the forwarded bytes, and the first output;
//! - [`upstream`]: the plain-HTTP upstream, read on the relay's own task; [`client`]: hyper's
//!   pooled client for https upstreams, and the TLS roots;
//! - [`serve`]: the server of `rapidsse serve --engine native`, pacing the streams of
//!   [`synthetic`] or the recordings of [`replay`];
//! - [`measure`]: the benchmark client of `rapidsse measure --engine native`, counting with
//!   [`tokens`];
//! - [`h1`]: the HTTP/1.1 response reader of the clients;
//! - [`stop`]: the stop signal the connections and requests wait for beside their work;
//! - [`fds`]: the process's descriptor table, grown when an engine starts.

pub mod client;
pub mod fds;
pub mod gateway;
mod guard;
pub mod h1;
pub mod measure;
pub mod realtime;
pub mod replay;
pub mod serve;
pub mod stop;
pub mod synthetic;
pub mod tap;
pub mod tokens;
pub mod upstream;

pub use gateway::{Config, Decision, ErrorText, Gateway, Hooks, Record, RequestHead};
pub use tap::{Protocol, Refused, StreamTap, TapError};
