"""Typed events: framed SSE payloads (or WebSocket messages) decoded into msgspec Structs.

The hot path is one msgspec call per chunk: the backend frames the chunk, joins the payloads whose
``type`` the schemas know into JSON lines and decodes them in one call, a line each (see
:func:`rapidsse._wire.wrap_lines`). (The Rust
backend first builds the plain events itself, msgspec Structs equal to msgspec's, and batches only
the rest: see :mod:`rapidsse._native`.) Anything
else (an unknown or missing ``type``, a bad payload, one spanning several ``data:`` lines) is decoded
alone by :func:`_careful`, the one place that decides what such a payload becomes, for both backends:

- a known event -> its Struct (nested unknown types kept as ``UnknownVariant`` members);
- JSON without ``type`` -> the Struct named by the SSE event name, if it names one;
- any other JSON object -> :class:`UnknownEvent` (never an error, never lost);
- invalid JSON, a non-object, or a known type that does not fit its schema -> :class:`DecodeError`,
  or per ``on_error``: dropped (``"skip"``) or yielded as :class:`InvalidEvent` (``"keep"``).
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, Callable, Literal, Union

import msgspec

from . import _native, anthropic, chat, completions, gemini, realtime, responses
from ._backend import core as _backend_core
from ._pure.framing import Framer
from ._pure.guard import Exclusive
from . import _wire
from ._schema import UnknownEvent
from .errors import DecodeError, EventTooLarge, SSEError, StreamError
from .framing import DEFAULT_MAX_EVENT_SIZE, Bytes, ServerSentEvent, adrain, drain

__all__ = [
    "EventDecoder",
    "detect_protocol",
    "InvalidEvent",
    "UnknownEvent",
    "aiter_events",
    "decode_realtime",
    "encode_sse",
    "iter_events",
    "iter_realtime",
]

Protocol = Literal["responses", "chat", "anthropic", "gemini", "completions"]
OnError = Literal["raise", "skip", "keep"]
_DONE = b"[DONE]"


class InvalidEvent(msgspec.Struct, gc=False):
    """A payload that could not be decoded, yielded instead of raising with ``on_error="keep"``.

    ``raw`` is the payload as received, ``event`` its SSE event name and ``error`` the
    :class:`DecodeError` that ``on_error="raise"`` would have raised.
    """

    raw: bytes
    event: str
    error: Any


class _Schema:
    """What the decoder needs to know of one protocol's schemas."""

    __slots__ = ("name", "event", "event_types", "tagged", "decode_lines", "decode_one")

    def __init__(self, name: str, module: Any, tagged: bool) -> None:
        self.name = name
        self.event = module.Event
        self.event_types: dict[str, type] = module.EVENT_TYPES
        self.tagged = tagged
        decoder = msgspec.json.Decoder(module.Event)
        # Every decoded event gets its wire info (`_wire`) from the payload: see rapidsse._wire.
        self.decode_lines = _wire.wrap_lines(decoder)
        self.decode_one = _wire.wrap_one(decoder.decode)


_SCHEMAS = {
    "responses": _Schema("responses", responses, tagged=True),
    "chat": _Schema("chat", chat, tagged=False),
    "realtime": _Schema("realtime", realtime, tagged=True),
    "gemini": _Schema("gemini", gemini, tagged=False),
    "completions": _Schema("completions", completions, tagged=False),
    "anthropic": _Schema("anthropic", anthropic, tagged=True),
}

# The protocols of `EventDecoder`, and those whose stream `data: [DONE]` ends.
_SSE_PROTOCOLS = ("responses", "chat", "anthropic", "gemini", "completions")
_DONE_PROTOCOLS = frozenset(["chat", "completions"])


class _Invalid(Exception):
    pass


# A payload nested deeper than this is "JSON nested too deeply" on the careful path, whatever else
# it is. msgspec's own limit is the interpreter's recursion limit less the frames above the call:
# those differ between the two backends' call paths (and the limit rises under tools such as
# hypothesis), so where msgspec stops must not decide which error a payload gets, or whether it
# gets one. Far below the 1,000 levels of CPython's default limit.
_MAX_NESTING = 512


def _too_deep(payload: str) -> bool:
    """Whether ``payload`` (JSON text, valid or not) opens more than ``_MAX_NESTING`` levels at
    once; the brackets counted first, so that a usual payload costs two ``str.count`` calls."""
    if len(payload) <= _MAX_NESTING or payload.count("[") + payload.count("{") <= _MAX_NESTING:
        return False
    from ._pure.accumulate.json import _max_depth  # (imported here: that package imports this module)

    return _max_depth(payload) > _MAX_NESTING


def _decode_alone(schema: _Schema, raw: bytes, event: str) -> Any:
    """Decodes one payload the careful way (see the module docstring). Raises :class:`_Invalid`."""
    try:
        payload = raw.decode("utf-8")
    except UnicodeDecodeError:
        payload = raw.decode("utf-8", "replace")  # as the framer does for text: U+FFFD
    if _too_deep(payload):
        raise _Invalid("JSON nested too deeply")
    try:
        return _wire.decode(payload, schema.event)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        first_error = exc
    except RecursionError:
        raise _Invalid("JSON nested too deeply") from None
    try:
        obj = msgspec.json.decode(payload)
    except msgspec.DecodeError as exc:
        raise _Invalid(f"invalid JSON: {exc}") from None
    except RecursionError:
        raise _Invalid("JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise _Invalid(f"expected a JSON object, got {_json_kind(obj)}")
    if schema.tagged:
        if "type" not in obj:
            cls = schema.event_types.get(event)
            if cls is None:
                return UnknownEvent(type=event, raw=raw)
            try:
                return _wire.decode(payload, cls)
            except (msgspec.ValidationError, RecursionError) as exc:
                raise _Invalid(f"{exc} (decoded as {event!r}, the SSE event name)") from None
        tag = obj["type"]
        if not isinstance(tag, str):
            raise _Invalid(f"`type` must be a string, got {_json_kind(tag)}")
        if tag not in schema.event_types:
            return UnknownEvent(type=tag, raw=raw)
    raise _Invalid(str(first_error))


def _json_kind(obj: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(obj), "number"
    )


def _careful(schema: _Schema, on_error: str, raw: bytes, event: str, index: int, offset: int) -> Any:
    """Decodes one payload alone and applies the ``on_error`` policy. Used by both backends."""
    try:
        return _decode_alone(schema, raw, event)
    except _Invalid as bad:
        error = DecodeError(str(bad), index=index, event=event, offset=offset, raw=raw)
    if on_error == "raise":
        raise error
    if on_error == "skip":
        return None
    return InvalidEvent(raw=raw, event=event, error=error)


def _as_tuple(*fields: Any) -> tuple[Any, ...]:
    return fields


class _PyEventCore:
    """The pure-Python twin of the Rust ``EventDecoder`` (same batching, same careful path)."""

    __slots__ = ("_framer", "_decode_lines", "_careful", "_done_marker", "done", "_busy")

    def __init__(
        self,
        max_event_size: int | None,
        decode_lines: Callable[[bytes, int], list[Any]],
        careful: Callable[..., Any],
        done_marker: bytes | None,
    ) -> None:
        self._framer = Framer(max_event_size)
        self._decode_lines = decode_lines
        self._careful = careful
        self._done_marker = done_marker
        self.done = False
        self._busy = Exclusive()

    def finished(self) -> bool:
        """Whether ``[DONE]`` was seen (what iterators ask after every chunk)."""
        return self.done

    def feed(self, data: Bytes) -> list[Any]:
        with self._busy:
            return self._feed(data)

    def _feed(self, data: Bytes) -> list[Any]:
        if self.done:
            return []
        raw: list[tuple[Any, ...]] = []
        pending: SSEError | None = None
        try:
            self._framer.feed(data, raw, _as_tuple)
        except SSEError as exc:
            pending = exc
        if self._done_marker is not None:
            for i, item in enumerate(raw):
                if item[1] == self._done_marker:
                    del raw[i:]
                    self.done = True
                    break
        out = self._build(raw)
        if pending is not None and not self.done:  # input after [DONE] is ignored
            pending.events = out
            raise pending
        return out

    def _build(self, raw: list[tuple[Any, ...]]) -> list[Any]:
        n = len(raw)
        if not n:
            return []
        payloads = [item[1] for item in raw]
        lines = b"\n".join(payloads)
        # The batch decoder's terms (rapidsse._wire.wrap_lines): one payload a line, each `{...}`
        # (here without whitespace around it: a payload with some takes the careful path).
        if lines.count(b"\n") == n - 1 and all(p[:1] == b"{" and p[-1:] == b"}" for p in payloads):
            try:
                return self._decode_lines(lines, n)
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                pass  # decoded one by one below, where the bad payload is found
        out: list[Any] = []
        careful = self._careful
        for event, data, _id, _retry, index, offset in raw:
            try:
                decoded = careful(data, event, index, offset)
            except SSEError as exc:
                exc.events = out
                raise
            if decoded is not None:
                out.append(decoded)
        return out

    def close(self) -> list[Any]:
        self._framer.close()
        self.done = False
        return []

    def reset(self) -> None:
        self._framer.reset()
        self.done = False

    @property
    def last_event_id(self) -> str:
        return self._framer.last_event_id


def _is_error_event(event: Any) -> bool:
    if isinstance(event, (responses.Error, realtime.Error, anthropic.Error)):
        return True
    chunk_types = (chat.ChatCompletionChunk, gemini.GenerateContentResponse, completions.Completion)
    return isinstance(event, chunk_types) and event.error is not None


# What `EventDecoder` hands its core, made once per backend, protocol, `on_error` and whether
# Rust builds the Structs (a gateway makes a decoder per stream: building these each time, the
# Responses API's set of 63 known types above all, was most of what making one cost).
_DECODER_PARTS: dict[tuple[Any, str, str, bool], tuple[Any, ...]] = {}


def _decoder_parts(native: Any, protocol: str, on_error: str, built: bool) -> tuple[Any, ...]:
    schema = _SCHEMAS[protocol]
    careful = functools.partial(_careful, schema, on_error)
    done_marker = _DONE if protocol in _DONE_PROTOCOLS else None
    parts: tuple[Any, ...]
    if native is not None:
        known = native.KnownTypes(list(schema.event_types)) if schema.tagged else None
        builder = _native.native_schema(native, schema.event, tagged_unions=protocol == "anthropic") if built else None
        parts = (known, schema.decode_lines, careful, done_marker, builder)
    else:
        parts = (schema.decode_lines, careful, done_marker)
    _DECODER_PARTS[(native, protocol, on_error, built)] = parts
    return parts


class EventDecoder:
    """Push-style decoder of a Responses, Chat Completions, Anthropic Messages, Gemini or
    Completions SSE stream into typed events.

    ``feed(data) -> list`` takes the next chunk of bytes and returns the typed events it completed
    (``rapidsse.responses`` / ``rapidsse.chat`` / ``rapidsse.anthropic`` / ``rapidsse.gemini`` /
    ``rapidsse.completions`` Structs, :class:`UnknownEvent` for unknown types, :class:`InvalidEvent`
    with ``on_error="keep"``). ``close()`` ends the stream. For Chat and Completions, ``data: [DONE]``
    ends it: it is not returned, ``done`` becomes true and later input is ignored.

    ``on_error``: ``"raise"`` (default) raises :class:`DecodeError` for a bad payload, with the
    events decoded before it in that chunk in ``err.events``; ``"skip"`` drops it; ``"keep"`` returns
    it as an :class:`InvalidEvent`. ``raise_on_error_event=True`` raises :class:`StreamError` for an
    ``error`` event (Responses, Anthropic) or a chunk with an ``error`` object (Chat, Gemini,
    Completions).

    >>> dec = EventDecoder("responses")
    >>> dec.feed(b'data: {"type":"response.output_text.delta","delta":"Hi"}\\n\\n')[0].delta
    'Hi'
    """

    __slots__ = ("_core", "feed", "protocol", "on_error")

    feed: Callable[[Bytes], list[Any]]

    def __init__(
        self,
        protocol: Protocol = "responses",
        *,
        on_error: OnError = "raise",
        max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
        raise_on_error_event: bool = False,
    ) -> None:
        if protocol not in _SSE_PROTOCOLS:
            raise ValueError(
                f"protocol must be 'responses', 'chat', 'anthropic', 'gemini' or 'completions', not {protocol!r}"
                " (realtime: decode_realtime)"
            )
        if on_error not in ("raise", "skip", "keep"):
            raise ValueError(f"on_error must be 'raise', 'skip' or 'keep', not {on_error!r}")
        native = _backend_core()
        built = _native.ENABLED and _wire.NATIVE_WIRE
        parts = _DECODER_PARTS.get((native, protocol, on_error, built))
        if parts is None:
            parts = _decoder_parts(native, protocol, on_error, built)
        if native is not None:
            self._core: Any = native.EventDecoder(max_event_size, *parts)
        else:
            self._core = _PyEventCore(max_event_size, *parts)
        self.protocol = protocol
        self.on_error = on_error
        self.feed = self._feed_checked if raise_on_error_event else self._core.feed

    def _feed_checked(self, data: Bytes) -> list[Any]:
        try:
            events = self._core.feed(data)
        except SSEError as exc:
            _raise_first_error_event(exc.events)
            raise
        _raise_first_error_event(events)
        return events

    def close(self) -> list[Any]:
        """Ends the stream: an unfinished event is discarded. Returns ``[]``."""
        return self._core.close()

    def reset(self) -> None:
        """Starts a new stream (after an :class:`EventTooLarge`, or to reuse the decoder)."""
        self._core.reset()

    # (An attrgetter, not a Python function: iterators read this after every chunk.)
    done = property(operator.attrgetter("_core.done"), doc="Whether ``data: [DONE]`` ended the stream (Chat, Completions).")

    @property
    def last_event_id(self) -> str:
        """The SSE last event id committed so far (for ``Last-Event-ID`` on reconnect)."""
        return self._core.last_event_id


def _raise_first_error_event(events: list[Any]) -> None:
    for i, event in enumerate(events):
        if _is_error_event(event):
            raise StreamError(event, events=events[:i])


def _finished(decoder: EventDecoder) -> Union[Callable[[], bool], None]:
    """What tells an iterator to stop reading: ``[DONE]`` (Chat, Completions); Responses and
    Gemini streams just end."""
    if decoder.protocol not in _DONE_PROTOCOLS:
        return None
    return decoder._core.finished  # the core's own method: called after every chunk


def _chunks(source: Any) -> Iterable[Bytes]:
    iter_bytes = getattr(source, "iter_bytes", None)
    return iter_bytes() if callable(iter_bytes) else source


def _achunks(source: Any) -> AsyncIterable[Bytes]:
    aiter_bytes = getattr(source, "aiter_bytes", None)
    return aiter_bytes() if callable(aiter_bytes) else source


def iter_events(
    source: Iterable[Bytes],
    protocol: Protocol = "responses",
    on_error: OnError = "raise",
    *,
    max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
    raise_on_error_event: bool = False,
) -> Iterator[Any]:
    """Yields the typed events of a stream: an iterable of byte chunks, or an object with
    ``iter_bytes()`` such as an ``httpx.Response``. See :class:`EventDecoder` for the options.

    Events decoded before an error are yielded before it is raised; nothing is lost.
    """
    decoder = EventDecoder(
        protocol, on_error=on_error, max_event_size=max_event_size, raise_on_error_event=raise_on_error_event
    )
    return drain(decoder.feed, _chunks(source), _finished(decoder), decoder.close)


def aiter_events(
    source: AsyncIterable[Bytes],
    protocol: Protocol = "responses",
    on_error: OnError = "raise",
    *,
    max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
    raise_on_error_event: bool = False,
) -> AsyncIterator[Any]:
    """Async twin of :func:`iter_events`: an async iterable of byte chunks, or an object with
    ``aiter_bytes()`` such as an ``httpx.Response`` from ``AsyncClient.stream``. The events of a
    chunk come without suspending (only reading the next chunk awaits); ``aclose()`` closes the
    source."""
    decoder = EventDecoder(
        protocol, on_error=on_error, max_event_size=max_event_size, raise_on_error_event=raise_on_error_event
    )
    return adrain(decoder.feed, _achunks(source), _finished(decoder), decoder.close)


# Anthropic event types no other protocol uses (``ping`` and ``error`` tell nothing).
_ANTHROPIC_ONLY = frozenset(anthropic.EVENT_TYPES) - {"ping", "error"}


def sse_objects(head: bytes) -> Iterator[tuple[Any, dict[str, Any] | None]]:
    """The whole SSE events in the bytes ``head`` (framed by the live backend, no size cap), each
    with its data decoded as a JSON object: ``(event, obj)``, ``obj`` None where the data is not
    a JSON object. What protocol detection reads a recording's head with."""
    from .framing import SSEDecoder  # the live backend's

    for event in SSEDecoder(None).feed(head):
        try:
            obj = msgspec.json.decode(event.data)
        except (msgspec.DecodeError, RecursionError):
            obj = None
        yield event, obj if isinstance(obj, dict) else None


def detect_protocol(head: bytes) -> str | None:
    """The protocol of a recorded stream from its first bytes: ``"realtime"`` for JSON lines;
    for SSE ``"anthropic"`` when an event is named (or typed) ``message_start``, ``content_block_*``,
    ``message_delta`` or ``message_stop``, ``"responses"`` when an event is named ``response.*`` or
    its JSON has another string ``type``, ``"completions"`` for a ``text_completion`` object (or
    ``choices`` whose first entry has ``text`` and no ``delta``), ``"chat"`` for ``[DONE]`` or JSON
    with ``choices`` or a ``chat.completion*`` object, ``"gemini"`` for JSON with ``candidates``,
    ``usageMetadata``, ``promptFeedback`` or ``modelVersion``. None when the bytes tell nothing
    (yet)."""
    if head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"{"):
        return "realtime"
    for event, obj in sse_objects(head):
        if event.event in _ANTHROPIC_ONLY:
            return "anthropic"
        if event.event.startswith("response."):
            return "responses"
        if event.data == "[DONE]":
            return "chat"
        if obj is None:
            continue
        if _is_completions_chunk(obj):
            return "completions"
        if "choices" in obj or str(obj.get("object") or "").startswith("chat.completion"):
            return "chat"
        if obj.get("type") in _ANTHROPIC_ONLY:
            return "anthropic"
        if "type" not in obj and any(k in obj for k in _GEMINI_KEYS):
            return "gemini"
        if isinstance(obj.get("type"), str):
            return "responses"
    return None


_GEMINI_KEYS = ("candidates", "usageMetadata", "promptFeedback", "modelVersion")


def _is_completions_chunk(obj: dict[str, Any]) -> bool:
    if obj.get("object") == "text_completion":
        return True
    choices = obj.get("choices")
    if obj.get("object") is None and isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return "text" in choices[0] and "delta" not in choices[0]
    return False


# --- Realtime: one JSON message per WebSocket frame ------------------------------------------

_realtime_decode = _SCHEMAS["realtime"].decode_one


def _check_size(data: Any, max_event_size: int | None, where: str, noun: str = "message") -> None:
    """``EventTooLarge`` for one message / payload over the cap (``where`` says which)."""
    if max_event_size is not None and len(data) > max_event_size:
        raise EventTooLarge(
            f"a {noun} of {len(data)} bytes exceeds max_event_size={max_event_size} bytes ({where})",
            limit=max_event_size,
            offset=-1,
        )


def decode_realtime(
    message: bytes | bytearray | memoryview | str,
    *,
    index: int = 0,
    max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
) -> Any:
    """Decodes one Realtime API server event (a WebSocket text message) into its Struct.

    Unknown types become :class:`UnknownEvent`; invalid JSON or a known type that does not fit
    raises :class:`DecodeError` (``index`` is reported in it); a message longer than
    ``max_event_size`` (``None``: no cap) raises :class:`EventTooLarge`.
    """
    _check_size(message, max_event_size, f"message #{index}")
    try:
        return _realtime_decode(message)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeError):
        pass  # the careful path says what it is
    if isinstance(message, str):
        raw = message.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(message)
    return _careful(_SCHEMAS["realtime"], "raise", raw, "message", index, 0)


def iter_realtime(
    messages: Iterable[bytes | str],
    on_error: OnError = "raise",
    *,
    max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
) -> Iterator[Any]:
    """Yields the typed events of an iterable of Realtime messages (e.g. a WebSocket connection).
    A message longer than ``max_event_size`` raises :class:`EventTooLarge`."""
    if on_error not in ("raise", "skip", "keep"):
        raise ValueError(f"on_error must be 'raise', 'skip' or 'keep', not {on_error!r}")
    schema = _SCHEMAS["realtime"]
    for index, message in enumerate(messages):
        _check_size(message, max_event_size, f"message #{index}")
        try:
            yield _realtime_decode(message)
            continue
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeError):
            pass
        raw = message.encode("utf-8", "surrogatepass") if isinstance(message, str) else bytes(message)
        decoded = _careful(schema, on_error, raw, "message", index, 0)
        if decoded is not None:
            yield decoded


# --- Writing events back ------------------------------------------------------------------------

_EOL = re.compile(rb"\r\n|\r|\n")
_encode = _wire.encode


def encode_sse(event: Any) -> bytes:
    """Writes a typed event back as SSE bytes (``event:`` line + ``data:`` line(s) + blank line),
    so that a gateway can re-emit what it parsed; decoding the result gives an equal event. The
    payload is :func:`rapidsse.encode`'s: for an unchanged event, JSON equal to what was received.

    Chat, Completions and Gemini chunks are written as ``data:`` only (as servers do; end a
    Chat or Completions stream with ``b"data: [DONE]\\n\\n"``); :class:`UnknownEvent` and :class:`InvalidEvent` write their raw payload;
    a :class:`ServerSentEvent` is written with its ``id`` and ``retry``.

    A name that holds a line end would split into extra SSE lines (an injected event): such an
    ``UnknownEvent`` / ``InvalidEvent`` name is left out (decoding reads the type from the payload),
    and a :class:`ServerSentEvent` with one raises ``ValueError``.
    """
    if isinstance(event, ServerSentEvent):
        head = b""
        for name, value in (("id", event.id), ("event", event.event)):
            if _EOL.search(value.encode("utf-8", "surrogatepass")) or "\0" in value and name == "id":
                raise ValueError(f"a ServerSentEvent {name} cannot hold a line end or NUL: {value!r}")
        if event.id:
            head += b"id: " + event.id.encode() + b"\n"
        if event.retry is not None:
            head += b"retry: %d\n" % event.retry
        if event.event != "message":
            head += b"event: " + event.event.encode() + b"\n"
        return head + _data_lines(event.data.encode())
    if isinstance(event, UnknownEvent):
        return _event_line(event.type) + _data_lines(event.raw)
    if isinstance(event, InvalidEvent):
        return (b"" if event.event == "message" else _event_line(event.event)) + _data_lines(event.raw)
    if isinstance(event, (chat.ChatCompletionChunk, gemini.GenerateContentResponse, completions.Completion)):
        return b"data: " + _encode(event) + b"\n\n"
    tag = getattr(event, "type", None)
    if not isinstance(tag, str) or not isinstance(event, msgspec.Struct):
        raise TypeError(f"encode_sse() takes a rapidsse event, not {type(event).__name__}")
    return b"event: " + tag.encode() + b"\ndata: " + _encode(event) + b"\n\n"


def _event_line(name: str) -> bytes:
    encoded = name.encode("utf-8", "surrogatepass")
    return b"" if _EOL.search(encoded) else b"event: " + encoded + b"\n"


def _data_lines(payload: bytes) -> bytes:
    return b"".join(b"data: " + line + b"\n" for line in _EOL.split(payload)) + b"\n"
