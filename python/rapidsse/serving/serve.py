"""A replay server and a synthetic one: LLM streams over the providers' HTTP APIs, on loopback.

``rapidsse serve FILE... [--host 127.0.0.1] [--port 8000] [--rate EVENTS_PER_S] [--ttft MS]``
replays recordings; ``rapidsse serve --synthetic [--tokens N] [--rate TOKENS_PER_S] [--ttft MS]``
generates streams on the fly, at every streaming route, paced exactly.

Routes:

- ``POST /v1/responses``: a Responses stream (``text/event-stream``);
- ``POST /v1/chat/completions``: a Chat Completions stream;
- ``POST /v1/completions``: a (legacy) Completions stream;
- ``POST /v1/messages``: an Anthropic Messages stream;
- ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``: a Gemini stream (also under
  ``/v1/models/...``, where google-genai goes when given a ``base_url``);
- ``GET /health``: ``{"status": "ok", "recordings": {...}}``; for the synthetic server
  ``{"status": "ok", "synthetic": {...}, "lateness": {...}, "itl": {...}}``: how late the tokens
  left against their schedule, and the gaps between consecutive tokens of a stream as sent (each
  with count, median, p99, max in ms; ``?reset`` starts counting anew);
- ``/v1/realtime`` (WebSocket, replay only): a recorded Realtime session, one server event per
  message, then a normal close (code 1000). Client messages (``session.update``,
  ``response.create``, ...) are read and ignored; the server does not wait for them.

**Replay.** Recordings are sent byte for byte. Each file's protocol is detected from its content
(:func:`recording_protocol`): JSON lines are a Realtime session; an SSE body is Anthropic when its
events are ``message_start``, ``content_block_*``..., Gemini when its JSON has ``candidates`` or
``usageMetadata`` and no ``type``, Completions when its chunks are ``text_completion`` objects,
Chat when they have ``choices``, else Responses. With several files of one protocol, requests
rotate through them. A request streams only when its JSON body says ``"stream": true`` (Gemini's
route always streams); otherwise the Responses, Chat, Completions and Anthropic routes reply
with the final object as JSON, built from the recording by rapidsse's accumulators and sent when
the stream would have ended. Pacing: the first event is sent ``ttft`` after
the request, then ``rate`` events per second (``0``: as fast as possible); an event is one SSE
block (up to and including its blank line), or one Realtime message.

**Synthetic** (:func:`create_synthetic_app`). Each streaming request gets a stream of its
protocol's events made on the fly: the opening events at once (``response.created``...,
``message_start``...), then token ``i`` (one text delta: one event) at ``ttft + i / rate``
seconds after the request arrived, each scheduled against that fixed start (a late token does
not delay the next), then the closing events with the last token. A stream has ``tokens``
tokens, or fewer when the request asks for fewer (``max_output_tokens``,
``max_completion_tokens``, ``max_tokens``, ``generationConfig.maxOutputTokens``: the stream then
ends as truncated, e.g. ``finish_reason: "length"``). Usage is reported (for Chat and Completions
when ``stream_options.include_usage`` asks): output tokens as sent, input tokens as the words of
the prompt. The timers of all streams share one clock that wakes up ahead of a deadline and then
polls the event loop until it is due, so tokens leave within tens of microseconds of their
deadline instead of up to a millisecond late (the resolution of the event loop's own timers).
The routes are plain ASGI callables (no per-token Starlette machinery), so one uvicorn process
sustains hundreds of concurrent streams. Non-streaming requests get an error (400).

**Engines** (``--engine native|asyncio``). Both servers run on uvicorn (``asyncio``, the ASGI
apps above) or on the *native* engine: the same routes and the same bytes in Rust (hyper on
tokio, ``rust/src/net/serve.rs`` and ``replay.rs``; the Realtime WebSocket on tokio-tungstenite),
with no Python per event; the default on the Rust backend (the pure-Python backend has only
``asyncio``). For replay, Python reads the recordings (protocol, pieces, final object) and hands
them to the engine once. ``--workers N`` (synthetic on both engines, replay on ``native``) runs N
servers on the one port with ``SO_REUSEPORT``, each pacing its own streams with its own clock,
``/health`` reporting them all: N processes for ``asyncio``, N threads of one process for
``native``, each with its own single-threaded runtime (a replay server's threads share one
rotation).

For tests and scripts, :class:`ReplayServer` and :class:`SyntheticServer` run it on a free port in
a background thread::

    with ReplayServer(["stream.sse"], rate=200) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x")

The ``asyncio`` engine needs the ``serve`` extra (starlette, uvicorn, httptools); the WebSocket
route also needs ``websockets``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gc
import heapq
import itertools
import os
import re
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..accumulate import (AnthropicAccumulator, ChatAccumulator, CompletionsAccumulator, ResponseAccumulator)
from ..errors import SSEError
from ..decoding import detect_protocol
from ..integrations import to_builtins

__all__ = [
    "BackgroundServer",
    "Pacing",
    "Recording",
    "ReplayServer",
    "Synthetic",
    "SyntheticServer",
    "Tally",
    "choose_engine",
    "create_app",
    "create_synthetic_app",
    "detect_protocol",
    "load_recording",
    "native_available",
    "recording_protocol",
    "register",
    "split_events",
    "start_native",
]


PROTOCOLS = ("responses", "chat", "completions", "anthropic", "gemini", "realtime")
ROUTES = {
    "responses": "/v1/responses",
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/{model}:streamGenerateContent",
}
"""The HTTP route of each streaming protocol (Starlette paths). Gemini's is also served under
``/v1/`` (the stable API version, which google-genai uses when given a ``base_url``)."""
_ALIASES = {"gemini": "/v1/models/{model}:streamGenerateContent"}


def _routes() -> list[tuple[str, str]]:
    """(protocol, path) for every streaming route, aliases included."""
    return [*ROUTES.items(), *_ALIASES.items()]
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n|$)")
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_SSE_RAW_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no")]
_SSE_MEDIA_TYPE = "text/event-stream; charset=utf-8"


# --- Recordings -----------------------------------------------------------------------------


@dataclass
class Recording:
    """One recorded stream, ready to replay.

    ``events`` are the pieces sent one at a time: SSE blocks (their concatenation is exactly the
    file) or Realtime messages (the file's non-blank lines). ``final`` is the final object as JSON
    builtins (Responses: the response; Chat and Completions: the completion; Anthropic: the
    message; Gemini and Realtime: ``None``).
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


def recording_protocol(data: bytes) -> str | None:
    """The protocol of a recorded stream, from its first MiB: :func:`rapidsse.decoding.detect_protocol`.
    None when the bytes tell nothing."""
    return detect_protocol(data[:1024 * 1024])


def load_recording(path: str | Path) -> Recording:
    """Reads one recording, detects its protocol and, for Responses, Chat, Completions and
    Anthropic, precomputes its final object."""
    path = Path(path)
    data = path.read_bytes()
    protocol = recording_protocol(data)
    if protocol is None:
        raise ValueError(f"{path}: not a recorded stream (Responses, Chat, Completions, Anthropic or Gemini SSE, "
                         "or Realtime JSON lines)")
    if protocol == "realtime":
        lines = [line.strip() for line in data.splitlines()]
        return Recording(path, protocol, [line for line in lines if line])
    if protocol not in _FINAL:
        return Recording(path, protocol, split_events(data))
    cls, attribute = _FINAL[protocol]
    accumulator = cls(on_error="skip")
    accumulator.feed(data)
    accumulator.close()
    final = getattr(accumulator, attribute)
    return Recording(path, protocol, split_events(data), None if final is None else to_builtins(final))


# The accumulator that builds a recording's final object, for the routes that answer a request
# without "stream": true (Gemini's streaming route has no such answer).
_FINAL: dict[str, tuple[Any, str]] = {
    "responses": (ResponseAccumulator, "response"),
    "chat": (ChatAccumulator, "completion"),
    "completions": (CompletionsAccumulator, "completion"),
    "anthropic": (AnthropicAccumulator, "message"),
}


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
        if protocol != "gemini" and body.get("stream") is not True:
            if recording.final is None:
                return error(400, f"{protocol} recordings are replayed as streams only: send \"stream\": true",
                             "stream_required")
            await asyncio.sleep(pacing.due(len(recording.events) - 1))
            return Response(msgspec.json.encode(recording.final), media_type="application/json")
        return StreamingResponse(
            pacing.paced(recording.events), media_type=_SSE_MEDIA_TYPE, headers=_SSE_HEADERS
        )

    def route(protocol: str) -> Any:
        async def endpoint(request: Request) -> Response:
            return await replay(request, protocol)

        return endpoint

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
        *(Route(path, route(protocol), methods=["POST"]) for protocol, path in _routes()),
        Route("/health", health, methods=["GET"]),
        WebSocketRoute("/v1/realtime", realtime),
    ]
    return Starlette(routes=routes)


# --- Synthetic streams --------------------------------------------------------------------------


class _Clock:
    """Wakes waiters at absolute deadlines (``time.monotonic()``) more precisely than ``asyncio.sleep``.

    The event loop's timers fire up to a millisecond late (its poll takes whole milliseconds; uvloop
    even reads its clock in milliseconds), which would be the whole error budget of a benchmark's
    ITL. So one timer, for every waiter of the loop, fires :attr:`EARLY` seconds ahead of the
    earliest deadline; from there the clock checks ``time.monotonic()`` once per turn of the loop
    (``call_soon``: the loop still polls its sockets in between) and releases each waiter when its
    deadline has come. One callback per turn, however many streams wait.
    """

    EARLY = 0.002

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._polling = False

    def until(self, deadline: float) -> asyncio.Future[None] | None:
        """A future done at ``deadline`` (``time.monotonic()``), or None when it has passed."""
        if deadline <= time.monotonic():
            return None
        waiter: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._waiters, (deadline, next(self._order), waiter))
        if self._waiters[0][2] is waiter and not self._polling:
            self._arm()
        return waiter

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._waiters:
            return
        ahead = self._waiters[0][0] - time.monotonic() - self.EARLY
        if ahead > 0:
            self._timer = self._loop.call_later(ahead, self._tick)
        else:
            self._polling = True
            self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._polling = False
        now = time.monotonic()
        waiters = self._waiters
        while waiters and waiters[0][0] <= now:
            waiter = heapq.heappop(waiters)[2]
            if not waiter.done():  # a waiter whose stream was cancelled
                waiter.set_result(None)
        self._arm()


@dataclass(frozen=True)
class Synthetic:
    """What the synthetic server streams: ``tokens`` tokens per stream (fewer when a request asks),
    the first ``ttft`` seconds after the request, then ``rate`` tokens per second (``0``: all at
    once)."""

    tokens: int = 100
    rate: float = 50.0
    ttft: float = 0.1

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError("tokens must be at least 1")
        Pacing(ttft=self.ttft, rate=self.rate)  # validates both

    @property
    def pacing(self) -> Pacing:
        """The token schedule: token ``i`` is due ``pacing.due(i)`` seconds after the request."""
        return Pacing(ttft=self.ttft, rate=self.rate)

    @staticmethod
    def token(index: int) -> str:
        """The text of token ``index`` (the same words in every stream)."""
        return _SYNTHETIC_WORDS[index % len(_SYNTHETIC_WORDS)]

    @classmethod
    def text(cls, tokens: int) -> str:
        """The whole text of a stream of ``tokens`` tokens."""
        return "".join(cls.token(i) for i in range(tokens))


_SYNTHETIC_WORDS = ("Hello", " there", ",", " this", " is", " a", " synthetic", " stream", " of", " tokens",
                    " paced", " by", " rapidsse", ".")
_LIMIT_KEYS = {
    "responses": ("max_output_tokens",),
    "chat": ("max_completion_tokens", "max_tokens"),
    "completions": ("max_tokens",),
    "anthropic": ("max_tokens",),
}
_PROMPT_KEYS = {"responses": "input", "chat": "messages", "completions": "prompt", "anthropic": "messages",
                "gemini": "contents"}
_TEXT_KEYS = frozenset({"content", "text", "input", "prompt", "parts"})


def _words(value: Any) -> int:
    """Words in the prompt texts of ``value`` (strings, and the text fields of messages and parts)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(item) for item in value)
    if isinstance(value, dict):
        return sum(_words(item) for key, item in value.items() if key in _TEXT_KEYS)
    return 0


def _limit(protocol: str, body: dict[str, Any]) -> int | None:
    if protocol == "gemini":
        config = body.get("generationConfig")
        value = config.get("maxOutputTokens") if isinstance(config, dict) else None
    else:
        value = next((body[key] for key in _LIMIT_KEYS[protocol] if body.get(key) is not None), None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _sse(data: Any, event: str | None = None, line_end: bytes = b"\n") -> bytes:
    head = b"event: " + event.encode() + line_end if event else b""
    return head + b"data: " + msgspec.json.encode(data) + line_end + line_end


class _Plan(msgspec.Struct):
    """One synthetic stream: what to send, decided when the request arrives."""

    protocol: str
    model: str
    tokens: int
    truncated: bool
    prompt_tokens: int
    include_usage: bool
    id: str
    created: int


def _responses_stream(plan: _Plan) -> Iterator[bytes]:
    seq = itertools.count()
    item_id = "msg_" + plan.id
    usage = {"input_tokens": plan.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": plan.tokens, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": plan.prompt_tokens + plan.tokens}

    def response(status: str, output: list[Any], final: bool) -> dict[str, Any]:
        return {"id": "resp_" + plan.id, "object": "response", "created_at": plan.created, "status": status,
                "model": plan.model, "output": output,
                "incomplete_details": {"reason": "max_output_tokens"} if final and plan.truncated else None,
                "usage": usage if final else None}

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    part = {"type": "output_text", "text": "", "annotations": []}
    item = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    yield (event("response.created", response=response("in_progress", [], False))
           + event("response.in_progress", response=response("in_progress", [], False))
           + event("response.output_item.added", output_index=0, item=item)
           + event("response.content_part.added", item_id=item_id, output_index=0, content_index=0, part=part))
    for i in range(plan.tokens):
        chunk = event("response.output_text.delta", item_id=item_id, output_index=0, content_index=0,
                      delta=Synthetic.token(i), logprobs=[])
        if i == plan.tokens - 1:
            text = Synthetic.text(plan.tokens)
            done_part = {**part, "text": text}
            done_item = {**item, "status": "completed", "content": [done_part]}
            status = "incomplete" if plan.truncated else "completed"
            chunk += (event("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=text,
                            logprobs=[])
                      + event("response.content_part.done", item_id=item_id, output_index=0, content_index=0,
                              part=done_part)
                      + event("response.output_item.done", output_index=0, item=done_item)
                      + event(f"response.{status}", response=response(status, [done_item], True)))
        yield chunk


def _openai_chunk(plan: _Plan, id_prefix: str, kind: str) -> Callable[..., bytes]:
    """The writer of one Chat (``chat.completion.chunk``) or Completions (``text_completion``)
    chunk of ``plan``'s stream: ``chunk(choices, usage=None)``."""
    def chunk(choices: list[Any], usage: Any = None) -> bytes:
        body: dict[str, Any] = {"id": id_prefix + plan.id, "object": kind, "created": plan.created,
                                "model": plan.model, "choices": choices}
        if plan.include_usage:
            body["usage"] = usage
        return _sse(body)

    return chunk


def _openai_end(plan: _Plan, chunk: Callable[..., bytes]) -> bytes:
    """What ends a Chat or Completions stream: the usage chunk when it was asked for, then ``[DONE]``."""
    usage = b""
    if plan.include_usage:
        usage = chunk([], {"prompt_tokens": plan.prompt_tokens, "completion_tokens": plan.tokens,
                           "total_tokens": plan.prompt_tokens + plan.tokens})
    return usage + b"data: [DONE]\n\n"


def _chat_stream(plan: _Plan) -> Iterator[bytes]:
    chunk = _openai_chunk(plan, "chatcmpl-", "chat.completion.chunk")
    yield b""
    for i in range(plan.tokens):
        delta: dict[str, Any] = {"content": Synthetic.token(i)}
        if i == 0:
            delta = {"role": "assistant", **delta}
        data = chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])
        if i == plan.tokens - 1:
            data += chunk([{"index": 0, "delta": {}, "logprobs": None,
                            "finish_reason": "length" if plan.truncated else "stop"}])
            data += _openai_end(plan, chunk)
        yield data


def _completions_stream(plan: _Plan) -> Iterator[bytes]:
    chunk = _openai_chunk(plan, "cmpl-", "text_completion")
    yield b""
    for i in range(plan.tokens):
        last = i == plan.tokens - 1
        finish = ("length" if plan.truncated else "stop") if last else None
        data = chunk([{"index": 0, "text": Synthetic.token(i), "logprobs": None, "finish_reason": finish}])
        if last:
            data += _openai_end(plan, chunk)
        yield data


def _anthropic_stream(plan: _Plan) -> Iterator[bytes]:
    message = {"id": "msg_" + plan.id, "type": "message", "role": "assistant", "model": plan.model, "content": [],
               "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": plan.prompt_tokens, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0, "output_tokens": 1}}
    yield (_sse({"type": "message_start", "message": message}, "message_start")
           + _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                  "content_block_start")
           + _sse({"type": "ping"}, "ping"))
    for i in range(plan.tokens):
        data = _sse({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": Synthetic.token(i)}},
                    "content_block_delta")
        if i == plan.tokens - 1:
            data += (_sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
                     + _sse({"type": "message_delta",
                             "delta": {"stop_reason": "max_tokens" if plan.truncated else "end_turn",
                                       "stop_sequence": None},
                             "usage": {"input_tokens": plan.prompt_tokens, "output_tokens": plan.tokens}},
                            "message_delta")
                     + _sse({"type": "message_stop"}, "message_stop"))
        yield data


def _gemini_stream(plan: _Plan) -> Iterator[bytes]:
    yield b""
    for i in range(plan.tokens):
        candidate: dict[str, Any] = {
            "content": {"parts": [{"text": Synthetic.token(i)}], "role": "model"},
            "index": 0,
        }
        if i == plan.tokens - 1:
            candidate["finishReason"] = "MAX_TOKENS" if plan.truncated else "STOP"
        usage = {"promptTokenCount": plan.prompt_tokens, "candidatesTokenCount": i + 1,
                 "totalTokenCount": plan.prompt_tokens + i + 1}
        yield _sse({"candidates": [candidate], "usageMetadata": usage, "modelVersion": plan.model,
                    "responseId": plan.id}, line_end=b"\r\n")


_SYNTHETIC_STREAMS: dict[str, Callable[[_Plan], Iterator[bytes]]] = {
    "responses": _responses_stream,
    "chat": _chat_stream,
    "completions": _completions_stream,
    "anthropic": _anthropic_stream,
    "gemini": _gemini_stream,
}


class Tally:
    """Counts of durations (seconds) for ``/health``: 1 µs bins up to 32.768 ms, then 1 ms bins up
    to about 32.8 s (the last bin also takes anything longer), and the exact maximum. Fixed-size
    ctypes arrays, so that the tallies of several server processes can live in shared memory
    (:meth:`shared`) and be read together by whichever process answers ``/health``."""

    FINE = 32768
    COARSE = 32768
    SIZE = FINE + COARSE

    def __init__(self, counts: Any = None, peak: Any = None) -> None:
        import ctypes

        self.counts = counts if counts is not None else (ctypes.c_int64 * self.SIZE)()
        self.peak = peak if peak is not None else (ctypes.c_double * 1)()

    @classmethod
    def shared(cls, context: Any) -> Tally:
        """A tally in shared memory of ``context`` (a multiprocessing context), to hand to a child."""
        return cls(context.RawArray("q", cls.SIZE), context.RawArray("d", 1))

    def __reduce__(self) -> Any:  # (passed to a spawned child by its shared arrays)
        return (Tally, (self.counts, self.peak))

    def add(self, seconds: float) -> None:
        micros = int(seconds * 1e6)
        if micros < self.FINE:
            self.counts[micros if micros > 0 else 0] += 1
        else:
            self.counts[min(self.FINE + (micros - self.FINE) // 1000, self.SIZE - 1)] += 1
        if seconds > self.peak[0]:
            self.peak[0] = seconds

    def reset(self) -> None:
        import ctypes

        ctypes.memset(self.counts, 0, ctypes.sizeof(self.counts))
        self.peak[0] = 0.0

    @classmethod
    def stats(cls, tallies: Sequence[Tally]) -> dict[str, Any]:
        """count, median, p99 and max in ms of all ``tallies`` together (a percentile as its bin's
        lower edge: within 1 µs below 32 ms, 1 ms above)."""
        counts = [sum(column) for column in zip(*(t.counts for t in tallies))] if len(tallies) > 1 \
            else list(tallies[0].counts)
        total = sum(counts)
        if not total:
            return {"count": 0, "median_ms": None, "p99_ms": None, "max_ms": None}
        cumulative = list(itertools.accumulate(counts))

        def at(q: float) -> float:
            rank = min(total - 1, int(q * total))  # the sample of that rank, counting from 0
            index = bisect.bisect_right(cumulative, rank)
            return index / 1000.0 if index < cls.FINE else cls.FINE / 1000.0 + (index - cls.FINE)

        return {"count": total, "median_ms": at(0.5), "p99_ms": at(0.99),
                "max_ms": max(t.peak[0] for t in tallies) * 1000.0}


class _SyntheticRoute:
    """The ASGI callable of one protocol's synthetic route."""

    def __init__(self, protocol: str, synthetic: Synthetic, clocks: dict[Any, _Clock], lateness: Tally,
                 gaps: Tally) -> None:
        self.protocol = protocol
        self.synthetic = synthetic
        self.pacing = synthetic.pacing
        self._clocks = clocks
        self._lateness = lateness
        self._gaps = gaps
        self._ids = itertools.count()

    async def _reply_error(self, send: Any, status: int, message: str, code: str) -> None:
        body = msgspec.json.encode({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                              "code": code}})
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            body = msgspec.json.decode(raw) if raw.strip() else {}
        except msgspec.DecodeError as exc:
            return await self._reply_error(send, 400, f"the request body is not valid JSON: {exc}", "invalid_json")
        if not isinstance(body, dict):
            return await self._reply_error(send, 400, "the request body must be a JSON object", "invalid_json")
        protocol = self.protocol
        if protocol != "gemini" and body.get("stream") is not True:
            return await self._reply_error(send, 400, 'the synthetic server only streams: send "stream": true',
                                           "stream_required")
        limit = _limit(protocol, body)
        tokens = self.synthetic.tokens if limit is None else min(limit, self.synthetic.tokens)
        options = body.get("stream_options")
        model = scope.get("path_params", {}).get("model") if protocol == "gemini" else body.get("model")
        plan = _Plan(
            protocol=protocol,
            model=model if isinstance(model, str) else "synthetic",
            tokens=tokens,
            truncated=limit is not None and limit <= tokens,
            prompt_tokens=_words(body.get(_PROMPT_KEYS[protocol])),
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            id=f"synthetic{next(self._ids):08d}",
            created=int(time.time()),
        )
        clock = self._clocks.get(loop)
        if clock is None:
            clock = self._clocks[loop] = _Clock(loop)
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_RAW_HEADERS})
        gone = loop.create_task(self._disconnected(receive))
        try:
            events = _SYNTHETIC_STREAMS[protocol](plan)
            opening = next(events)
            if opening:
                await send({"type": "http.response.body", "body": opening, "more_body": True})
            due = self.pacing.due
            late = self._lateness.add
            gap = self._gaps.add
            sent = None
            for index, data in enumerate(events):
                deadline = start + due(index)
                waiter = clock.until(deadline)
                if waiter is not None:
                    await waiter
                if gone.done():
                    return
                now = time.monotonic()
                late(now - deadline)
                if sent is not None:
                    gap(now - sent)
                sent = now
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()

    @staticmethod
    async def _disconnected(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


def create_synthetic_app(synthetic: Synthetic = Synthetic(), *,
                         tallies: Sequence[tuple[Tally, Tally]] | None = None, own: int = 0) -> Any:
    """The Starlette app of the synthetic server: every streaming route of :data:`ROUTES`.

    ``tallies``: the (lateness, ITL) :class:`Tally` pair of every process of a server of several
    (``serve --synthetic --workers``), this one's at ``own``; ``/health`` reports them all
    together. Default: one pair of its own."""
    _require_server_packages()
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    clocks: dict[Any, _Clock] = {}
    tallies = list(tallies) if tallies is not None else [(Tally(), Tally())]
    lateness, gaps = tallies[own]

    async def health(request: Request) -> Response:
        spec = {"tokens": synthetic.tokens, "rate": synthetic.rate, "ttft": synthetic.ttft}
        body = {"status": "ok", "synthetic": spec, "lateness": Tally.stats([late for late, _ in tallies]),
                "itl": Tally.stats([gap for _, gap in tallies])}
        if len(tallies) > 1:
            body["workers"] = len(tallies)
            body["pid"] = os.getpid()  # (of the one that answered)
        if "reset" in request.query_params:
            for pair in tallies:
                for tally in pair:
                    tally.reset()
        return JSONResponse(body)

    routes = [Route(path, _SyntheticRoute(protocol, synthetic, clocks, lateness, gaps), methods=["POST"])
              for protocol, path in _routes()]
    return Starlette(routes=[*routes, Route("/health", health, methods=["GET"])])


# --- Running it -------------------------------------------------------------------------------


def _bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening-ready TCP socket on ``host``:``port`` (``0``: a free port); ``reuse_port``:
    with ``SO_REUSEPORT``, so that several processes can each listen on the port (the kernel
    spreads the connections over them). The process's descriptor table is grown first, while
    nothing waits on it (:mod:`rapidsse.serving.fds`)."""
    from .fds import reserve

    reserve()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def listen(command: str, host: str, port: int, *, reuse_port: bool = False) -> tuple[socket.socket, str] | None:
    """The listening socket of ``rapidsse <command>`` (see :func:`_bind`) and its
    ``http://host:port``; None (after saying why on stderr) when the address cannot be had."""
    try:
        sock = _bind(host, port, reuse_port=reuse_port)
    except OSError as exc:
        print(f"rapidsse {command}: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return None
    shown = f"[{host}]" if ":" in host else host
    return sock, f"http://{shown}:{sock.getsockname()[1]}"


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


class _EngineServer(BackgroundServer):
    """A :class:`BackgroundServer` on either engine: the subclass gives its ASGI app
    (:meth:`_app`) and how to start the native server (:meth:`_start_native`)."""

    def _choose(self, engine: str, workers: int, host: str, port: int, log_level: str) -> None:
        self.engine = choose_engine(engine)
        self.workers = workers
        self._native: Any = None
        if self.engine == "native":
            self.host, self.port, self.log_level = host, port, log_level
            return
        if workers != 1:
            raise ValueError(f"{type(self).__name__} runs one asyncio server: workers=N is for engine='native'")
        super().__init__(self._app(), host=host, port=port, log_level=log_level)

    _app: Callable[[], Any]
    _start_native: Callable[[], Any]

    def start(self, timeout: float = 10.0) -> None:
        if self.engine != "native":
            return super().start(timeout)
        self._native = self._start_native()
        self.port = self._native.address[1]

    def stop(self) -> None:
        if self.engine != "native":
            return super().stop()
        if self._native is not None:
            self._native.stop()
            self._native = None


class ReplayServer(_EngineServer):
    """The replay server of :func:`create_app` in a background thread (see :class:`BackgroundServer`).

    ``files``: recordings (paths); ``rate``: events per second after the first (``0``: as fast as
    possible); ``ttft``: seconds before the first event. ``url`` is the base URL: the OpenAI base URL
    is ``server.url + "/v1"``, the Realtime one ``server.ws_url``.

    ``engine``: ``"asyncio"`` (default; :func:`create_app` on uvicorn) or ``"native"`` (the Rust
    server on threads of its own, ``workers`` of them; see :func:`native_available`).
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
        engine: str = "asyncio",
        workers: int = 1,
    ) -> None:
        self.recordings = [f if isinstance(f, Recording) else load_recording(f) for f in files]
        self.pacing = Pacing(ttft=ttft, rate=rate)
        self._choose(engine, workers, host, port, log_level)

    def _app(self) -> Any:
        return create_app(self.recordings, pacing=self.pacing)

    def _start_native(self) -> Any:
        return start_native_replay(self.recordings, self.pacing, self.host, self.port, self.workers)

    @property
    def ws_url(self) -> str:
        """The Realtime WebSocket URL, ``ws://host:port/v1/realtime``."""
        return "ws" + self.url[len("http") :] + "/v1/realtime"


class SyntheticServer(_EngineServer):
    """The synthetic server in a background thread (see :class:`BackgroundServer`): ``tokens`` per
    stream, the first ``ttft`` seconds after the request, then ``rate`` tokens per second.

    ``engine``: ``"asyncio"`` (default; :func:`create_synthetic_app` on uvicorn) or ``"native"``
    (the Rust server on threads of its own, ``workers`` of them; see :func:`native_available`).
    """

    def __init__(
        self,
        *,
        tokens: int = 100,
        rate: float = 50.0,
        ttft: float = 0.1,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        engine: str = "asyncio",
        workers: int = 1,
    ) -> None:
        self.synthetic = Synthetic(tokens=tokens, rate=rate, ttft=ttft)
        self._choose(engine, workers, host, port, log_level)

    def _app(self) -> Any:
        return create_synthetic_app(self.synthetic)

    def _start_native(self) -> Any:
        return start_native(self.synthetic, self.host, self.port, self.workers)


# --- The native engine ----------------------------------------------------------------------------


ENGINES = ("native", "asyncio")


def native_available() -> bool:
    """Whether this process can run the native servers: the Rust backend, built with them."""
    from .. import BACKEND

    if BACKEND != "rust":
        return False
    from .._backend import core

    return hasattr(core(), "ServeEngine")


def choose_engine(engine: str | None) -> str:
    """The engine to serve with (synthetic streams or replay alike): ``engine``, or (None)
    ``"native"`` when :func:`native_available`, else ``"asyncio"``. ValueError (its message for
    the command line) when ``engine`` cannot serve."""
    if engine is None:
        return "native" if native_available() else "asyncio"
    if engine not in ENGINES:
        raise ValueError(f"the engine is one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "native":
        from .. import BACKEND

        if BACKEND != "rust":
            raise ValueError("the native engine needs rapidsse's compiled extension, and this process runs the "
                             "pure-Python backend (RAPIDSSE_BACKEND=python, or no wheel for this platform): use "
                             "--engine asyncio")
        if not native_available():
            raise ValueError("this build of rapidsse has no native server: use --engine asyncio")
    return engine


def start_native(spec: Synthetic, host: str, port: int, workers: int = 1) -> Any:
    """Starts the native synthetic server (``rapidsse._rapidsse.ServeEngine.synthetic``) on ``host``
    (an IP address, or a name resolved here) and ``port``, with ``workers`` threads; OSError when
    the address cannot be had. Its ``address`` is ``(host, port)``, ``health(reset=False)`` the
    body of ``/health`` as JSON text, ``stop()`` ends it."""
    from .._backend import core

    return core().ServeEngine.synthetic(host=_ip(host), port=port, tokens=spec.tokens, rate=spec.rate,
                                        ttft=spec.ttft, workers=workers)


def start_native_replay(recordings: Sequence[Recording], pacing: Pacing, host: str, port: int,
                        workers: int = 1) -> Any:
    """Starts the native replay server (``rapidsse._rapidsse.ServeEngine.replay``) with ``recordings``
    (handed over once: each one's protocol, pieces and final object as JSON) on ``host`` and
    ``port``, with ``workers`` threads; as :func:`start_native` otherwise. ValueError for a
    Realtime recording whose messages are not UTF-8."""
    from .._backend import core

    handed = [(r.protocol, r.events, None if r.final is None else msgspec.json.encode(r.final)) for r in recordings]
    return core().ServeEngine.replay(host=_ip(host), port=port, recordings=handed, ttft=pacing.ttft,
                                     rate=pacing.rate, workers=workers)


def _ip(host: str) -> str:
    """``host`` as an IP address: itself, or the first the name resolves to (OSError if none)."""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        host = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    return host


# --- The command line -------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Adds the ``serve`` subcommand to the ``rapidsse`` command line."""
    parser = subparsers.add_parser(
        "serve",
        help="replay recorded streams, or generate paced synthetic ones, over the providers' HTTP APIs",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="recordings: Responses, Chat, Completions, Anthropic or Gemini SSE bodies, "
                             "Realtime JSON lines")
    parser.add_argument("--synthetic", action="store_true",
                        help="generate streams on the fly at every route instead of replaying files")
    parser.add_argument("--tokens", type=int, default=100, metavar="N",
                        help="synthetic: tokens per stream, fewer when a request asks (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s; 0: any free port)")
    parser.add_argument("--rate", type=float, default=None, metavar="PER_S",
                        help="replay: events per second after the first (default: 0, as fast as possible); "
                             "synthetic: tokens per second (default: 50)")
    parser.add_argument("--ttft", type=float, default=None, metavar="MS",
                        help="milliseconds before the first event or token (default: 0 for replay, "
                             "100 for synthetic)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="servers on the one port (SO_REUSEPORT), each pacing its own streams: processes "
                             "(asyncio, synthetic only) or threads (native); /health reports them all "
                             "(default: %(default)s)")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="native (the Rust server, no Python per event; the default on the Rust backend) or "
                             "asyncio (uvicorn)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rapidsse serve``: loads the recordings (or sets up the synthetic streams) and serves them
    until interrupted.

    Exit codes as for the rest of the command line: 1 for a missing dependency, a bad option or an
    unreadable file, 2 for a file that is not a recording.
    """
    synthetic = getattr(args, "synthetic", False)
    try:
        engine = choose_engine(getattr(args, "engine", None))
        if engine == "asyncio":
            _require_server_packages()
        if synthetic and args.files:
            raise ValueError("--synthetic generates its streams: give it no files")
        if not synthetic and not args.files:
            raise ValueError("give recordings to replay, or --synthetic")
        workers = getattr(args, "workers", 1)
        if workers < 1:
            raise ValueError("--workers must be at least 1")
        if workers > 1 and not synthetic and engine != "native":
            raise ValueError("--workers replays on --engine native only (or serves --synthetic on either engine)")
        if synthetic:
            spec = Synthetic(tokens=args.tokens, rate=50.0 if args.rate is None else args.rate,
                             ttft=0.1 if args.ttft is None else args.ttft / 1000.0)
        else:
            pacing = Pacing(ttft=(args.ttft or 0.0) / 1000.0, rate=args.rate or 0.0)
    except (ImportError, ValueError) as exc:
        print(f"rapidsse serve: {exc}", file=sys.stderr)
        return 1
    recordings: list[Recording] = []
    if not synthetic:
        try:
            recordings = [load_recording(path) for path in args.files]
        except OSError as exc:
            print(f"rapidsse serve: {exc}", file=sys.stderr)
            return 1
        except (ValueError, SSEError) as exc:
            print(f"rapidsse serve: {exc}", file=sys.stderr)
            return 2
    if engine == "native":
        if synthetic:
            return _serve_native(lambda: start_native(spec, args.host, args.port, workers), _synthetic_banner(spec),
                                 workers)
        return _serve_native(lambda: start_native_replay(recordings, pacing, args.host, args.port, workers),
                             _replay_banner(recordings), workers)
    reuse_port = workers > 1 and hasattr(socket, "SO_REUSEPORT")
    listening = listen("serve", args.host, args.port, reuse_port=reuse_port)
    if listening is None:
        return 1
    sock, url = listening
    import uvicorn

    port = sock.getsockname()[1]
    if synthetic and workers > 1:
        return _serve_workers(spec, sock, workers, reuse_port, args.host, port, args.log_level)
    if synthetic:
        what = _synthetic_banner(spec)
        app = create_synthetic_app(spec)
    else:
        what = _replay_banner(recordings)
        app = create_app(recordings, pacing=pacing)
    print(f"rapidsse serve: {what} on {url}/v1", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level=args.log_level)
    if synthetic:
        _collector_off()
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _serve_native(start: Callable[[], Any], what: str, workers: int) -> int:
    """``serve --engine native``: the Rust server (``start()`` starts it; ``what`` it serves, for
    the banner) on ``workers`` threads of this process, until SIGINT or SIGTERM."""
    import signal

    try:
        server = start()
    except OSError as exc:
        print(f"rapidsse serve: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a Realtime recording that is not UTF-8 text
        print(f"rapidsse serve: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)  # (so that the server is stopped too)

    try:
        signal.signal(signal.SIGTERM, stop)
        bound, port = server.address
        shown = f"[{bound}]" if ":" in bound else bound
        how = f", {workers} worker threads (SO_REUSEPORT)" if workers > 1 else ""
        print(f"rapidsse serve: {what}{how}, native engine on http://{shown}:{port}/v1",
              file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)  # (the server runs on its own threads; a signal ends the sleep)
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _collector_off() -> None:
    # A collection of the cyclic garbage collector would stop every stream for milliseconds, the
    # whole error budget of the ITL it paces. A synthetic stream makes no reference cycle
    # (tests/test_measure.py checks it), so the collector is not needed: freeze what startup made
    # and switch it off. (SyntheticServer, in a thread of someone else's process, leaves that
    # process's collector alone.)
    gc.collect()
    gc.freeze()
    gc.disable()


def _replay_banner(recordings: Sequence[Recording]) -> str:
    counts = {p: sum(r.protocol == p for r in recordings) for p in PROTOCOLS}
    return ", ".join(f"{count} {protocol}" for protocol, count in counts.items()) + " recording(s)"


def _synthetic_banner(spec: Synthetic) -> str:
    return f"synthetic streams of {spec.tokens} tokens at {spec.rate:g} tokens/s after {spec.ttft * 1000:g} ms"


def _serve_workers(spec: Synthetic, sock: socket.socket, workers: int, reuse_port: bool, host: str, port: int,
                   log_level: str) -> int:
    """``serve --synthetic --workers N``: N spawned server processes, each listening on the port
    with ``SO_REUSEPORT`` (where the OS has none: all accepting on this process's socket), each
    pacing its own streams with its own clock and tallying into shared memory, so that
    ``/health``, whichever process answers it, reports all of them. Serves until interrupted, or
    until a worker dies (the others are stopped: a server short of a worker is not the one asked
    for)."""
    import multiprocessing
    import multiprocessing.connection

    import signal

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)  # (so that the workers are stopped too)

    signal.signal(signal.SIGTERM, stop)
    context = multiprocessing.get_context("spawn")
    tallies = [(Tally.shared(context), Tally.shared(context)) for _ in range(workers)]
    ready = [context.Event() for _ in range(workers)]
    shared = None if reuse_port else sock
    if shared is not None:
        shared.listen(2048)
    processes = [context.Process(target=_synthetic_worker, name=f"rapidsse-serve-{number}", daemon=True,
                                 args=(spec, tallies, number, host, port, shared, log_level, ready[number]))
                 for number in range(workers)]
    try:
        for process in processes:
            process.start()
        for number, process in enumerate(processes):
            while not ready[number].wait(0.1):
                if not process.is_alive():
                    print(f"rapidsse serve: worker {number} failed to start (exit code {process.exitcode})",
                          file=sys.stderr)
                    return 1
        shown = f"[{host}]" if ":" in host else host
        how = "SO_REUSEPORT" if reuse_port else "one shared socket"
        print(f"rapidsse serve: {_synthetic_banner(spec)}, {workers} workers ({how}) on http://{shown}:{port}/v1",
              file=sys.stderr, flush=True)
        ended = multiprocessing.connection.wait([p.sentinel for p in processes])
        number = next(n for n, p in enumerate(processes) if p.sentinel in ended)
        print(f"rapidsse serve: worker {number} exited (code {processes[number].exitcode}); stopping",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop_processes(processes)
        sock.close()


def _synthetic_worker(spec: Synthetic, tallies: list[tuple[Tally, Tally]], own: int, host: str, port: int,
                      shared: socket.socket | None, log_level: str, ready: Any) -> None:
    """One process of :func:`_serve_workers`."""
    import signal

    import uvicorn

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the parent stops the workers)
    parent = os.getppid()

    def orphaned() -> None:  # a parent killed without its cleanup: do not serve on alone
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)  # (uvicorn's own graceful exit)

    threading.Thread(target=orphaned, name="orphaned", daemon=True).start()
    sock = shared if shared is not None else _bind(host, port, reuse_port=True)
    sock.listen(2048)
    app = create_synthetic_app(spec, tallies=tallies, own=own)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level))
    ready.set()  # (connections queue on the listening socket until uvicorn accepts them)
    _collector_off()
    server.run(sockets=[sock])
