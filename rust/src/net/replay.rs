//! The native replay server (`rapidsse serve FILE... --engine native`): the routes of the Python
//! one (`create_app`) on the same hyper server as the synthetic streams ([`serve`](super::serve)).
//!
//! Python reads the recordings (it detects their protocol, cuts each into the pieces sent one at
//! a time and builds the final object a request without `"stream": true` is answered with) and
//! hands them over once as a [`Library`]; each protocol's recordings are then handed out
//! round-robin, every piece at its deadline `ttft + i / rate` after the request (on the worker's
//! [`Clock`]), the bytes exactly as recorded. `/v1/realtime` replays a Realtime recording over a
//! WebSocket, one message per line, and ignores what the client sends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::serve::Clock;

/// The protocols in the order of `/health`'s `recordings` (Python's `PROTOCOLS`).
pub const PROTOCOLS: [&str; 6] = [
    "responses",
    "chat",
    "completions",
    "anthropic",
    "gemini",
    "realtime",
];

/// The index of Realtime in [`PROTOCOLS`].
pub const REALTIME: usize = 5;

/// When each piece is sent: `ttft` seconds after the request, then `rate` pieces per second
/// (`0`: all at once), as Python's `Pacing`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacing {
    pub ttft: f64,
    pub rate: f64,
}

impl Pacing {
    /// The pacing, or why it is not one (Python's `Pacing` refuses the same).
    pub fn new(ttft: f64, rate: f64) -> Result<Pacing, String> {
        if !(ttft.is_finite() && rate.is_finite() && ttft >= 0.0 && rate >= 0.0) {
            return Err("ttft and rate must not be negative".to_owned());
        }
        Ok(Pacing { ttft, rate })
    }

    /// Seconds after the request at which piece `index` (0-based) is due.
    pub fn due(&self, index: usize) -> f64 {
        self.ttft
            + if self.rate > 0.0 {
                index as f64 / self.rate
            } else {
                0.0
            }
    }
}

/// One recording: the pieces sent one at a time (SSE blocks, whose concatenation is the file,
/// or Realtime messages) and the JSON of its final object, if it has one.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub events: Arc<[Bytes]>,
    pub whole: Option<Bytes>,
}

/// The recordings of one protocol and how many have been handed out.
#[derive(Default)]
struct Rotation {
    recordings: Vec<Recorded>,
    served: AtomicU64,
}

impl Rotation {
    fn next(&self) -> Option<&Recorded> {
        if self.recordings.is_empty() {
            return None;
        }
        let served = self.served.fetch_add(1, Ordering::Relaxed);
        Some(&self.recordings[(served % self.recordings.len() as u64) as usize])
    }
}

/// What a replay server serves: every protocol's recordings, and the pacing.
pub struct Library {
    pub pacing: Pacing,
    rotations: [Rotation; 6],
}

impl Library {
    /// `recordings` as `(protocol, recording)`, in the order they rotate; an unknown protocol is
    /// an error.
    pub fn new(
        pacing: Pacing,
        recordings: impl IntoIterator<Item = (String, Recorded)>,
    ) -> Result<Library, String> {
        let mut rotations: [Rotation; 6] = Default::default();
        for (protocol, recording) in recordings {
            let index = PROTOCOLS
                .iter()
                .position(|p| *p == protocol)
                .ok_or_else(|| format!("no such protocol: {protocol:?}"))?;
            if index == REALTIME
                && recording
                    .events
                    .iter()
                    .any(|m| std::str::from_utf8(m).is_err())
            {
                return Err("a Realtime recording's messages must be UTF-8 text".to_owned());
            }
            rotations[index].recordings.push(recording);
        }
        Ok(Library { pacing, rotations })
    }

    /// The next recording of protocol `index` (of [`PROTOCOLS`]), None when there is none.
    pub fn next(&self, index: usize) -> Option<&Recorded> {
        self.rotations[index].next()
    }

    /// `/health`: `{"status": "ok", "recordings": {protocol: count, ...}}`.
    pub fn health(&self) -> Value {
        let counts: serde_json::Map<String, Value> = PROTOCOLS
            .iter()
            .zip(&self.rotations)
            .map(|(p, r)| ((*p).to_owned(), json!(r.recordings.len())))
            .collect();
        json!({"status": "ok", "recordings": counts})
    }
}

/// A recording's pieces on their schedule: the body of a replayed stream.
pub struct Replayed {
    events: Arc<[Bytes]>,
    next: usize,
    start: Instant,
    pacing: Pacing,
    clock: Arc<Clock>,
    waiting: Option<Waker>,
}

impl Replayed {
    pub fn new(recorded: &Recorded, start: Instant, pacing: Pacing, clock: Arc<Clock>) -> Replayed {
        Replayed {
            events: recorded.events.clone(),
            next: 0,
            start,
            pacing,
            clock,
            waiting: None,
        }
    }

    pub fn is_end(&self) -> bool {
        self.next == self.events.len()
    }

    fn due(&self) -> Instant {
        self.start + Duration::from_secs_f64(self.pacing.due(self.next))
    }

    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.is_end() {
            return Poll::Ready(None);
        }
        if self
            .clock
            .poll_until(self.due(), &mut self.waiting, cx)
            .is_pending()
        {
            return Poll::Pending;
        }
        self.next += 1;
        Poll::Ready(Some(self.events[self.next - 1].clone()))
    }

    /// The next piece at its deadline, None after the last.
    pub async fn next(&mut self) -> Option<Bytes> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// Whether `req` asks for a WebSocket.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
        && req.headers().contains_key(header::SEC_WEBSOCKET_KEY)
}

/// `/v1/realtime`: accepts the WebSocket (with the `realtime` subprotocol when the client offers
/// it) and replays the next Realtime recording, one text message per piece, then closes with
/// 1000; answers 403 when there is no Realtime recording, as uvicorn does when the app closes
/// before accepting. `reply` makes the HTTP response of the handshake from its status.
pub fn realtime<R>(
    library: Arc<Library>,
    clock: Arc<Clock>,
    mut req: Request<Incoming>,
    start: Instant,
    reply: impl FnOnce(StatusCode) -> Response<R>,
) -> Response<R> {
    let Some(recorded) = library.next(REALTIME).cloned() else {
        return reply(StatusCode::FORBIDDEN);
    };
    let offered = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == "realtime");
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| derive_accept_key(k.as_bytes()))
        .unwrap_or_default();
    let upgrade = hyper::upgrade::on(&mut req);
    let pacing = library.pacing;
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else {
            return; // the client left during the handshake
        };
        let socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        session(socket, Replayed::new(&recorded, start, pacing, clock)).await;
    });
    let mut response = reply(StatusCode::SWITCHING_PROTOCOLS);
    let h = response.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&key) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if offered {
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("realtime"),
        );
    }
    response
}

/// One Realtime session: the recording's messages on their schedule while the client's own are
/// read and dropped; ends early when the client leaves.
async fn session<S>(socket: WebSocketStream<S>, mut replayed: Replayed)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = socket.split();
    // The client's messages are read (which also answers its pings and notices it leaving).
    let mut client = tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            if let Message::Close(_) = message {
                break;
            }
        }
    });
    loop {
        tokio::select! {
            piece = replayed.next() => {
                let Some(piece) = piece else { break };
                // (UTF-8: checked when the library was made)
                let text = String::from_utf8_lossy(&piece).into_owned();
                if sink.send(Message::text(text)).await.is_err() {
                    client.abort();
                    return;
                }
            }
            _ = &mut client => return, // the client left or closed
        }
    }
    let close = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(close))).await;
    // Wait (a little) for the client's close, so that it sees a clean one.
    let _ = tokio::time::timeout(Duration::from_secs(2), &mut client).await;
    client.abort();
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(events: &[&str], whole: Option<&str>) -> Recorded {
        Recorded {
            events: events.iter().map(|e| Bytes::from(e.to_string())).collect(),
            whole: whole.map(|w| Bytes::from(w.to_owned())),
        }
    }

    #[test]
    fn recordings_rotate_per_protocol_and_health_counts_them() {
        let library = Library::new(
            Pacing::new(0.0, 0.0).unwrap(),
            [
                ("chat".to_owned(), recorded(&["a"], None)),
                ("chat".to_owned(), recorded(&["b"], Some("{}"))),
                ("realtime".to_owned(), recorded(&["{}"], None)),
            ],
        )
        .unwrap();
        let firsts: Vec<Bytes> = (0..3)
            .map(|_| library.next(1).unwrap().events[0].clone())
            .collect();
        assert_eq!(firsts, [&b"a"[..], b"b", b"a"].map(Bytes::from_static));
        assert!(library.next(0).is_none());
        assert_eq!(
            library.health().to_string(),
            r#"{"status":"ok","recordings":{"responses":0,"chat":2,"completions":0,"anthropic":0,"gemini":0,"realtime":1}}"#
        );
        let bad = Library::new(
            Pacing::new(0.0, 0.0).unwrap(),
            [("sse".to_owned(), recorded(&[], None))],
        );
        assert!(bad.is_err());
        let binary = Recorded {
            events: vec![Bytes::from_static(b"\xff")].into(),
            whole: None,
        };
        assert!(Library::new(
            Pacing::new(0.0, 0.0).unwrap(),
            [("realtime".to_owned(), binary)]
        )
        .is_err());
        assert!(Pacing::new(-1.0, 0.0).is_err() && Pacing::new(0.0, f64::NAN).is_err());
        assert_eq!(Pacing::new(0.5, 4.0).unwrap().due(2), 1.0);
    }
}
