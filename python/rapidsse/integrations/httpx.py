"""httpx helpers in the spirit of httpx-sse, with rapidsse's parser underneath.

::

    from rapidsse.integrations.httpx import connect_sse

    with httpx.Client() as client:
        with connect_sse(client, "POST", url, json={..., "stream": True}) as source:
            for event in source.iter_events():       # typed Responses events
                ...

    async with httpx.AsyncClient() as client:
        async with aconnect_sse(client, "POST", url, json=body) as source:
            stream = source.astream()                # iterate and accumulate at once
            async for event in stream: ...
            print(stream.response.usage)

``connect_sse`` / ``aconnect_sse`` send ``Accept: text/event-stream`` and ``Cache-Control:
no-store`` (unless given other values). Reading events checks the response's content type first and
raises :class:`~rapidsse.integrations.SSEContentTypeError` when it is not an event stream (check
``source.response.status_code`` first to handle error replies your own way). The protocol is taken
from the request path (``.../chat/completions``: Chat, ``.../completions``: Completions,
``.../messages``: Anthropic, ``...:streamGenerateContent``: Gemini, else Responses) unless given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

import httpx

from ..accumulate import EventStream, stream_anthropic, stream_chat, stream_completions, stream_gemini, stream_responses
from ..decoding import aiter_events, iter_events
from ..framing import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, aiter_sse, iter_sse
from . import SSEContentTypeError, aconnect, connect, expect_event_stream, protocol_for_path

__all__ = ["EventSource", "SSEContentTypeError", "aconnect_sse", "connect_sse"]

_RESPONSE_INTERFACE = ("headers", "status_code", "request", "iter_bytes")


def event_source_of(raw_response: Any, sdk: str) -> EventSource:
    """The :class:`EventSource` of an SDK's raw response (what ``with_streaming_response`` or
    ``with_raw_response`` gives; its ``http_response``) or of an HTTP response itself; ``sdk`` names
    the SDK in the ``TypeError`` for anything else. Duck-typed: depending on its version an SDK's
    transport is httpx or its successor httpx2, whose responses have the same interface."""
    http_response = getattr(raw_response, "http_response", raw_response)
    if not all(hasattr(http_response, name) for name in _RESPONSE_INTERFACE):
        raise TypeError(
            f"expected an {sdk} raw response (with_streaming_response / with_raw_response) or an "
            f"httpx.Response, not {type(raw_response).__name__}"
        )
    return EventSource(http_response)


class EventSource:
    """The event stream of one ``httpx.Response`` (sync or async; use the matching methods). Any
    response with the same interface works too (``headers``, ``status_code``, ``request.url``,
    ``iter_bytes`` / ``aiter_bytes``), e.g. an ``httpx2.Response``.

    ``iter_sse`` / ``aiter_sse`` give :class:`~rapidsse.ServerSentEvent` objects, ``iter_events`` /
    ``aiter_events`` typed events, ``stream`` / ``astream`` an :class:`~rapidsse.EventStream` that
    also accumulates the final response. Keyword arguments go to the rapidsse function underneath
    (``on_error``, ``max_event_size``, ``raise_on_error_event``).
    """

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    def _check(self) -> None:
        expect_event_stream(self.response.headers.get("content-type"), self.response.status_code, self.response)

    def _protocol(self, protocol: str | None) -> str:
        return protocol if protocol is not None else protocol_for_path(self.response.request.url.path)

    def iter_sse(self, *, max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE) -> Iterator[ServerSentEvent]:
        """The raw Server-Sent Events."""
        self._check()
        return iter_sse(self.response.iter_bytes(), max_event_size=max_event_size)

    def iter_events(self, protocol: str | None = None, **kwargs: Any) -> Iterator[Any]:
        """The typed events (``protocol``: ``"responses"``, ``"chat"``, ``"anthropic"``, ``"gemini"``
        or ``"completions"``; default from the URL, see :func:`protocol_for_path`)."""
        self._check()
        return iter_events(self.response.iter_bytes(), self._protocol(protocol), **kwargs)  # type: ignore[arg-type]

    def stream(self, protocol: str | None = None, **kwargs: Any) -> EventStream[Any]:
        """Typed events accumulated as they pass (``.response`` / ``.completion`` / ``.message``
        after the loop)."""
        self._check()
        return _STREAMS.get(self._protocol(protocol), stream_responses)(self.response.iter_bytes(), **kwargs)

    def aiter_sse(self, *, max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE) -> AsyncIterator[ServerSentEvent]:
        """Async twin of :meth:`iter_sse`."""
        self._check()
        return aiter_sse(self.response.aiter_bytes(), max_event_size=max_event_size)

    def aiter_events(self, protocol: str | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        """Async twin of :meth:`iter_events`."""
        self._check()
        return aiter_events(self.response.aiter_bytes(), self._protocol(protocol), **kwargs)  # type: ignore[arg-type]

    def astream(self, protocol: str | None = None, **kwargs: Any) -> EventStream[Any]:
        """Async twin of :meth:`stream` (``async for event in source.astream()``)."""
        self._check()
        # (an EventStream iterates sync and async sources alike: astream_chat is stream_chat)
        start = _STREAMS.get(self._protocol(protocol), stream_responses)
        return start(self.response.aiter_bytes(), **kwargs)  # type: ignore[arg-type]


_STREAMS = {"chat": stream_chat, "anthropic": stream_anthropic, "gemini": stream_gemini, "completions": stream_completions}


def _sse_headers(headers: Any) -> httpx.Headers:
    merged = httpx.Headers(headers)
    merged.setdefault("Accept", "text/event-stream")
    merged.setdefault("Cache-Control", "no-store")
    return merged


def connect_sse(
    client: httpx.Client, method: str, url: str | httpx.URL, **kwargs: Any
) -> AbstractContextManager[EventSource]:
    """Sends a streaming request with ``client`` (keyword arguments as for ``client.stream``) and
    yields its :class:`EventSource`; the response is closed on exit."""
    return connect(client, method, url, kwargs, _sse_headers, EventSource)


def aconnect_sse(
    client: httpx.AsyncClient, method: str, url: str | httpx.URL, **kwargs: Any
) -> AbstractAsyncContextManager[EventSource]:
    """Async twin of :func:`connect_sse`."""
    return aconnect(client, method, url, kwargs, _sse_headers, EventSource)
