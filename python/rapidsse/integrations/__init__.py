"""Glue between rapidsse and the HTTP clients and SDKs people already use.

Each submodule imports its third-party package only when it is imported itself:

- :mod:`rapidsse.integrations.httpx`: ``connect_sse`` / ``aconnect_sse`` in the spirit of
  httpx-sse, yielding an :class:`~rapidsse.integrations.httpx.EventSource`;
- :mod:`rapidsse.integrations.httpx_sse`: a drop-in replacement for the httpx-sse package (its
  whole API; ``from rapidsse.integrations import httpx_sse``);
- :mod:`rapidsse.integrations.aiohttp`: ``aiter_sse`` / ``aiter_events`` over an
  ``aiohttp.ClientResponse``;
- :mod:`rapidsse.integrations.openai`: parse the raw body of an openai SDK streaming response, and
  convert rapidsse's final objects to the SDK's pydantic models;
- :mod:`rapidsse.integrations.anthropic`: the same for the anthropic SDK (Messages streams).

(Inside this package the submodule names match the packages they wrap; they import those packages
absolutely, so ``import httpx`` there is the real httpx.)

This module holds what they share: :class:`SSEContentTypeError`, :func:`to_builtins`, and how the
two httpx modules open a stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import msgspec

from .._schema import UnknownVariant
from .._wire import extras
from ..errors import SSEError

__all__ = ["SSEContentTypeError", "expect_event_stream", "protocol_for_path", "to_builtins"]

EVENT_STREAM = "text/event-stream"


class SSEContentTypeError(SSEError):
    """The response is not an event stream (its ``content-type`` is not ``text/event-stream``).

    Typically an error reply (``application/json`` with a 4xx/5xx status). ``content_type`` is the
    header as received (``""`` when absent), ``status_code`` the HTTP status and ``response`` the
    client's response object, to read the body from.
    """

    def __init__(self, content_type: str, status_code: int, response: Any = None) -> None:
        self.content_type = content_type
        self.status_code = status_code
        self.response = response
        super().__init__(
            f"expected content-type {EVENT_STREAM!r}, got {content_type or 'none'!r} (HTTP {status_code})"
        )


def expect_event_stream(content_type: str | None, status_code: int, response: Any = None) -> None:
    """Raises :class:`SSEContentTypeError` unless ``content_type``'s media type is ``text/event-stream``."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != EVENT_STREAM:
        raise SSEContentTypeError(content_type or "", status_code, response)


S = TypeVar("S")


@contextmanager
def connect(client: Any, method: str, url: Any, kwargs: dict[str, Any], headers: Callable[[Any], Any],
            source: Callable[[Any], S]) -> Iterator[S]:
    """``client.stream(method, url, **kwargs)`` with its headers given by ``headers(kwargs["headers"])``,
    yielding ``source(response)``; the response is closed on exit (the httpx modules' ``connect_sse``)."""
    merged = headers(kwargs.pop("headers", None))
    with client.stream(method, url, headers=merged, **kwargs) as response:
        yield source(response)


@asynccontextmanager
async def aconnect(client: Any, method: str, url: Any, kwargs: dict[str, Any], headers: Callable[[Any], Any],
                   source: Callable[[Any], S]) -> AsyncIterator[S]:
    """Async twin of :func:`connect` (the httpx modules' ``aconnect_sse``)."""
    merged = headers(kwargs.pop("headers", None))
    async with client.stream(method, url, headers=merged, **kwargs) as response:
        yield source(response)


def to_model(model: Any, obj: Any, strict: bool) -> Any:
    """A rapidsse Struct as the pydantic ``model`` of an SDK: :func:`to_builtins` validated with
    ``model_validate``; a validation failure falls back to ``model_construct`` unless ``strict``."""
    import pydantic  # the SDKs' dependency, not this package's

    data = to_builtins(obj)
    if strict:
        return model.model_validate(data)
    try:
        return model.model_validate(data)
    except pydantic.ValidationError:
        return model.model_construct(**data)


def protocol_for_path(path: str, default: Any = "responses") -> Any:
    """``"chat"`` for a Chat Completions endpoint (``.../chat/completions``), ``"completions"``
    for the legacy one (``.../completions``), ``"anthropic"`` for Anthropic's ``.../messages``,
    ``"gemini"`` for ``...:streamGenerateContent`` (and ``...:generateContent``), ``"responses"``
    for ``.../responses``; else ``default`` (``"responses"``; the gateway passes ``None``, to
    leave other paths untapped)."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/completions"):
        return "completions"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith((":streamGenerateContent", ":generateContent")):
        return "gemini"
    if path.endswith("/responses"):
        return "responses"
    return default


def to_builtins(obj: Any) -> Any:
    """A rapidsse Struct as the API itself would write it in JSON: builtin types, every field.

    Unlike ``msgspec.to_builtins`` (which honours the schemas' ``omit_defaults`` and so drops e.g.
    ``"index": 0`` or ``"annotations": []``), every field is written, defaults included, and nested
    objects of unknown types (:class:`rapidsse._schema.UnknownVariant`) are written back as the
    original objects, and the members the schemas do not know (:func:`rapidsse.extras`) are
    written too (pydantic models such as the openai SDK's keep them in ``model_extra``). This is
    what non-Python consumers and the openai SDK's models expect.
    """
    if isinstance(obj, UnknownVariant):
        return obj.data
    if isinstance(obj, msgspec.Struct):
        config = obj.__struct_config__
        out: dict[str, Any] = {}
        if config.tag_field is not None:
            out[config.tag_field] = config.tag
        for field in msgspec.structs.fields(obj):
            out[field.encode_name] = to_builtins(getattr(obj, field.name))
        out.update(extras(obj))  # the members the schema does not know, as received
        return out
    if isinstance(obj, dict):
        return {key: to_builtins(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_builtins(value) for value in obj]
    return msgspec.to_builtins(obj)
