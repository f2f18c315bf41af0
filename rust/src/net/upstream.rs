//! The gateway's plain-HTTP upstream: HTTP/1.1 on kept-alive TCP connections, the response read
//! on the client connection's own task.
//!
//! hyper's client runs each upstream connection as a task of its own and hands the body over
//! through a channel that holds one frame: every chunk woke two tasks, and a read that brought
//! many chunks was still handed on one chunk at a time. Here the relay polls the socket itself:
//! a read's body bytes, however many chunks they were, are one frame (one write to the client),
//! the framing taken off by [`ResponseParser`], the benchmark client's reader. https upstreams
//! (TLS, HTTP/2 by ALPN) stay on hyper's pooled client.
//!
//! - A request is written whole (head and body in one write) on an idle connection of the host
//!   when there is one that is still open, else on a new one (`connect_timeout`).
//! - A connection goes back to the pool when its response ended cleanly (framed by length or
//!   chunks, no `connection: close`, nothing more sent), at most `max_idle` per host, for at
//!   most [`IDLE_TIMEOUT`].
//! - The keep-alive race: upstream closed a pooled connection as the request went out and
//!   nothing of a response came. That request is sent again, on another connection.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::h1::{Part, ResponseParser};

/// How long an idle connection is kept (hyper's pool keeps them as long).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Bytes asked of one read.
const READ_SIZE: usize = 64 * 1024;

thread_local! {
    /// The buffer of every read on this thread: a read's bytes are parsed (the body's copied
    /// out) before the next, so no connection holds a buffer of its own while it waits.
    static READ_BUFFER: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_SIZE]);
}

/// Where requests go: the host and port connected to, the `host` header's authority (shared
/// with each response that gives its connection back to the pool under it).
#[derive(Debug, Clone)]
pub struct Origin {
    pub host: String,
    pub port: u16,
    pub authority: Arc<str>,
}

/// The idle connections, by authority.
pub struct Pool {
    idle: Mutex<HashMap<String, Vec<(TcpStream, Instant)>>>,
    max_idle: usize,
    connect_timeout: Duration,
}

impl Pool {
    pub fn new(max_idle: usize, connect_timeout: Duration) -> Pool {
        Pool {
            idle: Mutex::new(HashMap::new()),
            max_idle,
            connect_timeout,
        }
    }

    /// An idle connection to `authority` that is still open, if any (the last one given back
    /// first: the warmest).
    fn checkout(&self, authority: &str) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let conns = idle.get_mut(authority)?;
        while let Some((stream, since)) = conns.pop() {
            if since.elapsed() < IDLE_TIMEOUT && is_quiet(&stream) {
                return Some(stream);
            }
        }
        None
    }

    fn checkin(&self, authority: &str, stream: TcpStream) {
        if self.max_idle == 0 {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if !idle.contains_key(authority) {
            idle.insert(authority.to_owned(), Vec::new());
        }
        let conns = idle.get_mut(authority).expect("inserted");
        // Given back in time order and taken from the end: the expired ones are at the front.
        let expired = conns
            .iter()
            .take_while(|(_, since)| since.elapsed() >= IDLE_TIMEOUT)
            .count();
        conns.drain(..expired);
        if conns.len() < self.max_idle {
            conns.push((stream, Instant::now()));
        }
    }

    async fn connect(&self, origin: &Origin) -> Result<TcpStream, String> {
        let connecting = TcpStream::connect((origin.host.as_str(), origin.port));
        let stream = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(format!("ConnectError: tcp connect error: {e}")),
            Err(_) => {
                return Err(format!(
                    "ConnectError: tcp connect timed out after {:?}",
                    self.connect_timeout
                ))
            }
        };
        stream
            .set_nodelay(true)
            .map_err(|e| format!("ConnectError: {e}"))?;
        Ok(stream)
    }
}

/// An idle connection with nothing to read: not closed by its peer (tokio knows without a system
/// call when no readiness came since the last read).
fn is_quiet(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// Upstream's response: its status and headers, and its body still to read.
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

/// Why an attempt failed.
enum Failure {
    /// Nothing of a response came before the connection closed (a pooled one: the race).
    Stale,
    Reason(String),
}

/// Sends `request` (its head and body, whole) to `origin` and reads the response's head.
pub async fn send(pool: &Arc<Pool>, origin: &Origin, request: &[u8]) -> Result<Response, String> {
    loop {
        let pooled = pool.checkout(&origin.authority);
        let reused = pooled.is_some();
        let stream = match pooled {
            Some(stream) => stream,
            None => pool.connect(origin).await?,
        };
        match exchange(stream, request).await {
            Ok((status, headers, mut body)) => {
                body.pool = Some((pool.clone(), origin.authority.clone()));
                body.release();
                return Ok(Response {
                    status,
                    headers,
                    body,
                });
            }
            Err(Failure::Stale) if reused => continue,
            Err(Failure::Stale) => {
                return Err(
                    "UpstreamError: upstream closed the connection before it answered".to_owned(),
                )
            }
            Err(Failure::Reason(reason)) => return Err(reason),
        }
    }
}

/// The request written on `stream`, the response read up to its head.
async fn exchange(
    mut stream: TcpStream,
    request: &[u8],
) -> Result<(StatusCode, HeaderMap, Body), Failure> {
    if stream.write_all(request).await.is_err() {
        return Err(Failure::Stale);
    }
    let mut body = Body {
        stream: Some(stream),
        parser: ResponseParser::default(),
        pending: BytesMut::new(),
        trailers: None,
        ended: false,
        keep_alive: false,
        failed: None,
        held: false,
        pool: None,
    };
    let mut head = None;
    while head.is_none() {
        let read = std::future::poll_fn(|cx| body.poll_read(cx, &mut head)).await;
        match read {
            Ok(true) => {}
            Ok(false) | Err(_) if body.parser.is_fresh() => return Err(Failure::Stale),
            Ok(false) => {
                return Err(Failure::Reason(
                    "UpstreamError: upstream closed the connection within its response head"
                        .to_owned(),
                ))
            }
            Err(e) => return Err(Failure::Reason(format!("UpstreamError: {e}"))),
        }
    }
    let (status, headers) = head.expect("read up to the head");
    Ok((status, headers, body))
}

/// A response's body, read when the relay asks for the next frame: what one read brought is one
/// frame.
pub struct Body {
    /// The connection, until the response ended (then given back, or dropped).
    stream: Option<TcpStream>,
    parser: ResponseParser,
    /// Body bytes read and not yet taken.
    pending: BytesMut,
    trailers: Option<HeaderMap>,
    ended: bool,
    keep_alive: bool,
    /// Why the body cannot end well (a cut, a framing error), once the bytes before it are given.
    failed: Option<io::Error>,
    /// `failed` was held back for one poll (see [`poll_frame`](Body::poll_frame)).
    held: bool,
    /// Where the connection goes back to.
    pool: Option<(Arc<Pool>, Arc<str>)>,
}

impl Body {
    /// One read into the thread's buffer, parsed: `Ok(false)` at the connection's end. A head
    /// found goes to `head`.
    fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        head: &mut Option<(StatusCode, HeaderMap)>,
    ) -> Poll<io::Result<bool>> {
        let Some(stream) = self.stream.as_mut() else {
            return Poll::Ready(Ok(false));
        };
        READ_BUFFER.with_borrow_mut(|buffer| {
            let mut read = ReadBuf::new(buffer);
            ready!(Pin::new(stream).poll_read(cx, &mut read))?;
            let data = read.filled();
            if data.is_empty() {
                if self.parser.close() {
                    self.ended = true;
                    self.keep_alive = false;
                }
                return Poll::Ready(Ok(false));
            }
            let (pending, trailers, ended, keep_alive) = (
                &mut self.pending,
                &mut self.trailers,
                &mut self.ended,
                &mut self.keep_alive,
            );
            let mut bad = None;
            self.parser
                .feed(data, |part| match part {
                    Part::Head {
                        status, headers, ..
                    } => match response_head(status, headers) {
                        Ok(found) => *head = Some(found),
                        Err(e) => bad = Some(e),
                    },
                    Part::Body(bytes) => pending.extend_from_slice(bytes),
                    Part::Trailer(line) => {
                        if let Some((name, value)) = trailer(line) {
                            trailers
                                .get_or_insert_with(HeaderMap::new)
                                .append(name, value);
                        }
                    }
                    Part::End { keep_alive: k } => {
                        *ended = true;
                        *keep_alive = k;
                    }
                })
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if let Some(e) = bad {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
            Poll::Ready(Ok(true))
        })
    }

    /// The connection given back once the response ended cleanly (dropped otherwise).
    fn release(&mut self) {
        if !self.ended {
            return;
        }
        if let Some(stream) = self.stream.take() {
            if self.keep_alive && !self.parser.had_extra() {
                if let Some((pool, authority)) = &self.pool {
                    pool.checkin(authority, stream);
                }
            }
        }
    }

    /// The next frame: the body bytes of the next read (or of the head's), then the trailers.
    ///
    /// A failure comes after every byte read before it, and one poll late: hyper's server drops
    /// what it has not written yet when the body fails, and it writes what it holds when the body
    /// has nothing (`Pending`). So a cut found right behind the last bytes (both in the socket
    /// at once) is first a `Pending` with the task woken again, then the error.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        loop {
            if !self.pending.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(self.pending.split().freeze()))));
            }
            if let Some(error) = self.failed.take() {
                if self.held {
                    return Poll::Ready(Some(Err(error)));
                }
                self.failed = Some(error);
                self.held = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if self.ended {
                return Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            let mut head = None;
            match ready!(self.poll_read(cx, &mut head)) {
                Ok(true) => self.release(),
                Ok(false) if self.ended => {}
                Ok(false) => {
                    self.stream = None;
                    self.failed = Some(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "upstream closed the connection before the body ended",
                    ));
                }
                Err(e) => {
                    self.stream = None;
                    self.failed = Some(e);
                }
            }
        }
    }

    /// Nothing more to give.
    pub fn is_end_stream(&self) -> bool {
        self.ended && self.pending.is_empty() && self.trailers.is_none() && self.failed.is_none()
    }

    pub fn size_hint(&self) -> SizeHint {
        match self.parser.remaining() {
            Some(left) => SizeHint::with_exact(left + self.pending.len() as u64),
            None => {
                let mut hint = SizeHint::new();
                hint.set_lower(self.pending.len() as u64);
                hint
            }
        }
    }
}

/// The head's status and headers (a header name or value that is not HTTP's is an error).
fn response_head(
    status: u16,
    headers: &[httparse::Header<'_>],
) -> Result<(StatusCode, HeaderMap), String> {
    let status = StatusCode::from_u16(status).map_err(|e| e.to_string())?;
    let mut map = HeaderMap::with_capacity(headers.len());
    for header in headers {
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|e| e.to_string())?;
        let value = HeaderValue::from_bytes(header.value).map_err(|e| e.to_string())?;
        map.append(name, value);
    }
    Ok((status, map))
}

/// A trailer line as a header (a malformed one is left out, as hyper leaves it).
fn trailer(line: &[u8]) -> Option<(HeaderName, HeaderValue)> {
    let colon = memchr::memchr(b':', line)?;
    let name = HeaderName::from_bytes(line[..colon].trim_ascii()).ok()?;
    let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii()).ok()?;
    Some((name, value))
}

/// A request's bytes: the request line, `host` (unless `headers` name one: an `on_request` hook
/// may), `headers` but their body framing, `content-length` (when there is a body, or the method
/// has one), the blank line and the body.
pub fn request_bytes(
    method: &http::Method,
    target: &str,
    authority: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + body.len() + headers.len() * 32);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !headers.contains_key(http::header::HOST) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(authority.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in headers {
        if name == http::header::CONTENT_LENGTH || name == http::header::TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let has_body = !body.is_empty()
        || matches!(
            *method,
            http::Method::POST | http::Method::PUT | http::Method::PATCH
        );
    if has_body {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// A server that answers each request read on a connection with the next of `replies`, and
    /// closes the connection after the ones marked so; it counts the connections it accepted.
    async fn server(replies: Vec<(&'static [u8], bool)>) -> (Origin, Arc<Mutex<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(Mutex::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            let replies = Arc::new(Mutex::new(replies.into_iter()));
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                *count.lock().unwrap() += 1;
                let replies = replies.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0; 4096];
                    loop {
                        let mut got = Vec::new();
                        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                            match socket.read(&mut buffer).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => got.extend_from_slice(&buffer[..n]),
                            }
                        }
                        let Some((reply, close)) = replies.lock().unwrap().next() else {
                            return;
                        };
                        socket.write_all(reply).await.unwrap();
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        let origin = Origin {
            host: "127.0.0.1".to_owned(),
            port,
            authority: Arc::from(format!("127.0.0.1:{port}")),
        };
        (origin, accepted)
    }

    /// A waker that notes it was woken.
    #[derive(Default)]
    struct Woken(std::sync::atomic::AtomicBool);

    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    async fn body_of(mut body: Body) -> (Vec<u8>, usize, Option<HeaderMap>) {
        let (mut bytes, mut frames, mut trailers) = (Vec::new(), 0, None);
        while let Some(frame) = std::future::poll_fn(|cx| body.poll_frame(cx)).await {
            let frame = frame.unwrap();
            match frame.into_data() {
                Ok(data) => {
                    bytes.extend_from_slice(&data);
                    frames += 1;
                }
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        assert!(body.is_end_stream());
        (bytes, frames, trailers)
    }

    /// `test` run on a runtime of its own.
    fn run(test: impl std::future::Future<Output = ()>) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test);
    }

    /// A pool, and the bytes of a request to `origin` with no header of its own.
    fn pool_and_request(
        origin: &Origin,
        method: http::Method,
        target: &str,
        body: &[u8],
    ) -> (Arc<Pool>, Vec<u8>) {
        let pool = Arc::new(Pool::new(4, Duration::from_secs(1)));
        let request = request_bytes(&method, target, &origin.authority, &HeaderMap::new(), body);
        (pool, request)
    }

    #[test]
    fn chunks_of_one_read_are_one_frame_and_the_connection_is_kept() {
        run(async {
            let chunked: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
transfer-encoding: chunked\r\nx-vendor: a\r\nx-vendor: b\r\n\r\n6\r\ndata: \r\n3\r\n1\n\n\r\n\
6\r\ndata: \r\n3\r\n2\n\n\r\n0\r\nx-checksum: 7\r\n\r\n";
            let (origin, accepted) = server(vec![
                (chunked, false),
                (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", false),
            ])
            .await;
            let (pool, request) =
                pool_and_request(&origin, http::Method::POST, "/v1/chat/completions", b"{}");
            let reply = send(&pool, &origin, &request).await.unwrap();
            assert_eq!(reply.status, StatusCode::OK);
            let vendor: Vec<_> = reply.headers.get_all("x-vendor").iter().collect();
            assert_eq!(vendor, ["a", "b"]);
            let (bytes, frames, trailers) = body_of(reply.body).await;
            assert_eq!(bytes, b"data: 1\n\ndata: 2\n\n");
            assert_eq!(frames, 1, "one read, one frame");
            assert_eq!(trailers.unwrap()["x-checksum"], "7");
            let reply = send(&pool, &origin, &request).await.unwrap();
            assert_eq!(reply.body.size_hint().exact(), Some(2));
            assert_eq!(body_of(reply.body).await.0, b"{}");
            assert_eq!(
                *accepted.lock().unwrap(),
                1,
                "the connection was kept alive"
            );
        });
    }

    #[test]
    fn a_pooled_connection_closed_by_upstream_is_not_reused_and_a_cut_body_is_an_error() {
        run(async {
            let (origin, accepted) = server(vec![
                (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", true),
                (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n{}", true),
            ])
            .await;
            let (pool, request) = pool_and_request(&origin, http::Method::GET, "/", b"");
            assert!(!String::from_utf8_lossy(&request).contains("content-length"));
            let mut own = HeaderMap::new();
            own.insert("host", HeaderValue::from_static("models.internal"));
            own.insert("content-length", HeaderValue::from_static("99"));
            let text = request_bytes(&http::Method::POST, "/", "127.0.0.1:1", &own, b"{}");
            assert_eq!(
                String::from_utf8(text).unwrap(),
                "POST / HTTP/1.1\r\nhost: models.internal\r\ncontent-length: 2\r\n\r\n{}",
                "a hook's host is the one sent, the length is the body's"
            );
            let reply = send(&pool, &origin, &request).await.unwrap();
            assert_eq!(body_of(reply.body).await.0, b"{}");
            // Upstream closed the kept connection: the next request goes on a new one.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut reply = send(&pool, &origin, &request).await.unwrap();
            assert_eq!(*accepted.lock().unwrap(), 2);
            let first = std::future::poll_fn(|cx| reply.body.poll_frame(cx)).await;
            assert_eq!(first.unwrap().unwrap().into_data().unwrap(), "{}");
            let cut = std::future::poll_fn(|cx| reply.body.poll_frame(cx)).await;
            assert_eq!(
                cut.unwrap().unwrap_err().kind(),
                io::ErrorKind::UnexpectedEof
            );
            // The last bytes and the cut in the socket at once: the bytes, a poll with nothing
            // (the task woken again at once), then the cut.
            let (origin, _) = server(vec![(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n",
                true,
            )])
            .await;
            let (pool, request) = pool_and_request(&origin, http::Method::GET, "/", b"");
            let mut body = send(&pool, &origin, &request).await.unwrap().body;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let woken = Arc::new(Woken::default());
            let waker = Waker::from(woken.clone());
            let mut cx = Context::from_waker(&waker);
            let data = body
                .poll_frame(&mut cx)
                .map(|f| f.unwrap().unwrap().into_data().unwrap());
            assert_eq!(data, Poll::Ready(Bytes::from_static(b"ok")));
            assert!(
                body.poll_frame(&mut cx).is_pending(),
                "the cut waits one poll"
            );
            assert!(woken.0.load(std::sync::atomic::Ordering::Relaxed));
            let cut = body.poll_frame(&mut cx);
            assert!(
                matches!(cut, Poll::Ready(Some(Err(e))) if e.kind() == io::ErrorKind::UnexpectedEof)
            );
            let refused = Origin {
                port: 1,
                authority: Arc::from("127.0.0.1:1"),
                ..origin
            };
            let err = send(&pool, &refused, &request).await.err().unwrap();
            assert!(err.starts_with("ConnectError: "), "{err}");
        });
    }
}
