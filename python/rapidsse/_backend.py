"""Chooses the backend once, at import: the compiled Rust core, or the pure-Python twin.

``RAPIDSSE_BACKEND=python`` forces pure Python; ``RAPIDSSE_BACKEND=rust`` forces the compiled
extension and fails loudly when it is missing; unset (or ``auto``) prefers Rust.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from types import ModuleType

__all__ = ["BACKEND", "native", "core", "using"]

_choice = os.environ.get("RAPIDSSE_BACKEND", "auto").strip().lower() or "auto"
if _choice not in ("auto", "rust", "python"):
    raise ImportError(f"RAPIDSSE_BACKEND must be 'rust', 'python' or 'auto', not {_choice!r}")

native: ModuleType | None = None
if _choice != "python":
    try:
        from . import _rapidsse as native
    except ImportError as exc:
        if _choice == "rust":
            raise ImportError(
                "RAPIDSSE_BACKEND=rust, but the compiled extension rapidsse._rapidsse cannot be "
                f"imported ({exc}). Build it with `maturin develop` or install a rapidsse wheel."
            ) from exc
        native = None

BACKEND: str = "rust" if native is not None else "python"


_override: contextvars.ContextVar[str | None] = contextvars.ContextVar("rapidsse_backend", default=None)


def core() -> ModuleType | None:
    """The compiled module new decoders and accumulators are built on (None: pure Python).

    That is the live backend, unless :func:`using` says otherwise for the current context.
    """
    choice = _override.get()
    if choice is None:
        return native
    if choice == "python":
        return None
    return _compiled()


def _compiled() -> ModuleType:
    """The compiled extension, imported on demand (also when RAPIDSSE_BACKEND=python)."""
    if native is not None:
        return native
    try:
        from . import _rapidsse
    except ImportError as exc:
        raise ImportError(f"the Rust backend was asked for, but rapidsse._rapidsse cannot be imported ({exc})") from exc
    return _rapidsse


@contextlib.contextmanager
def using(choice: str) -> Iterator[None]:
    """Builds objects on one backend (``"rust"`` or ``"python"``) within the block, e.g. to run
    both side by side in one process (the differential tests and benchmarks do)::

        with rapidsse._backend.using("python"):
            decoder = rapidsse.EventDecoder("chat")
    """
    if choice not in ("rust", "python"):
        raise ValueError(f"choice must be 'rust' or 'python', not {choice!r}")
    if choice == "rust":
        _compiled()
    token = _override.set(choice)
    try:
        yield
    finally:
        _override.reset(token)
