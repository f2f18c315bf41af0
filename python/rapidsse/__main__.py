"""``python -m rapidsse`` and the ``rapidsse`` console script: see :mod:`rapidsse.cli`."""

from __future__ import annotations

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
