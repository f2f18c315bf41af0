"""What a gateway's own code plugs into: ``on_request`` (a :class:`GatewayRequest`, answered with
``None`` or a :class:`Reject`) before upstream is contacted, ``on_complete`` (an
:class:`~rapidsse.gateway.ExchangeRecord`) after the exchange, run by a :class:`Recorder` off the
threads that forward streams; and the ``upstream`` configuration (:func:`parse_upstreams`).

Both engines use these: the asyncio engine on its event loop, the native one from the thread
that hands its exchanges to Python."""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Union
from urllib.parse import urlsplit

import msgspec

from .metrics import Metrics
from .record import ExchangeRecord, OnComplete, log_record, log_records

__all__ = ["GatewayRequest", "OnRequest", "Recorder", "Reject", "apply_on_request", "parse_upstreams"]

logger = logging.getLogger("rapidsse.gateway")


# --- The upstreams ---------------------------------------------------------------------------------

DEFAULT_UPSTREAM = "default"
"""The name a single upstream URL gets in :func:`parse_upstreams`."""


def _check_url(name: str, url: Any) -> str:
    if not isinstance(url, str):
        raise ValueError(f"upstream {name!r}: the URL must be a string, not {type(url).__name__}")
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises on a port that is not a number or out of range
    except ValueError as exc:
        raise ValueError(f"upstream {name!r}: {url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"upstream {name!r}: {url!r} must be an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError(f"upstream {name!r}: {url!r} names no host")
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise ValueError(f"upstream {name!r}: {url!r} must have no query or fragment (the request's path "
                         "and query are appended to it)")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"upstream {name!r}: {url!r} must carry no credentials (add a header in on_request)")
    del port
    return url.strip().rstrip("/")


def parse_upstreams(upstream: Union[str, Mapping[str, str]]) -> dict[str, str]:
    """The upstreams as ``{name: base URL}``, the first one the default: a single URL is
    ``{"default": url}``; a mapping keeps its order. Each URL must be ``http`` or ``https``, name
    a host, and have no query, fragment or credentials; a trailing ``/`` is dropped (the request's
    path is appended as it came). Raises ``ValueError`` saying what is wrong.

    >>> parse_upstreams({"openai": "https://api.openai.com/", "local": "http://127.0.0.1:8000"})
    {'openai': 'https://api.openai.com', 'local': 'http://127.0.0.1:8000'}
    """
    if isinstance(upstream, str):
        return {DEFAULT_UPSTREAM: _check_url(DEFAULT_UPSTREAM, upstream)}
    if not isinstance(upstream, Mapping):
        raise ValueError(f"upstream must be a URL or a {{name: URL}} mapping, not {type(upstream).__name__}")
    if not upstream:
        raise ValueError("upstream: the mapping names no upstream")
    out: dict[str, str] = {}
    for name, url in upstream.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"upstream names must be non-empty strings, not {name!r}")
        out[name] = _check_url(name, url)
    return out


# --- on_request ------------------------------------------------------------------------------------


class GatewayRequest:
    """One exchange's request as ``on_request(request)`` sees it, before upstream is contacted.

    ``method`` (``"WEBSOCKET"`` for a Realtime session, as in its record), ``path`` (no query),
    ``query`` (raw, no ``?``), ``protocol`` and ``model`` (as the record will have them) and
    ``body`` describe the request; the gateway does not read them back. ``headers`` are exactly
    the headers that will go upstream (lower-case names; hop-by-hop, ``host`` and
    ``content-length`` already removed): the hook may set, replace or delete entries. ``upstream``
    is the name of the configured upstream to forward to (``None``: the default, the first one);
    the host always comes from the configuration, never from the request. ``caller`` is copied
    into :attr:`ExchangeRecord.caller` (say who is calling, e.g. a fingerprint of the API key:
    never the key itself, records are logged)."""

    __slots__ = ("method", "path", "query", "protocol", "model", "body", "headers", "upstream", "caller")

    def __init__(self, method: str, path: str, query: str, protocol: Union[str, None], model: Union[str, None],
                 body: bytes, headers: dict[str, str], upstream: Union[str, None] = None,
                 caller: Union[str, None] = None) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.protocol = protocol
        self.model = model
        self.body = body
        self.headers = headers
        self.upstream = upstream
        self.caller = caller

    def __repr__(self) -> str:  # header names only: their values hold the client's keys
        return (f"GatewayRequest(method={self.method!r}, path={self.path!r}, protocol={self.protocol!r}, "
                f"model={self.model!r}, body=<{len(self.body)} bytes>, headers=<{', '.join(self.headers)}>, "
                f"upstream={self.upstream!r}, caller={self.caller!r})")


class Reject(msgspec.Struct, frozen=True):
    """What ``on_request`` returns to answer the request itself: the client gets ``status``
    (400-599) with ``message`` in its API's error shape (:func:`~rapidsse.gateway.record.error_body`),
    upstream is not contacted, and the record's outcome is ``"rejected"``."""

    status: int
    message: str

    def __post_init__(self) -> None:
        if not isinstance(self.status, int) or not 400 <= self.status <= 599:
            raise ValueError(f"Reject: status must be an HTTP error status (400-599), not {self.status!r}")


OnRequest = Callable[[GatewayRequest], Union[Reject, None]]
"""``on_request(request)``: ``None`` to forward the request (as the hook left it), or a
:class:`Reject`. Called on the thread that serves the request: keep it quick (no I/O)."""

HOOK_FAILED = "the gateway could not handle this request (its on_request hook failed)"
"""What a client is told (with a 500) when ``on_request`` raised or returned something unusable;
the record's ``error`` and the log say what."""


def apply_on_request(on_request: Union[OnRequest, None], request: GatewayRequest,
                     upstreams: Mapping[str, str]) -> Union[tuple[Reject, str], None]:
    """Runs ``on_request`` on ``request`` and checks what it left: ``None`` to go on (the request's
    ``upstream`` then names one of ``upstreams``, its headers are strings), else the
    :class:`Reject` to answer with and the record's ``error``. Never raises: a hook that raises,
    returns something else than ``None`` or a ``Reject``, names an unknown upstream or leaves a
    header that is not a string gets a 500 (logged)."""
    if on_request is None:
        return None
    try:
        verdict = on_request(request)
    except Exception as exc:
        logger.exception("on_request raised for %s %s", request.method, request.path)
        return Reject(500, HOOK_FAILED), f"on_request raised {type(exc).__name__}: {exc}"
    if isinstance(verdict, Reject):
        return verdict, f"rejected by on_request: {verdict.status} {verdict.message}"
    problem = None
    if verdict is not None:
        if inspect.isawaitable(verdict):
            close = getattr(verdict, "close", None)
            if close is not None:
                close()  # never awaited: no "coroutine was never awaited" warning
        problem = f"on_request returned {type(verdict).__name__}, not None or a Reject"
    elif request.upstream is not None and request.upstream not in upstreams:
        problem = f"on_request chose the upstream {request.upstream!r}, not one of {', '.join(upstreams)}"
    elif not isinstance(request.headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in request.headers.items()):
        problem = "on_request left request.headers other than a dict of strings"
    elif request.caller is not None and not isinstance(request.caller, str):
        problem = f"on_request set request.caller to a {type(request.caller).__name__}, not a string"
    if problem is None:
        return None
    logger.error("%s (%s %s)", problem, request.method, request.path)
    return Reject(500, HOOK_FAILED), problem


# --- on_complete: the Recorder ---------------------------------------------------------------------



def _log_off_thread(level: int, message: str, *args: Any) -> None:
    """Logs on a thread of its own: a handler that blocks (a full pipe) blocks that thread only."""
    threading.Thread(target=logger.log, args=(level, message, *args), name="rapidsse-gateway-log",
                     daemon=True).start()


class Recorder:
    """Hands each finished exchange to ``on_complete`` on a thread of its own, so that no stream
    ever waits on it (nor on the log sink the default :func:`~rapidsse.gateway.log_record` writes
    to).

    :meth:`submit` (one record) and :meth:`submit_many` (several) never block and never raise:
    they count the records in ``metrics`` at once and queue them (at most ``max_pending`` wait);
    a record that finds the queue full is dropped, counted in :attr:`dropped` and in
    ``rapidsse_gateway_records_dropped_total``, and the first drop logs one warning (from a
    thread of its own). The recorder's daemon thread takes what is queued, all of it at once, and
    calls ``on_complete(record, accumulator)`` for each in order; an exception there is logged;
    an awaitable it returns is run to completion on the thread's own event loop. With no
    ``on_complete`` given, a batch's JSON lines go out as one log message (one line per record
    still), so a busy gateway pays the logging machinery once per batch; pass
    ``on_complete=log_record`` for one log record per exchange (a handler whose format prefixes
    each message needs that). :meth:`close` lets the queued
    records finish and stops the thread."""

    def __init__(self, metrics: Union[Metrics, None], on_complete: Union[OnComplete, None], *,
                 max_pending: int = 10_000) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.metrics = metrics
        self.on_complete: OnComplete = on_complete if on_complete is not None else log_record
        # The default (no hook given) logs a batch as one message; log_record passed on purpose
        # keeps one log record per exchange (for a handler whose format prefixes each message).
        self._log_batches = on_complete is None
        self.max_pending = max_pending
        self.dropped = 0
        self._pending: collections.deque[tuple[ExchangeRecord, Any]] = collections.deque()
        self._ready = threading.Condition(threading.Lock())
        self._warned = False
        self._closed = False
        self._loop: Union[asyncio.AbstractEventLoop, None] = None
        self._thread = threading.Thread(target=self._run, name="rapidsse-gateway-recorder", daemon=True)
        self._thread.start()

    def submit(self, record: ExchangeRecord, accumulator: Any = None) -> None:
        """Counts ``record`` in the metrics and queues it for ``on_complete`` (or drops it when
        ``max_pending`` records are waiting already)."""
        self.submit_many([(record, accumulator)])

    def submit_many(self, items: list[tuple[ExchangeRecord, Any]]) -> None:
        """:meth:`submit` for each ``(record, accumulator)`` of ``items``, the thread woken once."""
        metrics = self.metrics
        if metrics is not None:
            for record, _ in items:
                try:
                    metrics.observe(record)
                except Exception as exc:
                    _log_off_thread(logging.ERROR, "the gateway's metrics failed for %s %s: %s: %s", record.method,
                                    record.path, type(exc).__name__, exc)
        with self._ready:
            room = 0 if self._closed else max(0, self.max_pending - len(self._pending))
            taken = items[:room]
            if taken:
                was_empty = not self._pending
                self._pending.extend(taken)
                if was_empty:
                    self._ready.notify()
        for _ in range(len(items) - len(taken)):
            self._drop()

    def _drop(self) -> None:
        with self._ready:
            self.dropped += 1
            first = not self._warned
            self._warned = True
        if self.metrics is not None:
            try:
                self.metrics.dropped()
            except Exception:
                pass
        if first:
            _log_off_thread(logging.WARNING, "on_complete is falling behind: %d records are waiting, so records are "
                            "dropped (counted in rapidsse_gateway_records_dropped_total); this is logged once",
                            self.max_pending)

    @property
    def pending(self) -> int:
        """Records queued and not yet handed to ``on_complete``."""
        return len(self._pending)

    def _take(self) -> list[tuple[ExchangeRecord, Any]] | None:
        """Everything queued (waiting for something), or None once closed and empty."""
        with self._ready:
            while not self._pending:
                if self._closed:
                    return None
                self._ready.wait()
            batch = list(self._pending)
            self._pending.clear()
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                break
            if self._log_batches:
                try:
                    log_records(batch)
                except Exception:
                    logger.exception("the gateway could not log %d records", len(batch))
                continue
            for record, accumulator in batch:
                try:
                    result = self.on_complete(record, accumulator)
                    if inspect.isawaitable(result):
                        self._await(result)
                except Exception:
                    logger.exception("on_complete raised for %s %s (outcome %s)", record.method, record.path,
                                     record.outcome)
                finally:
                    record = accumulator = result = None
            batch = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _await(self, awaitable: Any) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.new_event_loop()

        async def wait() -> None:
            await awaitable

        loop.run_until_complete(wait())

    def close(self, timeout: Union[float, None] = 10.0) -> bool:
        """Stops taking records, lets those queued go to ``on_complete`` and stops the thread
        (waiting at most ``timeout`` seconds); True when it did stop."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()
