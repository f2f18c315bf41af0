"""A drop-in for `httpx-sse <https://github.com/florimondmanca/httpx-sse>`_, framed by rapidsse.

Replace ``import httpx_sse`` with ``from rapidsse.integrations import httpx_sse`` (or ``from
httpx_sse import connect_sse`` with ``from rapidsse.integrations.httpx_sse import connect_sse``)
and nothing else changes::

    with httpx.Client() as client:
        with httpx_sse.connect_sse(client, "GET", "http://localhost:8000/sse") as event_source:
            for sse in event_source.iter_sse():
                print(sse.event, sse.data, sse.id, sse.retry)

The whole public API of httpx-sse 0.4 is here, with the same names, signatures and behaviour:
:func:`connect_sse` / :func:`aconnect_sse` (they set ``Accept: text/event-stream`` and
``Cache-Control: no-store``), :class:`EventSource` (``.response``, ``iter_sse()``, ``aiter_sse()``,
and the same content-type check and message), :class:`ServerSentEvent` (``event`` defaults to
``"message"``, ``data`` and ``id`` to ``""``; ``.json()`` is ``json.loads`` and raises
``json.JSONDecodeError``; the same ``repr``) and :class:`SSEError`, an ``httpx.TransportError``.

Underneath, the bytes are framed by rapidsse's decoder (Rust on the Rust backend) instead of being
decoded to text and split line by line in Python, which makes it several times faster (see
``rapidsse bench``, group "httpx-sse drop-in").

Where httpx-sse departs from the WHATWG rules for event streams, this module keeps the rules:

- **An event needs data.** httpx-sse dispatches a block without ``data:`` (``event: ping`` or a lone
  ``retry: 3000`` followed by a blank line) as an event with empty data; the rules dispatch nothing
  (the block's ``id`` and ``retry`` still take effect). Keep-alive blocks therefore yield nothing.
- **A leading byte-order mark is dropped**; httpx-sse keeps it in the first field name, so the
  stream's first line is ignored.
- **``retry`` takes ASCII digits only**: httpx-sse uses ``int()``, which also takes ``" 5"``,
  ``"+5"``, ``"-1"``, ``"1_0"`` and non-ASCII digits.
- **The stream is UTF-8**, whatever charset the ``content-type`` names (invalid bytes become
  U+FFFD, as in httpx-sse).
- **One event's data is capped** at 16 MiB by default (``iter_sse(max_event_size=None)`` lifts
  it); a larger one raises :class:`SSEError`. httpx-sse has no cap.

Also, :class:`ServerSentEvent` objects compare equal (and hash) by value, where httpx-sse's
compare by identity; and :class:`SSEError` is also a :class:`rapidsse.SSEError`, so code that
catches either catches it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Optional

import httpx

from .. import errors as _errors
from ..framing import DEFAULT_MAX_EVENT_SIZE, SSEDecoder

#: The httpx-sse release whose public API this module mirrors.
__version__ = "0.4.3"

__all__ = ["__version__", "EventSource", "connect_sse", "aconnect_sse", "ServerSentEvent", "SSEError"]


class SSEError(httpx.TransportError, _errors.SSEError):
    """A response that is not an event stream, or a stream that cannot be framed (one event over
    ``max_event_size``). An ``httpx.TransportError``, as in httpx-sse, and a ``rapidsse.SSEError``."""


class ServerSentEvent:
    """One Server-Sent Event, as httpx-sse gives it.

    >>> ServerSentEvent(data='{"a": 1}').json()
    {'a': 1}
    >>> ServerSentEvent(event="ping")
    ServerSentEvent(event='ping')
    """

    __slots__ = ("_event", "_data", "_id", "_retry")

    def __init__(
        self,
        event: Optional[str] = None,
        data: Optional[str] = None,
        id: Optional[str] = None,
        retry: Optional[int] = None,
    ) -> None:
        self._event = event or "message"
        self._data = "" if data is None else data
        self._id = "" if id is None else id
        self._retry = retry

    @property
    def event(self) -> str:
        return self._event

    @property
    def data(self) -> str:
        return self._data

    @property
    def id(self) -> str:
        return self._id

    @property
    def retry(self) -> Optional[int]:
        return self._retry

    def json(self) -> Any:
        """The data parsed with ``json.loads`` (raises ``json.JSONDecodeError``, as httpx-sse)."""
        return json.loads(self._data)

    def __repr__(self) -> str:
        pieces = [f"event={self._event!r}"]
        if self._data != "":
            pieces.append(f"data={self._data!r}")
        if self._id != "":
            pieces.append(f"id={self._id!r}")
        if self._retry is not None:
            pieces.append(f"retry={self._retry!r}")
        return f"ServerSentEvent({', '.join(pieces)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServerSentEvent):
            return NotImplemented
        return (self._event, self._data, self._id, self._retry) == (other._event, other._data, other._id, other._retry)

    def __hash__(self) -> int:
        return hash((self._event, self._data, self._id, self._retry))


def _converted(events: list[Any]) -> list[ServerSentEvent]:
    out = []
    for sse in events:
        event = ServerSentEvent.__new__(ServerSentEvent)
        event._event = sse.event
        event._data = sse.data
        event._id = sse.id
        event._retry = sse.retry
        out.append(event)
    return out


def _framing_error(exc: _errors.SSEError) -> SSEError:
    return SSEError(str(exc))


class EventSource:
    """The event stream of one ``httpx.Response``."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    def _check_content_type(self) -> None:
        content_type = self._response.headers.get("content-type", "").partition(";")[0]
        if "text/event-stream" not in content_type:
            raise SSEError(
                "Expected response header Content-Type to contain 'text/event-stream', "
                f"got {content_type!r}"
            )

    @property
    def response(self) -> httpx.Response:
        return self._response

    def iter_sse(self, *, max_event_size: Optional[int] = DEFAULT_MAX_EVENT_SIZE) -> Iterator[ServerSentEvent]:
        """The events of a response read with a sync client."""
        self._check_content_type()
        decoder = SSEDecoder(max_event_size=max_event_size)
        try:
            for chunk in self._response.iter_bytes():
                if chunk:
                    yield from _converted(decoder.feed(chunk))
        except _errors.SSEError as exc:
            yield from _converted(exc.events)
            raise _framing_error(exc) from exc

    async def aiter_sse(self, *, max_event_size: Optional[int] = DEFAULT_MAX_EVENT_SIZE) -> AsyncGenerator[ServerSentEvent, None]:
        """The events of a response read with an async client."""
        self._check_content_type()
        decoder = SSEDecoder(max_event_size=max_event_size)
        chunks = self._response.aiter_bytes()
        try:
            async for chunk in chunks:
                if chunk:
                    for event in _converted(decoder.feed(chunk)):
                        yield event
        except _errors.SSEError as exc:
            for event in _converted(exc.events):
                yield event
            raise _framing_error(exc) from exc
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]


def _headers(kwargs: dict[str, Any]) -> httpx.Headers:
    headers = httpx.Headers(kwargs.pop("headers", None))
    headers["Accept"] = "text/event-stream"
    headers["Cache-Control"] = "no-store"
    return headers


@contextmanager
def connect_sse(client: httpx.Client, method: str, url: str, **kwargs: Any) -> Iterator[EventSource]:
    """Sends a streaming request with ``client`` (keyword arguments as for ``client.stream``) and
    yields its :class:`EventSource`; the response is closed on exit."""
    headers = _headers(kwargs)
    with client.stream(method, url, headers=headers, **kwargs) as response:
        yield EventSource(response)


@asynccontextmanager
async def aconnect_sse(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> AsyncIterator[EventSource]:
    """Async twin of :func:`connect_sse`."""
    headers = _headers(kwargs)
    async with client.stream(method, url, headers=headers, **kwargs) as response:
        yield EventSource(response)
