"""A replay server: recorded streams served over the OpenAI-compatible HTTP API, on loopback.

``rapidsse serve FILE... [--host 127.0.0.1] [--port 8000] [--rate EVENTS_PER_S] [--ttft MS]``

Routes:

- ``POST /v1/responses``: a recorded Responses stream (``text/event-stream``), byte for byte;
- ``POST /v1/chat/completions``: a recorded Chat Completions stream;
- ``GET /health``: ``{"status": "ok", "recordings": {...}}``;
- ``/v1/realtime`` (WebSocket): a recorded Realtime session, one server event per message, then a
  normal close (code 1000). Client messages (``session.update``, ``response.create``, ...) are read
  and ignored; the server does not wait for them.

Each file's protocol is detected from its content: JSON lines are a Realtime session (one server
event per line, as ``corpus/realtime/*.jsonl``); an SSE body is Chat when its first JSON payload is
a chat chunk, else Responses. With several files of one protocol, requests rotate through them.

As on the OpenAI API, a request streams only when its JSON body says ``"stream": true``; otherwise
(``"stream": false``, no ``stream`` key, or no body) the reply is the final object as JSON, built from
the recording by rapidsse's accumulators, sent when the stream would have ended.

Pacing: the first event is sent ``ttft`` after the request, then ``rate`` events per second
(``rate=0``: as fast as possible). An "event" is one SSE block (up to and including its blank line),
or one Realtime message.

For tests and scripts, :class:`ReplayServer` runs it on a free port in a background thread::

    with ReplayServer(["stream.sse"], rate=200) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x")

Needs the ``serve`` extra (starlette, uvicorn); the WebSocket route also needs ``websockets``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from .accumulate import ChatAccumulator, ResponseAccumulator
from .errors import SSEError
from .decoding import detect_protocol
from .integrations import to_builtins

__all__ = [
    "BackgroundServer",
    "Pacing",
    "Recording",
    "ReplayServer",
    "create_app",
    "detect_protocol",
    "load_recording",
    "register",
    "split_events",
]


PROTOCOLS = ("responses", "chat", "realtime")
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n|$)")
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_SSE_MEDIA_TYPE = "text/event-stream; charset=utf-8"


# --- Recordings -----------------------------------------------------------------------------


@dataclass
class Recording:
    """One recorded stream, ready to replay.

    ``events`` are the pieces sent one at a time: SSE blocks (their concatenation is exactly the
    file) or Realtime messages (the file's non-blank lines). ``final`` is the final object as JSON
    builtins (Responses: the response; Chat: the chat completion; Realtime: ``None``).
    """

    path: Path
    protocol: str
    events: list[bytes]
    final: Any = None

    @property
    def body(self) -> bytes:
        """The SSE body as recorded (Responses and Chat)."""
        return b"".join(self.events)


def split_events(body: bytes) -> list[bytes]:
    """Cuts an SSE body after each blank line that ends an event block.

    Line ends are CRLF, LF or CR, as in SSE. Extra blank lines go with the block after them, so
    ``b"".join(split_events(body)) == body`` always holds.
    """
    events: list[bytes] = []
    start = 0
    in_block = False
    for match in _LINE.finditer(body):
        line = match.group()
        if not line:  # the empty match at the very end
            break
        if line.rstrip(b"\r\n"):
            in_block = True
        elif in_block:
            events.append(body[start : match.end()])
            start = match.end()
            in_block = False
    if start < len(body):
        events.append(body[start:])
    return events


def load_recording(path: str | Path) -> Recording:
    """Reads one recording, detects its protocol and precomputes its final object."""
    path = Path(path)
    data = path.read_bytes()
    protocol = detect_protocol(data)
    if protocol is None:
        raise ValueError(f"{path}: neither a Responses nor a Chat Completions SSE body, nor Realtime JSON lines")
    if protocol == "realtime":
        lines = [line.strip() for line in data.splitlines()]
        return Recording(path, protocol, [line for line in lines if line])
    accumulator: Any = (ResponseAccumulator if protocol == "responses" else ChatAccumulator)(on_error="skip")
    accumulator.feed(data)
    accumulator.close()
    final = accumulator.response if protocol == "responses" else accumulator.completion
    return Recording(path, protocol, split_events(data), None if final is None else to_builtins(final))


# --- Pacing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pacing:
    """When to send each event: ``ttft`` seconds after the request, then ``rate`` events per second
    (``0``: no delay between events)."""

    ttft: float = 0.0
    rate: float = 0.0

    def __post_init__(self) -> None:
        if self.ttft < 0 or self.rate < 0:
            raise ValueError("ttft and rate must not be negative")

    def due(self, index: int) -> float:
        """Seconds after the request at which event ``index`` (0-based) is due."""
        return self.ttft + (index / self.rate if self.rate else 0.0)

    async def paced(self, events: Sequence[bytes]) -> AsyncIterator[bytes]:
        """Yields ``events`` on schedule (against a fixed start, so delays do not drift)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for index, event in enumerate(events):
            wait = start + self.due(index) - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            yield event


# --- The ASGI app -----------------------------------------------------------------------------


class _Rotation:
    """The recordings of one protocol, handed out round-robin."""

    def __init__(self) -> None:
        self.recordings: list[Recording] = []
        self._served = 0

    def next(self) -> Recording | None:
        if not self.recordings:
            return None
        recording = self.recordings[self._served % len(self.recordings)]
        self._served += 1
        return recording


def _require_server_packages() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"the replay server needs starlette and uvicorn ({exc}); install them with "
            "pip install 'rapidsse[serve]'"
        ) from exc


def create_app(recordings: Iterable[Recording | str | Path], *, pacing: Pacing = Pacing()) -> Any:
    """The Starlette app that replays ``recordings`` (paths or loaded :class:`Recording` objects)."""
    _require_server_packages()
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    rotations = {protocol: _Rotation() for protocol in PROTOCOLS}
    for item in recordings:
        recording = item if isinstance(item, Recording) else load_recording(item)
        rotations[recording.protocol].recordings.append(recording)

    def error(status: int, message: str, code: str) -> Response:
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
        return JSONResponse(body, status_code=status)

    async def replay(request: Request, protocol: str) -> Response:
        raw = await request.body()
        try:
            body = msgspec.json.decode(raw) if raw.strip() else {}
        except msgspec.DecodeError as exc:
            return error(400, f"the request body is not valid JSON: {exc}", "invalid_json")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object", "invalid_json")
        recording = rotations[protocol].next()
        if recording is None:
            return error(404, f"this replay server has no {protocol} recording", "no_recording")
        if body.get("stream") is not True:
            await asyncio.sleep(pacing.due(len(recording.events) - 1))
            return Response(msgspec.json.encode(recording.final), media_type="application/json")
        return StreamingResponse(
            pacing.paced(recording.events), media_type=_SSE_MEDIA_TYPE, headers=_SSE_HEADERS
        )

    async def responses(request: Request) -> Response:
        return await replay(request, "responses")

    async def chat_completions(request: Request) -> Response:
        return await replay(request, "chat")

    async def health(request: Request) -> Response:
        counts = {protocol: len(rotation.recordings) for protocol, rotation in rotations.items()}
        return JSONResponse({"status": "ok", "recordings": counts})

    async def realtime(websocket: WebSocket) -> None:
        recording = rotations["realtime"].next()
        if recording is None:
            await websocket.close(code=1008, reason="this replay server has no realtime recording")
            return
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(subprotocol="realtime" if "realtime" in offered else None)

        async def drain() -> None:
            # Client events are accepted and ignored; reading them also notices a disconnect.
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass

        reader = asyncio.create_task(drain())
        try:
            async for message in pacing.paced(recording.events):
                if reader.done():  # the client left
                    return
                await websocket.send_text(message.decode("utf-8"))
            await websocket.close(code=1000)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client went away mid-session
        finally:
            reader.cancel()

    routes = [
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        WebSocketRoute("/v1/realtime", realtime),
    ]
    return Starlette(routes=routes)


# --- Running it -------------------------------------------------------------------------------


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on ``host``:``port`` (``0``: a free port)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class BackgroundServer:
    """Runs an ASGI app with uvicorn in a daemon thread, on ``host`` (loopback by default) and
    ``port`` (``0``: a free port, bound before the server starts, so :attr:`url` is known at once).

    A context manager: ``with BackgroundServer(app) as server: ... server.url ...``; leaving it
    stops the server (streams still open are cut after ``shutdown_timeout`` seconds).
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        shutdown_timeout: float = 2.0,
    ) -> None:
        _require_server_packages()
        self.app = app
        self.host = host
        self.port = port
        self.log_level = log_level
        self.shutdown_timeout = shutdown_timeout
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` (no trailing slash)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Binds the port, starts uvicorn and waits until it accepts connections."""
        import uvicorn

        sock = _bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            timeout_graceful_shutdown=max(1, round(self.shutdown_timeout)),
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"uvicorn:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the server on {self.url} failed to start (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the server on {self.url} did not start within {timeout} s")
            time.sleep(0.005)

    def stop(self) -> None:
        """Asks uvicorn to exit and waits for its thread (bounded)."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(self.shutdown_timeout + 5)
        self._server = self._thread = None

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


class ReplayServer(BackgroundServer):
    """The replay server of :func:`create_app` in a background thread (see :class:`BackgroundServer`).

    ``files``: recordings (paths); ``rate``: events per second after the first (``0``: as fast as
    possible); ``ttft``: seconds before the first event. ``url`` is the base URL: the OpenAI base URL
    is ``server.url + "/v1"``, the Realtime one ``server.ws_url``.
    """

    def __init__(
        self,
        files: Iterable[str | Path | Recording],
        *,
        rate: float = 0.0,
        ttft: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
    ) -> None:
        self.recordings = [f if isinstance(f, Recording) else load_recording(f) for f in files]
        super().__init__(
            create_app(self.recordings, pacing=Pacing(ttft=ttft, rate=rate)),
            host=host,
            port=port,
            log_level=log_level,
        )

    @property
    def ws_url(self) -> str:
        """The Realtime WebSocket URL, ``ws://host:port/v1/realtime``."""
        return "ws" + self.url[len("http") :] + "/v1/realtime"


# --- The command line -------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Adds the ``serve`` subcommand to the ``rapidsse`` command line."""
    parser = subparsers.add_parser(
        "serve",
        help="replay recorded streams over the OpenAI-compatible HTTP API",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="recordings: Responses or Chat SSE bodies, Realtime JSON lines")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s; 0: any free port)")
    parser.add_argument("--rate", type=float, default=0.0, metavar="EVENTS_PER_S",
                        help="events per second after the first (default: 0, as fast as possible)")
    parser.add_argument("--ttft", type=float, default=0.0, metavar="MS",
                        help="milliseconds before the first event (default: 0)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rapidsse serve``: loads the recordings and serves them until interrupted.

    Exit codes as for the rest of the command line: 1 for a missing dependency, a bad option or an
    unreadable file, 2 for a file that is not a recording.
    """
    try:
        _require_server_packages()
        pacing = Pacing(ttft=args.ttft / 1000.0, rate=args.rate)
    except (ImportError, ValueError) as exc:
        print(f"rapidsse serve: {exc}", file=sys.stderr)
        return 1
    try:
        recordings = [load_recording(path) for path in args.files]
    except OSError as exc:
        print(f"rapidsse serve: {exc}", file=sys.stderr)
        return 1
    except (ValueError, SSEError) as exc:
        print(f"rapidsse serve: {exc}", file=sys.stderr)
        return 2
    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        print(f"rapidsse serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    import uvicorn

    port = sock.getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    counts = {p: sum(r.protocol == p for r in recordings) for p in PROTOCOLS}
    print(f"rapidsse serve: {counts['responses']} responses, {counts['chat']} chat, "
          f"{counts['realtime']} realtime recording(s) on http://{host}:{port}/v1", file=sys.stderr, flush=True)
    config = uvicorn.Config(create_app(recordings, pacing=pacing), log_level=args.log_level)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
