"""Two threads tapping two big Responses streams (``ResponseAccumulator.feed`` with 256 KiB chunks)
against one thread doing both, one after the other. The Rust tap releases the GIL for chunks of
64 KiB or more, so on two cores the two threads should take about half the time.

    pytest benches/test_threads.py --benchmark-group-by=group --benchmark-columns=min,median,rounds

(The pure-Python backend holds the GIL throughout: no gain expected there; it is not run.)
"""

from __future__ import annotations

import threading
import time

import pytest

from rapidsse._backend import using
from rapidsse import ResponseAccumulator

try:
    from rapidsse import _rapidsse as native
except ImportError:
    native = None

CHUNK = 256 * 1024
STREAM_BYTES = 48 << 20


def _stream(item: str) -> list[bytes]:
    """A Responses stream of ~48 MiB in 256 KiB chunks: text deltas of a few words, each with the
    ``obfuscation`` padding real streams carry (so the work is framing and reading JSON, and the
    text, ~1/20 of the bytes, stays small)."""
    events = []
    for i in range(1000):
        events.append(
            b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":%d,'
            b'"item_id":"%s","output_index":0,"content_index":0,"delta":"word%d and more ",'
            b'"obfuscation":"%s"}\n\n' % (i, item.encode(), i, b"Zq9" * 100)
        )
    block = b"".join(events)
    data = block * (STREAM_BYTES // len(block))
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


@pytest.fixture(scope="module")
def streams():
    if native is None:
        pytest.skip("the compiled extension is not built")
    return _stream("a"), _stream("b")


def _tap(chunks: list[bytes], out: list) -> None:
    with using("rust"):  # the Rust core whatever the live backend
        acc = ResponseAccumulator()
    for chunk in chunks:
        acc.feed(chunk)
    out.append(acc.events)  # (reading the text back is GIL-bound work: not what is measured)


def one_thread(streams) -> list:
    out: list = []
    for chunks in streams:
        _tap(chunks, out)
    return out


def two_threads(streams) -> list:
    out: list = []
    threads = [threading.Thread(target=_tap, args=(chunks, out)) for chunks in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.benchmark(group="threads: tap 2 x 48 MiB")
def test_tap_two_streams_one_thread(benchmark, streams):
    out = benchmark.pedantic(one_thread, args=(streams,), rounds=5, warmup_rounds=1)
    assert len(out) == 2 and all(n > 0 for n in out)


@pytest.mark.benchmark(group="threads: tap 2 x 48 MiB")
def test_tap_two_streams_two_threads(benchmark, streams):
    out = benchmark.pedantic(two_threads, args=(streams,), rounds=5, warmup_rounds=1)
    assert len(out) == 2 and all(n > 0 for n in out)


def test_two_threads_are_faster_than_one(streams):
    """The comparison itself, best of 7 each: two threads take clearly less time than one (about
    half on two idle cores; the margin allows for a busy machine)."""

    def best(run) -> float:
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            run(streams)
            times.append(time.perf_counter() - t0)
        return min(times)

    one, two = best(one_thread), best(two_threads)
    print(f"\none thread: {one * 1e3:.1f} ms, two threads: {two * 1e3:.1f} ms, speedup {one / two:.2f}x")
    assert two < 0.85 * one, (one, two)
