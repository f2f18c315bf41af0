"""The client side of a serving benchmark, open loop, with vLLM's metrics and key names.

``rapidsse measure --url URL [--protocol P] [--num-prompts N] [--request-rate R] [--burstiness B]
[--max-concurrency C] [--dataset FILE | --input-len L] [--output-len M] [--warmup W] [--seed S]
[--percentiles 50,90,99] [--goodput ttft:MS tpot:MS e2el:MS] [--save-result FILE.json]
[--workers N|auto] [--ray [ADDRESS]]``

Traffic is open loop, as in ``vllm bench serve``: request ``i`` is *due* at the ``i``-th arrival
of a process with gamma-distributed gaps of mean ``1/R`` and shape ``B`` (``B = 1``: Poisson;
smaller is burstier, larger more regular; ``R = inf``: all due at once). ``--max-concurrency``
caps the requests in flight; a due request waits for a free slot. Every latency counts from the
moment the request was **due**, so that wait shows in TTFT and E2EL instead of hiding (vLLM counts
from the moment it sends). The wait itself is reported as the client queue time.

Protocols and their endpoints: ``responses`` (``/v1/responses``), ``chat``
(``/v1/chat/completions``), ``completions`` (``/v1/completions``), ``anthropic`` (``/v1/messages``)
and ``gemini`` (``/v1beta/models/{model}:streamGenerateContent?alt=sse``). A ``--url`` that is a
base URL (``http://host:port`` or one ending in ``/v1``) gets the protocol's route appended.

Metrics, as vLLM defines them: TTFT (due → first token), TPOT ((E2EL − TTFT) / (output tokens −
1), per request), ITL (the gaps between consecutive tokens, over all requests) and E2EL (due → the
end of the response), each with mean, median, population standard deviation and the chosen
percentiles (linear interpolation, as numpy's default). A *token* is one streamed event that
carries output (text, reasoning, refusal, tool-call arguments); events that arrive in one read
share its timestamp (an ITL of 0), as in vLLM. Output tokens per request are the server's
``usage`` count when it sent one, else the token events counted. Goodput is completed requests per
second that met every given SLO (a request with one output token has a TPOT of 0).

A request fails, with its reason counted, on a connection error or timeout, a non-2xx status
(``HTTP 500: ...``), a reply that is not ``text/event-stream``, an error event in the stream
(``error event: ...``), a failed response (``response.failed: ...``), or a stream that ended
before its final event (``cut short: ...``: ``response.completed``/``incomplete``, a chat
``finish_reason`` or ``[DONE]``, Completions' ``[DONE]``, Anthropic's ``message_stop``, a Gemini
``finishReason``).

The client is made to stay out of its own measurements:

- A token counts as arrived at the **kernel's receive timestamp** of the bytes that carried it
  (``SO_TIMESTAMPNS``; plain ``http://`` on Linux, ``--timestamps kernel``, the default there),
  not when the event loop got round to reading them: a client busy with other streams delays the
  read, not the measurement. A read that holds several tokens of one stream (the client fell
  behind that stream by more than a token's gap) gives them all the arrival of its last byte, as
  any client would. Elsewhere, and with ``--timestamps read``, the bytes are timestamped in
  ``data_received``, before any task switch.
- Each request is an :mod:`asyncio` protocol: httptools (llhttp, in C) takes the HTTP framing off
  and hands the body straight to rapidsse's decoder, so a read costs a few microseconds and no
  coroutine step. HTTP/1.1 only, one connection per request, no proxy; ``https`` URLs use the
  default TLS context. The event loop is uvloop's when it is installed (``--loop`` chooses).
- During the timed run the cyclic garbage collector is paused (:func:`collector_paused`): a full
  collection stops the loop for milliseconds, which would show as a late token on every stream in
  flight. A request leaves no reference cycle behind, so nothing piles up meanwhile; what the
  driver does leave is collected when the run ends.

``--engine native`` (the default on the Rust backend) runs every request in Rust
instead (:func:`measure_native`, ``rust/src/net/measure.rs``): tokio tasks on kept-alive pooled
connections, the same kernel timestamps and token counts, the same :class:`RequestResult` s and
report. Both engines report whether the client kept up (``multi_token_reads``, ``client_cpu_share``,
``client_saturated``: see :func:`summarize`).

``--workers N`` and ``--ray`` spread the same schedule over client processes or Ray actors and
merge their samples into this module's report (:mod:`rapidsse.serving.workers`).

Needs httptools (``pip install 'rapidsse[measure]'``); the progress bar needs rich.
"""

from __future__ import annotations

import abc

import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import random
import socket
import ssl
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from .. import chat, responses
from ..decoding import EventDecoder
from ..errors import SSEError
from ..framing import SSEDecoder
from ..integrations import protocol_for_path

__all__ = [
    "ENGINES",
    "PROTOCOLS",
    "LocalSlots",
    "RequestResult",
    "Run",
    "Slots",
    "arrival_times",
    "TIMESTAMPS",
    "collector_paused",
    "endpoint_url",
    "format_report",
    "generated_prompts",
    "kernel_timestamps",
    "load_dataset",
    "default_engine",
    "drive",
    "drive_native",
    "measure",
    "measure_native",
    "native_available",
    "native_engine",
    "merge",
    "percentile",
    "prepared_target",
    "request_body",
    "run",
    "run_loop",
    "saturation_warning",
    "summarize",
]

PROTOCOLS = ("responses", "chat", "completions", "anthropic", "gemini")
ROUTES = {
    "responses": "/v1/responses",
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/{model}:streamGenerateContent?alt=sse",
}
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)
DEFAULT_PROMPT = "Say hello."
ANTHROPIC_VERSION = "2023-06-01"
_GOODPUT_METRICS = ("ttft", "tpot", "e2el")
SATURATED_CPU_SHARE = 0.9
"""A client past this share of a core (CPU time over wall time, per process) is saturated: it
cannot read every stream when its bytes arrive, and token times bunch up."""
SATURATED_MULTI_TOKEN_READS = 0.01
"""Past this share of its token reads holding several tokens, a client is saturated: one read of
several tokens gives them one time, an ITL of 0 and a gap the server did not make."""
SATURATED_MIN_MULTI_TOKEN_READS = 10
"""...and only from this many such reads on: a few in a short run are a scheduling hiccup."""
_WORDS = ("the quick brown fox jumps over a lazy dog while seven bright stars watch "
          "silent rivers carry old songs toward distant green hills").split()


# --- Load: request bodies ----------------------------------------------------------------------


def request_body(protocol: str, prompt: str, *, model: str = "default", max_tokens: int | None = None) -> dict[str, Any]:
    """The streaming request body of ``protocol`` for one user ``prompt``.

    ``max_tokens`` goes where each API takes it (``max_output_tokens``, ``max_completion_tokens``,
    ``max_tokens``, ``generationConfig.maxOutputTokens``); Anthropic requires one (1024 when not
    given). Chat and Completions ask for ``stream_options.include_usage``.
    """
    if protocol == "responses":
        body: dict[str, Any] = {"model": model, "input": prompt, "stream": True}
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
    elif protocol == "chat":
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
                "stream_options": {"include_usage": True}}
        if max_tokens is not None:
            body["max_completion_tokens"] = max_tokens
    elif protocol == "completions":
        body = {"model": model, "prompt": prompt, "stream": True, "stream_options": {"include_usage": True}}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
    elif protocol == "anthropic":
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
                "max_tokens": 1024 if max_tokens is None else max_tokens}
    elif protocol == "gemini":
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
        if max_tokens is not None:
            body["generationConfig"] = {"maxOutputTokens": max_tokens}
    else:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    return body


def _streaming(protocol: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` made to stream (and, for Chat and Completions, to report usage)."""
    if protocol == "gemini":  # Gemini streams by its URL
        return body
    body = {**body, "stream": True}
    if protocol in ("chat", "completions"):
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body


def generated_prompts(count: int, input_len: int, *, seed: int | None = None) -> list[str]:
    """``count`` prompts of ``input_len`` words each, drawn from a small vocabulary (seeded)."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(_WORDS, k=input_len)) for _ in range(count)]


def load_dataset(path: str | Path, protocol: str, *, model: str = "default",
                 max_tokens: int | None = None) -> list[dict[str, Any]]:
    """Request bodies from ``path``: JSON lines (or one JSON array) of either request bodies, used
    as they are (``stream`` forced on), or ShareGPT-style records (``{"conversations": [{"from":
    "human", "value": ...}, ...]}``), whose first human turn becomes the prompt of a
    ``protocol`` request. Blank lines are skipped; records with no human turn too."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        records = json.loads(text)
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    bodies = []
    for number, record in enumerate(records, 1):
        if not isinstance(record, dict):
            raise ValueError(f"{path}: record {number} is not a JSON object")
        conversation = record.get("conversations", record.get("conversation"))
        if conversation is None:
            bodies.append(_streaming(protocol, record))
            continue
        prompt = next((turn.get("value") or turn.get("content") for turn in conversation
                       if isinstance(turn, dict) and turn.get("from", turn.get("role")) in ("human", "user")), None)
        if isinstance(prompt, str) and prompt:
            bodies.append(request_body(protocol, prompt, model=model, max_tokens=max_tokens))
    if not bodies:
        raise ValueError(f"{path}: no request in the dataset")
    return bodies


def endpoint_url(url: str, protocol: str, model: str = "default") -> str:
    """The endpoint for ``--url``: a URL whose path already ends with the protocol's route is kept;
    a base URL (no path, or one ending in ``/v1`` / ``/v1beta``) gets the route appended."""
    route = ROUTES[protocol].format(model=model)
    route_path = route.split("?", 1)[0]
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    tail = route_path.split("/", 2)[2]  # the route after /v1 or /v1beta
    if path.endswith("/" + tail):
        return url
    base = url.split("?", 1)[0].rstrip("/")
    for prefix in ("/v1beta", "/v1"):
        if path.endswith(prefix) and route.startswith(prefix + "/"):
            return base + route[len(prefix):]
    return base + route


def protocol_for_url(url: str) -> str:
    """The protocol an endpoint URL names (``responses`` when it names none): as the integrations
    read a request's path (:func:`rapidsse.integrations.protocol_for_path`), and Gemini for a bare
    ``.../v1beta`` base too."""
    path = urlsplit(url).path.rstrip("/")
    return "gemini" if path.endswith("/v1beta") else protocol_for_path(path)


# --- Arrivals ----------------------------------------------------------------------------------


def arrival_times(count: int, request_rate: float, burstiness: float = 1.0, seed: int | None = None) -> list[float]:
    """When each of ``count`` requests is due, in seconds from the start: the first at 0, then gaps
    drawn from a gamma distribution of shape ``burstiness`` and mean ``1 / request_rate``
    (exponential, so a Poisson process, for ``burstiness = 1``). ``request_rate = inf``: all at 0.

    >>> arrival_times(3, float("inf"))
    [0.0, 0.0, 0.0]
    """
    if not request_rate > 0:
        raise ValueError("request_rate must be positive (inf: all at once)")
    if not burstiness > 0:
        raise ValueError("burstiness must be positive")
    if math.isinf(request_rate):
        return [0.0] * count
    rng = random.Random(seed)
    scale = 1.0 / (request_rate * burstiness)
    times = []
    due = 0.0
    for index in range(count):
        if index:
            due += rng.gammavariate(burstiness, scale)
        times.append(due)
    return times


# --- What one request measured -------------------------------------------------------------------


@dataclass
class RequestResult:
    """What one request measured. Times are seconds counted from when the request was due."""

    ok: bool = False
    status_code: int | None = None
    index: int = 0
    """Its place in the run's arrival order (from 0)."""
    error: str | None = None
    due: float = 0.0
    """When it was due, in seconds from the start of the run."""
    queued: float = 0.0
    """How long it waited for a free slot (``--max-concurrency``) before it was sent."""
    ttft: float | None = None
    latency: float = 0.0
    """E2EL: due → the end of the response."""
    token_times: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    """The server's own ``usage`` count of output tokens, when it sent one."""
    input_tokens: int | None = None
    """The server's ``usage`` count of input (prompt) tokens, when it sent one."""
    token_reads: int = 0
    """Reads of the response that completed at least one token."""
    multi_token_reads: int = 0
    """Reads that completed more than one token: their tokens share one time, so the client (or
    the server, writing several at once) hid the gaps between them (see :func:`summarize`)."""

    @property
    def tokens(self) -> int:
        """Output tokens: the usage count when sent, else the token events received."""
        return self.output_tokens if self.output_tokens is not None else len(self.token_times)

    @property
    def itls(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive token events."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first; None for fewer than two tokens."""
        if self.ttft is None or self.tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.tokens - 1)


# --- Per-protocol adapters: bytes in, token events counted -----------------------------------------
#
# Each adapter takes the response body as it arrives (``feed(chunk) -> tokens completed``) and
# knows when the stream reached its final event, whether it reported an error, and its usage.
# Responses and Chat go through rapidsse's typed decoder (one call per chunk, Structs built in
# Rust). Completions, Anthropic and Gemini use rapidsse's SSE framer and a msgspec decode of only
# the fields counted here: a token needs its own arrival time, which an accumulator's tap does not
# give, and these small decodes cost less than their typed events.


class _Adapter(abc.ABC):
    __slots__ = ("finished", "error", "output_tokens", "input_tokens")

    final_event = ""
    """What this protocol ends a stream with (for the cut-short reason)."""

    def __init__(self) -> None:
        self.finished = False
        self.error: str | None = None
        self.output_tokens: int | None = None
        self.input_tokens: int | None = None

    @abc.abstractmethod
    def feed(self, chunk: bytes) -> int:
        """Takes the next piece of the body; returns how many tokens it completed."""

    def close(self) -> None:
        """The body ended."""


_RESPONSES_TOKEN_TYPES = (
    responses.OutputTextDelta,
    responses.RefusalDelta,
    responses.ReasoningTextDelta,
    responses.ReasoningSummaryTextDelta,
    responses.FunctionCallArgumentsDelta,
    responses.CustomToolCallInputDelta,
)
_RESPONSES_FINAL_TYPES = (responses.ResponseCompleted, responses.ResponseIncomplete, responses.ResponseFailed)


class _ResponsesAdapter(_Adapter):
    __slots__ = ("_decode",)
    final_event = "response.completed"

    def __init__(self) -> None:
        super().__init__()
        self._decode = EventDecoder("responses", on_error="skip").feed

    def feed(self, chunk: bytes) -> int:
        tokens = 0
        for event in self._decode(chunk):
            if isinstance(event, _RESPONSES_TOKEN_TYPES):
                tokens += 1
            elif isinstance(event, _RESPONSES_FINAL_TYPES):
                self.finished = True
                final = event.response
                if final is not None:
                    if final.usage is not None:
                        self.output_tokens = final.usage.output_tokens
                        self.input_tokens = final.usage.input_tokens
                    if isinstance(event, responses.ResponseFailed) and self.error is None:
                        message = final.error.message if final.error is not None else None
                        self.error = f"response.failed: {message or 'no message'}"
            elif isinstance(event, responses.Error) and self.error is None:
                detail = event.error
                message = event.message or (detail.message if detail is not None else None)
                self.error = f"error event: {message or event.code or 'no message'}"
        return tokens


class _ChatAdapter(_Adapter):
    __slots__ = ("_decoder", "_decode")
    final_event = "a finish_reason or [DONE]"

    def __init__(self) -> None:
        super().__init__()
        self._decoder = EventDecoder("chat", on_error="skip")
        self._decode = self._decoder.feed

    def feed(self, chunk: bytes) -> int:
        tokens = 0
        for event in self._decode(chunk):
            if not isinstance(event, chat.ChatCompletionChunk):
                continue
            counted = False
            for choice in event.choices:
                delta = choice.delta
                if not counted and delta is not None and (delta.content or delta.refusal or delta.reasoning
                                                          or delta.reasoning_content or delta.tool_calls):
                    tokens += 1
                    counted = True
                if choice.finish_reason:
                    self.finished = True
            if event.usage is not None:
                self.output_tokens = event.usage.completion_tokens
                self.input_tokens = event.usage.prompt_tokens
            if event.error is not None and self.error is None:
                self.error = f"error event: {event.error.message or event.error.code or 'no message'}"
        if self._decoder.done:
            self.finished = True
        return tokens


# Completions.


class _CompletionChoice(msgspec.Struct):
    text: str | None = None
    finish_reason: str | None = None


class _CompletionUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _ErrorObject(msgspec.Struct):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class _CompletionChunk(msgspec.Struct):
    choices: list[_CompletionChoice] = []
    usage: _CompletionUsage | None = None
    error: _ErrorObject | None = None


class _FramedAdapter(_Adapter):
    """An adapter of its own small decode: rapidsse's SSE framer, then ``_decode`` of each event's
    data (a payload that is not the expected JSON is skipped, as the typed decoders' ``on_error=
    "skip"`` does), counted by :meth:`count`."""

    __slots__ = ("_frame",)
    _decode: Callable[[str], Any]
    done_marker: str | None = None
    """A data line that ends the stream (Completions' ``[DONE]``)."""

    def __init__(self) -> None:
        super().__init__()
        self._frame = SSEDecoder().feed

    def feed(self, chunk: bytes) -> int:
        tokens = 0
        for event in self._frame(chunk):
            if event.data == self.done_marker:
                self.finished = True
                continue
            try:
                payload = self._decode(event.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            tokens += self.count(payload)
        return tokens

    @abc.abstractmethod
    def count(self, payload: Any) -> int:
        """Takes one decoded payload: its tokens (0 or 1), and what it says of the end, usage and
        errors."""

    def _error_event(self, error: _ErrorObject | None) -> None:
        if error is not None and self.error is None:
            self.error = f"error event: {error.message or error.code or error.type or 'no message'}"


class _CompletionsAdapter(_FramedAdapter):
    __slots__ = ()
    final_event = "[DONE]"
    done_marker = "[DONE]"
    _decode = msgspec.json.Decoder(_CompletionChunk).decode

    def count(self, payload: _CompletionChunk) -> int:
        if payload.usage is not None:
            self.output_tokens = payload.usage.completion_tokens
            self.input_tokens = payload.usage.prompt_tokens
        self._error_event(payload.error)
        return 1 if any(choice.text for choice in payload.choices) else 0


# Anthropic Messages.


class _AnthropicDelta(msgspec.Struct):
    type: str = ""
    text: str | None = None
    thinking: str | None = None
    partial_json: str | None = None


class _AnthropicUsage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None


class _AnthropicMessage(msgspec.Struct):
    usage: _AnthropicUsage | None = None


class _AnthropicEvent(msgspec.Struct):
    type: str = ""
    delta: _AnthropicDelta | None = None
    usage: _AnthropicUsage | None = None
    message: _AnthropicMessage | None = None
    error: _ErrorObject | None = None


class _AnthropicAdapter(_FramedAdapter):
    __slots__ = ()
    final_event = "message_stop"
    _decode = msgspec.json.Decoder(_AnthropicEvent).decode

    def count(self, payload: _AnthropicEvent) -> int:
        kind = payload.type
        if kind == "content_block_delta":
            delta = payload.delta
            return 1 if delta is not None and (delta.text or delta.thinking or delta.partial_json) else 0
        if kind == "message_start":
            usage = payload.message.usage if payload.message is not None else None
            if usage is not None:
                self.input_tokens = usage.input_tokens
        elif kind == "message_delta":
            if payload.usage is not None and payload.usage.output_tokens is not None:
                self.output_tokens = payload.usage.output_tokens
                if payload.usage.input_tokens is not None:
                    self.input_tokens = payload.usage.input_tokens
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            self._error_event(payload.error or _ErrorObject())
        return 0


# Gemini.


class _GeminiPart(msgspec.Struct):
    text: str | None = None
    functionCall: msgspec.Raw = msgspec.Raw()  # noqa: N815 (the API's name; left undecoded)
    executableCode: msgspec.Raw = msgspec.Raw()  # noqa: N815


class _GeminiContent(msgspec.Struct):
    parts: list[_GeminiPart] = []


class _GeminiCandidate(msgspec.Struct):
    content: _GeminiContent | None = None
    finishReason: str | None = None  # noqa: N815


class _GeminiUsage(msgspec.Struct):
    promptTokenCount: int | None = None  # noqa: N815
    candidatesTokenCount: int | None = None  # noqa: N815
    thoughtsTokenCount: int | None = None  # noqa: N815


class _GeminiChunk(msgspec.Struct):
    candidates: list[_GeminiCandidate] = []
    usageMetadata: _GeminiUsage | None = None  # noqa: N815
    error: _ErrorObject | None = None


class _GeminiAdapter(_FramedAdapter):
    __slots__ = ()
    final_event = "a finishReason"
    _decode = msgspec.json.Decoder(_GeminiChunk).decode

    def count(self, payload: _GeminiChunk) -> int:
        tokens = 0
        for candidate in payload.candidates:
            content = candidate.content
            if not tokens and content is not None and any(
                    p.text or len(p.functionCall) or len(p.executableCode) for p in content.parts):
                tokens = 1
            if candidate.finishReason:
                self.finished = True
        usage = payload.usageMetadata
        if usage is not None:
            self.input_tokens = usage.promptTokenCount
            if usage.candidatesTokenCount is not None:
                self.output_tokens = usage.candidatesTokenCount + (usage.thoughtsTokenCount or 0)
        self._error_event(payload.error)
        return tokens


_ADAPTERS: dict[str, type[_Adapter]] = {
    "responses": _ResponsesAdapter,
    "chat": _ChatAdapter,
    "completions": _CompletionsAdapter,
    "anthropic": _AnthropicAdapter,
    "gemini": _GeminiAdapter,
}


# --- The transport: one request as an asyncio protocol ------------------------------------------------


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: ssl.SSLContext | None
    head: bytes  # the request line and headers, up to content-length
    addresses: tuple[tuple[int, Any], ...] = ()  # (family, sockaddr)s, tried in turn: kernel-stamped connections


# Kernel receive timestamps: SO_TIMESTAMPNS (not in Python's socket module) has this number on the
# Linux architectures below, where the control message is a struct timespec of two 64-bit fields.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_READ_SIZE = 256 * 1024
TIMESTAMPS = ("auto", "kernel", "read")


def kernel_timestamps() -> bool:
    """Whether this machine gives kernel receive timestamps (``SO_TIMESTAMPNS``: Linux on x86-64
    or 64-bit Arm)."""
    return (sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64")
            and struct.calcsize("P") == 8 and bool(_STAMP_SPACE))


class _StampedConnection:
    """A plain TCP connection to a protocol, read with ``recvmsg``: each read comes with the
    kernel's timestamp of the moment its last byte arrived, and the protocol gets the bytes with
    that moment (on :func:`time.perf_counter`'s clock) instead of the moment the event loop got
    round to them. A client busy with other streams then delays when a token is read, not when it
    is counted as arrived.

    The kernel stamps on the wall clock, which may be stepped (a VM's clock set right after it is
    resumed, NTP at boot): a stamp that would put the bytes before the previous read's, or before
    the connection was made, is not taken, and the read counts at the moment it was read."""

    __slots__ = ("_loop", "_sock", "_protocol", "_floor")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: _Exchange) -> None:
        self._loop = loop
        self._sock: socket.socket | None = sock
        self._protocol: _Exchange | None = protocol
        self._floor = time.perf_counter()  # before the request is sent: no answer can arrive earlier
        protocol.connection_made(self)
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            data, ancillary, _flags, _address = sock.recvmsg(_READ_SIZE, _STAMP_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not data:
            self._lost(None)
            return
        # The wall clock first: a pause between the two readings (this process preempted) then
        # makes the wait look shorter and the stamp later, never earlier than the bytes came.
        wall = time.time_ns()
        now = time.perf_counter()
        if ancillary:
            seconds, nanoseconds = _TIMESPEC.unpack_from(ancillary[0][2])
            # (The kernel's clock is the wall clock: only the wait is taken from it.)
            stamped = now - (wall - (seconds * 1_000_000_000 + nanoseconds)) / 1e9
            if self._floor <= stamped < now:
                now = stamped
        self._floor = now
        protocol = self._protocol
        if protocol is not None:
            protocol.received(data, now)

    def write(self, data: bytes) -> None:
        """Only for the protocol's ``connection_made``: the request is sent by :func:`_one_request`."""
        if data:
            raise RuntimeError("a stamped connection sends its request with sock_sendall")

    def close(self) -> None:
        protocol = self._protocol
        if self._shut() and protocol is not None:
            self._loop.call_soon(protocol.connection_lost, None)

    def _lost(self, exc: Exception | None) -> None:
        protocol = self._protocol
        if self._shut() and protocol is not None:
            protocol.connection_lost(exc)

    def _shut(self) -> bool:
        sock = self._sock
        if sock is None:
            return False
        self._loop.remove_reader(sock.fileno())
        sock.close()
        self._sock = None
        self._protocol = None
        return True


async def _stamped_socket(loop: asyncio.AbstractEventLoop, target: _Target) -> socket.socket:
    """A connected non-blocking socket to ``target`` with kernel receive timestamps on: its
    addresses tried in turn, as ``create_connection`` does (``localhost`` may name ``::1`` first
    and be served on ``127.0.0.1`` only)."""
    error: OSError | None = None
    for family, address in target.addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise error or OSError(f"no address for {target.host}:{target.port}")


async def _resolved(target: _Target, timestamps: str) -> _Target:
    """``target`` with its address resolved when its requests are to be kernel-stamped
    (``timestamps``: ``auto``, ``kernel`` or ``read``, see :func:`measure`)."""
    if timestamps not in TIMESTAMPS:
        raise ValueError(f"timestamps must be one of {', '.join(TIMESTAMPS)}, not {timestamps!r}")
    if timestamps == "read" or (timestamps == "auto" and (target.tls is not None or not kernel_timestamps())):
        return target
    if target.tls is not None:
        raise ValueError("kernel timestamps are for plain http:// (TLS decrypts after the kernel)")
    if not kernel_timestamps():
        raise ValueError("this machine gives no kernel receive timestamps (Linux on x86-64 or arm64 does)")
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    return replace(target, addresses=tuple((family, address) for family, _type, _proto, _name, address in infos))


def _target(url: str, headers: dict[str, str], *, keep_alive: bool = False) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url must be an http:// or https:// URL, not {url!r}")
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    port = parts.port or (443 if tls else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rsplit("@", 1)[-1]
    lines = [f"POST {target} HTTP/1.1", f"host: {host_header}", "content-type: application/json",
             "accept: text/event-stream", "accept-encoding: identity",
             *([] if keep_alive else ["connection: close"]), "user-agent: rapidsse-measure"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return _Target(parts.hostname, port, tls, ("\r\n".join(lines) + "\r\n").encode("latin-1"))


class _Exchange(asyncio.Protocol):
    """One HTTP/1.1 request and its streamed response, parsed by httptools as bytes arrive."""

    def __init__(self, request: bytes, adapter: _Adapter, origin: float, result: RequestResult,
                 done: asyncio.Future[None]) -> None:
        import httptools

        self._request = request
        self._adapter = adapter
        self._origin = origin
        self._result = result
        self._done = done
        self._parser = httptools.HttpResponseParser(self)
        self._parse_error = httptools.HttpParserError
        self._content_type = b""
        self._streaming = False
        self._error_body = bytearray()
        self._now = 0.0
        self._read_tokens = 0
        self._transport: asyncio.Transport | None = None

    # asyncio callbacks

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self.received(data, time.perf_counter())

    def received(self, data: bytes, now: float) -> None:
        """Takes bytes that arrived at ``now`` (:func:`time.perf_counter`)."""
        self._now = now
        self._read_tokens = 0
        try:
            self._parser.feed_data(data)
        except self._parse_error as exc:
            self._finish(f"bad HTTP response: {exc}")
        except SSEError as exc:
            self._finish(f"{type(exc).__name__}: {exc}")
        if self._read_tokens:
            self._result.token_reads += 1
            self._result.multi_token_reads += self._read_tokens > 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            status = self._result.status_code
            if status is not None and not 200 <= status < 300:
                self._finish(f"HTTP {status}: {bytes(self._error_body[:200]).decode('utf-8', 'replace')}")
            else:
                reason = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
                self._finish(f"cut short: {reason} before the response ended")
        # The parser holds this protocol's callbacks, the transport holds the protocol: let go of
        # both, so that no reference cycle is left for the (paused) garbage collector.
        self._parser = self._transport = None

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self._content_type = value

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self._result.status_code = status
        if 200 <= status < 300:
            media_type = self._content_type.split(b";", 1)[0].strip().lower()
            if media_type == b"text/event-stream":
                self._streaming = True
            else:
                self._finish(f"not an event stream: content type {self._content_type.decode('latin-1')!r}")

    def on_body(self, body: bytes) -> None:
        if not self._streaming:
            if len(self._error_body) < 200:
                self._error_body += body
            return
        tokens = self._adapter.feed(body)
        if tokens:
            self._read_tokens += tokens
            now = self._now - self._origin
            result = self._result
            if result.ttft is None:
                result.ttft = now
            result.token_times.extend([now] * tokens)

    def on_message_complete(self) -> None:
        result = self._result
        if not self._streaming:
            status = result.status_code
            if status is not None and not 200 <= status < 300:
                text = bytes(self._error_body[:200]).decode("utf-8", "replace")
                self._finish(f"HTTP {status}: {text}")
            return
        adapter = self._adapter
        adapter.close()
        result.output_tokens = adapter.output_tokens
        result.input_tokens = adapter.input_tokens
        if adapter.error is not None:
            self._finish(adapter.error)
        elif not adapter.finished:
            self._finish(f"cut short: the stream ended before {adapter.final_event}")
        else:
            self._finish(None)

    def _finish(self, error: str | None) -> None:
        if self._done.done():
            return
        self._result.latency = self._now - self._origin if self._now else time.perf_counter() - self._origin
        self._result.error = error
        self._result.ok = error is None
        self._done.set_result(None)
        if self._transport is not None:
            self._transport.close()


async def _one_request(target: _Target, protocol: str, body: dict[str, Any], origin: float,
                       result: RequestResult, timeout: float) -> None:
    """Sends one request; fills ``result`` (times relative to ``origin``, the moment it was due)."""
    loop = asyncio.get_running_loop()
    payload = msgspec.json.encode(body)
    request = target.head + b"content-length: %d\r\n\r\n" % len(payload) + payload
    done: asyncio.Future[None] = loop.create_future()

    async def exchange() -> None:
        if target.addresses:
            sock = await _stamped_socket(loop, target)
            connection = _StampedConnection(loop, sock, _Exchange(b"", _ADAPTERS[protocol](), origin, result, done))
            try:
                await loop.sock_sendall(sock, request)
                await done
            finally:
                connection.close()
            return
        transport, _ = await loop.create_connection(
            lambda: _Exchange(request, _ADAPTERS[protocol](), origin, result, done),
            target.host, target.port, ssl=target.tls,
        )
        try:
            await done
        finally:
            transport.close()

    try:
        await asyncio.wait_for(exchange(), timeout)
    except (OSError, asyncio.TimeoutError) as exc:
        if not done.done() or done.cancelled():  # (a timeout cancels the wait, and so the future)
            timed_out = isinstance(exc, asyncio.TimeoutError)
            result.error = f"timeout after {timeout:g} s" if timed_out else f"{type(exc).__name__}: {exc}"
            result.ok = False
            result.latency = time.perf_counter() - origin


# --- The run --------------------------------------------------------------------------------------


@dataclass
class Run:
    """The results of a run, in order of arrival, and its wall-clock duration (seconds, from the
    first request due to the last response)."""

    results: list[RequestResult]
    duration: float
    timestamps: str = "read"
    """When a token counts as arrived: ``"kernel"`` (the kernel's receive timestamp) or ``"read"``
    (when the event loop read it)."""
    interrupted: bool = False
    """Whether it was stopped before its end (Ctrl-C)."""
    worker_cpu: float = 0.0
    """CPU seconds the worker processes or actors spent, each from its setup to its end (0 for a
    run in this process: see :func:`time.process_time`)."""
    client_cpu: float = 0.0
    """CPU seconds the client spent during the timed run (:func:`time.process_time`, every thread
    of its processes; summed over the workers of a run)."""
    client_processes: int = 1
    """The client processes (or actors) that ran it: ``client_cpu`` is shared among them."""


class Slots(abc.ABC):
    """The ``--max-concurrency`` cap as the engine sees it: a request waits in :meth:`acquire` for
    a slot and gives it back with :meth:`release`. :class:`LocalSlots` is one process's; the
    workers of :mod:`rapidsse.serving.workers` ask their parent (or a Ray actor) for theirs, so
    that the cap stays one for the whole run."""

    @abc.abstractmethod
    async def acquire(self, index: int) -> None:
        """Waits for a slot for request ``index`` (its place in the arrival order)."""

    @abc.abstractmethod
    def release(self, index: int) -> None:
        """Gives request ``index``'s slot back."""


class LocalSlots(Slots):
    """A cap within one event loop: an :class:`asyncio.Semaphore`, first come first served."""

    def __init__(self, limit: int) -> None:
        self._semaphore = asyncio.Semaphore(limit)

    async def acquire(self, index: int) -> None:
        await self._semaphore.acquire()

    def release(self, index: int) -> None:
        self._semaphore.release()


def _check(protocol: str, bodies: Sequence[Any], count: int, warmup: int, max_concurrency: int | None) -> None:
    if protocol not in _ADAPTERS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    if not bodies:
        raise ValueError("no request bodies")
    if count < 1 or warmup < 0 or (max_concurrency is not None and max_concurrency < 1):
        raise ValueError("num_prompts and max_concurrency must be at least 1, warmup at least 0")


async def prepared_target(url: str, protocol: str, headers: dict[str, str] | None, timestamps: str) -> _Target:
    """The endpoint's connection details (with the addresses resolved for kernel timestamps)."""
    all_headers = {"anthropic-version": ANTHROPIC_VERSION} if protocol == "anthropic" else {}
    all_headers.update(headers or {})
    return await _resolved(_target(url, all_headers), timestamps)


async def drive(
    target: _Target,
    protocol: str,
    bodies: Sequence[dict[str, Any]],
    plan: Sequence[tuple[int, float]],
    *,
    slots: Slots | None = None,
    warmup: int = 0,
    warmup_slots: Slots | None = None,
    timeout: float = 600.0,
    on_result: Callable[[RequestResult], None] | None = None,
    started: Callable[[], float | None] | None = None,
) -> Run:
    """The engine of one client process: sends request ``index`` (body ``index % len(bodies)``)
    when it is due, ``offset`` seconds after the start, for each ``(index, offset)`` of ``plan``
    (in arrival order), each waiting for one of ``slots`` first. ``warmup`` requests (the first
    bodies, capped by ``warmup_slots``) run before the start and are not counted. ``started`` is
    called just before the start (a barrier: it returns when the run is to start, with the start
    instant on :func:`time.perf_counter`'s clock when the workers of a run share one; None: now).
    :func:`measure` runs it for a whole schedule; each worker of
    :mod:`rapidsse.serving.workers` for its share of one."""
    loop = asyncio.get_running_loop()

    async def send(body: dict[str, Any], due: float, result: RequestResult, cap: Slots | None,
                   report: Callable[[RequestResult], None] | None) -> RequestResult:
        if cap is not None:
            await cap.acquire(result.index)
        try:
            result.queued = time.perf_counter() - due
            await _one_request(target, protocol, body, due, result, timeout)
        finally:
            if cap is not None:
                cap.release(result.index)
        if report is not None:
            report(result)
        return result

    if warmup:
        now = time.perf_counter()
        await asyncio.gather(*(send(bodies[i % len(bodies)], now, RequestResult(index=i), warmup_slots, None)
                               for i in range(warmup)))

    with collector_paused():
        start = started() if started is not None else None
        if start is None:
            start = time.perf_counter()
        cpu = time.process_time()
        tasks = []
        for index, offset in plan:
            due = start + offset
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            result = RequestResult(index=index, due=offset)
            tasks.append(loop.create_task(send(bodies[index % len(bodies)], due, result, slots, on_result)))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
        cpu = time.process_time() - cpu
    return Run(list(results), duration, "kernel" if target.addresses else "read", client_cpu=cpu)


async def measure(
    url: str,
    bodies: Sequence[dict[str, Any]],
    *,
    protocol: str = "responses",
    num_prompts: int | None = None,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    warmup: int = 0,
    seed: int | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 600.0,
    on_result: Callable[[RequestResult], None] | None = None,
    timestamps: str = "auto",
    engine: str = "asyncio",
) -> Run:
    """Sends ``num_prompts`` streaming requests (default: one per body; bodies are reused in turn)
    to the endpoint ``url``, open loop: due at :func:`arrival_times`, at most ``max_concurrency``
    in flight (``None``: no cap). ``warmup`` requests (the first bodies, same concurrency cap) run
    first and are not counted. ``on_result`` is called as each counted request ends.

    ``timestamps``: when a token counts as arrived. ``"kernel"``: the kernel's receive timestamp of
    the bytes that carried it (``SO_TIMESTAMPNS``, plain ``http://`` on Linux), so that the time
    the client itself takes to get round to a read (other streams, a busy core) stays out of TTFT,
    ITL and E2EL; ``"read"``: the moment the event loop hands the bytes over; ``"auto"`` (the
    default): kernel where it can, else read.

    ``engine``: ``"asyncio"`` (this event loop) or ``"native"`` (:func:`measure_native`, in a
    thread: the loop stays free meanwhile).

    One process, one event loop; :func:`rapidsse.serving.workers.measure_workers` spreads the same
    schedule over several.
    """
    if engine == "native":
        return await asyncio.to_thread(
            measure_native, url, bodies, protocol=protocol, num_prompts=num_prompts, request_rate=request_rate,
            burstiness=burstiness, max_concurrency=max_concurrency, warmup=warmup, seed=seed, headers=headers,
            timeout=timeout, on_result=on_result, timestamps=timestamps)
    if engine != "asyncio":
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    count = len(bodies) if num_prompts is None else num_prompts
    _check(protocol, bodies, count, warmup, max_concurrency)
    from .fds import reserve

    reserve()  # (as the native client does: a connection never waits for the table to grow)
    target = await prepared_target(url, protocol, headers, timestamps)
    plan = list(enumerate(arrival_times(count, request_rate, burstiness, seed)))
    slots = LocalSlots(max_concurrency) if max_concurrency else None
    return await drive(target, protocol, bodies, plan, slots=slots, warmup=warmup, warmup_slots=slots,
                       timeout=timeout, on_result=on_result)


def merge(parts: Iterable[Run]) -> Run:
    """One run from the runs of workers that shared one schedule (each request in one of them):
    the results in arrival order (by :attr:`RequestResult.index`), as one process would have them,
    and the longest duration (every worker started on the same barrier). :func:`summarize` of the
    merge is the report one process would give for the same samples."""
    parts = list(parts)
    results = sorted((r for part in parts for r in part.results), key=lambda r: r.index)
    kinds = sorted({part.timestamps for part in parts}) or ["read"]
    return Run(results, max((part.duration for part in parts), default=0.0), "+".join(kinds),
               worker_cpu=sum(part.worker_cpu for part in parts), client_cpu=sum(part.client_cpu for part in parts),
               client_processes=sum(part.client_processes for part in parts) or 1)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector for a timed run: collects once, freezes what is
    alive (so that a later collection does not walk it) and disables the collector until the block
    ends, then restores both. A full collection of a process with hundreds of streams in flight
    takes milliseconds during which no byte is read, and every stream would see its next token
    late by that much. Objects freed by reference counting go on being freed; only reference
    cycles made inside the block wait until it ends."""
    enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


def run_loop(coro: Any, loop: str = "auto") -> Any:
    """Runs ``coro`` to completion on a new event loop: uvloop's (``"uvloop"``; ``"auto"``: when it
    is installed) or asyncio's own (``"asyncio"``)."""
    if loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise
        else:
            return uvloop.run(coro)
    return asyncio.run(coro)


# --- The native engine ------------------------------------------------------------------------------
#
# ``--engine native``: the same schedule, cap and samples, with every request sent, read, timestamped
# and counted in Rust (``rust/src/net/measure.rs``): tokio tasks on kept-alive pooled connections,
# kernel receive timestamps as above, the token counts of the adapters above. Python hands the run
# over once and builds the RequestResults from the samples that come back as requests end.

ENGINES = ("native", "asyncio")
INTERRUPTED = "interrupted: the run was stopped (Ctrl-C) before this request ended"
_DRAIN_WAIT = 0.1  # seconds a drain call waits: Ctrl-C is seen within it


def _engine_class() -> Any:
    from .. import BACKEND

    if BACKEND != "rust":
        return None
    from .._backend import core

    return getattr(core(), "MeasureEngine", None)


def native_available() -> bool:
    """Whether this process can run the native engine (the Rust backend, built with it)."""
    return _engine_class() is not None


def default_engine() -> str:
    """The engine ``rapidsse measure`` runs when none is asked for: native where it can."""
    return "native" if native_available() else "asyncio"


def native_engine(url: str, protocol: str, headers: dict[str, str] | None, timestamps: str,
                  bodies: Sequence[dict[str, Any]], timeout: float) -> tuple[Any, str]:
    """The Rust client of one process for ``url`` (``MeasureEngine``) and when its tokens count as
    arrived (``"kernel"`` or ``"read"``, see :func:`measure`). ``https://`` trusts the Mozilla
    roots and, as Python's default TLS context does, the certificates of ``SSL_CERT_FILE``."""
    engine_class = _engine_class()
    if engine_class is None:
        raise ValueError("the native engine needs the Rust backend (this is the pure Python one): "
                         "use the asyncio engine")
    if timestamps not in TIMESTAMPS:
        raise ValueError(f"timestamps must be one of {', '.join(TIMESTAMPS)}, not {timestamps!r}")
    all_headers = {"anthropic-version": ANTHROPIC_VERSION} if protocol == "anthropic" else {}
    all_headers.update(headers or {})
    target = _target(url, all_headers, keep_alive=True)
    tls = target.tls is not None
    if tls and timestamps == "kernel":
        raise ValueError("kernel timestamps are for plain http:// (TLS decrypts after the kernel)")
    kernel = not tls and timestamps != "read" and engine_class.kernel_timestamps() and kernel_timestamps()
    if timestamps == "kernel" and not kernel:
        raise ValueError("this machine gives no kernel receive timestamps (Linux on x86-64 or arm64 does)")
    ca_file = os.environ.get("SSL_CERT_FILE") if tls else None
    try:
        engine = engine_class(target.host, target.port, target.head, protocol,
                              [msgspec.json.encode(b) for b in bodies], timeout, kernel, f"timeout after {timeout:g} s",
                              INTERRUPTED, tls=tls, tls_ca=Path(ca_file).read_bytes() if ca_file else None)
    except ValueError as exc:  # (the roots: its wording names the gateway's upstream CA file)
        raise ValueError(f"SSL_CERT_FILE {ca_file}: {str(exc).replace('the upstream CA file ', '')}") from None
    return engine, "kernel" if kernel else "read"


def _native_result(sample: tuple[Any, ...], due: float) -> RequestResult:
    (index, queued, status, error, latency, token_times, token_reads, multi_token_reads, output_tokens, input_tokens,
     _bytes) = sample
    return RequestResult(ok=error is None, status_code=status, index=index, error=error, due=due, queued=queued,
                         ttft=token_times[0] if token_times else None, latency=latency, token_times=token_times,
                         output_tokens=output_tokens, input_tokens=input_tokens, token_reads=token_reads,
                         multi_token_reads=multi_token_reads)


def drive_native(engine: Any, timestamps: str, plan: Sequence[tuple[int, float]], *,
                 slots: int | str | None = None, warmup: int = 0, warmup_cap: int | None = None,
                 on_result: Callable[[RequestResult], None] | None = None,
                 started: Callable[[], float | None] | None = None,
                 on_want: Callable[[list[int]], None] | None = None) -> Run:
    """:func:`drive` on the native ``engine`` (:func:`native_engine`), in this thread: ``warmup``
    requests first (``warmup_cap`` in flight), then ``plan`` from the start (``started``, as in
    :func:`drive`), ``slots`` in flight (a number; None: no cap; ``"external"``: each due request
    goes to ``on_want`` and waits for ``engine.grant(index)``). ``on_result`` is called here as each
    request ends. Ctrl-C (:class:`KeyboardInterrupt`) stops the engine: what was due and had not
    ended fails as interrupted, what was not due is left out, and the run returns
    (``interrupted``)."""
    if warmup:
        engine.warmup(warmup, warmup_cap)
    dues = dict(plan)
    results: list[RequestResult] = []
    start = started() if started is not None else None
    if start is None:
        start = time.perf_counter()
    cpu = time.process_time()
    engine.start(list(plan), start - time.perf_counter(), -1 if slots == "external" else slots)
    duration: float | None = None
    interrupted = False

    def take(samples: list[tuple[Any, ...]]) -> None:
        for sample in samples:
            result = _native_result(sample, dues[sample[0]])
            results.append(result)
            if on_result is not None:
                on_result(result)

    try:
        while duration is None:
            samples, wants, duration = engine.drain(_DRAIN_WAIT)
            if wants and on_want is not None:
                on_want(wants)
            take(samples)
    except KeyboardInterrupt:
        engine.stop()
        interrupted = True
        while duration is None:
            samples, _wants, duration = engine.drain(_DRAIN_WAIT)
            take(samples)
    results.sort(key=lambda r: r.index)
    return Run(results, duration, timestamps, interrupted=interrupted, client_cpu=time.process_time() - cpu)


def measure_native(
    url: str,
    bodies: Sequence[dict[str, Any]],
    *,
    protocol: str = "responses",
    num_prompts: int | None = None,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    warmup: int = 0,
    seed: int | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 600.0,
    on_result: Callable[[RequestResult], None] | None = None,
    timestamps: str = "auto",
) -> Run:
    """:func:`measure` on the native engine, in this thread (no event loop): the same schedule,
    cap, warmup and samples. Ctrl-C returns what was measured (``run.interrupted``)."""
    count = len(bodies) if num_prompts is None else num_prompts
    _check(protocol, bodies, count, warmup, max_concurrency)
    engine, kind = native_engine(url, protocol, headers, timestamps, bodies, timeout)
    plan = list(enumerate(arrival_times(count, request_rate, burstiness, seed)))
    return drive_native(engine, kind, plan, slots=max_concurrency, warmup=warmup, warmup_cap=max_concurrency,
                        on_result=on_result)


# --- Statistics --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, interpolating linearly (numpy's default);
    None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _percentile_name(q: float) -> str:
    return str(int(q)) if int(q) == q else str(q)


def _distribution(name: str, values: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    """vLLM's keys for one metric, in milliseconds; 0 for no values, as vLLM writes them."""
    ms = [v * 1000.0 for v in values] or [0.0]
    mean = sum(ms) / len(ms)
    out = {
        f"mean_{name}_ms": mean,
        f"median_{name}_ms": percentile(ms, 50) or 0.0,
        f"std_{name}_ms": math.sqrt(sum((v - mean) ** 2 for v in ms) / len(ms)),
    }
    for q in percentiles:
        out[f"p{_percentile_name(q)}_{name}_ms"] = percentile(ms, q) or 0.0
    return out


def parse_goodput(specs: Iterable[str]) -> dict[str, float]:
    """``["ttft:200", "e2el:5000"]`` → ``{"ttft": 200.0, "e2el": 5000.0}`` (milliseconds)."""
    slos: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition(":")
        name = name.strip().lower()
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not sep or name not in _GOODPUT_METRICS or not number >= 0:
            raise ValueError(f"--goodput {spec!r} is not METRIC:MS with METRIC one of ttft, tpot, e2el "
                             "and MS a number of milliseconds at least 0")
        slos[name] = number
    return slos


def _good(result: RequestResult, slos: dict[str, float]) -> bool:
    values = {"ttft": result.ttft or 0.0, "tpot": result.tpot or 0.0, "e2el": result.latency}
    return all(values[name] * 1000.0 <= limit for name, limit in slos.items())


def _peak_concurrency(results: Sequence[RequestResult]) -> int:
    edges = sorted([(r.due + r.queued, 1) for r in results] + [(r.due + r.latency, -1) for r in results],
                   key=lambda edge: (edge[0], edge[1]))
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


def summarize(run: Run, *, percentiles: Sequence[float] = DEFAULT_PERCENTILES,
              goodput: dict[str, float] | None = None) -> dict[str, Any]:
    """The report, with ``vllm bench serve``'s key names: ``completed``, ``failed``, ``duration``,
    ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``request_goodput``,
    ``output_throughput``, ``total_token_throughput``, ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms``,
    ``..._client_queue_time_ms``, ``max_concurrent_requests``, plus ``failure_reasons`` (reason →
    count). Distributions are over the completed requests.

    And whether the client kept up: ``token_reads`` and ``multi_token_reads`` (reads that completed
    a token, and several), ``client_cpu_share`` (the client's CPU seconds over the run's wall time,
    per client process) and ``client_saturated``: a share over :data:`SATURATED_CPU_SHARE`, or
    more than :data:`SATURATED_MULTI_TOKEN_READS` of the token reads (and at least
    :data:`SATURATED_MIN_MULTI_TOKEN_READS`) holding several tokens."""
    results, duration = run.results, run.duration
    good = [r for r in results if r.ok]
    output_tokens = sum(r.tokens for r in good)
    input_tokens = sum(r.input_tokens or 0 for r in good)
    per_second = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    report: dict[str, Any] = {
        "completed": len(good),
        "failed": len(results) - len(good),
        "duration": duration,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": per_second(len(good)),
        "request_goodput": per_second(sum(_good(r, goodput) for r in good)) if goodput else None,
        "output_throughput": per_second(output_tokens),
        "total_token_throughput": per_second(input_tokens + output_tokens),
        "max_concurrent_requests": _peak_concurrency(good),
    }
    report.update(_distribution("ttft", [r.ttft for r in good if r.ttft is not None], percentiles))
    report.update(_distribution("tpot", [t for r in good if (t := r.tpot) is not None], percentiles))
    report.update(_distribution("itl", [gap for r in good for gap in r.itls], percentiles))
    report.update(_distribution("e2el", [r.latency for r in good], percentiles))
    report.update(_distribution("client_queue_time", [r.queued for r in good], percentiles))
    report["failure_reasons"] = dict(Counter(r.error for r in results if not r.ok).most_common())
    report["timestamps"] = run.timestamps
    token_reads = sum(r.token_reads for r in results)
    multi_token_reads = sum(r.multi_token_reads for r in results)
    cpu_share = run.client_cpu / (duration * run.client_processes) if duration > 0 else 0.0
    report["token_reads"] = token_reads
    report["multi_token_reads"] = multi_token_reads
    report["client_cpu_share"] = cpu_share
    report["client_saturated"] = cpu_share > SATURATED_CPU_SHARE or _bunched(multi_token_reads, token_reads)
    return report


def _bunched(multi_token_reads: int, token_reads: int) -> bool:
    """Whether too many token reads held several tokens (see :data:`SATURATED_MULTI_TOKEN_READS`)."""
    return (multi_token_reads >= SATURATED_MIN_MULTI_TOKEN_READS
            and multi_token_reads > SATURATED_MULTI_TOKEN_READS * token_reads)


def saturation_warning(report: dict[str, Any]) -> str | None:
    """What to tell the user when :func:`summarize` found the client saturated (None if not)."""
    if not report.get("client_saturated"):
        return None
    reasons = []
    if report["client_cpu_share"] > SATURATED_CPU_SHARE:
        reasons.append(f"it used {100.0 * report['client_cpu_share']:.0f}% of a core (over "
                       f"{100.0 * SATURATED_CPU_SHARE:.0f}%: busy, so late to its reads)")
    if _bunched(report["multi_token_reads"], report["token_reads"]):
        reasons.append(f"{report['multi_token_reads']} of its {report['token_reads']} token reads held several "
                       f"tokens (over {100.0 * SATURATED_MULTI_TOKEN_READS:g}%: it fell behind the streams, or the "
                       "server writes several tokens at once)")
    return ("warning: the client may have skewed its own measurements (client_saturated): " + "; ".join(reasons)
            + ". ITL and TPOT are then not the server's alone: use more --workers, the native engine, or a "
              "lighter load.")


def format_report(report: dict[str, Any], percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> str:
    """The report as ``vllm bench serve`` prints it."""
    lines = ["{:=^50}".format(" Serving Benchmark Result ")]

    def row(label: str, value: Any, digits: int = 2) -> None:
        text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
        lines.append(f"{label:<40} {text:<10}")

    row("Successful requests:", report["completed"])
    row("Failed requests:", report["failed"])
    if report.get("timestamps"):
        row("Token timestamps:", report["timestamps"])
    if report.get("max_concurrency") is not None:
        row("Maximum request concurrency:", report["max_concurrency"])
    if report.get("request_rate") not in (None, "inf"):
        row("Request rate configured (RPS):", float(report["request_rate"]))
    row("Benchmark duration (s):", report["duration"])
    row("Total input tokens:", report["total_input_tokens"])
    row("Total generated tokens:", report["total_output_tokens"])
    row("Request throughput (req/s):", report["request_throughput"])
    if report["request_goodput"] is not None:
        row("Request goodput (req/s):", report["request_goodput"])
    row("Output token throughput (tok/s):", report["output_throughput"])
    row("Total token throughput (tok/s):", report["total_token_throughput"])
    row("Peak concurrent requests:", report["max_concurrent_requests"])
    for name, label, header in (
        ("ttft", "TTFT", "Time to First Token"),
        ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
        ("itl", "ITL", "Inter-token Latency"),
        ("e2el", "E2EL", "End-to-end Latency"),
        ("client_queue_time", "Client Queue Time", "Client-side Queueing"),
    ):
        lines.append(f"{header:-^50}")
        row(f"Mean {label} (ms):", report[f"mean_{name}_ms"])
        row(f"Median {label} (ms):", report[f"median_{name}_ms"])
        for q in percentiles:
            row(f"P{_percentile_name(q)} {label} (ms):", report[f"p{_percentile_name(q)}_{name}_ms"])
    if "client_cpu_share" in report:
        lines.append("{:-^50}".format("Client"))
        if report.get("engine"):
            row("Client engine:", report["engine"])
        row("Client CPU share (of a core):", report["client_cpu_share"])
        row("Reads of several tokens:", f"{report['multi_token_reads']} of {report['token_reads']}")
        row("Client saturated:", "yes" if report["client_saturated"] else "no")
    if report["failure_reasons"]:
        lines.append("{:-^50}".format("Failures"))
        lines += [f"{count:>6} x {reason}" for reason, count in list(report["failure_reasons"].items())[:10]]
    lines.append("=" * 50)
    return "\n".join(lines)
