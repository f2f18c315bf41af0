"""The process's table of file descriptors, grown once when an engine starts rather than while it
serves (the asyncio engines' twin of ``rust/src/net/fds.rs``, whose text says why).

Linux grows a process's descriptor table by doubling when a new descriptor does not fit, and in a
process of several threads (uvicorn's thread beside the caller's, asyncio's resolver threads) each
growth waits for an RCU grace period in whichever ``accept`` or ``socket`` call needed the room:
10-30 ms on the benchmarks' VM, every stream of the engine waiting meanwhile.
"""

from __future__ import annotations

import os
import sys

#: The most descriptors :func:`reserve` makes room for (the native engine's ``fds::MOST``).
MOST = 65_536


def reserve(wanted: int = MOST) -> int:
    """Grows this process's descriptor table to hold ``wanted`` descriptors, or as many as its
    ``RLIMIT_NOFILE`` soft limit allows if fewer (and at most :data:`MOST`); the size reached, or
    0 where nothing was done (not Linux, or the descriptor could not be made)."""
    if not sys.platform.startswith("linux"):
        return 0
    import fcntl
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    size = min(wanted, MOST if soft == resource.RLIM_INFINITY else soft, MOST)
    if size < 2:
        return 0
    # Duplicating a descriptor to number ``size - 1`` grows the table to ``size``; closing it
    # leaves the table grown.
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, size - 1)
    except OSError:
        return 0
    finally:
        os.close(fd)
    os.close(high)
    return size
