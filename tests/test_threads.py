"""Threads: separate decoders and accumulators in separate threads give the same results as one
thread (both backends, big chunks included: the Rust accumulator tap releases the GIL for chunks
of 64 KiB or more); one object used from two threads at once either works call by call or raises
a clear error (PyO3's borrow check: ``RuntimeError: Already borrowed``), never corrupts its state.
"""

from __future__ import annotations

import collections
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest

from rapidsse import ChatAccumulator, RealtimeAccumulator, ResponseAccumulator, SSEError

from .conftest import chunked, corpus_files, native
from .test_hostile import BACKENDS, accumulator, event_decoder, sse_decoder

BIG = 64 * 1024


@pytest.fixture(autouse=True)
def busy_switching():
    """Switch threads as often as CPython allows, to interleave as much as possible."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def builtins(events) -> list:
    return msgspec.to_builtins(list(events), enc_hook=repr)


def frame_all(backend, data, size):
    dec = sse_decoder(backend, None)
    return builtins(e for c in chunked(data, size) for e in dec.feed(c))


def decode_all(backend, protocol, data, size):
    dec = event_decoder(backend, protocol, "keep", None)
    return builtins(e for c in chunked(data, size) for e in dec.feed(c))


def accumulate_all(backend, cls, data, size):
    acc = accumulator(backend, cls, "keep")
    if cls is RealtimeAccumulator:
        for line in data.splitlines():
            if line.strip():
                acc.feed(line)
    else:
        for c in chunked(data, size):
            acc.feed(c)
    return acc._core.snapshot_json(), acc.warnings, acc.events


def _big_stream(kind: str) -> bytes:
    """A corpus stream repeated past 64 KiB, so that whole-stream chunks take the GIL-free path."""
    files = corpus_files(kind)
    data = max((p.read_bytes() for p in files), key=len)
    return data * (1 + (4 * BIG) // len(data))


def jobs(backend):
    out = []
    for kind, protocol in (("responses", "responses"), ("chat", "chat")):
        files = [p.read_bytes() for p in corpus_files(kind)][:8] + [_big_stream(kind)]
        for i, data in enumerate(files):
            size = (7, 512, BIG, 1 << 30)[i % 4]
            out.append((frame_all, (backend, data, size)))
            out.append((decode_all, (backend, protocol, data, size)))
            cls = ResponseAccumulator if kind == "responses" else ChatAccumulator
            out.append((accumulate_all, (backend, cls, data, size)))
    for path in corpus_files("realtime")[:4]:
        out.append((accumulate_all, (backend, RealtimeAccumulator, path.read_bytes(), 0)))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_separate_objects_in_parallel_threads_give_the_single_thread_results(backend):
    work = jobs(backend)
    expected = [f(*args) for f, args in work]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(2):
            got = list(pool.map(lambda job: job[0](*job[1]), work))
            assert got == expected


def delta(text: str) -> bytes:
    return (
        b'data: {"type":"response.output_text.delta","item_id":"m","output_index":0,'
        b'"content_index":0,"delta":"' + text.encode() + b'"}\n\n'
    )


def test_one_rust_accumulator_from_two_threads_raises_already_borrowed_never_corrupts():
    """Thread A taps big chunks (the GIL is released meanwhile); thread B feeds small deltas at the
    same time: B's calls either go in whole, between A's chunks, or raise RuntimeError (PyO3's
    borrow flag). The text is A's deltas with B's "b"s only at chunk boundaries."""
    if native is None:
        pytest.skip("the compiled extension is not built")
    acc = accumulator("rust", ResponseAccumulator)
    chunk = b"".join(delta("a" * 100) for _ in range(3000))  # ~450 KiB: the GIL-free path
    assert len(chunk) >= BIG
    # A feeds until B has run inside one of its feed() calls, or 400 chunks (180 MiB: seconds
    # with the GIL held throughout, which then fails the test). A fixed ten rounds let A finish
    # before B was ever scheduled on a loaded machine.
    max_rounds = 400
    rounds = 0
    errors: collections.Counter = collections.Counter()
    accepted = 0
    done = threading.Event()
    b_started = threading.Event()

    def a() -> None:
        nonlocal rounds
        b_started.wait(10)
        try:
            while rounds < max_rounds and not (errors and rounds >= 3):
                acc.feed(chunk)
                rounds += 1
        finally:
            done.set()

    def b() -> None:
        nonlocal accepted
        b_started.set()
        while not done.is_set():
            try:
                acc.feed(delta("b"))
                accepted += 1
            except RuntimeError as exc:
                errors[str(exc)] += 1
            try:
                acc.events  # &self while A holds &mut self
            except RuntimeError as exc:
                errors[str(exc)] += 1

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(errors) <= {"Already borrowed", "Already mutably borrowed"}, errors
    assert errors, "B never ran while A was inside feed(): the GIL was not released"
    text = acc.output_text
    assert len(text) == rounds * 3000 * 100 + accepted
    # B's "b"s sit between A's chunks, never inside one.
    assert re.fullmatch(r"(?:b*(?:a{100}){3000})+b*", text)
    assert acc.events == rounds * 3000 + accepted


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: sse_decoder("rust", None).feed, id="SSEDecoder"),
        pytest.param(lambda: event_decoder("rust", "responses", "raise", None).feed, id="EventDecoder"),
        pytest.param(lambda: accumulator("rust", ResponseAccumulator).feed, id="ResponseAccumulator"),
    ],
)
def test_one_rust_object_from_two_threads_feeding_whole_events_is_safe(make):
    """Whole events from two threads into one Rust object: each call is atomic (the GIL, or the
    borrow flag when it is released), so every event comes out once, or the call raises the
    borrow error; nothing else."""
    if native is None:
        pytest.skip("the compiled extension is not built")
    shared = make()
    stream = b"".join(delta("x%d" % i) for i in range(50))
    n = 300
    counts: list[int] = []
    failures: collections.Counter = collections.Counter()
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait()
        got = 0
        for _ in range(n):
            try:
                out = shared(stream)
            except RuntimeError as exc:
                failures[str(exc)] += 1
                continue
            got += 50 if out is None else len(out)
        counts.append(got)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(failures) <= {"Already borrowed", "Already mutably borrowed"}
    assert sum(counts) + 50 * sum(failures.values()) == 2 * n * 50


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: event_decoder("python", "responses", "raise", None).feed, id="EventDecoder"),
        pytest.param(lambda: accumulator("python", ResponseAccumulator).feed, id="ResponseAccumulator"),
    ],
)
def test_one_pure_object_from_two_threads_is_safe_or_raises(make):
    shared = make()
    stream = b"".join(delta("x%d" % i) for i in range(50))
    failures: collections.Counter = collections.Counter()
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait()
        for _ in range(300):
            try:
                shared(stream)
            except RuntimeError:
                pass  # a clear "already in use" error would be fine
            except SSEError as exc:  # a DecodeError on valid input: the state was corrupted
                failures[type(exc).__name__] += 1

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
