//! WebSocket exchanges (`/v1/realtime` and any other upgrade): the client's handshake is
//! answered once upstream accepted its own (with upstream's chosen subprotocol), then messages
//! go both ways as they come; upstream's text messages also go to the Realtime tap.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{Connector, WebSocketStream};

use super::gateway::{
    error_body, finish, header_map, new_record, upstream_headers, ErrorText, Reply, RequestHead,
    Shared, NOT_UPSTREAM_WS,
};
use super::tap::{Protocol, StreamTap, TapError};

/// The path of the Realtime API.
const REALTIME_PATH: &str = "/v1/realtime";

/// Whether `req` asks for a WebSocket.
pub(crate) fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
        && req.headers().contains_key(header::SEC_WEBSOCKET_KEY)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None)
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    mut req: Request<Incoming>,
    started: Instant,
) -> Response<Reply> {
    let path = req.uri().path().to_owned();
    let realtime = path.trim_end_matches('/') == REALTIME_PATH;
    let protocol = realtime.then_some(Protocol::Realtime);
    let mut record = new_record(protocol, "WEBSOCKET", &path);
    let query = req.uri().query().unwrap_or("").to_owned();
    for pair in query.split('&') {
        if let Some(("model", value)) = pair.split_once('=') {
            if !value.is_empty() {
                record.model = Some(percent_decode(value));
            }
        }
    }
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |pq| pq.as_str().to_owned());
    let mut headers = upstream_headers(req.headers(), &NOT_UPSTREAM_WS);
    // `accept-encoding: identity` is for HTTP bodies only.
    headers.retain(|(n, _)| n != "accept-encoding");
    let subprotocols = req.headers().get(header::SEC_WEBSOCKET_PROTOCOL).cloned();
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| derive_accept_key(k.as_bytes()))
        .unwrap_or_default();
    let mut base = shared.base(None);
    if shared.hooks.has_on_request() {
        let head = RequestHead {
            method: "WEBSOCKET".to_owned(),
            path: path.clone(),
            query,
            protocol,
            model: record.model.clone(),
            headers: headers.clone(),
            body: bytes::Bytes::new(),
        };
        let hooks = shared.hooks.clone();
        let decision = tokio::task::spawn_blocking(move || hooks.on_request(head))
            .await
            .unwrap_or_default();
        record.caller = decision.caller;
        if let Some((status, reply, error)) = decision.reject {
            record.outcome = "rejected";
            record.status = status;
            record.error = Some(ErrorText::Text(error));
            finish(&shared, record, started);
            let mut response = Response::new(Reply::Whole(Some(reply.into())));
            *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return response;
        }
        if let Some(h) = decision.headers {
            headers = h;
        }
        if decision.upstream.is_some() {
            base = shared.base(decision.upstream.as_deref());
        }
    }
    let Some(base) = base else {
        return fail(&shared, record, started, 502, "no such upstream".to_owned());
    };
    let uri = match base.uri(&target, true) {
        Ok(uri) => uri,
        Err(e) => return fail(&shared, record, started, 400, e),
    };
    let mut request = match uri.into_client_request() {
        Ok(r) => r,
        Err(e) => return fail(&shared, record, started, 400, e.to_string()),
    };
    for (name, value) in header_map(&headers) {
        if let Some(name) = name {
            request.headers_mut().append(name, value);
        }
    }
    if let Some(protocols) = subprotocols {
        request
            .headers_mut()
            .insert(header::SEC_WEBSOCKET_PROTOCOL, protocols);
    }
    let mut tls = shared.tls.clone();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connecting = tokio_tungstenite::connect_async_tls_with_config(
        request,
        Some(ws_config()),
        true,
        Some(Connector::Rustls(Arc::new(tls))),
    );
    let connected = tokio::time::timeout(shared.config.connect_timeout, connecting).await;
    let (upstream, reply) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(WsError::Http(response))) => {
            let status = response.status().as_u16();
            return fail(
                &shared,
                record,
                started,
                status,
                format!("upstream refused the WebSocket: HTTP {status}"),
            );
        }
        Ok(Err(e)) => return fail(&shared, record, started, 502, format!("{e}")),
        Err(_) => {
            return fail(
                &shared,
                record,
                started,
                502,
                "TimeoutError: connecting".to_owned(),
            )
        }
    };
    record.ttfb = Some(started.elapsed().as_secs_f64());
    record.status = 101;
    let chosen = reply.headers().get(header::SEC_WEBSOCKET_PROTOCOL).cloned();
    let upgrade = hyper::upgrade::on(&mut req);
    let tapped = shared.config.tap && realtime;
    let shared2 = shared.clone();
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else {
            record.outcome = "client_gone";
            record.error = Some(ErrorText::Text(
                "the client left during the handshake".to_owned(),
            ));
            finish(&shared2, record, started);
            return;
        };
        let client = WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            Some(ws_config()),
        )
        .await;
        pump(shared2, record, started, client, upstream, tapped).await;
    });
    let mut response = Response::new(Reply::Whole(None));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&key) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(chosen) = chosen {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, chosen);
    }
    response
}

fn fail(
    shared: &Shared,
    mut record: super::gateway::Record,
    started: Instant,
    status: u16,
    message: String,
) -> Response<Reply> {
    record.outcome = "upstream_error";
    record.status = status;
    let kind = message.split(':').next().unwrap_or("error").to_owned();
    record.error = Some(ErrorText::Text(format!("upstream unreachable: {message}")));
    let protocol = record.protocol;
    finish(shared, record, started);
    let body = error_body(
        protocol,
        &format!("the upstream server refused or is unreachable ({kind})"),
        status,
    );
    let mut response = Response::new(Reply::Whole(Some(body.into())));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn pump<C, U>(
    shared: Arc<Shared>,
    mut record: super::gateway::Record,
    started: Instant,
    client: WebSocketStream<C>,
    upstream: WebSocketStream<U>,
    tapped: bool,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_client, mut from_client) = client.split();
    let (mut to_upstream, mut from_upstream) = upstream.split();
    let mut tap = tapped.then(|| StreamTap::new(Protocol::Realtime));
    // How the client closed (0: it did not), set before its close goes upstream.
    let client_closed = Arc::new(AtomicU32::new(0));
    let closed = client_closed.clone();
    // Upstream's side has ended: a close from the client then only answers ours.
    let upstream_ended = Arc::new(AtomicBool::new(false));
    let ended = upstream_ended.clone();
    // The client's messages, upstream: their own task.
    let mut client_side = tokio::spawn(async move {
        let mut upstream_open = true;
        while let Some(message) = from_client.next().await {
            match message {
                Ok(Message::Close(frame)) => {
                    let code = frame.as_ref().map_or(1000, |f| u16::from(f.code));
                    closed.store(u32::from(code), Ordering::SeqCst);
                    if !ended.load(Ordering::SeqCst) {
                        let _ = to_upstream.send(Message::Close(frame)).await;
                        let _ = to_upstream.close().await;
                    }
                    return;
                }
                Ok(message @ (Message::Text(_) | Message::Binary(_))) => {
                    // Upstream gone: its side says so. The client's messages are still read, and
                    // dropped, until its close answers ours (see CLOSE_WAIT).
                    if upstream_open
                        && !ended.load(Ordering::SeqCst)
                        && to_upstream.send(message).await.is_err()
                    {
                        upstream_open = false;
                    }
                }
                Ok(_) => {} // pings are answered by the library
                Err(_) => break,
            }
        }
        closed.store(1006, Ordering::SeqCst);
        if !ended.load(Ordering::SeqCst) {
            let _ = to_upstream.close().await;
        }
    });
    let mut code: u16 = 1006;
    let mut client_failed = false;
    while let Some(message) = from_upstream.next().await {
        match message {
            Ok(Message::Text(text)) => {
                record.chunks += 1;
                record.bytes += text.len() as u64;
                if let Some(tap) = tap.as_mut() {
                    let had_error = tap.error.is_some();
                    if tap.add_message(text.as_bytes()) && record.ttft.is_none() {
                        record.ttft = Some(started.elapsed().as_secs_f64());
                    }
                    if !had_error && record.error.is_none() {
                        if let Some(err) = &tap.error {
                            record.outcome = "bad_stream";
                            record.error = Some(match err {
                                TapError::Refused(r) => ErrorText::Tap(r.clone()),
                                TapError::Framing(t) => ErrorText::Text(t.clone()),
                            });
                        }
                    }
                }
                if to_client.send(Message::Text(text)).await.is_err() {
                    client_failed = true;
                    break;
                }
            }
            Ok(Message::Binary(data)) => {
                record.chunks += 1;
                record.bytes += data.len() as u64;
                if to_client.send(Message::Binary(data)).await.is_err() {
                    client_failed = true;
                    break;
                }
            }
            Ok(Message::Close(frame)) => {
                code = frame.as_ref().map_or(1005, |f| u16::from(f.code));
                if code == 1005 {
                    code = 1000;
                }
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    upstream_ended.store(true, Ordering::SeqCst);
    let client_code = match client_closed.load(Ordering::SeqCst) {
        0 => client_failed.then_some(1006),
        code => Some(code),
    };
    if let Some(client_code) = client_code {
        record.outcome = "client_gone";
        if record.error.is_none() || matches!(record.error, Some(ErrorText::Tap(_))) {
            record.error = Some(ErrorText::Text(format!(
                "the client closed the session (code {client_code})"
            )));
        }
    } else {
        if code != 1000 && code != 1001 {
            record.outcome = "upstream_cut";
            record.error = Some(ErrorText::Text(format!(
                "upstream ended the session with code {code}"
            )));
        }
        let sent = if code == 1006 { 1011 } else { code };
        let _ = to_client
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::from(sent),
                reason: "".into(),
            })))
            .await;
        let _ = to_client.close().await;
    }
    record.tap = tap.map(Box::new);
    finish(&shared, record, started);
    // The closing handshake: the connection is dropped once the client's side has read the
    // client's close (or its end), not before. Dropped with the client's messages unread, the
    // socket would answer with a reset, which can reach the client before our close frame does.
    if tokio::time::timeout(CLOSE_WAIT, &mut client_side)
        .await
        .is_err()
    {
        client_side.abort();
    }
}

/// How long a session's end waits for the client to answer its close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
