"""Typed chunks of the legacy Completions stream (``POST /v1/completions``, ``stream: true``).

The text API that serving benchmarks (vLLM's ``bench serve``), TGI and llama.cpp still speak:
every ``data:`` payload but the final ``data: [DONE]`` is a :class:`Completion` with ``object``
``"text_completion"``, whose ``choices`` each carry a piece of ``text`` (and, when asked for,
``logprobs`` of its tokens). Chunks carry no ``type`` (so :data:`Event` is :class:`Completion`
and :data:`EVENT_TYPES` is empty). The final, accumulated completion
(:class:`rapidsse.CompletionsAccumulator`) has the same shape, so it is a :class:`Completion` too.

``usage`` and ``error`` are the Chat schemas' (:class:`rapidsse.chat.Usage`,
:class:`rapidsse.chat.ChunkError`). Every field is optional; unknown fields are ignored.
"""

from __future__ import annotations

from .chat import ChunkError, Usage
from ._schema import Model


class Logprobs(Model):
    """Log probabilities of a choice's tokens, four parallel lists (one entry per token).

    ``top_logprobs`` entries map alternative tokens to their log probabilities (``None`` for a
    token without them, as vLLM sends for the prompt's first); ``text_offset`` is each token's
    character offset in the text."""

    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None
    text_offset: list[int] | None = None


class CompletionChoice(Model):
    """One choice (of ``n``): its text (a piece of it, in a chunk), logprobs and finish reason.

    ``stop_reason`` is vLLM's: the stop string or token id that ended the choice."""

    index: int = 0
    text: str = ""
    logprobs: Logprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class Completion(Model):
    """A chunk of a streamed completion, or the whole completion (``object``: ``"text_completion"``)."""

    id: str | None = None
    object: str | None = None
    created: int | float | None = None
    model: str | None = None
    choices: list[CompletionChoice] = []
    usage: Usage | None = None
    system_fingerprint: str | None = None
    error: ChunkError | None = None


Event = Completion
"""The type to decode every Completions payload as."""

EVENT_TYPES: dict[str, type] = {}
"""Completions chunks are not tagged by type."""

__all__ = [
    "Event",
    "EVENT_TYPES",
    "Completion",
    "CompletionChoice",
    "Logprobs",
    "Usage",
    "ChunkError",
]
