"""Accumulation: the final Response, ChatCompletion, Realtime responses, Gemini response and text
completion, built from the deltas.

The work is done by the backend's core (``rust/src/accumulate`` or its pure-Python twin): it takes
each event's JSON payload, appends text in place, and hands back the object built so far as JSON,
which is decoded into the msgspec schemas on demand (and cached until the next event); on the Rust
backend the Chat, Gemini and Completions results are built from that JSON by the native Struct
builder (msgspec decodes what it declines).

Three ways in:

- ``feed(bytes)``: raw SSE bytes, the *tap* for gateways that forward bytes untouched and only want
  the result: no Python object is created per event;
- ``add(event)``: a typed event from :func:`rapidsse.iter_events`;
- ``add_json(payload)``: one event's JSON payload (e.g. a Realtime WebSocket message).

The server's ``.done`` events and final objects are authoritative; where they disagree with what
the deltas built, the server's value is kept and the mismatch is recorded in ``warnings``. Events of
types the accumulator does not use (keep-alives, tool progress, unknown types) are counted in
``unknown_events`` and kept out of the result. A stream cut short still gives everything received.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, Callable, Generic, TypeVar, Union

import msgspec

from . import anthropic, chat, completions, gemini, realtime, responses
from ._backend import core as _backend_core
from ._schema import UnknownEvent, decode_lenient
from ._wire import compute as _compute_wire
from ._wire import decode as _decode_with_wire
from ._wire import encode as _encode
from .decoding import EventDecoder, InvalidEvent, OnError, _achunks, _check_size, _chunks, _finished
from .errors import DecodeError, EventTooLarge, SSEError
from .framing import DEFAULT_MAX_EVENT_SIZE, Bytes, adrain, drain

__all__ = [
    "AnthropicAccumulator",
    "ChatAccumulator",
    "CompletionsAccumulator",
    "GeminiAccumulator",
    "EventStream",
    "RealtimeAccumulator",
    "ResponseAccumulator",
    "astream_anthropic",
    "astream_chat",
    "astream_responses",
    "stream_anthropic",
    "stream_chat",
    "stream_completions",
    "stream_gemini",
    "stream_responses",
]

# (`_encode`, rapidsse.encode, is also what the Rust cores write a typed event with when they do
# not walk it.)

# Texts this long come beside a Rust core's snapshot JSON rather than in it (see `_put_text`).
_SPLICE_MIN = 1024
# Per Struct class: JSON name -> attribute name.
_ATTRS: dict[type, dict[str, str]] = {}


def _attr(cls: type, key: str) -> Union[str, None]:
    names = _ATTRS.get(cls)
    if names is None:
        fields = getattr(cls, "__struct_fields__", ())
        encoded = getattr(cls, "__struct_encode_fields__", fields)
        names = _ATTRS[cls] = dict(zip(encoded, fields))
    return names.get(key)


def _put_text(node: Any, path: tuple[Union[str, int], ...], text: str) -> bool:
    """Puts ``text`` at ``path`` (JSON keys and indices) in a decoded snapshot, where the JSON had
    ``""``; False when the path does not lead to such a string (a part the schemas do not know,
    kept as ``UnknownVariant``, say): then the caller decodes the whole JSON instead."""
    *steps, last = path
    for step in steps:
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                return False
            node = node[step]
        elif isinstance(node, msgspec.Struct):
            attr = _attr(type(node), step)
            if attr is None:
                return False
            node = getattr(node, attr)
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            return False
    if isinstance(node, msgspec.Struct) and isinstance(last, str):
        attr = _attr(type(node), last)
        if attr is None or getattr(node, attr) != "":
            return False
        setattr(node, attr, text)
        return True
    if isinstance(node, dict) and node.get(last) == "":
        node[last] = text
        return True
    return False
T = TypeVar("T")


_BUILDERS: dict[Any, Any] = {}
# Per backend (the compiled module, or None) and accumulator class: what `_Accumulator.__init__`
# takes from the backend (see `_parts`).
_PARTS: dict[tuple[Any, type], tuple[Any, Any, bool]] = {}


def _parts(cls: type[_Accumulator[Any]]) -> tuple[Any, Any, bool]:
    """``cls``'s core class on the live backend (which :func:`rapidsse._backend.using` may
    change per context), its snapshot builder (see :func:`_snapshot_builder`; None on the pure
    backend) and whether the core sets long texts aside (``snapshot_spliced``). Found once per
    backend and class: an accumulator is made per stream."""
    native = _backend_core()
    parts = _PARTS.get((native, cls))
    if parts is None:
        if native is not None:
            core_class = getattr(native, cls._core_name)
        else:
            from ._pure import accumulate as pure

            core_class = getattr(pure, cls._core_name)
        build = _snapshot_builder(cls._snapshot_type) if native is not None and cls._native_snapshot else None
        parts = _PARTS[(native, cls)] = (core_class, build, hasattr(core_class, "snapshot_spliced"))
    return parts


def _snapshot_builder(snapshot_type: Any) -> Union[Callable[[bytes], Any], None]:
    """What builds ``snapshot_type`` from a Rust core's snapshot JSON in one native pass (``build``
    of its ``NativeSchema``, ``rust/src/bindings/native.rs``: the Structs and their ``_wire``, as
    for typed events), returning None where it declines; None on the pure backend or with
    ``RAPIDSSE_NATIVE_STRUCTS=0``. Made once per type."""
    if snapshot_type in _BUILDERS:
        return _BUILDERS[snapshot_type]
    from . import _native, _wire

    native = _backend_core()
    build = None
    if native is not None and _native.ENABLED and _wire.NATIVE_WIRE:
        build = _native.native_schema(native, snapshot_type).build
    _BUILDERS[snapshot_type] = build
    return build


class _Accumulator(Generic[T]):
    """What the three accumulators share.

    ``on_error`` ("raise", "skip", "keep") says what becomes of a payload that cannot be read, as
    for :func:`rapidsse.iter_events`. ``max_event_size`` (bytes, ``None``: no cap) caps one SSE
    event, one payload and each accumulated text: a delta that would take a text past it is not
    appended and raises :class:`EventTooLarge` (whatever ``on_error`` says)."""

    __slots__ = ("_core", "on_error", "invalid_events", "_cached", "_cached_at", "add", "_max_event_size",
                 "_build", "_spliced", "__weakref__")
    _core_name = ""
    _snapshot_type: Any = None
    #: Whether the Rust backend builds the snapshot's Structs itself from its JSON (the native
    #: builder, as typed events are built: ``_wire`` set in the same pass), msgspec and the wire
    #: pass taking only what it declines; see :func:`_snapshot_builder`.
    _native_snapshot = False
    #: Whether it frames raw SSE bytes (``feed``, ``close``): all but the Realtime accumulator.
    _sse = False

    def __init__(self, *, on_error: OnError = "raise", max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE) -> None:
        # One frame, the backend's parts found once (`_parts`): a gateway makes one per stream.
        if on_error != "raise" and on_error != "skip" and on_error != "keep":
            raise ValueError(f"on_error must be 'raise', 'skip' or 'keep', not {on_error!r}")
        core_class, self._build, self._spliced = _parts(type(self))
        self._attach(core_class(max_event_size), on_error, max_event_size)

    @classmethod
    def _from_core(cls, core: Any, *, on_error: OnError = "raise",
                   max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE) -> Any:
        """An accumulator around a core fed elsewhere (the native gateway's tap hands its cores
        over this way when an exchange ends)."""
        self = cls.__new__(cls)
        _, self._build, self._spliced = _parts(cls)
        self._attach(core, on_error, max_event_size)
        return self

    def _attach(self, core: Any, on_error: OnError, max_event_size: Union[int, None]) -> None:
        self._core = core
        self._max_event_size = max_event_size
        self.on_error = on_error
        self.invalid_events: list[InvalidEvent] = []
        """Payloads that could not be read at all (not JSON, not an object), with ``on_error="keep"``."""
        self._cached: Any = None
        self._cached_at = -1
        feed, add = core.direct_methods()
        self.add: Callable[[Any], None] = add
        """Adds a typed event (from :func:`rapidsse.iter_events` / :func:`rapidsse.decode_realtime`).

        :class:`UnknownEvent` is added by its raw payload (so it is counted, not lost);
        :class:`InvalidEvent` was already reported by the decoder and is ignored. (The core's
        own method, bound here: no Python frame per event, and on the Rust backend no
        argument parsing either.)"""
        if self._sse:
            core.set_on_rejected(_OnRejected(self))
            # `feed` (a slot of `_SSEAccumulator`, documented there).
            self.feed = feed  # type: ignore[attr-defined]

    def add_json(self, payload: Union[Bytes, str]) -> None:
        """Adds one event's JSON payload."""
        if isinstance(payload, str):
            payload = payload.encode("utf-8", "surrogatepass")
        before = self._core.events()
        _check_size(payload, self._max_event_size, f"after {before} events", noun="payload")
        refused = self._core.add_json(payload)
        if refused is not None:
            reason, limit = refused
            self._rejected([(reason, before, "message", -1, bytes(payload), limit)])

    def _rejected(self, rejected: list[tuple[str, int, str, int, bytes, Union[int, None]]]) -> None:
        """Reports what the core refused: unreadable payloads as :class:`DecodeError` (per
        ``on_error``), deltas past the text cap as :class:`EventTooLarge` (always raised)."""
        errors: list[Any] = []
        too_large: list[EventTooLarge] = []
        for reason, index, event, offset, raw, limit in rejected:
            if limit is None:
                errors.append(DecodeError(reason, index=index, event=event, offset=offset, raw=raw))
            else:
                err = EventTooLarge(reason, limit=limit, offset=offset)
                errors.append(err)
                too_large.append(err)
        if self.on_error == "raise":
            raise errors[0]
        if self.on_error == "keep":
            self.invalid_events.extend(
                InvalidEvent(raw=e.raw, event=e.event, error=e) for e in errors if isinstance(e, DecodeError)
            )
        if too_large:
            raise too_large[0]

    def _snapshot(self) -> Any:
        events = self._core.events()
        if events != self._cached_at:
            parts = self._core.snapshot_spliced(_SPLICE_MIN) if self._spliced else None
            if parts is not None:
                # Long texts come as str objects beside the JSON (written there as ""): put
                # back where they were, they are neither escaped nor unescaped.
                raw, texts = parts
                try:
                    snapshot = decode_lenient(raw, self._snapshot_type)
                except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                    snapshot = None  # decoded whole below, to report the error on the whole JSON
                if snapshot is not None and all(_put_text(snapshot, path, text) for path, text in texts):
                    # Wire info once the texts are back: a text set aside is no default sent.
                    self._cached = _compute_wire(snapshot, raw)
                    self._cached_at = events
                    return snapshot
            raw = self._core.snapshot_json()
            built = None if raw is None or self._build is None else self._build(raw)
            if built is not None:
                self._cached = built
            elif raw is None:
                self._cached = None
            else:
                try:
                    self._cached = _decode_with_wire(raw, self._snapshot_type)
                except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
                    # The server sent objects that do not fit the schema (e.g. a numeric id).
                    raise DecodeError(
                        f"the accumulated result does not fit the schema: {exc}",
                        index=events, event="snapshot", offset=-1, raw=raw,
                    ) from None
            self._cached_at = events
        return self._cached

    @property
    def warnings(self) -> list[str]:
        """Mismatches between deltas and the server's values, sequence gaps, server error events."""
        return self._core.warnings()

    @property
    def unknown_events(self) -> int:
        """Events not used for the result: keep-alives, progress events, unknown types."""
        return self._core.unknown_events()

    @property
    def events(self) -> int:
        """Events added so far."""
        return self._core.events()


class _OnRejected(weakref.ref):  # type: ignore[type-arg]
    """What a core's ``feed`` hands its rejected payloads to: the accumulator's ``_rejected``,
    through a weak reference (the core is the accumulator's; a strong one would be a cycle). A
    ``weakref.ref`` itself, so that making one runs no Python frame."""

    __slots__ = ()

    def __call__(self, rejected: list[tuple[str, int, str, int, bytes, Union[int, None]]]) -> None:  # type: ignore[override]
        owner = super().__call__()
        if owner is not None:
            owner._rejected(rejected)


class _SSEAccumulator(_Accumulator[T]):
    __slots__ = ("feed",)
    _sse = True
    feed: Callable[[Bytes], None]
    """Raw SSE bytes (any chunking): frames them and adds every event, creating no Python object
    per event. With ``on_error="raise"`` a payload that is not a JSON object raises
    :class:`DecodeError` after the rest of the chunk was added; a delta that would take one text
    past ``max_event_size`` is not appended and raises :class:`EventTooLarge`, also after the
    rest of the chunk was added. (The core's own method, bound in ``__init__``: no Python frame
    per chunk.)"""

    def close(self) -> None:
        """Ends the byte stream (an unfinished SSE event is discarded, per spec)."""
        self._core.close()


class ResponseAccumulator(_SSEAccumulator[responses.Response]):
    """Builds the final :class:`rapidsse.responses.Response` of a Responses API stream.

    >>> acc = ResponseAccumulator()
    >>> acc.feed(b'data: {"type":"response.output_text.delta","item_id":"m","delta":"Hi"}\\n\\n')
    >>> acc.output_text
    'Hi'
    """

    __slots__ = ()
    _core_name = "ResponseCore"
    _snapshot_type = responses.Response

    @property
    def response(self) -> Union[responses.Response, None]:
        """A snapshot of everything so far (None before any event that implies a response)."""
        return self._snapshot()

    @property
    def output_text(self) -> str:
        """All ``output_text`` of message items, concatenated in output order."""
        return self._core.output_text()


class ChatAccumulator(_SSEAccumulator[chat.ChatCompletion]):
    """Builds the final :class:`rapidsse.chat.ChatCompletion` of a Chat Completions stream:
    choices by index with content, refusal, reasoning, tool calls merged by index, logprobs and
    finish reasons, and usage."""

    __slots__ = ()
    _core_name = "ChatCore"
    _snapshot_type = chat.ChatCompletion
    _native_snapshot = True

    @property
    def completion(self) -> Union[chat.ChatCompletion, None]:
        """A snapshot of everything so far (None before the first chunk)."""
        return self._snapshot()


class GeminiAccumulator(_SSEAccumulator[gemini.GenerateContentResponse]):
    """Builds one :class:`rapidsse.gemini.GenerateContentResponse` from a Gemini stream's chunks:
    per candidate (matched by ``index``) the parts in order, consecutive text parts of the same
    kind (thought or not) joined into one, function calls, code, code results and other parts
    kept as they came, each ``thoughtSignature`` kept with its part; the last chunk's
    ``usage_metadata``, ``model_version``, ``response_id``, ``prompt_feedback`` and each
    candidate's last ``finish_reason`` (and other candidate fields). Rules: ``docs/gemini.md``.

    >>> acc = GeminiAccumulator()
    >>> acc.feed(b'data: {"candidates":[{"content":{"parts":[{"text":"Hel"}]}}]}\r\n\r\n')
    >>> acc.feed(b'data: {"candidates":[{"content":{"parts":[{"text":"lo"}]}}]}\r\n\r\n')
    >>> acc.response.candidates[0].content.parts[0].text
    'Hello'
    """

    __slots__ = ()
    _core_name = "GeminiCore"
    _snapshot_type = gemini.GenerateContentResponse
    _native_snapshot = True

    @property
    def response(self) -> Union[gemini.GenerateContentResponse, None]:
        """A snapshot of everything so far (None before the first chunk)."""
        return self._snapshot()


class CompletionsAccumulator(_SSEAccumulator[completions.Completion]):
    """Builds the final :class:`rapidsse.completions.Completion` of a legacy Completions stream
    (``POST /v1/completions``): per choice index its text joined, its logprobs lists
    (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``) joined in order, its
    last finish reason; the last ``usage``. Rules: ``docs/completions.md``.

    >>> acc = CompletionsAccumulator()
    >>> acc.feed(b'data: {"object":"text_completion","choices":[{"index":0,"text":"Hi"}]}\n\n')
    >>> acc.completion.choices[0].text
    'Hi'
    """

    __slots__ = ()
    _core_name = "CompletionsCore"
    _snapshot_type = completions.Completion
    _native_snapshot = True

    @property
    def completion(self) -> Union[completions.Completion, None]:
        """A snapshot of everything so far (None before the first chunk)."""
        return self._snapshot()


class AnthropicAccumulator(_SSEAccumulator[anthropic.Message]):
    """Builds the final :class:`rapidsse.anthropic.Message` of an Anthropic Messages stream, as
    the anthropic SDK's ``messages.stream(...).get_final_message()`` does (its beta client for
    beta blocks), keeping the fields its models drop: blocks in order with their text, thinking
    and signature, citations appended, tool inputs parsed from their streamed JSON (partially,
    with jiter's partial mode, when the stream stops mid-JSON), unknown block types as they
    came; stop reason and details from ``message_delta``, whose usage updates the message's
    key by key. ``warnings`` records server ``error`` events, deltas without their block, tool
    input that does not parse and events before ``message_start``.

    >>> acc = AnthropicAccumulator()
    >>> acc.feed(b'event: message_start\\ndata: {"type":"message_start","message":{"id":"m","content":[]}}\\n\\n')
    >>> acc.feed(b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\\n\\n')
    >>> acc.feed(b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\\n\\n')
    >>> acc.message.content[0].text
    'Hi'
    """

    __slots__ = ()
    _core_name = "AnthropicCore"
    _snapshot_type = anthropic.Message

    @property
    def message(self) -> Union[anthropic.Message, None]:
        """A snapshot of everything so far (None before ``message_start`` or an event implying it)."""
        return self._snapshot()


class RealtimeAccumulator(_Accumulator[dict]):
    """Builds each response of a Realtime session from its server events (GA and beta names):
    status, output items with text and transcripts, function call arguments; ``response.done``
    finishes a response and is authoritative."""

    __slots__ = ()
    _core_name = "RealtimeCore"
    _snapshot_type = dict[str, realtime.Response]

    def feed(self, message: Union[Bytes, str]) -> None:
        """One server event as received (a WebSocket text message)."""
        self.add_json(message)

    @property
    def responses(self) -> dict[str, realtime.Response]:
        """Response id -> the response built so far, in order of appearance."""
        return self._snapshot() or {}


# --- iterate and accumulate at once -------------------------------------------------------------


class EventStream(Generic[T]):
    """Typed events of a stream, accumulated as they pass: iterate it for the events and read
    :attr:`response` (Responses, Gemini) / :attr:`completion` (Chat, Completions) / :attr:`message`
    (Anthropic) at any time, e.g. after the loop.

    Responses streams: each typed event is handed to the accumulator's :meth:`add` (which reads
    text events field by field and walks the others, no re-encoding). Chat streams: the
    accumulator taps the same bytes the decoder reads (a chunk's JSON is cheaper to read than its
    typed object).
    """

    def __init__(self, source: Any, protocol: str, on_error: OnError, max_event_size: Union[int, None],
                 raise_on_error_event: bool) -> None:
        self._source = source
        self._decoder = EventDecoder(protocol, on_error=on_error, max_event_size=max_event_size,  # type: ignore[arg-type]
                                     raise_on_error_event=raise_on_error_event)
        acc_type = _STREAM_ACCUMULATORS[protocol]
        self.accumulator: Any = acc_type(on_error="skip", max_event_size=max_event_size)
        self._step = self._step_adding if protocol == "responses" else self._step_tapping

    def _step_adding(self, chunk: Bytes) -> list[Any]:
        try:
            events = self._decoder.feed(chunk)
        except SSEError as exc:
            # The events completed before the error are handed out (by drain), so added too; the
            # decoder's error is the one raised.
            try:
                self._add_all(exc.events)
            except EventTooLarge:
                pass
            raise
        self._add_all(events)
        return events

    def _add_all(self, events: list[Any]) -> None:
        """Adds every event; a text past the cap raises after all were added, carrying them
        (so that they are still handed out)."""
        add = self.accumulator.add
        refused: Union[EventTooLarge, None] = None
        for event in events:
            try:
                add(event)
            except EventTooLarge as exc:
                if refused is None:
                    refused = exc
        if refused is not None:
            refused.events = events
            raise refused

    def _step_tapping(self, chunk: Bytes) -> list[Any]:
        try:
            self.accumulator.feed(chunk)
        except EventTooLarge as exc:
            # A text went past the cap: the chunk's events are still handed out first.
            exc.events = self._decoder.feed(chunk)
            raise
        return self._decoder.feed(chunk)

    def __iter__(self) -> Iterator[Any]:
        return drain(self._step, _chunks(self._source), _finished(self._decoder), self._close)

    def _close(self) -> None:
        self._decoder.close()
        self.accumulator.close()

    def __aiter__(self) -> AsyncIterator[Any]:
        return adrain(self._step, _achunks(self._source), _finished(self._decoder), self._close)

    @property
    def response(self) -> Any:
        """The Response (Responses streams) or GenerateContentResponse (Gemini streams) built so far."""
        return self.accumulator.response

    @property
    def output_text(self) -> str:
        """All output text so far (Responses streams)."""
        return self.accumulator.output_text

    @property
    def completion(self) -> Any:
        """The ChatCompletion (Chat streams) or Completion (Completions streams) built so far."""
        return self.accumulator.completion

    @property
    def message(self) -> Any:
        """The Message built so far (Anthropic streams)."""
        return self.accumulator.message

    @property
    def warnings(self) -> list[str]:
        return self.accumulator.warnings


# What accumulates each protocol's stream (all but Responses tap the bytes the decoder reads).
_STREAM_ACCUMULATORS: dict[str, type] = {
    "responses": ResponseAccumulator,
    "chat": ChatAccumulator,
    "anthropic": AnthropicAccumulator,
    "gemini": GeminiAccumulator,
    "completions": CompletionsAccumulator,
}


def stream_responses(source: Iterable[Bytes], *, on_error: OnError = "raise",
                     max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE,
                     raise_on_error_event: bool = False) -> EventStream[responses.Response]:
    """Iterate a Responses stream's typed events and accumulate them at once::

        stream = rapidsse.stream_responses(response.iter_bytes())
        for event in stream: ...
        print(stream.response.usage, stream.output_text)
    """
    return EventStream(source, "responses", on_error, max_event_size, raise_on_error_event)


def stream_chat(source: Iterable[Bytes], *, on_error: OnError = "raise",
                max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE,
                raise_on_error_event: bool = False) -> EventStream[chat.ChatCompletion]:
    """Iterate a Chat Completions stream's chunks and accumulate them at once (``stream.completion``)."""
    return EventStream(source, "chat", on_error, max_event_size, raise_on_error_event)


def stream_gemini(source: Iterable[Bytes], *, on_error: OnError = "raise",
                  max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE,
                  raise_on_error_event: bool = False) -> EventStream[gemini.GenerateContentResponse]:
    """Iterate a Gemini stream's chunks and accumulate them at once (``stream.response``)."""
    return EventStream(source, "gemini", on_error, max_event_size, raise_on_error_event)


def stream_completions(source: Iterable[Bytes], *, on_error: OnError = "raise",
                       max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE,
                       raise_on_error_event: bool = False) -> EventStream[completions.Completion]:
    """Iterate a Completions stream's chunks and accumulate them at once (``stream.completion``)."""
    return EventStream(source, "completions", on_error, max_event_size, raise_on_error_event)


def astream_responses(source: AsyncIterable[Bytes], **kwargs: Any) -> EventStream[responses.Response]:
    """Async twin of :func:`stream_responses`: ``async for event in stream``."""
    return stream_responses(source, **kwargs)  # type: ignore[arg-type]


def astream_chat(source: AsyncIterable[Bytes], **kwargs: Any) -> EventStream[chat.ChatCompletion]:
    """Async twin of :func:`stream_chat`: ``async for chunk in stream``."""
    return stream_chat(source, **kwargs)  # type: ignore[arg-type]


def stream_anthropic(source: Iterable[Bytes], *, on_error: OnError = "raise",
                     max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE,
                     raise_on_error_event: bool = False) -> EventStream[anthropic.Message]:
    """Iterate an Anthropic Messages stream's typed events and accumulate them at once
    (``stream.message``; the accumulator taps the same bytes)."""
    return EventStream(source, "anthropic", on_error, max_event_size, raise_on_error_event)


def astream_anthropic(source: AsyncIterable[Bytes], **kwargs: Any) -> EventStream[anthropic.Message]:
    """Async twin of :func:`stream_anthropic`: ``async for event in stream``."""
    return stream_anthropic(source, **kwargs)  # type: ignore[arg-type]
