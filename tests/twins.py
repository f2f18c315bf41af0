"""The Rust and pure-Python accumulator cores side by side: the checks the per-protocol test files
share (``native.<Kind>Core`` against ``rapidsse._pure.accumulate.<Kind>Core``)."""

from __future__ import annotations

import json
import os

import pytest

from rapidsse._pure import accumulate as pure

from .conftest import chunked, native

# A twin check builds both backends' cores itself, whichever backend is live: it runs once, in the
# suite's run on the Rust backend, not again in the run forced to pure Python.
needs_native = pytest.mark.skipif(
    native is None or os.environ.get("RAPIDSSE_BACKEND") == "python",
    reason="the compiled extension is not built, or this is the pure run (twin checks run in the Rust run)",
)


def core_pair(kind: str, **kw) -> tuple:
    """A Rust core and a pure-Python core of ``kind`` (``"GeminiCore"``, ...), made alike."""
    return getattr(native, kind)(**kw), getattr(pure, kind)(**kw)


def core_state(core) -> dict:
    """All a core tells: its snapshot (parsed, and the very bytes), warnings and counts."""
    snap = core.snapshot_json()
    return {
        "snapshot": None if snap is None else json.loads(snap),
        "json": snap,
        "warnings": core.warnings(),
        "unknown": core.unknown_events(),
        "events": core.events(),
    }


def assert_twins(rust, py, where: object = "") -> None:
    """The two cores tell the same (the same snapshot bytes, so the same key order too)."""
    assert core_state(py) == core_state(rust), where


def assert_twins_feed(kind: str, data: bytes, sizes) -> None:
    """Fed ``data`` in chunks of each of ``sizes``, the cores answer each feed alike and end alike."""
    for size in sizes:
        rust, py = core_pair(kind)
        for chunk in chunked(data, size):
            assert py.feed(chunk) == rust.feed(chunk), size
        assert_twins(rust, py, size)


def assert_twins_on_payloads(kind: str, payloads, first: bytes, cap: int) -> None:
    """The cores take ``payloads`` alike one after another (``add_json``), and each payload twice
    after ``first`` in cores whose ``max_event_size`` is ``cap`` (the text cap's refusals)."""
    rust, py = core_pair(kind)
    for payload in payloads:
        assert py.add_json(payload) == rust.add_json(payload), payload
        assert_twins(rust, py, payload)
    for payload in payloads:
        rust, py = core_pair(kind, max_event_size=cap)
        for p in (first, payload, payload):
            assert py.add_json(p) == rust.add_json(p), p
        assert_twins(rust, py, payload)
