"""The ``rapidsse`` command line (also ``python -m rapidsse``).

Subcommands:

- ``demo``: replays real recorded Responses API streams and an Anthropic Messages stream (bundled in
  ``rapidsse/data``) through the parser, showing the text as it streams, the final responses and the
  parser's speed on those bytes;
- ``parse``: parses a recorded stream (SSE, or JSON lines for Realtime) and prints the final
  accumulated object, or every typed event as a JSON line;
- ``bench``: runs the benchmark harness of :mod:`rapidsse.bench`;
- ``serve``, ``measure`` and ``gateway``: registered by :mod:`rapidsse.serving`
  and :mod:`rapidsse.gateway`.

Every subcommand is a function ``func(args) -> int`` set with ``set_defaults(func=...)``; the
integer is the exit code: :data:`EXIT_OK`, :data:`EXIT_ERROR` (usage errors, unreadable files,
missing optional dependencies) or :data:`EXIT_BAD_INPUT` (a stream that cannot be parsed).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.resources
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import msgspec

from . import anthropic, chat, completions, gemini, realtime, responses
from ._backend import BACKEND
from ._schema import UnknownEvent
from ._wire import encode
from .accumulate import (RealtimeAccumulator, stream_anthropic, stream_chat, stream_completions, stream_gemini,
                         stream_responses)
from .decoding import InvalidEvent, decode_realtime, detect_protocol, iter_events
from .errors import DecodeError, EventTooLarge, SSEError
from .framing import DEFAULT_MAX_EVENT_SIZE

__all__ = ["EXIT_BAD_INPUT", "EXIT_ERROR", "EXIT_OK", "build_parser", "main"]

EXIT_OK = 0
"""Success."""
EXIT_ERROR = 1
"""A usage error, a file that cannot be read, or a missing optional dependency."""
EXIT_BAD_INPUT = 2
"""The input stream is bad: a payload that is not valid JSON or does not fit its schema
(:class:`rapidsse.DecodeError`), or an event over the size cap (:class:`rapidsse.EventTooLarge`)."""

PLUGINS = ("serving", "gateway")
"""Modules of this package that add a subcommand with ``register(subparsers)``."""

READ_SIZE = 64 * 1024
"""Bytes per read of the input file."""
DETECT_LIMIT = 1024 * 1024
"""How much of the input protocol detection may read before giving up."""

_EPILOG = """\
exit codes:
  0  success
  1  usage error, unreadable file, or a missing optional dependency
  2  bad input: an event that is not valid JSON, does not fit its schema, or is too large

backend: {backend} (RAPIDSSE_BACKEND=rust|python chooses; the compiled Rust core is preferred)
"""


# ---------------------------------------------------------------------------------------------------
# Terminal output


class Style:
    """ANSI styling, enabled only for a terminal (and not with ``NO_COLOR`` or ``TERM=dumb``)."""

    def __init__(self, stream: IO[str]) -> None:
        self.enabled = (
            stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        )

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and text else text

    def bold(self, text: str) -> str:
        """Bold text."""
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        """Faint text (reasoning, secondary details)."""
        return self._wrap("2", text)

    def cyan(self, text: str) -> str:
        """Tool calls."""
        return self._wrap("36", text)

    def green(self, text: str) -> str:
        """Success."""
        return self._wrap("32", text)

    def yellow(self, text: str) -> str:
        """Statuses other than success."""
        return self._wrap("33", text)


def _status(style: Style, status: str | None) -> str:
    text = status or "unknown status"
    return style.green(text) if status == "completed" else style.yellow(text)


def _field(label: str, value: str, indent: int = 2) -> str:
    """``label: value`` indented by ``indent``; the continuation lines of a multi-line value are
    indented two spaces more."""
    pad = " " * indent
    return f"{pad}{label}: " + value.replace("\n", "\n" + pad + "  ")


def _usage(*parts: tuple[str, int | None]) -> str:
    """The usage line: each count given (name, value) that is not None."""
    return _field("usage", " · ".join(f"{value:,} {name}" for name, value in parts if value is not None))


def _detail(details: Any, name: str) -> int | None:
    """A count of an optional details object (``usage.input_tokens_details``, ...)."""
    return None if details is None else getattr(details, name)


def _tool_call(style: Style, name: Any, arguments: Any, call_id: Any, indent: int = 2) -> str:
    """A tool call's line: ``name(arguments)``, and its id dimmed after it."""
    return _field("tool call", style.cyan(f"{name}({arguments})") + style.dim(f"  {call_id}"), indent)


# ---------------------------------------------------------------------------------------------------
# Human summaries of accumulated objects


def describe_response(response: responses.Response, style: Style) -> list[str]:
    """Lines summarising a Responses API response: status, model, each output item (reasoning,
    text, tool calls with their arguments) and usage."""
    lines = [
        f"{style.bold('response')} {response.id or '(no id)'}  {_status(style, response.status)}"
        f"  model {response.model or '?'}"
    ]
    for item in response.output:
        lines.extend(_describe_output_item(item, style))
    if response.error is not None:
        lines.append(_field("error", f"{response.error.code}: {response.error.message}"))
    if response.incomplete_details is not None and response.incomplete_details.reason:
        lines.append(_field("incomplete", response.incomplete_details.reason))
    usage = response.usage
    if usage is not None:
        lines.append(_usage(
            ("input", usage.input_tokens), ("cached", _detail(usage.input_tokens_details, "cached_tokens")),
            ("output", usage.output_tokens), ("reasoning", _detail(usage.output_tokens_details, "reasoning_tokens")),
            ("total", usage.total_tokens),
        ))  # fmt: skip
    return lines


def _describe_output_item(item: Any, style: Style) -> list[str]:
    if isinstance(item, responses.OutputMessage):
        lines = []
        for part in item.content:
            if isinstance(part, responses.OutputText):
                lines.append(_field("text", part.text))
            elif isinstance(part, responses.Refusal):
                lines.append(_field("refusal", part.refusal))
        return lines
    if isinstance(item, responses.ReasoningItem):
        summary = "\n".join(s.text for s in item.summary or [])
        text = "\n".join(p.text for p in item.content or [] if isinstance(p, responses.ReasoningText))
        if summary:
            return [style.dim(_field("reasoning summary", summary))]
        if text:
            return [style.dim(_field("reasoning", text))]
        return [style.dim(_field("reasoning", "(encrypted)" if item.encrypted_content else "(empty)"))]
    if isinstance(item, responses.FunctionCall):
        return [_tool_call(style, item.name, item.arguments, item.call_id)]
    if isinstance(item, responses.CustomToolCall):
        return [_tool_call(style, item.name, item.input, item.call_id)]
    if isinstance(item, responses.McpCall):
        return [_field("mcp call", style.cyan(f"{item.server_label}.{item.name}({item.arguments})"))]
    if isinstance(item, responses.WebSearchCall):
        query = getattr(item.action, "query", None)
        return [_field("web search", style.cyan(repr(query) if query else "") + f" {item.status or ''}".rstrip())]
    if isinstance(item, responses.CodeInterpreterCall):
        return [_field("code interpreter", style.cyan(item.code or ""))]
    status = getattr(item, "status", None)
    return [_field(item.type, status or "")]


def describe_completion(completion: chat.ChatCompletion, style: Style) -> list[str]:
    """Lines summarising a Chat Completion: model, each choice (finish reason, reasoning, text,
    refusal, tool calls with their arguments) and usage."""
    lines = [f"{style.bold('chat completion')} {completion.id or '(no id)'}  model {completion.model or '?'}"]
    for choice in completion.choices:
        lines.append(f"  choice {choice.index}  finish: {choice.finish_reason or '-'}")
        message = choice.message
        if message is None:
            continue
        reasoning = message.reasoning or message.reasoning_content
        if reasoning:
            lines.append(style.dim(_field("reasoning", reasoning, 4)))
        content = message.content
        if isinstance(content, list):
            content = "".join(part.text or "" for part in content)
        if content:
            lines.append(_field("text", content, 4))
        if message.refusal:
            lines.append(_field("refusal", message.refusal, 4))
        for call in message.tool_calls or []:
            function = call.function or chat.FunctionCall()
            lines.append(_tool_call(style, function.name, function.arguments, call.id, 4))
    usage = completion.usage
    if usage is not None:
        lines.append(_usage(
            ("prompt", usage.prompt_tokens), ("cached", _detail(usage.prompt_tokens_details, "cached_tokens")),
            ("completion", usage.completion_tokens),
            ("reasoning", _detail(usage.completion_tokens_details, "reasoning_tokens")), ("total", usage.total_tokens),
        ))  # fmt: skip
    return lines


def describe_gemini(response: gemini.GenerateContentResponse, style: Style) -> list[str]:
    """Lines summarising a Gemini response: model, each candidate (finish reason, thoughts,
    text, function calls, code and its results) and usage."""
    lines = [f"{style.bold('gemini response')} {response.response_id or '(no id)'}  model {response.model_version or '?'}"]
    for candidate in response.candidates or []:
        lines.append(f"  candidate {candidate.index or 0}  finish: {candidate.finish_reason or '-'}")
        for part in (candidate.content.parts if candidate.content else None) or []:
            if part.text is not None and part.thought:
                lines.append(style.dim(_field("thought", part.text, 4)))
            elif part.text:
                lines.append(_field("text", part.text, 4))
            elif part.function_call is not None:
                call = part.function_call
                args = msgspec.json.encode(call.args).decode() if call.args is not None else ""
                lines.append(_field("function call", style.cyan(f"{call.name}({args})") + style.dim(f"  {call.id or ''}".rstrip()), 4))
            elif part.executable_code is not None:
                lines.append(_field("code", style.cyan(part.executable_code.code or ""), 4))
            elif part.code_execution_result is not None:
                result = part.code_execution_result
                lines.append(_field("code result", f"{result.outcome or ''} {result.output or ''}".strip(), 4))
    if response.prompt_feedback is not None and response.prompt_feedback.block_reason:
        lines.append(_field("blocked", response.prompt_feedback.block_reason))
    usage = response.usage_metadata
    if usage is not None:
        lines.append(_usage(
            ("prompt", usage.prompt_token_count), ("cached", usage.cached_content_token_count),
            ("candidates", usage.candidates_token_count), ("thoughts", usage.thoughts_token_count),
            ("tool prompt", usage.tool_use_prompt_token_count), ("total", usage.total_token_count),
        ))  # fmt: skip
    return lines


def describe_text_completion(completion: completions.Completion, style: Style) -> list[str]:
    """Lines summarising a (legacy) text completion: model, each choice's finish reason and text,
    and usage."""
    lines = [f"{style.bold('text completion')} {completion.id or '(no id)'}  model {completion.model or '?'}"]
    for choice in completion.choices:
        lines.append(f"  choice {choice.index}  finish: {choice.finish_reason or '-'}")
        if choice.text:
            lines.append(_field("text", choice.text, 4))
        if choice.logprobs is not None and choice.logprobs.tokens:
            lines.append(style.dim(_field("logprobs", f"{len(choice.logprobs.tokens):,} tokens", 4)))
    usage = completion.usage
    if usage is not None:
        lines.append(_usage(
            ("prompt", usage.prompt_tokens), ("completion", usage.completion_tokens), ("total", usage.total_tokens),
        ))  # fmt: skip
    return lines


_ANTHROPIC_CALLS = (anthropic.ToolUseBlock, anthropic.ServerToolUseBlock, anthropic.McpToolUseBlock)
"""The Anthropic blocks that are tool calls (with a ``name`` and a streamed ``input``)."""


def describe_message(message: anthropic.Message, style: Style) -> list[str]:
    """Lines summarising an Anthropic Message: model, stop reason, each content block (thinking,
    text, tool calls with their input, other blocks by type) and usage."""
    lines = [
        f"{style.bold('message')} {message.id or '(no id)'}  model {message.model or '?'}"
        f"  stop: {message.stop_reason or '-'}"
    ]
    for block in message.content:
        if isinstance(block, anthropic.ThinkingBlock):
            lines.append(style.dim(_field("thinking", block.thinking)))
        elif isinstance(block, anthropic.TextBlock):
            lines.append(_field("text", block.text))
            if block.citations:
                lines.append(style.dim(_field("citations", str(len(block.citations)), 4)))
        elif isinstance(block, _ANTHROPIC_CALLS):
            lines.append(_tool_call(style, block.name, json.dumps(block.input, ensure_ascii=False), block.id))
        else:
            lines.append(style.dim(_field("block", block.type)))
    usage = message.usage
    if usage is not None:
        lines.append(_usage(
            ("input", usage.input_tokens), ("cache read", usage.cache_read_input_tokens),
            ("cache write", usage.cache_creation_input_tokens), ("output", usage.output_tokens),
        ))  # fmt: skip
    return lines


def describe_realtime(response: realtime.Response, style: Style) -> list[str]:
    """Lines summarising one Realtime response: status, each output item (text, audio
    transcript, function calls with their arguments) and usage."""
    lines = [f"{style.bold('response')} {response.id or '(no id)'}  {_status(style, response.status)}"]
    for item in response.output or []:
        if isinstance(item, realtime.Message):
            for part in item.content or []:
                if part.text:
                    lines.append(_field("text", part.text))
                if part.transcript:
                    lines.append(_field("transcript", part.transcript))
        elif isinstance(item, realtime.FunctionCall):
            lines.append(_tool_call(style, item.name, item.arguments, item.call_id))
        elif isinstance(item, realtime.McpCall):
            lines.append(_field("mcp call", style.cyan(f"{item.server_label}.{item.name}({item.arguments})")))
        else:
            lines.append(_field(item.type, getattr(item, "status", None) or ""))
    usage = response.usage
    if usage is not None:
        lines.append(_usage(
            ("input", usage.input_tokens), ("output", usage.output_tokens), ("total", usage.total_tokens),
        ))  # fmt: skip
    return lines


# ---------------------------------------------------------------------------------------------------
# demo


@dataclass(frozen=True)
class DemoRecording:
    """A bundled recording: its file in ``rapidsse/data``, a one-line title, and its protocol
    (``"responses"`` or ``"anthropic"``)."""

    file: str
    title: str
    protocol: str = "responses"

    def read(self) -> bytes:
        """The recorded bytes (read through importlib.resources, so it works from a wheel)."""
        return importlib.resources.files("rapidsse").joinpath("data", self.file).read_bytes()


DEMO = (
    DemoRecording("deepseek-tool-call.sse", "DeepSeek, turn 1: it reasons, then calls a tool"),
    DemoRecording("deepseek-tool-result.sse", "DeepSeek, turn 2: it answers with the tool's result"),
    DemoRecording("openai-web-search.sse", "OpenAI: it searches the web, then answers"),
    DemoRecording("anthropic-tool-use.sse", "Anthropic Messages: Claude answers, then calls a tool", "anthropic"),
)
"""What ``rapidsse demo`` replays, in order (see ``rapidsse/data/README.md`` for their origin)."""

DEMO_CHUNK_SIZE = 512
"""The replay cuts the bytes as a socket would deliver them: chunk boundaries fall anywhere."""
DEMO_DELAY = 0.03
"""Seconds per streamed delta at ``--speed 1``: about 33 tokens per second, a typical model."""
DEMO_BUDGET = 3.0
"""The whole paced replay takes at most about this many seconds at ``--speed 1``."""


class _LiveView:
    """Prints a stream's deltas as they arrive, one labelled line per kind (reasoning, text, call),
    pausing before each delta to pace the replay like a live model."""

    def __init__(self, out: IO[str], style: Style, delay: float) -> None:
        self.out = out
        self.style = style
        self.delay = delay
        self.kind: str | None = None

    def start(self, kind: str, label: str) -> None:
        """Starts a new line of ``kind`` unless one is already open."""
        if self.kind != kind:
            self.end()
            self.out.write(f"  {label}")
            self.kind = kind

    def write(self, text: str, paced: bool = True) -> None:
        """Writes text to the open line (continuation lines indented), then flushes."""
        if paced and self.delay:
            time.sleep(self.delay)
        styled = text.replace("\n", "\n    ")
        self.out.write(self.style.dim(styled) if self.kind == "reasoning" else styled)
        self.out.flush()

    def end(self) -> None:
        """Closes the open line, if any."""
        if self.kind is not None:
            self.out.write("\n")
            self.kind = None

    def show(self, event: Any) -> None:
        """Displays one typed Responses event."""
        style = self.style
        if isinstance(event, (responses.ReasoningTextDelta, responses.ReasoningSummaryTextDelta)):
            self.start("reasoning", style.dim("thinking: "))
            self.write(event.delta)
        elif isinstance(event, responses.OutputTextDelta):
            self.start("text", "")
            self.write(event.delta)
        elif isinstance(event, responses.OutputItemAdded) and isinstance(event.item, responses.FunctionCall):
            self.start("call", style.cyan(f"→ {event.item.name}("))
        elif isinstance(event, responses.FunctionCallArgumentsDelta):
            self.start("call", style.cyan("→ ("))
            self.write(style.cyan(event.delta))
        elif isinstance(event, responses.FunctionCallArgumentsDone) and self.kind == "call":
            self.write(style.cyan(")"), paced=False)
            self.end()
        elif isinstance(event, responses.WebSearchCallSearching):
            self.start("search", style.cyan("⌕ searching the web"))
            self.write(style.cyan("…"), paced=False)
            time.sleep(self.delay * 10)  # a search takes a while
        elif isinstance(event, responses.OutputItemDone):
            item = event.item
            if isinstance(item, responses.WebSearchCall):
                query = getattr(item.action, "query", None)
                self.start("search", style.cyan("⌕ searched the web"))
                self.write(style.cyan(f" {query!r}" if query else ""), paced=False)
                self.end()
            elif isinstance(item, responses.ReasoningItem) and item.encrypted_content and not item.content and not item.summary:
                self.start("reasoning", style.dim("thinking: "))
                self.write("(encrypted reasoning, not shown)", paced=False)
                self.end()
            elif isinstance(item, responses.OutputMessage):
                self.end()
        elif isinstance(event, anthropic.ContentBlockDelta):
            delta = event.delta
            if isinstance(delta, anthropic.ThinkingDelta):
                self.start("reasoning", style.dim("thinking: "))
                self.write(delta.thinking)
            elif isinstance(delta, anthropic.TextDelta):
                self.start("text", "")
                self.write(delta.text)
            elif isinstance(delta, anthropic.InputJsonDelta):
                self.start("call", style.cyan("→ ("))
                self.write(style.cyan(delta.partial_json))
        elif isinstance(event, anthropic.ContentBlockStart) and isinstance(event.content_block, _ANTHROPIC_CALLS):
            self.start("call", style.cyan(f"→ {event.content_block.name}("))
        elif isinstance(event, anthropic.ContentBlockStop):
            if self.kind == "call":
                self.write(style.cyan(")"), paced=False)
            self.end()


_DEMO_PROTOCOLS: dict[str, tuple[Callable[[Iterable[bytes]], Any], str, Callable[[Any, Style], list[str]]]] = {
    "responses": (stream_responses, "response", describe_response),
    "anthropic": (stream_anthropic, "message", describe_message),
}
"""The demo's protocols: how a stream is iterated and accumulated at once, the name of its final
object (an attribute of the stream), and how that object is described."""


def _demo(args: argparse.Namespace) -> int:
    """``rapidsse demo``: replay the bundled recordings, then time the parser on their bytes."""
    out = sys.stdout
    style = Style(out)
    streams = [(recording, recording.read()) for recording in DEMO]
    chunked = [(recording.protocol, _chunked(data, DEMO_CHUNK_SIZE)) for recording, data in streams]
    delay = 0.0
    if not args.no_stream:
        deltas = sum(_count_deltas(protocol, chunks) for protocol, chunks in chunked)
        delay = min(DEMO_DELAY, DEMO_BUDGET / max(deltas, 1)) / args.speed

    print(style.bold("rapidsse demo") + f": real recorded Responses API and Anthropic Messages streams through the parser, backend {BACKEND}")
    print(style.dim("(recorded by the test suites of pydantic-ai and anthropic-sdk-python, MIT licence: see rapidsse/data/README.md)"))
    for (recording, data), (_, chunks) in zip(streams, chunked):
        print()
        print(style.bold(f"▸ {recording.title}") + style.dim(f"  ({recording.file}, {len(data):,} bytes)"))
        view = _LiveView(out, style, delay)
        start, final, describe = _DEMO_PROTOCOLS[recording.protocol]
        stream = start(chunks)
        for event in stream:
            view.show(event)
        view.end()
        print(style.dim(f"  final {final}, as accumulated:"))
        for line in describe(getattr(stream, final), style):
            print("  " + line)
        for warning in stream.warnings:
            print(f"rapidsse demo: warning: {warning}", file=sys.stderr)

    events = _parse_only(chunked)
    n_bytes = sum(len(data) for _, data in streams)
    parse_time, rounds = _median_seconds(lambda: _parse_only(chunked))
    full_time, _ = _median_seconds(lambda: _parse_and_accumulate(chunked))
    print()
    print(style.bold("speed") + ": " + (
        f"parsed {events} events ({n_bytes / 1000:.1f} KB) in {parse_time * 1e6:,.0f} µs: "
        f"{parse_time * 1e6 / events:.2f} µs/event, {n_bytes / parse_time / 1e6:,.0f} MB/s, backend {BACKEND}"
    ))  # fmt: skip
    print(style.dim(
        f"       typed events from {DEMO_CHUNK_SIZE}-byte chunks, median of {rounds} runs; "
        f"{full_time * 1e6:,.0f} µs with the final responses accumulated too"
    ))  # fmt: skip
    return EXIT_OK


def _chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


_DELTA_TYPES = (
    responses.OutputTextDelta,
    responses.ReasoningTextDelta,
    responses.ReasoningSummaryTextDelta,
    responses.FunctionCallArgumentsDelta,
    anthropic.ContentBlockDelta,
)
"""The events the live view paces (one pause before each)."""


def _count_deltas(protocol: str, chunks: list[bytes]) -> int:
    return sum(isinstance(event, _DELTA_TYPES) for event in iter_events(chunks, protocol))  # type: ignore[arg-type]


def _parse_only(streams: list[tuple[str, list[bytes]]]) -> int:
    """Decodes the (protocol, chunks) streams into typed events; returns how many."""
    n = 0
    for protocol, chunks in streams:
        for _ in iter_events(chunks, protocol):  # type: ignore[arg-type]
            n += 1
    return n


def _parse_and_accumulate(streams: list[tuple[str, list[bytes]]]) -> None:
    """Decodes the (protocol, chunks) streams into typed events and builds each final object, as
    the demo does."""
    for protocol, chunks in streams:
        start, final, _ = _DEMO_PROTOCOLS[protocol]
        stream = start(chunks)
        for _ in stream:
            pass
        getattr(stream, final)  # building the final object is part of the work timed


def _median_seconds(run: Callable[[], Any], min_time: float = 0.2, min_rounds: int = 10) -> tuple[float, int]:
    """Times ``run``: one warm-up call, then calls until ``min_time`` seconds and ``min_rounds``
    calls have passed. Returns (median seconds per call, calls timed)."""
    run()
    times: list[float] = []
    clock = time.perf_counter
    deadline = clock() + min_time
    while len(times) < min_rounds or clock() < deadline:
        start = clock()
        run()
        times.append(clock() - start)
    return statistics.median(times), len(times)


# ---------------------------------------------------------------------------------------------------
# parse


class _Input:
    """The input of ``parse``: a file or stdin, read in chunks as they arrive (so that a live pipe
    is parsed as it streams), whose head can be peeked at for protocol detection without being
    lost. ``before_read`` is called before each read of more input (to flush the output)."""

    def __init__(self, file: IO[bytes], before_read: Callable[[], None]) -> None:
        self._read = getattr(file, "read1", file.read)
        self.before_read = before_read
        self.head: list[bytes] = []

    def peek(self) -> bytes | None:
        """Reads one more chunk into the head; None at end of input."""
        chunk = self._read(READ_SIZE)
        if not chunk:
            return None
        self.head.append(chunk)
        return chunk

    def chunks(self) -> Iterator[bytes]:
        """The whole input: the peeked head, then the rest."""
        yield from self.head
        self.head = []
        while True:
            self.before_read()
            chunk = self._read(READ_SIZE)
            if not chunk:
                return
            yield chunk


def _jsonl(chunks: Iterable[bytes], max_size: int | None) -> Iterator[tuple[int, bytes]]:
    """Splits JSON lines: yields (byte offset, line) for each non-blank line, in linear time.
    Raises :class:`EventTooLarge` for a line longer than ``max_size``."""
    buffer = bytearray()
    offset = 0  # of buffer[0] in the stream
    for chunk in chunks:
        searched = len(buffer)
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", searched)) != -1:
            line = bytes(buffer[start:end])
            _check_size(line, max_size, offset + start)
            if line.strip():
                yield offset + start, line
            start = searched = end + 1
        _check_size(buffer[start:], max_size, offset + start)
        del buffer[:start]
        offset += start
    if bytes(buffer).strip():
        yield offset, bytes(buffer)


def _check_size(line: bytes | bytearray, max_size: int | None, offset: int) -> None:
    if max_size is not None and len(line) > max_size:
        raise EventTooLarge(
            f"a message at byte {offset} is over the {max_size}-byte cap", limit=max_size, offset=offset
        )


def _realtime_events(chunks: Iterable[bytes], on_error: str, max_size: int | None,
                     accumulator: RealtimeAccumulator) -> Iterator[Any]:
    """Decodes JSON lines into typed Realtime events, feeding each valid one to ``accumulator``.

    A bad line raises :class:`DecodeError` with its message index and byte offset (``raise``), is
    dropped (``skip``) or yielded as :class:`InvalidEvent` (``keep``).
    """
    for index, (offset, line) in enumerate(_jsonl(chunks, max_size)):
        try:
            event = decode_realtime(line, index=index)
        except DecodeError as exc:
            error = DecodeError(exc.reason, index=index, event=exc.event, offset=offset, raw=exc.raw)
            if on_error == "raise":
                raise error from None
            if on_error == "keep":
                yield InvalidEvent(raw=exc.raw, event=exc.event, error=error)
            continue
        accumulator.feed(line)
        yield event


_encode = msgspec.json.Encoder().encode


def event_json(event: Any) -> bytes:
    """One typed event as a JSON line's content: the event's own JSON as received
    (:func:`rapidsse.encode`, ``type`` included);
    :class:`UnknownEvent` as ``{"type": ..., "raw": <its payload>}``; :class:`InvalidEvent` as
    ``{"error": ..., "index": ..., "offset": ..., "event": ..., "raw": <the payload as text>}``."""
    if isinstance(event, UnknownEvent):
        return _encode({"type": event.type, "raw": msgspec.Raw(event.raw)})
    if isinstance(event, InvalidEvent):
        error = event.error
        return _encode({
            "error": error.reason, "index": error.index, "offset": error.offset, "event": error.event,
            "raw": event.raw.decode("utf-8", "replace"),
        })  # fmt: skip
    return encode(event)


def _open(path: str) -> IO[bytes]:
    return sys.stdin.buffer if path == "-" else open(path, "rb")  # closed by the caller


def _parse(args: argparse.Namespace) -> int:
    """``rapidsse parse``: parse a recorded stream, print the final object or the events."""
    name = "stdin" if args.file == "-" else args.file
    try:
        file = _open(args.file)
    except OSError as exc:
        print(f"rapidsse parse: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return _parse_input(args, name, _Input(file, before_read=sys.stdout.buffer.flush))
    except OSError as exc:
        print(f"rapidsse parse: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if file is not sys.stdin.buffer:
            file.close()


def _parse_input(args: argparse.Namespace, name: str, source: _Input) -> int:
    """Detects the protocol (unless given), parses ``source`` and prints what ``args`` asks for."""
    protocol = args.protocol
    if protocol is None:
        read = 0
        while protocol is None and read < DETECT_LIMIT and (chunk := source.peek()) is not None:
            read += len(chunk)
            protocol = detect_protocol(b"".join(source.head))
        if protocol is None:
            why = "it is empty" if not read else f"no event in its first {read:,} bytes says"
            print(
                f"rapidsse parse: cannot tell the protocol of {name} ({why}); "
                "pass --protocol responses|chat|anthropic|gemini|completions|realtime",
                file=sys.stderr,
            )
            return EXIT_ERROR

    if protocol == "realtime":
        accumulator = RealtimeAccumulator(on_error="skip")
        events: Iterable[Any] = _realtime_events(source.chunks(), args.on_error, args.max_event_size, accumulator)
        result = lambda: accumulator.responses
    elif protocol == "anthropic":
        stream = stream_anthropic(source.chunks(), on_error=args.on_error, max_event_size=args.max_event_size)
        events = stream
        accumulator = stream.accumulator
        result = lambda: stream.message
    else:
        stream = _STREAMS[protocol](source.chunks(), on_error=args.on_error, max_event_size=args.max_event_size)
        events = stream
        accumulator = stream.accumulator
        result = (lambda: stream.response) if protocol in ("responses", "gemini") else (lambda: stream.completion)

    out = sys.stdout.buffer
    invalid: list[InvalidEvent] = []
    try:
        if args.events:
            for event in events:
                out.write(event_json(event) + b"\n")
        else:
            invalid = [event for event in events if isinstance(event, InvalidEvent)]
    except SSEError as exc:  # DecodeError, EventTooLarge
        out.flush()
        print(f"rapidsse parse: bad input in {name}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    if args.json:
        out.write(msgspec.json.format(_final_json(result()), indent=2) + b"\n")
    elif not args.events:
        _print_summary(protocol, result(), accumulator, invalid)
    out.flush()
    for warning in accumulator.warnings:
        print(f"rapidsse parse: warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _final_json(result: Any) -> bytes:
    """The final object as the JSON the server sent (``rapidsse.encode``); for Realtime, the
    responses by id."""
    if result is None:
        return b"null"
    if isinstance(result, dict):
        return b"{" + b",".join(_encode(key) + b":" + encode(value) for key, value in result.items()) + b"}"
    return encode(result)


_STREAMS = {"responses": stream_responses, "chat": stream_chat, "gemini": stream_gemini, "completions": stream_completions}


def _print_summary(protocol: str, result: Any, accumulator: Any, invalid: list[InvalidEvent]) -> None:
    style = Style(sys.stdout)
    if protocol == "realtime":
        lines = [line for response in result.values() for line in describe_realtime(response, style)]
    elif result is None:
        lines = []
    elif protocol == "responses":
        lines = describe_response(result, style)
    elif protocol == "anthropic":
        lines = describe_message(result, style)
    elif protocol == "gemini":
        lines = describe_gemini(result, style)
    elif protocol == "completions":
        lines = describe_text_completion(result, style)
    else:
        lines = describe_completion(result, style)
    if not lines:
        noun = {"chat": "completion", "completions": "completion", "anthropic": "message"}.get(protocol, "response")
        lines = [f"no {noun} in the stream"]
    counts = f"{_plural(accumulator.events, 'event')}, {accumulator.unknown_events} not used"
    if invalid:
        counts += f", {len(invalid)} invalid"
    print("\n".join(lines))
    print(style.dim(f"{protocol} stream: {counts}"))
    for event in invalid:
        print(f"rapidsse parse: invalid event: {event.error}", file=sys.stderr)


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


# ---------------------------------------------------------------------------------------------------
# bench


def _bench(args: argparse.Namespace) -> int:
    """``rapidsse bench``: run the harness, print the table, optionally save rows and a chart."""
    if args.plot is not None:
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            print("rapidsse bench: --plot needs matplotlib: pip install 'rapidsse[plot]'", file=sys.stderr)
            return EXIT_ERROR
    from . import bench

    print(
        f"running the benchmarks ({'quick' if args.quick else 'full: about a minute'}), backend {BACKEND}...",
        file=sys.stderr,
    )
    rows = bench.run_all(quick=args.quick)
    print(bench.format_table(rows))
    try:
        if args.json is not None:
            Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        if args.plot is not None:
            plot_rows(rows, args.plot)
    except OSError as exc:
        print(f"rapidsse bench: cannot write {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def plot_rows(rows: list[dict[str, Any]], path: str) -> None:
    """Draws the bench rows as one horizontal bar chart of µs/event per group (skipped
    contenders left out, the fastest at the top) and saves it to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if not row["skipped"]:
            groups.setdefault(row["group"], []).append(row)
    heights = [max(1.2, 0.45 * len(group_rows) + 0.8) for group_rows in groups.values()]
    fig, axes = plt.subplots(
        len(groups), 1, figsize=(9, sum(heights)), gridspec_kw={"height_ratios": heights}, squeeze=False
    )
    for ax, (group, group_rows) in zip(axes[:, 0], groups.items()):
        group_rows = sorted(group_rows, key=lambda row: row["us_per_event"], reverse=True)
        names = [row["contender"] for row in group_rows]
        values = [row["us_per_event"] for row in group_rows]
        colors = ["#d9480f" if name.startswith("rapidsse") else "#868e96" for name in names]
        bars = ax.barh(names, values, color=colors)
        ax.bar_label(bars, labels=[f" {v:.3g} µs" if v < 1000 else f" {v:,.0f} µs" for v in values], fontsize=8)
        ax.set_title(group, fontsize=10, loc="left")
        ax.set_xlabel("µs per event (lower is faster)", fontsize=8)
        ax.margins(x=0.2)
        ax.tick_params(labelsize=8)
    fig.suptitle(f"rapidsse bench (backend {BACKEND})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------
# The parser and the entry point


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors exit with :data:`EXIT_ERROR`, so that exit code 2
    means bad input only."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _positive_size(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _version() -> str:
    try:
        return importlib.metadata.version("rapidsse")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The ``rapidsse`` argument parser, with every subcommand registered."""
    parser = _Parser(
        prog="rapidsse",
        description="The fastest correct parser of LLM streaming APIs (SSE framing, typed events, accumulation).",
        epilog=_EPILOG.format(backend=BACKEND),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rapidsse {_version()} (backend {BACKEND})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo",
        help="replay real recorded streams through the parser",
        description="Replays real recorded Responses API streams (bundled) through the parser: the text "
        "as it streams, the final responses, then the parser's speed on the same bytes.",
    )
    demo.add_argument("--speed", type=_positive_float, default=1.0, help="replay N times faster (default 1)")
    demo.add_argument("--no-stream", action="store_true", help="no pacing: print everything at once")
    demo.set_defaults(func=_demo)

    parse = sub.add_parser(
        "parse",
        help="parse a recorded stream and print the result",
        description="Parses a recorded stream: SSE bytes (Responses, Chat Completions, Gemini, Completions) or one JSON message "
        "per line (Realtime). Prints a summary of the final accumulated object, or with --json the object "
        "as JSON, or with --events every typed event as one JSON line. Accumulator warnings go to stderr.",
        epilog=_EPILOG.format(backend=BACKEND),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parse.add_argument("file", metavar="FILE", help="the recording; - reads stdin")
    parse.add_argument(
        "--protocol", choices=("responses", "chat", "anthropic", "gemini", "completions", "realtime"),
        help="the stream's protocol (default: detected from the first events)",
    )  # fmt: skip
    output = parse.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the final object as JSON")
    output.add_argument("--events", action="store_true", help="print every typed event as a JSON line")
    parse.add_argument(
        "--on-error", choices=("raise", "skip", "keep"), default="raise",
        help="a bad event: stop with exit code 2 (raise, default), drop it (skip), or keep it as "
        "an invalid event (keep: reported on stderr, or as a JSON line with --events)",
    )  # fmt: skip
    parse.add_argument(
        "--max-event-size", type=_positive_size, default=DEFAULT_MAX_EVENT_SIZE, metavar="BYTES",
        help=f"cap on one event's size (default {DEFAULT_MAX_EVENT_SIZE}; none: no cap)",
    )  # fmt: skip
    parse.set_defaults(func=_parse)

    bench_parser = sub.add_parser(
        "bench",
        help="benchmark rapidsse against other parsers",
        description="Times rapidsse (both backends) and the parsers users would otherwise pick on the same "
        "inputs, and prints a Markdown table.",
    )
    bench_parser.add_argument("--quick", action="store_true", help="small inputs and short runs (seconds)")
    bench_parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    bench_parser.add_argument(
        "--plot", metavar="FILE.png", help="also draw a bar chart per group (needs matplotlib: rapidsse[plot])"
    )
    bench_parser.set_defaults(func=_bench)

    for name in PLUGINS:
        try:
            module = importlib.import_module(f"rapidsse.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rapidsse.{name}":
                raise
            continue  # a build without this subcommand
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")  # a console that cannot show "µs" or "→"
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `rapidsse parse --events x.sse | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
