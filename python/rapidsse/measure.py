"""The client side of a serving benchmark: time to first token, inter-token latency, throughput.

``rapidsse measure --url URL [--requests N] [--concurrency C] [--protocol responses|chat]
[--body JSON] [--json FILE]`` sends ``N`` streaming requests, ``C`` at a time, and reports the
percentiles (p50/p90/p99) of time to first token (TTFT) and inter-token latency (ITL), per-request
latency and throughput, totals and errors.

A "token" is one text delta as the server streams it: ``output_text``, ``refusal``, reasoning and
tool-argument deltas (Responses), or a chunk whose choices carry content, refusal, reasoning or tool
call deltas (Chat). Each chunk of bytes is timestamped once on arrival and decoded by rapidsse's
:class:`~rapidsse.EventDecoder` (one msgspec call per chunk); a :class:`~rapidsse.ResponseAccumulator`
/ :class:`~rapidsse.ChatAccumulator` taps the same bytes for the final status and usage. So the meter
costs little per token, and deltas that arrive in one chunk share its timestamp (an ITL of 0).

A request fails when it raises (connect error, timeout, bad stream), returns a non-2xx status or
no event stream, or when the stream reports a failure (``response.failed``, an ``error`` event).
The exit code is 0 when every request succeeded, 1 when one failed, or for bad arguments or a
missing dependency (as for the rest of the command line).

Needs httpx; shows a progress bar with rich when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from . import chat, responses
from .accumulate import ChatAccumulator, ResponseAccumulator
from .decoding import EventDecoder
from .errors import SSEError
from .integrations import expect_event_stream, protocol_for_path

__all__ = ["RequestResult", "measure", "register", "run", "summarize"]

DEFAULT_BODIES = {
    "responses": {"model": "default", "input": "Say hello."},
    "chat": {"model": "default", "messages": [{"role": "user", "content": "Say hello."}]},
}
_ROUTES = {"responses": "/responses", "chat": "/chat/completions"}
_RESPONSES_TOKEN_TYPES = (
    responses.OutputTextDelta,
    responses.RefusalDelta,
    responses.ReasoningTextDelta,
    responses.ReasoningSummaryTextDelta,
    responses.FunctionCallArgumentsDelta,
    responses.CustomToolCallInputDelta,
)


@dataclass
class RequestResult:
    """What one request measured. Times are seconds; ``ttft`` and ``token_times`` count from the
    moment the request was sent."""

    ok: bool = False
    status_code: int | None = None
    error: str | None = None
    latency: float = 0.0
    ttft: float | None = None
    token_times: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    """The server's own ``usage`` count of output tokens, when it sent one."""

    @property
    def tokens(self) -> int:
        """Text deltas received."""
        return len(self.token_times)

    @property
    def itls(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive text deltas."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def tokens_per_s(self) -> float | None:
        """Text deltas per second of the request's whole latency."""
        return self.tokens / self.latency if self.latency > 0 and self.tokens else None


def _responses_tokens(events: list[Any]) -> int:
    return sum(isinstance(event, _RESPONSES_TOKEN_TYPES) for event in events)


def _chat_tokens(events: list[Any]) -> int:
    count = 0
    for event in events:
        if isinstance(event, chat.ChatCompletionChunk):
            for choice in event.choices:
                delta = choice.delta
                if delta is not None and (
                    delta.content or delta.refusal or delta.reasoning or delta.reasoning_content or delta.tool_calls
                ):
                    count += 1
                    break
    return count


_TOKEN_COUNTERS: dict[str, Callable[[list[Any]], int]] = {"responses": _responses_tokens, "chat": _chat_tokens}


def _failure(protocol: str, accumulator: Any) -> str | None:
    """The failure the stream itself reported, if any."""
    if protocol == "responses":
        final = accumulator.response
        if final is not None and final.status == "failed":
            message = final.error.message if final.error is not None else None
            return f"response.failed: {message or 'no message'}"
    errors = [w for w in accumulator.warnings if w.startswith("error event")]
    return errors[0] if errors else None


def _usage_output_tokens(protocol: str, accumulator: Any) -> int | None:
    final = accumulator.response if protocol == "responses" else accumulator.completion
    usage = getattr(final, "usage", None)
    if usage is None:
        return None
    return usage.output_tokens if protocol == "responses" else usage.completion_tokens


async def _one_request(client: Any, url: str, protocol: str, body: dict[str, Any]) -> RequestResult:
    import httpx

    result = RequestResult()
    decoder = EventDecoder(protocol, on_error="skip")  # type: ignore[arg-type]
    accumulator: Any = (ResponseAccumulator if protocol == "responses" else ChatAccumulator)(on_error="skip")
    count_tokens = _TOKEN_COUNTERS[protocol]
    clock = time.perf_counter
    token_times = result.token_times
    start = clock()
    try:
        async with client.stream("POST", url, json=body, headers={"accept": "text/event-stream"}) as response:
            result.status_code = response.status_code
            if not response.is_success:
                await response.aread()
                result.error = f"HTTP {response.status_code}: {response.text[:200]}"
            else:
                expect_event_stream(response.headers.get("content-type"), response.status_code, response)
                async for chunk in response.aiter_bytes():
                    now = clock() - start
                    accumulator.feed(chunk)
                    tokens = count_tokens(decoder.feed(chunk))
                    if tokens:
                        if result.ttft is None:
                            result.ttft = now
                        token_times.extend([now] * tokens)
                accumulator.close()
                result.error = _failure(protocol, accumulator)
                result.output_tokens = _usage_output_tokens(protocol, accumulator)
    except (httpx.HTTPError, OSError, SSEError) as exc:
        result.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    result.ok = result.error is None
    result.latency = clock() - start
    return result


async def measure(
    url: str,
    *,
    requests: int = 10,
    concurrency: int = 1,
    protocol: str = "responses",
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    on_result: Callable[[RequestResult], None] | None = None,
) -> tuple[list[RequestResult], float]:
    """Sends ``requests`` streaming requests to ``url``, ``concurrency`` at a time.

    ``body`` is the request body (``"stream": true`` is forced); ``on_result`` is called as each
    request ends (e.g. to advance a progress bar). Returns the results, in order of sending, and the
    wall-clock duration in seconds.
    """
    import httpx

    if protocol not in _TOKEN_COUNTERS:
        raise ValueError(f"protocol must be 'responses' or 'chat', not {protocol!r}")
    if requests < 1 or concurrency < 1:
        raise ValueError("requests and concurrency must be at least 1")
    payload = {**(body if body is not None else DEFAULT_BODIES[protocol]), "stream": True}
    results: list[RequestResult | None] = [None] * requests
    next_index = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers) as client:

        async def worker() -> None:
            for index in next_index:
                result = await _one_request(client, url, protocol, payload)
                results[index] = result
                if on_result is not None:
                    on_result(result)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, requests))))
        wall = time.perf_counter() - start
    return [r for r in results if r is not None], wall


# --- Statistics --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, interpolating linearly; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _distribution(values: Sequence[float], scale: float = 1.0) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "min": None, "p50": None, "p90": None, "p99": None, "max": None}
    scaled = [v * scale for v in values]
    return {
        "mean": sum(scaled) / len(scaled),
        "min": min(scaled),
        "p50": percentile(scaled, 50),
        "p90": percentile(scaled, 90),
        "p99": percentile(scaled, 99),
        "max": max(scaled),
    }


def summarize(results: Sequence[RequestResult], wall: float) -> dict[str, Any]:
    """The report: totals, errors and distributions (milliseconds for times) over the successful
    requests."""
    good = [r for r in results if r.ok]
    tokens = sum(r.tokens for r in good)
    usage = [r.output_tokens for r in good if r.output_tokens is not None]
    errors = Counter(r.error for r in results if not r.ok)
    return {
        "requests": len(results),
        "succeeded": len(good),
        "errors": len(results) - len(good),
        "error_messages": dict(errors.most_common(10)),
        "duration_s": wall,
        "requests_per_s": len(good) / wall if wall > 0 else None,
        "tokens": tokens,
        "tokens_per_s": tokens / wall if wall > 0 else None,
        "usage_output_tokens": sum(usage) if usage else None,
        "ttft_ms": _distribution([r.ttft for r in good if r.ttft is not None], 1000.0),
        "itl_ms": _distribution([gap for r in good for gap in r.itls], 1000.0),
        "latency_ms": _distribution([r.latency for r in good], 1000.0),
        "request_tokens_per_s": _distribution([t for r in good if (t := r.tokens_per_s) is not None]),
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as a few aligned lines of text."""

    def row(label: str, dist: dict[str, float | None]) -> str:
        if dist["p50"] is None:
            return f"{label:<16} -"
        return (f"{label:<16} p50 {dist['p50']:9.2f}  p90 {dist['p90']:9.2f}  p99 {dist['p99']:9.2f}"
                f"  mean {dist['mean']:9.2f}")

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    lines = [
        f"{report['url']} ({report['protocol']}, concurrency {report['concurrency']})",
        f"{'requests':<16} {report['succeeded']} ok, {report['errors']} failed in {report['duration_s']:.2f} s "
        f"({rate(report['requests_per_s'])} req/s)",
        f"{'tokens':<16} {report['tokens']} text deltas ({rate(report['tokens_per_s'])} /s)"
        + (f", usage: {report['usage_output_tokens']} output tokens" if report["usage_output_tokens"] else ""),
        row("TTFT ms", report["ttft_ms"]),
        row("ITL ms", report["itl_ms"]),
        row("latency ms", report["latency_ms"]),
        row("tokens/s/req", report["request_tokens_per_s"]),
    ]
    lines += [f"{'error':<16} {count} x {message}" for message, count in report["error_messages"].items()]
    return "\n".join(lines)


# --- The command line ------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Adds the ``measure`` subcommand to the ``rapidsse`` command line."""
    parser = subparsers.add_parser(
        "measure",
        help="benchmark a streaming endpoint: TTFT, inter-token latency, throughput",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--url", required=True,
                        help="endpoint URL, e.g. http://127.0.0.1:8000/v1/responses (a base URL ending in "
                             "/v1 gets the protocol's route appended)")
    parser.add_argument("--requests", "-n", type=int, default=10, help="requests to send (default: %(default)s)")
    parser.add_argument("--concurrency", "-c", type=int, default=1, help="requests in flight (default: %(default)s)")
    parser.add_argument("--protocol", choices=["responses", "chat"],
                        help="default: chat when the URL ends in /chat/completions, else responses")
    parser.add_argument("--body", help='request body as JSON ("stream": true is added); default: a short prompt')
    parser.add_argument("--header", "-H", action="append", default=[], metavar="NAME: VALUE",
                        help="an extra request header (repeatable), e.g. 'Authorization: Bearer ...'")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default: %(default)s)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE ('-': stdout)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def _endpoint(url: str, protocol: str | None) -> tuple[str, str]:
    """The full endpoint URL and protocol for ``--url``/``--protocol``."""
    path = urlsplit(url).path.rstrip("/")
    if protocol is None:
        protocol = protocol_for_path(path)
    if not path.endswith(_ROUTES[protocol]):
        url = url.rstrip("/") + _ROUTES[protocol]
    return url, protocol


def _progress(total: int, enabled: bool) -> tuple[Callable[[RequestResult], None] | None, Callable[[], None]]:
    """A rich progress bar on stderr when enabled, installed and stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        return None, lambda: None
    progress = Progress(TextColumn("measure"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[failed]} failed"), console=Console(stderr=True), transient=True)
    task = progress.add_task("requests", total=total, failed=0)
    failed = 0

    def advance(result: RequestResult) -> None:
        nonlocal failed
        failed += not result.ok
        progress.update(task, advance=1, failed=failed)

    progress.start()
    return advance, progress.stop


def run(args: argparse.Namespace) -> int:
    """``rapidsse measure``: runs the benchmark, prints the report, returns the exit code."""
    try:
        import httpx  # noqa: F401
    except ImportError:
        print("rapidsse measure needs httpx: pip install 'rapidsse[measure]'", file=sys.stderr)
        return 1
    try:
        url, protocol = _endpoint(args.url, args.protocol)
        body = json.loads(args.body) if args.body else None
        if body is not None and not isinstance(body, dict):
            raise ValueError("--body must be a JSON object")
        headers = {}
        for header in args.header:
            name, sep, value = header.partition(":")
            if not sep:
                raise ValueError(f"--header {header!r} is not 'Name: value'")
            headers[name.strip()] = value.strip()
        if args.requests < 1 or args.concurrency < 1:
            raise ValueError("--requests and --concurrency must be at least 1")
    except ValueError as exc:
        print(f"rapidsse measure: {exc}", file=sys.stderr)
        return 1

    advance, stop = _progress(args.requests, not args.no_progress)
    try:
        results, wall = asyncio.run(measure(url, requests=args.requests, concurrency=args.concurrency,
                                            protocol=protocol, body=body, headers=headers,
                                            timeout=args.timeout, on_result=advance))
    finally:
        stop()
    report = {"url": url, "protocol": protocol, "concurrency": args.concurrency, **summarize(results, wall)}
    if args.json == "-":
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(report, out, indent=2)
    return 0 if report["errors"] == 0 else 1
