"""A billing gateway: :func:`rapidsse.gateway.start` in front of OpenAI, Anthropic and Gemini,
with an ``on_request`` that says who is calling and where the request goes, and an
``on_complete`` that charges each exchange's tokens to that caller.

- ``on_request`` runs once per exchange before upstream is contacted: it puts a fingerprint of the
  caller's API key (never the key itself: records are logged) in ``request.caller``, routes the
  request by protocol to one of the upstreams (given as ``{name: url}``), and, when the gateway
  holds a vendor key for that upstream (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
  ``GEMINI_API_KEY`` in its environment), puts it in the header that vendor reads, so callers
  present only their own keys. A request without a key is rejected (401, in its API's error
  shape).
- ``on_complete`` gets the record (protocol, model, outcome, tokens normalised across the three
  APIs, ``caller``...) on the gateway's recorder thread, never on a thread that forwards streams,
  and charges ``record.caller``. Exchanges the client left early or upstream cut still carry the
  tokens upstream reported by then, if any.

Run it (``pip install 'rapidsse[gateway]'``) in front of the synthetic server, which speaks every
protocol::

    rapidsse serve --synthetic --port 8000 &
    UPSTREAM_URL=http://127.0.0.1:8000 python examples/gateway.py
    curl -N http://127.0.0.1:8080/v1/chat/completions -H 'authorization: Bearer key-1' \\
        -d '{"stream": true, "messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": true}}'

(``rapidsse gateway --upstream URL`` runs a gateway with the default ``on_complete``: a JSON line
per exchange.)
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Union

from rapidsse.gateway import ExchangeRecord, GatewayRequest, Reject, serve, start

logger = logging.getLogger("billing")

#: Price per million tokens, by kind: (input not cached, cached input, output).
PRICES = {"default": (2.50, 1.25, 10.00)}

#: The upstreams, by name; the first is the default (what no protocol routes).
UPSTREAMS = {"openai": "https://api.openai.com", "anthropic": "https://api.anthropic.com",
             "gemini": "https://generativelanguage.googleapis.com"}

#: Which upstream serves each protocol the gateway reads from the path.
ROUTES = {"responses": "openai", "chat": "openai", "completions": "openai", "realtime": "openai",
          "anthropic": "anthropic", "gemini": "gemini"}

#: The header each vendor reads its key from, and how the key is written there.
KEY_HEADERS = {"openai": ("authorization", "Bearer {}"), "anthropic": ("x-api-key", "{}"),
               "gemini": ("x-goog-api-key", "{}")}
_CLIENT_KEY_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")


class Ledger:
    """What each caller owes, in dollars (in memory: a real one writes to a database)."""

    def __init__(self) -> None:
        self.owed: dict[str, float] = defaultdict(float)
        self.records: list[ExchangeRecord] = []
        self._lock = threading.Lock()

    def charge(self, caller: str, record: ExchangeRecord) -> float:
        tokens = record.tokens
        with self._lock:
            self.records.append(record)
        if tokens is None:  # upstream reported no usage: nothing is guessed
            return 0.0
        fresh, cached, output = PRICES.get(record.model or "", PRICES["default"])
        cached_tokens = tokens.cached or 0
        cost = ((tokens.input or 0) - cached_tokens) * fresh + cached_tokens * cached + (tokens.output or 0) * output
        with self._lock:
            self.owed[caller] += cost / 1e6
        return cost / 1e6


def api_key(headers: Mapping[str, str]) -> Union[str, None]:
    """A short fingerprint of the request's API key (never the key itself); None without one."""
    for name in _CLIENT_KEY_HEADERS:
        value = headers.get(name)
        if value:
            return hashlib.sha256(value.encode("latin-1")).hexdigest()[:12]
    return None


def vendor_keys() -> dict[str, str]:
    """The vendor keys the gateway holds, by upstream name (from its environment)."""
    names = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}
    return {upstream: os.environ[var] for upstream, var in names.items() if os.environ.get(var)}


def hooks(ledger: Ledger, upstreams: Mapping[str, str], keys: Union[Mapping[str, str], None] = None) -> tuple[Any, Any]:
    """``on_request`` and ``on_complete`` for a gateway to ``upstreams``, charging ``ledger``;
    ``keys``: vendor keys the gateway holds, by upstream name."""
    keys = dict(keys or {})

    def on_request(request: GatewayRequest) -> Union[Reject, None]:
        caller = api_key(request.headers)
        if caller is None:
            return Reject(401, "this gateway needs an API key (authorization, x-api-key or x-goog-api-key)")
        request.caller = caller
        upstream = ROUTES.get(request.protocol or "")
        if upstream in upstreams:
            request.upstream = upstream
        key = keys.get(request.upstream or next(iter(upstreams)))
        if key is not None:  # the caller's key stays here: the vendor gets the gateway's
            for name in _CLIENT_KEY_HEADERS:
                request.headers.pop(name, None)
            header, form = KEY_HEADERS[request.upstream or next(iter(upstreams))]
            request.headers[header] = form.format(key)
        return None

    def on_complete(record: ExchangeRecord, accumulator: Any) -> None:
        cost = ledger.charge(record.caller or "anonymous", record)
        logger.info("%s %s %s %s: %s, $%.6f", record.caller, record.protocol, record.model, record.outcome,
                    record.tokens, cost)

    return on_request, on_complete


def start_gateway(upstreams: Mapping[str, str], ledger: Ledger, *, keys: Union[Mapping[str, str], None] = None,
                  **options: Any) -> Any:
    """The billing gateway, started in the background (:func:`rapidsse.gateway.start`'s
    ``options``: ``port``, ``engine``...); returns its handle."""
    on_request, on_complete = hooks(ledger, upstreams, keys)
    return start(dict(upstreams), on_request=on_request, on_complete=on_complete, **options)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    local = os.environ.get("UPSTREAM_URL")  # one server for every protocol (e.g. rapidsse serve --synthetic)
    upstreams = {name: local for name in UPSTREAMS} if local else UPSTREAMS
    on_request, on_complete = hooks(Ledger(), upstreams, vendor_keys())
    serve(upstreams, port=int(os.environ.get("PORT", "8080")), on_request=on_request, on_complete=on_complete)
