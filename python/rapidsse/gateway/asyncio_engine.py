"""The asyncio engine: the gateway as a pure ASGI app (:class:`Gateway`) served by uvicorn, with
aiohttp as the pooled upstream client.

Each request goes upstream (the configured upstream ``on_request`` picked, the default one
otherwise: the host never comes from the request) with its method, path, query, body and headers
(minus the hop-by-hop ones, and asking for an uncompressed body); the reply comes back with
upstream's status and headers, a streamed body chunk by chunk as it arrives, byte for byte. The
protocol is read from the path (:func:`rapidsse.integrations.protocol_for_path`: Responses, Chat,
Completions, Anthropic Messages, Gemini; anything else is forwarded untapped) and each chunk of an
event stream is also fed to the protocol's accumulator (``feed``: no Python object per event); a
JSON reply is read for its usage when it ends. ``/v1/realtime`` is proxied as a WebSocket both
ways, the server's messages going through :class:`~rapidsse.RealtimeAccumulator`.

When an exchange ends its :class:`~rapidsse.gateway.ExchangeRecord` goes to a
:class:`~rapidsse.gateway.hooks.Recorder`: counted in the metrics at once, handed to
``on_complete`` on the recorder's thread (never on the event loop).

Backpressure: a chunk is read from upstream only once the previous one was handed to the client's
connection, whose write buffer uvicorn bounds; upstream's reader holds at most ``2 *
read_buffer`` bytes before it stops reading the socket. Per stream the gateway so holds about
``2 * read_buffer`` plus the write buffer (~64 KiB): well under a MiB with the defaults.

Limits on the client's side: a request's header block over ``max_header_bytes`` is answered 431,
a connection that has not sent a whole header block within ``header_timeout`` seconds is closed
(both in :class:`GatewayHttpProtocol`, uvicorn's httptools protocol with those checks), a body
over ``max_body_bytes`` is answered 413 before upstream is contacted.

Needs the ``gateway`` extra (aiohttp, uvicorn, httptools, prometheus-client).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any, Union

import msgspec
from urllib.parse import unquote, urlsplit

from ..errors import SSEError
from ..integrations import protocol_for_path
from .hooks import GatewayRequest, OnRequest, Recorder, apply_on_request, parse_upstreams
from .metrics import Metrics
from .record import (ACCUMULATORS, REALTIME_PATH, ExchangeRecord, OnComplete, _has_output, _has_text,
                     describe_json_reply, describe_realtime, error_body, read_tap, requested_model)

__all__ = ["DEFAULT_HEADER_TIMEOUT", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_HEADER_BYTES", "Gateway",
           "GatewayHttpProtocol", "create_gateway", "upstream_ssl_context"]

logger = logging.getLogger("rapidsse.gateway")

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
"""A request's header block (request line and headers) past this many bytes is answered 431."""
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
"""A request body past this many bytes is answered 413 (before upstream is contacted)."""
DEFAULT_HEADER_TIMEOUT = 30.0
"""Seconds a client has to send a whole header block once its connection is open (or, on a kept
alive connection, once it started the next request)."""

# After a stream's first output, the tap is fed chunks in batches of about this many bytes (see
# Gateway._relay_stream): at most this plus one chunk is held per stream.
_TAP_BATCH = 4096


def upstream_ssl_context(upstream_ca: Union[str, None]) -> Union[ssl.SSLContext, None]:
    """The TLS context for https upstreams: the system's trust store plus the PEM file
    ``upstream_ca`` (a private CA); None (aiohttp's default) without one."""
    if upstream_ca is None:
        return None
    context = ssl.create_default_context()
    try:
        context.load_verify_locations(cafile=upstream_ca)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"upstream_ca: cannot load {upstream_ca!r} as PEM certificates ({exc})") from exc
    return context


# --- Headers --------------------------------------------------------------------------------------

_HOP_BY_HOP = frozenset((b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
                         b"trailer", b"trailers", b"transfer-encoding", b"upgrade", b"proxy-connection"))
# Not forwarded upstream either: the client's own connection's, and what the gateway sets itself.
_NOT_UPSTREAM = _HOP_BY_HOP | {b"host", b"content-length", b"accept-encoding"}
_NOT_UPSTREAM_WS = _NOT_UPSTREAM | {b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions",
                                    b"sec-websocket-protocol"}


def _named_in_connection(headers: Any) -> set[bytes]:
    """Header names the ``Connection`` header lists (hop-by-hop too, per RFC 9110)."""
    names: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b","))
    return names


def _upstream_headers(scope: Any, dropped: frozenset[bytes]) -> dict[str, str]:
    headers = scope["headers"]
    also = _named_in_connection(headers)
    out: dict[str, str] = {}
    for name, value in headers:
        name = name.lower()
        if name not in dropped and name not in also:
            key = name.decode("latin-1")
            text = value.decode("latin-1")
            out[key] = f"{out[key]}, {text}" if key in out else text
    out["accept-encoding"] = "identity"
    return out


def _reply_headers(raw: Any) -> list[tuple[bytes, bytes]]:
    also = _named_in_connection(raw)
    return [(name.lower(), value) for name, value in raw
            if name.lower() not in _HOP_BY_HOP and name.lower() not in also]


def _target(scope: Any) -> tuple[str, str, str]:
    """The request's path (decoded, for the protocol and the record), raw path and raw query
    (for upstream's URL). Only the path of the request target is used: an absolute-form target
    (``GET http://elsewhere/v1/x``, which uvicorn's h11 protocol passes on whole) gives its path,
    and the host it names is ignored, as is the ``Host`` header; upstream's host is the
    configuration's."""
    raw = scope.get("raw_path") or scope["path"].encode("utf-8")
    path = scope["path"]
    if not raw.startswith(b"/"):
        if raw == b"*":
            return "*", "*", ""
        parts = urlsplit(raw.decode("latin-1"))
        raw_text = parts.path or "/"
        return unquote(raw_text), raw_text, (scope.get("query_string") or b"").decode("latin-1")
    return path, raw.decode("latin-1"), (scope.get("query_string") or b"").decode("latin-1")


# --- The client's side: uvicorn's httptools protocol with a header size cap and a header timeout ---

try:
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HttpToolsProtocol
except ImportError:  # without httptools the gateway runs on uvicorn's h11 protocol: see _uvicorn_config
    httptools = None
    _HttpToolsProtocol = None  # type: ignore[assignment,misc]

if _HttpToolsProtocol is not None:

    class GatewayHttpProtocol(_HttpToolsProtocol):  # type: ignore[valid-type,misc]
        """uvicorn's httptools protocol with two limits of the gateway's: a header block over
        ``max_header_bytes`` is answered 431 (counted as it comes, so a client cannot make the
        gateway buffer an endless one), and a connection that has not completed its header block
        ``header_timeout`` seconds after it opened (or after its previous response, once it sent
        a byte of the next request) is closed. The limits are the config's ``gateway_limits``
        (set by :func:`_uvicorn_config`). (A request with both ``Content-Length`` and
        ``Transfer-Encoding``, or two ``Content-Length`` values, is refused by llhttp itself:
        uvicorn answers 400.)"""

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            limits = getattr(config, "gateway_limits", None) or (DEFAULT_MAX_HEADER_BYTES, DEFAULT_HEADER_TIMEOUT)
            self._max_head, self._head_timeout = limits
            self._in_head = True  # no header block completed since the connection or the last response
            self._head_seen = 0  # bytes received while in a header block (may count some body too)
            self._head_size = 0  # the header block's size, counted from the parser's callbacks
            self._head_timer: Any = None
            self._too_large = False

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_timer()

        def connection_lost(self, exc: Union[Exception, None]) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            if self._head_timeout and self._head_timer is None:
                self._head_timer = self.loop.call_later(self._head_timeout, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._in_head and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._too_large:
                return
            self._unset_keepalive_if_required()
            in_head = self._in_head
            if in_head:
                self._head_seen += len(data)
                self._arm_head_timer()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            except httptools.HttpParserError:
                if self._too_large:
                    self._send_431()
                    return
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
                return
            if self._in_head and self._head_seen > self._max_head:
                self._too_large = True
                self._send_431()

        def _send_431(self) -> None:
            self._disarm_head_timer()
            body = error_body(None, f"the request's header block is over {self._max_head} bytes", 431)
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
            self.transport.close()

        def on_message_begin(self) -> None:
            self._head_size = 0
            self._in_head = True
            self._arm_head_timer()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._head_size += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_size += len(name) + len(value) + 4
            if self._head_size > self._max_head:
                self._too_large = True
                raise ValueError("header block too large")  # stops the parser: answered 431
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._disarm_head_timer()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._in_head = True
            self._head_seen = 0
else:  # pragma: no cover
    GatewayHttpProtocol = None  # type: ignore[assignment,misc]


def _uvicorn_config(app: Any, *, log_level: str, grace: float, max_header_bytes: int, header_timeout: float,
                    **more: Any) -> Any:
    """uvicorn's config for the gateway: the gateway's protocol (its limits in ``gateway_limits``),
    no access log, no server or date header, no proxy headers trusted."""
    import uvicorn

    if GatewayHttpProtocol is not None:
        http: Any = GatewayHttpProtocol
        extra: dict[str, Any] = {}
    else:  # h11: its own cap on an incomplete header block; no header timeout
        http = "h11"
        extra = {"h11_max_incomplete_event_size": max_header_bytes}
    config = uvicorn.Config(app, http=http, log_level=log_level, access_log=False, server_header=False,
                            date_header=False, proxy_headers=False, backlog=4096, log_config=None,
                            timeout_graceful_shutdown=grace, **extra, **more)
    config.gateway_limits = (max_header_bytes, header_timeout)
    return config


class _Exchange:
    """The state one HTTP exchange shares with the task that watches its client and with the
    gateway's read-timeout watchdog."""

    __slots__ = ("task", "done", "gone", "waiting", "upstream", "timed_out")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.done = False
        self.gone = False
        # Since when (time.monotonic()) the exchange has been waiting on upstream (for its reply's
        # headers or the next chunk); 0.0 while it is not (it is sending to the client, or done).
        self.waiting = 0.0
        self.upstream: Any = None  # upstream's reply once its headers came
        self.timed_out = False

    async def watch(self, receive: Any) -> None:
        # After the request body, uvicorn's receive() returns only when the client disconnects
        # (or the response completes, which cancels this first).
        message = await receive()
        if message["type"] == "http.disconnect" and not self.done:
            self.gone = True
            self.task.cancel()


class Gateway:
    """The ASGI app of :func:`create_gateway`."""

    def __init__(self, upstream: Union[str, dict[str, str]], *, on_request: Union[OnRequest, None] = None,
                 on_complete: Union[OnComplete, None] = None, tap: bool = True, metrics: bool = True,
                 serve_metrics: bool = True, read_timeout: float = 300.0, connect_timeout: float = 10.0,
                 max_connections: int = 10_000, read_buffer: int = 64 * 1024, max_json_reply: int = 16 * 1024 * 1024,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, upstream_ca: Union[str, None] = None,
                 max_pending: int = 10_000) -> None:
        try:
            import aiohttp  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"the gateway needs aiohttp ({exc}); install it with pip install 'rapidsse[gateway]'") \
                from exc
        self.upstreams = parse_upstreams(upstream)
        self.upstream_url = next(iter(self.upstreams.values()))  # the default upstream
        self.on_request = on_request
        self.tap = tap
        self.metrics = Metrics() if metrics else None
        self.serve_metrics = serve_metrics and self.metrics is not None
        self.recorder = Recorder(self.metrics, on_complete, max_pending=max_pending)
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.read_buffer = read_buffer
        self.max_json_reply = max_json_reply
        self.max_body_bytes = max_body_bytes
        self.ssl_context = upstream_ssl_context(upstream_ca)
        self._session: Any = None
        self._request_timeout: Any = None
        # The read-timeout watchdog: the HTTP exchanges in flight, and one timer on the loop that
        # looks at them every ``_tick`` seconds (instead of aiohttp's sock_read timer, cancelled
        # and re-armed on every chunk received).
        self._inflight: set[_Exchange] = set()
        self._watchdog: Any = None
        self._watchdog_loop: Any = None
        self._tick = min(1.0, max(read_timeout / 10, 0.005)) if read_timeout else 0.0

    @property
    def on_complete(self) -> OnComplete:
        return self.recorder.on_complete

    # The upstream client: one pooled aiohttp session per worker (per event loop).

    def _client(self) -> Any:
        session = self._session
        if session is None or session.closed:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300,
                                             ssl=self.ssl_context if self.ssl_context is not None else True)
            timeout = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout, sock_read=self.read_timeout)
            session = self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, auto_decompress=False, read_bufsize=self.read_buffer,
                skip_auto_headers=("User-Agent", "Accept"), cookie_jar=aiohttp.DummyCookieJar())
            # HTTP requests: no sock_read timer of aiohttp's (the watchdog does it); WebSocket
            # handshakes keep the session's.
            self._request_timeout = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout, sock_read=None)
        return session

    # The read timeout: upstream silent for ``read_timeout`` seconds while an exchange waits on it.

    def _track(self, exchange: _Exchange, loop: asyncio.AbstractEventLoop) -> None:
        self._inflight.add(exchange)
        if self._tick and (self._watchdog is None or self._watchdog_loop is not loop):
            self._watchdog_loop = loop
            self._watchdog = loop.call_later(self._tick, self._look)

    def _look(self) -> None:
        """The watchdog's tick: an exchange that has waited on upstream for ``read_timeout``
        seconds is cut. Waiting on the client (its backpressure) does not count: ``waiting`` is
        0.0 then. A reply's reader gets the timeout as its exception (what was received before
        is still read and forwarded first); a request still waiting for the reply's headers is
        cancelled."""
        now = time.monotonic()
        limit = self.read_timeout
        for exchange in self._inflight:
            since = exchange.waiting
            if since and now - since >= limit and not exchange.timed_out and not exchange.done:
                exchange.timed_out = True
                upstream = exchange.upstream
                if upstream is not None:
                    import aiohttp

                    upstream.content.set_exception(
                        aiohttp.SocketTimeoutError(f"upstream sent nothing for {limit:g} s"))
                else:
                    exchange.task.cancel()
        loop = self._watchdog_loop
        self._watchdog = loop.call_later(self._tick, self._look) if self._inflight and not loop.is_closed() else None

    async def aclose(self) -> None:
        """Closes the upstream connections (done at the server's shutdown)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.serve_metrics and scope["path"] == "/metrics" and scope["method"] == "GET":
                await self._send_metrics(send)
            else:
                await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._client()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _send_metrics(self, send: Any) -> None:
        assert self.metrics is not None
        body = self.metrics.exposition()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", self.metrics.content_type), (b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    def _url(self, raw_path: str, query: str, upstream: Union[str, None]) -> Any:
        """Upstream's URL: the chosen configured upstream's base URL, then the request's raw path
        and query (never a host of the request's)."""
        from yarl import URL

        base = self.upstreams[upstream] if upstream is not None else self.upstream_url
        return URL(base + raw_path + ("?" + query if query else ""), encoded=True)

    def _finish(self, record: ExchangeRecord, accumulator: Any, started: float) -> None:
        record.duration = time.monotonic() - started
        self.recorder.submit(record, accumulator)

    def _hook(self, request: GatewayRequest, record: ExchangeRecord) -> Union[tuple[int, bytes], None]:
        """Runs ``on_request``; the status and body to answer with when the request is rejected
        (the record then says so)."""
        verdict = apply_on_request(self.on_request, request, self.upstreams)
        record.caller = request.caller if isinstance(request.caller, str) else None
        if verdict is None:
            return None
        reject, error = verdict
        record.outcome, record.status, record.error = "rejected", reject.status, error
        return reject.status, error_body(record.protocol, reject.message, reject.status)

    @staticmethod
    async def _answer(send: Any, status: int, body: bytes, close: bool = False) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _http(self, scope: Any, receive: Any, send: Any) -> None:
        import aiohttp

        started = time.monotonic()
        path, raw_path, query = _target(scope)
        protocol = protocol_for_path(path, default=None)
        record = ExchangeRecord(protocol=protocol, method=scope["method"], path=path)
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
                return await self._too_large(send, record, started, f"Content-Length {int(value)}")
        parts = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                record.outcome, record.error = "client_gone", "the client left before its request was read"
                return self._finish(record, None, started)
            part = message.get("body", b"")
            size += len(part)
            if size > limit:
                return await self._too_large(send, record, started, f"more than {limit} bytes")
            parts.append(part)
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        del parts
        record.model = requested_model(protocol, path, body)
        request = GatewayRequest(scope["method"], path, query, protocol, record.model, body,
                                 _upstream_headers(scope, _NOT_UPSTREAM))
        rejected = self._hook(request, record)
        if rejected is not None:
            await self._answer(send, *rejected)
            return self._finish(record, None, started)
        task = asyncio.current_task()
        assert task is not None
        exchange = _Exchange(task)
        loop = asyncio.get_running_loop()
        watcher = loop.create_task(exchange.watch(receive))
        self._track(exchange, loop)
        upstream = None
        accumulator = None
        try:
            try:
                upstream = await self._reply(aiohttp, scope["method"], self._url(raw_path, query, request.upstream),
                                             body, request.headers, exchange)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                record.outcome, record.status = "upstream_error", 502
                record.error = f"upstream unreachable: {type(exc).__name__}: {exc}"
                exchange.done = True
                watcher.cancel()
                reply = error_body(protocol, f"the upstream server is unreachable ({type(exc).__name__})")
                await self._answer(send, 502, reply)
                return self._finish(record, None, started)
            record.ttfb = time.monotonic() - started
            record.status = status = upstream.status
            media_type = upstream.content_type
            await send({"type": "http.response.start", "status": status,
                        "headers": _reply_headers(upstream.raw_headers)})
            tapping = self.tap and protocol is not None
            if tapping and media_type == "text/event-stream":
                accumulator = ACCUMULATORS[protocol](on_error="raise")
                complete = await self._relay_stream(upstream, send, record, exchange, accumulator, started)
            else:
                whole = tapping and media_type == "application/json" and status < 300
                complete = await self._relay(upstream, send, record, exchange, whole)
            exchange.done = True
            watcher.cancel()
            if complete:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                if status >= 400 and record.outcome == "complete":
                    record.outcome, record.error = "upstream_error", f"upstream answered HTTP {status}"
            # else: the ASGI call returns without completing the response: the server closes the
            # client's connection, which so sees the cut too (nothing is invented)
        except asyncio.CancelledError:
            if not exchange.gone:
                raise  # the server is shutting down
            uncancel = getattr(task, "uncancel", None)
            if uncancel is not None:
                uncancel()
            record.outcome, record.error = "client_gone", "the client disconnected"
        finally:
            exchange.done = True
            watcher.cancel()
            self._inflight.discard(exchange)
            if upstream is not None:
                if record.outcome == "complete" or (record.outcome in ("bad_stream", "upstream_error")
                                                    and upstream.content.at_eof()):
                    upstream.release()
                else:
                    upstream.close()  # at once: upstream sees its client (this gateway) leave
        if accumulator is not None:
            read_tap(record, protocol, accumulator)
        self._finish(record, accumulator, started)

    async def _too_large(self, send: Any, record: ExchangeRecord, started: float, what: str) -> None:
        """A body over ``max_body_bytes``: 413 (the connection closed: the rest is not read)."""
        message = f"the request body is over the gateway's limit of {self.max_body_bytes} bytes"
        record.outcome, record.status, record.error = "rejected", 413, f"{message} ({what})"
        await self._answer(send, 413, error_body(record.protocol, message, 413), close=True)
        self._finish(record, None, started)

    async def _reply(self, aiohttp: Any, method: str, url: Any, body: bytes, headers: dict[str, str],
                     exchange: _Exchange) -> Any:
        """Upstream's reply to the request (its headers); ``asyncio.TimeoutError`` when upstream
        sent none for ``read_timeout`` seconds (the watchdog cancelled the wait)."""
        exchange.waiting = time.monotonic()
        try:
            upstream = await self._request(aiohttp, method, url, body, headers)
        except asyncio.CancelledError:
            if not exchange.timed_out or exchange.gone:
                raise
            uncancel = getattr(asyncio.current_task(), "uncancel", None)
            if uncancel is not None:
                uncancel()
            raise asyncio.TimeoutError(f"upstream sent no reply for {self.read_timeout:g} s") from None
        finally:
            exchange.waiting = 0.0
        exchange.upstream = upstream
        return upstream

    async def _request(self, aiohttp: Any, method: str, url: Any, body: bytes, headers: dict[str, str]) -> Any:
        """Sends the request upstream, once more when a pooled connection turned out closed by
        upstream as the request was written on it (``ClientOSError`` "Can not write request
        body": the request never reached it). Seen at hundreds of concurrent streams, where a
        connection goes back to the pool just as upstream closes it; a refused connect is not
        sent again."""
        def send() -> Any:
            return self._client().request(method, url, data=body or None, headers=headers,
                                          allow_redirects=False, timeout=self._request_timeout)

        try:
            return await send()
        except aiohttp.ClientConnectorError:
            raise
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            return await send()

    async def _relay_stream(self, upstream: Any, send: Any, record: ExchangeRecord, exchange: _Exchange,
                            accumulator: Any, started: float) -> bool:
        """Forwards an event stream chunk by chunk and feeds it to ``accumulator``; False when
        upstream cut it (``record`` says how).

        Until the first output (for the time to first token) each chunk is fed as it comes; from
        then on chunks are fed in batches of about ``_TAP_BATCH`` bytes (and what is left when
        the stream ends, however it ends), each chunk still on its own and in order, so the
        accumulator ends the same. A stream at a few dozen chunks a second wakes the process per
        chunk, and the tap's code and data are then cold: one chunk cost the feed ~30 µs cold
        against ~1 µs warm; a batch pays the cold start once."""
        import aiohttp

        read = upstream.content.read
        most = self.read_buffer
        feed = accumulator.feed
        core = accumulator._core
        # Until the first output: the accumulator's event count when it was last looked at.
        seen = 0 if record.protocol is not None else -1
        pending: list[bytes] = []  # forwarded, not fed yet (only after the first output)
        held = 0
        monotonic = time.monotonic
        chunks = size = 0
        try:
            while True:
                exchange.waiting = monotonic()
                chunk = await read(most)
                exchange.waiting = 0.0
                if not chunk:
                    return True
                chunks += 1
                size += len(chunk)
                if feed is not None:
                    if seen >= 0:
                        feed = self._feed(record, feed, chunk)
                        if feed is not None:
                            seen = self._first_output(record, core, seen, started)
                    else:
                        pending.append(chunk)
                        held += len(chunk)
                        if held >= _TAP_BATCH:
                            feed = self._feed_all(record, feed, pending)
                            held = 0
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            if feed is not None:  # what came before the cut first, as if fed chunk by chunk
                feed = self._feed_all(record, feed, pending)
            record.outcome = "upstream_cut"
            record.error = (f"upstream sent nothing for {self.read_timeout:g} s"
                            if isinstance(exc, asyncio.TimeoutError) else
                            f"upstream cut the stream: {type(exc).__name__}: {exc}")
            return False
        finally:
            record.chunks, record.bytes = chunks, size
            if pending and feed is not None:  # the end, or the client left
                self._feed_all(record, feed, pending)

    @classmethod
    def _feed_all(cls, record: ExchangeRecord, feed: Any, pending: list[bytes]) -> Any:
        """Feeds the held chunks in order and forgets them; returns ``feed`` (None once the tap
        failed)."""
        for chunk in pending:
            feed = cls._feed(record, feed, chunk)
            if feed is None:
                break
        pending.clear()
        return feed

    @staticmethod
    def _feed(record: ExchangeRecord, feed: Any, chunk: bytes) -> Any:
        """Feeds one chunk to the tap; returns ``feed``, or None once the tap failed (it never
        breaks the forwarding: the stream is then recorded bad and fed no more)."""
        try:
            feed(chunk)
        except SSEError as exc:
            if record.error is None:
                record.outcome, record.error = "bad_stream", f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            logger.exception("the tap failed on %s", record.path)
            record.outcome, record.error = "bad_stream", f"the tap failed: {type(exc).__name__}: {exc}"
            return None
        return feed

    @staticmethod
    def _first_output(record: ExchangeRecord, core: Any, seen: int, started: float) -> int:
        """Stamps ``record.ttft`` when the accumulator's core first holds output; returns -1 once
        it has (nothing more to look at), else the event count looked at. (Whether the result
        fits its schema is the end of the stream's to say, in :func:`read_tap`.)"""
        events = core.events()
        if events == seen:
            return seen
        protocol = record.protocol
        assert protocol is not None
        if _has_output(protocol, core.snapshot_json()):
            record.ttft = time.monotonic() - started
            return -1
        return events

    async def _relay(self, upstream: Any, send: Any, record: ExchangeRecord, exchange: _Exchange,
                     whole: bool) -> bool:
        """Forwards a body that is not tapped as a stream; with ``whole``, keeps a JSON reply (up to
        ``max_json_reply`` bytes) to read its usage at the end."""
        import aiohttp

        read = upstream.content.read
        most = self.read_buffer
        kept: Union[list[bytes], None] = [] if whole else None
        monotonic = time.monotonic
        chunks = size = 0
        try:
            while True:
                exchange.waiting = monotonic()
                chunk = await read(most)
                exchange.waiting = 0.0
                if not chunk:
                    break
                chunks += 1
                size += len(chunk)
                if kept is not None:
                    kept.append(chunk)
                    if size > self.max_json_reply:
                        kept = None
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            record.outcome, record.error = "upstream_cut", f"upstream cut the reply: {type(exc).__name__}: {exc}"
            return False
        finally:
            record.chunks, record.bytes = chunks, size
        if kept is not None:
            protocol = record.protocol
            assert protocol is not None
            describe_json_reply(record, protocol, b"".join(kept))
        return True

    # --- Realtime: a WebSocket both ways ---

    async def _websocket(self, scope: Any, receive: Any, send: Any) -> None:
        import aiohttp

        from ..accumulate import RealtimeAccumulator

        started = time.monotonic()
        path, raw_path, query = _target(scope)
        tapped = self.tap and path.rstrip("/") == REALTIME_PATH
        record = ExchangeRecord(protocol="realtime" if path.rstrip("/") == REALTIME_PATH else None,
                                method="WEBSOCKET", path=path)
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            if name == "model" and value:
                record.model = unquote(value)
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        request = GatewayRequest("WEBSOCKET", path, query, record.protocol, record.model, b"",
                                 _upstream_headers(scope, _NOT_UPSTREAM_WS))
        rejected = self._hook(request, record)
        if rejected is not None:
            if "websocket.http.response" in (scope.get("extensions") or {}):
                status, reply = rejected
                await send({"type": "websocket.http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "websocket.http.response.body", "body": reply})
            else:
                await send({"type": "websocket.close", "code": 1008})
            return self._finish(record, None, started)
        accumulator = RealtimeAccumulator(on_error="raise") if tapped else None
        try:
            upstream = await self._client().ws_connect(
                self._url(raw_path, query, request.upstream), headers=request.headers,
                protocols=tuple(scope.get("subprotocols") or ()), autoping=True, max_msg_size=0,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10.0))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            record.outcome, record.status = "upstream_error", 502
            record.error = f"upstream unreachable: {type(exc).__name__}: {exc}"
            status = exc.status if isinstance(exc, aiohttp.WSServerHandshakeError) else 502
            record.status = status
            if "websocket.http.response" in (scope.get("extensions") or {}):
                reply = error_body("realtime", f"the upstream server refused or is unreachable ({type(exc).__name__})",
                                   status)
                await send({"type": "websocket.http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "websocket.http.response.body", "body": reply})
            else:
                await send({"type": "websocket.close", "code": 1011})
            return self._finish(record, None, started)
        record.ttfb = time.monotonic() - started
        record.status = 101
        await send({"type": "websocket.accept", "subprotocol": upstream.protocol})
        client_closed: list[int] = []

        async def from_client() -> None:
            while True:
                message = await receive()
                if message["type"] == "websocket.receive":
                    text = message.get("text")
                    if text is not None:
                        await upstream.send_str(text)
                    else:
                        await upstream.send_bytes(message.get("bytes") or b"")
                elif message["type"] == "websocket.disconnect":
                    client_closed.append(message.get("code", 1000))
                    await upstream.close(code=message.get("code", 1000))
                    return

        pump = asyncio.get_running_loop().create_task(from_client())
        code = 1000
        try:
            async for message in upstream:
                if message.type == aiohttp.WSMsgType.TEXT:
                    data = message.data
                    raw = data.encode("utf-8", "surrogatepass")
                    record.chunks += 1
                    record.bytes += len(raw)
                    if accumulator is not None:
                        try:
                            accumulator.feed(raw)
                        except SSEError as exc:
                            if record.error is None:
                                record.outcome, record.error = "bad_stream", f"{type(exc).__name__}: {exc}"
                        if record.ttft is None and any(_has_text(msgspec.to_builtins(r.output))
                                                       for r in accumulator.responses.values()):
                            record.ttft = time.monotonic() - started
                    await send({"type": "websocket.send", "text": data})
                elif message.type == aiohttp.WSMsgType.BINARY:
                    record.chunks += 1
                    record.bytes += len(message.data)
                    await send({"type": "websocket.send", "bytes": message.data})
            code = upstream.close_code if upstream.close_code is not None else 1006
        except Exception as exc:  # the client's side failed while sending: it is gone
            if not client_closed:
                client_closed.append(1006)
            record.error = f"{type(exc).__name__}: {exc}"
        finally:
            pump.cancel()
            if not upstream.closed:
                await upstream.close()
        if client_closed:
            record.outcome = "client_gone"
            record.error = record.error or f"the client closed the session (code {client_closed[0]})"
        else:
            if code not in (1000, 1001):
                record.outcome, record.error = "upstream_cut", f"upstream ended the session with code {code}"
            try:
                await send({"type": "websocket.close", "code": code if code != 1006 else 1011})
            except Exception:
                pass  # the client left meanwhile
        if accumulator is not None:
            record.events = accumulator.events
            record.warnings = list(accumulator.warnings)
            describe_realtime(record, accumulator)
        self._finish(record, accumulator, started)




def create_gateway(upstream_url: Union[str, dict[str, str]], *, on_complete: Union[OnComplete, None] = None,
                   tap: bool = True, metrics: bool = True, read_timeout: float = 300.0,
                   connect_timeout: float = 10.0, max_connections: int = 10_000, read_buffer: int = 64 * 1024,
                   on_request: Union[OnRequest, None] = None, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                   max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, upstream_ca: Union[str, None] = None,
                   serve_metrics: bool = True, max_pending: int = 10_000) -> Gateway:
    """The asyncio engine's gateway as an ASGI app, forwarding every request to ``upstream_url``
    (a base URL such as ``https://api.openai.com``: the request's path and query are appended), or
    to one of several upstreams ``{name: url}`` (the first the default; ``on_request`` picks
    another by setting ``request.upstream``).

    ``on_request(request)`` (a :class:`~rapidsse.gateway.GatewayRequest`) runs once per exchange
    before upstream is contacted: it may edit the headers that go upstream, pick the upstream, set
    the caller, or return a :class:`~rapidsse.gateway.Reject`. ``on_complete(record, accumulator)``
    is called once per exchange after its reply ended, on a thread of its own (an exception there
    is logged, never seen by a client); the default is :func:`~rapidsse.gateway.log_record`.
    ``tap=False`` forwards the same way with no accumulator. ``metrics``: count the exchanges in
    Prometheus metrics, served at ``GET /metrics`` unless ``serve_metrics=False``.
    ``read_timeout``: seconds upstream may stay silent before the exchange is cut
    (``upstream_cut``). ``max_connections``: the upstream connection pool (one per concurrent
    stream). ``read_buffer``: bytes of upstream's body read ahead per stream (the reader stops
    reading the socket past twice that). ``max_body_bytes``: a larger request body is answered 413.
    ``upstream_ca``: a PEM file of a private CA trusted for https upstreams. ``max_header_bytes``
    is enforced by the server's protocol (:class:`GatewayHttpProtocol`, which
    :func:`rapidsse.gateway.start` uses), not by the app: it is accepted here for the signature's
    sake and kept as ``app.max_header_bytes``.

    >>> app = create_gateway("http://127.0.0.1:8000", on_complete=lambda record, acc: print(record.tokens))
    """
    app = Gateway(upstream_url, on_request=on_request, on_complete=on_complete, tap=tap, metrics=metrics,
                  serve_metrics=serve_metrics, read_timeout=read_timeout, connect_timeout=connect_timeout,
                  max_connections=max_connections, read_buffer=read_buffer, max_body_bytes=max_body_bytes,
                  upstream_ca=upstream_ca, max_pending=max_pending)
    app.max_header_bytes = max_header_bytes
    return app


# --- Running it: uvicorn in a thread of its own ------------------------------------------------------


class AsyncioServer:
    """The asyncio engine serving a :class:`Gateway` with uvicorn (one event loop) in a daemon
    thread: what :func:`rapidsse.gateway.start` returns for ``engine="asyncio"``. ``address`` is
    ``(host, port)`` (the port bound, also for ``port=0``), ``url`` is ``http://host:port``;
    ``metrics_address`` is where ``/metrics`` is served when ``metrics_port`` was given.
    :meth:`stop` stops accepting, lets the exchanges in flight finish within ``grace`` seconds
    (then cuts them) and hands the last records to ``on_complete``. A context manager."""

    engine = "asyncio"

    def __init__(self, app: Gateway, *, host: str = "127.0.0.1", port: int = 8080,
                 metrics_port: Union[int, None] = None, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                 header_timeout: float = DEFAULT_HEADER_TIMEOUT, grace: float = 10.0, log_level: str = "info") -> None:
        self.app = app
        self.host = host
        self.port = port
        self.metrics_port = metrics_port
        self.max_header_bytes = max_header_bytes
        self.header_timeout = header_timeout
        self.grace = grace
        self.log_level = log_level
        self.metrics_address: Union[tuple[str, int], None] = None
        self._server: Any = None
        self._thread: Any = None
        self._metrics_server: Any = None

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> AsyncioServer:
        """Binds the port, starts uvicorn (and the metrics port) and waits until it accepts
        connections; raises ``OSError`` when the address cannot be had."""
        import threading

        import uvicorn

        from ..serving.serve import _bind

        sock = _bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        if self.metrics_port is not None:
            try:
                self._start_metrics()
            except BaseException:
                sock.close()
                raise
        config = _uvicorn_config(self.app, log_level=self.log_level, grace=self.grace,
                                 max_header_bytes=self.max_header_bytes, header_timeout=self.header_timeout)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"rapidsse-gateway:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                self._stop_metrics()
                raise RuntimeError(f"the gateway on {self.url} failed to start (see the log)")
            if time.monotonic() > deadline:
                self.stop(0)
                raise TimeoutError(f"the gateway on {self.url} did not start within {timeout} s")
            time.sleep(0.005)
        return self

    def _start_metrics(self) -> None:
        if self.app.metrics is None:
            raise ValueError("metrics_port needs metrics=True")
        import prometheus_client

        server, _ = prometheus_client.start_http_server(self.metrics_port, addr=self.host,
                                                        registry=self.app.metrics.exposition_registry())
        self._metrics_server = server
        self.metrics_address = (self.host, server.server_port)

    def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None

    def stop(self, grace: Union[float, None] = None) -> None:
        """Stops accepting connections, waits up to ``grace`` seconds (default: the one given at
        the start) for the exchanges in flight, cuts those left, and lets ``on_complete`` have
        the last records (bounded)."""
        if self._server is None or self._thread is None:
            return
        grace = self.grace if grace is None else grace
        self._server.config.timeout_graceful_shutdown = grace
        self._server.should_exit = True
        self._thread.join(grace + 10)
        self._server = self._thread = None
        self._stop_metrics()
        self.app.recorder.close(max(grace, 5.0))

    def __enter__(self) -> AsyncioServer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
