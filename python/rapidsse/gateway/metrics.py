"""The gateway's Prometheus metrics (both engines count the same things the same way)."""

from __future__ import annotations

import os
from typing import Any

from .record import TOKEN_KINDS, ExchangeRecord

__all__ = ["Metrics"]


class Metrics:
    """The Prometheus metrics of one gateway (in multiprocess mode when
    ``PROMETHEUS_MULTIPROC_DIR`` is set, as ``rapidsse gateway --workers N`` does): exchanges by
    protocol, model and outcome, tokens by kind, time to first token, duration, and the records
    the ``on_complete`` hook fell too far behind to be given."""

    def __init__(self) -> None:
        try:
            import prometheus_client
        except ImportError as exc:
            raise ImportError(f"the gateway's metrics need prometheus-client ({exc}); install it with "
                              "pip install 'rapidsse[gateway]', or pass metrics=False") from exc
        self._client = prometheus_client
        self.registry = prometheus_client.CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.requests = prometheus_client.Counter(
            "rapidsse_gateway_requests_total", "Exchanges forwarded, by protocol, model and outcome",
            ["protocol", "model", "outcome"], registry=self.registry)
        self.tokens = prometheus_client.Counter(
            "rapidsse_gateway_tokens_total", "Tokens upstream reported, by kind (input, output, cached, reasoning)",
            ["protocol", "model", "kind"], registry=self.registry)
        self.ttft = prometheus_client.Histogram(
            "rapidsse_gateway_ttft_seconds", "Time from the request to the first chunk with output",
            ["protocol"], registry=self.registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
        self.duration = prometheus_client.Histogram(
            "rapidsse_gateway_duration_seconds", "Time from the request to the end of the exchange",
            ["protocol"], registry=self.registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0))
        self.records_dropped = prometheus_client.Counter(
            "rapidsse_gateway_records_dropped_total",
            "Exchange records not handed to on_complete because the hook fell behind", registry=self.registry)

    def observe(self, record: ExchangeRecord) -> None:
        protocol = record.protocol or "none"
        model = record.model or ""
        child = self._child
        child(self.requests, protocol, model, record.outcome).inc()
        tokens = record.tokens
        if tokens is not None:
            for kind, count in zip(TOKEN_KINDS, (tokens.input, tokens.output, tokens.cached, tokens.reasoning)):
                if count:
                    child(self.tokens, protocol, model, kind).inc(count)
        if record.ttft is not None:
            child(self.ttft, protocol).observe(record.ttft)
        child(self.duration, protocol).observe(record.duration)

    def dropped(self, count: int = 1) -> None:
        """Counts records the ``on_complete`` hook was not given."""
        self.records_dropped.inc(count)

    def _child(self, metric: Any, *labels: str) -> Any:
        # The labelled children, kept here: prometheus-client's ``labels()`` validates and locks
        # on every call, a few µs each, up to seven times per exchange. (A child is made on first
        # use, as before; prometheus-client keeps every child itself, so nothing new piles up.)
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def exposition_registry(self) -> Any:
        """The registry to expose: this one, or in multiprocess mode one that gathers every
        worker's files."""
        if self.multiprocess:
            from prometheus_client import multiprocess

            registry = self._client.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return registry
        return self.registry

    def exposition(self) -> bytes:
        return self._client.generate_latest(self.exposition_registry())

    @property
    def content_type(self) -> bytes:
        return self._client.CONTENT_TYPE_LATEST.encode("latin-1")
