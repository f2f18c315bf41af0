"""Shared fixtures. The whole suite runs once per backend (RAPIDSSE_BACKEND=rust|python, see the
Makefile); tests that compare the two backends directly use ``both_decoders``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import rapidsse

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("RAPIDSSE_CORPUS", ROOT / "tests" / "corpus"))

try:
    from rapidsse import _rapidsse as native
except ImportError:  # the pure-Python run on a machine without the extension
    native = None


def pytest_report_header(config):
    return [f"rapidsse backend: {rapidsse.BACKEND} (native extension importable: {native is not None})"]


def cycles_left(action) -> tuple[int, list[str]]:
    """Runs ``action()`` with the cyclic collector off and keeping what it frees: how many objects
    in reference cycles the action left behind, and the names of their types (for the message)."""
    import gc

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        action()
        found = gc.collect()
        kinds = sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return found, kinds


def sample_feed(chunk):
    """A stand-in for a decoder's ``feed`` in the drains' tests: two events per chunk; ``"bad"``
    raises an ``SSEError`` carrying one event, ``"boom"`` another error."""
    from rapidsse import SSEError

    if chunk == "bad":
        err = SSEError("bad chunk")
        err.events = ["e-before-error"]
        raise err
    if chunk == "boom":
        raise KeyError("not an SSEError")
    return [f"{chunk}.1", f"{chunk}.2"]


def descriptor_table(pid: int | str = "self") -> int:
    """The size of a process's table of file descriptors (``FDSize`` in /proc/PID/status; Linux)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("FDSize:"))


def expected_table() -> int:
    """The size every engine grows its process's descriptor table to when it starts
    (``rapidsse.serving.fds``, ``rust/src/net/fds.rs``)."""
    import resource

    from rapidsse.serving import fds

    return min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], fds.MOST)


def corpus_files(kind: str) -> list[Path]:
    folder = CORPUS / kind
    if not folder.is_dir():
        raise RuntimeError(
            f"the recorded corpus is missing at {folder}; it lives in tests/corpus "
            "(set RAPIDSSE_CORPUS to point elsewhere)"
        )
    files = sorted(p for p in folder.iterdir() if p.suffix in (".sse", ".jsonl"))
    assert files, folder
    return files


def sse_transport(data: bytes):
    """An httpx ``MockTransport`` that answers every request with ``data`` as an event stream."""
    import httpx

    return httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)
    )


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def assert_ways_in_agree(protocol: str, acc_type: type, result: str, data: bytes, payloads: list,
                         sizes, stream_size: int) -> Any:
    """Every way into an ``acc_type`` accumulator builds the same final object (its ``result``):
    ``feed`` of the whole stream and in chunks of each of ``sizes``, ``add`` of its typed events,
    ``add_json`` of each of ``payloads``, and ``rapidsse.stream_<protocol>`` over chunks of
    ``stream_size`` (which also yields the typed events). Returns the ``add_json`` accumulator."""
    whole = acc_type()
    whole.feed(data)
    expected = getattr(whole, result)
    for size in sizes:
        acc = acc_type()
        for chunk in chunked(data, size):
            acc.feed(chunk)
        assert getattr(acc, result) == expected, size
    events = list(rapidsse.iter_events([data], protocol=protocol))
    typed = acc_type()
    for event in events:
        typed.add(event)
    assert getattr(typed, result) == expected
    by_json = acc_type()
    for payload in payloads:
        by_json.add_json(payload)
    assert getattr(by_json, result) == expected
    stream = getattr(rapidsse, f"stream_{protocol}")(chunked(data, stream_size))
    assert list(stream) == events
    assert getattr(stream, result) == expected
    return by_json


@pytest.fixture(scope="session")
def pure_decoder():
    from rapidsse.framing import _PySSEDecoder

    return _PySSEDecoder


@pytest.fixture(scope="session")
def native_decoder():
    if native is None:
        if rapidsse.BACKEND == "rust" or os.environ.get("RAPIDSSE_BACKEND") == "rust":
            pytest.fail("the Rust backend was requested but the extension is missing")
        pytest.skip("the compiled extension is not built")
    return native.SSEDecoder


def wires(obj: Any) -> list[tuple[str, str, Any]]:
    """``(path, class name, _wire)`` of every msgspec Struct in ``obj`` (events, lists of them),
    at every depth. Struct equality does not see ``_wire`` (it is no field), so the tests that
    hold the wire info of two results equal compare these as well."""
    import msgspec

    out: list[tuple[str, str, Any]] = []

    def walk(x: Any, path: str) -> None:
        if isinstance(x, msgspec.Struct):
            out.append((path, type(x).__name__, getattr(x, "_wire", None)))
            for name in x.__struct_fields__:
                walk(getattr(x, name), f"{path}.{name}")
        elif isinstance(x, (list, tuple)):
            for i, item in enumerate(x):
                walk(item, f"{path}[{i}]")
        elif isinstance(x, dict):
            for key, item in x.items():
                walk(item, f"{path}.{key}")

    walk(obj, "$")
    return out


@pytest.fixture(params=["native", "asyncio"])
def engine(request):
    """The client engine of ``rapidsse measure``: each test that takes it runs on both (native only
    on the Rust backend)."""
    from rapidsse.serving import measure

    if request.param == "native" and not measure.native_available():
        pytest.skip("the native engine needs the Rust backend (this run is on the pure Python one)")
    return request.param
