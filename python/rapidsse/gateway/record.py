"""The record of one exchange, and the engine-neutral code that fills it: what the tap's
accumulator (or a non-streamed JSON reply) says about tokens, model and finish reason, the error
body a client gets in its API's shape, and the model a request names.

Both engines (:mod:`.asyncio_engine` and the native one) make their records with these
functions, so a record means the same whichever engine forwarded the exchange."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Union

import msgspec

from .. import anthropic, chat, completions, gemini, responses
from .._schema import decode_lenient
from ..accumulate import (AnthropicAccumulator, ChatAccumulator, CompletionsAccumulator, GeminiAccumulator,
                          RealtimeAccumulator, ResponseAccumulator)
from ..errors import SSEError

__all__ = ["ACCUMULATORS", "FINAL", "OUTCOMES", "REALTIME_PATH", "ExchangeRecord", "OnComplete", "Tokens",
           "describe_json_reply", "describe_realtime", "error_body", "log_record", "read_tap", "requested_model"]

logger = logging.getLogger("rapidsse.gateway")

OUTCOMES = ("complete", "client_gone", "upstream_cut", "upstream_error", "bad_stream", "rejected")
"""How an exchange can end (:attr:`ExchangeRecord.outcome`). ``rejected``: the gateway answered
the request itself without contacting upstream (``on_request`` returned a
:class:`~rapidsse.gateway.Reject` or raised, or the request broke a limit such as
``max_body_bytes``)."""

REALTIME_PATH = "/v1/realtime"


class Tokens(msgspec.Struct, frozen=True):
    """Token counts of one exchange as upstream reported them, in one convention for every
    protocol: ``input`` includes the cached tokens, ``output`` includes the reasoning tokens.
    A count upstream did not send is ``None``.

    Anthropic's ``input_tokens`` leave out the cache reads and writes, so ``input`` is their sum;
    Gemini's ``candidatesTokenCount`` leaves out the thoughts, so ``output`` adds
    ``thoughtsTokenCount`` (and ``input`` adds ``toolUsePromptTokenCount``). A Realtime session
    adds up the usage of its responses."""

    input: Union[int, None] = None
    output: Union[int, None] = None
    cached: Union[int, None] = None
    reasoning: Union[int, None] = None


class ExchangeRecord(msgspec.Struct):
    """One request and its reply, as the gateway saw them.

    Times are seconds from the request's arrival: ``ttfb`` to upstream's status line and
    headers, ``ttft`` to the first chunk that brought output (text, refusal, reasoning or tool
    arguments; ``None`` untapped or when none came), ``duration`` to the end of the exchange.
    ``chunks`` and ``bytes`` count the body as forwarded: the pieces it went out in (about one per
    read from upstream, however many HTTP chunks that read held; for a WebSocket, the server's
    messages) and its bytes;
    ``events`` the tap's events (``None`` untapped). ``tokens`` is ``None`` when upstream sent no
    usage. ``caller`` is what ``on_request`` set as :attr:`GatewayRequest.caller` (never taken from
    the request by the gateway itself). ``error`` says what went wrong for every outcome but
    ``complete``."""

    protocol: Union[str, None]
    method: str
    path: str
    model: Union[str, None] = None
    caller: Union[str, None] = None
    status: int = 0
    outcome: str = "complete"
    ttfb: Union[float, None] = None
    ttft: Union[float, None] = None
    duration: float = 0.0
    chunks: int = 0
    bytes: int = 0
    events: Union[int, None] = None
    tokens: Union[Tokens, None] = None
    finish_reason: Union[str, None] = None
    warnings: list[str] = []
    error: Union[str, None] = None


OnComplete = Callable[[ExchangeRecord, Any], Any]
"""``on_complete(record, accumulator)``: the accumulator is ``None`` when the reply was not
tapped (no protocol, ``tap=False``, or not a stream); may be a coroutine function. It runs on the
:class:`~rapidsse.gateway.hooks.Recorder`'s thread, never on a thread that forwards streams."""

_encode_record = msgspec.json.Encoder().encode


def log_record(record: ExchangeRecord, accumulator: Any = None) -> None:
    """The default ``on_complete``: the record as one JSON line on the ``rapidsse.gateway`` logger
    (level INFO)."""
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s", _encode_record(record).decode())


def log_records(items: list[tuple[ExchangeRecord, Any]]) -> None:
    """:func:`log_record` for each ``(record, accumulator)`` of ``items``: their JSON lines as one
    log message (one line each), so that the logging machinery runs once for the lot."""
    if items and logger.isEnabledFor(logging.INFO):
        logger.info("%s", b"\n".join([_encode_record(record) for record, _ in items]).decode())


# --- What the tap's result says: tokens, model, finish reason, first output -----------------------

ACCUMULATORS: dict[str, type] = {
    "responses": ResponseAccumulator,
    "chat": ChatAccumulator,
    "completions": CompletionsAccumulator,
    "anthropic": AnthropicAccumulator,
    "gemini": GeminiAccumulator,
}
"""The tap of each protocol a path can name (:func:`rapidsse.integrations.protocol_for_path`)."""

FINAL: dict[str, tuple[str, type]] = {
    "responses": ("response", responses.Response),
    "chat": ("completion", chat.ChatCompletion),
    "completions": ("completion", completions.Completion),
    "anthropic": ("message", anthropic.Message),
    "gemini": ("response", gemini.GenerateContentResponse),
}
"""The final object of each protocol: the accumulator's attribute, and the type a JSON reply (no
``"stream"``) is decoded as."""

TOKEN_KINDS = ("input", "output", "cached", "reasoning")


def _add(*counts: Union[int, None]) -> Union[int, None]:
    present = [c for c in counts if c is not None]
    return sum(present) if present else None


def _tokens(protocol: str, final: Any) -> Union[Tokens, None]:
    """The final object's usage as :class:`Tokens` (``None`` when it has none)."""
    if protocol == "gemini":
        usage = final.usage_metadata
        if usage is None:
            return None
        return Tokens(input=_add(usage.prompt_token_count, usage.tool_use_prompt_token_count),
                      output=_add(usage.candidates_token_count, usage.thoughts_token_count),
                      cached=usage.cached_content_token_count, reasoning=usage.thoughts_token_count)
    usage = final.usage
    if usage is None:
        return None
    if protocol == "responses":
        cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details is not None else None
        reasoning = usage.output_tokens_details.reasoning_tokens if usage.output_tokens_details is not None else None
        return Tokens(input=usage.input_tokens, output=usage.output_tokens, cached=cached, reasoning=reasoning)
    if protocol == "anthropic":
        cached = usage.cache_read_input_tokens
        inputs = usage.input_tokens
        if inputs is not None:
            inputs = _add(inputs, cached, usage.cache_creation_input_tokens)
        return Tokens(input=inputs, output=usage.output_tokens, cached=cached)
    # Chat and Completions
    prompt = usage.prompt_tokens_details if protocol == "chat" else None
    details = usage.completion_tokens_details if protocol == "chat" else None
    return Tokens(input=usage.prompt_tokens, output=usage.completion_tokens,
                  cached=prompt.cached_tokens if prompt is not None else None,
                  reasoning=details.reasoning_tokens if details is not None else None)


def _model(protocol: str, final: Any) -> Union[str, None]:
    model = final.model_version if protocol == "gemini" else final.model
    return model or None


def _finish_reason(protocol: str, final: Any) -> Union[str, None]:
    if protocol == "responses":
        details = final.incomplete_details
        return details.reason if details is not None and details.reason else final.status
    if protocol == "anthropic":
        return final.stop_reason
    choices = final.candidates if protocol == "gemini" else final.choices
    for choice in choices or ():
        if choice.finish_reason:
            return choice.finish_reason
    return None


# Where each protocol's final object keeps its output, and the members that hold generated text.
_OUTPUT = {"responses": "output", "chat": "choices", "completions": "choices", "anthropic": "content",
           "gemini": "candidates"}
_TEXT_KEYS = frozenset(("text", "content", "arguments", "refusal", "thinking", "reasoning", "reasoning_content",
                        "input", "partial_json"))


def _has_text(node: Any) -> bool:
    """Whether plain JSON data (dicts and lists) holds any generated text."""
    if isinstance(node, dict):
        return any((key in _TEXT_KEYS and isinstance(value, (str, dict)) and bool(value)) or _has_text(value)
                   for key, value in node.items())
    if isinstance(node, list):
        return any(_has_text(item) for item in node)
    return False


_decode_builtins = msgspec.json.decode


def _has_output(protocol: str, snapshot: Union[bytes, None]) -> bool:
    """Whether the JSON of the object built so far (the core's ``snapshot_json``) holds any
    generated output (for the time to first token: checked only until it does). Read as plain
    JSON, not as the protocol's typed object: the typed snapshot (its schema check, its wire
    info, then ``to_builtins`` to walk it) is work the check does not need, and the same members
    are looked at."""
    if snapshot is None:
        return False
    try:
        built = _decode_builtins(snapshot)
    except msgspec.DecodeError:
        return False
    return isinstance(built, dict) and _has_text(built.get(_OUTPUT[protocol]))


def _describe(record: ExchangeRecord, protocol: str, final: Any) -> None:
    """Fills ``record``'s tokens, model and finish reason from the protocol's final object."""
    record.tokens = _tokens(protocol, final)
    record.model = _model(protocol, final) or record.model
    record.finish_reason = _finish_reason(protocol, final)


has_text = _has_text
has_output = _has_output
describe = _describe


def read_tap(record: ExchangeRecord, protocol: str, accumulator: Any) -> None:
    """Closes the stream's ``accumulator`` and fills ``record`` from it: events, warnings, and
    the final object's tokens, model and finish reason. A tap that cannot be read (an
    ``SSEError`` at the end, or no final object from a successful reply) makes a ``complete``
    exchange ``bad_stream``."""
    try:
        accumulator.close()
        record.events = accumulator.events
        record.warnings = list(accumulator.warnings)
        final = getattr(accumulator, FINAL[protocol][0])
    except SSEError as exc:
        if record.outcome == "complete":
            record.outcome, record.error = "bad_stream", f"{type(exc).__name__}: {exc}"
        return
    if final is None:
        if record.outcome == "complete" and record.status < 300:
            record.outcome, record.error = "bad_stream", "the stream held no event the tap could read"
        return
    _describe(record, protocol, final)


def describe_json_reply(record: ExchangeRecord, protocol: str, body: bytes) -> None:
    """Fills ``record`` from a non-streamed JSON reply (the whole body): its usage, model and
    finish reason; a body that is not the protocol's final object makes the exchange
    ``bad_stream``."""
    try:
        final = decode_lenient(body, FINAL[protocol][1])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        record.outcome, record.error = "bad_stream", f"the JSON reply cannot be read: {exc}"
    else:
        _describe(record, protocol, final)


def describe_realtime(record: ExchangeRecord, accumulator: RealtimeAccumulator) -> None:
    """Fills ``record``'s tokens (summed over the session's responses) and finish reason (the last
    response's) from a Realtime session's accumulator."""
    usages = [r.usage for r in accumulator.responses.values() if r.usage is not None]
    if usages:
        cached = [u.input_token_details.cached_tokens for u in usages if u.input_token_details is not None]
        reasoning = [u.output_token_details.reasoning_tokens for u in usages if u.output_token_details is not None]
        record.tokens = Tokens(input=_add(*(u.input_tokens for u in usages)),
                               output=_add(*(u.output_tokens for u in usages)),
                               cached=_add(*cached), reasoning=_add(*reasoning))
    last = list(accumulator.responses.values())[-1:]
    if last:
        details = last[0].status_details
        reason = details.reason if details is not None and not isinstance(details, str) else None
        record.finish_reason = reason or last[0].status


# --- The error a client gets from the gateway itself ------------------------------------------------

_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
                  431: "INVALID_ARGUMENT", 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
                  502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_ANTHROPIC_TYPE = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
_OPENAI_CODE = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 408: "timeout",
                413: "request_too_large", 429: "rate_limited", 431: "headers_too_large", 500: "internal_error",
                502: "upstream_unreachable", 503: "unavailable", 504: "upstream_timeout"}


def error_body(protocol: Union[str, None], message: str, status: int = 502) -> bytes:
    """A JSON error body in the shape the protocol's clients read errors in: Anthropic's
    ``{"type": "error", "error": {"type", "message"}}``, Gemini's ``{"error": {"code",
    "message", "status"}}`` (``code`` the HTTP status, ``status`` Google's name for it), else
    OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (also for untapped paths)."""
    if protocol == "anthropic":
        kind = _ANTHROPIC_TYPE.get(status, "invalid_request_error" if status < 500 else "api_error")
        error: Any = {"type": "error", "error": {"type": kind, "message": message}}
    elif protocol == "gemini":
        name = _GOOGLE_STATUS.get(status, "FAILED_PRECONDITION" if status < 500 else "INTERNAL")
        error = {"error": {"code": status, "message": message, "status": name}}
    else:
        kind = "bad_gateway" if status == 502 else "invalid_request_error" if status < 500 else "server_error"
        error = {"error": {"message": message, "type": kind, "param": None, "code": _OPENAI_CODE.get(status)}}
    return msgspec.json.encode(error)


# --- The model a request names ---------------------------------------------------------------------


class _RequestModel(msgspec.Struct):
    model: Any = None


_decode_request_model = msgspec.json.Decoder(_RequestModel).decode


def requested_model(protocol: Union[str, None], path: str, body: bytes) -> Union[str, None]:
    """The model the request names: in the path for Gemini, else the JSON body's ``model``."""
    if protocol == "gemini":
        start = path.find("/models/")
        return path[start + 8:path.rfind(":")] or None if start >= 0 and ":" in path else None
    if protocol is None or not body:
        return None
    try:
        model = _decode_request_model(body).model
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return model if isinstance(model, str) else None
