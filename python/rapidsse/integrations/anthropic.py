"""The anthropic SDK: parse its raw streaming responses with rapidsse, convert results to its models.

Parsing: let the SDK send the request (auth, retries, base URL) and rapidsse read the body::

    from rapidsse.integrations.anthropic import iter_events_from_anthropic, to_anthropic_message

    with client.messages.with_streaming_response.create(model=..., max_tokens=..., messages=..., stream=True) as raw:
        for event in iter_events_from_anthropic(raw):
            ...

``raw`` may be what ``with_streaming_response`` gives (sync or async, ``client.beta.messages``
too), what ``with_raw_response`` gives, or the HTTP response itself (``httpx.Response``, or
``httpx2.Response`` in SDKs built on httpx2).

Converting: :func:`to_anthropic_message` turns a :class:`rapidsse.anthropic.Message` (e.g.
``AnthropicAccumulator().message``) into the SDK's ``anthropic.types.Message`` (``beta=True``:
``anthropic.types.beta.BetaMessage``, which knows the beta blocks). Every field is written
(defaults included, unknown blocks as received, see :func:`rapidsse.integrations.to_builtins`) and
validated with ``model_validate``; as for the openai integration, a validation failure falls back
to ``model_construct`` (how the SDK builds the messages it accumulates from streams) unless
``strict=True``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from anthropic.types import Message

from .. import anthropic as schema
from . import to_model
from .httpx import event_source_of

__all__ = ["aiter_events_from_anthropic", "iter_events_from_anthropic", "to_anthropic_message"]


def iter_events_from_anthropic(raw_response: Any, **kwargs: Any) -> Iterator[Any]:
    """The typed events (:mod:`rapidsse.anthropic`) of an anthropic SDK raw streaming response
    (sync client). Keyword arguments as for :func:`rapidsse.iter_events`; raises
    ``SSEContentTypeError`` for a reply that is not an event stream (an error reply)."""
    return event_source_of(raw_response, "anthropic").iter_events("anthropic", **kwargs)


def aiter_events_from_anthropic(raw_response: Any, **kwargs: Any) -> AsyncIterator[Any]:
    """Async twin of :func:`iter_events_from_anthropic` (``AsyncAnthropic`` client)."""
    return event_source_of(raw_response, "anthropic").aiter_events("anthropic", **kwargs)


def to_anthropic_message(message: schema.Message, *, beta: bool = False, strict: bool = False) -> Any:
    """A :class:`rapidsse.anthropic.Message` as the SDK's ``anthropic.types.Message`` (``beta``:
    ``anthropic.types.beta.BetaMessage``; ``strict``: raise pydantic's ``ValidationError``
    instead of falling back to unvalidated construction, see the module doc)."""
    if not isinstance(message, schema.Message):
        raise TypeError(f"expected a rapidsse.anthropic.Message, not {type(message).__name__}")
    model: Any = Message
    if beta:
        from anthropic.types.beta import BetaMessage

        model = BetaMessage
    return to_model(model, message, strict)
