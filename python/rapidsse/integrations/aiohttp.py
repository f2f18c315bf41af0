"""aiohttp helpers: rapidsse's parser over an ``aiohttp.ClientResponse``.

::

    from rapidsse.integrations.aiohttp import aiter_events

    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={..., "stream": True}) as response:
            async for event in aiter_events(response):
                ...

Both functions read ``response.content.iter_any()`` (each chunk as it arrives, no line splitting by
aiohttp), check the content type first (:class:`~rapidsse.integrations.SSEContentTypeError`) and take
the protocol from the request path (see :func:`rapidsse.integrations.protocol_for_path`) unless given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from ..decoding import aiter_events as _aiter_events
from ..framing import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent
from ..framing import aiter_sse as _aiter_sse
from . import SSEContentTypeError, expect_event_stream, protocol_for_path

__all__ = ["SSEContentTypeError", "aiter_events", "aiter_sse"]


def _check(response: aiohttp.ClientResponse) -> None:
    expect_event_stream(response.headers.get("Content-Type"), response.status, response)


def aiter_sse(
    response: aiohttp.ClientResponse, *, max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE
) -> AsyncIterator[ServerSentEvent]:
    """The Server-Sent Events of ``response`` (the content type is checked at once)."""
    _check(response)
    return _aiter_sse(response.content.iter_any(), max_event_size=max_event_size)


def aiter_events(
    response: aiohttp.ClientResponse, protocol: str | None = None, **kwargs: Any
) -> AsyncIterator[Any]:
    """The typed events of ``response`` (``protocol`` as for :func:`rapidsse.aiter_events`; by
    default from the request path, see :func:`rapidsse.integrations.protocol_for_path`; keyword
    arguments as for :func:`rapidsse.aiter_events`)."""
    _check(response)
    if protocol is None:
        protocol = protocol_for_path(response.url.path)
    return _aiter_events(response.content.iter_any(), protocol, **kwargs)  # type: ignore[arg-type]
