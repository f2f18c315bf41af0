"""The serving benchmark: a server to measure against and a client that measures, side by side.

- :mod:`.serve`: ``rapidsse serve``, recorded streams replayed or synthetic ones generated at a
  set pace over the providers' HTTP APIs and the Realtime WebSocket, with ``/health`` reporting
  how late the server itself was;
- :mod:`.measure`: the one-process client of ``rapidsse measure`` (the schedule, the requests,
  the samples and the report with vLLM's key names);
- :mod:`.workers`: the same run spread over client processes or Ray actors, samples merged
  exactly;
- :mod:`.cli`: the two command lines, the one module that imports the others.
"""

from __future__ import annotations

from .cli import register

__all__ = ["register"]
