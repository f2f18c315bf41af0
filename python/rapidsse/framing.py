"""Server-Sent Events framing: bytes in, :class:`ServerSentEvent` out.

Exactly the WHATWG "parsing an event stream" rules, at any chunking, in linear time, with a
per-event size cap. :class:`SSEDecoder` is push-style; :func:`iter_sse` and :func:`aiter_sse`
wrap it around (async) iterables of bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, Callable, Union

import msgspec

from ._backend import core, native
from ._pure.framing import Framer
from ._pure.guard import Exclusive
from .errors import DecodeError, SSEError

__all__ = ["DEFAULT_MAX_EVENT_SIZE", "ServerSentEvent", "SSEDecoder", "iter_sse", "aiter_sse"]

DEFAULT_MAX_EVENT_SIZE = 16 * 1024 * 1024
"""The default cap on one event's data (and on one line): 16 MiB."""

Bytes = Union[bytes, bytearray, memoryview]


class ServerSentEvent(msgspec.Struct, frozen=True, gc=False):
    """One dispatched Server-Sent Event.

    ``event`` is the type (``"message"`` when the block set none), ``data`` the data lines joined
    by ``\\n``, ``id`` the stream's last event id when it was dispatched (sticky, as in browsers)
    and ``retry`` the reconnection time set in this event's block, if any.

    >>> ServerSentEvent(data='{"a": 1}').json()
    {'a': 1}
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: Union[int, None] = None

    def json(self) -> Any:
        """The data parsed as JSON; raises :class:`rapidsse.DecodeError` when it is not JSON."""
        try:
            return msgspec.json.decode(self.data)
        except (msgspec.DecodeError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise DecodeError(
                f"event data is not valid JSON: {reason}",
                index=-1,
                event=self.event,
                offset=-1,
                raw=self.data.encode("utf-8", "surrogatepass"),
            ) from None


def _build_event(event: str, data: bytes, id: str, retry: Any, index: int, offset: int) -> ServerSentEvent:
    return ServerSentEvent(event, data.decode("utf-8", "replace"), id, retry)


class _PySSEDecoder:
    """Push-style SSE decoder (pure-Python backend)."""

    __slots__ = ("_framer", "_busy")

    def __init__(self, max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._framer = Framer(max_event_size)
        self._busy = Exclusive()

    def feed(self, data: Bytes) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        with self._busy:
            try:
                self._framer.feed(data, out, _build_event)
            except SSEError as exc:
                exc.events = out
                raise
        return out

    def close(self) -> list[ServerSentEvent]:
        self._framer.close()
        return []

    def reset(self) -> None:
        self._framer.reset()

    @property
    def last_event_id(self) -> str:
        return self._framer.last_event_id

    @property
    def retry(self) -> Union[int, None]:
        return self._framer.retry

    @property
    def max_event_size(self) -> Union[int, None]:
        return self._framer.max_event_size


if native is not None:
    SSEDecoder: Any = native.SSEDecoder
else:
    SSEDecoder = _PySSEDecoder
SSEDecoder.__doc__ = """Push-style SSE decoder.

``SSEDecoder(max_event_size=16 MiB)``: ``feed(data)`` takes the next chunk (``bytes``,
``bytearray`` or ``memoryview``) and returns every :class:`ServerSentEvent` it completed, at once;
``close()`` ends the stream (an unfinished event is discarded, per spec) and readies the decoder
for a new one; ``last_event_id`` is the id committed by the latest dispatch and ``retry`` the
latest valid reconnection time (``None`` until one is sent).

When one event's data, or one line, exceeds ``max_event_size`` (``None``: no cap), ``feed``
raises :class:`rapidsse.EventTooLarge`; the events completed before it are in its ``events``
attribute, and the decoder refuses input until ``reset()``.
""" if native is None else SSEDecoder.__doc__


def drain(feed: Callable[[Any], list[Any]], chunks: Iterable[Any],
          finished: Union[Callable[[], bool], None] = None,
          at_end: Union[Callable[[], Any], None] = None) -> Iterator[Any]:
    """What ``feed`` makes of each chunk, event by event, until ``finished()`` says so (``None``:
    to the end of ``chunks``), then ``at_end()``. When ``feed`` raises an :class:`SSEError`, the
    events it had completed (``err.events``) come first, then the error: nothing is lost. After
    an error, or once finished, no further chunk is read. The one loop behind every iterator of
    the package: on the Rust backend a native iterator (no Python frame per event), else
    :func:`_drain`."""
    compiled = core()
    if compiled is not None:
        return compiled.Drain(feed, chunks, finished, at_end)  # type: ignore[no-any-return]
    return _drain(feed, chunks, finished, at_end)


def _drain(feed: Callable[[Any], list[Any]], chunks: Iterable[Any],
           finished: Union[Callable[[], bool], None] = None,
           at_end: Union[Callable[[], Any], None] = None) -> Iterator[Any]:
    """:func:`drain` as a generator (the pure-Python backend)."""
    for chunk in chunks:
        try:
            events = feed(chunk)
        except SSEError as exc:
            yield from exc.events
            raise
        yield from events
        if finished is not None and finished():
            break
    if at_end is not None:
        at_end()


def adrain(feed: Callable[[Any], list[Any]], chunks: AsyncIterable[Any],
           finished: Union[Callable[[], bool], None] = None,
           at_end: Union[Callable[[], Any], None] = None) -> AsyncIterator[Any]:
    """Async twin of :func:`drain` over an async iterable of chunks: ``async for`` takes the
    events of the chunk read last without awaiting anything (only reading the next chunk awaits).
    Every async iterator of the package returns it directly, never wrapped in another generator.
    Closed at an event (``aclose()``), it closes the source (``chunks.aclose()``, if any). On the
    Rust backend a native object that is its own awaitable (no Python frame, and on CPython
    3.10/3.11 no ``StopIteration``, per event: docs/internals.md), else :func:`_adrain`."""
    compiled = core()
    if compiled is not None:
        return compiled.AsyncDrain(feed, chunks, finished, at_end)  # type: ignore[no-any-return]
    return _adrain(feed, chunks, finished, at_end)


async def _adrain(feed: Callable[[Any], list[Any]], chunks: AsyncIterable[Any],
                  finished: Union[Callable[[], bool], None] = None,
                  at_end: Union[Callable[[], Any], None] = None) -> AsyncIterator[Any]:
    """:func:`adrain` as one async generator (the pure-Python backend): each event resumes one
    frame and raises one ``StopIteration``; wrapping it in another generator would double that."""
    source = chunks.__aiter__()
    try:
        async for chunk in source:
            try:
                events = feed(chunk)
            except SSEError as exc:
                for event in exc.events:
                    yield event
                raise
            for event in events:
                yield event
            if finished is not None and finished():
                break
    except GeneratorExit:
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
        raise
    if at_end is not None:
        at_end()


def iter_sse(
    source: Iterable[Bytes], *, max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE
) -> Iterator[ServerSentEvent]:
    """Yields the events of an iterable of byte chunks (e.g. ``response.iter_bytes()``)."""
    decoder = SSEDecoder(max_event_size)
    return drain(decoder.feed, source, at_end=decoder.close)


def aiter_sse(
    source: AsyncIterable[Bytes], *, max_event_size: Union[int, None] = DEFAULT_MAX_EVENT_SIZE
) -> AsyncIterator[ServerSentEvent]:
    """Yields the events of an async iterable of byte chunks (e.g. ``response.aiter_bytes()``);
    ``aclose()`` closes the source."""
    decoder = SSEDecoder(max_event_size)
    return adrain(decoder.feed, source, at_end=decoder.close)
