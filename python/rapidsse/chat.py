"""Typed chunks of the OpenAI Chat Completions stream (``POST /v1/chat/completions``, ``stream: true``).

Chunks carry no ``type``: every ``data:`` payload but ``[DONE]`` decodes as
:class:`ChatCompletionChunk` (so :data:`Event` is that class and :data:`EVENT_TYPES` is empty).
:class:`ChatCompletion` is the non-streaming completion, which an accumulator builds from chunks.

Every field is optional, as servers differ: Azure's first chunk has empty ``choices`` and ``object``;
usage arrives in a last chunk with ``choices: []``; Groq may send a chunk with only an ``error``;
Mistral sends ``content`` as a list of typed parts; reasoning arrives as ``reasoning`` (vLLM, Groq,
OpenRouter) or ``reasoning_content`` (DeepSeek). Unknown fields are ignored.
"""

from __future__ import annotations

from typing import Any

from ._schema import Model, TopLogprob

# ---------------------------------------------------------------------------------------------------
# Shared parts


class ContentPart(Model):
    """A typed part of a message's ``content`` when it is a list (Mistral and others).

    ``{"type": "text", "text": ...}``, or ``{"type": "thinking", "thinking": [parts...]}`` holding
    the reasoning as a list of text parts (or as a string); other types keep their ``type``.
    """

    type: str | None = None
    text: str | None = None
    thinking: list[ContentPart] | str | None = None
    image_url: Any = None


class TokenLogprob(Model):
    """A sampled token, its log probability and the most likely alternatives."""

    token: str | None = None
    logprob: float | None = None
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] | None = []


class ChoiceLogprobs(Model):
    """Log probabilities of a choice's content tokens and refusal tokens."""

    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


class PromptTokensDetails(Model):
    """Breakdown of prompt tokens."""

    cached_tokens: int | None = None
    audio_tokens: int | None = None


class CompletionTokensDetails(Model):
    """Breakdown of completion tokens."""

    reasoning_tokens: int | None = None
    audio_tokens: int | None = None
    accepted_prediction_tokens: int | None = None
    rejected_prediction_tokens: int | None = None


class Usage(Model):
    """Token usage of a completion."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class ChunkError(Model):
    """An error sent in place of a chunk's content (e.g. Groq's ``tool_use_failed``)."""

    message: str | None = None
    type: str | None = None
    code: str | int | None = None
    param: str | None = None
    failed_generation: str | None = None
    status_code: int | None = None


class Audio(Model):
    """Audio output of a message (or a piece of it, in a delta)."""

    id: str | None = None
    data: str | None = None
    transcript: str | None = None
    expires_at: int | None = None


# ---------------------------------------------------------------------------------------------------
# Streaming


class FunctionDelta(Model):
    """A piece of a function call: its ``name`` (first piece) and a piece of its JSON ``arguments``."""

    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(Model):
    """A piece of a tool call; pieces with the same ``index`` belong to the same call."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: FunctionDelta | None = None


class ChoiceDelta(Model):
    """What a chunk adds to a choice's message."""

    role: str | None = None
    content: str | list[ContentPart] | None = None
    refusal: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    function_call: FunctionDelta | None = None
    audio: Audio | None = None


class ChunkChoice(Model):
    """One choice (of ``n``) in a chunk: its delta, log probabilities and finish reason."""

    index: int = 0
    delta: ChoiceDelta | None = None
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(Model):
    """One chunk of a streamed chat completion (``object`` is ``"chat.completion.chunk"``)."""

    id: str | None = None
    object: str | None = None
    created: int | float | None = None
    model: str | None = None
    choices: list[ChunkChoice] = []
    usage: Usage | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None
    error: ChunkError | None = None
    obfuscation: str | None = None


# ---------------------------------------------------------------------------------------------------
# Non-streaming


class FunctionCall(Model):
    """A function call: its name and JSON ``arguments``."""

    name: str | None = None
    arguments: str = ""


class ToolCall(Model):
    """A tool call of an assistant message."""

    id: str | None = None
    type: str = "function"
    function: FunctionCall | None = None


class ChatCompletionMessage(Model):
    """The assistant message of a choice."""

    role: str = "assistant"
    content: str | list[ContentPart] | None = None
    refusal: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None
    annotations: list[dict[str, Any]] | None = None
    audio: Audio | None = None


class Choice(Model):
    """One choice of a completion."""

    index: int = 0
    message: ChatCompletionMessage | None = None
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletion(Model):
    """A whole chat completion (``object`` is ``"chat.completion"``), as returned without streaming."""

    id: str | None = None
    object: str | None = None
    created: int | float | None = None
    model: str | None = None
    choices: list[Choice] = []
    usage: Usage | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None


Event = ChatCompletionChunk
"""The type to decode every Chat Completions payload as."""

EVENT_TYPES: dict[str, type] = {}
"""Chat chunks are not tagged by type."""

__all__ = [
    "Event",
    "EVENT_TYPES",
    "ChatCompletionChunk",
    "ChunkChoice",
    "ChoiceDelta",
    "ToolCallDelta",
    "FunctionDelta",
    "ChatCompletion",
    "Choice",
    "ChatCompletionMessage",
    "ToolCall",
    "FunctionCall",
    "ContentPart",
    "ChoiceLogprobs",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
    "PromptTokensDetails",
    "CompletionTokensDetails",
    "ChunkError",
    "Audio",
]
