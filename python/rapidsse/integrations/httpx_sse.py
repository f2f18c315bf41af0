"""A drop-in replacement for `httpx-sse <https://github.com/florimondmanca/httpx-sse>`_ (0.4.x),
framed by rapidsse.

Replace ``import httpx_sse`` with ``from rapidsse.integrations import httpx_sse`` (or
``from httpx_sse import connect_sse`` with ``from rapidsse.integrations.httpx_sse import
connect_sse``) and nothing else changes::

    import httpx
    from rapidsse.integrations.httpx_sse import connect_sse

    with httpx.Client() as client:
        with connect_sse(client, "GET", "http://localhost:8000/sse") as event_source:
            for sse in event_source.iter_sse():
                print(sse.event, sse.data, sse.id, sse.retry)

The whole public API of httpx-sse is here and behaves as it does there: :func:`connect_sse` /
:func:`aconnect_sse` (``Accept: text/event-stream`` and ``Cache-Control: no-store`` set on the
request), :class:`EventSource` (``.response``; ``iter_sse()`` / ``aiter_sse()`` are generators that
check the content type when iteration starts and raise :class:`SSEError` with httpx-sse's message
when it does not contain ``text/event-stream``), :class:`ServerSentEvent` (the same constructor
defaults, read-only ``event`` / ``data`` / ``id`` / ``retry``, the same ``repr``, equality by
identity as in httpx-sse, and ``.json()`` with :func:`json.loads`'s results and its
:class:`json.JSONDecodeError`) and :class:`SSEError` (an :class:`httpx.TransportError`).
The events are framed by rapidsse's :class:`~rapidsse.SSEDecoder` (Rust on the Rust backend).

The exceptions are also rapidsse's own: :class:`SSEError` is a :class:`rapidsse.SSEError` too;
the content-type error is an :class:`SSEContentTypeError` (also
:class:`rapidsse.integrations.SSEContentTypeError`, with ``content_type``, ``status_code`` and
``response``); ``.json()`` raises a :class:`JSONDecodeError` that is both
:class:`json.JSONDecodeError` and :class:`rapidsse.DecodeError`; an event over the size cap raises
:class:`EventTooLarge` (:class:`SSEError` and :class:`rapidsse.EventTooLarge`).

Where httpx-sse departs from the WHATWG rules for parsing an event stream, this module keeps the
rules (as browsers' ``EventSource`` do). Only streams that hit one of these cases are read
differently (none of the recorded LLM streams of rapidsse's corpus does):

- **A block without data lines is not dispatched.** httpx-sse yields an event for a block that sets
  only ``retry:``, ``id:`` or ``event:`` (``ServerSentEvent(event='message', retry=5000)``), and,
  once any ``id:`` has been seen, an empty event for every further blank line. Here those blocks
  update the stream's state and yield nothing: read the latest reconnection time and last event id
  from :attr:`EventSource.retry` and :attr:`EventSource.last_event_id` (rapidsse additions). An
  event whose block also had data carries its ``retry`` as in httpx-sse.
- **A UTF-8 byte order mark at the start of the stream is skipped.** httpx-sse keeps it in the
  first line, whose field name becomes ``"\\ufeffdata"`` and so is ignored: the first event is lost.
- **The stream is always UTF-8.** httpx-sse decodes it with the response's charset (the
  ``content-type`` parameter, else the client's ``default_encoding``).
- **``retry:`` takes ASCII digits only.** httpx-sse takes whatever :class:`int` parses: a sign
  (``-1``, ``+5``), more spaces, underscores (``5_000``), non-ASCII digits.

Other differences (see docs/httpx-sse.md):

- One event's data (and one line) is capped at 16 MiB by default: a bigger one raises
  :class:`EventTooLarge` after the events before it; ``iter_sse(max_event_size=None)`` lifts the
  cap (httpx-sse has none).
- The content-type check ignores case (``Text/Event-Stream`` passes; httpx-sse compares
  case-sensitively). What it accepts otherwise is the same: the media type before ``;`` must
  contain ``text/event-stream``.
- :func:`connect_sse` does not modify the ``headers`` mapping it is given (httpx-sse sets
  ``Accept`` and ``Cache-Control`` in the caller's dict), and the header values it sets replace
  any of the same name in any case.
- :class:`ServerSentEvent` is an immutable :class:`msgspec.Struct`: one cannot add attributes to an
  instance (httpx-sse's has a ``__dict__``).
- The content-type :class:`SSEError` carries the request (``exc.request``), as httpx's own
  transport errors do; httpx-sse's raises :class:`RuntimeError` there.
"""

from __future__ import annotations

import json as _json
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from itertools import starmap
from typing import Any, Optional

import httpx
import msgspec
from msgspec.structs import astuple, force_setattr

from .. import errors as _errors
from ..framing import DEFAULT_MAX_EVENT_SIZE, SSEDecoder, adrain, drain
from . import SSEContentTypeError as _RapidsseContentTypeError
from . import aconnect as _aconnect
from . import connect as _connect

__version__ = "0.4.3"
"""The httpx-sse release whose API this module reproduces."""

__all__ = [
    "__version__",
    "EventSource",
    "connect_sse",
    "aconnect_sse",
    "ServerSentEvent",
    "SSEError",
    "SSEContentTypeError",
    "EventTooLarge",
    "JSONDecodeError",
]

_EVENT_STREAM = "text/event-stream"
_decode_json = msgspec.json.Decoder().decode


class SSEError(httpx.TransportError, _errors.SSEError):
    """An error that occurred while making a request to an SSE endpoint, as httpx-sse's ``SSEError``:
    an :class:`httpx.TransportError` (so also an :class:`httpx.RequestError` and
    :class:`httpx.HTTPError`), and a :class:`rapidsse.SSEError`.

    ``SSEError(message, *, request=None)``; ``events`` holds the events completed before it (see
    :class:`rapidsse.SSEError`).
    """

    def __init__(self, message: str, *, request: httpx.Request | None = None, events: list[Any] | None = None) -> None:
        # httpx's chain (TransportError > RequestError > HTTPError) ends in rapidsse.SSEError's
        # __init__ with the message alone: `events` is set after.
        super().__init__(message, request=request)
        self.events = events if events is not None else []


class SSEContentTypeError(_RapidsseContentTypeError, SSEError):
    """The response's content type does not contain ``text/event-stream`` (raised by
    :meth:`EventSource.iter_sse` / :meth:`~EventSource.aiter_sse` when iteration starts).

    An :class:`SSEError` with httpx-sse's message, and a
    :class:`rapidsse.integrations.SSEContentTypeError`: ``content_type`` is the header as received
    (``""`` when absent), ``status_code`` the HTTP status, ``response`` the :class:`httpx.Response`
    (its body not read) and ``request`` its request.
    """

    def __init__(self, content_type: str, status_code: int, response: Any = None) -> None:
        media_type = content_type.partition(";")[0]
        SSEError.__init__(
            self,
            f"Expected response header Content-Type to contain {_EVENT_STREAM!r}, got {media_type!r}",
            request=_request_of(response),
        )
        self.content_type = content_type
        self.status_code = status_code
        self.response = response


class EventTooLarge(_errors.EventTooLarge, SSEError):
    """One event's data, or one line, exceeded ``max_event_size``: an :class:`SSEError` and a
    :class:`rapidsse.EventTooLarge` (``limit``, ``offset``; ``events`` holds the events of the
    chunk that came before it, which the iterators yield before raising)."""

    def __init__(
        self,
        message: str,
        *,
        limit: int,
        offset: int,
        request: httpx.Request | None = None,
        events: list[Any] | None = None,
    ) -> None:
        SSEError.__init__(self, message, request=request, events=events)
        self.limit = limit
        self.offset = offset


class JSONDecodeError(_json.JSONDecodeError, _errors.DecodeError):
    """:meth:`ServerSentEvent.json` found no JSON document in the data: the very
    :class:`json.JSONDecodeError` that :func:`json.loads` raises (``msg``, ``doc``, ``pos``,
    ``lineno``, ``colno`` and its message), and a :class:`rapidsse.DecodeError` (``reason`` is
    ``msg``, ``event`` the event's name, ``raw`` the data as UTF-8; ``index`` and ``offset`` are -1:
    an event does not know its place in its stream)."""

    def __init__(self, msg: str, doc: str, pos: int, *, event: str = "message") -> None:
        _json.JSONDecodeError.__init__(self, msg, doc, pos)
        self.reason = msg
        self.index = -1
        self.event = event
        self.offset = -1
        self.raw = doc.encode("utf-8", "surrogatepass")
        self.events = []


class ServerSentEvent(msgspec.Struct, frozen=True, eq=False, gc=False):
    """A server-sent event, as httpx-sse's ``ServerSentEvent``.

    ``ServerSentEvent(event=None, data=None, id=None, retry=None)``: ``event`` defaults to
    ``"message"`` (also when given ``None`` or ``""``), ``data`` and ``id`` to ``""`` (also when
    given ``None``), ``retry`` (the reconnection time in milliseconds set in this event's block) to
    ``None``. The attributes are read-only; two events are equal only when they are the same object
    (as in httpx-sse); the repr shows ``event`` and the other fields that differ from their
    defaults.

    >>> ServerSentEvent(data='{"a": 1}')
    ServerSentEvent(event='message', data='{"a": 1}')
    >>> ServerSentEvent(data='{"a": 1}').json()
    {'a': 1}
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: Optional[int] = None

    def __post_init__(self) -> None:
        if not self.event:
            force_setattr(self, "event", "message")
        if self.data is None:
            force_setattr(self, "data", "")
        if self.id is None:
            force_setattr(self, "id", "")

    def json(self) -> Any:
        """``data`` decoded as JSON, exactly as :func:`json.loads` decodes it; raises
        :class:`JSONDecodeError` (a :class:`json.JSONDecodeError`) when it is not JSON."""
        try:
            return _decode_json(self.data)
        except Exception:
            # msgspec refuses a few documents json.loads takes (NaN, 1e400, lone surrogates) and
            # never accepts one json.loads refuses: json.loads decides what is left.
            pass
        try:
            return _json.loads(self.data)
        except _json.JSONDecodeError as exc:
            raise JSONDecodeError(exc.msg, exc.doc, exc.pos, event=self.event) from None

    def __repr__(self) -> str:
        pieces = [f"event={self.event!r}"]
        if self.data != "":
            pieces.append(f"data={self.data!r}")
        if self.id != "":
            pieces.append(f"id={self.id!r}")
        if self.retry is not None:
            pieces.append(f"retry={self.retry!r}")
        return f"ServerSentEvent({', '.join(pieces)})"

    def __rich_repr__(self) -> Iterator[Any]:
        # rich would otherwise use msgspec's, which lists every field.
        yield "event", self.event
        yield "data", self.data, ""
        yield "id", self.id, ""
        yield "retry", self.retry, None


class EventSource:
    """Helper for working with an SSE response (httpx-sse's ``EventSource``).

    ``response`` is the :class:`httpx.Response` (check its status with
    ``event_source.response.raise_for_status()`` before iterating). :meth:`iter_sse` /
    :meth:`aiter_sse` decode its body into :class:`ServerSentEvent` objects; :attr:`last_event_id`
    and :attr:`retry` give the state of the stream being read.
    """

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._decoder: Any = None

    @property
    def response(self) -> httpx.Response:
        """The underlying :class:`httpx.Response`."""
        return self._response

    @property
    def last_event_id(self) -> str:
        """The last event id the stream being read has set (``""`` before any), including one set
        by a block without data, which yields no event (a rapidsse addition)."""
        return self._decoder.last_event_id if self._decoder is not None else ""

    @property
    def retry(self) -> Optional[int]:
        """The latest reconnection time (ms) the stream being read has set (``None`` before any),
        including one set by a block without data, which yields no event (a rapidsse addition)."""
        return self._decoder.retry if self._decoder is not None else None

    def _check_content_type(self) -> None:
        content_type = self._response.headers.get("content-type", "")
        if _EVENT_STREAM not in content_type.partition(";")[0].lower():
            raise SSEContentTypeError(content_type, self._response.status_code, self._response)

    def iter_sse(
        self, *, max_event_size: Optional[int] = DEFAULT_MAX_EVENT_SIZE
    ) -> Generator[ServerSentEvent, None, None]:
        """Decodes the response body and yields its :class:`ServerSentEvent` objects (a generator:
        the content type is checked when iteration starts).

        Raises :class:`SSEError` (:class:`SSEContentTypeError`) when the response is not an event
        stream and :class:`EventTooLarge` when an event's data exceeds ``max_event_size`` bytes
        (``None``: no cap); the errors of ``response.iter_bytes()`` (e.g. :class:`httpx.ReadError`)
        pass through.
        """
        self._check_content_type()
        decoder = self._decoder = SSEDecoder(max_event_size)
        try:
            # rapidsse's events, turned into this module's without a Python frame per event.
            yield from starmap(ServerSentEvent, map(astuple, drain(decoder.feed, self._response.iter_bytes())))
        except _errors.EventTooLarge as exc:
            raise _too_large(exc, self._response) from None

    def aiter_sse(
        self, *, max_event_size: Optional[int] = DEFAULT_MAX_EVENT_SIZE
    ) -> AsyncIterator[ServerSentEvent]:
        """Async twin of :meth:`iter_sse` (the content type is checked when iteration starts); the
        response's byte iterator is closed when this iterator is (``aclose()``, also when the loop
        stops early)."""
        decoder = self._decoder = SSEDecoder(max_event_size)
        response = self._response

        def feed(chunk: bytes) -> list[ServerSentEvent]:
            # A chunk's events converted at once (no Python frame per event).
            try:
                return list(starmap(ServerSentEvent, map(astuple, decoder.feed(chunk))))
            except _errors.EventTooLarge as exc:
                raise _too_large(exc, response) from None

        return adrain(feed, self._checked_body())  # type: ignore[return-value]

    async def _checked_body(self) -> AsyncGenerator[bytes, None]:
        """``response.aiter_bytes()`` once the content type is checked; closed with it."""
        self._check_content_type()
        chunks = self._response.aiter_bytes()
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]


def _too_large(exc: _errors.EventTooLarge, response: httpx.Response) -> EventTooLarge:
    """rapidsse's :class:`~rapidsse.EventTooLarge` as this module's (its events converted)."""
    return EventTooLarge(
        str(exc), limit=exc.limit, offset=exc.offset, request=_request_of(response),
        events=list(starmap(ServerSentEvent, map(astuple, exc.events))),
    )


def _request_of(response: Any) -> httpx.Request | None:
    try:
        return response.request  # type: ignore[no-any-return]
    except (AttributeError, RuntimeError):  # a Response made without a request
        return None


def _sse_headers(headers: Any) -> httpx.Headers:
    merged = httpx.Headers(headers)
    merged["Accept"] = _EVENT_STREAM
    merged["Cache-Control"] = "no-store"
    return merged


def connect_sse(
    client: httpx.Client, method: str, url: str | httpx.URL, **kwargs: Any
) -> AbstractContextManager[EventSource]:
    """Connects to an SSE endpoint: sends ``method url`` with ``client.stream`` (keyword
    arguments as for it), with ``Accept: text/event-stream`` and ``Cache-Control: no-store``, and
    yields the response's :class:`EventSource`. The response is closed on exit."""
    return _connect(client, method, url, kwargs, _sse_headers, EventSource)


def aconnect_sse(
    client: httpx.AsyncClient, method: str, url: str | httpx.URL, **kwargs: Any
) -> AbstractAsyncContextManager[EventSource]:
    """Async twin of :func:`connect_sse`."""
    return _aconnect(client, method, url, kwargs, _sse_headers, EventSource)
