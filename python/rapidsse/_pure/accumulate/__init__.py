"""Pure-Python accumulator cores: the twins of ``rust/src/accumulate/`` (rules in its module
docs) behind the interface of ``rapidsse._rapidsse.ResponseCore`` / ``ChatCore`` /
``RealtimeCore`` / ``GeminiCore`` / ``CompletionsCore`` / ``AnthropicCore``
(``rust/src/bindings/accumulate.rs``).

The package mirrors the Rust tree file for file, so that a protocol's two implementations are
found side by side and read alike:

- ``responses.py``, ``realtime.py``, ``chat.py``, ``gemini.py``, ``completions.py``,
  ``anthropic.py``: one core each, the twin of the Rust file of the same name;
- ``mod.py``: what the cores share, the twin of ``mod.rs`` (this ``__init__`` only names the
  cores, as ``mod.rs``'s ``pub use`` lines do);
- ``json.py``: JSON values, read as serde_json reads them and written as ``json.rs`` writes them.

``fast.rs`` (the tap's reader: payload shapes learned and compared byte for byte) has no twin: the
pure cores read every payload through ``json.py``, whose fast path (the stdlib ``json``, when it
is sure serde_json agrees) plays its part.
"""

from .anthropic import AnthropicCore
from .chat import ChatCore
from .completions import CompletionsCore
from .gemini import GeminiCore
from .realtime import RealtimeCore
from .responses import ResponseCore


__all__ = ["ResponseCore", "ChatCore", "RealtimeCore", "GeminiCore", "CompletionsCore", "AnthropicCore"]
