"""``rapidsse gateway``: the command line of :mod:`rapidsse.gateway`.

Its logging never holds up a stream: every log record (the default ``on_complete``'s JSON lines,
uvicorn's, the native engine's) goes through a :class:`logging.handlers.QueueHandler` onto a
bounded queue (a record that does not fit is dropped and counted) and a
:class:`~logging.handlers.QueueListener` thread writes them to stderr. A stderr that nobody reads
(a full pipe) so stalls that thread only. The first line, ``rapidsse gateway: http://HOST:PORT ->
UPSTREAM (...)``, is written directly (and flushed) before the listener starts."""

from __future__ import annotations

import argparse
import gc
import logging
import logging.handlers
import os
import queue
import re
import sys
import tempfile
from typing import Any, Union

import msgspec

__all__ = ["register", "run"]

_ENV = "RAPIDSSE_GATEWAY"
LOG_QUEUE = 10_000
"""Log records the CLI's queue holds before it drops new ones (stderr not keeping up)."""

_NAMED = re.compile(r"^([A-Za-z0-9_.-]+)=(.+)$")


class DroppingQueueHandler(logging.handlers.QueueHandler):
    """A :class:`~logging.handlers.QueueHandler` that never blocks: a record the bounded queue has
    no room for is dropped and counted in :attr:`dropped`."""

    def __init__(self, log_queue: queue.Queue[Any]) -> None:
        super().__init__(log_queue)
        self.dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


def install_logging(level: str) -> tuple[DroppingQueueHandler, logging.handlers.QueueListener]:
    """Routes all logging (and warnings) through a :class:`DroppingQueueHandler`; returns it and
    the listener that writes the records to stderr (not started yet: start it once the first
    line is out)."""
    log_queue: queue.Queue[Any] = queue.Queue(LOG_QUEUE)
    handler = DroppingQueueHandler(log_queue)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("rapidsse.gateway").setLevel(level.upper())
    logging.captureWarnings(True)
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("%(message)s"))
    return handler, logging.handlers.QueueListener(log_queue, stream)


def stop_logging(listener: logging.handlers.QueueListener, timeout: float = 2.0) -> bool:
    """Stops the listener after what is queued, waiting at most ``timeout`` seconds (a stalled
    stderr keeps its thread, a daemon, stuck in a write); True when it did stop."""
    thread = getattr(listener, "_thread", None)
    if thread is None:
        return True
    try:
        listener.queue.put(None, timeout=timeout)  # type: ignore[attr-defined]  (the listener's sentinel)
    except queue.Full:
        return False
    thread.join(timeout)
    if thread.is_alive():
        return False
    listener._thread = None  # type: ignore[attr-defined]
    return True


def parse_upstream_args(values: list[str]) -> Union[str, dict[str, str]]:
    """``--upstream`` given once as a URL, or once or more as ``NAME=URL`` (the first the
    default)."""
    named = [_NAMED.match(v) for v in values]
    if len(values) == 1 and named[0] is None:
        return values[0]
    if any(m is None for m in named):
        raise ValueError("--upstream: give one URL, or NAME=URL for each upstream (the first is the default)")
    out: dict[str, str] = {}
    for match in named:
        assert match is not None
        name, url = match.groups()
        if name in out:
            raise ValueError(f"--upstream: {name!r} is named twice")
        out[name] = url
    return out


# --- A worker process of ``--workers N`` (asyncio engine) --------------------------------------------


def _app_from_environment() -> Any:
    """The app of ``rapidsse gateway --workers N`` in a uvicorn worker: its options come through
    the environment (workers are separate processes that import this factory)."""
    from .asyncio_engine import create_gateway

    options = msgspec.json.decode(os.environ[_ENV])
    _, listener = install_logging(options["log_level"])
    listener.start()
    app = create_gateway(options["upstream"], tap=options["tap"], read_timeout=options["read_timeout"],
                         connect_timeout=options["connect_timeout"], max_body_bytes=options["max_body_bytes"],
                         upstream_ca=options["upstream_ca"], serve_metrics=options["metrics_port"] is None)
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
    from .asyncio_engine import DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_HEADER_BYTES

    parser = subparsers.add_parser(
        "gateway",
        help="forward every LLM request to an upstream untouched, with a record and metrics per exchange",
        description="A streaming LLM gateway: forwards every request to a configured upstream untouched, and "
        "accounts for each exchange with rapidsse's tap (a JSON line per exchange on stderr, Prometheus metrics).",
    )
    parser.add_argument("--upstream", required=True, action="append", metavar="URL|NAME=URL",
                        help="the upstream's base URL, e.g. https://api.openai.com (the request's path is appended); "
                        "or NAME=URL, as many times as there are upstreams (the first is the default)")
    parser.add_argument("--engine", choices=["native", "asyncio"], default=None,
                        help="native (the data path in Rust; the default on the Rust backend when built with it) or "
                        "asyncio (uvicorn + aiohttp; the default otherwise)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="the native engine's worker threads (default: one per core)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: %(default)s; 0: any free port)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="the asyncio engine's worker processes (default: %(default)s; metrics are then gathered "
                        "across them)")
    parser.add_argument("--no-tap", dest="tap", action="store_false",
                        help="forward without accumulating (no tokens, ttft or finish reason in the records)")
    parser.add_argument("--read-timeout", type=float, default=300.0, metavar="S",
                        help="seconds upstream may send nothing before a stream is cut (default: %(default)s)")
    parser.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                        help="seconds to reach upstream (default: %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve /metrics on this port of its own (then /metrics on the gateway's port is "
                        "forwarded like any path); default: /metrics on the gateway's port")
    parser.add_argument("--upstream-ca", default=None, metavar="FILE",
                        help="PEM file of a private CA to trust for https upstreams")
    parser.add_argument("--max-header-bytes", type=int, default=DEFAULT_MAX_HEADER_BYTES, metavar="N",
                        help="a request header block over this is answered 431 (default: %(default)s)")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, metavar="N",
                        help="a request body over this is answered 413 (default: %(default)s)")
    parser.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT, metavar="S",
                        help="seconds a connection has to send its header block (default: %(default)s)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="S",
                        help="on SIGINT/SIGTERM, seconds the streams in flight have to finish (default: %(default)s)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="also of the records' JSON lines, logged at info (default: %(default)s)")
    parser.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"rapidsse gateway: {message}", file=sys.stderr, flush=True)
    return 1


def run(args: argparse.Namespace) -> int:
    """``rapidsse gateway``: serves the gateway until SIGINT or SIGTERM."""
    from . import _engine, start, wait_for_signal
    from .hooks import parse_upstreams

    try:
        engine = _engine(args.engine)
        upstream = parse_upstream_args(args.upstream)
        upstreams = parse_upstreams(upstream)
    except (ValueError, RuntimeError) as exc:
        return _fail(str(exc))
    try:
        import prometheus_client  # noqa: F401

        if engine == "asyncio":
            import aiohttp  # noqa: F401
            import uvicorn  # noqa: F401
    except ImportError as exc:
        return _fail(f"{exc}; install it with pip install 'rapidsse[gateway]'")
    if args.workers < 1:
        return _fail("--workers must be at least 1")
    if engine == "native" and args.workers != 1:
        return _fail("--workers is the asyncio engine's; the native engine runs threads (--threads N)")
    if engine == "asyncio" and args.threads not in (None, 1):
        return _fail("--threads is the native engine's; the asyncio engine runs one event loop per worker process "
                     "(--workers N)")
    if args.threads is not None and args.threads < 1:
        return _fail("--threads must be at least 1")
    shown = upstream if isinstance(upstream, str) else ", ".join(f"{k}={v}" for k, v in upstreams.items())
    tapped = "tapped" if args.tap else "no tap"
    handler, listener = install_logging(args.log_level)
    if engine == "asyncio" and args.workers > 1:
        return _run_workers(args, upstream, shown, tapped, listener)
    try:
        server = start(upstream, host=args.host, port=args.port, engine=engine, threads=args.threads, tap=args.tap,
                       read_timeout=args.read_timeout, connect_timeout=args.connect_timeout,
                       metrics_port=args.metrics_port, upstream_ca=args.upstream_ca,
                       max_header_bytes=args.max_header_bytes, max_body_bytes=args.max_body_bytes,
                       header_timeout=args.header_timeout, grace=args.grace, log_level=args.log_level)
    except OSError as exc:
        listener.start()
        stop_logging(listener)
        return _fail(f"cannot listen on {args.host}:{args.port}: {exc}")
    except (ValueError, RuntimeError) as exc:
        listener.start()
        stop_logging(listener)
        return _fail(str(exc))
    detail = f"{args.threads or os.cpu_count() or 1} threads" if engine == "native" else "1 worker"
    metrics = (f", metrics on port {server.metrics_address[1]}"
               if args.metrics_port is not None and getattr(server, "metrics_address", None) else "")
    print(f"rapidsse gateway: {server.url} -> {shown} ({tapped}, {engine} engine, {detail}{metrics})",
          file=sys.stderr, flush=True)
    listener.start()
    if engine == "asyncio":
        _tune_collector()
    try:
        wait_for_signal()
    finally:
        server.stop()
        if stop_logging(listener) and handler.dropped:
            print(f"rapidsse gateway: {handler.dropped} log lines were dropped (stderr did not keep up)",
                  file=sys.stderr, flush=True)
    return 0


def _run_workers(args: argparse.Namespace, upstream: Union[str, dict[str, str]], shown: str, tapped: str,
                 listener: logging.handlers.QueueListener) -> int:
    """``--workers N`` (asyncio engine): N uvicorn worker processes on one socket."""
    from uvicorn.supervisors import Multiprocess

    from ..serving.serve import listen
    from .asyncio_engine import _uvicorn_config

    listening = listen("gateway", args.host, args.port)
    if listening is None:
        return 1
    sock, url = listening
    os.environ[_ENV] = msgspec.json.encode(
        {"upstream": upstream, "tap": args.tap, "read_timeout": args.read_timeout,
         "connect_timeout": args.connect_timeout, "max_body_bytes": args.max_body_bytes,
         "upstream_ca": args.upstream_ca, "metrics_port": args.metrics_port, "log_level": args.log_level}).decode()
    metrics_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = tempfile.TemporaryDirectory(prefix="rapidsse-gateway-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir.name
    metrics_server = None
    try:
        if args.metrics_port is not None:
            import prometheus_client
            from prometheus_client import multiprocess

            registry = prometheus_client.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            metrics_server, _ = prometheus_client.start_http_server(args.metrics_port, addr=args.host,
                                                                    registry=registry)
        print(f"rapidsse gateway: {url} -> {shown} ({tapped}, asyncio engine, {args.workers} workers)",
              file=sys.stderr, flush=True)
        listener.start()
        config = _uvicorn_config("rapidsse.gateway.cli:_app_from_environment", factory=True, workers=args.workers,
                                 log_level=args.log_level, grace=args.grace, max_header_bytes=args.max_header_bytes,
                                 header_timeout=args.header_timeout)
        Multiprocess(config, sockets=[sock]).run()
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
        if metrics_dir is not None:
            metrics_dir.cleanup()
        stop_logging(listener)
    return 0
