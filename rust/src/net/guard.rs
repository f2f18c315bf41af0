//! What hyper cannot be told to refuse: a request head whose body framing is ambiguous.
//!
//! hyper applies RFC 9112 §6.3 on its own: with both `Transfer-Encoding` and `Content-Length` the
//! length is dropped before the request reaches the service (and the connection closed after the
//! reply), and two equal `Content-Length`s become one. Neither is then visible to the gateway,
//! which must answer such a request 400 (a front end and a back end that frame one body two ways
//! is how requests are smuggled). So each connection's bytes pass through [`Guarded`] on their way
//! to hyper: it reads the request heads with httparse (the parser hyper itself uses) and notes
//! the ordinal of an ambiguous one; the service, counting the requests it is handed, refuses that
//! one.
//!
//! Only heads are read, and only where one is known to start: at the connection's start, after a
//! `Content-Length` body, and after the gateway has written a reply (a chunked body's end is
//! hyper's to find; a client that pipelines after one is not looked at until the reply). An
//! upgraded connection (a WebSocket) is not looked at again. Anything httparse cannot read is left
//! to hyper, which refuses what is malformed.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How many headers a head is read with (hyper's own default is 100).
const MAX_HEADERS: usize = 128;

/// Shared by a connection's [`Guarded`] stream and its service.
#[derive(Default)]
pub(crate) struct Framing {
    /// The 1-based ordinal of the first ambiguous request head on the connection; 0: none.
    ambiguous: AtomicU64,
    /// Requests the service has been handed on the connection.
    handed: AtomicU64,
}

impl Framing {
    /// Called once per request by the service, in order: whether this request's head was
    /// ambiguous.
    pub(crate) fn next_is_ambiguous(&self) -> bool {
        let ordinal = self.handed.fetch_add(1, Ordering::Relaxed) + 1;
        self.ambiguous.load(Ordering::Acquire) == ordinal
    }
}

enum State {
    /// Collecting a request head.
    Head(Vec<u8>),
    /// Inside a `Content-Length` body: this many bytes to pass.
    Body(u64),
    /// Where a head starts is not known until the gateway writes a reply.
    UntilReply,
    /// Upgraded: not looked at again.
    Done,
}

/// A connection's stream, with the request heads read as they go by (see the module's text).
pub(crate) struct Guarded<T> {
    inner: T,
    state: State,
    heads: u64,
    max_head: usize,
    framing: Arc<Framing>,
}

impl<T> Guarded<T> {
    pub(crate) fn new(inner: T, max_head: usize) -> (Guarded<T>, Arc<Framing>) {
        let framing = Arc::new(Framing::default());
        let guarded = Guarded {
            inner,
            state: State::Head(Vec::new()),
            heads: 0,
            max_head,
            framing: framing.clone(),
        };
        (guarded, framing)
    }

    /// The bytes just read, in order.
    fn look(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Done | State::UntilReply => return,
                State::Body(left) => {
                    let pass = (*left).min(bytes.len() as u64) as usize;
                    *left -= pass as u64;
                    bytes = &bytes[pass..];
                    if *left == 0 {
                        self.state = State::Head(Vec::new());
                    }
                }
                State::Head(_) => {
                    let State::Head(mut buf) =
                        std::mem::replace(&mut self.state, State::UntilReply)
                    else {
                        unreachable!()
                    };
                    let start = buf.len();
                    buf.extend_from_slice(bytes);
                    let parsed = {
                        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                        let mut request = httparse::Request::new(&mut headers);
                        match request.parse(&buf) {
                            Ok(httparse::Status::Complete(end)) => {
                                Some((end, self.read_head(&request)))
                            }
                            Ok(httparse::Status::Partial) => None,
                            // Malformed: hyper answers it (400) and closes.
                            Err(_) => return,
                        }
                    };
                    match parsed {
                        Some((end, next)) => {
                            self.state = next;
                            bytes = &bytes[end - start..];
                        }
                        // Too large: hyper answers it (431) and closes.
                        None if buf.len() > self.max_head => return,
                        None => {
                            self.state = State::Head(buf);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Notes an ambiguous head; returns what follows it.
    fn read_head(&mut self, request: &httparse::Request) -> State {
        self.heads += 1;
        let mut lengths = 0;
        let mut length = None;
        let mut chunked = false;
        let mut upgrade = false;
        for header in request.headers.iter() {
            if header.name.eq_ignore_ascii_case("content-length") {
                lengths += 1;
                length = std::str::from_utf8(header.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
            } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            } else if header.name.eq_ignore_ascii_case("upgrade") {
                upgrade = true;
            }
        }
        if lengths > 1 || (lengths == 1 && chunked) {
            let _ = self.framing.ambiguous.compare_exchange(
                0,
                self.heads,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            // hyper closes the connection after this request's reply.
            return State::Done;
        }
        if upgrade {
            return State::Done;
        }
        match (chunked, length) {
            (true, _) => State::UntilReply,
            (false, Some(n)) if n > 0 => State::Body(n),
            (false, Some(_)) => State::Head(Vec::new()),
            (false, None) if lengths == 0 => State::Head(Vec::new()),
            // An unreadable length: hyper refuses it.
            (false, None) => State::UntilReply,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            if !matches!(this.state, State::Done | State::UntilReply) {
                this.look(&buf.filled()[before..]);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if matches!(this.state, State::UntilReply) {
            this.state = State::Head(Vec::new());
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if matches!(this.state, State::UntilReply) {
            this.state = State::Head(Vec::new());
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(chunks: &[&[u8]]) -> (u64, u64) {
        let (mut guarded, framing) = Guarded::new((), 65536);
        for chunk in chunks {
            guarded.look(chunk);
        }
        (guarded.heads, framing.ambiguous.load(Ordering::Relaxed))
    }

    #[test]
    fn content_length_with_transfer_encoding_is_ambiguous_at_any_split() {
        let request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\
                        transfer-encoding: chunked\r\n\r\n0\r\n\r\n";
        for cut in 1..request.len() {
            assert_eq!(
                heads(&[&request[..cut], &request[cut..]]),
                (1, 1),
                "cut at {cut}"
            );
        }
        let twice = b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(heads(&[twice]), (1, 1));
    }

    #[test]
    fn the_second_head_after_a_length_body_is_read() {
        let first = b"POST / HTTP/1.1\r\ncontent-length: 4\r\n\r\nbody".to_vec();
        let second = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n";
        let both = [first.as_slice(), second.as_slice()].concat();
        assert_eq!(heads(&[&both]), (2, 2));
        // A plain request is not flagged.
        assert_eq!(heads(&[&first, &first]), (2, 0));
        // After a chunked body nothing is read until the reply is written.
        let chunked = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(heads(&[chunked, second]), (1, 0));
    }

    #[test]
    fn service_counts_match_the_flagged_ordinal() {
        let framing = Framing::default();
        framing.ambiguous.store(2, Ordering::Relaxed);
        assert!(!framing.next_is_ambiguous());
        assert!(framing.next_is_ambiguous());
        assert!(!framing.next_is_ambiguous());
    }
}
