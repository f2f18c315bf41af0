"""Typed chunks of a Gemini stream (``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``).

Every ``data:`` payload is a whole :class:`GenerateContentResponse`; chunks carry no ``type`` (so
:data:`Event` is that class and :data:`EVENT_TYPES` is empty), the stream has no ``[DONE]``, and
Google's servers end lines with CRLF. The JSON names are camelCase (``usageMetadata``,
``thoughtSignature``); the attributes are their snake_case forms (``chunk.usage_metadata``,
``part.thought_signature``), as in the google-genai SDK. ``msgspec.json.encode`` writes the
camelCase names back.

A :class:`Part` holds one of ``text`` (a thought summary when ``thought`` is true),
``function_call``, ``function_response``, ``executable_code``, ``code_execution_result``,
``inline_data`` or ``file_data``, and may carry a ``thought_signature`` (sometimes on a part with
empty text). A chunk holding only an ``error`` object (``{"error": {"code", "message",
"status"}}``), as Google sends when a stream fails, decodes with :attr:`GenerateContentResponse.error`
set. Every field is optional; unknown fields are ignored.
"""

from __future__ import annotations

from typing import Any

from ._schema import Model


class _Camel(Model, rename="camel"):
    """Base of the Gemini Structs: snake_case attributes, camelCase JSON names."""


class FunctionCall(_Camel):
    """A call of a declared function: ``args`` is the arguments object, whole (not streamed).

    ``partial_args`` and ``will_continue`` are set when the request streamed function call
    arguments; they are kept as sent."""

    id: str | None = None
    name: str | None = None
    args: dict[str, Any] | None = None
    partial_args: list[dict[str, Any]] | None = None
    will_continue: bool | None = None


class FunctionResponse(_Camel):
    """The result of a function call (in requests and in histories)."""

    id: str | None = None
    name: str | None = None
    response: dict[str, Any] | None = None
    will_continue: bool | None = None
    scheduling: str | None = None


class ExecutableCode(_Camel):
    """Code the model wrote for the code execution tool."""

    language: str | None = None
    code: str | None = None
    id: str | None = None


class CodeExecutionResult(_Camel):
    """What running :class:`ExecutableCode` gave (``outcome``: ``OUTCOME_OK``, ...)."""

    outcome: str | None = None
    output: str | None = None
    id: str | None = None


class Blob(_Camel):
    """Inline bytes: ``data`` is base64 text, as on the wire."""

    mime_type: str | None = None
    data: str | None = None
    display_name: str | None = None


class FileData(_Camel):
    """A file referred to by URI."""

    mime_type: str | None = None
    file_uri: str | None = None
    display_name: str | None = None


class Part(_Camel):
    """One part of a :class:`Content`."""

    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    executable_code: ExecutableCode | None = None
    code_execution_result: CodeExecutionResult | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    video_metadata: dict[str, Any] | None = None
    part_metadata: dict[str, Any] | None = None


class Content(_Camel):
    """A turn's content: ``role`` (``"model"`` in responses) and its parts in order."""

    role: str | None = None
    parts: list[Part] | None = None


class SafetyRating(_Camel):
    """The rated probability (and severity) of one harm category."""

    category: str | None = None
    probability: str | None = None
    probability_score: float | None = None
    severity: str | None = None
    severity_score: float | None = None
    blocked: bool | None = None


class Citation(_Camel):
    """A source the candidate's text cites (``start_index``/``end_index`` into the text)."""

    start_index: int | None = None
    end_index: int | None = None
    uri: str | None = None
    title: str | None = None
    license: str | None = None
    publication_date: dict[str, Any] | None = None


class CitationMetadata(_Camel):
    """Citations of a candidate: ``citations`` (Vertex AI) or ``citation_sources`` (Gemini API)."""

    citations: list[Citation] | None = None
    citation_sources: list[Citation] | None = None


class GroundingChunkWeb(_Camel):
    """A web page a grounded answer drew on."""

    uri: str | None = None
    title: str | None = None
    domain: str | None = None


class GroundingChunk(_Camel):
    """One grounding source: ``web``, or another kind kept as its object."""

    web: GroundingChunkWeb | None = None
    retrieved_context: dict[str, Any] | None = None
    maps: dict[str, Any] | None = None


class Segment(_Camel):
    """A span of a candidate's text."""

    part_index: int | None = None
    start_index: int | None = None
    end_index: int | None = None
    text: str | None = None


class GroundingSupport(_Camel):
    """Which grounding chunks support a segment of the text."""

    segment: Segment | None = None
    grounding_chunk_indices: list[int] | None = None
    confidence_scores: list[float] | None = None


class SearchEntryPoint(_Camel):
    """The Google Search suggestion chip to show with a grounded answer."""

    rendered_content: str | None = None
    sdk_blob: str | None = None


class RetrievalMetadata(_Camel):
    """Metadata of the retrieval step of grounding."""

    google_search_dynamic_retrieval_score: float | None = None


class GroundingMetadata(_Camel):
    """What grounded a candidate (Google Search, URL context, retrieval, Maps)."""

    web_search_queries: list[str] | None = None
    image_search_queries: list[str] | None = None
    retrieval_queries: list[str] | None = None
    search_entry_point: SearchEntryPoint | None = None
    grounding_chunks: list[GroundingChunk] | None = None
    grounding_supports: list[GroundingSupport] | None = None
    retrieval_metadata: RetrievalMetadata | None = None
    google_maps_widget_context_token: str | None = None


class UrlMetadata(_Camel):
    """One URL the URL context tool fetched, and how that went."""

    retrieved_url: str | None = None
    url_retrieval_status: str | None = None


class UrlContextMetadata(_Camel):
    """The URLs the URL context tool fetched."""

    url_metadata: list[UrlMetadata] | None = None


class Candidate(_Camel):
    """One candidate response (``index`` is omitted for the first by some servers: 0)."""

    content: Content | None = None
    finish_reason: str | None = None
    finish_message: str | None = None
    index: int | None = None
    safety_ratings: list[SafetyRating] | None = None
    citation_metadata: CitationMetadata | None = None
    grounding_metadata: GroundingMetadata | None = None
    url_context_metadata: UrlContextMetadata | None = None
    token_count: int | None = None
    avg_logprobs: float | None = None
    logprobs_result: dict[str, Any] | None = None


class ModalityTokenCount(_Camel):
    """Tokens of one modality (``TEXT``, ``IMAGE``, ``AUDIO``, ``VIDEO``, ``DOCUMENT``)."""

    modality: str | None = None
    token_count: int | None = None


class UsageMetadata(_Camel):
    """Token counts so far; each chunk sends the running totals, the last one the final counts."""

    prompt_token_count: int | None = None
    candidates_token_count: int | None = None
    thoughts_token_count: int | None = None
    cached_content_token_count: int | None = None
    tool_use_prompt_token_count: int | None = None
    total_token_count: int | None = None
    prompt_tokens_details: list[ModalityTokenCount] | None = None
    candidates_tokens_details: list[ModalityTokenCount] | None = None
    cache_tokens_details: list[ModalityTokenCount] | None = None
    tool_use_prompt_tokens_details: list[ModalityTokenCount] | None = None
    traffic_type: str | None = None
    service_tier: str | None = None


class PromptFeedback(_Camel):
    """Why a prompt was blocked (``block_reason``), with its safety ratings."""

    block_reason: str | None = None
    block_reason_message: str | None = None
    safety_ratings: list[SafetyRating] | None = None


class Error(_Camel):
    """An error sent in place of a chunk (``{"error": {...}}``), as Google's APIs write them."""

    code: int | None = None
    message: str | None = None
    status: str | None = None
    details: list[Any] | None = None


class GenerateContentResponse(_Camel):
    """One chunk of a Gemini stream, or (from :class:`rapidsse.GeminiAccumulator`) the whole response."""

    candidates: list[Candidate] | None = None
    usage_metadata: UsageMetadata | None = None
    model_version: str | None = None
    response_id: str | None = None
    prompt_feedback: PromptFeedback | None = None
    create_time: str | None = None
    error: Error | None = None


Event = GenerateContentResponse
"""The type to decode every Gemini payload as."""

EVENT_TYPES: dict[str, type] = {}
"""Gemini chunks are not tagged by type."""

__all__ = [
    "Event",
    "EVENT_TYPES",
    "GenerateContentResponse",
    "Candidate",
    "Content",
    "Part",
    "FunctionCall",
    "FunctionResponse",
    "ExecutableCode",
    "CodeExecutionResult",
    "Blob",
    "FileData",
    "SafetyRating",
    "CitationMetadata",
    "Citation",
    "GroundingMetadata",
    "GroundingChunk",
    "GroundingChunkWeb",
    "GroundingSupport",
    "Segment",
    "SearchEntryPoint",
    "RetrievalMetadata",
    "UrlContextMetadata",
    "UrlMetadata",
    "UsageMetadata",
    "ModalityTokenCount",
    "PromptFeedback",
    "Error",
]
