//! The gateway's data path: a hyper HTTP/1.1 server whose every request goes to one of the
//! configured upstreams through the pooled client, the reply streamed back frame by frame as it
//! arrives (the upstream's own buffers, no copy) while the protocol's tap reads the same bytes.
//!
//! Nothing here waits on the embedding program: `on_request` (see [`Hooks`]) runs on the blocking
//! pool once per exchange before upstream is contacted, and each finished exchange's [`Record`]
//! goes into a bounded queue with `try_send` (a full queue drops it and counts it). No log line
//! is written here.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;
use tokio::time::Sleep;

use super::client::{tls_config, upstream_client, Upstream};
use super::stop::Stop;
use super::tap::{Protocol, Refused, StreamTap};
use super::upstream::{self, Origin, Pool};

/// How the gateway is set up.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The upstreams by name, each a base URL (`http(s)://host[:port][/prefix]`); the first is
    /// the default.
    pub upstreams: Vec<(String, String)>,
    /// Feed every reply of a known protocol to its accumulator.
    pub tap: bool,
    /// How long upstream may send nothing while an exchange waits on it.
    pub read_timeout: Option<Duration>,
    pub connect_timeout: Duration,
    /// How long a client may take to send a request's header block.
    pub header_timeout: Duration,
    /// The most bytes a request's header block may take (431 past it).
    pub max_header_bytes: usize,
    /// The most bytes a request's body may take (413 past it).
    pub max_body_bytes: usize,
    /// The most bytes of a JSON reply kept to read its usage.
    pub max_json_reply: usize,
    /// Worker threads of the runtime.
    pub threads: usize,
    /// PEM certificates of a private CA trusted for https upstreams.
    pub upstream_ca: Option<Vec<u8>>,
    /// Answer `GET /metrics` from [`Hooks::metrics`] (else it is forwarded like any path).
    pub metrics_path: bool,
    /// How many finished exchanges may wait for the embedding program.
    pub record_queue: usize,
    /// Idle upstream connections kept per host.
    pub max_idle: usize,
}

/// A request as `on_request` sees it.
#[derive(Debug)]
pub struct RequestHead {
    pub method: String,
    pub path: String,
    pub query: String,
    pub protocol: Option<Protocol>,
    pub model: Option<String>,
    /// The headers that go upstream (lower-case names, repeated ones joined by ", ").
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// What `on_request` decided.
#[derive(Debug, Default)]
pub struct Decision {
    /// The upstream by name (None: the default).
    pub upstream: Option<String>,
    /// The headers to send upstream instead of the request's (None: unchanged).
    pub headers: Option<Vec<(String, String)>>,
    pub caller: Option<String>,
    /// Answer the client with this status and JSON body, and contact no upstream.
    pub reject: Option<(u16, Vec<u8>, String)>,
}

/// What the embedding program does per exchange (never per chunk).
pub trait Hooks: Send + Sync + 'static {
    /// Whether [`on_request`](Hooks::on_request) is to be called.
    fn has_on_request(&self) -> bool;
    /// Called on the blocking pool, once per exchange, before upstream is contacted.
    fn on_request(&self, head: RequestHead) -> Decision;
    /// The body and content type of `GET /metrics`, called on the blocking pool.
    fn metrics(&self) -> (Vec<u8>, String);
}

/// What an exchange's error was.
#[derive(Debug)]
pub enum ErrorText {
    Text(String),
    /// The first payload the tap refused (the record's error is what the Python accumulator
    /// raises for it).
    Tap(Refused),
}

/// One finished exchange.
pub struct Record {
    pub protocol: Option<Protocol>,
    pub method: String,
    pub path: String,
    pub model: Option<String>,
    pub caller: Option<String>,
    pub status: u16,
    pub outcome: &'static str,
    pub ttfb: Option<f64>,
    pub ttft: Option<f64>,
    pub duration: f64,
    pub chunks: u64,
    pub bytes: u64,
    pub error: Option<ErrorText>,
    /// The tap, for a tapped event stream or Realtime session (boxed: a record waiting for its
    /// upstream's reply, or in the records queue, does not carry a tap's room inline).
    pub tap: Option<Box<StreamTap>>,
    /// A JSON reply of a tapped protocol (its usage is read from it).
    pub json_reply: Option<Vec<u8>>,
}

/// Where finished exchanges go: a bounded queue that never blocks a stream.
pub(crate) struct Sink {
    tx: SyncSender<Record>,
    dropped: Arc<AtomicU64>,
}

impl Sink {
    pub(crate) fn put(&self, record: Record) {
        match self.tx.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// One configured upstream.
#[derive(Debug)]
pub(crate) struct Base {
    name: String,
    /// `scheme://authority` and the path prefix (no trailing `/`).
    origin: String,
    prefix: String,
    pub(crate) secure: bool,
    /// Where a plain-HTTP upstream's connections go, and the authority of every upstream's
    /// requests.
    origin_h1: Origin,
}

impl Base {
    fn parse(name: &str, url: &str) -> Result<Base, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("upstream {name:?}: {url:?} is not a URL ({e})"))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| format!("upstream {name:?}: {url:?} has no scheme"))?;
        let secure = match scheme {
            "http" => false,
            "https" => true,
            other => {
                return Err(format!(
                    "upstream {name:?}: scheme {other:?} is not http or https"
                ))
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("upstream {name:?}: {url:?} has no host"))?
            .to_string();
        if uri.query().is_some() {
            return Err(format!("upstream {name:?}: {url:?} has a query"));
        }
        let host = uri.host().unwrap_or_default();
        let origin_h1 = Origin {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: uri.port_u16().unwrap_or(if secure { 443 } else { 80 }),
            authority: Arc::from(authority.as_str()),
        };
        Ok(Base {
            origin_h1,
            name: name.to_owned(),
            origin: format!("{scheme}://{authority}"),
            prefix: uri.path().trim_end_matches('/').to_owned(),
            secure,
        })
    }

    /// The upstream URI for a request target's path and query (never its authority).
    pub(crate) fn uri(&self, path_and_query: &str, websocket: bool) -> Result<Uri, String> {
        let origin = if websocket {
            if self.secure {
                format!("wss://{}", self.origin_h1.authority)
            } else {
                format!("ws://{}", self.origin_h1.authority)
            }
        } else {
            self.origin.clone()
        };
        format!("{origin}{}{path_and_query}", self.prefix)
            .parse()
            .map_err(|e| format!("bad upstream target: {e}"))
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) bases: Vec<Base>,
    pub(crate) client: Upstream,
    /// The idle connections of plain-HTTP upstreams.
    pub(crate) pool: Arc<Pool>,
    pub(crate) tls: rustls::ClientConfig,
    pub(crate) hooks: Arc<dyn Hooks>,
    pub(crate) sink: Arc<Sink>,
}

impl Shared {
    pub(crate) fn base(&self, name: Option<&str>) -> Option<&Base> {
        match name {
            None => self.bases.first(),
            Some(name) => self.bases.iter().find(|b| b.name == name),
        }
    }
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    stop_tx: watch::Sender<Option<Duration>>,
    stopped: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    records: Mutex<Receiver<Record>>,
    /// Held apart from the sink: the queue's last sender goes with the runtime, and the
    /// receiver then knows every record was taken.
    dropped: Arc<AtomicU64>,
}

impl Gateway {
    /// Binds `config.listen`, starts the runtime and serves until [`stop`](Gateway::stop).
    pub fn start(config: Config, hooks: Arc<dyn Hooks>) -> Result<Gateway, String> {
        if config.upstreams.is_empty() {
            return Err("no upstream".to_owned());
        }
        let bases = config
            .upstreams
            .iter()
            .map(|(name, url)| Base::parse(name, url))
            .collect::<Result<Vec<_>, _>>()?;
        let tls = tls_config(config.upstream_ca.as_deref())?;
        // (Each stream holds two descriptors, its client's and its upstream's.)
        super::fds::reserve(super::fds::MOST);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads.max(1))
            .max_blocking_threads(64)
            .thread_name("rapidsse-gateway")
            .enable_all()
            .build()
            .map_err(|e| format!("the runtime cannot start: {e}"))?;
        let (tx, rx) = mpsc::sync_channel(config.record_queue.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let sink = Arc::new(Sink {
            tx,
            dropped: dropped.clone(),
        });
        let listener = {
            let _entered = runtime.enter();
            bind(config.listen, false)
                .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?
        };
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot listen: {e}"))?;
        let shared = Arc::new(Shared {
            client: upstream_client(tls.clone(), config.connect_timeout, config.max_idle),
            pool: Arc::new(Pool::new(config.max_idle, config.connect_timeout)),
            tls,
            bases,
            hooks,
            sink,
            config,
        });
        let (stop_tx, stop_rx) = watch::channel(None);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        runtime.spawn(accept_loop(listener, shared, stop_rx, done_tx));
        Ok(Gateway {
            addr,
            runtime: Mutex::new(Some(runtime)),
            stop_tx,
            stopped: Mutex::new(Some(done_rx)),
            records: Mutex::new(rx),
            dropped,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Finished exchanges dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The finished exchanges waiting, at most `limit` of them, after waiting up to `timeout`
    /// for the first (empty: none came); None once the gateway stopped and all were taken. One
    /// call takes what piled up meanwhile, so a consumer that comes back now and then is woken
    /// once per batch, not once per exchange.
    pub fn next_records(&self, timeout: Duration, limit: usize) -> Option<Vec<Record>> {
        let rx = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let first = match rx.recv_timeout(timeout) {
            Ok(record) => record,
            Err(RecvTimeoutError::Timeout) => return Some(Vec::new()),
            Err(RecvTimeoutError::Disconnected) => return None,
        };
        let mut records = vec![first];
        while records.len() < limit.max(1) {
            match rx.try_recv() {
                Ok(record) => records.push(record),
                Err(_) => break, // (a disconnect shows on the next call)
            }
        }
        Some(records)
    }

    /// Stops accepting, lets the exchanges in flight finish for up to `grace`, then ends the
    /// rest and the runtime. Blocks until done; a second call does nothing.
    pub fn stop(&self, grace: Duration) {
        let _ = self.stop_tx.send(Some(grace));
        let done = self
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(done) = done {
            let _ = done.recv_timeout(grace + Duration::from_secs(5));
        }
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(runtime) = runtime {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }

    /// Whether [`stop`](Gateway::stop) ran.
    pub fn is_stopped(&self) -> bool {
        self.runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}

/// A listener on `addr` (`SO_REUSEADDR`; `SO_REUSEPORT` too when several listeners share the
/// port, as the synthetic server's workers do), with a backlog for bursts of connections.
pub(super) fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    #[cfg(unix)]
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    #[cfg(not(unix))]
    let _ = reuse_port; // (one listener per port there)
    socket.bind(addr)?;
    socket.listen(4096)
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<Option<Duration>>,
    done: std::sync::mpsc::Sender<()>,
) {
    // Each connection holds a clone of `open`; when the last is dropped, `all_closed` ends.
    let (open, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let closing = Stop::new();
    let grace = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors and the like: try again shortly.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let mut builder = http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(shared.config.header_timeout)
                    .max_buf_size(shared.config.max_header_bytes.max(8192))
                    .auto_date_header(false)
                    .keep_alive(true);
                let (stream, framing) =
                    super::guard::Guarded::new(stream, shared.config.max_header_bytes.max(8192));
                let service = service_fn(move |req| {
                    let shared = shared.clone();
                    let ambiguous = framing.next_is_ambiguous();
                    async move { Ok::<_, Infallible>(handle(shared, req, ambiguous).await) }
                });
                let open = open.clone();
                let mut closing = closing.watch();
                tokio::spawn(async move {
                    let conn = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades();
                    tokio::pin!(conn);
                    // (Polled on every wake of the connection, once per chunk: `Stop` costs an
                    // atomic load there.)
                    tokio::select! {
                        biased;
                        _ = conn.as_mut() => {}
                        _ = &mut closing => {
                            // Finish the exchange in flight, take no other.
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                    drop(open);
                });
            }
            changed = stop.changed() => {
                let grace = if changed.is_ok() { *stop.borrow() } else { Some(Duration::ZERO) };
                if let Some(grace) = grace {
                    break grace;
                }
            }
        }
    };
    drop(listener);
    drop(open);
    closing.stop();
    let _ = tokio::time::timeout(grace, all_closed.recv()).await;
    let _ = done.send(());
}

/// A reply body: the gateway's own (errors, metrics) or upstream's, relayed.
pub(crate) enum Reply {
    Whole(Option<Bytes>),
    Relay(Box<Relay>),
}

/// Why a relayed body ended early (hyper then closes the client's connection: a cut).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for Reply {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Reply::Whole(body) => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
            Reply::Relay(relay) => Pin::new(relay.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Reply::Whole(body) => body.is_none(),
            Reply::Relay(relay) => relay.upstream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Reply::Whole(Some(body)) => SizeHint::with_exact(body.len() as u64),
            Reply::Whole(None) => SizeHint::with_exact(0),
            Reply::Relay(relay) => relay.upstream.size_hint(),
        }
    }
}

fn whole(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Reply> {
    let mut response = Response::new(Reply::Whole(Some(Bytes::from(body))));
    *response.status_mut() = status;
    if let Ok(value) = HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// The request's header names that never go upstream besides the hop-by-hop ones: what the
/// gateway sets itself.
const SET_BY_GATEWAY: [&str; 3] = ["host", "content-length", "accept-encoding"];

/// Also not sent upstream on a WebSocket handshake (the client library makes its own).
pub(crate) const NOT_UPSTREAM_WS: [&str; 4] = [
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
];

const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
];

/// Header names the `Connection` header lists (hop-by-hop too).
fn named_in_connection(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The headers that go upstream, repeated names joined by ", " (as the asyncio engine sends
/// them); `accept-encoding: identity` is added, so the body is text the tap reads.
pub(crate) fn upstream_headers(headers: &HeaderMap, also_not: &[&str]) -> Vec<(String, String)> {
    let named = named_in_connection(headers);
    let mut out: Vec<(String, String)> = Vec::with_capacity(headers.len() + 1);
    for (name, value) in headers {
        let name = name.as_str();
        if HOP_BY_HOP.contains(&name)
            || SET_BY_GATEWAY.contains(&name)
            || also_not.contains(&name)
            || named.iter().any(|n| n == name)
        {
            continue;
        }
        let text: String = value.as_bytes().iter().map(|&b| b as char).collect();
        if let Some(found) = out.iter_mut().find(|(n, _)| n == name) {
            found.1.push_str(", ");
            found.1.push_str(&text);
        } else {
            out.push((name.to_owned(), text));
        }
    }
    out.push(("accept-encoding".to_owned(), "identity".to_owned()));
    out
}

pub(crate) fn header_map(headers: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        let bytes: Vec<u8> = value.chars().map(|c| c as u32 as u8).collect();
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            map.append(name, value);
        }
    }
    map
}

/// The model the request names: in the path for Gemini, else the JSON body's `model` string.
pub(crate) fn requested_model(
    protocol: Option<Protocol>,
    path: &str,
    body: &[u8],
) -> Option<String> {
    match protocol {
        None => None,
        Some(Protocol::Gemini) => {
            let start = path.find("/models/")?;
            let end = path.rfind(':')?;
            let model = path.get(start + 8..end)?;
            (!model.is_empty()).then(|| model.to_owned())
        }
        Some(_) if body.is_empty() => None,
        Some(_) => {
            #[derive(serde::Deserialize)]
            struct Named {
                model: Option<serde_json::Value>,
            }
            match serde_json::from_slice::<Named>(body).ok()?.model? {
                serde_json::Value::String(s) => Some(s),
                _ => None,
            }
        }
    }
}

/// A JSON error body in the shape the protocol's clients read errors in (as
/// `rapidsse.gateway.record.error_body` writes it, with the same names per status).
pub(crate) fn error_body(protocol: Option<Protocol>, message: &str, status: u16) -> Vec<u8> {
    let value = match protocol {
        Some(Protocol::Anthropic) => {
            let kind = match status {
                400 => "invalid_request_error",
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                413 => "request_too_large",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                s if s < 500 => "invalid_request_error",
                _ => "api_error",
            };
            serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Some(Protocol::Gemini) => {
            let name = match status {
                400 | 413 | 431 => "INVALID_ARGUMENT",
                401 => "UNAUTHENTICATED",
                403 => "PERMISSION_DENIED",
                404 => "NOT_FOUND",
                408 | 504 => "DEADLINE_EXCEEDED",
                409 => "ABORTED",
                429 => "RESOURCE_EXHAUSTED",
                499 => "CANCELLED",
                500 => "INTERNAL",
                501 => "UNIMPLEMENTED",
                502 | 503 => "UNAVAILABLE",
                s if s < 500 => "FAILED_PRECONDITION",
                _ => "INTERNAL",
            };
            serde_json::json!({"error": {"code": status, "message": message, "status": name}})
        }
        _ => {
            let kind = if status == 502 {
                "bad_gateway"
            } else if status < 500 {
                "invalid_request_error"
            } else {
                "server_error"
            };
            let code = match status {
                400 => Some("bad_request"),
                401 => Some("unauthorized"),
                403 => Some("forbidden"),
                404 => Some("not_found"),
                408 => Some("timeout"),
                413 => Some("request_too_large"),
                429 => Some("rate_limited"),
                431 => Some("headers_too_large"),
                500 => Some("internal_error"),
                502 => Some("upstream_unreachable"),
                503 => Some("unavailable"),
                504 => Some("upstream_timeout"),
                _ => None,
            };
            serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

fn seconds(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

pub(crate) fn new_record(protocol: Option<Protocol>, method: &str, path: &str) -> Record {
    Record {
        protocol,
        method: method.to_owned(),
        path: path.to_owned(),
        model: None,
        caller: None,
        status: 0,
        outcome: "complete",
        ttfb: None,
        ttft: None,
        duration: 0.0,
        chunks: 0,
        bytes: 0,
        error: None,
        tap: None,
        json_reply: None,
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>, ambiguous: bool) -> Response<Reply> {
    let started = Instant::now();
    if ambiguous {
        let path = req.uri().path().to_owned();
        let record = new_record(Protocol::for_path(&path), req.method().as_str(), &path);
        return refuse(
            &shared,
            record,
            started,
            StatusCode::BAD_REQUEST,
            "the request's body framing is ambiguous (Content-Length with Transfer-Encoding, or two Content-Lengths)",
        );
    }
    if super::realtime::is_upgrade(&req) {
        // (Boxed: a session's future is several times an HTTP exchange's, and held inline it
        // would size every connection's service future, idle streams' included.)
        return Box::pin(super::realtime::handle(shared, req, started)).await;
    }
    let path = req.uri().path().to_owned();
    if shared.config.metrics_path && path == "/metrics" && req.method() == Method::GET {
        let hooks = shared.hooks.clone();
        return match tokio::task::spawn_blocking(move || hooks.metrics()).await {
            Ok((body, content_type)) => whole(StatusCode::OK, &content_type, body),
            Err(_) => whole(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                b"metrics failed".to_vec(),
            ),
        };
    }
    let protocol = Protocol::for_path(&path);
    let mut record = new_record(protocol, req.method().as_str(), &path);
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |pq| pq.as_str().to_owned());
    let query = req.uri().query().unwrap_or("").to_owned();
    let method = req.method().clone();
    let (parts, body) = req.into_parts();

    // The header block within its cap (hyper's own read buffer refuses at 8 KiB and more).
    let head_bytes = method.as_str().len()
        + target.len()
        + 12
        + parts
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if head_bytes > shared.config.max_header_bytes {
        return refuse(
            &shared,
            record,
            started,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request's header block is too large",
        );
    }
    // The body, whole (LLM requests are JSON), within its cap.
    let limit = shared.config.max_body_bytes;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return refuse(
            &shared,
            record,
            started,
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is too large",
        );
    }
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            if err
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return refuse(
                    &shared,
                    record,
                    started,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the request body is too large",
                );
            }
            record.outcome = "client_gone";
            record.error = Some(ErrorText::Text(
                "the client left before its request was read".to_owned(),
            ));
            finish(&shared, record, started);
            return whole(StatusCode::BAD_REQUEST, "text/plain", Vec::new());
        }
    };
    record.model = requested_model(protocol, &path, &body);
    let mut headers = upstream_headers(&parts.headers, &[]);
    let mut base = shared.base(None);
    if shared.hooks.has_on_request() {
        let head = RequestHead {
            method: method.as_str().to_owned(),
            path: path.clone(),
            query,
            protocol,
            model: record.model.clone(),
            headers: headers.clone(),
            body: body.clone(),
        };
        let hooks = shared.hooks.clone();
        let decision = tokio::task::spawn_blocking(move || hooks.on_request(head))
            .await
            .unwrap_or_else(|_| Decision {
                reject: Some((
                    500,
                    error_body(protocol, "on_request failed", 500),
                    "on_request failed".to_owned(),
                )),
                ..Decision::default()
            });
        record.caller = decision.caller;
        if let Some((status, reply, error)) = decision.reject {
            record.outcome = "rejected";
            record.status = status;
            record.error = Some(ErrorText::Text(error));
            finish(&shared, record, started);
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
            return whole(status, "application/json", reply);
        }
        if let Some(h) = decision.headers {
            headers = h;
        }
        if decision.upstream.is_some() {
            base = shared.base(decision.upstream.as_deref());
            if base.is_none() {
                let message = format!(
                    "no upstream named {:?}",
                    decision.upstream.unwrap_or_default()
                );
                record.outcome = "rejected";
                record.status = 500;
                record.error = Some(ErrorText::Text(message.clone()));
                finish(&shared, record, started);
                return whole(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "application/json",
                    error_body(protocol, &message, 500),
                );
            }
        }
    }
    let Some(base) = base else {
        return refuse(
            &shared,
            record,
            started,
            StatusCode::BAD_GATEWAY,
            "no upstream",
        );
    };
    let uri = match base.uri(&target, false) {
        Ok(uri) => uri,
        Err(message) => return refuse(&shared, record, started, StatusCode::BAD_REQUEST, &message),
    };
    let upstream_headers = header_map(&headers);
    // A plain-HTTP upstream is read on this task (see `upstream`); https ones (TLS, HTTP/2) and
    // a HEAD (no body whatever its headers say) go through hyper's client.
    let reply = if !base.secure && method != Method::HEAD {
        let target = uri.path_and_query().map_or("/", |pq| pq.as_str());
        let request = upstream::request_bytes(
            &method,
            target,
            &base.origin_h1.authority,
            &upstream_headers,
            &body,
        );
        // What the request was made of is not kept while upstream is waited for (an idle stream
        // holds its request's bytes once).
        drop((parts, headers, upstream_headers, body));
        let sent = upstream::send(&shared.pool, &base.origin_h1, &request);
        within_read_timeout(&shared, sent)
            .await
            .map(|r| (r.status, r.headers, Source::Direct(Box::new(r.body))))
    } else {
        let request = || {
            let mut upstream_req = Request::new(Full::new(body.clone()));
            *upstream_req.method_mut() = method.clone();
            *upstream_req.uri_mut() = uri.clone();
            *upstream_req.headers_mut() = upstream_headers.clone();
            upstream_req
        };
        // The keep-alive race: upstream closed a pooled connection just as the request was
        // written on it, and it never answered. hyper's pool resends only what it had not
        // written yet; this sends such a request once more, on a new connection (as the
        // asyncio engine does). A refused connect is not sent again.
        let sent = async {
            match shared.client.request(request()).await {
                Err(e) if closed_unanswered(&e) => shared.client.request(request()).await,
                other => other,
            }
            .map_err(|e| describe_client_error(&e))
        };
        within_read_timeout(&shared, sent).await.map(|r| {
            let (parts, body) = r.into_parts();
            (parts.status, parts.headers, Source::Hyper(body))
        })
    };
    let (status, mut reply_headers, upstream_body) = match reply {
        Ok(reply) => reply,
        Err(message) => {
            record.outcome = "upstream_error";
            record.status = 502;
            record.error = Some(ErrorText::Text(format!("upstream unreachable: {message}")));
            finish(&shared, record, started);
            let kind = message.split(':').next().unwrap_or("error").to_owned();
            let reply = error_body(
                protocol,
                &format!("the upstream server is unreachable ({kind})"),
                502,
            );
            return whole(StatusCode::BAD_GATEWAY, "application/json", reply);
        }
    };
    record.ttfb = Some(seconds(started));
    record.status = status.as_u16();
    let media = media_type(&reply_headers);
    let tapping = shared.config.tap && protocol.is_some();
    let mut tap = None;
    let mut keep = None;
    if tapping && media == "text/event-stream" {
        tap = protocol.map(StreamTap::new);
    } else if tapping && media == "application/json" && record.status < 300 {
        keep = Some(Vec::new());
    }
    strip_hop_by_hop(&mut reply_headers);
    let relay = Relay {
        upstream: upstream_body,
        exchange: Some(Exchange {
            record,
            tap,
            kept: keep,
            kept_bytes: 0,
            started,
            shared: shared.clone(),
        }),
        read_timeout: shared.config.read_timeout,
        sleep: None,
        sleep_waker: None,
        waiting_since: None,
    };
    let mut response = Response::new(Reply::Relay(Box::new(relay)));
    *response.status_mut() = status;
    *response.headers_mut() = reply_headers;
    response
}

/// Upstream's reply (its head), or why there is none: no head within the read timeout is one.
async fn within_read_timeout<T>(
    shared: &Shared,
    sent: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match shared.config.read_timeout {
        Some(limit) => tokio::time::timeout(limit, sent).await.unwrap_or_else(|_| {
            Err(format!(
                "TimeoutError: upstream sent no reply for {} s",
                fmt_secs(limit)
            ))
        }),
        None => sent.await,
    }
}

fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

/// Whether the request failed because upstream closed the connection before any reply (not a
/// connect error: nothing was refused).
fn closed_unanswered(err: &hyper_util::client::legacy::Error) -> bool {
    use std::error::Error as _;
    if err.is_connect() {
        return false;
    }
    let mut source = err.source();
    while let Some(inner) = source {
        if let Some(e) = inner.downcast_ref::<hyper::Error>() {
            return e.is_incomplete_message();
        }
        source = inner.source();
    }
    false
}

/// The client error's kind and message, as `Kind: message`.
fn describe_client_error(err: &hyper_util::client::legacy::Error) -> String {
    use std::error::Error as _;
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    let kind = if err.is_connect() {
        "ConnectError"
    } else {
        "UpstreamError"
    };
    format!("{kind}: {message}")
}

fn refuse(
    shared: &Shared,
    mut record: Record,
    started: Instant,
    status: StatusCode,
    message: &str,
) -> Response<Reply> {
    record.outcome = "rejected";
    record.status = status.as_u16();
    record.error = Some(ErrorText::Text(message.to_owned()));
    let protocol = record.protocol;
    finish(shared, record, started);
    let mut response = whole(
        status,
        "application/json",
        error_body(protocol, message, status.as_u16()),
    );
    // A refused request's body may be unread: the connection ends with this reply.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = named_in_connection(headers);
    for name in HOP_BY_HOP.iter().copied().map(str::to_owned).chain(named) {
        headers.remove(name.as_str());
    }
}

pub(crate) fn finish(shared: &Shared, mut record: Record, started: Instant) {
    record.duration = seconds(started);
    shared.sink.put(record);
}

/// The state of one relayed reply, until it ends.
struct Exchange {
    record: Record,
    tap: Option<StreamTap>,
    kept: Option<Vec<Bytes>>,
    kept_bytes: usize,
    started: Instant,
    shared: Arc<Shared>,
}

/// A stream the tap could not read is `bad_stream`, with the tap's first error, unless the
/// record already has an error (this one, noted at an earlier chunk, or another).
fn note_tap_error(record: &mut Record, tap: &StreamTap) {
    if record.error.is_some() {
        return;
    }
    if let Some(err) = &tap.error {
        record.outcome = "bad_stream";
        record.error = Some(match err {
            super::tap::TapError::Refused(r) => ErrorText::Tap(r.clone()),
            super::tap::TapError::Framing(text) => ErrorText::Text(text.clone()),
        });
    }
}

impl Exchange {
    fn end(mut self, outcome: Option<(&'static str, String)>) {
        if let Some(tap) = self.tap.as_mut() {
            tap.finish();
            note_tap_error(&mut self.record, tap);
        }
        if let Some((outcome, error)) = outcome {
            self.record.outcome = outcome;
            self.record.error = Some(ErrorText::Text(error));
        } else if self.record.status >= 400 && self.record.outcome == "complete" {
            self.record.outcome = "upstream_error";
            self.record.error = Some(ErrorText::Text(format!(
                "upstream answered HTTP {}",
                self.record.status
            )));
        }
        if let Some(kept) = self.kept.take() {
            if self.record.outcome == "complete" {
                let mut json = Vec::with_capacity(self.kept_bytes);
                for part in kept {
                    json.extend_from_slice(&part);
                }
                self.record.json_reply = Some(json);
            }
        }
        self.record.tap = self.tap.take().map(Box::new);
        finish(&self.shared, self.record, self.started);
    }
}

/// Where a relayed body comes from: hyper's client (https upstreams), or a plain-HTTP
/// connection read on the relay's task.
enum Source {
    Hyper(Incoming),
    Direct(Box<upstream::Body>),
}

impl Source {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self {
            Source::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Source::Direct(body) => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Source::Hyper(body) => body.is_end_stream(),
            Source::Direct(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Source::Hyper(body) => body.size_hint(),
            Source::Direct(body) => body.size_hint(),
        }
    }
}

/// Upstream's body relayed to the client: each frame handed on as it came (hyper writes it as
/// soon as the client's connection takes it, and polls for the next only then: backpressure),
/// counted and fed to the tap on the way.
pub(crate) struct Relay {
    upstream: Source,
    exchange: Option<Exchange>,
    read_timeout: Option<Duration>,
    /// The read timeout's timer. It is not moved at every chunk (that re-files it in tokio's
    /// timer wheel each time): when it fires, the stall is checked against `waiting_since` and
    /// the timer set again if upstream did send meanwhile.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The waker `sleep` was last polled with.
    sleep_waker: Option<std::task::Waker>,
    /// Since when the polls of upstream found nothing (None: the last one had a frame).
    waiting_since: Option<tokio::time::Instant>,
}

impl Body for Relay {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match this.upstream.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.waiting_since = None;
                if let (Some(data), Some(exchange)) = (frame.data_ref(), this.exchange.as_mut()) {
                    let record = &mut exchange.record;
                    record.chunks += 1;
                    record.bytes += data.len() as u64;
                    if let Some(tap) = exchange.tap.as_mut() {
                        if tap.forwarded(data) {
                            record.ttft = Some(seconds(exchange.started));
                        }
                        note_tap_error(record, tap);
                    }
                    if let Some(kept) = exchange.kept.as_mut() {
                        exchange.kept_bytes += data.len();
                        if exchange.kept_bytes > exchange.shared.config.max_json_reply {
                            exchange.kept = None;
                        } else {
                            kept.push(data.clone());
                        }
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => {
                if let Some(exchange) = this.exchange.take() {
                    exchange.end(Some((
                        "upstream_cut",
                        format!("upstream cut the stream: {err}"),
                    )));
                }
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(None) => {
                if let Some(exchange) = this.exchange.take() {
                    exchange.end(None);
                }
                Poll::Ready(None)
            }
            Poll::Pending => {
                let Some(limit) = this.read_timeout else {
                    return Poll::Pending;
                };
                let since = *this
                    .waiting_since
                    .get_or_insert_with(tokio::time::Instant::now);
                let due = since + limit;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                // Polled (its waker stored again) only when this task's waker is not the one it
                // holds; otherwise it is asked whether it fired.
                let mut fired = if matches!(&this.sleep_waker, Some(w) if w.will_wake(cx.waker())) {
                    sleep.is_elapsed()
                } else {
                    this.sleep_waker = Some(cx.waker().clone());
                    sleep.as_mut().poll(cx).is_ready()
                };
                if fired && due > tokio::time::Instant::now() {
                    // Set while upstream was still sending: the stall began later.
                    sleep.as_mut().reset(due);
                    fired = sleep.as_mut().poll(cx).is_ready();
                }
                if fired {
                    if let Some(exchange) = this.exchange.take() {
                        exchange.end(Some((
                            "upstream_cut",
                            format!("upstream sent nothing for {} s", fmt_secs(limit)),
                        )));
                    }
                    // The client's connection is closed without the end of the body: a cut.
                    return Poll::Ready(Some(Err(format!(
                        "upstream sent nothing for {} s",
                        fmt_secs(limit)
                    )
                    .into())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.upstream.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.upstream.size_hint()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(exchange) = self.exchange.take() {
            if self.upstream.is_end_stream() {
                // A body of known length: hyper wrote all of it and does not ask for the end.
                exchange.end(None);
            } else {
                exchange.end(Some(("client_gone", "the client disconnected".to_owned())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct NoHooks;

    impl Hooks for NoHooks {
        fn has_on_request(&self) -> bool {
            false
        }
        fn on_request(&self, _head: RequestHead) -> Decision {
            Decision::default()
        }
        fn metrics(&self) -> (Vec<u8>, String) {
            (Vec::new(), "text/plain".to_owned())
        }
    }

    const STREAM: &[u8] = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

    /// An upstream that answers one request with `STREAM` as a chunked event stream, cut in two
    /// writes, then closes.
    async fn upstream() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                head.extend_from_slice(&buf[..n]);
            }
            let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
            assert!(
                head.starts_with("post /v1/chat/completions?x=1 http/1.1"),
                "{head}"
            );
            assert!(head.contains("accept-encoding: identity"), "{head}");
            assert!(!head.contains("evil"), "{head}");
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            for part in [&STREAM[..100], &STREAM[100..]] {
                socket
                    .write_all(format!("{:x}\r\n", part.len()).as_bytes())
                    .await
                    .unwrap();
                socket.write_all(part).await.unwrap();
                socket.write_all(b"\r\n").await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            socket.write_all(b"0\r\n\r\n").await.unwrap();
        });
        addr
    }

    fn config(upstream: SocketAddr) -> Config {
        Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstreams: vec![("default".to_owned(), format!("http://{upstream}"))],
            tap: true,
            read_timeout: Some(Duration::from_secs(5)),
            connect_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(5),
            max_header_bytes: 65536,
            max_body_bytes: 1 << 20,
            max_json_reply: 1 << 20,
            threads: 1,
            upstream_ca: None,
            metrics_path: false,
            record_queue: 16,
            max_idle: 16,
        }
    }

    #[test]
    fn a_stream_is_forwarded_byte_for_byte_and_tapped() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let upstream = runtime.block_on(upstream());
        let gateway = Gateway::start(config(upstream), Arc::new(NoHooks)).unwrap();
        let addr = gateway.local_addr();
        let received = runtime.block_on(async move {
            let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
            let body = br#"{"model":"m","stream":true}"#;
            socket
                .write_all(
                    format!(
                        "POST http://evil.example/v1/chat/completions?x=1 HTTP/1.1\r\nhost: evil.example\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await
                .unwrap();
            socket.write_all(body).await.unwrap();
            let mut out = Vec::new();
            socket.read_to_end(&mut out).await.unwrap();
            out
        });
        let text = String::from_utf8_lossy(&received);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        // The body, de-chunked: the stream as upstream sent it.
        let body_start = text.find("\r\n\r\n").unwrap() + 4;
        let mut rest = &received[body_start..];
        let mut body = Vec::new();
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
            rest = &rest[line_end + 2..];
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        assert_eq!(body, STREAM);
        let mut records = gateway.next_records(Duration::from_secs(5), 16).unwrap();
        assert_eq!(records.len(), 1, "one exchange, one record");
        let record = records.pop().unwrap();
        assert_eq!(record.outcome, "complete");
        assert_eq!(record.protocol, Some(Protocol::Chat));
        assert_eq!(record.model.as_deref(), Some("m"));
        assert_eq!(record.status, 200);
        assert_eq!(record.bytes, STREAM.len() as u64);
        assert!(record.ttft.is_some() && record.ttfb.is_some());
        let mut tap = record.tap.expect("tapped");
        assert_eq!(tap.acc.events(), 2);
        let snapshot = String::from_utf8(tap.acc.snapshot_json().unwrap()).unwrap();
        assert!(snapshot.contains("\"content\":\"Hello\""), "{snapshot}");
        gateway.stop(Duration::from_secs(1));
        assert!(gateway.next_records(Duration::from_secs(1), 16).is_none());
    }

    /// A gateway whose upstream is a port nothing listens on (bound, then closed).
    fn unreachable_gateway() -> Gateway {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        Gateway::start(config(closed), Arc::new(NoHooks)).unwrap()
    }

    /// `POST /v1/messages` (`?query` unless empty) with `{}` on a connection of its own: the
    /// reply, whole.
    fn post_messages(runtime: &tokio::runtime::Runtime, addr: SocketAddr, query: &str) -> Vec<u8> {
        let target = match query {
            "" => "/v1/messages".to_owned(),
            query => format!("/v1/messages?{query}"),
        };
        let request = format!("POST {target} HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}");
        runtime.block_on(async move {
            let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
            socket.write_all(request.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            socket.read_to_end(&mut out).await.unwrap();
            out
        })
    }

    #[test]
    fn an_unreachable_upstream_is_a_502_in_the_protocols_shape() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let gateway = unreachable_gateway();
        let received = post_messages(&runtime, gateway.local_addr(), "");
        let text = String::from_utf8_lossy(&received);
        assert!(text.starts_with("HTTP/1.1 502"), "{text}");
        assert!(
            text.contains(r#""type":"error","error":{"type":"api_error""#),
            "{text}"
        );
        let mut records = gateway.next_records(Duration::from_secs(5), 16).unwrap();
        assert_eq!(records.len(), 1, "one exchange, one record");
        let record = records.pop().unwrap();
        assert_eq!(record.outcome, "upstream_error");
        assert_eq!(record.status, 502);
    }

    #[test]
    fn finished_exchanges_are_taken_in_batches_of_at_most_the_limit() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let gateway = unreachable_gateway();
        for n in 0..3 {
            let received = post_messages(&runtime, gateway.local_addr(), &format!("n={n}"));
            assert!(received.starts_with(b"HTTP/1.1 502"));
        }
        // The three are queued before their replies end: two, then the third, then none.
        let first = gateway.next_records(Duration::from_secs(5), 2).unwrap();
        assert_eq!(first.len(), 2);
        let second = gateway.next_records(Duration::from_secs(5), 16).unwrap();
        assert_eq!(second.len(), 1);
        assert!(first
            .iter()
            .chain(&second)
            .all(|r| r.outcome == "upstream_error" && r.path == "/v1/messages"));
        let none = gateway.next_records(Duration::from_millis(50), 16).unwrap();
        assert!(none.is_empty());
        gateway.stop(Duration::from_secs(1));
        assert!(gateway.next_records(Duration::from_secs(1), 16).is_none());
    }
}
