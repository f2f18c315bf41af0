//! HTTP/1.1 responses read as their bytes arrive: the one reader of the native engine's clients
//! (the benchmark client of [`super::measure`] and the gateway's plain-HTTP upstream,
//! [`super::upstream`]).

/// The longest response head, chunk-size line or trailer line taken.
const MAX_LINE: usize = 64 * 1024;

/// A part of a response, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Part<'a> {
    /// The final (non-1xx) head: its status, its `content-type` (empty if none) and every header.
    Head {
        status: u16,
        content_type: &'a [u8],
        headers: &'a [httparse::Header<'a>],
    },
    /// Body bytes, the framing taken off.
    Body(&'a [u8]),
    /// A trailer line of a chunked body (`name: value`, no CRLF).
    Trailer(&'a [u8]),
    /// The response ended; `keep_alive`: its connection may carry the next request.
    End { keep_alive: bool },
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Head,
    /// Body bytes left of a `content-length` body.
    Length(u64),
    /// The chunk-size line (in `line`).
    ChunkSize,
    /// Bytes left of a chunk's data.
    ChunkData(u64),
    /// The CRLF after a chunk's data (in `line`).
    ChunkEnd,
    /// Trailer lines, up to the empty one (in `line`).
    Trailers,
    /// A body framed by the connection's end.
    UntilClose,
    Done,
}

/// An HTTP/1.1 response, parsed as its bytes arrive, in pieces of any size: the head by httparse,
/// the body framed by `content-length`, chunks, or the connection's end.
#[derive(Debug, Default)]
pub struct ResponseParser {
    state: State,
    /// The head so far, or the current chunk-size, chunk-end or trailer line.
    line: Vec<u8>,
    keep_alive: bool,
    /// Bytes after the response's end (a reply nobody asked for: the connection is not reused).
    extra: bool,
}

impl ResponseParser {
    /// Nothing of a response came yet.
    pub fn is_fresh(&self) -> bool {
        matches!(self.state, State::Head) && self.line.is_empty()
    }

    /// The connection closed: whether that ended the response (a body framed by it).
    pub fn close(&mut self) -> bool {
        if matches!(self.state, State::UntilClose) {
            self.state = State::Done;
            true
        } else {
            matches!(self.state, State::Done)
        }
    }

    /// Takes the next bytes; `on_part` gets the parts they complete, in order.
    pub fn feed<F: FnMut(Part<'_>)>(
        &mut self,
        mut data: &[u8],
        mut on_part: F,
    ) -> Result<(), String> {
        while !data.is_empty() {
            match self.state {
                State::Head => {
                    let before = self.line.len();
                    // The head ends at the first CRLF CRLF: look for it from just before this piece.
                    self.line.extend_from_slice(data);
                    let from = before.saturating_sub(3);
                    let Some(at) = memchr::memmem::find(&self.line[from..], b"\r\n\r\n") else {
                        if self.line.len() > MAX_LINE {
                            return Err("the response head is too large".into());
                        }
                        return Ok(());
                    };
                    let head_len = from + at + 4;
                    data = &data[head_len - before..];
                    let head = std::mem::take(&mut self.line);
                    self.head(&head[..head_len], &mut on_part)?;
                }
                State::Length(left) => {
                    let take = (left.min(data.len() as u64)) as usize;
                    on_part(Part::Body(&data[..take]));
                    data = &data[take..];
                    if left == take as u64 {
                        self.end(&mut on_part);
                    } else {
                        self.state = State::Length(left - take as u64);
                    }
                }
                State::ChunkData(left) => {
                    let take = (left.min(data.len() as u64)) as usize;
                    on_part(Part::Body(&data[..take]));
                    data = &data[take..];
                    self.state = if left == take as u64 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left - take as u64)
                    };
                }
                State::ChunkSize | State::ChunkEnd | State::Trailers => {
                    let Some(newline) = memchr::memchr(b'\n', data) else {
                        self.line.extend_from_slice(data);
                        if self.line.len() > MAX_LINE {
                            return Err("a chunk line is too long".into());
                        }
                        return Ok(());
                    };
                    self.line.extend_from_slice(&data[..newline]);
                    data = &data[newline + 1..];
                    let mut line = std::mem::take(&mut self.line);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    self.line_done(&line, &mut on_part)?;
                    line.clear();
                    self.line = line;
                }
                State::UntilClose => {
                    on_part(Part::Body(data));
                    return Ok(());
                }
                State::Done => {
                    self.extra = true;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn head<F: FnMut(Part<'_>)>(&mut self, head: &[u8], on_part: &mut F) -> Result<(), String> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err("incomplete head".into()),
            Err(e) => return Err(e.to_string()),
        }
        let status = response.code.unwrap_or(0);
        if (100..200).contains(&status) && status != 101 {
            return Ok(()); // an interim response (100 Continue): the real one follows
        }
        let mut content_type: &[u8] = b"";
        let mut length = None;
        let mut chunked = false;
        let mut close = response.version == Some(0);
        for header in response.headers.iter() {
            let name = header.name;
            if name.eq_ignore_ascii_case("content-type") {
                content_type = header.value;
            } else if name.eq_ignore_ascii_case("content-length") {
                let value = std::str::from_utf8(header.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or("a bad content-length")?;
                if length.is_some_and(|l| l != value) {
                    return Err("two content-lengths".into());
                }
                length = Some(value);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = header
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case("connection") {
                close |= header
                    .value
                    .split(|&b| b == b',')
                    .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
            }
        }
        self.keep_alive = !close;
        on_part(Part::Head {
            status,
            content_type,
            headers: &*response.headers,
        });
        self.state = if status == 204 || status == 304 {
            State::Done
        } else if chunked {
            State::ChunkSize
        } else if let Some(length) = length {
            State::Length(length)
        } else {
            self.keep_alive = false;
            State::UntilClose
        };
        if matches!(self.state, State::Done | State::Length(0)) {
            self.end(on_part);
        }
        Ok(())
    }

    fn line_done<F: FnMut(Part<'_>)>(
        &mut self,
        line: &[u8],
        on_part: &mut F,
    ) -> Result<(), String> {
        match self.state {
            State::ChunkSize => {
                let digits = line
                    .split(|&b| b == b';')
                    .next()
                    .unwrap_or(b"")
                    .trim_ascii();
                let size = std::str::from_utf8(digits)
                    .ok()
                    .filter(|d| !d.is_empty())
                    .and_then(|d| u64::from_str_radix(d, 16).ok())
                    .ok_or("a bad chunk size")?;
                self.state = if size == 0 {
                    State::Trailers
                } else {
                    State::ChunkData(size)
                };
            }
            State::ChunkEnd => {
                if !line.is_empty() {
                    return Err("a chunk's data is longer than its size".into());
                }
                self.state = State::ChunkSize;
            }
            State::Trailers => {
                if line.is_empty() {
                    self.end(on_part);
                } else {
                    on_part(Part::Trailer(line));
                }
            }
            _ => unreachable!("only line states come here"),
        }
        Ok(())
    }

    fn end<F: FnMut(Part<'_>)>(&mut self, on_part: &mut F) {
        self.state = State::Done;
        on_part(Part::End {
            keep_alive: self.keep_alive,
        });
    }

    /// The body bytes still to come of a body framed by its length (`Some(0)`: the response
    /// ended), `None` when the body's length is not known.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(left) => Some(left),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Bytes came after the response's end.
    pub fn had_extra(&self) -> bool {
        self.extra
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parts of `response` fed in two pieces split at `at`, body bytes joined.
    fn parts(response: &[u8], cuts: &[usize]) -> Result<(u16, Vec<u8>, Option<bool>), String> {
        let mut parser = ResponseParser::default();
        let (mut status, mut body, mut end) = (0, Vec::new(), None);
        let mut from = 0;
        for &to in cuts.iter().chain([response.len()].iter()) {
            parser.feed(&response[from..to], |part| match part {
                Part::Head { status: s, .. } => status = s,
                Part::Body(b) => body.extend_from_slice(b),
                Part::End { keep_alive } => end = Some(keep_alive),
                Part::Trailer(_) => {}
            })?;
            from = to;
        }
        Ok((status, body, end))
    }

    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
transfer-encoding: chunked\r\n\r\n5;ext=1\r\ndata:\r\n10\r\n 0123456789abcde\r\n0\r\nx-trailer: 1\r\n\r\n";

    #[test]
    fn chunked_body_split_at_every_byte() {
        let whole = parts(CHUNKED, &[]).unwrap();
        assert_eq!(whole, (200, b"data: 0123456789abcde".to_vec(), Some(true)));
        for a in 0..CHUNKED.len() {
            assert_eq!(parts(CHUNKED, &[a]).unwrap(), whole, "split at {a}");
            for b in a..CHUNKED.len() {
                assert_eq!(parts(CHUNKED, &[a, b]).unwrap(), whole, "split at {a}, {b}");
            }
        }
    }

    #[test]
    fn length_and_close_framed_bodies_and_interim_heads() {
        let response =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 500 Oops\r\ncontent-length: 4\r\n\r\nboom";
        for at in 0..response.len() {
            assert_eq!(
                parts(response, &[at]).unwrap(),
                (500, b"boom".to_vec(), Some(true))
            );
        }
        let closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(parts(closing, &[]).unwrap(), (200, vec![], Some(false)));
        let mut parser = ResponseParser::default();
        let mut body = Vec::new();
        parser
            .feed(b"HTTP/1.1 200 OK\r\n\r\nabc", |p| {
                if let Part::Body(b) = p {
                    body.extend_from_slice(b)
                }
            })
            .unwrap();
        assert!(!parser.is_fresh() && parser.close() && body == b"abc");
    }

    #[test]
    fn bad_framing_is_an_error() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nab\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/x 200 OK\r\n\r\n",
        ] {
            assert!(parts(bad, &[]).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
