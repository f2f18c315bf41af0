"""Memory: a 256 MiB stream fed in 64 KiB chunks keeps the resident set flat (framing, typed
decoding; accumulation grows only with the accumulated text), and 10^5 decoder/accumulator
lifetimes leak nothing. Both backends, in one process; the stream is generated lazily.

With ``RAPIDSSE_BACKEND`` set (as ``make test`` does, once per backend), only that backend is
checked; unset, both. The pure-Python backend runs the same 256 MiB streams (about 30 s in all: it
is fast on 64 KiB chunks) and 2*10^4 lifetimes instead of 10^5.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from rapidsse import ChatAccumulator, RealtimeAccumulator, ResponseAccumulator

from .test_hostile import BACKENDS, accumulator, event_decoder, sse_decoder

# The suite runs once per backend (RAPIDSSE_BACKEND=rust, then python: see the Makefile); these
# slow tests then check that run's backend only. Unset: both.
if os.environ.get("RAPIDSSE_BACKEND") in BACKENDS:
    BACKENDS = (os.environ["RAPIDSSE_BACKEND"],)

MiB = 1 << 20
CHUNK = 64 * 1024
STREAM_BYTES = {"rust": 256 * MiB, "python": 256 * MiB}
MAX_GROWTH = 64 * MiB

if not os.path.exists("/proc/self/status"):
    pytest.skip("RSS is read from /proc/self/status (Linux)", allow_module_level=True)


def rss(collect: bool = True) -> int:
    """The resident set, after a full collection unless ``collect`` is false (a collection walks
    every object the whole test session keeps alive: too slow to take every few chunks)."""
    if collect:
        gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


PADDING = "x" * 400  # like the `obfuscation` field of real streams: bytes that are not text


def delta_event(i: int) -> bytes:
    return (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,'
        b'"delta":"w%d ","obfuscation":"%s"}\n\n' % (i + 3, i % 10, PADDING.encode())
    )


HEAD = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
    b'"response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}\n\n'
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added","sequence_number":1,'
    b'"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","status":"in_progress","content":[]}}\n\n'
    b'event: response.content_part.added\ndata: {"type":"response.content_part.added","sequence_number":2,'
    b'"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}\n\n'
)


def stream(total: int) -> Iterator[bytes]:
    """``total`` bytes of a Responses stream in 64 KiB chunks (cut anywhere), made as it goes."""
    buf = bytearray(HEAD)
    i = 0
    sent = 0
    while sent < total:
        while len(buf) < CHUNK:
            buf += delta_event(i)
            i += 1
        chunk = bytes(buf[:CHUNK])
        del buf[:CHUNK]
        sent += len(chunk)
        yield chunk


def text_bytes(total: int) -> int:
    """The output text of ``stream(total)`` (about 3.5 bytes per 520-byte event)."""
    return int(total / len(delta_event(10)) * 3.2)


def drive(feed, total: int) -> tuple[int, int]:
    """Feeds the stream; returns (events seen, peak RSS growth sampled every 16 chunks)."""
    base = rss()
    peak = 0
    events = 0
    for n, chunk in enumerate(stream(total)):
        out = feed(chunk)
        events += len(out) if out is not None else 0
        del out
        if n % 16 == 0:
            peak = max(peak, rss(collect=False) - base)
    return events, max(peak, rss() - base)


@pytest.mark.parametrize("backend", BACKENDS)
def test_framing_a_256_mib_stream_keeps_rss_flat(backend):
    total = STREAM_BYTES[backend]
    events, growth = drive(sse_decoder(backend, None).feed, total)
    assert events > total // 600
    assert growth < MAX_GROWTH, f"RSS grew by {growth / MiB:.1f} MiB"


@pytest.mark.parametrize("backend", BACKENDS)
def test_typed_decoding_of_a_256_mib_stream_keeps_rss_flat(backend):
    total = STREAM_BYTES[backend]
    events, growth = drive(event_decoder(backend, "responses", "raise", None).feed, total)
    assert events > total // 600
    assert growth < MAX_GROWTH, f"RSS grew by {growth / MiB:.1f} MiB"


@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulating_a_256_mib_stream_grows_only_with_the_text(backend):
    total = STREAM_BYTES[backend]
    acc = accumulator(backend, ResponseAccumulator)
    _, growth = drive(acc.feed, total)
    text = acc.output_text
    assert abs(len(text) - text_bytes(total)) < 0.2 * len(text)
    # The text is ~1/150 of the stream; allow it several times over (pieces, copies) plus slack.
    assert growth < MAX_GROWTH, f"RSS grew by {growth / MiB:.1f} MiB for {len(text) / MiB:.1f} MiB of text"
    assert acc.response.output[0].content[0].text == text


SMALL = HEAD + b"".join(delta_event(i) for i in range(5))
REALTIME = [
    b'{"type":"response.created","event_id":"e1","response":{"id":"r1","status":"in_progress","output":[]}}',
    b'{"type":"response.output_text.delta","event_id":"e2","response_id":"r1","item_id":"i1",'
    b'"output_index":0,"content_index":0,"delta":"hi"}',
]


def one_lifetime(backend: str) -> None:
    dec = sse_decoder(backend, 1 << 20)
    dec.feed(SMALL)
    dec.close()
    typed = event_decoder(backend, "responses", "keep", 1 << 20)
    typed.feed(SMALL)
    typed.close()
    acc = accumulator(backend, ResponseAccumulator, "keep")
    acc.feed(SMALL + b"data: {oops}\n\n")
    acc.response
    acc.close()
    chat = accumulator(backend, ChatAccumulator)
    chat.feed(b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n')
    chat.completion
    realtime = accumulator(backend, RealtimeAccumulator)
    for message in REALTIME:
        realtime.feed(message)
    realtime.responses


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_lifetimes_keep_rss_flat(backend):
    n = 100_000 if backend == "rust" else 20_000
    for _ in range(n // 20):  # warm up: caches, interned strings, allocator arenas
        one_lifetime(backend)
    base = rss()
    for _ in range(n):
        one_lifetime(backend)
    growth = rss() - base
    assert growth < 16 * MiB, f"RSS grew by {growth / MiB:.1f} MiB over {n} lifetimes"


def huge_page_regions() -> list[str]:
    """The mappings of this process that asked for transparent huge pages (`MADV_HUGEPAGE`: the
    `hg` flag of /proc/self/smaps)."""
    regions, current = [], None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):
                current = line.strip()
            elif first == "VmFlags:" and "hg" in line.split()[1:]:
                regions.append(current)
    return regions


@pytest.mark.skipif("rust" not in BACKENDS, reason="the Rust core's allocator")
@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="mappings are read from /proc (Linux)")
@pytest.mark.skipif("MIMALLOC_ALLOW_THP" in os.environ, reason="mimalloc's huge pages are set in the environment")
def test_the_core_heap_asks_for_no_huge_pages():
    # mimalloc asks for transparent huge pages on each region it maps unless told not to; the
    # extension tells it not to when it loads (a huge page's first touch zero-fills 2 MiB in
    # whichever task touched it: on a VM whose host backs pages lazily, tens of milliseconds that
    # a native server's every stream waited out). The core's heap is mapped by its first
    # allocations: make enough that it is, then look.
    dec = sse_decoder("rust", 1 << 20)
    for _ in range(20_000):
        dec.feed(b"data: " + b"x" * 500 + b"\n\n")
    one_lifetime("rust")
    assert huge_page_regions() == []
