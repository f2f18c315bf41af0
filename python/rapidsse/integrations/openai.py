"""The openai SDK: parse its raw streaming responses with rapidsse, convert results to its models.

Parsing: let the SDK send the request (auth, retries, base URL) and rapidsse read the body::

    from rapidsse.integrations.openai import iter_events_from_openai, to_openai_response

    with client.responses.with_streaming_response.create(model=..., input=..., stream=True) as raw:
        for event in iter_events_from_openai(raw):
            ...

``raw`` may be what ``with_streaming_response`` gives (sync or async), what ``with_raw_response``
gives, or the HTTP response itself (``httpx.Response``, or ``httpx2.Response`` in SDKs built on
httpx2); the protocol comes from the request path unless given.

Converting: :func:`to_openai_response` and :func:`to_openai_chat_completion` turn rapidsse's final
objects (e.g. ``ResponseAccumulator().response``) into ``openai.types.responses.Response`` /
``openai.types.chat.ChatCompletion``. They write every field (defaults included, unknown nested
objects as received, see :func:`rapidsse.integrations.to_builtins`) and validate with
``model_validate``. Recorded streams often do not pass the SDK's current schema (a field the SDK
made required after the recording, such as ``usage.input_tokens_details.cache_write_tokens``, or a
vendor's nulls), so by default a validation failure falls back to ``model_construct``, which is how
the SDK itself builds the objects it parses from streams: the same typed, nested models, unvalidated.
Pass ``strict=True`` to get pydantic's ``ValidationError`` instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import pydantic
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from .. import chat, responses
from . import to_model
from .httpx import event_source_of

__all__ = [
    "aiter_events_from_openai",
    "iter_events_from_openai",
    "to_openai_chat_completion",
    "to_openai_response",
]

Model = TypeVar("Model", bound=pydantic.BaseModel)


def iter_events_from_openai(raw_response: Any, protocol: str | None = None, **kwargs: Any) -> Iterator[Any]:
    """The typed events of an openai SDK raw streaming response (sync client). Keyword arguments
    as for :func:`rapidsse.iter_events`; raises ``SSEContentTypeError`` for a non-stream reply."""
    return event_source_of(raw_response, "openai").iter_events(protocol, **kwargs)


def aiter_events_from_openai(raw_response: Any, protocol: str | None = None, **kwargs: Any) -> AsyncIterator[Any]:
    """Async twin of :func:`iter_events_from_openai` (``AsyncOpenAI`` client)."""
    return event_source_of(raw_response, "openai").aiter_events(protocol, **kwargs)


def _convert(model: type[Model], obj: Any, strict: bool) -> Model:
    return to_model(model, obj, strict)  # type: ignore[no-any-return]


def to_openai_response(response: responses.Response, *, strict: bool = False) -> Response:
    """A :class:`rapidsse.responses.Response` as the SDK's ``openai.types.responses.Response``
    (``strict``: raise instead of falling back to unvalidated construction, see the module doc)."""
    if not isinstance(response, responses.Response):
        raise TypeError(f"expected a rapidsse.responses.Response, not {type(response).__name__}")
    return _convert(Response, response, strict)


def to_openai_chat_completion(completion: chat.ChatCompletion, *, strict: bool = False) -> ChatCompletion:
    """A :class:`rapidsse.chat.ChatCompletion` as the SDK's ``openai.types.chat.ChatCompletion``."""
    if not isinstance(completion, chat.ChatCompletion):
        raise TypeError(f"expected a rapidsse.chat.ChatCompletion, not {type(completion).__name__}")
    return _convert(ChatCompletion, completion, strict)
