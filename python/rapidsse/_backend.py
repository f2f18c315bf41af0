"""Chooses the backend once, at import: the compiled Rust core, or the pure-Python twin.

``RAPIDSSE_BACKEND=python`` forces pure Python; ``RAPIDSSE_BACKEND=rust`` forces the compiled
extension and fails loudly when it is missing; unset (or ``auto``) prefers Rust.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["BACKEND", "native"]

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
