"""A billing gateway: :func:`rapidsse.gateway.create_gateway` in front of an LLM API, with an
``on_complete`` that charges each exchange's tokens to the API key that made it.

The gateway forwards every request untouched and streams every reply back byte for byte; the tap
reads the same bytes and, when an exchange ends, hands its record (protocol, model, outcome,
tokens normalised across OpenAI, Anthropic and Gemini, ...) to ``on_complete``. Exchanges the
client left early or upstream cut still carry the tokens upstream reported by then, if any.

Run it (``pip install 'rapidsse[gateway]'``) in front of the synthetic server::

    rapidsse serve --synthetic --port 8000 &
    UPSTREAM_URL=http://127.0.0.1:8000 uvicorn examples.gateway:app --port 8080
    curl -N http://127.0.0.1:8080/v1/chat/completions -H 'authorization: Bearer key-1' \\
        -d '{"stream": true, "messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": true}}'

(``rapidsse gateway --upstream URL`` runs the same gateway with the default ``on_complete``: a JSON
line per exchange.)
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import defaultdict
from contextvars import ContextVar
from typing import Any

from rapidsse.gateway import ExchangeRecord, create_gateway

logger = logging.getLogger("billing")

#: Price per million tokens, by kind: (input not cached, cached input, output).
PRICES = {"default": (2.50, 1.25, 10.00)}


class Ledger:
    """What each API key owes, in dollars (in memory: a real one writes to a database)."""

    def __init__(self) -> None:
        self.owed: dict[str, float] = defaultdict(float)
        self.records: list[ExchangeRecord] = []

    def charge(self, key: str, record: ExchangeRecord) -> float:
        tokens = record.tokens
        if tokens is None:  # upstream reported no usage: nothing is guessed
            return 0.0
        fresh, cached, output = PRICES.get(record.model or "", PRICES["default"])
        cached_tokens = tokens.cached or 0
        cost = ((tokens.input or 0) - cached_tokens) * fresh + cached_tokens * cached + (tokens.output or 0) * output
        self.owed[key] += cost / 1e6
        self.records.append(record)
        return cost / 1e6


def api_key(headers: Any) -> str:
    """A short fingerprint of the request's API key (never the key itself)."""
    for name, value in headers:
        if name in (b"authorization", b"x-api-key", b"x-goog-api-key"):
            return hashlib.sha256(value).hexdigest()[:12]
    return "anonymous"


def create_app(upstream_url: str, ledger: Ledger) -> Any:
    """The gateway to ``upstream_url``, charging ``ledger``. The key is read from the request's
    headers by a small ASGI wrapper and reaches ``on_complete`` through a context variable
    (``on_complete`` runs in the exchange's own task)."""
    caller: ContextVar[str] = ContextVar("caller", default="anonymous")

    def bill(record: ExchangeRecord, accumulator: Any) -> None:
        key = caller.get()
        cost = ledger.charge(key, record)
        logger.info("%s %s %s %s: %s, $%.6f", key, record.protocol, record.model, record.outcome, record.tokens, cost)

    gateway = create_gateway(upstream_url, on_complete=bill)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            caller.set(api_key(scope["headers"]))
        await gateway(scope, receive, send)

    return app


ledger = Ledger()
app = create_app(os.environ.get("UPSTREAM_URL", "http://127.0.0.1:8000"), ledger)
