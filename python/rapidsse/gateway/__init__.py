"""A streaming LLM gateway: forwards every request to a configured upstream untouched, and
accounts for each exchange with rapidsse's tap.

Two engines forward the bytes. The *native* engine (``engine="native"``, the default on the Rust
backend when the extension has it) keeps the whole data path in Rust: Python runs once per
exchange (``on_request``, then the record) and no stream ever waits on it. The *asyncio* engine
(:mod:`.asyncio_engine`: an ASGI app on uvicorn with aiohttp upstream) is the pure-Python one,
and what :func:`create_gateway` returns for your own ASGI server. Both take the same hooks and
make the same :class:`ExchangeRecord`.

``start(upstream, ...)`` runs a gateway in the background and returns a handle (``.url``,
``.stop()``); ``serve(upstream, ...)`` runs one until SIGINT/SIGTERM; ``rapidsse gateway
--upstream URL`` is the command line (:mod:`.cli`).

Per exchange: ``on_request(request)`` (a :class:`GatewayRequest`) may edit the headers that go
upstream, pick one of several upstreams, name the caller, or answer with a :class:`Reject`; when
the exchange ends its record (protocol, model, caller, status, outcome, timings, chunks, tokens,
finish reason, the tap's warnings) is counted in the Prometheus metrics and handed to
``on_complete(record, accumulator)`` (default: one JSON line on the ``rapidsse.gateway`` logger)
on a thread of its own (:class:`~.hooks.Recorder`).

Outcomes (:data:`OUTCOMES`): ``complete``; ``client_gone`` (the client left: the upstream request
is closed at once); ``upstream_cut`` (upstream closed the stream early, or sent nothing for
``read_timeout`` seconds: the client gets every byte received, then its connection is closed, so
it sees a cut too); ``upstream_error`` (upstream unreachable: a 502 with a JSON error in the
protocol's own shape; or upstream answered with an HTTP error status, forwarded as is);
``bad_stream`` (the tap could not read the stream: it was still forwarded untouched);
``rejected`` (the gateway answered itself: ``on_request`` rejected the request or raised, or the
body was over ``max_body_bytes``).

Needs the ``gateway`` extra (aiohttp, uvicorn, httptools, prometheus-client).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping
from typing import Any, Union

from .asyncio_engine import (DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_HEADER_BYTES, AsyncioServer,
                             Gateway, create_gateway)
from .cli import register
from .hooks import GatewayRequest, OnRequest, Recorder, Reject, parse_upstreams
from .metrics import Metrics
from .record import OUTCOMES, ExchangeRecord, OnComplete, Tokens, log_record

__all__ = ["ENGINES", "OUTCOMES", "ExchangeRecord", "GatewayRequest", "Metrics", "Recorder", "Reject", "Tokens",
           "create_gateway", "default_engine", "log_record", "parse_upstreams", "register", "serve", "start"]

ENGINES = ("native", "asyncio")


def _native_available() -> bool:
    try:
        from .native import available
    except ImportError:
        return False
    try:
        return bool(available())
    except Exception:
        return False


def default_engine() -> str:
    """``"native"`` on the Rust backend when the extension has the native engine, else
    ``"asyncio"``."""
    from .. import BACKEND

    return "native" if BACKEND == "rust" and _native_available() else "asyncio"


def _engine(engine: Union[str, None]) -> str:
    if engine is None:
        return default_engine()
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} (or None for the default), not {engine!r}")
    if engine == "native":
        from .. import BACKEND

        if BACKEND != "rust":
            raise RuntimeError("engine='native' needs rapidsse's compiled extension, and this process runs the pure "
                               "Python backend (RAPIDSSE_BACKEND=python, or no wheel for this platform): use "
                               "engine='asyncio'")
    return engine


def _native(name: str) -> Any:
    try:
        from . import native
    except ImportError as exc:
        raise RuntimeError(f"this build of rapidsse has no native gateway engine ({exc}): use engine='asyncio'") \
            from exc
    return getattr(native, name)


def start(upstream: Union[str, Mapping[str, str]], *, host: str = "127.0.0.1", port: int = 8080,
          engine: Union[str, None] = None, threads: Union[int, None] = None,
          on_request: Union[OnRequest, None] = None, on_complete: Union[OnComplete, None] = None,
          tap: bool = True, read_timeout: float = 300.0, connect_timeout: float = 10.0, metrics: bool = True,
          metrics_port: Union[int, None] = None, upstream_ca: Union[str, None] = None,
          max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
          header_timeout: float = DEFAULT_HEADER_TIMEOUT, grace: float = 10.0, log_level: str = "info") -> Any:
    """Starts a gateway in the background and returns its handle once it accepts connections:
    ``.address`` (host, port: the one bound for ``port=0``), ``.url`` (``http://host:port``),
    ``.stop(grace=None)``; a context manager (leaving it stops the gateway).

    ``upstream``: a base URL (``https://api.openai.com``: the request's path and query are
    appended) or ``{name: url}`` (the first the default; ``on_request`` picks another by name).
    ``engine``: ``"native"`` or ``"asyncio"`` (None: native on the Rust backend when built with
    it). ``threads``: the native engine's worker threads (None: one per core); the asyncio
    engine runs one event loop and takes only None or 1. ``on_request(request)`` runs once per
    exchange before upstream is contacted; ``on_complete(record, accumulator)`` after it, on a
    thread of its own (default :func:`log_record`). ``tap=False``: no accumulator. ``metrics``:
    Prometheus metrics, served at ``/metrics`` on the gateway's port, or on ``metrics_port`` of
    their own (then ``/metrics`` on the gateway's port is forwarded like any path).
    ``upstream_ca``: PEM file of a private CA trusted for https upstreams. Limits: a header block
    over ``max_header_bytes`` gets 431, a body over ``max_body_bytes`` 413, a connection that has
    not sent its header block within ``header_timeout`` seconds is closed. ``read_timeout``:
    seconds upstream may stay silent before a stream is cut; ``connect_timeout``: to reach it.
    ``grace``: at ``stop()``, seconds the streams in flight have to finish.
    """
    chosen = _engine(engine)
    parse_upstreams(upstream)  # a bad URL is an error here, on either engine
    if chosen == "native":
        return _native("start")(upstream, host=host, port=port, threads=threads, on_request=on_request,
                                on_complete=on_complete, tap=tap, read_timeout=read_timeout,
                                connect_timeout=connect_timeout, metrics=metrics, metrics_port=metrics_port,
                                upstream_ca=upstream_ca, max_header_bytes=max_header_bytes,
                                max_body_bytes=max_body_bytes, header_timeout=header_timeout, grace=grace,
                                log_level=log_level)
    if threads not in (None, 1):
        raise ValueError("threads: the asyncio engine runs one event loop (threads must be None or 1); use "
                         "engine='native', or worker processes with `rapidsse gateway --workers N`")
    if metrics_port is not None and not metrics:
        raise ValueError("metrics_port needs metrics=True")
    import logging

    logging.getLogger("rapidsse.gateway").setLevel(log_level.upper())
    app = Gateway(dict(upstream) if isinstance(upstream, Mapping) else upstream, on_request=on_request,
                  on_complete=on_complete, tap=tap, metrics=metrics, serve_metrics=metrics_port is None,
                  read_timeout=read_timeout, connect_timeout=connect_timeout, max_body_bytes=max_body_bytes,
                  upstream_ca=upstream_ca)
    server = AsyncioServer(app, host=host, port=port, metrics_port=metrics_port, max_header_bytes=max_header_bytes,
                           header_timeout=header_timeout, grace=grace, log_level=log_level)
    return server.start()


def wait_for_signal() -> int:
    """Blocks until SIGINT or SIGTERM (in the main thread; elsewhere, until interrupted) and
    returns the signal's number."""
    got: list[int] = []
    done = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        got.append(signum)
        done.set()

    if threading.current_thread() is not threading.main_thread():
        done.wait()
        return 0
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not done.wait(0.5):
            pass
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    return got[0]


def serve(upstream: Union[str, Mapping[str, str]], *, host: str = "127.0.0.1", port: int = 8080,
          engine: Union[str, None] = None, threads: Union[int, None] = None,
          on_request: Union[OnRequest, None] = None, on_complete: Union[OnComplete, None] = None,
          tap: bool = True, read_timeout: float = 300.0, connect_timeout: float = 10.0, metrics: bool = True,
          metrics_port: Union[int, None] = None, upstream_ca: Union[str, None] = None,
          max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
          header_timeout: float = DEFAULT_HEADER_TIMEOUT, grace: float = 10.0, log_level: str = "info") -> None:
    """Runs a gateway (see :func:`start` for the arguments) until SIGINT or SIGTERM: it then stops
    accepting connections and lets the streams in flight finish within ``grace`` seconds."""
    options = dict(host=host, port=port, threads=threads, on_request=on_request, on_complete=on_complete, tap=tap,
                   read_timeout=read_timeout, connect_timeout=connect_timeout, metrics=metrics,
                   metrics_port=metrics_port, upstream_ca=upstream_ca, max_header_bytes=max_header_bytes,
                   max_body_bytes=max_body_bytes, header_timeout=header_timeout, grace=grace, log_level=log_level)
    chosen = _engine(engine)
    parse_upstreams(upstream)
    if chosen == "native":
        return _native("serve")(upstream, **options)
    server = start(upstream, engine="asyncio", **options)
    try:
        wait_for_signal()
    finally:
        server.stop()
