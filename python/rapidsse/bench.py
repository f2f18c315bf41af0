"""Benchmark harness: rapidsse against the parsers users would otherwise pick, on identical inputs.

Used by the pytest-benchmark suite in ``benches/`` and by ``rapidsse bench``. Three parts:

- **Inputs.** :func:`responses_stream` and :func:`chat_stream` build realistic synthetic streams (the
  shape and sizes of OpenAI's), :func:`large_event_stream` one 64 MiB event, :func:`chunked` cuts
  bytes the way a socket delivers them and :func:`corpus_recordings` loads the real recorded streams.
- **Contenders.** Each :class:`Contender` wraps one parser as ``run(inputs) -> int`` (the number of
  events produced), so all of a group are timed on the same chunks and checked on the same count.
  Peers (httpx-sse, openai, sseclient-py) are imported lazily: one that is not installed is reported
  as skipped with its import error, never faked or timed.
- **Timing.** :func:`measure` times one contender (median of repeated runs, ``time.perf_counter``),
  :func:`run_all` times every group and :func:`format_table` renders the rows as Markdown.

>>> contender = contenders("typed Chat (512-byte chunks)")[0]
>>> contender.name, contender.run(chunked(chat_stream(20), 512))
('rapidsse rust', 20)
"""

from __future__ import annotations

import functools
import importlib
import itertools
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import msgspec

from . import accumulate, chat, completions, decoding, gemini, responses
from ._backend import BACKEND, using
from .decoding import EventDecoder
from .framing import DEFAULT_MAX_EVENT_SIZE, _PySSEDecoder

__all__ = [
    "CHUNK_SIZE",
    "Contender",
    "GROUPS",
    "Recording",
    "Workload",
    "anthropic_mixed_events",
    "anthropic_mixed_stream",
    "anthropic_stream",
    "chat_mixed_stream",
    "chat_stream",
    "chat_tool_stream",
    "completions_stream",
    "gemini_stream",
    "chunked",
    "contenders",
    "corpus_dir",
    "corpus_recordings",
    "format_table",
    "large_event_stream",
    "measure",
    "python_event_decoder",
    "responses_stream",
    "run_all",
    "workload",
]

Protocol = Literal["responses", "chat", "anthropic", "gemini", "completions"]

CHUNK_SIZE = 512
"""Bytes per chunk in the stream groups: about what one TLS record / socket read carries."""

LARGE_EVENT_SIZE = 64 * 1024 * 1024
"""Bytes of data in the large-event group's one event (twice the default ``max_event_size``)."""
LARGE_CHUNK_SIZE = 4096
SHORT_STREAM = 20
"""Events below which a corpus recording counts as short in the split Chat corpus groups: there
what every stream pays once (its accumulator, its final object, the first chunk of each shape)
weighs as much as its chunks."""

FRAMING = "framing (Responses, 512-byte chunks)"
TYPED_RESPONSES = "typed Responses (512-byte chunks)"
TYPED_CHAT = "typed Chat (512-byte chunks)"
LARGE_EVENT = "framing of one 64 MiB event: 4 KiB chunks vs one chunk"
CORPUS = "corpus (all recordings, typed)"
ACCUMULATE = "final Response (Responses, 512-byte chunks)"
HTTPX_SSE = "httpx-sse drop-in: connect_sse + iter_sse over an httpx MockTransport (Responses, 512-byte chunks)"
HTTPX_SSE_ASYNC = "httpx-sse drop-in: aconnect_sse + aiter_sse over an httpx MockTransport (Responses, 512-byte chunks)"
HTTPX_SSE_CORPUS = "httpx-sse drop-in: connect_sse + iter_sse over an httpx MockTransport (all recordings)"
TYPED_GEMINI = "typed Gemini (512-byte chunks)"
GEMINI_ACCUMULATE = "final Gemini response (512-byte chunks)"
TYPED_COMPLETIONS = "typed Completions (512-byte chunks)"
COMPLETIONS_ACCUMULATE = "final Completion (512-byte chunks)"
ANTHROPIC = "Anthropic Messages (512-byte chunks)"
ASYNC_RESPONSES = "async vs sync: typed Responses, async generator vs list of the same chunks (512-byte chunks)"
ASYNC_CHAT = "async vs sync: typed Chat, async generator vs list of the same chunks (512-byte chunks)"
CHAT_ACCUMULATE = "final ChatCompletion: text deltas, then a tool call (512-byte chunks)"
CHAT_ACCUMULATE_MIXED = "final ChatCompletion: n=2, text and parallel tool calls (512-byte chunks)"
CHAT_ACCUMULATE_CORPUS = "final ChatCompletion: the corpus's chat recordings (512-byte chunks)"
CHAT_ACCUMULATE_CORPUS_SHORT = (
    f"final ChatCompletion: the corpus's chat recordings of fewer than {SHORT_STREAM} events (512-byte chunks)"
)
CHAT_ACCUMULATE_CORPUS_LONG = (
    f"final ChatCompletion: the corpus's chat recordings of {SHORT_STREAM} events or more (512-byte chunks)"
)
ANTHROPIC_MIXED = "Anthropic Messages, mixed: thinking, text, citations, tool input (512-byte chunks)"
GROUPS = (FRAMING, TYPED_RESPONSES, TYPED_CHAT, LARGE_EVENT, CORPUS, ACCUMULATE, HTTPX_SSE, HTTPX_SSE_ASYNC,
          HTTPX_SSE_CORPUS, TYPED_GEMINI, GEMINI_ACCUMULATE, TYPED_COMPLETIONS, COMPLETIONS_ACCUMULATE, ANTHROPIC,
          ANTHROPIC_MIXED, CHAT_ACCUMULATE, CHAT_ACCUMULATE_MIXED, CHAT_ACCUMULATE_CORPUS, CHAT_ACCUMULATE_CORPUS_SHORT,
          CHAT_ACCUMULATE_CORPUS_LONG, ASYNC_RESPONSES, ASYNC_CHAT)
"""Every group, in the order :func:`run_all` reports them."""
_CHAT_CORPUS_GROUPS = (CHAT_ACCUMULATE_CORPUS, CHAT_ACCUMULATE_CORPUS_SHORT, CHAT_ACCUMULATE_CORPUS_LONG)

# ---------------------------------------------------------------------------------------------------
# Inputs

_WORDS = (
    "the", " stream", " of", " tokens", " arrives", " in", " small", " pieces", ",", " each", " one",
    " a", " JSON", " object", " with", " its", " own", " sequence", " number", ".", " Parsing", " it",
    " quickly", " matters", " when", " a", " gateway", " relays", " thousands", " at", " once", "\n",
)
_ALPHANUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_RESPONSE_ID = "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b"
_ITEM_ID = "msg_68af4031e9b481939ee1ec8e1b0bba5705438e46b5f69a3b"
_CHAT_ID = "chatcmpl-C9UMzPTDpVSRqMBCXT1QzW4m8aHdE"
_RESPONSES_LIFECYCLE = 8  # events of a Responses stream that are not text deltas

_encode = msgspec.json.Encoder().encode


def _delta(i: int) -> str:
    return "".join(_WORDS[(i * 7 + k) % len(_WORDS)] for k in range(1 + i % 3))


def _obfuscation(i: int, delta: str) -> str:
    # OpenAI pads each delta event with random characters so that all have similar lengths.
    n = max(2, 16 - len(delta))
    return "".join(_ALPHANUM[(i * 31 + k * 17) % len(_ALPHANUM)] for k in range(n))


def _sse(event: str | None, payload: dict[str, Any]) -> bytes:
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + _encode(payload) + b"\n\n"


def _response(status: str, output: list[Any], usage: Any) -> dict[str, Any]:
    return {
        "id": _RESPONSE_ID, "object": "response", "created_at": 1756315696, "status": status,
        "background": False, "error": None, "incomplete_details": None, "instructions": None,
        "max_output_tokens": None, "max_tool_calls": None, "model": "gpt-4.1-2025-04-14",
        "output": output, "parallel_tool_calls": True, "previous_response_id": None,
        "prompt_cache_key": None, "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None, "service_tier": "auto", "store": True, "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto",
        "tools": [], "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "usage": usage,
        "user": None, "metadata": {},
    }  # fmt: skip


def responses_stream(n_events: int = 3000) -> bytes:
    """A Responses API text stream of exactly ``n_events`` events, as OpenAI sends it.

    ``response.created``, ``response.in_progress``, ``response.output_item.added``,
    ``response.content_part.added``, then ``n_events - 8`` ``response.output_text.delta`` events
    (``data`` of about 215 bytes, with ``event:`` lines, ``logprobs`` and ``obfuscation``), then
    ``output_text.done``, ``content_part.done``, ``output_item.done`` and ``response.completed``
    carrying the full text and the usage.
    """
    n_deltas = n_events - _RESPONSES_LIFECYCLE
    if n_deltas < 1:
        raise ValueError(f"a Responses stream needs at least {_RESPONSES_LIFECYCLE + 1} events")
    deltas = [_delta(i) for i in range(n_deltas)]
    text = "".join(deltas)
    seq = iter(range(n_events))
    where = {"item_id": _ITEM_ID, "output_index": 0, "content_index": 0}
    empty_part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    full_part = {**empty_part, "text": text}
    item = {"id": _ITEM_ID, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
    done_item = {**item, "status": "completed", "content": [full_part]}
    usage = {
        "input_tokens": 27, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": n_deltas,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 27 + n_deltas,
    }  # fmt: skip

    def event(kind: str, **fields: Any) -> bytes:
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **fields})

    out = [
        event("response.created", response=_response("in_progress", [], None)),
        event("response.in_progress", response=_response("in_progress", [], None)),
        event("response.output_item.added", output_index=0, item=item),
        event("response.content_part.added", **where, part=empty_part),
    ]
    for i, delta in enumerate(deltas):
        obfuscation = _obfuscation(i, delta)
        out.append(event("response.output_text.delta", **where, delta=delta, logprobs=[], obfuscation=obfuscation))
    out += [
        event("response.output_text.done", **where, text=text, logprobs=[]),
        event("response.content_part.done", **where, part=full_part),
        event("response.output_item.done", output_index=0, item=done_item),
        event("response.completed", response=_response("completed", [done_item], usage)),
    ]
    return b"".join(out)


def chat_stream(n_events: int = 3000) -> bytes:
    """A Chat Completions stream of exactly ``n_events`` ``chat.completion.chunk`` events.

    A first chunk with the assistant role, ``n_events - 3`` content deltas, a chunk with
    ``finish_reason: "stop"``, a usage chunk (empty ``choices``, as with ``include_usage``) and
    ``data: [DONE]`` (one more SSE event, which typed decoders do not return).
    """
    n_deltas = n_events - 3
    if n_deltas < 1:
        raise ValueError("a Chat stream needs at least 4 events")

    def chunk(choices: list[Any], usage: Any = None, **extra: Any) -> bytes:
        return _sse(None, {
            "id": _CHAT_ID, "object": "chat.completion.chunk", "created": 1756315696,
            "model": "gpt-4o-2024-08-06", "service_tier": "default",
            "system_fingerprint": "fp_80956533cb", "choices": choices, "usage": usage, **extra,
        })  # fmt: skip

    def choice(delta: dict[str, Any], finish_reason: str | None = None) -> list[Any]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]

    out = [chunk(choice({"role": "assistant", "content": "", "refusal": None}), obfuscation="Xq3")]
    for i in range(n_deltas):
        delta = _delta(i)
        out.append(chunk(choice({"content": delta}), obfuscation=_obfuscation(i, delta)))
    out.append(chunk(choice({}, "stop"), obfuscation="bT"))
    usage = {
        "prompt_tokens": 27, "completion_tokens": n_deltas, "total_tokens": 27 + n_deltas,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    }  # fmt: skip
    out.append(chunk([], usage, obfuscation="k0"))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


_GEMINI_RESPONSE_ID = "REVVabaiCdq4qtsPnZu96Qo"
_COMPLETION_ID = "cmpl-5f0c9a7e2b3d4c1e8a6b9d0f1e2c3a4b"


def gemini_stream(n_events: int = 3000) -> bytes:
    """A Gemini ``streamGenerateContent?alt=sse`` stream of exactly ``n_events`` chunks, shaped like
    the recordings: CRLF line ends, every chunk a whole ``GenerateContentResponse`` with one text
    part of candidate 0 (a tenth of them thought summaries, first), the running
    ``usageMetadata``, ``modelVersion`` and ``responseId``; the last chunk has an empty text part
    with a ``thoughtSignature`` and ``finishReason: "STOP"``.
    """
    if n_events < 2:
        raise ValueError("a Gemini stream needs at least 2 chunks")
    thoughts = n_events // 10
    out = []
    for i in range(n_events):
        last = i == n_events - 1
        part: dict[str, Any] = {"text": "" if last else _delta(i) + _delta(i + 1)}
        if i < thoughts:
            part["thought"] = True
        if last:
            part["thoughtSignature"] = "EpIDCo8DAQw51scL+dHffCC+bznOIyXjDPleN5yQL1zqs+4M/VtZCHcJrN8gh786ZjK9OZKu"
        candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if last:
            candidate["finishReason"] = "STOP"
        usage = {
            "promptTokenCount": 55, "candidatesTokenCount": 3 * (i + 1), "totalTokenCount": 55 + 3 * (i + 1),
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 55}], "thoughtsTokenCount": 3 * thoughts,
        }  # fmt: skip
        chunk = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash",
                 "responseId": _GEMINI_RESPONSE_ID}  # fmt: skip
        out.append(b"data: " + _encode(chunk) + b"\r\n\r\n")
    return b"".join(out)


def completions_stream(n_events: int = 3000) -> bytes:
    """A legacy Completions stream (``POST /v1/completions``) of exactly ``n_events``
    ``text_completion`` chunks as vLLM sends them: one choice, a text piece per chunk with
    ``logprobs``, ``finish_reason`` and ``stop_reason`` null and ``usage: null``, a last text chunk
    with ``finish_reason: "length"``, a usage chunk with empty ``choices``, and ``data: [DONE]``.
    """
    if n_events < 2:
        raise ValueError("a Completions stream needs at least 2 chunks")

    def chunk(choices: list[Any], usage: Any = None) -> bytes:
        return _sse(None, {
            "id": _COMPLETION_ID, "object": "text_completion", "created": 1764590000,
            "model": "meta-llama/Llama-3.1-8B-Instruct", "choices": choices, "usage": usage,
        })  # fmt: skip

    out = []
    for i in range(n_events - 1):
        finish = "length" if i == n_events - 2 else None
        out.append(chunk([{"index": 0, "text": _delta(i), "logprobs": None, "finish_reason": finish, "stop_reason": None}]))
    out.append(chunk([], {"prompt_tokens": 9, "total_tokens": 9 + n_events - 1, "completion_tokens": n_events - 1}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def large_event_stream(size: int = LARGE_EVENT_SIZE) -> bytes:
    """One event whose data is a ``size``-byte line: a base64 image in a JSON object, as
    ``response.image_generation_call.partial_image`` carries."""
    head = b'{"type":"response.image_generation_call.partial_image","partial_image_b64":"'
    tail = b'"}'
    filler = size - len(head) - len(tail)
    pattern = _ALPHANUM.encode() + b"+/"
    image = (pattern * (filler // len(pattern) + 1))[:filler]
    return b"event: response.image_generation_call.partial_image\ndata: " + head + image + tail + b"\n\n"


def chunked(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into ``size``-byte chunks (the last one shorter)."""
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


@dataclass(frozen=True)
class Recording:
    """One recorded stream of the corpus: its file name, protocol and raw SSE bytes."""

    name: str
    protocol: Protocol
    data: bytes


def corpus_dir() -> Path:
    """Where the recordings are: ``$RAPIDSSE_CORPUS``, else ``tests/corpus`` of the checkout."""
    configured = os.environ.get("RAPIDSSE_CORPUS")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / "tests" / "corpus"


def corpus_recordings(root: Path | None = None) -> list[Recording]:
    """Every recorded Responses and Chat stream (``responses/*.sse``, ``chat/*.sse``), sorted.

    Raises :class:`FileNotFoundError` when the corpus folder is missing.
    """
    root = corpus_dir() if root is None else root
    recordings = []
    for protocol in ("responses", "chat"):
        folder = root / protocol
        if not folder.is_dir():
            raise FileNotFoundError(f"no recorded corpus at {folder} (set RAPIDSSE_CORPUS)")
        for path in sorted(folder.glob("*.sse")):
            recordings.append(Recording(path.name, protocol, path.read_bytes()))
    return recordings


# ---------------------------------------------------------------------------------------------------
# Contenders: each runs one parser over a list of chunks and returns how many events it produced


def python_event_decoder(protocol: Protocol) -> Any:
    """A :class:`rapidsse.EventDecoder` on the pure-Python backend, whatever the live backend."""
    with using("python"):
        return EventDecoder(protocol)


def _frame_rust(chunks: list[bytes], max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE) -> int:
    from . import _rapidsse

    feed = _rapidsse.SSEDecoder(max_event_size).feed
    return sum([len(feed(chunk)) for chunk in chunks])


def _frame_python(chunks: list[bytes], max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE) -> int:
    feed = _PySSEDecoder(max_event_size).feed
    return sum([len(feed(chunk)) for chunk in chunks])


def _frame_httpx_sse(chunks: list[bytes]) -> int:
    import httpx
    import httpx_sse

    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(chunks))
    return sum(1 for _ in httpx_sse.EventSource(response).iter_sse())


def _frame_openai(chunks: list[bytes]) -> int:
    from openai._streaming import SSEDecoder

    return sum(1 for _ in SSEDecoder().iter_bytes(iter(chunks)))


def _frame_sseclient(chunks: list[bytes]) -> int:
    import sseclient

    return sum(1 for _ in sseclient.SSEClient(iter(chunks)).events())


def _typed(decoder: Any, chunks: list[bytes]) -> int:
    """What :func:`rapidsse.iter_events` does, counting instead of yielding."""
    feed, finished = decoder.feed, decoding._finished(decoder)
    n = 0
    for chunk in chunks:
        n += len(feed(chunk))
        if finished is not None and finished():
            return n
    decoder.close()
    return n


def _typed_rust(protocol: Protocol, chunks: list[bytes]) -> int:
    return _typed(decoding.EventDecoder(protocol), chunks)  # the Rust core when BACKEND == "rust"


def _typed_python(protocol: Protocol, chunks: list[bytes]) -> int:
    return _typed(python_event_decoder(protocol), chunks)


def _split_payloads(chunks: list[bytes]) -> list[bytes]:
    """The ``data`` of every event but ``[DONE]``: the msgspec floor's input, split before timing."""
    events = _PySSEDecoder(None).feed(b"".join(chunks))
    return [e.data.encode() for e in events if e.data != "[DONE]"]


@functools.lru_cache(maxsize=None)
def _decoder(schema: Any) -> Any:
    """One msgspec decoder per schema, built once (as rapidsse's own are): building one costs
    ~0.1 ms, which is not decoding."""
    return msgspec.json.Decoder(schema).decode


def _msgspec_floor(schema: Any, payloads: list[bytes]) -> int:
    """Each payload decoded and dropped, as the other contenders drop what they count (keeping
    all of them alive makes every garbage collection, whoever triggers it, slower)."""
    decode = _decoder(schema)
    n = 0
    for payload in payloads:
        decode(payload)
        n += 1
    return n


class _MockServer:
    """An ``httpx.MockTransport`` handler that answers every request with :attr:`chunks` as SSE."""

    def __init__(self, httpx: Any = None) -> None:
        self.chunks: list[bytes] = []
        self._httpx = httpx

    def __call__(self, request: Any) -> Any:
        httpx = self._httpx or importlib.import_module("httpx")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(self.chunks))


@functools.lru_cache(maxsize=None)
def _openai_client() -> tuple[Any, _MockServer]:
    """One SDK client over a mock transport, built once so that its setup is not timed."""
    import httpx
    import openai

    server = _MockServer()
    client = openai.OpenAI(
        api_key="x", base_url="http://test/v1", http_client=httpx.Client(transport=httpx.MockTransport(server))
    )
    return client, server


def _sdk(protocol: Protocol, chunks: list[bytes]) -> int:
    import openai

    client, server = _openai_client()
    server.chunks = chunks
    if protocol == "responses":
        stream = client.responses.create(model="gpt-4.1", input="Hi", stream=True)
    elif protocol == "completions":
        stream = client.completions.create(model="m", prompt="Hi", stream=True)
    else:
        messages = [{"role": "user", "content": "Hi"}]
        stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
    n = 0
    try:
        for _ in stream:
            n += 1
    except openai.APIError:  # the SDK raises an event carrying an `error` instead of yielding it
        n += 1
    return n


@functools.lru_cache(maxsize=None)
def _genai_client() -> tuple[Any, _MockServer]:
    """One google-genai client over a mock transport, built once so that its setup is not timed."""
    import httpx
    from google import genai

    server = _MockServer()
    options = genai.types.HttpOptions(
        base_url="http://test", httpx_client=httpx.Client(transport=httpx.MockTransport(server))
    )
    return genai.Client(api_key="x", http_options=options), server


def _genai_stream(chunks: list[bytes]) -> int:
    """google-genai's ``models.generate_content_stream`` iterated: its SSE reading, ``json.loads``
    and pydantic ``model_validate`` of every chunk, as the SDK does them."""
    client, server = _genai_client()
    server.chunks = chunks
    n = 0
    for _ in client.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi"):
        n += 1
    return n


def _genai_accumulated(chunks: list[bytes]) -> int:
    """The same iteration, accumulated with the SDK's own types: candidate 0's parts joined as
    :class:`rapidsse.GeminiAccumulator` joins them (text of the same kind), into one
    ``GenerateContentResponse`` with the last chunk's usage."""
    from google.genai import types

    client, server = _genai_client()
    server.chunks = chunks
    parts: list[Any] = []
    n, last = 0, None
    for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi"):
        n += 1
        last = chunk
        for part in chunk.candidates[0].content.parts or []:
            previous = parts[-1] if parts else None
            if (part.text is not None and previous is not None and previous.text is not None
                    and bool(previous.thought) == bool(part.thought)
                    and not (previous.thought_signature and part.thought_signature)):
                previous.text += part.text
                previous.thought_signature = previous.thought_signature or part.thought_signature
            else:
                parts.append(part.model_copy())
    assert last is not None
    types.GenerateContentResponse(
        candidates=[types.Candidate(content=types.Content(role="model", parts=parts),
                                    finish_reason=last.candidates[0].finish_reason)],
        usage_metadata=last.usage_metadata, model_version=last.model_version, response_id=last.response_id,
    )  # fmt: skip
    return n


def _sdk_completions_joined(chunks: list[bytes]) -> int:
    """The openai SDK's ``completions.create(stream=True)`` iterated, each choice's text joined by
    hand (the SDK has no accumulator for this API), the last usage kept."""
    client, server = _openai_client()
    server.chunks = chunks
    texts: dict[int, list[str]] = {}
    n, usage = 0, None
    for chunk in client.completions.create(model="m", prompt="Hi", stream=True):
        n += 1
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts.setdefault(choice.index, []).append(choice.text)
    assert usage is not None and {i: "".join(t) for i, t in texts.items()}
    return n


def _tap_into(cls_name: str, result: str, chunks: list[bytes]) -> int:
    """The tap of an accumulator (``cls_name``): raw bytes in, then the final object (``result``)."""
    acc = getattr(accumulate, cls_name)()
    feed = acc.feed
    for chunk in chunks:
        feed(chunk)
    assert getattr(acc, result) is not None
    return acc.events


def _tap_into_python(cls_name: str, result: str, chunks: list[bytes]) -> int:
    with using("python"):
        return _tap_into(cls_name, result, chunks)


def _typed_added(protocol: Protocol, cls_name: str, result: str, chunks: list[bytes]) -> int:
    """``for event in iter_events(...)``: ``acc.add(event)``, then the final object."""
    acc = getattr(accumulate, cls_name)()
    add = acc.add
    for event in decoding.iter_events(chunks, protocol):
        add(event)
    assert getattr(acc, result) is not None
    return acc.events


def _tap(chunks: list[bytes]) -> int:
    """The tap: raw bytes into a ResponseAccumulator, then the final Response."""
    return _tap_into("ResponseAccumulator", "response", chunks)


def _typed_iterated(chunks: list[bytes]) -> int:
    """Iterating the typed events of a Responses stream, as a user does: ``for event in
    iter_events(...)``."""
    n = 0
    for _ in decoding.iter_events(chunks):
        n += 1
    return n


def _typed_add(chunks: list[bytes]) -> int:
    """The same iteration, each event added to a ResponseAccumulator, then the Response."""
    return _typed_added("responses", "ResponseAccumulator", "response", chunks)


def _stream_responses(chunks: list[bytes]) -> int:
    """The convenience: ``stream_responses`` iterated, then its Response."""
    stream = accumulate.stream_responses(chunks)
    n = 0
    for _ in stream:
        n += 1
    assert stream.response is not None
    return n


def _sdk_final_response(chunks: list[bytes]) -> int:
    """The openai SDK's accumulating stream: ``client.responses.stream(...)``, iterated to the
    end, then ``get_final_response()``."""
    client, server = _openai_client()
    server.chunks = chunks
    n = 0
    with client.responses.stream(model="gpt-4.1", input="Hi") as stream:
        for _ in stream:
            n += 1
        stream.get_final_response()
    return n


class _AsyncMockServer(_MockServer):
    """:class:`_MockServer` for an ``httpx.AsyncClient``: the body is an async iterator."""

    def __call__(self, request: Any) -> Any:
        import httpx

        async def body() -> Any:
            for chunk in self.chunks:
                yield chunk

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())


@functools.lru_cache(maxsize=None)
def _mock_client(asynchronous: bool = False) -> tuple[Any, _MockServer]:
    """One ``httpx.Client`` (or ``httpx.AsyncClient``) over a mock transport, built once."""
    import httpx

    server = _AsyncMockServer() if asynchronous else _MockServer()
    client = httpx.AsyncClient if asynchronous else httpx.Client
    return client(transport=httpx.MockTransport(server)), server


def _httpx_sse_module(name: str) -> Any:
    """httpx-sse itself, or rapidsse's drop-in (``"rapidsse"``) or rapidsse's own httpx helpers
    (``"rapidsse.httpx"``): each has ``connect_sse`` / ``aconnect_sse`` and ``iter_sse`` /
    ``aiter_sse``."""
    if name == "rapidsse":
        from .integrations import httpx_sse

        return httpx_sse
    if name == "rapidsse.httpx":
        from .integrations import httpx

        return httpx
    return importlib.import_module(name)


def _iter_sse_over_mock(module_name: str, chunks: list[bytes]) -> int:
    """``for sse in event_source.iter_sse()`` over ``connect_sse`` as httpx-sse's README has it,
    the response served from ``chunks`` by a mock transport."""
    module = _httpx_sse_module(module_name)
    client, server = _mock_client()
    server.chunks = chunks
    n = 0
    with module.connect_sse(client, "GET", "http://test/sse") as event_source:
        for _ in event_source.iter_sse():
            n += 1
    return n


def _aiter_sse_over_mock(module_name: str, chunks: list[bytes]) -> int:
    """The async twin of :func:`_iter_sse_over_mock` (one ``asyncio.run`` per stream)."""
    import asyncio

    module = _httpx_sse_module(module_name)
    client, server = _mock_client(asynchronous=True)
    server.chunks = chunks

    async def run() -> int:
        n = 0
        async with module.aconnect_sse(client, "GET", "http://test/sse") as event_source:
            async for _ in event_source.aiter_sse():
                n += 1
        return n

    return asyncio.run(run())


def _with_event_count(chunks: list[bytes]) -> tuple[int, list[bytes]]:
    return len(_PySSEDecoder(None).feed(b"".join(chunks))), chunks


def _bytes_over_mock(counted: tuple[int, list[bytes]]) -> int:
    """The floor: the same request, its body read with ``iter_bytes()`` and not parsed (returns
    the event count :func:`_with_event_count` found, outside the timed region)."""
    events, chunks = counted
    client, server = _mock_client()
    server.chunks = chunks
    with client.stream("GET", "http://test/sse") as response:
        for _ in response.iter_bytes():
            pass
    return events


def _sse_over_corpus(run: Callable[[list[bytes]], int], corpus: list[tuple[Protocol, list[bytes]]]) -> int:
    return sum([run(chunks) for _, chunks in corpus])


def _over_corpus(run: Callable[[Protocol, list[bytes]], int], corpus: list[tuple[Protocol, list[bytes]]]) -> int:
    return sum([run(protocol, chunks) for protocol, chunks in corpus])


# ---------------------------------------------------------------------------------------------------
# Async vs sync: the same chunks from a list and from an async generator


async def _achunks(chunks: list[bytes]) -> Any:
    for chunk in chunks:
        yield chunk


def _completed(coroutine: Any) -> int:
    """Runs a coroutine that never suspends (its source is in memory) to its end, without an
    event loop, so that only the iteration is timed."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("the coroutine suspended: an in-memory source never should")


async def _acount(events: Any) -> int:
    n = 0
    async for _ in events:
        n += 1
    return n


def _count(events: Any) -> int:
    n = 0
    for _ in events:
        n += 1
    return n


def _iterated(backend: str, make: Callable[..., Any], chunks: list[bytes], *args: Any) -> int:
    """``for event in make(chunks, *args)`` on ``backend``, counted."""
    with using(backend):
        return _count(make(chunks, *args))


def _aiterated(backend: str, make: Callable[..., Any], chunks: list[bytes], *args: Any) -> int:
    """``async for event in make(async generator of chunks, *args)`` on ``backend``, counted."""
    with using(backend):
        return _completed(_acount(make(_achunks(chunks), *args)))


def _async_contenders(protocol: Protocol) -> list[Contender]:
    """Each sync iteration and its async twin over the same chunks, the twin's ratio taken
    against it: ``iter_events`` on both backends, ``stream_*`` and (Responses) ``iter_sse``."""
    from .accumulate import stream_chat, stream_responses
    from .framing import aiter_sse, iter_sse

    pairs: list[tuple[str, str, Callable[..., Any], Callable[..., Any], tuple[str, ...]]] = [
        (backend, "iter_events", functools.partial(decoding.iter_events, protocol=protocol),
         functools.partial(decoding.aiter_events, protocol=protocol), requires)
        for backend, requires in (("rust", _RUST), ("python", ()))
    ]
    stream = stream_responses if protocol == "responses" else stream_chat
    pairs.append(("rust", stream.__name__, stream, stream, _RUST))
    if protocol == "responses":  # (a Chat stream has one SSE event more than typed chunks: [DONE])
        pairs.append(("rust", "iter_sse", iter_sse, aiter_sse, _RUST))
    rows: list[Contender] = []
    for backend, name, sync, asynchronous, requires in pairs:
        baseline = f"rapidsse {backend}, for event in {name}(list)"
        rows += [
            Contender(baseline, functools.partial(_iterated, backend, sync), requires),
            Contender(f"rapidsse {backend}, async for event in {('a' + name) if name.startswith('iter') else name}"
                      "(async generator)", functools.partial(_aiterated, backend, asynchronous), requires,
                      baseline=baseline),
        ]
        if backend == "rust" and name == "iter_events":
            # The Rust backend's decoder under the pure backend's async loop (one Python async
            # generator), against which the native AsyncDrain was adopted: docs/internals.md.
            rows.append(Contender(f"rapidsse rust, async for event in aiter_events, Python async generator loop",
                                  functools.partial(_aiterated, backend, functools.partial(_aiter_events_generator,
                                                                                       protocol=protocol)),
                                  requires, baseline=baseline))
    # The source alone, no decoding: what the async generator costs over the list it yields
    # from is part of every async row's ratio (docs/benchmarks.md). Timed per event of the stream.
    bare_list = "chunks alone, for chunk in list, drained bare"
    prepare = functools.partial(_chunks_with_event_count, protocol)
    rows += [
        Contender(bare_list, _drained_bare, prepare=prepare, baseline="rapidsse rust, for event in iter_events(list)"),
        Contender("chunks alone, async for chunk in async generator, drained bare", _adrained_bare, prepare=prepare,
                  baseline=bare_list),
    ]
    return rows


def _chunks_with_event_count(protocol: Protocol, chunks: list[bytes]) -> tuple[list[bytes], int]:
    """The chunks and the number of events they hold (decoded once, outside the timed region), which
    the bare drains report so that their time per event compares with the decoding rows'."""
    return chunks, _count(decoding.iter_events(chunks, protocol=protocol))


def _drained_bare(prepared: tuple[list[bytes], int]) -> int:
    """``for chunk in chunks`` and nothing else; returns the events the chunks hold."""
    chunks, n_events = prepared
    _count(chunks)
    return n_events


def _adrained_bare(prepared: tuple[list[bytes], int]) -> int:
    """``async for chunk in`` an async generator of the chunks, and nothing else (run to completion
    without an event loop); returns the events the chunks hold."""
    chunks, n_events = prepared
    _completed(_acount(_achunks(chunks)))
    return n_events


def _aiter_events_generator(source: Any, protocol: Protocol) -> Any:
    """``aiter_events`` with its loop the pure backend's async generator, ``framing._adrain``."""
    from .framing import _adrain

    decoder = decoding.EventDecoder(protocol)
    return _adrain(decoder.feed, decoding._achunks(source), decoding._finished(decoder), decoder.close)


def _one_chunk(chunks: list[bytes]) -> list[bytes]:
    return [b"".join(chunks)]


@dataclass(frozen=True)
class Contender:
    """One parser in one group.

    ``run(inputs) -> int`` parses the group's :class:`Workload` inputs and returns the number of
    events produced. ``prepare``, when set, turns those inputs into ``run``'s argument outside the
    timed region (the msgspec floor gets its payloads pre-split; the one-chunk runs get the chunks
    joined). ``requires`` names the modules ``run`` imports; :attr:`skipped` is the import error
    when one is missing, ``None`` when the contender can run. Ratios are taken against the group's
    ``baseline`` contender (by default the first: rapidsse's Rust backend).
    """

    name: str
    run: Callable[[Any], int]
    requires: tuple[str, ...] = ()
    prepare: Callable[[Any], Any] | None = None
    baseline: str | None = None
    skipped: str | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped", _unavailable(self.requires))


def _unavailable(modules: tuple[str, ...]) -> str | None:
    """Why a contender that imports ``modules`` cannot run (``None`` when it can)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{type(exc).__name__}: {exc}"
    if _RUST[0] in modules and BACKEND != "rust":
        return "RAPIDSSE_BACKEND=python: the Rust backend is not live"
    return None


_RUST = ("rapidsse._rapidsse",)
_SDK = ("httpx", "openai")
_GENAI = ("httpx", "google.genai")


def contenders(group: str) -> list[Contender]:
    """The contenders of ``group`` (one of :data:`GROUPS`), the baseline first."""
    if group == FRAMING:
        return [
            Contender("rapidsse rust", _frame_rust, _RUST),
            Contender("rapidsse python", _frame_python),
            Contender("httpx-sse", _frame_httpx_sse, ("httpx", "httpx_sse")),
            Contender("openai SSEDecoder", _frame_openai, ("openai",)),
            Contender("sseclient-py", _frame_sseclient, ("sseclient",)),
        ]
    if group in (TYPED_RESPONSES, TYPED_CHAT):
        protocol: Protocol = "responses" if group == TYPED_RESPONSES else "chat"
        schema = responses.Event if protocol == "responses" else chat.ChatCompletionChunk
        return [
            Contender("rapidsse rust", functools.partial(_typed_rust, protocol), _RUST),
            Contender("rapidsse python", functools.partial(_typed_python, protocol)),
            Contender("msgspec floor", functools.partial(_msgspec_floor, schema), prepare=_split_payloads),
            Contender("openai SDK", functools.partial(_sdk, protocol), _SDK),
        ]
    if group == LARGE_EVENT:
        rust, python = "rapidsse rust, one chunk", "rapidsse python, one chunk"
        uncapped_rust = functools.partial(_frame_rust, max_event_size=None)  # 64 MiB > the default cap
        uncapped_python = functools.partial(_frame_python, max_event_size=None)
        return [
            Contender(rust, uncapped_rust, _RUST, prepare=_one_chunk),
            Contender("rapidsse rust, 4 KiB chunks", uncapped_rust, _RUST, baseline=rust),
            Contender(python, uncapped_python, prepare=_one_chunk, baseline=python),
            Contender("rapidsse python, 4 KiB chunks", uncapped_python, baseline=python),
        ]
    if group == CORPUS:
        return [
            Contender("rapidsse rust", functools.partial(_over_corpus, _typed_rust), _RUST),
            Contender("rapidsse python", functools.partial(_over_corpus, _typed_python)),
            Contender("openai SDK", functools.partial(_over_corpus, _sdk), _SDK),
        ]
    if group == ACCUMULATE:
        return [
            Contender("rapidsse rust, tap (feed bytes)", _tap, _RUST),
            Contender("rapidsse rust, typed events counted (as in the typed group)",
                      functools.partial(_typed_rust, "responses"), _RUST),
            Contender("rapidsse rust, for event in iter_events()", _typed_iterated, _RUST),
            Contender("rapidsse rust, for event in iter_events(): add(event)", _typed_add, _RUST),
            Contender("rapidsse rust, stream_responses()", _stream_responses, _RUST),
            Contender("rapidsse python, tap", _tap_python),
            Contender("openai SDK, responses.stream + get_final_response", _sdk_final_response, _SDK),
        ]
    if group in (HTTPX_SSE, HTTPX_SSE_ASYNC, HTTPX_SSE_CORPUS):
        over = _aiter_sse_over_mock if group == HTTPX_SSE_ASYNC else _iter_sse_over_mock
        ours, theirs = functools.partial(over, "rapidsse"), functools.partial(over, "httpx_sse")
        if group == HTTPX_SSE_CORPUS:
            ours, theirs = functools.partial(_sse_over_corpus, ours), functools.partial(_sse_over_corpus, theirs)
        httpx_sse = ("httpx", "httpx_sse")
        rows = [
            Contender("rapidsse.integrations.httpx_sse (rust)", ours, ("httpx",) + _RUST),
            Contender("httpx-sse", theirs, httpx_sse),
        ]
        if group == HTTPX_SSE:
            rows += [
                Contender("rapidsse.integrations.httpx (rapidsse's own events)",
                          functools.partial(over, "rapidsse.httpx"), ("httpx",) + _RUST),
                Contender("httpx alone: iter_bytes(), not parsed (the floor)", _bytes_over_mock, ("httpx",),
                          prepare=_with_event_count),
            ]
        return rows
    if group in (TYPED_GEMINI, TYPED_COMPLETIONS):
        protocol = "gemini" if group == TYPED_GEMINI else "completions"
        schema = gemini.GenerateContentResponse if protocol == "gemini" else completions.Completion
        peer = (Contender("google-genai generate_content_stream", _genai_stream, _GENAI) if protocol == "gemini"
                else Contender("openai SDK completions.create(stream=True)", functools.partial(_sdk, protocol), _SDK))
        return [
            Contender("rapidsse rust", functools.partial(_typed_rust, protocol), _RUST),
            Contender("rapidsse python", functools.partial(_typed_python, protocol)),
            Contender("msgspec floor", functools.partial(_msgspec_floor, schema), prepare=_split_payloads),
            peer,
        ]
    if group == GEMINI_ACCUMULATE:
        tap = functools.partial(_tap_into, "GeminiAccumulator", "response")
        return [
            Contender("rapidsse rust, tap (feed bytes)", tap, _RUST),
            Contender("rapidsse rust, typed events counted", functools.partial(_typed_rust, "gemini"), _RUST),
            Contender("rapidsse rust, for event in iter_events(): add(event)",
                      functools.partial(_typed_added, "gemini", "GeminiAccumulator", "response"), _RUST),
            Contender("rapidsse python, tap", functools.partial(_tap_into_python, "GeminiAccumulator", "response")),
            Contender("google-genai generate_content_stream, parts joined", _genai_accumulated, _GENAI),
        ]
    if group == COMPLETIONS_ACCUMULATE:
        return [
            Contender("rapidsse rust, tap (feed bytes)",
                      functools.partial(_tap_into, "CompletionsAccumulator", "completion"), _RUST),
            Contender("rapidsse rust, for event in iter_events(): add(event)",
                      functools.partial(_typed_added, "completions", "CompletionsAccumulator", "completion"), _RUST),
            Contender("rapidsse python, tap",
                      functools.partial(_tap_into_python, "CompletionsAccumulator", "completion")),
            Contender("openai SDK completions.create(stream=True), texts joined", _sdk_completions_joined, _SDK),
        ]
    if group in (ANTHROPIC, ANTHROPIC_MIXED):
        return _anthropic_contenders()
    if group in (ASYNC_RESPONSES, ASYNC_CHAT):
        return _async_contenders("responses" if group == ASYNC_RESPONSES else "chat")
    if group in (CHAT_ACCUMULATE, CHAT_ACCUMULATE_MIXED) or group in _CHAT_CORPUS_GROUPS:
        return _chat_accumulate_contenders(over_corpus=group in _CHAT_CORPUS_GROUPS, streamed=group == CHAT_ACCUMULATE)
    raise ValueError(f"unknown group {group!r}; one of {GROUPS}")


def _tap_python(chunks: list[bytes]) -> int:
    return _tap_into_python("ResponseAccumulator", "response", chunks)


# ---------------------------------------------------------------------------------------------------
# Chat Completions, accumulated

_CHAT_TOOL_ARGS = '{"location": "Paris, France", "unit": "celsius", "days": 3, "details": ["wind", "rain"]}'


def _chat_chunk(choices: list[Any], **extra: Any) -> bytes:
    """One ``chat.completion.chunk`` as OpenAI sends it with ``include_usage`` (``usage: null``)."""
    return _sse(None, {
        "id": _CHAT_ID, "object": "chat.completion.chunk", "created": 1756315696, "model": "gpt-4o-2024-08-06",
        "service_tier": "default", "system_fingerprint": "fp_80956533cb", "usage": None, "choices": choices, **extra,
    })  # fmt: skip


def _chat_choice(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def _chat_usage(completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": 91, "completion_tokens": completion_tokens, "total_tokens": 91 + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    }  # fmt: skip


def _args_pieces(n: int) -> list[str]:
    """:data:`_CHAT_TOOL_ARGS` (repeated to be long enough) cut into ``n`` pieces, as a model
    streams a tool call's arguments: a few characters each."""
    text = _CHAT_TOOL_ARGS
    while len(text) < 3 * n:
        text = text[:-1] + ', "more": ' + _CHAT_TOOL_ARGS + "}"
    step = len(text) / n
    return [text[round(i * step):round((i + 1) * step)] for i in range(n)]


def _tool_call_chunks(choice: int, call: int, name: str, n_args: int) -> list[dict[str, Any]]:
    """The choices of one tool call's chunks: its start (id, name, empty arguments), then
    ``n_args`` argument deltas."""
    start = {"index": call, "id": f"call_{choice}{call}Qn7XhYdPzBVbcs2wRk", "type": "function",
             "function": {"name": name, "arguments": ""}}  # fmt: skip
    out = [_chat_choice(choice, {"tool_calls": [start]})]
    for piece in _args_pieces(n_args):
        out.append(_chat_choice(choice, {"tool_calls": [{"index": call, "function": {"arguments": piece}}]}))
    return out


def chat_tool_stream(n_text: int = 2000, n_args: int = 120) -> tuple[bytes, int]:
    """OpenAI's Chat stream of a text answer that ends in a tool call, and its chunk count: a role
    chunk, ``n_text`` content deltas, the tool call's start and ``n_args`` argument deltas, a
    ``finish_reason: "tool_calls"`` chunk, a usage chunk and ``[DONE]``; every chunk but the usage
    chunk padded with OpenAI's per-chunk ``obfuscation`` field."""
    choices = [_chat_choice(0, {"role": "assistant", "content": "", "refusal": None})]
    choices += [_chat_choice(0, {"content": _delta(i)}) for i in range(n_text)]
    choices += _tool_call_chunks(0, 0, "get_weather", n_args)
    choices.append(_chat_choice(0, {}, "tool_calls"))
    out = [_chat_chunk([c], obfuscation=_obfuscation(i, str(c["delta"])[-12:])) for i, c in enumerate(choices)]
    out.append(_chat_chunk([], usage=_chat_usage(n_text + n_args)))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out), len(choices) + 1


def chat_mixed_stream(n_text: int = 2000, n_args: int = 120) -> tuple[bytes, int]:
    """An ``n=2`` Chat stream, and its chunk count: each choice's role chunk, ``n_text`` content
    deltas taking turns between the two choices, then two parallel tool calls per choice, one
    after the other (``n_args`` argument deltas in all), the choices taking turns, each choice's
    finish chunk, a usage chunk and ``[DONE]``; every chunk padded with ``obfuscation``."""
    choices = [_chat_choice(c, {"role": "assistant", "content": "", "refusal": None}) for c in (0, 1)]
    choices += [_chat_choice(i % 2, {"content": _delta(i)}) for i in range(n_text)]
    calls = [[chunk for call, name in enumerate(("get_weather", "get_time"))
              for chunk in _tool_call_chunks(c, call, name, max(1, n_args // 4))] for c in (0, 1)]  # fmt: skip
    for turn in itertools.zip_longest(*calls):
        choices += [c for c in turn if c is not None]
    choices += [_chat_choice(c, {}, "tool_calls") for c in (0, 1)]
    out = [_chat_chunk([c], obfuscation=_obfuscation(i, str(c["delta"])[-12:])) for i, c in enumerate(choices)]
    out.append(_chat_chunk([], usage=_chat_usage(n_text + n_args), obfuscation="k0"))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out), len(choices) + 1


def _sdk_final_completion(chunks: list[bytes]) -> int:
    """The openai SDK's accumulating Chat stream: ``client.chat.completions.stream(...)``, iterated
    to the end (its chunk events counted), then ``get_final_completion()``."""
    import openai

    client, server = _openai_client()
    server.chunks = chunks
    n = 0
    messages = [{"role": "user", "content": "Hi"}]
    with client.chat.completions.stream(model="gpt-4o", messages=messages) as stream:
        try:
            for event in stream:
                n += event.type == "chunk"
        except openai.APIError:  # an `error` chunk: raised, and the stream ends (corpus recordings)
            return n + 1
        try:
            assert stream.get_final_completion().choices
        except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError):
            pass  # raised from the accumulated completion, whose work is done
    return n


def _litellm_offline() -> None:
    # LiteLLM's import would fetch a model price list over the network; it ships a copy.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@functools.lru_cache(maxsize=None)
def _litellm() -> Any:
    _litellm_offline()
    litellm = importlib.import_module("litellm")
    litellm.suppress_debug_info = True  # else it prints a provider list for every unknown model
    return litellm


def _litellm_built(payloads: list[bytes]) -> int:
    """What a LiteLLM gateway does to have the final response: each chunk's JSON parsed (LiteLLM
    parses with the standard library), then ``litellm.stream_chunk_builder`` over the chunks."""
    import json

    chunks = [json.loads(p) for p in payloads]
    assert _litellm().stream_chunk_builder(chunks).choices
    return len(chunks)


def _litellm_wrapped(payloads: list[bytes]) -> int:
    """LiteLLM's own chunk objects: each payload parsed and made the ``ModelResponseStream`` its
    stream wrapper yields (and a gateway holds), then ``stream_chunk_builder`` over them."""
    import json

    litellm = _litellm()
    chunks = [litellm.ModelResponseStream(**json.loads(p)) for p in payloads]
    assert litellm.stream_chunk_builder(chunks).choices
    return len(chunks)


def _litellm_streamed(chunks: list[bytes]) -> int:
    """What a LiteLLM gateway runs per stream: ``litellm.completion(stream=True)`` over the same
    bytes (through the openai SDK client and mock transport of the SDK's row, so the same transport
    cost), iterated to the end, then ``stream_chunk_builder`` over what it yielded."""
    litellm = _litellm()
    client, server = _openai_client()
    server.chunks = chunks
    messages = [{"role": "user", "content": "Hi"}]
    stream = litellm.completion(model="openai/gpt-4o", messages=messages, stream=True, client=client,
                                api_key="x", api_base="http://test/v1")
    got = list(stream)
    final = litellm.stream_chunk_builder(got, messages=messages)
    assert final.choices and final.usage.completion_tokens
    # LiteLLM reads the usage-only chunk without yielding it (its figures reach the built response)
    return len(got) + 1


def _chat_accumulate_contenders(over_corpus: bool, streamed: bool = False) -> list[Contender]:
    """The final-ChatCompletion groups' contenders (over every chat recording when ``over_corpus``)."""
    _litellm_offline()
    def each(run: Callable[[list[bytes]], int]) -> Callable[[Any], int]:
        if not over_corpus:
            return run
        return functools.partial(_sse_over_corpus, run)

    def split(inputs: Any) -> Any:
        return [_split_payloads(chunks) for _, chunks in inputs] if over_corpus else _split_payloads(inputs)

    def floor(payloads: Any) -> int:
        if not over_corpus:
            return _msgspec_floor(chat.ChatCompletionChunk, payloads)
        return sum(_msgspec_floor(chat.ChatCompletionChunk, p) for p in payloads)

    def litellm(payloads: Any) -> int:
        return sum(map(_litellm_built, payloads)) if over_corpus else _litellm_built(payloads)

    rows = [
        Contender("rapidsse rust, tap (feed bytes) + .completion",
                  each(functools.partial(_tap_into, "ChatAccumulator", "completion")), _RUST),
        Contender("rapidsse rust, typed iter_events(protocol=\"chat\") counted",
                  each(functools.partial(_typed_rust, "chat")), _RUST),
        Contender("rapidsse rust, for event in iter_events(): add(event), + .completion",
                  each(functools.partial(_typed_added, "chat", "ChatAccumulator", "completion")), _RUST),
        Contender("msgspec floor: each payload decoded as ChatCompletionChunk", floor, prepare=split),
        Contender("rapidsse python, tap",
                  each(functools.partial(_tap_into_python, "ChatAccumulator", "completion"))),
        Contender("openai SDK chat.completions.stream + get_final_completion", each(_sdk_final_completion), _SDK),
    ]
    def wrapped(payloads: Any) -> int:
        return sum(map(_litellm_wrapped, payloads)) if over_corpus else _litellm_wrapped(payloads)

    rows.append(Contender("LiteLLM stream_chunk_builder (payloads parsed by json.loads)", litellm,
                          ("litellm",), prepare=split))
    rows.append(Contender("LiteLLM stream_chunk_builder over ModelResponseStream chunks (json.loads each)", wrapped,
                          ("litellm",), prepare=split))
    if streamed:  # the one-choice stream (LiteLLM's stream wrapper folds chunks of n=2 ones)
        rows.append(Contender("LiteLLM completion(stream=True) + stream_chunk_builder (SDK transport)",
                              _litellm_streamed, ("litellm",)))
    return rows


# ---------------------------------------------------------------------------------------------------
# Anthropic Messages

_ANTHROPIC_MESSAGE_ID = "msg_01QmxBSdEbD9ZeBWDVgFDoQ5"
_ANTHROPIC_RAW = frozenset(
    ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
)


def anthropic_stream(n_events: int = 1700) -> bytes:
    """An Anthropic Messages stream of exactly ``n_events`` events, shaped like the recordings.

    ``message_start``; a thinking block (a sixth of the deltas, then its ``signature_delta``); a
    ``server_tool_use`` web search whose query streams as ``input_json_delta``\\s, and its
    ``web_search_tool_result`` (five results); a text block of the other deltas, with a
    ``citations_delta``; a ``tool_use`` block whose input streams as ``input_json_delta``\\s;
    ``message_delta`` with the usage and ``message_stop``. Every event has its ``event:`` line,
    and payloads are written as Anthropic writes them.
    """
    fixed = 15  # the events that are not text, thinking or input deltas
    n_deltas = n_events - fixed
    if n_deltas < 12:
        raise ValueError(f"an Anthropic stream here needs at least {fixed + 12} events")
    n_thinking, n_search_json, n_tool_json = n_deltas // 6, 4, n_deltas // 10
    n_text = n_deltas - n_thinking - n_search_json - n_tool_json
    event, delta, json_pieces = _anthropic_event, _anthropic_delta, _json_pieces
    out = [_anthropic_message_start(_ANTHROPIC_MESSAGE_ID, "claude-sonnet-4-20250514", (2679, 0, 0, 3))]
    out.append(event("content_block_start", index=0, content_block={"type": "thinking", "thinking": "", "signature": ""}))
    out += [delta(0, type="thinking_delta", thinking=_delta(i)) for i in range(n_thinking)]
    out.append(delta(0, type="signature_delta", signature="EqQBCkYIBxgCKkDL" * 12))
    out.append(event("content_block_stop", index=0))
    search = {"type": "server_tool_use", "id": "srvtoolu_01FYcUbzEaqqQh1WBRj1QX3h", "name": "web_search", "input": {}}
    out.append(event("content_block_start", index=1, content_block=search))
    for piece in json_pieces({"query": "San Francisco weather today"}, n_search_json):
        out.append(delta(1, type="input_json_delta", partial_json=piece))
    out.append(event("content_block_stop", index=1))
    results = [
        {"type": "web_search_result", "title": f"Weather {k}", "url": f"https://example.com/weather/{k}",
         "encrypted_content": "EpMCCioIBxgCIiQ" * 20, "page_age": "1 week ago"}
        for k in range(5)
    ]  # fmt: skip
    result_block = {"type": "web_search_tool_result", "tool_use_id": search["id"], "content": results}
    out.append(event("content_block_start", index=2, content_block=result_block))
    out.append(event("content_block_stop", index=2))
    out.append(event("content_block_start", index=3, content_block={"type": "text", "text": ""}))
    citation = {
        "type": "web_search_result_location", "cited_text": "Sunny, high of 68F.", "url": results[0]["url"],
        "title": results[0]["title"], "encrypted_index": "EpEBCioIBxgCIiQ" * 4,
    }  # fmt: skip
    out.append(delta(3, type="citations_delta", citation=citation))
    out += [delta(3, type="text_delta", text=_delta(i)) for i in range(n_text)]
    out.append(event("content_block_stop", index=3))
    tool = {"type": "tool_use", "id": "toolu_01EKqbqmZrGRXy18eN7m9kvY", "name": "make_file", "input": {}}
    out.append(event("content_block_start", index=4, content_block=tool))
    lines = [_delta(i) for i in range(n_tool_json * 2)]
    for piece in json_pieces({"filename": "weather.txt", "lines_of_text": lines}, n_tool_json):
        out.append(delta(4, type="input_json_delta", partial_json=piece))
    out.append(event("content_block_stop", index=4))
    out.append(event("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None},
                     usage={"input_tokens": 2679, "output_tokens": n_deltas, "server_tool_use": {"web_search_requests": 1}}))
    out.append(event("message_stop"))
    assert len(out) == n_events, (len(out), n_events)
    return b"".join(out)


def _anthropic_message_start(message_id: str, model: str, tokens: tuple[int, int, int, int]) -> bytes:
    """A ``message_start`` event; ``tokens``: input, cache created, cache read, output."""
    input_tokens, cache_created, cache_read, output_tokens = tokens
    usage = {
        "input_tokens": input_tokens, "cache_creation_input_tokens": cache_created,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": cache_created, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens, "service_tier": "standard",
    }  # fmt: skip
    message = {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage,
    }  # fmt: skip
    return _anthropic_event("message_start", message=message)


def _anthropic_event(kind: str, **fields: Any) -> bytes:
    return _sse(kind, {"type": kind, **fields})


def _anthropic_delta(index: int, **fields: Any) -> bytes:
    return _anthropic_event("content_block_delta", index=index, delta=fields)


def _json_pieces(value: Any, n: int) -> list[str]:
    """``value``'s JSON cut into ``n`` pieces, as a tool's input streams."""
    text = _encode(value).decode()
    step = max(1, -(-len(text) // n))
    pieces = [text[i : i + step] for i in range(0, len(text), step)]
    return (pieces + [""] * n)[:n] if len(pieces) <= n else pieces[: n - 1] + ["".join(pieces[n - 1 :])]


def anthropic_mixed_stream(n_thinking: int = 300, n_text: int = 2000, n_tool_json: int = 100) -> bytes:
    """A held-out Anthropic stream that mixes every kind of delta, unlike :func:`anthropic_stream`'s
    long runs: ``message_start``; a thinking block of ``n_thinking``
    ``thinking_delta``\\s (longer pieces than text), its ``signature_delta``; ``n_text``
    ``text_delta``\\s spread over six text blocks, four of which open with one or two
    ``citations_delta``\\s (as an answer that cites its search results streams); a second thinking
    block (interleaved thinking); a ``tool_use`` block whose input streams as ``n_tool_json``
    ``input_json_delta``\\s; ``message_delta`` and ``message_stop``. The event count is
    :func:`anthropic_mixed_events`.
    """
    event, delta = _anthropic_event, _anthropic_delta
    out = [_anthropic_message_start("msg_01HcQx7LrV2ZpW8nYtB4kD3s", "claude-opus-4-1-20250805", (4121, 1520, 18034, 1))]
    index = 0

    def thinking(n: int, offset: int) -> None:
        nonlocal index
        out.append(event("content_block_start", index=index,
                         content_block={"type": "thinking", "thinking": "", "signature": ""}))
        out.extend(delta(index, type="thinking_delta", thinking=_delta(offset + i) + _delta(offset + 2 * i + 1))
                   for i in range(n))
        out.append(delta(index, type="signature_delta", signature="ErUBCkYIBRgCIkBx9Q" * 24))
        out.append(event("content_block_stop", index=index))
        index += 1

    def text(n: int, offset: int, citations: int) -> None:
        nonlocal index
        out.append(event("content_block_start", index=index, content_block={"type": "text", "text": ""}))
        for k in range(citations):
            citation = {
                "type": "web_search_result_location", "cited_text": f"Passage {index}.{k} of the source.",
                "url": f"https://example.org/article/{index}/{k}", "title": f"Article {index}",
                "encrypted_index": "Eo8BCioIBRgCIiQ" * 5,
            }  # fmt: skip
            out.append(delta(index, type="citations_delta", citation=citation))
        out.extend(delta(index, type="text_delta", text=_delta(offset + i)) for i in range(n))
        out.append(event("content_block_stop", index=index))
        index += 1

    n_first_thinking = n_thinking - n_thinking // 6
    thinking(n_first_thinking, 0)
    share = [n_text * w // 20 for w in (6, 2, 3, 2, 3)]
    for k, (n, cites) in enumerate(zip(share, (0, 1, 2, 1, 2))):
        text(n, 1000 * k, cites)
    thinking(n_thinking - n_first_thinking, 7)
    text(n_text - sum(share), 9000, 0)
    tool = {"type": "tool_use", "id": "toolu_01Wq3nV8cXk2bZr6HtY5pL9e", "name": "write_report", "input": {}}
    out.append(event("content_block_start", index=index, content_block=tool))
    report = {"title": "Weather \"today\"", "sections": [{"heading": _delta(i), "body": _delta(i + 5)} for i in range(n_tool_json)]}
    out.extend(delta(index, type="input_json_delta", partial_json=p) for p in _json_pieces(report, n_tool_json))
    out.append(event("content_block_stop", index=index))
    out.append(event("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None},
                     usage={"output_tokens": n_thinking + n_text + n_tool_json,
                            "server_tool_use": {"web_search_requests": 2}}))
    out.append(event("message_stop"))
    return b"".join(out)


def anthropic_mixed_events(n_thinking: int = 300, n_text: int = 2000, n_tool_json: int = 100) -> int:
    """The number of events in :func:`anthropic_mixed_stream` of these counts."""
    # message_start; two thinking blocks (start, signature, stop); six text blocks (start,
    # stop) and their six citations; the tool block (start, stop); message_delta, message_stop.
    return n_thinking + n_text + n_tool_json + 1 + 2 * 3 + 6 * 2 + 6 + 2 + 2


_ANTHROPIC_SDK = ("anthropic",)


@functools.lru_cache(maxsize=None)
def _anthropic_client() -> tuple[Any, _MockServer]:
    """One anthropic SDK client over a mock transport of the HTTP package it is built on (httpx,
    or httpx2 in its newer releases), built once so that its setup is not timed."""
    import anthropic

    base_client = importlib.import_module("anthropic._base_client")
    source = Path(base_client.__file__).read_text(encoding="utf-8")
    httpx = importlib.import_module("httpx2" if "import httpx2" in source else "httpx")
    server = _MockServer(httpx)
    client = anthropic.Anthropic(api_key="x", http_client=httpx.Client(transport=httpx.MockTransport(server)))
    return client, server


_ANTHROPIC_REQUEST = {"model": "claude-sonnet-4-20250514", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]}


def _anthropic_sdk_iterated(chunks: list[bytes]) -> int:
    """The anthropic SDK's typed events: ``messages.create(stream=True)`` iterated."""
    client, server = _anthropic_client()
    server.chunks = chunks
    n = 0
    for _ in client.messages.create(**_ANTHROPIC_REQUEST, stream=True):
        n += 1
    return n


def _anthropic_sdk_final(chunks: list[bytes]) -> int:
    """The anthropic SDK's accumulating stream: ``messages.stream(...)`` iterated to the end,
    then ``get_final_message()`` (the raw events counted, not the text events it adds)."""
    client, server = _anthropic_client()
    server.chunks = chunks
    n = 0
    with client.messages.stream(**_ANTHROPIC_REQUEST) as stream:
        for event in stream:
            n += event.type in _ANTHROPIC_RAW
        stream.get_final_message()
    return n


def _anthropic_tap(chunks: list[bytes]) -> int:
    """The tap: raw bytes into an AnthropicAccumulator, then the final Message."""
    return _tap_into("AnthropicAccumulator", "message", chunks)


def _anthropic_tap_python(chunks: list[bytes]) -> int:
    return _tap_into_python("AnthropicAccumulator", "message", chunks)


def _anthropic_contenders() -> list[Contender]:
    from . import anthropic

    return [
        Contender("rapidsse rust, typed events", functools.partial(_typed_rust, "anthropic"), _RUST),
        Contender("rapidsse python, typed events", functools.partial(_typed_python, "anthropic")),
        Contender("msgspec floor", functools.partial(_msgspec_floor, anthropic.Event), prepare=_split_payloads),
        Contender("anthropic SDK, messages.create(stream=True)", _anthropic_sdk_iterated, _ANTHROPIC_SDK),
        Contender("rapidsse rust, tap (feed bytes) + message", _anthropic_tap, _RUST),
        Contender("rapidsse python, tap + message", _anthropic_tap_python),
        Contender("anthropic SDK, messages.stream + get_final_message", _anthropic_sdk_final, _ANTHROPIC_SDK),
    ]


# ---------------------------------------------------------------------------------------------------
# Workloads and timing


@dataclass(frozen=True)
class Workload:
    """One group's input: what every contender parses, the event count each must return, and the
    input size. For the corpus, ``inputs`` is a list of ``(protocol, chunks)``, one per recording."""

    inputs: Any
    n_events: int
    n_bytes: int


def workload(group: str, n_events: int = 3000) -> Workload:
    """The input of ``group``: ``n_events`` events for the synthetic streams, cut in
    :data:`CHUNK_SIZE`-byte chunks; one 64 MiB event in 4 KiB chunks; or every recording.

    Raises :class:`FileNotFoundError` for the corpus group when the corpus is missing.
    """
    if group in (FRAMING, TYPED_RESPONSES, ACCUMULATE, HTTPX_SSE, HTTPX_SSE_ASYNC, ASYNC_RESPONSES):
        data = responses_stream(n_events)
        return Workload(chunked(data, CHUNK_SIZE), n_events, len(data))
    if group in (TYPED_CHAT, ASYNC_CHAT):
        data = chat_stream(n_events)
        return Workload(chunked(data, CHUNK_SIZE), n_events, len(data))
    if group in (TYPED_GEMINI, GEMINI_ACCUMULATE):
        data = gemini_stream(n_events)
        return Workload(chunked(data, CHUNK_SIZE), n_events, len(data))
    if group in (TYPED_COMPLETIONS, COMPLETIONS_ACCUMULATE):
        data = completions_stream(n_events)
        return Workload(chunked(data, CHUNK_SIZE), n_events, len(data))
    if group == LARGE_EVENT:
        data = large_event_stream()
        return Workload(chunked(data, LARGE_CHUNK_SIZE), 1, len(data))
    if group == ANTHROPIC:
        data = anthropic_stream(n_events * 1700 // 3000)
        return Workload(chunked(data, CHUNK_SIZE), n_events * 1700 // 3000, len(data))
    if group in (CHAT_ACCUMULATE, CHAT_ACCUMULATE_MIXED):
        make = chat_tool_stream if group == CHAT_ACCUMULATE else chat_mixed_stream
        data, n = make(n_text=n_events * 2000 // 3000, n_args=n_events * 120 // 3000)
        return Workload(chunked(data, CHUNK_SIZE), n, len(data))
    if group in _CHAT_CORPUS_GROUPS:
        recordings = [r for r in corpus_recordings() if r.protocol == "chat"]
        if group != CHAT_ACCUMULATE_CORPUS:
            short = group == CHAT_ACCUMULATE_CORPUS_SHORT
            recordings = [r for r in recordings if (_typed_event_count(r) < SHORT_STREAM) == short]
        inputs = [("chat", chunked(r.data, CHUNK_SIZE)) for r in recordings]
        return Workload(inputs, sum(map(_typed_event_count, recordings)), sum(len(r.data) for r in recordings))
    if group == ANTHROPIC_MIXED:
        counts = (300 * n_events // 3000, 2000 * n_events // 3000, 100 * n_events // 3000)
        data = anthropic_mixed_stream(*counts)
        return Workload(chunked(data, CHUNK_SIZE), anthropic_mixed_events(*counts), len(data))
    if group == CORPUS:
        recordings = corpus_recordings()
        inputs = [(r.protocol, chunked(r.data, CHUNK_SIZE)) for r in recordings]
        return Workload(inputs, sum(map(_typed_event_count, recordings)), sum(len(r.data) for r in recordings))
    if group == HTTPX_SSE_CORPUS:
        recordings = corpus_recordings()
        inputs = [(r.protocol, chunked(r.data, CHUNK_SIZE)) for r in recordings]
        n_events = sum(len(_PySSEDecoder(None).feed(r.data)) for r in recordings)
        return Workload(inputs, n_events, sum(len(r.data) for r in recordings))
    raise ValueError(f"unknown group {group!r}; one of {GROUPS}")


def _typed_event_count(recording: Recording) -> int:
    """How many typed events a recording holds: its SSE events up to ``data: [DONE]``."""
    n = 0
    for event in _PySSEDecoder(None).feed(recording.data):
        if event.data == "[DONE]":
            break
        n += 1
    return n


class _Timing:
    """One contender's runs on one workload: prepared and checked once, then timed in slices."""

    def __init__(self, contender: Contender, inputs: Any, n_events: int) -> None:
        self.contender = contender
        self.n_events = n_events
        self.n_bytes = _input_size(inputs)
        self.prepared = contender.prepare(inputs) if contender.prepare else inputs
        produced = contender.run(self.prepared)  # also the warm-up run
        if produced != n_events:
            raise AssertionError(f"{contender.name} produced {produced} events, expected {n_events}")
        self.times: list[float] = []

    def time(self, min_time: float, min_rounds: int) -> None:
        """Runs until both ``min_time`` seconds and ``min_rounds`` runs have passed."""
        run, prepared, clock = self.contender.run, self.prepared, time.perf_counter
        deadline = clock() + min_time
        for rounds in itertools.count(1):
            start = clock()
            run(prepared)
            end = clock()
            self.times.append(end - start)
            if rounds >= min_rounds and end >= deadline:
                return

    def result(self) -> dict[str, float]:
        median = statistics.median(self.times)
        return {
            "median_us_per_event": median * 1e6 / self.n_events,
            "mb_per_s": self.n_bytes / median / 1e6,
            "rounds": len(self.times),
        }


def measure(
    contender: Contender, inputs: Any, n_events: int, min_time: float = 1.0, min_rounds: int = 5
) -> dict[str, float]:
    """Times ``contender`` on ``inputs``: one warm-up run, then runs until both ``min_time`` seconds
    and ``min_rounds`` runs have passed. ``prepare`` is applied once, outside the timed region.

    Returns ``median_us_per_event``, ``mb_per_s`` (input bytes per second at the median) and
    ``rounds``. Raises :class:`AssertionError` when the contender does not produce ``n_events``
    events, so that a broken contender fails instead of looking fast.
    """
    timing = _Timing(contender, inputs, n_events)
    timing.time(min_time, min_rounds)
    return timing.result()


def _input_size(inputs: Any) -> int:
    if inputs and isinstance(inputs[0], tuple):  # the corpus: (protocol, chunks) pairs
        return sum(_input_size(chunks) for _, chunks in inputs)
    return sum(map(len, inputs))


def run_all(quick: bool = False, groups: tuple[str, ...] = GROUPS) -> list[dict[str, Any]]:
    """Times every contender of every group; ``quick`` uses 300-event streams and short runs.

    The contenders of a group are timed in interleaved slices (each gets ``1 / passes`` of its
    time in every pass) so that a burst of load on a shared machine hits them all alike; each
    reports the median of all its runs, as :func:`measure` does.

    Returns one row per contender: ``group``, ``contender``, ``us_per_event``, ``mb_per_s``,
    ``ratio`` (its time over its baseline's: how many times slower than rapidsse rust), ``rounds``
    and ``skipped`` (why it was not timed, else ``None``).
    """
    n_events, min_time, passes = (300, 0.1, 3) if quick else (3000, 1.0, 5)
    rows: list[dict[str, Any]] = []
    for group in groups:
        group_contenders = contenders(group)
        try:
            load = workload(group, n_events)
        except FileNotFoundError as exc:
            rows += [_row(group, c.name, skipped=str(exc)) for c in group_contenders]
            continue
        timings = [_Timing(c, load.inputs, load.n_events) for c in group_contenders if not c.skipped]
        for _ in range(passes):
            for timing in timings:
                timing.time(min_time / passes, 1)
        results = {t.contender.name: t.result() for t in timings}
        for contender in group_contenders:
            result = results.get(contender.name)
            if result is None:
                rows.append(_row(group, contender.name, skipped=contender.skipped))
                continue
            row = _row(group, contender.name, result["median_us_per_event"], result["mb_per_s"], result["rounds"])
            baseline = results.get(contender.baseline or group_contenders[0].name)
            if baseline is not None:
                row["ratio"] = result["median_us_per_event"] / baseline["median_us_per_event"]
            rows.append(row)
    return rows


def _row(
    group: str,
    contender: str,
    us: float | None = None,
    mb: float | None = None,
    rounds: int = 0,
    skipped: str | None = None,
) -> dict[str, Any]:
    return {
        "group": group, "contender": contender, "us_per_event": us, "mb_per_s": mb,
        "ratio": None, "rounds": rounds, "skipped": skipped,
    }  # fmt: skip


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`run_all` as one Markdown table (skipped contenders say why)."""
    lines = [
        "| group | contender | µs/event | MB/s | × baseline time | rounds |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        if row["skipped"]:
            lines.append(f"| {row['group']} | {row['contender']} | skipped: {row['skipped']} | | | |")
            continue
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(
            f"| {row['group']} | {row['contender']} | {_figure(row['us_per_event'])} "
            f"| {_figure(row['mb_per_s'])} | {ratio} | {row['rounds']} |"
        )
    return "\n".join(lines)


def _figure(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"
