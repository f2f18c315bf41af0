"""Shared fixtures. The whole suite runs once per backend (RAPIDSSE_BACKEND=rust|python, see the
Makefile); tests that compare the two backends directly use ``both_decoders``."""

from __future__ import annotations

import os
from pathlib import Path

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
