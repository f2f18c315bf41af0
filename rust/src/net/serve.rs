//! The native server (`rapidsse serve --engine native`): the routes of the Python ones
//! (`create_synthetic_app`, and `create_app` for recordings) on hyper's HTTP/1.1 server, the
//! streams of [`synthetic`](super::synthetic), or the recordings of [`replay`](super::replay),
//! paced on tokio.
//!
//! `workers` threads each run a current-thread runtime with a listener of its own on the one
//! port (`SO_REUSEPORT` when there are several, so that the kernel spreads the connections) and
//! pace their own streams, as the Python server's worker processes do; `/health` reports the
//! lateness and sent gaps of all of them, tallied into one [`Tally`] pair.
//!
//! Token `i` of a stream is due at `ttft + i / rate` after its request arrived, an absolute
//! [`Instant`]. Tokio's timers fire on whole milliseconds (up to one late, the whole error budget
//! of an inter-token latency), so each runtime has a [`Clock`] that sleeps on tokio's timer
//! until [`Clock::EARLY`] ahead of its earliest deadline, then gives the runtime one turn at a time
//! (it polls its sockets every 61 turns) until a deadline has come and wakes that stream: one task
//! busy near a deadline however many streams wait, and tokens leave within microseconds of it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};

use super::replay::{self, Library, Replayed};
use super::synthetic::{Api, Plan, Spec, Writer};

/// Counts of durations for `/health` (Python's `Tally`): 1 µs bins up to 32.768 ms, then 1 ms
/// bins up to about 32.8 s (the last also takes anything longer), and the exact maximum.
pub struct Tally {
    counts: Box<[AtomicU64]>,
    peak_nanos: AtomicU64,
}

impl Tally {
    const FINE: usize = 32768;
    const SIZE: usize = 2 * Self::FINE;

    pub fn new() -> Tally {
        Tally {
            counts: (0..Self::SIZE).map(|_| AtomicU64::new(0)).collect(),
            peak_nanos: AtomicU64::new(0),
        }
    }

    pub fn add(&self, d: Duration) {
        let micros = usize::try_from(d.as_micros()).unwrap_or(usize::MAX);
        let bin = if micros < Self::FINE {
            micros
        } else {
            (Self::FINE + (micros - Self::FINE) / 1000).min(Self::SIZE - 1)
        };
        self.counts[bin].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.peak_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    pub fn reset(&self) {
        for count in self.counts.iter() {
            count.store(0, Ordering::Relaxed);
        }
        self.peak_nanos.store(0, Ordering::Relaxed);
    }

    /// `{"count", "median_ms", "p99_ms", "max_ms"}` as `Tally.stats` makes it: a percentile is
    /// its bin's lower edge (within 1 µs below 32 ms, 1 ms above); null when empty.
    pub fn stats(&self) -> Value {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return json!({"count": 0, "median_ms": null, "p99_ms": null, "max_ms": null});
        }
        let at = |q: f64| -> f64 {
            // The sample of that rank, counting from 0: the first bin whose running count
            // passes it.
            let rank = ((q * total as f64) as u64).min(total - 1);
            let mut cumulative = 0;
            let index = counts
                .iter()
                .position(|&c| {
                    cumulative += c;
                    cumulative > rank
                })
                .unwrap_or(Self::SIZE - 1);
            if index < Self::FINE {
                index as f64 / 1000.0
            } else {
                Self::FINE as f64 / 1000.0 + (index - Self::FINE) as f64
            }
        };
        let max_ms = self.peak_nanos.load(Ordering::Relaxed) as f64 / 1e6;
        json!({"count": total, "median_ms": at(0.5), "p99_ms": at(0.99), "max_ms": max_ms})
    }
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

/// A waiter of a [`Clock`]: its deadline, an order among equal deadlines, its task.
struct Waiter {
    at: Instant,
    order: u64,
    waker: Waker,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl Eq for Waiter {}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// Wakes tasks at absolute deadlines more precisely than tokio's millisecond timer (see the
/// module's documentation); one per runtime, driven by [`Clock::drive`].
pub struct Clock {
    waiters: Mutex<(BinaryHeap<Reverse<Waiter>>, u64)>,
    /// Told when a waiter earlier than all others arrives.
    earlier: Notify,
}

impl Clock {
    /// How long before a deadline the clock stops sleeping on tokio's timer and starts yielding:
    /// more than the timer's lateness (its millisecond, rounded up, and the poll's).
    pub const EARLY: Duration = Duration::from_micros(2500);

    pub fn new() -> Clock {
        Clock {
            waiters: Mutex::new((BinaryHeap::new(), 0)),
            earlier: Notify::new(),
        }
    }

    /// Wakes `waker` at `at`.
    fn wake_at(&self, at: Instant, waker: Waker) {
        let mut guard = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        let (heap, order) = &mut *guard;
        *order += 1;
        let first = heap.peek().is_none_or(|Reverse(w)| at < w.at);
        heap.push(Reverse(Waiter {
            at,
            order: *order,
            waker,
        }));
        drop(guard);
        if first {
            self.earlier.notify_one();
        }
    }

    /// Ready once `at` has come; until then has the clock wake the task. `waiting` is the
    /// caller's memory of the waker last handed over, so that a task polled again before its
    /// deadline (by its connection) is not queued twice.
    pub fn poll_until(
        &self,
        at: Instant,
        waiting: &mut Option<Waker>,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        if Instant::now() >= at {
            *waiting = None;
            return Poll::Ready(());
        }
        if !waiting.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *waiting = Some(cx.waker().clone());
            self.wake_at(at, cx.waker().clone());
        }
        Poll::Pending
    }

    /// Wakes the waiters whose deadline has come; the earliest deadline left.
    fn release(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut guard = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        let heap = &mut guard.0;
        while heap.peek().is_some_and(|Reverse(w)| w.at <= now) {
            if let Some(Reverse(waiter)) = heap.pop() {
                waiter.waker.wake();
            }
        }
        heap.peek().map(|Reverse(w)| w.at)
    }

    /// The clock's task: runs as long as its runtime.
    pub async fn drive(self: Arc<Self>) {
        loop {
            match self.release() {
                None => self.earlier.notified().await,
                Some(at) if at > Instant::now() + Self::EARLY => {
                    tokio::select! {
                        _ = tokio::time::sleep_until((at - Self::EARLY).into()) => {}
                        _ = self.earlier.notified() => {}
                    }
                }
                Some(_) => Turn(false).await,
            }
        }
    }
}

/// One turn of the runtime for the other tasks, then ready. Unlike `tokio::task::yield_now`, which
/// holds the task back until the runtime has polled its I/O driver (an `epoll_wait` and the timer
/// wheel for every turn of a clock that waits on a near deadline, a microsecond or two each, paid
/// per token when the server is busy), it wakes the task at once: the runtime still polls the
/// driver every `event_interval` (61) tasks, so sockets are looked at every few microseconds while
/// the clock spins.
struct Turn(bool);

impl std::future::Future for Turn {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// What a server sends.
#[derive(Clone)]
pub enum Streams {
    /// Synthetic streams (`serve --synthetic`).
    Synthetic(Spec),
    /// Recordings, replayed (`serve FILE...`).
    Replay(Arc<Library>),
}

/// How the server is set up.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub streams: Streams,
    /// Threads, each with its own runtime, listener and clock (at least 1).
    pub workers: usize,
}

/// The routes with an id counter of their own, as the Python server's route objects have.
const ROUTES: usize = 6;

/// What every worker shares.
struct Shared {
    source: Streams,
    workers: usize,
    lateness: Tally,
    gaps: Tally,
    streams: [AtomicU64; ROUTES],
}

/// A running synthetic server.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Server {
    /// Binds `config.listen` and starts the workers; serves until [`stop`](Server::stop).
    pub fn start(config: Config) -> Result<Server, String> {
        let workers = config.workers.max(1);
        super::fds::reserve(super::fds::MOST);
        let shared = Arc::new(Shared {
            source: config.streams,
            workers,
            lateness: Tally::new(),
            gaps: Tally::new(),
            streams: Default::default(),
        });
        let (stop, stopped) = watch::channel(false);
        let mut server = Server {
            addr: config.listen,
            shared,
            stop,
            threads: Mutex::new(Vec::with_capacity(workers)),
        };
        for number in 0..workers {
            // The first binds the address asked for (port 0: a free one), the others its port.
            let thread = server.spawn_worker(number, stopped.clone())?;
            server
                .threads
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .push(thread);
        }
        Ok(server)
    }

    /// Binds `self.addr` (setting it to the address bound) and starts worker `number` there.
    fn spawn_worker(
        &mut self,
        number: usize,
        stopped: watch::Receiver<bool>,
    ) -> Result<JoinHandle<()>, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("the runtime cannot start: {e}"))?;
        let addr = self.addr;
        let listener = {
            let _entered = runtime.enter();
            super::gateway::bind(addr, self.shared.workers > 1)
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?
        };
        self.addr = listener
            .local_addr()
            .map_err(|e| format!("cannot listen: {e}"))?;
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name(format!("rapidsse-serve{number}"))
            .spawn(move || runtime.block_on(worker(listener, shared, stopped)))
            .map_err(|e| format!("cannot start a worker thread: {e}"))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The body of `/health` (see [`health`]), `reset` then starting the tallies anew.
    pub fn health(&self, reset: bool) -> Value {
        health(&self.shared, reset)
    }

    /// Stops the workers (the streams in flight are cut) and waits for them; a second call
    /// does nothing.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One worker: accepts and serves until told to stop; its runtime then ends (with it the
/// connections still open).
async fn worker(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let clock = Arc::new(Clock::new());
    tokio::spawn(clock.clone().drive());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors and the like: try again shortly.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let clock = clock.clone();
                let service = service_fn(move |req| {
                    let (shared, clock) = (shared.clone(), clock.clone());
                    async move { Ok::<_, Infallible>(handle(shared, clock, req).await) }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
}

/// `{"status": "ok", "synthetic": {...}, "lateness": {...}, "itl": {...}}`, plus `workers` and
/// the `pid` when there are several, as the Python server's `/health`; a replay server's is
/// [`Library::health`].
fn health(shared: &Shared, reset: bool) -> Value {
    let spec = match &shared.source {
        Streams::Synthetic(spec) => spec,
        Streams::Replay(library) => return library.health(),
    };
    let mut body = json!({
        "status": "ok",
        "synthetic": {"tokens": spec.tokens, "rate": spec.rate, "ttft": spec.ttft},
        "lateness": shared.lateness.stats(),
        "itl": shared.gaps.stats(),
    });
    if shared.workers > 1 {
        body["workers"] = json!(shared.workers);
        body["pid"] = json!(std::process::id());
    }
    if reset {
        shared.lateness.reset();
        shared.gaps.reset();
    }
    body
}

/// A reply body: a whole one, a synthetic stream or a replayed one.
enum Reply {
    Whole(Option<Bytes>),
    Stream(Box<Paced>),
    Replay(Box<Replayed>),
}

impl Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Reply::Whole(body) => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
            Reply::Stream(paced) => paced.poll_next(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
            Reply::Replay(replayed) => replayed
                .poll_next(cx)
                .map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Reply::Whole(body) => body.is_none(),
            Reply::Stream(paced) => {
                paced.opening.is_none() && paced.next == paced.writer.plan().tokens
            }
            Reply::Replay(replayed) => replayed.is_end(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Reply::Whole(Some(body)) => SizeHint::with_exact(body.len() as u64),
            Reply::Whole(None) => SizeHint::with_exact(0),
            Reply::Stream(_) | Reply::Replay(_) => SizeHint::default(),
        }
    }
}

/// A stream on its schedule: each token its own chunk, at its deadline.
struct Paced {
    writer: Writer,
    opening: Option<Bytes>,
    next: usize,
    start: Instant,
    spec: Spec,
    clock: Arc<Clock>,
    /// The task the clock wakes for the pending token (so as not to ask twice).
    waiting: Option<Waker>,
    sent: Option<Instant>,
    shared: Arc<Shared>,
}

impl Paced {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(opening) = self.opening.take() {
            return Poll::Ready(Some(opening));
        }
        if self.next == self.writer.plan().tokens {
            return Poll::Ready(None);
        }
        let due = self.start + Duration::from_secs_f64(self.spec.due(self.next));
        if self
            .clock
            .poll_until(due, &mut self.waiting, cx)
            .is_pending()
        {
            return Poll::Pending;
        }
        let now = Instant::now();
        self.shared.lateness.add(now - due);
        if let Some(sent) = self.sent {
            self.shared.gaps.add(now - sent);
        }
        self.sent = Some(now);
        let bytes = self.writer.token(self.next);
        self.next += 1;
        Poll::Ready(Some(bytes))
    }
}

/// Python's `urllib.parse.unquote` (what uvicorn does to the path before Starlette routes it):
/// `%XX` escapes decoded, the result read as UTF-8 with U+FFFD for what is not.
fn unquote(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The API of a streaming route, its id counter and Gemini's model (from the path).
fn route(path: &str) -> Option<(Api, usize, Option<&str>)> {
    Some(match path {
        "/v1/responses" => (Api::Responses, 0, None),
        "/v1/chat/completions" => (Api::Chat, 1, None),
        "/v1/completions" => (Api::Completions, 2, None),
        "/v1/messages" => (Api::Anthropic, 3, None),
        _ => {
            let (rest, counter) = if let Some(rest) = path.strip_prefix("/v1beta/models/") {
                (rest, 4)
            } else {
                (path.strip_prefix("/v1/models/")?, 5)
            };
            let model = rest.strip_suffix(":streamGenerateContent")?;
            if model.is_empty() || model.contains('/') {
                return None;
            }
            (Api::Gemini, counter, Some(model))
        }
    })
}

fn whole(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Reply> {
    let mut response = Response::new(Reply::Whole(Some(Bytes::from(body))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An error in the OpenAI shape the Python server answers with.
fn error(status: StatusCode, message: &str, code: &str) -> Response<Reply> {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": code}});
    whole(status, "application/json", body.to_string().into_bytes())
}

async fn handle(shared: Arc<Shared>, clock: Arc<Clock>, req: Request<Incoming>) -> Response<Reply> {
    let start = Instant::now();
    let path = unquote(req.uri().path());
    if path == "/health" {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return not_allowed("GET, HEAD");
        }
        let reset = req.uri().query().is_some_and(|query| {
            query
                .split('&')
                .any(|pair| unquote(pair.split('=').next().unwrap_or("")) == "reset")
        });
        let body = health(&shared, reset).to_string().into_bytes();
        return whole(StatusCode::OK, "application/json", body);
    }
    if let Streams::Replay(library) = &shared.source {
        if path == "/v1/realtime" && replay::is_upgrade(&req) {
            return replay::realtime(library.clone(), clock, req, start, |status| {
                let mut response = Response::new(Reply::Whole(None));
                *response.status_mut() = status;
                response
            });
        }
    }
    let Some((api, counter, model)) = route(&path) else {
        return whole(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            b"Not Found".to_vec(),
        );
    };
    if req.method() != Method::POST {
        return not_allowed("POST");
    }
    let raw = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return whole(
                StatusCode::BAD_REQUEST,
                "text/plain; charset=utf-8",
                Vec::new(),
            )
        }
    };
    // An empty body (Python's bytes.strip() also takes \v and \f) is an empty object.
    let body = if raw.iter().all(|b| b" \t\n\r\x0b\x0c".contains(b)) {
        Value::Object(Default::default())
    } else {
        match serde_json::from_slice::<Value>(&raw) {
            Ok(body) => body,
            Err(e) => {
                let message = format!("the request body is not valid JSON: {e}");
                return error(StatusCode::BAD_REQUEST, &message, "invalid_json");
            }
        }
    };
    let Value::Object(body) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "the request body must be a JSON object",
            "invalid_json",
        );
    };
    let spec = match &shared.source {
        Streams::Synthetic(spec) => *spec,
        Streams::Replay(library) => return replayed(library, clock, api, &body, start).await,
    };
    if api != Api::Gemini && body.get("stream") != Some(&Value::Bool(true)) {
        return error(
            StatusCode::BAD_REQUEST,
            "the synthetic server only streams: send \"stream\": true",
            "stream_required",
        );
    }
    let number = shared.streams[counter].fetch_add(1, Ordering::Relaxed);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let writer = Writer::new(Plan::new(api, &body, model, &spec, number, created));
    let paced = Paced {
        opening: writer.opening(),
        writer,
        next: 0,
        start,
        spec,
        clock,
        waiting: None,
        sent: None,
        shared: shared.clone(),
    };
    event_stream(Reply::Stream(Box::new(paced)))
}

/// A replay server's answer on a streaming route: the protocol's next recording, streamed; its
/// final object after the stream's time (a request without `"stream": true`); 404 when the
/// server has none, as the Python server answers.
async fn replayed(
    library: &Library,
    clock: Arc<Clock>,
    api: Api,
    body: &serde_json::Map<String, Value>,
    start: Instant,
) -> Response<Reply> {
    let index = match api {
        Api::Responses => 0,
        Api::Chat => 1,
        Api::Completions => 2,
        Api::Anthropic => 3,
        Api::Gemini => 4,
    };
    let protocol = replay::PROTOCOLS[index];
    let Some(recorded) = library.next(index) else {
        let message = format!("this replay server has no {protocol} recording");
        return error(StatusCode::NOT_FOUND, &message, "no_recording");
    };
    if api != Api::Gemini && body.get("stream") != Some(&Value::Bool(true)) {
        let Some(final_object) = recorded.whole.clone() else {
            let message = format!(
                "{protocol} recordings are replayed as streams only: send \"stream\": true"
            );
            return error(StatusCode::BAD_REQUEST, &message, "stream_required");
        };
        let last = recorded.events.len().saturating_sub(1);
        let due = start + Duration::from_secs_f64(library.pacing.due(last));
        tokio::time::sleep_until(due.into()).await;
        let mut response = Response::new(Reply::Whole(Some(final_object)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    let stream = Replayed::new(recorded, start, library.pacing, clock);
    event_stream(Reply::Replay(Box::new(stream)))
}

/// A 200 with `body` as an event stream, with the Python servers' headers.
fn event_stream(body: Reply) -> Response<Reply> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn not_allowed(allow: &'static str) -> Response<Reply> {
    let mut response = whole(
        StatusCode::METHOD_NOT_ALLOWED,
        "text/plain; charset=utf-8",
        b"Method Not Allowed".to_vec(),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn tally_percentiles_are_the_bins_lower_edges() {
        let tally = Tally::new();
        assert_eq!(
            tally.stats(),
            json!({"count": 0, "median_ms": null, "p99_ms": null, "max_ms": null})
        );
        // 1..=1000 µs, then one of 2 s: median 501 µs (rank 500), p99 991 µs (rank 990)
        for micros in 1..=1000 {
            tally.add(Duration::from_micros(micros) + Duration::from_nanos(300));
        }
        tally.add(Duration::from_secs(2));
        let stats = tally.stats();
        assert_eq!(stats["count"], 1001);
        assert_eq!(stats["median_ms"], 0.501);
        assert_eq!(stats["p99_ms"], 0.991);
        assert_eq!(stats["max_ms"], 2000.0);
        // past 32.768 ms, bins of a millisecond from there (as Python's); past 32.8 s, the last
        let coarse = Tally::new();
        coarse.add(Duration::from_micros(40_500));
        assert_eq!(coarse.stats()["median_ms"], 32.768 + 7.0);
        coarse.reset();
        coarse.add(Duration::from_secs(100));
        assert_eq!(
            coarse.stats()["median_ms"],
            32.768 + (Tally::SIZE - 1 - Tally::FINE) as f64
        );
        coarse.reset();
        assert_eq!(coarse.stats()["count"], 0);
    }

    #[test]
    fn routes_and_unquote() {
        assert_eq!(route("/v1/responses"), Some((Api::Responses, 0, None)));
        assert_eq!(
            route("/v1beta/models/a:b:streamGenerateContent"),
            Some((Api::Gemini, 4, Some("a:b")))
        );
        assert_eq!(
            route("/v1/models/g:streamGenerateContent"),
            Some((Api::Gemini, 5, Some("g")))
        );
        assert_eq!(route("/v1beta/models/:streamGenerateContent"), None);
        assert_eq!(route("/v1beta/models/a/b:streamGenerateContent"), None);
        assert_eq!(route("/v1/responses/"), None);
        assert_eq!(unquote("/v1/%72esponses"), "/v1/responses");
        assert_eq!(unquote("/a%2"), "/a%2");
        assert_eq!(unquote("/%C3%A9%ff"), "/é\u{fffd}");
    }

    #[test]
    fn the_clock_wakes_at_the_deadline_not_before() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let late = runtime.block_on(async {
            let clock = Arc::new(Clock::new());
            tokio::spawn(clock.clone().drive());
            let mut late = Vec::new();
            for wait in [0u64, 300, 1700, 5300, 12_100] {
                let at = Instant::now() + Duration::from_micros(wait);
                std::future::poll_fn(|cx| {
                    if Instant::now() >= at {
                        return Poll::Ready(());
                    }
                    clock.wake_at(at, cx.waker().clone());
                    Poll::Pending
                })
                .await;
                late.push(Instant::now() - at);
            }
            late
        });
        // (loose: a busy machine; tokio's own timer would be up to a millisecond and more late)
        assert!(
            late.iter().all(|l| *l < Duration::from_millis(5)),
            "{late:?}"
        );
    }

    #[test]
    fn sockets_are_served_while_the_clock_spins() {
        // A waiter due every 500 µs for 300 ms keeps the clock within EARLY of a deadline, so it
        // spins the whole time; a connection made meanwhile must be accepted and read before the
        // waiter is done (a clock that never let the runtime poll its sockets would hold it back).
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (spun, served) = runtime.block_on(async {
            let clock = Arc::new(Clock::new());
            tokio::spawn(clock.clone().drive());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let waiter = {
                let clock = clock.clone();
                tokio::spawn(async move {
                    let start = Instant::now();
                    for step in 1..=600u32 {
                        let at = start + Duration::from_micros(500) * step;
                        let mut waiting = None;
                        std::future::poll_fn(|cx| clock.poll_until(at, &mut waiting, cx)).await;
                    }
                    Instant::now()
                })
            };
            let server = tokio::spawn(async move {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buffer = [0u8; 5];
                tokio::io::AsyncReadExt::read_exact(&mut socket, &mut buffer)
                    .await
                    .unwrap();
                assert_eq!(&buffer, b"hello");
                Instant::now()
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            std::thread::spawn(move || {
                std::net::TcpStream::connect(addr)
                    .unwrap()
                    .write_all(b"hello")
                    .unwrap()
            });
            (waiter.await.unwrap(), server.await.unwrap())
        });
        assert!(served < spun, "read {:?} after the spin", served - spun);
    }

    /// An HTTP/1.0 exchange (the reply ends with the connection): status line and headers, body.
    fn exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> (String, String) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        (head.to_owned(), body.to_owned())
    }

    #[test]
    fn a_stream_is_paced_and_health_counts_it() {
        let spec = Spec::new(3, 100.0, 0.02).unwrap();
        let config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            streams: Streams::Synthetic(spec),
            workers: 2,
        };
        let server = Server::start(config).unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        let (head, nothing) = exchange(addr, "HEAD", "/health", "");
        assert!(
            head.starts_with("HTTP/1.0 200 OK") && nothing.is_empty(),
            "{head}"
        );
        let (_, health_before) = exchange(addr, "GET", "/health?reset", "");
        let health_before: Value = serde_json::from_str(&health_before).unwrap();
        assert_eq!(
            health_before["synthetic"],
            json!({"tokens": 3, "rate": 100.0, "ttft": 0.02})
        );
        assert_eq!(health_before["workers"], 2);
        let started = Instant::now();
        let request =
            r#"{"stream": true, "model": "m", "messages": [{"role": "user", "content": "a b"}]}"#;
        let (head, body) = exchange(addr, "POST", "/v1/chat/completions", request);
        let took = started.elapsed();
        assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
        assert!(
            head.contains("content-type: text/event-stream; charset=utf-8"),
            "{head}"
        );
        assert!(took >= Duration::from_secs_f64(spec.due(2)), "{took:?}");
        let created: u64 = body.split("\"created\":").nth(1).unwrap()[..10]
            .parse()
            .unwrap();
        let map = match serde_json::from_str(request).unwrap() {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        let expected = Writer::new(Plan::new(Api::Chat, &map, None, &spec, 0, created)).body();
        assert_eq!(body.as_bytes(), expected.as_slice());
        let health = server.health(true);
        assert_eq!(health["lateness"]["count"], 3);
        assert_eq!(health["itl"]["count"], 2);
        // (no lower bound on a gap: on a busy machine a late first token is sent with the next)
        let longest = health["itl"]["max_ms"].as_f64().unwrap();
        assert!(longest < took.as_secs_f64() * 1000.0, "{longest}");
        assert_eq!(server.health(false)["lateness"]["count"], 0);
        for (method, path, body, status, code) in [
            (
                "POST",
                "/v1/responses",
                r#"{"stream": false}"#,
                "400",
                Some("stream_required"),
            ),
            ("POST", "/v1/messages", "[1,", "400", Some("invalid_json")),
            ("POST", "/v1/messages", "[1]", "400", Some("invalid_json")),
            ("GET", "/v1/messages", "", "405", None),
            ("DELETE", "/health", "", "405", None),
            ("POST", "/nowhere", "", "404", None),
        ] {
            let (head, reply) = exchange(addr, method, path, body);
            assert!(
                head.starts_with(&format!("HTTP/1.0 {status}")),
                "{path}: {head}"
            );
            if let Some(code) = code {
                let reply: Value = serde_json::from_str(&reply).unwrap();
                assert_eq!(reply["error"]["code"], code);
            }
        }
        // Gemini's route streams without "stream": true; an empty body is an empty object
        let (head, body) = exchange(
            addr,
            "POST",
            "/v1beta/models/g:streamGenerateContent?alt=sse",
            " ",
        );
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        assert!(
            body.ends_with("\"responseId\":\"synthetic00000000\"}\r\n\r\n"),
            "{body}"
        );
        server.stop();
        assert!(std::net::TcpStream::connect(addr).is_err());
    }

    #[test]
    fn recordings_are_replayed_byte_for_byte_and_rotate() {
        use super::replay::{Pacing, Recorded};
        let piece = |s: &str| Bytes::from(s.to_owned());
        let chat = Recorded {
            events: vec![piece("data: {\"a\":1}\n\n"), piece("data: [DONE]\r\n\r\n")].into(),
            whole: Some(piece(r#"{"id":"x"}"#)),
        };
        let gemini = Recorded {
            events: vec![piece("data: {}\n\n")].into(),
            whole: None,
        };
        let library = Library::new(
            Pacing::new(0.03, 100.0).unwrap(),
            [("chat".to_owned(), chat), ("gemini".to_owned(), gemini)],
        )
        .unwrap();
        let config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            streams: Streams::Replay(Arc::new(library)),
            workers: 1,
        };
        let server = Server::start(config).unwrap();
        let addr = server.local_addr();
        let started = Instant::now();
        let (head, body) = exchange(addr, "POST", "/v1/chat/completions", r#"{"stream": true}"#);
        assert!(
            started.elapsed() >= Duration::from_millis(40),
            "{:?}",
            started.elapsed()
        );
        assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
        assert!(
            head.contains("content-type: text/event-stream; charset=utf-8"),
            "{head}"
        );
        assert_eq!(body, "data: {\"a\":1}\n\ndata: [DONE]\r\n\r\n");
        let (head, body) = exchange(addr, "POST", "/v1/chat/completions", "{}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert_eq!(body, r#"{"id":"x"}"#);
        let (head, body) = exchange(addr, "POST", "/v1beta/models/g:streamGenerateContent", "");
        assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
        assert_eq!(body, "data: {}\n\n");
        for (path, body, status, code) in [
            (
                "/v1/responses",
                r#"{"stream": true}"#,
                "404",
                "no_recording",
            ),
            ("/v1/chat/completions", "[", "400", "invalid_json"),
        ] {
            let (head, reply) = exchange(addr, "POST", path, body);
            assert!(head.starts_with(&format!("HTTP/1.0 {status}")), "{head}");
            let reply: Value = serde_json::from_str(&reply).unwrap();
            assert_eq!(reply["error"]["code"], code, "{reply}");
        }
        let (_, health) = exchange(addr, "GET", "/health", "");
        let health: Value = serde_json::from_str(&health).unwrap();
        assert_eq!(health["recordings"]["chat"], 1);
        assert_eq!(health, server.health(false));
        // a Realtime upgrade with no Realtime recording is refused, as uvicorn refuses it
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .write_all(
                b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                  Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            )
            .unwrap();
        let mut reply = [0u8; 12];
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"HTTP/1.1 403");
        server.stop();
    }
}
