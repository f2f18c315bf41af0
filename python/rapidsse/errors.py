"""The exceptions rapidsse raises. Every one of them is an :class:`SSEError`."""

from __future__ import annotations

from typing import Any

__all__ = ["SSEError", "EventTooLarge", "DecodeError", "StreamError"]


class SSEError(Exception):
    """Base class of every error rapidsse raises.

    ``events`` holds what the failing call had already completed (e.g. the events of a chunk that
    came before the bad one), so that nothing received is lost when an error interrupts a chunk.
    """

    events: list[Any]

    def __init__(self, message: str, *, events: list[Any] | None = None) -> None:
        super().__init__(message)
        self.events = events if events is not None else []


class EventTooLarge(SSEError):
    """One event's data, one line, one payload or one accumulated text exceeded ``max_event_size``.

    ``limit`` is the cap in bytes and ``offset`` how many bytes of the stream had been read (for an
    accumulated text: the offset of the event whose delta was refused; -1 where there is no byte
    stream). After a framing error the decoder refuses further input until ``reset()`` (or
    ``close()``) starts a new stream; an accumulator that refused a delta goes on.
    """

    limit: int
    offset: int

    def __init__(self, message: str, *, limit: int, offset: int, events: list[Any] | None = None) -> None:
        super().__init__(message, events=events)
        self.limit = limit
        self.offset = offset


class DecodeError(SSEError):
    """An event's payload is not valid JSON or does not fit its schema.

    ``index`` is the event's position among the stream's events (0-based), ``event`` its SSE event
    name, ``offset`` the byte offset of the event in the stream, ``raw`` the payload and ``excerpt``
    a short quote of it for the message.
    """

    index: int
    event: str
    offset: int
    raw: bytes

    def __init__(
        self,
        reason: str,
        *,
        index: int,
        event: str,
        offset: int,
        raw: bytes,
        events: list[Any] | None = None,
    ) -> None:
        self.reason = reason
        self.index = index
        self.event = event
        self.offset = offset
        self.raw = raw
        super().__init__(
            f"{reason} (event #{index} {event!r} at byte {offset}: {self.excerpt})", events=events
        )

    @property
    def excerpt(self) -> str:
        text = self.raw.decode("utf-8", "replace")
        return repr(text if len(text) <= 80 else text[:77] + "...")


class StreamError(SSEError):
    """The server sent an error event (raised only with ``raise_on_error_event=True``).

    ``event`` is the typed error event; ``code`` and ``error_message`` are taken from it when present.
    """

    def __init__(self, event: Any, *, events: list[Any] | None = None) -> None:
        self.event = event
        err = getattr(event, "error", None)
        source = err if err is not None else event
        self.code = _field(source, "code")
        self.error_message = _field(source, "message")
        super().__init__(f"the server sent an error: {self.code}: {self.error_message}", events=events)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
