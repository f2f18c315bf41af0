"""A streaming LLM gateway: forwards every request to one upstream untouched, and accounts for each
exchange with rapidsse's tap.

``create_gateway(upstream_url)`` returns a pure ASGI app; ``rapidsse gateway --upstream URL`` runs
it under uvicorn. Each request goes upstream with its method, path, query, body and headers (minus
the hop-by-hop ones, and asking for an uncompressed body); the reply comes back with upstream's
status and headers, a streamed body chunk by chunk as it arrives, byte for byte. The protocol is
read from the path (:func:`rapidsse.integrations.protocol_for_path`: Responses, Chat, Completions,
Anthropic Messages, Gemini; anything else is forwarded untapped) and each chunk of an event stream
is also fed to the protocol's accumulator (``feed``: no Python object per event); a JSON reply is
read for its usage when it ends. ``/v1/realtime`` is proxied as a WebSocket both ways, the
server's messages going through :class:`~rapidsse.RealtimeAccumulator`.

When an exchange ends, one :class:`ExchangeRecord` (protocol, model, status, outcome, timings,
chunks, tokens, finish reason, the tap's warnings) goes to ``on_complete(record, accumulator)``
(default: one JSON line on the ``rapidsse.gateway`` logger) and to the Prometheus metrics served at
``GET /metrics``.

Outcomes (:data:`OUTCOMES`): ``complete``; ``client_gone`` (the client left: the upstream request
is closed at once); ``upstream_cut`` (upstream closed the stream early, or sent nothing for
``read_timeout`` seconds: the client gets every byte received, then its connection is closed, so
it sees a cut too); ``upstream_error`` (upstream unreachable: a 502 with a JSON error in the
protocol's own shape; or upstream answered with an HTTP error status, forwarded as is);
``bad_stream`` (the tap could not read the stream: it was still forwarded untouched).

Backpressure: a chunk is read from upstream only once the previous one was handed to the client's
connection, whose write buffer uvicorn bounds; upstream's reader holds at most ``2 *
read_buffer`` bytes before it stops reading the socket. Per stream the gateway so holds about
``2 * read_buffer`` plus the write buffer (~64 KiB): well under a MiB with the defaults.

Needs the ``gateway`` extra (aiohttp, uvicorn, prometheus-client).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, Union

import msgspec

from . import anthropic, chat, completions, gemini, responses
from ._schema import decode_lenient
from .accumulate import (AnthropicAccumulator, ChatAccumulator, CompletionsAccumulator, GeminiAccumulator,
                         RealtimeAccumulator, ResponseAccumulator)
from .errors import SSEError
from .integrations import protocol_for_path

__all__ = ["OUTCOMES", "ExchangeRecord", "Tokens", "create_gateway", "log_record", "register"]

logger = logging.getLogger("rapidsse.gateway")

OUTCOMES = ("complete", "client_gone", "upstream_cut", "upstream_error", "bad_stream")
"""How an exchange can end (:attr:`ExchangeRecord.outcome`)."""

REALTIME_PATH = "/v1/realtime"


class Tokens(msgspec.Struct, frozen=True):
    """Token counts of one exchange as upstream reported them, in one convention for every
    protocol: ``input`` includes the cached tokens, ``output`` includes the reasoning tokens.
    A count upstream did not send is ``None``.

    Anthropic's ``input_tokens`` leave out the cache reads and writes, so ``input`` is their sum;
    Gemini's ``candidatesTokenCount`` leaves out the thoughts, so ``output`` adds
    ``thoughtsTokenCount`` (and ``input`` adds ``toolUsePromptTokenCount``). A Realtime session
    adds up the usage of its responses."""

    input: Union[int, None] = None
    output: Union[int, None] = None
    cached: Union[int, None] = None
    reasoning: Union[int, None] = None


class ExchangeRecord(msgspec.Struct):
    """One request and its reply, as the gateway saw them.

    Times are seconds from the request's arrival: ``ttfb`` to upstream's status line and
    headers, ``ttft`` to the first chunk that brought output (text, refusal, reasoning or tool
    arguments; ``None`` untapped or when none came), ``duration`` to the end of the exchange.
    ``chunks`` and ``bytes`` count the body as forwarded (for a WebSocket, the server's messages);
    ``events`` the tap's events (``None`` untapped). ``tokens`` is ``None`` when upstream sent no
    usage. ``error`` says what went wrong for every outcome but ``complete``."""

    protocol: Union[str, None]
    method: str
    path: str
    model: Union[str, None] = None
    status: int = 0
    outcome: str = "complete"
    ttfb: Union[float, None] = None
    ttft: Union[float, None] = None
    duration: float = 0.0
    chunks: int = 0
    bytes: int = 0
    events: Union[int, None] = None
    tokens: Union[Tokens, None] = None
    finish_reason: Union[str, None] = None
    warnings: list[str] = []
    error: Union[str, None] = None


OnComplete = Callable[[ExchangeRecord, Any], Any]
"""``on_complete(record, accumulator)``: the accumulator is ``None`` when the reply was not
tapped (no protocol, ``tap=False``, or not a stream); may be a coroutine function."""

_encode_record = msgspec.json.Encoder().encode


def log_record(record: ExchangeRecord, accumulator: Any = None) -> None:
    """The default ``on_complete``: the record as one JSON line on the ``rapidsse.gateway`` logger
    (level INFO)."""
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s", _encode_record(record).decode())


# --- What the tap's result says: tokens, model, finish reason, first output -----------------------

_ACCUMULATORS: dict[str, type] = {
    "responses": ResponseAccumulator,
    "chat": ChatAccumulator,
    "completions": CompletionsAccumulator,
    "anthropic": AnthropicAccumulator,
    "gemini": GeminiAccumulator,
}
# The final object of each protocol: the accumulator's attribute, and the type a JSON reply
# (no "stream") is decoded as.
_FINAL: dict[str, tuple[str, type]] = {
    "responses": ("response", responses.Response),
    "chat": ("completion", chat.ChatCompletion),
    "completions": ("completion", completions.Completion),
    "anthropic": ("message", anthropic.Message),
    "gemini": ("response", gemini.GenerateContentResponse),
}


def _add(*counts: Union[int, None]) -> Union[int, None]:
    present = [c for c in counts if c is not None]
    return sum(present) if present else None


def _tokens(protocol: str, final: Any) -> Union[Tokens, None]:
    """The final object's usage as :class:`Tokens` (``None`` when it has none)."""
    if protocol == "gemini":
        usage = final.usage_metadata
        if usage is None:
            return None
        return Tokens(input=_add(usage.prompt_token_count, usage.tool_use_prompt_token_count),
                      output=_add(usage.candidates_token_count, usage.thoughts_token_count),
                      cached=usage.cached_content_token_count, reasoning=usage.thoughts_token_count)
    usage = final.usage
    if usage is None:
        return None
    if protocol == "responses":
        cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details is not None else None
        reasoning = usage.output_tokens_details.reasoning_tokens if usage.output_tokens_details is not None else None
        return Tokens(input=usage.input_tokens, output=usage.output_tokens, cached=cached, reasoning=reasoning)
    if protocol == "anthropic":
        cached = usage.cache_read_input_tokens
        inputs = usage.input_tokens
        if inputs is not None:
            inputs = _add(inputs, cached, usage.cache_creation_input_tokens)
        return Tokens(input=inputs, output=usage.output_tokens, cached=cached)
    # Chat and Completions
    prompt = usage.prompt_tokens_details if protocol == "chat" else None
    details = usage.completion_tokens_details if protocol == "chat" else None
    return Tokens(input=usage.prompt_tokens, output=usage.completion_tokens,
                  cached=prompt.cached_tokens if prompt is not None else None,
                  reasoning=details.reasoning_tokens if details is not None else None)


def _model(protocol: str, final: Any) -> Union[str, None]:
    model = final.model_version if protocol == "gemini" else final.model
    return model or None


def _finish_reason(protocol: str, final: Any) -> Union[str, None]:
    if protocol == "responses":
        details = final.incomplete_details
        return details.reason if details is not None and details.reason else final.status
    if protocol == "anthropic":
        return final.stop_reason
    choices = final.candidates if protocol == "gemini" else final.choices
    for choice in choices or ():
        if choice.finish_reason:
            return choice.finish_reason
    return None


# Where each protocol's final object keeps its output, and the members that hold generated text.
_OUTPUT = {"responses": "output", "chat": "choices", "completions": "choices", "anthropic": "content",
           "gemini": "candidates"}
_TEXT_KEYS = frozenset(("text", "content", "arguments", "refusal", "thinking", "reasoning", "reasoning_content",
                        "input", "partial_json"))


def _has_text(node: Any) -> bool:
    if isinstance(node, dict):
        return any((key in _TEXT_KEYS and isinstance(value, (str, dict)) and bool(value)) or _has_text(value)
                   for key, value in node.items())
    if isinstance(node, list):
        return any(_has_text(item) for item in node)
    return False


_decode_builtins = msgspec.json.decode


def _has_output(protocol: str, snapshot: Union[bytes, None]) -> bool:
    """Whether the JSON of the object built so far (the core's ``snapshot_json``) holds any
    generated output (for the time to first token: checked only until it does). Read as plain
    JSON, not as the protocol's typed object: the typed snapshot (its schema check, its wire
    info, then ``to_builtins`` to walk it) is work the check does not need, and the same members
    are looked at."""
    if snapshot is None:
        return False
    try:
        built = _decode_builtins(snapshot)
    except msgspec.DecodeError:
        return False
    return isinstance(built, dict) and _has_text(built.get(_OUTPUT[protocol]))


def _describe(record: ExchangeRecord, protocol: str, final: Any) -> None:
    record.tokens = _tokens(protocol, final)
    record.model = _model(protocol, final) or record.model
    record.finish_reason = _finish_reason(protocol, final)


def _describe_realtime(record: ExchangeRecord, accumulator: RealtimeAccumulator) -> None:
    usages = [r.usage for r in accumulator.responses.values() if r.usage is not None]
    if usages:
        cached = [u.input_token_details.cached_tokens for u in usages if u.input_token_details is not None]
        reasoning = [u.output_token_details.reasoning_tokens for u in usages if u.output_token_details is not None]
        record.tokens = Tokens(input=_add(*(u.input_tokens for u in usages)),
                               output=_add(*(u.output_tokens for u in usages)),
                               cached=_add(*cached), reasoning=_add(*reasoning))
    last = list(accumulator.responses.values())[-1:]
    if last:
        details = last[0].status_details
        reason = details.reason if details is not None and not isinstance(details, str) else None
        record.finish_reason = reason or last[0].status


# --- The error a client gets when upstream cannot be reached ----------------------------------------


def _error_body(protocol: Union[str, None], message: str) -> bytes:
    """A 502 body in the shape the protocol's clients read errors in."""
    if protocol == "anthropic":
        error: Any = {"type": "error", "error": {"type": "api_error", "message": message}}
    elif protocol == "gemini":
        error = {"error": {"code": 502, "message": message, "status": "UNAVAILABLE"}}
    else:  # OpenAI's shape, also for what is not tapped
        error = {"error": {"message": message, "type": "bad_gateway", "param": None, "code": "upstream_unreachable"}}
    return msgspec.json.encode(error)


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


class _RequestModel(msgspec.Struct):
    model: Any = None


_decode_request_model = msgspec.json.Decoder(_RequestModel).decode


def _requested_model(protocol: Union[str, None], path: str, body: bytes) -> Union[str, None]:
    """The model the request names: in the path for Gemini, else the JSON body's ``model``."""
    if protocol == "gemini":
        start = path.find("/models/")
        return path[start + 8:path.rfind(":")] or None if start >= 0 and ":" in path else None
    if protocol is None or not body:
        return None
    try:
        model = _decode_request_model(body).model
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return model if isinstance(model, str) else None


_TOKEN_KINDS = ("input", "output", "cached", "reasoning")

# After a stream's first output, the tap is fed chunks in batches of about this many bytes (see
# Gateway._relay_stream): at most this plus one chunk is held per stream.
_TAP_BATCH = 4096

# --- Metrics --------------------------------------------------------------------------------------


class _Metrics:
    """The Prometheus metrics of one gateway app (in multiprocess mode when
    ``PROMETHEUS_MULTIPROC_DIR`` is set, as ``rapidsse gateway --workers N`` does)."""

    def __init__(self) -> None:
        try:
            import prometheus_client
        except ImportError as exc:
            raise ImportError(f"the gateway's metrics need prometheus-client ({exc}); install it with "
                              "pip install 'rapidsse[gateway]', or pass metrics=False") from exc
        self._client = prometheus_client
        self.registry = prometheus_client.CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.requests = prometheus_client.Counter(
            "rapidsse_gateway_requests_total", "Exchanges forwarded, by protocol, model and outcome",
            ["protocol", "model", "outcome"], registry=self.registry)
        self.tokens = prometheus_client.Counter(
            "rapidsse_gateway_tokens_total", "Tokens upstream reported, by kind (input, output, cached, reasoning)",
            ["protocol", "model", "kind"], registry=self.registry)
        self.ttft = prometheus_client.Histogram(
            "rapidsse_gateway_ttft_seconds", "Time from the request to the first chunk with output",
            ["protocol"], registry=self.registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
        self.duration = prometheus_client.Histogram(
            "rapidsse_gateway_duration_seconds", "Time from the request to the end of the exchange",
            ["protocol"], registry=self.registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0))

    def observe(self, record: ExchangeRecord) -> None:
        protocol = record.protocol or "none"
        model = record.model or ""
        child = self._child
        child(self.requests, protocol, model, record.outcome).inc()
        tokens = record.tokens
        if tokens is not None:
            for kind, count in zip(_TOKEN_KINDS, (tokens.input, tokens.output, tokens.cached, tokens.reasoning)):
                if count:
                    child(self.tokens, protocol, model, kind).inc(count)
        if record.ttft is not None:
            child(self.ttft, protocol).observe(record.ttft)
        child(self.duration, protocol).observe(record.duration)

    def _child(self, metric: Any, *labels: str) -> Any:
        # The labelled children, kept here: prometheus-client's ``labels()`` validates and locks
        # on every call, a few µs each, up to seven times per exchange. (A child is made on first
        # use, as before; prometheus-client keeps every child itself, so nothing new piles up.)
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def exposition(self) -> bytes:
        client = self._client
        if self.multiprocess:
            from prometheus_client import multiprocess

            registry = client.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return client.generate_latest(registry)
        return client.generate_latest(self.registry)

    @property
    def content_type(self) -> bytes:
        return self._client.CONTENT_TYPE_LATEST.encode("latin-1")


# --- The app --------------------------------------------------------------------------------------


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

    def __init__(self, upstream_url: str, *, on_complete: Union[OnComplete, None] = None, tap: bool = True,
                 metrics: bool = True, read_timeout: float = 300.0, connect_timeout: float = 10.0,
                 max_connections: int = 10_000, read_buffer: int = 64 * 1024,
                 max_json_reply: int = 16 * 1024 * 1024) -> None:
        try:
            import aiohttp  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"the gateway needs aiohttp ({exc}); install it with pip install 'rapidsse[gateway]'") \
                from exc
        self.upstream_url = upstream_url.rstrip("/")
        self.on_complete: OnComplete = on_complete if on_complete is not None else log_record
        self.tap = tap
        self.metrics = _Metrics() if metrics else None
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.read_buffer = read_buffer
        self.max_json_reply = max_json_reply
        self._session: Any = None
        self._request_timeout: Any = None
        # The read-timeout watchdog: the HTTP exchanges in flight, and one timer on the loop that
        # looks at them every ``_tick`` seconds (instead of aiohttp's sock_read timer, cancelled
        # and re-armed on every chunk received).
        self._inflight: set[_Exchange] = set()
        self._watchdog: Any = None
        self._watchdog_loop: Any = None
        self._tick = min(1.0, max(read_timeout / 10, 0.005)) if read_timeout else 0.0

    # The upstream client: one pooled aiohttp session per worker (per event loop).

    def _client(self) -> Any:
        session = self._session
        if session is None or session.closed:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300)
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
            if self.metrics is not None and scope["path"] == "/metrics" and scope["method"] == "GET":
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

    def _url(self, scope: Any) -> Any:
        from yarl import URL

        path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string") or b""
        target = path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        return URL(self.upstream_url + target, encoded=True)

    async def _finish(self, record: ExchangeRecord, accumulator: Any, started: float) -> None:
        record.duration = time.monotonic() - started
        if self.metrics is not None:
            try:
                self.metrics.observe(record)
            except Exception:
                logger.exception("the gateway's metrics failed for %s %s", record.method, record.path)
        try:
            result = self.on_complete(record, accumulator)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("on_complete raised for %s %s (outcome %s)", record.method, record.path, record.outcome)

    async def _http(self, scope: Any, receive: Any, send: Any) -> None:
        import aiohttp

        started = time.monotonic()
        path = scope["path"]
        protocol = protocol_for_path(path, default=None)
        record = ExchangeRecord(protocol=protocol, method=scope["method"], path=path)
        parts = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                record.outcome, record.error = "client_gone", "the client left before its request was read"
                return await self._finish(record, None, started)
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        record.model = _requested_model(protocol, path, body)
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
                upstream = await self._reply(aiohttp, scope, body, exchange)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                record.outcome, record.status = "upstream_error", 502
                record.error = f"upstream unreachable: {type(exc).__name__}: {exc}"
                exchange.done = True
                watcher.cancel()
                reply = _error_body(protocol, f"the upstream server is unreachable ({type(exc).__name__})")
                await send({"type": "http.response.start", "status": 502,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", b"%d" % len(reply))]})
                await send({"type": "http.response.body", "body": reply})
                return await self._finish(record, None, started)
            record.ttfb = time.monotonic() - started
            record.status = status = upstream.status
            media_type = upstream.content_type
            await send({"type": "http.response.start", "status": status,
                        "headers": _reply_headers(upstream.raw_headers)})
            tapping = self.tap and protocol is not None
            if tapping and media_type == "text/event-stream":
                accumulator = _ACCUMULATORS[protocol](on_error="raise")
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
            self._read_tap(record, protocol, accumulator)
        await self._finish(record, accumulator, started)

    async def _reply(self, aiohttp: Any, scope: Any, body: bytes, exchange: _Exchange) -> Any:
        """Upstream's reply to the request (its headers); ``asyncio.TimeoutError`` when upstream
        sent none for ``read_timeout`` seconds (the watchdog cancelled the wait)."""
        exchange.waiting = time.monotonic()
        try:
            upstream = await self._request(aiohttp, scope, body)
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

    async def _request(self, aiohttp: Any, scope: Any, body: bytes) -> Any:
        """Sends the request upstream, once more when a pooled connection turned out closed by
        upstream as the request was written on it (``ClientOSError`` "Can not write request
        body": the request never reached it). Seen at hundreds of concurrent streams, where a
        connection goes back to the pool just as upstream closes it; a refused connect is not
        sent again."""
        headers = _upstream_headers(scope, _NOT_UPSTREAM)

        def send() -> Any:
            return self._client().request(scope["method"], self._url(scope), data=body or None, headers=headers,
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
        fits its schema is the end of the stream's to say, in :meth:`_read_tap`.)"""
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
            try:
                final = decode_lenient(b"".join(kept), _FINAL[protocol][1])
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                record.outcome, record.error = "bad_stream", f"the JSON reply cannot be read: {exc}"
            else:
                _describe(record, protocol, final)
        return True

    @staticmethod
    def _read_tap(record: ExchangeRecord, protocol: str, accumulator: Any) -> None:
        try:
            accumulator.close()
            record.events = accumulator.events
            record.warnings = list(accumulator.warnings)
            final = getattr(accumulator, _FINAL[protocol][0])
        except SSEError as exc:
            if record.outcome == "complete":
                record.outcome, record.error = "bad_stream", f"{type(exc).__name__}: {exc}"
            return
        if final is None:
            if record.outcome == "complete" and record.status < 300:
                record.outcome, record.error = "bad_stream", "the stream held no event the tap could read"
            return
        _describe(record, protocol, final)

    # --- Realtime: a WebSocket both ways ---

    async def _websocket(self, scope: Any, receive: Any, send: Any) -> None:
        import aiohttp

        started = time.monotonic()
        path = scope["path"]
        tapped = self.tap and path.rstrip("/") == REALTIME_PATH
        record = ExchangeRecord(protocol="realtime" if path.rstrip("/") == REALTIME_PATH else None,
                                method="WEBSOCKET", path=path)
        query = scope.get("query_string") or b""
        for pair in query.split(b"&"):
            name, _, value = pair.partition(b"=")
            if name == b"model" and value:
                from urllib.parse import unquote

                record.model = unquote(value.decode("latin-1"))
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        accumulator = RealtimeAccumulator(on_error="raise") if tapped else None
        try:
            upstream = await self._client().ws_connect(
                self._url(scope), headers=_upstream_headers(scope, _NOT_UPSTREAM_WS),
                protocols=tuple(scope.get("subprotocols") or ()), autoping=True, max_msg_size=0,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10.0))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            record.outcome, record.status = "upstream_error", 502
            record.error = f"upstream unreachable: {type(exc).__name__}: {exc}"
            status = exc.status if isinstance(exc, aiohttp.WSServerHandshakeError) else 502
            record.status = status
            if "websocket.http.response" in (scope.get("extensions") or {}):
                reply = _error_body("realtime", f"the upstream server refused or is unreachable ({type(exc).__name__})")
                await send({"type": "websocket.http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "websocket.http.response.body", "body": reply})
            else:
                await send({"type": "websocket.close", "code": 1011})
            return await self._finish(record, None, started)
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
            _describe_realtime(record, accumulator)
        await self._finish(record, accumulator, started)


def create_gateway(upstream_url: str, *, on_complete: Union[OnComplete, None] = None, tap: bool = True,
                   metrics: bool = True, read_timeout: float = 300.0, connect_timeout: float = 10.0,
                   max_connections: int = 10_000, read_buffer: int = 64 * 1024) -> Gateway:
    """The gateway as an ASGI app, forwarding every request to ``upstream_url`` (a base URL such as
    ``https://api.openai.com``: the request's path and query are appended).

    ``on_complete(record, accumulator)`` is called once per exchange, after its reply ended (an
    exception there is logged, never seen by a client); the default is :func:`log_record`.
    ``tap=False`` forwards the same way with no accumulator. ``metrics``: serve ``GET /metrics``.
    ``read_timeout``: seconds upstream may stay silent before the exchange is cut
    (``upstream_cut``). ``max_connections``: the upstream connection pool (one per concurrent
    stream). ``read_buffer``: bytes of upstream's body read ahead per stream (the reader stops
    reading the socket past twice that).

    >>> app = create_gateway("http://127.0.0.1:8000", on_complete=lambda record, acc: print(record.tokens))
    """
    return Gateway(upstream_url, on_complete=on_complete, tap=tap, metrics=metrics, read_timeout=read_timeout,
                   connect_timeout=connect_timeout, max_connections=max_connections, read_buffer=read_buffer)


# --- The command line -------------------------------------------------------------------------------

_ENV = "RAPIDSSE_GATEWAY"


def _app_from_environment() -> Gateway:
    """The app of ``rapidsse gateway`` in a uvicorn worker: its options come through the
    environment (workers are separate processes that import this factory)."""
    options = msgspec.json.decode(os.environ[_ENV])
    logging.basicConfig(level=options["log_level"].upper(), format="%(message)s", stream=sys.stderr)
    app = create_gateway(options["upstream"], tap=options["tap"], read_timeout=options["read_timeout"])
    _tune_collector()
    return app


# The cyclic garbage collector's thresholds in a worker of the command (Python's: 700, 10, 10).
_COLLECTOR_THRESHOLDS = (10_000, 50, 50)


def _tune_collector() -> None:
    """Makes the cyclic collector's pauses rare in a worker of ``rapidsse gateway``: freezes what
    startup made (the modules, the app: never walked again) and raises the thresholds. With
    Python's defaults a busy gateway (512 streams in flight, two runs of 1024) ran three full
    collections, the longest 60 ms of CPU with every stream's next chunk waiting; frozen and at
    these thresholds, a few young collections and no full one. A finished exchange leaves no
    reference cycle (tests/test_gateway.py checks it), so deferring collections piles nothing
    up; the collector stays on because the fault paths do make cycles (aiohttp's exceptions
    keep their tracebacks), and those are still collected."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_COLLECTOR_THRESHOLDS)


def register(subparsers: Any) -> None:
    """Adds the ``gateway`` subcommand to the ``rapidsse`` command line."""
    parser = subparsers.add_parser(
        "gateway",
        help="forward every LLM request to an upstream untouched, with a record and metrics per exchange",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--upstream", required=True, metavar="URL",
                        help="the upstream's base URL, e.g. https://api.openai.com (the path is appended)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: %(default)s; 0: any free port)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="worker processes (default: %(default)s; metrics are then gathered across them)")
    parser.add_argument("--no-tap", dest="tap", action="store_false",
                        help="forward without accumulating (no tokens, ttft or finish reason in the records)")
    parser.add_argument("--read-timeout", type=float, default=300.0, metavar="S",
                        help="seconds upstream may send nothing before a stream is cut (default: %(default)s)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="also of the records' JSON lines, logged at info (default: %(default)s)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rapidsse gateway``: serves the gateway with uvicorn until interrupted."""
    try:
        import aiohttp  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn
    except ImportError as exc:
        print(f"rapidsse gateway: {exc}; install it with pip install 'rapidsse[gateway]'", file=sys.stderr)
        return 1
    if args.workers < 1:
        print("rapidsse gateway: --workers must be at least 1", file=sys.stderr)
        return 1
    from .serve import listen

    listening = listen("gateway", args.host, args.port)
    if listening is None:
        return 1
    sock, url = listening
    os.environ[_ENV] = msgspec.json.encode(
        {"upstream": args.upstream, "tap": args.tap, "read_timeout": args.read_timeout, "log_level": args.log_level}).decode()
    metrics_dir = None
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = tempfile.TemporaryDirectory(prefix="rapidsse-gateway-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir.name
    print(f"rapidsse gateway: {url} -> {args.upstream} ({'tapped' if args.tap else 'no tap'}, "
          f"{args.workers} worker{'s' if args.workers > 1 else ''})", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        "rapidsse.gateway:_app_from_environment", factory=True, workers=args.workers, log_level=args.log_level,
        access_log=False, server_header=False, date_header=False, proxy_headers=False, backlog=4096, log_config=None)
    server = uvicorn.Server(config)
    try:
        if args.workers > 1:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    finally:
        if metrics_dir is not None:
            metrics_dir.cleanup()
    return 0
