"""Refusal of concurrent use, the pure-Python counterpart of PyO3's borrow check.

A decoder or accumulator holds the state of one stream. Two threads feeding one object at the same
time would interleave their bytes; the Rust backend refuses that with ``RuntimeError("Already
borrowed")``, and so does this guard, instead of corrupting the state.
"""

from __future__ import annotations

import threading
from typing import Any


class Exclusive:
    """A context manager that raises ``RuntimeError`` when entered while already entered."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(
                "Already borrowed: this object is in use by another thread (use one per stream)"
            )

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()
