"""rapidsse: the fastest correct parser of LLM streaming APIs.

A Rust core frames Server-Sent Events, decodes the JSON into msgspec Structs and accumulates the
streamed text; a pure-Python twin behaves identically where no wheel exists. ``BACKEND`` says
which one is live (``RAPIDSSE_BACKEND=rust|python`` forces one).
"""

from __future__ import annotations

from ._backend import BACKEND
from .errors import DecodeError, EventTooLarge, SSEError, StreamError
from .framing import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder, aiter_sse, iter_sse
from ._schema import UnknownEvent
from ._wire import encode, extras
from .decoding import (
    EventDecoder,
    InvalidEvent,
    aiter_events,
    decode_realtime,
    encode_sse,
    iter_events,
    iter_realtime,
)
from .accumulate import *  # noqa: F403 (the names of its __all__, which joins ours below)
from . import accumulate, anthropic, chat, completions, gemini, realtime, responses

__all__ = [
    "BACKEND",
    "anthropic",
    "DEFAULT_MAX_EVENT_SIZE",
    "DecodeError",
    "EventDecoder",
    "InvalidEvent",
    "UnknownEvent",
    "aiter_events",
    "chat",
    "completions",
    "decode_realtime",
    "encode",
    "encode_sse",
    "gemini",
    "extras",
    "iter_events",
    "iter_realtime",
    "realtime",
    "responses",
    "EventTooLarge",
    "SSEDecoder",
    "SSEError",
    "ServerSentEvent",
    "StreamError",
    "aiter_sse",
    "iter_sse",
]
__all__ += accumulate.__all__


def __getattr__(name: str):
    # ``rapidsse.__version__``: the installed distribution's version, which every build takes from
    # the one version in Cargo.toml (maturin for the native wheel and the sdist,
    # scripts/build_pure_wheel.py for the pure one). Looked up on first use, so that importing
    # rapidsse does not pay for importlib.metadata.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("rapidsse")
        except PackageNotFoundError:  # python/ put on sys.path by hand, nothing installed
            value = "0+unknown"
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
