//! The benchmark client of `rapidsse measure --engine native`: every request of a schedule sent at
//! its time as a tokio task, on kept-alive connections, its response parsed as it is read and each
//! read timestamped and counted.
//!
//! Python hands over the run once (the target, the bodies, the schedule, the cap) and takes the
//! samples back as requests end ([`Client::next`]); `rapidsse.serving.measure` builds its
//! `RequestResult`s from them, so the report is the asyncio engine's.
//!
//! - Connections: HTTP/1.1 over TCP or TLS (rustls), pooled. A request takes an idle connection
//!   when there is one and gives it back once its response ended cleanly (framed by length or
//!   chunks, no `connection: close`, nothing more sent); one that a server closed while idle is
//!   retried once on a new connection, if nothing of the response had come.
//! - Timestamps: on Linux a read is stamped with the kernel's receive time of its last byte
//!   (`SO_TIMESTAMPNS`, read with `recvmsg` through tokio's readiness API), so that a client late
//!   to a read (other streams, a busy core) delays the read, not the measurement. The kernel
//!   stamps on the wall clock, which may be stepped: a stamp that puts a read before the request
//!   was written or before the previous read, or in the future, is not taken, and the read counts
//!   when it was read ([`arrival`]), the asyncio engine's rule.
//! - Tokens: each read's body bytes go to the protocol's [`TokenCounter`]; a read that completes
//!   several tokens gives them all its time (the client fell behind that stream).
//! - Failures are worded as the asyncio engine words them (`HTTP 500: ...`, `cut short: ...`,
//!   `not an event stream: ...`, the stream's own error event).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

#[cfg(not(unix))]
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use super::h1::{Part, ResponseParser};
use super::stop::{Stop, Watch};
use super::tap::Protocol;
use super::tokens::TokenCounter;

/// Bytes asked of one read (as the asyncio engine's `recvmsg`).
const READ_SIZE: usize = 256 * 1024;

thread_local! {
    /// The buffer of every read on this thread: a read's bytes are taken (parsed and counted)
    /// before the next read, with no await between, so one serves all the connections (one per
    /// request would be a large allocation, and fresh pages to clear, for each).
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_SIZE]);
}
/// How much of an error reply's body its failure reason quotes.
const ERROR_BODY: usize = 200;

/// Where requests go and what they are.
pub struct Target {
    pub host: String,
    pub port: u16,
    /// The request line and headers, each line ending in CRLF, up to (not with) `content-length`.
    pub head: Vec<u8>,
    pub protocol: Protocol,
    /// Kernel receive timestamps (Linux, plain TCP; elsewhere every read counts when it is read).
    pub kernel_timestamps: bool,
    /// TLS (`https`), with the roots its certificate may chain to.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// The failure reasons the caller words (so that both engines say the same).
pub struct Texts {
    /// A request that did not end within the timeout.
    pub timeout: String,
    /// A request that was due and had not ended when the run was stopped.
    pub interrupted: String,
}

/// What one request measured. Times are seconds from when it was due.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Sample {
    pub index: u64,
    /// The wait for a slot.
    pub queued: f64,
    pub status: Option<u16>,
    /// None: it succeeded.
    pub error: Option<String>,
    /// Due → the end of the response (its last read).
    pub latency: f64,
    /// The reads that completed tokens: (time, tokens).
    pub reads: Vec<(f64, u32)>,
    pub output_tokens: Option<i64>,
    pub input_tokens: Option<i64>,
    /// Response bytes read (head and body).
    pub bytes: u64,
}

/// What [`Client::next`] hands over.
#[derive(Debug)]
pub enum Message {
    /// A request ended.
    Sample(Box<Sample>),
    /// Request `index` is due and waits for [`Client::grant`] (with [`Slots::External`]).
    Want(u64),
    /// Every request of the run ended (or was left out by a stop): the run's duration.
    Done(f64),
}

/// The `--max-concurrency` cap.
#[derive(Clone, Copy, Debug)]
pub enum Slots {
    None,
    /// At most this many in flight, first come first served.
    Local(usize),
    /// Granted from outside, one [`Message::Want`] and one [`Client::grant`] per request (the
    /// workers of a run share one cap, kept by their parent).
    External,
}

struct Shared {
    target: Target,
    addresses: Vec<SocketAddr>,
    bodies: Vec<Vec<u8>>,
    timeout: Duration,
    texts: Texts,
    idle: Mutex<Vec<Conn>>,
    grants: Mutex<HashMap<u64, oneshot::Sender<()>>>,
}

/// A client: its own runtime (one worker thread: one core, as the asyncio engine's one loop), the
/// pool, and the queue of what it measured.
pub struct Client {
    runtime: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    stop: Arc<Stop>,
    tx: Mutex<Option<mpsc::Sender<Message>>>,
    rx: Mutex<mpsc::Receiver<Message>>,
}

impl Client {
    /// A client of `target` (its address resolved here); request `i` sends `bodies[i % len]`.
    pub fn new(
        target: Target,
        bodies: Vec<Vec<u8>>,
        timeout: Duration,
        texts: Texts,
    ) -> Result<Client, String> {
        if bodies.is_empty() {
            return Err("no request bodies".into());
        }
        if TokenCounter::new(target.protocol).is_none() {
            return Err(format!("no token counter for {}", target.protocol.name()));
        }
        let addresses: Vec<SocketAddr> = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", target.host))?
            .collect();
        super::fds::reserve(super::fds::MOST);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rapidsse-measure")
            .enable_all()
            .build()
            .map_err(|e| format!("the runtime cannot start: {e}"))?;
        let (tx, rx) = mpsc::channel();
        Ok(Client {
            runtime,
            shared: Arc::new(Shared {
                target,
                addresses,
                bodies,
                timeout,
                texts,
                idle: Mutex::new(Vec::new()),
                grants: Mutex::new(HashMap::new()),
            }),
            stop: Stop::new(),
            tx: Mutex::new(Some(tx)),
            rx: Mutex::new(rx),
        })
    }

    /// Runs `count` requests (bodies `0..count`) at once, `cap` at most in flight, and returns when
    /// they ended: not measured, they warm the server and the pool up.
    pub fn warmup(&self, count: u64, cap: Option<usize>) {
        let shared = self.shared.clone();
        let stop = self.stop.watch();
        self.runtime.block_on(async move {
            let slots = cap.map(|c| Arc::new(Semaphore::new(c.max(1))));
            let tasks: Vec<_> = (0..count)
                .map(|index| {
                    let (shared, slots, stop) = (shared.clone(), slots.clone(), stop.watch());
                    tokio::spawn(async move {
                        let _permit = match slots {
                            Some(s) => Some(s.acquire_owned().await),
                            None => None,
                        };
                        request(&shared, index, Instant::now(), stop).await
                    })
                })
                .collect();
            for task in tasks {
                let _ = task.await;
            }
        });
    }

    /// Starts the run: request `index` due `offset` seconds after `start`, for each `(index,
    /// offset)` of `plan` (in arrival order). Its samples come from [`next`](Client::next), then
    /// [`Message::Done`]. One run per client.
    pub fn start(&self, plan: Vec<(u64, f64)>, start: Instant, slots: Slots) {
        let Some(tx) = self.tx.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let shared = self.shared.clone();
        let mut stop = self.stop.watch();
        self.runtime.spawn(async move {
            let local = match slots {
                Slots::Local(cap) => Some(Arc::new(Semaphore::new(cap.max(1)))),
                Slots::None | Slots::External => None,
            };
            let mut tasks = Vec::with_capacity(plan.len());
            let due_at = |offset: f64| start + Duration::from_secs_f64(offset.max(0.0));
            for (number, &(index, offset)) in plan.iter().enumerate() {
                let due = due_at(offset);
                if stop.is_stopped() {
                    break;
                }
                // (Not for a request already due: tokio's timer would hold it to its next
                // millisecond tick, and every request due at once would wait one tick more.)
                if due > Instant::now() {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due.into()) => {}
                        _ = &mut stop => break,
                    }
                }
                // The cap's slots go in arrival order: taken here, one request after the other
                // (tokio runs the task spawned last first, so the tasks would not queue in order).
                let permit = match &local {
                    Some(semaphore) => tokio::select! {
                        permit = semaphore.clone().acquire_owned() => permit.ok(),
                        _ = &mut stop => {
                            // Stopped: this request and those due behind it waited for a slot.
                            for &(index, offset) in &plan[number..] {
                                let due = due_at(offset);
                                if due <= Instant::now() {
                                    let sample = interrupted(&shared, index, due);
                                    let _ = tx.send(Message::Sample(Box::new(sample)));
                                }
                            }
                            break;
                        }
                    },
                    None => None,
                };
                let (shared, tx, stop) = (shared.clone(), tx.clone(), stop.watch());
                tasks.push(tokio::spawn(async move {
                    let sample = slotted(&shared, index, due, slots, permit, &tx, stop).await;
                    let _ = tx.send(Message::Sample(Box::new(sample)));
                }));
            }
            for task in tasks {
                let _ = task.await;
            }
            let _ = tx.send(Message::Done(start.elapsed().as_secs_f64()));
        });
    }

    /// The next message, waiting up to `wait`; None when there was none within it.
    pub fn next(&self, wait: Duration) -> Option<Message> {
        let rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        rx.recv_timeout(wait).ok()
    }

    /// The slot request `index` waited for ([`Slots::External`]).
    pub fn grant(&self, index: u64) {
        let waiter = self
            .shared
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&index);
        if let Some(waiter) = waiter {
            let _ = waiter.send(());
        }
    }

    /// Stops the run: the requests in flight (or waiting for a slot) end now, failed with
    /// [`Texts::interrupted`]; those not yet due are left out. [`Message::Done`] follows.
    pub fn stop(&self) {
        self.stop.stop();
    }
}

/// One request of the run: its slot (`permit`, a local cap's, taken by the scheduler; or one
/// granted from outside), then [`request`]; the wait for its slot counts as queued.
async fn slotted(
    shared: &Shared,
    index: u64,
    due: Instant,
    slots: Slots,
    permit: Option<OwnedSemaphorePermit>,
    tx: &mpsc::Sender<Message>,
    mut stop: Watch,
) -> Sample {
    let _permit = permit;
    if let Slots::External = slots {
        let (grant_tx, grant_rx) = oneshot::channel();
        shared
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(index, grant_tx);
        let _ = tx.send(Message::Want(index));
        tokio::select! {
            _ = grant_rx => {}
            _ = &mut stop => return interrupted(shared, index, due),
        }
    }
    request(shared, index, due, stop).await
}

fn interrupted(shared: &Shared, index: u64, due: Instant) -> Sample {
    Sample {
        index,
        error: Some(shared.texts.interrupted.clone()),
        latency: due.elapsed().as_secs_f64(),
        ..Sample::default()
    }
}

/// Sends request `index` and reads its response, within the timeout and until a stop.
async fn request(shared: &Shared, index: u64, due: Instant, mut stop: Watch) -> Sample {
    let mut exchange = Exchange::new(shared.target.protocol, index, due);
    exchange.sample.queued = due.elapsed().as_secs_f64();
    let body = &shared.bodies[(index % shared.bodies.len() as u64) as usize];
    // (`stop` is polled at every wake of the request, once per read: `Watch` costs an atomic
    // load there.)
    let (outcome, end) = tokio::select! {
        biased;
        outcome = tokio::time::timeout(shared.timeout, exchange.run(shared, body)) => match outcome {
            Ok(outcome) => (outcome, None),
            Err(_) => (Err(shared.texts.timeout.clone()), Some(Instant::now())),
        },
        _ = &mut stop => (Err(shared.texts.interrupted.clone()), Some(Instant::now())),
    };
    exchange.finish(outcome, end)
}

/// One request's exchange: the response's parser and counter, and what it measured so far.
struct Exchange {
    due: Instant,
    parser: ResponseParser,
    counter: TokenCounter,
    sample: Sample,
    /// The body's bytes were an event stream (a 2xx `text/event-stream` reply).
    streaming: bool,
    error_body: Vec<u8>,
    /// When the last read arrived.
    last_read: Option<Instant>,
}

/// Whether a connection may carry the next request.
enum Reuse {
    Yes,
    No,
}

impl Exchange {
    fn new(protocol: Protocol, index: u64, due: Instant) -> Exchange {
        Exchange {
            due,
            parser: ResponseParser::default(),
            counter: TokenCounter::new(protocol).expect("checked by Client::new"),
            sample: Sample {
                index,
                ..Sample::default()
            },
            streaming: false,
            error_body: Vec::new(),
            last_read: None,
        }
    }

    /// The exchange on a pooled connection, or a new one; the result is the failure, if any.
    async fn run(&mut self, shared: &Shared, body: &[u8]) -> Result<(), String> {
        let mut request = shared.target.head.clone();
        request.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        request.extend_from_slice(body);
        loop {
            let pooled = shared.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let reused = pooled.is_some();
            let mut stream = match pooled {
                Some(stream) => stream,
                None => connect(shared).await.map_err(|e| python_error(&e))?,
            };
            match self
                .on(&mut stream, &request, shared.target.kernel_timestamps)
                .await
            {
                Ok(Reuse::Yes) => {
                    shared
                        .idle
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(stream);
                    return Ok(());
                }
                Ok(Reuse::No) => return Ok(()),
                // A kept-alive connection the server closed while it was idle: once more, anew.
                Err(Failure::Stale) if reused => continue,
                Err(Failure::Stale) => {
                    return Err(
                        "cut short: the server closed the connection before the response ended"
                            .into(),
                    )
                }
                Err(Failure::Reason(reason)) => return Err(reason),
            }
        }
    }

    /// The request written on `stream`, its response read to its end (or to a failure).
    async fn on(
        &mut self,
        stream: &mut Conn,
        request: &[u8],
        kernel: bool,
    ) -> Result<Reuse, Failure> {
        let mut floor = Instant::now(); // no answer arrives before its request is written
        if let Err(e) = stream.write_all(request).await {
            return Err(if self.sample.bytes == 0 {
                Failure::Stale
            } else {
                Failure::Reason(python_error(&e))
            });
        }
        loop {
            let read = stream
                .read(kernel, |data, stamp| self.arrived(data, stamp, &mut floor))
                .await;
            match read {
                Ok(None) => {}
                Ok(Some(done)) => return done,
                Err(_) if self.sample.bytes == 0 && self.parser.is_fresh() => {
                    return Err(Failure::Stale)
                }
                Err(e) => return Err(Failure::Reason(self.lost(Some(&e)))),
            }
        }
    }

    /// One read: its bytes (none: the connection's end) and kernel stamp. `Some` once the
    /// exchange is over.
    fn arrived(
        &mut self,
        data: &[u8],
        stamp: Option<SystemTime>,
        floor: &mut Instant,
    ) -> Option<Result<Reuse, Failure>> {
        if data.is_empty() {
            if self.sample.bytes == 0 && self.parser.is_fresh() {
                return Some(Err(Failure::Stale));
            }
            if self.parser.close() {
                return Some(self.ended().map(|_| Reuse::No).map_err(Failure::Reason));
            }
            return Some(Err(Failure::Reason(self.lost(None))));
        }
        // The wall clock first: a pause between the two readings (the thread preempted) then makes
        // the wait look shorter and the stamp later, never earlier than the bytes came.
        let wall = SystemTime::now();
        let at = arrival(Instant::now(), wall, stamp, *floor);
        *floor = at;
        self.last_read = Some(at);
        self.sample.bytes += data.len() as u64;
        match self.take(data, at) {
            Ok(Some(reuse)) => Some(Ok(reuse)),
            Ok(None) => None,
            Err(reason) => Some(Err(Failure::Reason(reason))),
        }
    }

    /// One read's bytes, arrived at `at`: the head, then the body counted. `Some` once the
    /// response ended.
    fn take(&mut self, data: &[u8], at: Instant) -> Result<Option<Reuse>, String> {
        let mut tokens = 0u32;
        let mut failure = None;
        let mut end = None;
        let parsed = {
            let (streaming, counter, error_body, sample) = (
                &mut self.streaming,
                &mut self.counter,
                &mut self.error_body,
                &mut self.sample,
            );
            self.parser.feed(data, |part| {
                if failure.is_some() {
                    return;
                }
                match part {
                    Part::Head {
                        status,
                        content_type,
                        ..
                    } => {
                        sample.status = Some(status);
                        if (200..300).contains(&status) {
                            let media = content_type.split(|&b| b == b';').next().unwrap_or(b"");
                            if media
                                .trim_ascii()
                                .eq_ignore_ascii_case(b"text/event-stream")
                            {
                                *streaming = true;
                            } else {
                                failure = Some(format!(
                                    "not an event stream: content type {}",
                                    python_repr(
                                        &content_type
                                            .iter()
                                            .map(|&b| b as char)
                                            .collect::<String>()
                                    )
                                ));
                            }
                        }
                    }
                    Part::Body(bytes) if *streaming => match counter.feed(bytes) {
                        Ok(n) => tokens += n,
                        Err(e) => failure = Some(format!("SSEError: {e}")),
                    },
                    Part::Body(bytes) => {
                        let room = ERROR_BODY.saturating_sub(error_body.len());
                        error_body.extend_from_slice(&bytes[..bytes.len().min(room)]);
                    }
                    Part::End { keep_alive } => end = Some(keep_alive),
                    Part::Trailer(_) => {}
                }
            })
        };
        if tokens > 0 {
            self.sample
                .reads
                .push((at.saturating_duration_since(self.due).as_secs_f64(), tokens));
        }
        if let Some(reason) = failure {
            return Err(reason);
        }
        if let Err(e) = parsed {
            return Err(format!("bad HTTP response: {e}"));
        }
        match end {
            Some(keep_alive) => {
                self.ended()?;
                let reuse = keep_alive && !self.parser.had_extra();
                Ok(Some(if reuse { Reuse::Yes } else { Reuse::No }))
            }
            None => Ok(None),
        }
    }

    /// The response ended: the stream's own verdict, or the error reply's.
    fn ended(&mut self) -> Result<(), String> {
        if !self.streaming {
            return Err(self.error_reply());
        }
        let outcome = self.counter.outcome().clone();
        self.sample.output_tokens = outcome.output_tokens;
        self.sample.input_tokens = outcome.input_tokens;
        match outcome.error {
            Some(error) => Err(error),
            None if !outcome.finished => Err(format!(
                "cut short: the stream ended before {}",
                self.counter.final_event()
            )),
            None => Ok(()),
        }
    }

    fn error_reply(&self) -> String {
        format!(
            "HTTP {}: {}",
            self.sample.status.unwrap_or(0),
            String::from_utf8_lossy(&self.error_body)
        )
    }

    /// The connection was lost before the response ended.
    fn lost(&self, error: Option<&io::Error>) -> String {
        match self.sample.status {
            Some(status) if !(200..300).contains(&status) => self.error_reply(),
            _ => {
                let reason = error.map_or_else(
                    || "the server closed the connection".to_owned(),
                    python_error,
                );
                format!("cut short: {reason} before the response ended")
            }
        }
    }

    /// The sample, with its failure if any. Its latency runs to `end`: the last read for a
    /// response that ended or was cut (none came: now), and now for a timeout or a stop.
    fn finish(mut self, outcome: Result<(), String>, end: Option<Instant>) -> Sample {
        let end = end.or(self.last_read).unwrap_or_else(Instant::now);
        self.sample.latency = end.saturating_duration_since(self.due).as_secs_f64();
        self.sample.error = outcome.err();
        self.sample
    }
}

/// Why an exchange on a connection did not go through.
enum Failure {
    /// The connection was gone before any of the response came (closed while idle in the pool).
    Stale,
    Reason(String),
}

/// A new connection to the target: its addresses tried in turn (`localhost` may name `::1` first
/// and be served on `127.0.0.1` only), with TLS or kernel receive timestamps when asked.
async fn connect(shared: &Shared) -> io::Result<Conn> {
    let mut error = None;
    for address in &shared.addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                if let Some(tls) = &shared.target.tls {
                    let name = rustls_pki_types::ServerName::try_from(shared.target.host.clone())
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                    let connector = tokio_rustls::TlsConnector::from(tls.clone());
                    let stream = connector.connect(name, stream).await?;
                    return Ok(Conn::Tls(Box::new((stream, vec![0; TLS_READ_SIZE]))));
                }
                if shared.target.kernel_timestamps {
                    stamps_on(&stream)?;
                }
                return Socket::new(stream).map(Conn::Plain);
            }
            Err(e) => error = Some(e),
        }
    }
    Err(error.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no address for {}:{}",
                shared.target.host, shared.target.port
            ),
        )
    }))
}

/// Whether this machine gives kernel receive timestamps to [`Socket::read`].
pub const KERNEL_TIMESTAMPS: bool = cfg!(target_os = "linux");

#[cfg(target_os = "linux")]
fn stamps_on(stream: &TcpStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and an int option of the right size.
    let done = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn stamps_on(_stream: &TcpStream) -> io::Result<()> {
    Ok(())
}

/// A connection: plain TCP, or TLS (rustls; read times only: the kernel's stamps are of the
/// records, before they are decrypted).
enum Conn {
    Plain(Socket),
    /// The TLS stream and its read buffer (a read of it may wait, so the thread's is not used).
    Tls(Box<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>)>),
}

/// The read buffer of a TLS connection: TLS records are at most 16 KiB of plaintext.
const TLS_READ_SIZE: usize = 64 * 1024;

impl Conn {
    /// All of `data` written.
    async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(socket) => socket.write_all(data).await,
            Conn::Tls(tls) => {
                use tokio::io::AsyncWriteExt;
                tls.0.write_all(data).await?;
                tls.0.flush().await
            }
        }
    }

    /// One read, handed to `take` (see [`Socket::read`]).
    async fn read<R>(
        &mut self,
        kernel: bool,
        mut take: impl FnMut(&[u8], Option<SystemTime>) -> R,
    ) -> io::Result<R> {
        match self {
            Conn::Plain(socket) => socket.read(kernel, take).await,
            Conn::Tls(tls) => {
                use tokio::io::AsyncReadExt;
                let (stream, buffer) = &mut **tls;
                let size = stream.read(buffer).await?;
                Ok(take(&buffer[..size], None))
            }
        }
    }
}

/// A plain connection, read one `recv` per arrival. On Unix the socket is tokio's [`AsyncFd`]: a read
/// shorter than the buffer emptied the socket's receive queue, so its readiness is cleared then
/// and there, not found out by one more `recv` failing with `EAGAIN` (which tokio's `TcpStream`
/// needs, a second system call per read). Data that arrives meanwhile is a new edge, which tokio
/// tells from the one the guard holds, so none is missed.
#[cfg(unix)]
struct Socket(tokio::io::unix::AsyncFd<std::net::TcpStream>);

#[cfg(unix)]
impl Socket {
    fn new(stream: TcpStream) -> io::Result<Socket> {
        // (Non-blocking, as tokio left it.)
        let socket = stream.into_std()?;
        // SAFETY: the socket owns its fd, and nothing replaces or closes it while registered.
        Ok(Socket(unsafe {
            tokio::io::unix::AsyncFd::register(socket)
        }?))
    }

    /// All of `data` written.
    async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        use std::io::Write;
        while !data.is_empty() {
            let mut guard = self.0.writable().await?;
            if let Ok(written) = guard.try_io(|socket| socket.get_ref().write(data)) {
                data = &data[written?..];
            }
        }
        Ok(())
    }

    /// One read, handed to `take` with (kernel timestamps) the wall-clock time its last byte
    /// arrived, in the thread's read buffer.
    async fn read<R>(
        &self,
        kernel: bool,
        mut take: impl FnMut(&[u8], Option<SystemTime>) -> R,
    ) -> io::Result<R> {
        loop {
            let mut guard = self.0.readable().await?;
            let read = READ_BUFFER.with_borrow_mut(|buffer| {
                let read = guard.try_io(|socket| recv(socket.get_ref(), buffer, kernel));
                read.map(|read| {
                    read.map(|(size, stamp)| (size < buffer.len(), take(&buffer[..size], stamp)))
                })
            });
            if let Ok(read) = read {
                return read.map(|(short, taken)| {
                    if short {
                        guard.clear_ready();
                    }
                    taken
                });
            }
        }
    }
}

/// `recv`, or with kernel timestamps `recvmsg` and its `SCM_TIMESTAMPNS` control message.
#[cfg(unix)]
fn recv(
    socket: &std::net::TcpStream,
    buffer: &mut [u8],
    kernel: bool,
) -> io::Result<(usize, Option<SystemTime>)> {
    #[cfg(target_os = "linux")]
    if kernel {
        return recv_stamped(socket, buffer);
    }
    let _ = kernel;
    std::io::Read::read(&mut &*socket, buffer).map(|size| (size, None))
}

/// A connection elsewhere: tokio's `TcpStream`, read times only.
#[cfg(not(unix))]
struct Socket(TcpStream);

#[cfg(not(unix))]
impl Socket {
    fn new(stream: TcpStream) -> io::Result<Socket> {
        Ok(Socket(stream))
    }

    async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let stream = &self.0;
            let written = stream
                .async_io(Interest::WRITABLE, || stream.try_write(data))
                .await?;
            data = &data[written..];
        }
        Ok(())
    }

    async fn read<R>(
        &self,
        _kernel: bool,
        mut take: impl FnMut(&[u8], Option<SystemTime>) -> R,
    ) -> io::Result<R> {
        let stream = &self.0;
        stream
            .async_io(Interest::READABLE, || {
                READ_BUFFER.with_borrow_mut(|buffer| {
                    stream
                        .try_read(buffer)
                        .map(|size| take(&buffer[..size], None))
                })
            })
            .await
    }
}

/// `recvmsg` on the socket, with its `SCM_TIMESTAMPNS` control message.
#[cfg(target_os = "linux")]
fn recv_stamped(
    socket: &std::net::TcpStream,
    buffer: &mut [u8],
) -> io::Result<(usize, Option<SystemTime>)> {
    use std::os::fd::AsRawFd;
    // Room for one control message of a timespec, aligned as cmsghdr wants it.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: zeroed msghdr is valid; its pointers are set to live buffers below.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: the fd is the socket's, the buffers outlive the call.
    let size = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_DONTWAIT) };
    if size < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET
                && (*header).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let time: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast());
                stamp = SystemTime::UNIX_EPOCH
                    .checked_add(Duration::new(time.tv_sec as u64, time.tv_nsec as u32));
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    Ok((size as usize, stamp))
}

/// When a read counts as arrived: read at `now` (monotonic) and `wall_now` (the wall clock),
/// kernel-stamped at `stamp` (wall clock) if at all. Only the wait is taken from the wall clock;
/// a stamp that would put the read at or after `now`, or before `floor` (the request written, or
/// the previous read), is not taken: a stepped wall clock never moves a token before its request
/// nor puts reads out of order.
pub fn arrival(
    now: Instant,
    wall_now: SystemTime,
    stamp: Option<SystemTime>,
    floor: Instant,
) -> Instant {
    let stamped = stamp
        .and_then(|s| wall_now.duration_since(s).ok())
        .and_then(|wait| now.checked_sub(wait));
    match stamped {
        Some(at) if floor <= at && at < now => at,
        _ => now,
    }
}

/// An OS error as Python words it in the asyncio engine's reasons (`ConnectionRefusedError:
/// [Errno 111] Connection refused`).
fn python_error(error: &io::Error) -> String {
    let name = match error.kind() {
        io::ErrorKind::ConnectionRefused => "ConnectionRefusedError",
        io::ErrorKind::ConnectionReset => "ConnectionResetError",
        io::ErrorKind::ConnectionAborted => "ConnectionAbortedError",
        io::ErrorKind::BrokenPipe => "BrokenPipeError",
        io::ErrorKind::TimedOut => "TimeoutError",
        _ => "OSError",
    };
    match error.raw_os_error() {
        Some(code) => {
            let text = error.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text);
            format!("{name}: [Errno {code}] {text}")
        }
        None => format!("{name}: {error}"),
    }
}

/// Python's `repr` of a string (the content type in `not an event stream`).
fn python_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_stamp_is_taken_only_between_the_floor_and_the_read() {
        let floor = Instant::now();
        let now = floor + Duration::from_millis(50);
        let wall = SystemTime::now();
        let stamp = |ago: u64| Some(wall - Duration::from_millis(ago));
        assert_eq!(
            arrival(now, wall, stamp(20), floor),
            now - Duration::from_millis(20)
        );
        assert_eq!(
            arrival(now, wall, None, floor),
            now,
            "no stamp: the read's time"
        );
        assert_eq!(
            arrival(now, wall, stamp(80), floor),
            now,
            "before the floor"
        );
        let ahead = Some(wall + Duration::from_secs(5)); // a wall clock stepped back since
        assert_eq!(arrival(now, wall, ahead, floor), now, "in the future");
    }

    #[test]
    fn errors_read_as_pythons() {
        let refused = io::Error::from_raw_os_error(111);
        assert!(python_error(&refused).starts_with("ConnectionRefusedError: [Errno 111] "));
        assert_eq!(python_repr("application/json"), "'application/json'");
        assert_eq!(python_repr("it's"), "\"it's\"");
    }
}
