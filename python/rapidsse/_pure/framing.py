"""Pure-Python SSE framer: the twin of ``rust/src/framing.rs``, rule for rule.

Lines are found with C-level ``bytes.split``/``re.split`` over the new chunk only; an
unterminated line is kept as a list of pieces and joined once, so the cost stays linear
whatever the chunking.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ..errors import EventTooLarge, SSEError

_BOM = b"\xef\xbb\xbf"
_SPLIT_ANY_EOL = re.compile(rb"(\r\n|\r|\n)").split
_POISONED = "the decoder stopped at an oversized event; call reset() to continue with a new stream"

# A raw event: (event name, data bytes, id, retry, index, offset)
RawEvent = tuple[str, bytes, str, "int | None", int, int]


def as_bytes(data: Any) -> bytes:
    """A chunk as bytes: bytes, bytearray or any bytes-like object (as the Rust binding takes
    them); a str or anything else raises TypeError."""
    if type(data) is bytes:
        return data
    if isinstance(data, str):
        raise TypeError("expected bytes, bytearray or memoryview, got str (encode it as UTF-8 first)")
    # Through a memoryview: only a bytes-like object (``bytes(5)`` would make five NUL bytes).
    return bytes(memoryview(data))


class Framer:
    """Push-style SSE framer producing raw events (see :data:`RawEvent`)."""

    __slots__ = (
        "max_event_size",
        "_bom",
        "_swallow_lf",
        "_line",
        "_line_len",
        "_line_offset",
        "_consumed",
        "_data",
        "_data_len",
        "_event_type",
        "_id_buffer",
        "_block_offset",
        "_block_retry",
        "_last_id",
        "last_event_id",
        "retry",
        "_dispatched",
        "_poisoned",
    )

    def __init__(self, max_event_size: int | None) -> None:
        if max_event_size is not None and max_event_size < 0:
            raise ValueError("max_event_size must be a non-negative int or None")
        self.max_event_size = max_event_size
        self.last_event_id = ""
        self.retry: int | None = None
        self._last_id = b""
        self._id_buffer = b""
        self._start_stream()

    def _start_stream(self) -> None:
        self._bom = 0
        self._swallow_lf = False
        self._line: list[bytes] = []
        self._line_len = 0
        self._line_offset = 0
        self._consumed = 0
        self._dispatched = 0
        self._poisoned = False
        self._id_buffer = self._last_id
        self._clear_block()

    def _clear_block(self) -> None:
        self._data: list[bytes] = []
        self._data_len = -1  # -1: no data line yet; else len(b"\n".join(self._data))
        self._event_type = b""
        self._block_offset: int | None = None
        self._block_retry: int | None = None

    def close(self) -> None:
        """Ends the stream; an unfinished event is discarded. Ready for a new stream after."""
        self._start_stream()

    reset = close

    def _too_large(self, at: int, in_line: bool) -> EventTooLarge:
        what = "a line without line end" if in_line else "an event's data"
        limit = self.max_event_size
        assert limit is not None
        return EventTooLarge(
            f"{what} exceeds max_event_size={limit} bytes "
            f"(at byte {at} of the stream, after {self._dispatched} events)",
            limit=limit,
            offset=at,
        )

    def feed(self, chunk: Any, out: list[Any], build: Callable[..., Any]) -> None:
        """Frames ``chunk``; appends ``build(event, data, id, retry, index, offset)`` to ``out``
        for every completed event. Raises :class:`EventTooLarge` (``out`` keeps what came before)."""
        if self._poisoned:
            raise SSEError(_POISONED)
        if type(chunk) is not bytes:
            chunk = as_bytes(chunk)
        total = len(chunk)
        chunk_start = self._consumed
        self._consumed = chunk_start + total
        if self._bom < 3:
            matched = self._bom
            i = 0
            while matched < 3 and i < total:
                if chunk[i] == _BOM[matched]:
                    matched += 1
                    i += 1
                else:
                    self._line.append(_BOM[:matched])
                    self._line_len += matched
                    matched = 4
            self._bom = matched
            if matched < 3:
                return
            chunk = chunk[i:]
        if self._swallow_lf and chunk:
            self._swallow_lf = False
            if chunk[0] == 10:
                chunk = chunk[1:]
        pos = chunk_start + (total - len(chunk))
        try:
            if b"\r" in chunk:
                parts = _SPLIT_ANY_EOL(chunk)
                lines = parts[0::2]
                seps = parts[1::2]
                if seps and seps[-1] == b"\r" and len(lines[-1]) == 0:
                    self._swallow_lf = True
            else:
                lines = chunk.split(b"\n")
                seps = None
            rest = lines.pop()
            if lines:
                first = lines[0]
                if self._line:
                    line_offset = self._line_offset
                    self._line.append(first)
                    lines[0] = b"".join(self._line)
                    self._line = []
                    self._line_len = 0
                else:
                    line_offset = pos
                pos += len(first)
                cap = self.max_event_size
                for k, line in enumerate(lines):
                    if k:
                        line_offset = pos
                        pos += len(line)
                    pos += 1 if seps is None else len(seps[k])
                    # The two lines of nearly every event, inline (same rules as _line_ended).
                    if line[:6] == b"data: " and (cap is None or len(line) <= cap):
                        value = line[6:]
                        new_len = self._data_len + 1 + len(value)
                        if cap is not None and new_len > cap:
                            raise self._too_large(line_offset + len(line), False)
                        if self._block_offset is None:
                            self._block_offset = line_offset
                        self._data.append(value)
                        self._data_len = new_len
                    elif not line:
                        self._dispatch(out, build)
                    else:
                        self._line_ended(line, line_offset, out, build)
            if rest:
                if not self._line:
                    self._line_offset = pos
                self._line_len += len(rest)
                if self.max_event_size is not None and self._line_len > self.max_event_size:
                    raise self._too_large(chunk_start + total, True)
                self._line.append(rest)
        except EventTooLarge:
            self._poisoned = True
            self._line = []
            self._line_len = 0
            self._clear_block()
            raise

    def _line_ended(self, line: bytes, offset: int, out: list[Any], build: Callable[..., Any]) -> None:
        if not line:
            self._dispatch(out, build)
            return
        cap = self.max_event_size
        if cap is not None and len(line) > cap:
            raise self._too_large(offset + len(line), True)
        if line[0] == 58:  # ':' comment
            return
        if self._block_offset is None:
            self._block_offset = offset
        colon = line.find(b":")
        if colon < 0:
            name = line
            value = b""
        else:
            name = line[:colon]
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
        if name == b"data":
            new_len = self._data_len + 1 + len(value)
            if cap is not None and new_len > cap:
                raise self._too_large(offset + len(line), False)
            self._data.append(value)
            self._data_len = new_len
        elif name == b"event":
            self._event_type = value
        elif name == b"id":
            if b"\0" not in value:
                self._id_buffer = value
        elif name == b"retry":
            if value.isdigit():  # ASCII digits only, non-empty
                self.retry = self._block_retry = int(value)

    def _dispatch(self, out: list[Any], build: Callable[..., Any]) -> None:
        if self._id_buffer != self._last_id:
            self._last_id = self._id_buffer
            self.last_event_id = self._id_buffer.decode("utf-8", "replace")
        if self._data_len >= 0:
            data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
            event = self._event_type.decode("utf-8", "replace") if self._event_type else "message"
            out.append(
                build(
                    event,
                    data,
                    self.last_event_id,
                    self._block_retry,
                    self._dispatched,
                    self._block_offset if self._block_offset is not None else self._consumed,
                )
            )
            self._dispatched += 1
        self._clear_block()
