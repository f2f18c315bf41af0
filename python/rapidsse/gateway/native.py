"""The native engine's Python side: starts the Rust gateway (``rapidsse._rapidsse.GatewayEngine``,
built on tokio, hyper and rustls in ``rust/src/net``) and meets it once per exchange, never per
chunk.

- The data path is Rust's alone: each request is read, sent upstream through the pooled client,
  and the reply streamed back frame by frame while the protocol's Rust accumulator reads the same
  bytes. No GIL is taken there.
- ``on_request`` (if any) is called on tokio's blocking pool once per exchange, before upstream is
  contacted, through :func:`~rapidsse.gateway.hooks.apply_on_request` as on the asyncio engine.
- A finished exchange goes into the engine's bounded queue (full: dropped and counted, the
  stream never waits). One Python thread here (the *drain*) takes what has piled up, a batch at
  a time with a pause of 100 ms after a batch that was not full (so a gateway wakes it ten
  times a second, not once per exchange; a record reaches ``on_complete`` within about 0.1 s), the GIL released while it waits, makes the
  :class:`~rapidsse.gateway.ExchangeRecord` and the accumulator from the Rust tap's state (the
  same ``read_tap`` as the asyncio engine), and hands the batch to the
  :class:`~rapidsse.gateway.hooks.Recorder` (metrics, then ``on_complete`` on a thread of its
  own).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Union

from ..accumulate import RealtimeAccumulator
from ..errors import DecodeError, EventTooLarge
from .hooks import GatewayRequest, OnRequest, Recorder, apply_on_request, parse_upstreams
from .metrics import Metrics
from .record import (ACCUMULATORS, ExchangeRecord, OnComplete, describe_json_reply, describe_realtime, error_body,
                     read_tap)

__all__ = ["NativeGateway", "available", "serve", "start"]

logger = logging.getLogger("rapidsse.gateway")

_MAX_JSON_REPLY = 16 * 1024 * 1024
_RECORD_QUEUE = 10_000
_LINGER = 0.1
"""Seconds the drain thread rests after a batch of records (see ``_drain_records``)."""
_BATCH = 1024
"""Records taken at most per turn."""


def _engine_class() -> Any:
    from .. import BACKEND

    if BACKEND != "rust":
        return None
    from .._backend import core

    return getattr(core(), "GatewayEngine", None)


def available() -> bool:
    """Whether this process can run the native engine (the Rust backend, built with it)."""
    return _engine_class() is not None


def _error_text(error: Any) -> Union[str, None]:
    """The record's error: the engine's text, or for a payload the tap refused the exception the
    Python accumulator raises for it, as the asyncio engine words it."""
    if not isinstance(error, tuple):
        return error
    _, reason, index, event, offset, raw, limit = error
    exc: Exception
    if limit is None:
        exc = DecodeError(reason, index=index, event=event, offset=offset, raw=raw)
    else:
        exc = EventTooLarge(reason, limit=limit, offset=offset)
    return f"{type(exc).__name__}: {exc}"


def make_record(item: tuple) -> tuple[ExchangeRecord, Any]:
    """An exchange as the engine hands it over, made into its record and accumulator."""
    (protocol, method, path, model, caller, status, outcome, ttfb, ttft, duration, chunks, size, error, core,
     json_reply) = item
    record = ExchangeRecord(protocol=protocol, method=method, path=path, model=model, caller=caller, status=status,
                            outcome=outcome, ttfb=ttfb, ttft=ttft, duration=duration, chunks=chunks, bytes=size,
                            error=_error_text(error))
    accumulator = None
    if core is not None:
        if protocol == "realtime":
            accumulator = RealtimeAccumulator._from_core(core)
            record.events = accumulator.events
            record.warnings = list(accumulator.warnings)
            describe_realtime(record, accumulator)
        else:
            accumulator = ACCUMULATORS[protocol]._from_core(core)
            read_tap(record, protocol, accumulator)
    elif json_reply is not None:
        describe_json_reply(record, protocol, json_reply)
    return record, accumulator


class NativeGateway:
    """A running native gateway: ``address`` (host, port), ``url``, ``metrics_address`` (when
    ``metrics_port`` was given), :meth:`stop`; a context manager."""

    engine = "native"

    def __init__(self, upstream: Union[str, Mapping[str, str]], *, host: str = "127.0.0.1", port: int = 8080,
                 threads: Union[int, None] = None, on_request: Union[OnRequest, None] = None,
                 on_complete: Union[OnComplete, None] = None, tap: bool = True, read_timeout: float = 300.0,
                 connect_timeout: float = 10.0, metrics: bool = True, metrics_port: Union[int, None] = None,
                 upstream_ca: Union[str, None] = None, max_header_bytes: int = 64 * 1024,
                 max_body_bytes: int = 32 * 1024 * 1024, header_timeout: float = 30.0, grace: float = 10.0,
                 log_level: str = "info", max_pending: int = 10_000) -> None:
        engine_class = _engine_class()
        if engine_class is None:
            raise RuntimeError("the native gateway engine needs rapidsse's compiled extension (the Rust backend)")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        if metrics_port is not None and not metrics:
            raise ValueError("metrics_port needs metrics=True")
        logging.getLogger("rapidsse.gateway").setLevel(log_level.upper())
        self.upstreams = parse_upstreams(upstream)
        self.grace = grace
        self.metrics = Metrics() if metrics else None
        self.recorder = Recorder(self.metrics, on_complete, max_pending=max_pending)
        self.metrics_address: Union[tuple[str, int], None] = None
        self._metrics_server: Any = None
        self._seen_dropped = 0
        self._warned = False
        ca = None
        if upstream_ca is not None:
            with open(upstream_ca, "rb") as file:
                ca = file.read()
        self._on_request = on_request
        self._engine = engine_class(
            host=host, port=port, upstreams=list(self.upstreams.items()), tap=tap,
            read_timeout=read_timeout if read_timeout else None, connect_timeout=connect_timeout,
            header_timeout=header_timeout, max_header_bytes=max_header_bytes, max_body_bytes=max_body_bytes,
            max_json_reply=_MAX_JSON_REPLY, threads=threads or os.cpu_count() or 1, upstream_ca=ca,
            metrics_path=self.metrics is not None and metrics_port is None, record_queue=_RECORD_QUEUE,
            max_idle=10_000, on_request=self._request if on_request is not None else None,
            metrics=self._exposition if self.metrics is not None else None)
        self._drain = threading.Thread(target=self._drain_records, name=f"rapidsse-gateway-drain:{self.address[1]}",
                                       daemon=True)
        self._drain.start()
        if metrics_port is not None:
            import prometheus_client

            assert self.metrics is not None
            server, _ = prometheus_client.start_http_server(metrics_port, addr=host,
                                                            registry=self.metrics.exposition_registry())
            self._metrics_server = server
            self.metrics_address = (host, server.server_port)

    @property
    def address(self) -> tuple[str, int]:
        return self._engine.address

    @property
    def url(self) -> str:
        host, port = self.address
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"

    # --- Called by the engine, off the data path ---

    def _request(self, method: str, path: str, query: str, protocol: Union[str, None], model: Union[str, None],
                 headers: list[tuple[str, str]], body: bytes) -> tuple:
        request = GatewayRequest(method, path, query, protocol, model, body, dict(headers))
        verdict = apply_on_request(self._on_request, request, self.upstreams)
        if verdict is None:
            return request.upstream, list(request.headers.items()), request.caller, None
        reject, error = verdict
        caller = request.caller if isinstance(request.caller, str) else None
        return None, None, caller, (reject.status, error_body(protocol, reject.message, reject.status), error)

    def _exposition(self) -> tuple[bytes, str]:
        assert self.metrics is not None
        self._count_dropped()
        return self.metrics.exposition(), self.metrics.content_type.decode("latin-1")

    def _count_dropped(self) -> None:
        dropped = self._engine.dropped()
        new = dropped - self._seen_dropped
        if new > 0:
            self._seen_dropped = dropped
            if self.metrics is not None:
                self.metrics.dropped(new)
            if not self._warned:
                self._warned = True
                logger.warning("the gateway's records queue is full: exchange records are being dropped "
                               "(counted in rapidsse_gateway_records_dropped_total)")

    def _drain_records(self) -> None:
        # Takes the finished exchanges in batches: what piled up since the last turn, then a pause
        # of _LINGER unless the batch was full, so that a gateway wakes this thread (and the
        # recorder's, and the log's) ten times a second rather than once per exchange. (The
        # engine's queue holds _RECORD_QUEUE: at _BATCH per turn nothing is dropped below
        # 10,000 exchanges a second, and a full batch is followed by the next at once.)
        next_records = self._engine.next_records
        while True:
            items = next_records(0.5, _BATCH)
            if items is False:
                break
            if not items:
                self._count_dropped()
                continue
            full = len(items) >= _BATCH
            made = []
            for item in items:
                try:
                    made.append(make_record(item))
                except Exception:
                    logger.exception("the gateway could not make a record of %s %s", item[1], item[2])
            items = item = None
            self.recorder.submit_many(made)
            made = None
            if not full:
                time.sleep(_LINGER)
        self._count_dropped()

    # --- Stopping ---

    def stop(self, grace: Union[float, None] = None) -> None:
        """Stops accepting connections, gives the exchanges in flight up to ``grace`` seconds
        (default: the one given at the start), ends the rest, and lets ``on_complete`` have the
        last records."""
        if self._engine.stopped:
            return
        grace = self.grace if grace is None else grace
        self._engine.stop(grace)
        self._drain.join(10)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        self.recorder.close(max(grace, 5.0))

    def __enter__(self) -> NativeGateway:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def start(upstream: Union[str, Mapping[str, str]], **options: Any) -> NativeGateway:
    """Starts the native gateway (see :func:`rapidsse.gateway.start`)."""
    return NativeGateway(upstream, **options)


def serve(upstream: Union[str, Mapping[str, str]], **options: Any) -> None:
    """Runs the native gateway until SIGINT or SIGTERM (see :func:`rapidsse.gateway.serve`)."""
    from . import wait_for_signal

    gateway = NativeGateway(upstream, **options)
    try:
        wait_for_signal()
    finally:
        gateway.stop()
