"""rapidsse.gateway between real clients and the replay and synthetic servers, all on loopback:
byte-identical streams, the same final objects as talking to the server directly, one record per
exchange with the recording's usage; each fault outcome with its own upstream; the hooks
(``on_request``, ``on_complete``), the limits and the security properties.

Every test that takes the ``engine`` fixture runs on both engines (``asyncio`` and ``native``, the
latter skipped where it cannot run); the few that do not say why they test the asyncio engine
only."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
httpx = pytest.importorskip("httpx")

import rapidsse  # noqa: E402
from rapidsse import RealtimeAccumulator  # noqa: E402
import rapidsse.gateway  # noqa: E402
from rapidsse.gateway import (ExchangeRecord, GatewayRequest, Metrics, Recorder, Reject, Tokens,  # noqa: E402
                              create_gateway, parse_upstreams)
from rapidsse.integrations import to_builtins  # noqa: E402
from rapidsse.serving.serve import BackgroundServer, ReplayServer, Synthetic, SyntheticServer  # noqa: E402

from .conftest import ROOT, corpus_files, cycles_left, descriptor_table, expected_table  # noqa: E402

TIMEOUT = 20.0
KINDS = ("responses", "chat", "anthropic", "gemini")
RECORDINGS = {kind: corpus_files(kind) for kind in (*KINDS, "realtime")}
ROUTES = {"responses": "/v1/responses", "chat": "/v1/chat/completions", "anthropic": "/v1/messages",
          "gemini": "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", "completions": "/v1/completions"}
FINAL = {"responses": "response", "chat": "completion", "completions": "completion", "anthropic": "message",
         "gemini": "response"}
ACCUMULATORS = {"responses": rapidsse.ResponseAccumulator, "chat": rapidsse.ChatAccumulator,
                "completions": rapidsse.CompletionsAccumulator, "anthropic": rapidsse.AnthropicAccumulator,
                "gemini": rapidsse.GeminiAccumulator}


class Records:
    """An ``on_complete`` that keeps what it is given; ``wait`` for the records of exchanges that
    end after the client has its reply."""

    def __init__(self) -> None:
        self.items: list[tuple[ExchangeRecord, object]] = []
        self._changed = threading.Condition()

    def __call__(self, record: ExchangeRecord, accumulator: object) -> None:
        with self._changed:
            self.items.append((record, accumulator))
            self._changed.notify_all()

    def wait(self, count: int) -> list[ExchangeRecord]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.items) >= count, TIMEOUT), self.items
            return [record for record, _ in self.items]

    def take(self, count: int) -> list[tuple[ExchangeRecord, object]]:
        self.wait(count)
        with self._changed:
            taken, self.items = self.items[:count], self.items[count:]
        return taken


def recording_of(protocol: str, record: ExchangeRecord, accumulator, files: list[Path]) -> Path:
    """The recording a tapped record was made of: its size, and the same final object."""
    built = getattr(accumulator, FINAL[protocol])
    found = [p for p in files if p.stat().st_size == record.bytes and final_of(protocol, p.read_bytes()) == built]
    assert found, record
    return found[0]


def accumulated(protocol: str, data: bytes):
    acc = ACCUMULATORS[protocol]()
    acc.feed(data)
    acc.close()
    return acc


def final_of(protocol: str, data: bytes):
    return getattr(accumulated(protocol, data), FINAL[protocol])


def events_of(protocol: str, data: bytes) -> int:
    return accumulated(protocol, data).events


def expected_tokens(protocol: str, final) -> Tokens | None:
    """The recording's final usage, in the gateway's convention (written out here from the JSON
    as each API documents it)."""
    data = to_builtins(final)
    usage = data.get("usageMetadata" if protocol == "gemini" else "usage")
    if not usage:
        return None
    if protocol == "responses":
        return Tokens(usage.get("input_tokens"), usage.get("output_tokens"),
                      (usage.get("input_tokens_details") or {}).get("cached_tokens"),
                      (usage.get("output_tokens_details") or {}).get("reasoning_tokens"))
    if protocol in ("chat", "completions"):
        return Tokens(usage.get("prompt_tokens"), usage.get("completion_tokens"),
                      (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                      (usage.get("completion_tokens_details") or {}).get("reasoning_tokens"))
    if protocol == "anthropic":
        parts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
        total = sum(p for p in parts if p is not None) if usage.get("input_tokens") is not None else None
        return Tokens(total, usage.get("output_tokens"), usage.get("cache_read_input_tokens"), None)
    thoughts = usage.get("thoughtsTokenCount")
    prompt = [usage.get(k) for k in ("promptTokenCount", "toolUsePromptTokenCount") if usage.get(k) is not None]
    output = [usage.get(k) for k in ("candidatesTokenCount", "thoughtsTokenCount") if usage.get(k) is not None]
    return Tokens(sum(prompt) if prompt else None, sum(output) if output else None,
                  usage.get("cachedContentTokenCount"), thoughts)


# --- The engines -------------------------------------------------------------------------------------


def native_engine_skip() -> str | None:
    """Why the native engine cannot run here (None when it can)."""
    if rapidsse.BACKEND != "rust":
        return "the native engine needs the compiled extension (this run is on the pure Python backend)"
    try:
        from rapidsse.gateway.native import available
    except ImportError:
        return "the native engine is not built yet"
    if not available():
        return "the native engine is not built yet"
    return None


@pytest.fixture(scope="module", params=["asyncio", "native"])
def engine(request) -> str:
    if request.param == "native":
        reason = native_engine_skip()
        if reason is not None:
            pytest.skip(reason)
    return request.param


@contextmanager
def gateway_on(engine: str, upstream, *, on_complete=None, **options):
    """A gateway on ``engine`` to ``upstream`` (a URL or ``{name: url}``) on a free port, stopped
    on leaving (``rapidsse.gateway.start``: the same call for both engines)."""
    options.setdefault("log_level", "warning")
    options.setdefault("grace", 2.0)
    with rapidsse.gateway.start(upstream, engine=engine, on_complete=on_complete, port=0, **options) as server:
        yield server


# --- One replay server of the whole corpus, one gateway in front of it ------------------------------


@pytest.fixture(scope="module")
def replay():
    files = [path for kind in RECORDINGS.values() for path in kind]
    with ReplayServer(files) as server:
        yield server


@pytest.fixture(scope="module")
def records(engine):
    return Records()


def in_front(engine: str, upstream, records: Records):
    """A gateway to ``upstream`` recording into ``records``, for the module's fixtures."""
    with gateway_on(engine, upstream.url, on_complete=records) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(engine, replay, records):
    yield from in_front(engine, replay, records)


SMALL = {kind: [p for p in files if p.stat().st_size < 12_000] for kind, files in RECORDINGS.items()}
"""The recordings the SDKs read (their per-event pydantic work makes the big ones slow; the
httpx tests above take every file)."""


@pytest.fixture(scope="module")
def small_replay():
    with ReplayServer([path for kind in SMALL.values() for path in kind]) as server:
        yield server


@pytest.fixture(scope="module")
def small_gateway(engine, small_replay, records):
    yield from in_front(engine, small_replay, records)


@pytest.fixture(scope="module")
def synthetic():
    with SyntheticServer(tokens=8, rate=2000, ttft=0.002) as server:
        yield server


@pytest.fixture(scope="module")
def synthetic_records(engine):
    return Records()


@pytest.fixture(scope="module")
def synthetic_gateway(engine, synthetic, synthetic_records):
    yield from in_front(engine, synthetic, synthetic_records)


@pytest.mark.parametrize("protocol", KINDS)
def test_every_recording_is_forwarded_byte_for_byte_and_tapped(gateway, records, protocol):
    """A full rotation of the protocol's recordings through the gateway: each body as recorded, each
    record's tokens the recording's final usage, the tap's object the recording's."""
    files = RECORDINGS[protocol]
    with httpx.Client(timeout=TIMEOUT) as client:
        bodies = []
        for _ in files:
            with client.stream("POST", gateway.url + ROUTES[protocol], json={"stream": True, "model": "m"},
                               headers={"authorization": "Bearer k", "x-api-key": "k"}) as reply:
                assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
                bodies.append(b"".join(reply.iter_raw()))
    taken = records.take(len(files))  # in order: the requests were one after the other
    assert sorted(bodies) == sorted(p.read_bytes() for p in files)
    by_body = {p.read_bytes(): p for p in files}
    for body, (record, accumulator) in zip(bodies, taken):
        assert record.protocol == protocol and record.outcome == "complete", record
        assert record.status == 200 and record.chunks >= 1 and record.bytes == len(body)
        assert record.ttfb is not None and record.duration >= record.ttfb
        path = by_body[body]
        final = final_of(protocol, path.read_bytes())
        assert getattr(accumulator, FINAL[protocol]) == final, path.name
        assert record.tokens == expected_tokens(protocol, final), path.name
        assert record.events == events_of(protocol, path.read_bytes()), path.name


def test_the_record_of_a_recording(gateway, records):
    """One recording's record field by field."""
    path = next(p for p in RECORDINGS["anthropic"] if "tool_use_response" in p.name)
    replayed = [p for p in RECORDINGS["anthropic"]]
    with httpx.Client(timeout=TIMEOUT) as client:
        for _ in replayed:  # one full rotation: each file once
            client.post(gateway.url + "/v1/messages", json={"stream": True, "model": "claude-x"})
    record = next(r for r, _ in records.take(len(replayed)) if r.bytes == path.stat().st_size)
    message = final_of("anthropic", path.read_bytes())
    assert record.model == message.model and record.finish_reason == message.stop_reason == "tool_use"
    assert record.outcome == "complete" and record.error is None and record.warnings == []
    assert record.ttft is not None and record.ttfb <= record.ttft <= record.duration
    assert record.tokens.output == message.usage.output_tokens


def test_openai_sdk_through_the_gateway_reads_what_it_reads_directly(small_gateway, small_replay, records):
    gateway, replay = small_gateway, small_replay
    openai = pytest.importorskip("openai")
    files = SMALL["responses"]
    everything = len(files)

    def finals(base: str) -> list:
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        out = []
        for _ in range(everything):  # one full rotation
            with client.responses.stream(model="m", input="hi") as stream:
                out.append(stream.get_final_response())
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        through, direct = finals(gateway.url), finals(replay.url)
    records.take(everything)
    assert [f.model_dump() for f in through] == [f.model_dump() for f in direct]
    assert {f.id for f in through} >= {final_of("responses", p.read_bytes()).id for p in files}

    chats = SMALL["chat"]
    messages = [{"role": "user", "content": "hi"}]

    def chat_streams(base: str) -> list:
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        out = []
        for _ in chats:
            try:
                out.append([c.model_dump() for c in client.chat.completions.create(model="m", messages=messages,
                                                                                   stream=True)])
            except openai.APIError as exc:  # a recorded error chunk: raised as it is directly
                out.append(type(exc).__name__)
        return out

    assert chat_streams(gateway.url) == chat_streams(replay.url)
    for record, accumulator in records.take(len(chats)):
        final = final_of("chat", recording_of("chat", record, accumulator, chats).read_bytes())
        assert record.tokens == expected_tokens("chat", final)


def test_non_streamed_json_replies_are_forwarded_and_read_for_usage(gateway, replay, records):
    files = RECORDINGS["responses"]
    with httpx.Client(timeout=TIMEOUT) as client:
        through = [client.post(gateway.url + "/v1/responses", json={"model": "m"}) for _ in files]
        direct = [client.post(replay.url + "/v1/responses", json={"model": "m"}) for _ in files]
    assert [r.content for r in through] == [r.content for r in direct]
    assert all(r.headers["content-type"] == "application/json" for r in through)
    for (record, accumulator), reply in zip(records.take(len(files)), through):
        usage = reply.json().get("usage")
        assert accumulator is None and record.outcome == "complete" and record.status == 200
        if usage is None:
            assert record.tokens is None
        else:
            assert record.tokens.input == usage["input_tokens"] and record.tokens.output == usage["output_tokens"]
        assert record.finish_reason == (reply.json().get("incomplete_details") or {}).get("reason",
                                                                                          reply.json()["status"])


# The SDK's models lag a recording (a citation of type "fallback"): pydantic warns as it dumps them,
# through the gateway and directly alike.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_anthropic_sdk_through_the_gateway(small_gateway, small_replay, records):
    gateway, replay = small_gateway, small_replay
    anthropic = pytest.importorskip("anthropic")
    files = SMALL["anthropic"]

    def finals(base: str) -> list:
        client = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0, timeout=TIMEOUT)
        out = []
        for _ in files:
            with client.messages.stream(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as s:
                events = [e.type for e in s]
                out.append((events, s.get_final_message().model_dump()))
        return out

    through, direct = finals(gateway.url), finals(replay.url)
    assert through == direct
    for record, accumulator in records.take(len(files)):
        final = final_of("anthropic", recording_of("anthropic", record, accumulator, files).read_bytes())
        assert record.tokens == expected_tokens("anthropic", final)


def test_google_genai_through_the_gateway(small_gateway, small_replay, records):
    gateway, replay = small_gateway, small_replay
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    files = SMALL["gemini"]

    def streams(base: str) -> list:
        client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=base, timeout=20_000))
        # (sdk_http_response: the headers, with the date and server of the servers on the way)
        return [[c.model_dump(exclude={"sdk_http_response"})
                 for c in client.models.generate_content_stream(model="gemini-x", contents="hi")] for _ in files]

    assert streams(gateway.url) == streams(replay.url)
    for record, accumulator in records.take(len(files)):
        assert record.path.endswith(":streamGenerateContent") and record.model is not None
        final = final_of("gemini", recording_of("gemini", record, accumulator, files).read_bytes())
        assert record.tokens == expected_tokens("gemini", final)


def test_httpx_sse_integration_through_the_gateway(gateway, replay, records):
    from rapidsse.integrations import httpx_sse

    files = RECORDINGS["chat"]

    def events(base: str) -> list:
        out = []
        with httpx.Client(timeout=TIMEOUT) as client:
            for _ in files:
                with httpx_sse.connect_sse(client, "POST", base + "/v1/chat/completions",
                                           json={"stream": True}) as source:
                    out.append([(e.event, e.data, e.id) for e in source.iter_sse()])
        return out

    assert events(gateway.url) == events(replay.url)
    records.take(len(files))


def test_realtime_sessions_through_the_gateway(small_gateway, small_replay, records):
    gateway, replay = small_gateway, small_replay
    websockets = pytest.importorskip("websockets")
    files = SMALL["realtime"]
    ws_url = "ws" + gateway.url[len("http"):] + "/v1/realtime?model=gpt-realtime"

    async def session(url: str) -> list[str]:
        async with websockets.connect(url, open_timeout=TIMEOUT, close_timeout=2,
                                      additional_headers={"authorization": "Bearer k"}) as ws:
            try:
                await ws.send(json.dumps({"type": "response.create"}))
            except websockets.ConnectionClosed:
                pass  # the replay may already be over: it does not wait for client events
            return [message async for message in ws]

    async def sessions(url: str) -> list[list[str]]:
        return [await session(url) for _ in files]

    through = asyncio.run(asyncio.wait_for(sessions(ws_url), 120))
    direct = asyncio.run(asyncio.wait_for(sessions(replay.ws_url), 120))
    assert through == direct
    expected = [[line.decode() for line in p.read_bytes().splitlines() if line.strip()] for p in files]
    assert sorted(map(tuple, through)) == sorted(map(tuple, expected))
    for record, accumulator in records.take(len(files)):
        assert record.protocol == "realtime" and record.model == "gpt-realtime" and record.outcome == "complete"
        path = next(p for p, lines in zip(files, expected) if len(lines) == record.chunks
                    and sum(len(line.encode()) for line in lines) == record.bytes)
        want = RealtimeAccumulator()
        for line in expected[files.index(path)]:
            want.feed(line)
        assert accumulator.responses == want.responses
        usages = [r.usage for r in want.responses.values() if r.usage is not None]
        if usages:
            assert record.tokens.input == sum(u.input_tokens for u in usages)
            assert record.tokens.output == sum(u.output_tokens for u in usages)
        else:
            assert record.tokens is None


# --- The synthetic server through the gateway ----------------------------------------------------


def test_synthetic_streams_through_the_gateway_with_every_sdk(synthetic_gateway, synthetic, synthetic_records):
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    base = synthetic_gateway.url
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
    with client.responses.stream(model="m", input="one two three") as stream:
        final = stream.get_final_response()
    assert final.output_text == Synthetic.text(8) and final.usage.output_tokens == 8
    chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a b"}],
                                                 stream=True, stream_options={"include_usage": True}, max_tokens=5))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == Synthetic.text(5)
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="m", prompt="p q", stream=True, stream_options={"include_usage": True}) if c.choices)
    assert text == Synthetic.text(8)
    claude = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0, timeout=TIMEOUT)
    with claude.messages.stream(model="claude-x", max_tokens=100, messages=[{"role": "user", "content": "a"}]) as s:
        message = s.get_final_message()
    assert message.content[0].text == Synthetic.text(8)
    gem = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=base, timeout=20_000))
    assert "".join(c.text for c in gem.models.generate_content_stream(model="gemini-x", contents="a b c")) \
        == Synthetic.text(8)
    got = {r.protocol: r for r, _ in synthetic_records.take(5)}
    assert got["responses"].tokens == Tokens(input=3, output=8, cached=0, reasoning=0)
    assert got["chat"].tokens == Tokens(input=2, output=5) and got["chat"].finish_reason == "length"
    assert got["completions"].tokens == Tokens(input=2, output=8) and got["completions"].finish_reason == "stop"
    assert got["anthropic"].tokens.output == 8 and got["anthropic"].model == "claude-x"
    assert got["gemini"].tokens.output == 8 and got["gemini"].model == "gemini-x"
    assert all(r.outcome == "complete" and r.ttft is not None for r in got.values())
    # byte for byte, as directly (the synthetic ids and timestamps aside)
    body = {"stream": True, "model": "m", "stream_options": {"include_usage": True}}
    with httpx.Client(timeout=TIMEOUT) as http:
        through = http.post(base + "/v1/completions", json=body).content
        direct = http.post(synthetic.url + "/v1/completions", json=body).content
    synthetic_records.take(1)
    strip = [json.loads(line[6:]) for line in through.splitlines() if line.startswith(b"data: {")]
    want = [json.loads(line[6:]) for line in direct.splitlines() if line.startswith(b"data: {")]
    for item in strip + want:
        item.pop("id"), item.pop("created")
    assert strip == want and len(through) == len(direct)


def test_metrics(synthetic_gateway, synthetic_records):
    with httpx.Client(timeout=TIMEOUT) as client:
        before = client.get(synthetic_gateway.url + "/metrics").text
        for _ in range(2):
            client.post(synthetic_gateway.url + "/v1/chat/completions",
                        json={"stream": True, "model": "metered", "stream_options": {"include_usage": True}})
        synthetic_records.take(2)
        text = client.get(synthetic_gateway.url + "/metrics").text
    assert 'model="metered"' not in before
    assert 'rapidsse_gateway_requests_total{model="metered",outcome="complete",protocol="chat"} 2.0' in text
    assert 'rapidsse_gateway_tokens_total{kind="output",model="metered",protocol="chat"} 16.0' in text
    assert 'rapidsse_gateway_ttft_seconds_count{protocol="chat"}' in text
    assert 'rapidsse_gateway_duration_seconds_bucket{le="+Inf",protocol="chat"}' in text


# asyncio engine only: the reference cycles of the exchanges' Python objects on the event loop (the
# native engine makes none of those), and create_gateway's ASGI app in a server of one's own.
@pytest.mark.parametrize("tap", [True, False], ids=["tapped", "no-tap"])
def test_exchanges_leave_no_reference_cycles(tap):
    """``rapidsse gateway`` freezes what startup made and raises the collector's thresholds, so
    that a full collection (milliseconds with hundreds of streams in flight, a late chunk on each)
    all but never runs: that is sound only if an exchange leaves no reference cycle behind, tapped
    or not, for every protocol. (The synthetic server and the measure client, in this process too,
    make none: tests/test_measure.py.)"""
    from rapidsse.serving import measure as m

    pytest.importorskip("uvloop")
    records = Records()
    with SyntheticServer(tokens=8, rate=400, ttft=0.01) as server, \
            BackgroundServer(create_gateway(server.url, on_complete=records, tap=tap)) as gateway:
        def drive(count: int) -> None:
            for protocol in m.PROTOCOLS:
                run = m.run_loop(m.measure(m.endpoint_url(gateway.url, protocol, "some-model"),
                                           [m.request_body(protocol, "hi there", model="some-model")],
                                           protocol=protocol, num_prompts=count, max_concurrency=3))
                assert all(r.ok for r in run.results)
            records.take(count * len(m.PROTOCOLS))

        drive(2)  # imports, first-call caches, the metrics' children, pooled connections
        found, kinds = cycles_left(lambda: drive(6))
    assert found == 0, kinds


# --- Faults: an upstream made for each ---------------------------------------------------------------


class FaultyUpstream:
    """A raw ASGI upstream: ``opening`` at once, then per ``mode``: ``cut`` (the connection is
    dropped), ``stall`` (nothing more for a long time), ``endless`` (``chunk`` as fast as the
    connection takes it, counting ``sent``), ``malformed`` (bad JSON, then a normal end),
    ``trickle`` (``chunk`` every 0.15 s, 8 times, then the end; ``trickle_cut``: then the cut), ``burst`` (``chunk`` 512 times at
    once, then the end). ``silent`` sends nothing at all, not even its headers, for a long time."""

    def __init__(self, mode: str, opening: bytes = b"", chunk: bytes = b"") -> None:
        self.mode, self.opening, self.chunk = mode, opening, chunk
        self.sent = 0
        self.disconnected = threading.Event()
        self.requests: list[dict] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        message = await receive()
        self.requests.append({"headers": dict(scope["headers"]), "body": message.get("body", b""),
                              "path": scope["path"], "query": scope["query_string"], "method": scope["method"]})
        if self.mode == "silent":
            await asyncio.sleep(30)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"x-upstream", b"yes")]})
        await send({"type": "http.response.body", "body": self.opening, "more_body": True})
        self.sent += len(self.opening)
        watcher = asyncio.ensure_future(self._watch(receive))
        try:
            if self.mode == "cut":
                await asyncio.sleep(0.05)
                raise ConnectionAbortedError("cut on purpose")
            if self.mode == "stall":
                await asyncio.sleep(30)
            if self.mode == "endless":
                while not self.disconnected.is_set():
                    await send({"type": "http.response.body", "body": self.chunk, "more_body": True})
                    self.sent += len(self.chunk)
                    await asyncio.sleep(0)
            trickle = self.mode.startswith("trickle")
            for _ in range(8 if trickle else 512 if self.mode == "burst" else 0):
                if trickle:
                    await asyncio.sleep(0.15)
                await send({"type": "http.response.body", "body": self.chunk, "more_body": True})
                self.sent += len(self.chunk)
            if self.mode == "trickle_cut":
                raise ConnectionAbortedError("cut on purpose")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()

    async def _watch(self, receive):
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnected.set()


OPENING = b'event: response.created\ndata: {"type":"response.created","response":{"id":"r1","status":"in_progress"}}\n\n'
DELTA = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","output_index":0,' \
        b'"content_index":0,"delta":"x"}\n\n'


def test_client_gone_closes_upstream_at_once(engine):
    upstream_app = FaultyUpstream("stall", OPENING)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records) as gateway:
        with httpx.Client(timeout=TIMEOUT) as client:
            with client.stream("POST", gateway.url + "/v1/responses", json={"stream": True}) as reply:
                first = next(reply.iter_raw())
        (record, accumulator), = records.take(1)
        assert upstream_app.disconnected.wait(TIMEOUT)  # long before the stall's 30 s
    assert first == OPENING
    assert record.outcome == "client_gone" and record.bytes == len(OPENING) and record.events == 1
    assert accumulator.response.id == "r1"


def test_a_client_gone_mid_batch_leaves_nothing_forwarded_untapped(engine):
    """The client leaves while the tap holds a batch of chunks (after the first output): they are
    fed before the record is made."""
    upstream_app = FaultyUpstream("trickle", OPENING, DELTA)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records) as gateway:
        received = b""
        with httpx.Client(timeout=TIMEOUT) as client:
            with client.stream("POST", gateway.url + "/v1/responses", json={"stream": True}) as reply:
                for chunk in reply.iter_raw():
                    received += chunk
                    if len(received) >= len(OPENING) + 4 * len(DELTA):
                        break
        (record, accumulator), = records.take(1)
    deltas, rest = divmod(record.bytes - len(OPENING), len(DELTA))
    assert record.outcome == "client_gone" and rest == 0 and deltas >= 4
    assert record.events == 1 + deltas and accumulator.output_text == "x" * deltas


def _received_until_cut(gateway_url: str) -> bytes:
    """What a client streaming a Responses request through the gateway receives before the
    gateway cuts its connection (which it must: httpx sees the reply end early)."""
    received = []
    with httpx.Client(timeout=TIMEOUT) as client, pytest.raises(httpx.RemoteProtocolError):
        with client.stream("POST", gateway_url + "/v1/responses", json={"stream": True}) as reply:
            for chunk in reply.iter_raw():
                received.append(chunk)
    return b"".join(received)


def test_upstream_cut_gives_every_byte_and_then_cuts_the_client(engine, caplog):
    upstream_app = FaultyUpstream("cut", OPENING + DELTA)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records) as gateway:
        received = _received_until_cut(gateway.url)
        (record, accumulator), = records.take(1)
    assert received == OPENING + DELTA  # everything sent, nothing invented
    assert record.outcome == "upstream_cut" and record.bytes == len(OPENING + DELTA) and record.events == 2
    assert accumulator.output_text == "x" and record.ttft is not None


def test_what_came_before_a_cut_is_all_tapped(engine):
    """After the first output the tap is fed in batches; a cut with a batch still held feeds it
    first: the record and the accumulator account for every chunk forwarded."""
    upstream_app = FaultyUpstream("trickle_cut", OPENING, DELTA)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records) as gateway:
        received = _received_until_cut(gateway.url)
        (record, accumulator), = records.take(1)
    assert received == OPENING + DELTA * 8
    assert record.outcome == "upstream_cut" and record.events == 9 and record.chunks >= 8
    assert accumulator.output_text == "x" * 8


def test_upstream_stall_past_the_read_timeout_is_a_cut(engine):
    upstream_app = FaultyUpstream("stall", OPENING + DELTA)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records, read_timeout=0.5) as gateway:
        received = _received_until_cut(gateway.url)
        (record, _), = records.take(1)
        assert upstream_app.disconnected.wait(TIMEOUT)
    assert received == OPENING + DELTA
    assert record.outcome == "upstream_cut" and "0.5 s" in record.error


def test_a_stream_that_keeps_coming_within_the_read_timeout_is_not_cut(engine):
    """The read timeout is upstream's silence, not the stream's length: a chunk every 0.15 s for
    1.2 s under a 0.5 s read timeout goes through whole."""
    upstream_app = FaultyUpstream("trickle", OPENING, DELTA)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records, read_timeout=0.5) as gateway:
        with httpx.Client(timeout=TIMEOUT) as client:
            reply = client.post(gateway.url + "/v1/responses", json={"stream": True})
        (record, _), = records.take(1)
    assert reply.content == OPENING + DELTA * 8
    assert record.outcome == "complete" and record.events == 9 and record.duration > 1.0


def test_a_client_that_stops_reading_past_the_read_timeout_is_not_cut(engine):
    """Waiting on the client (its backpressure) is not upstream's silence: a client that reads
    nothing for twice the read timeout while the gateway holds upstream's reply still gets all
    of it."""
    chunk = DELTA * 600  # ~64 KB
    upstream_app = FaultyUpstream("burst", OPENING, chunk)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records, read_timeout=0.4) as gateway:
        client = socket.create_connection(("127.0.0.1", gateway.address[1]))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        client.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 16\r\n\r\n{\"stream\": true}")
        received = bytearray(client.recv(65536))
        time.sleep(1.0)  # the gateway is held in send() meanwhile: 38 MB do not fit the sockets' buffers
        assert upstream_app.sent < len(OPENING) + 512 * len(chunk)  # upstream is held back too
        client.settimeout(TIMEOUT)
        while not received.endswith(b"0\r\n\r\n"):
            more = client.recv(1 << 20)
            assert more, "the gateway cut the reply"
            received += more
        client.close()
        (record, _), = records.take(1)
    assert record.outcome == "complete", record.error
    assert record.bytes == len(OPENING) + 512 * len(chunk) and record.events == 1 + 512 * 600


def test_an_upstream_that_sends_no_reply_within_the_read_timeout_is_a_502(engine):
    """No headers from upstream for ``read_timeout`` seconds: a 502 in the protocol's shape."""
    records = Records()
    with BackgroundServer(FaultyUpstream("silent")) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records, read_timeout=0.5) as gateway:
        with httpx.Client(timeout=TIMEOUT) as client:
            started = time.monotonic()
            reply = client.post(gateway.url + "/v1/messages", json={"stream": True})
            waited = time.monotonic() - started
        (record, _), = records.take(1)
    assert reply.status_code == 502 and reply.json()["error"]["type"] == "api_error"
    assert record.outcome == "upstream_error" and record.status == 502 and "0.5 s" in record.error
    assert 0.5 <= waited < 5


def free_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens there once closed


class KeepAliveRace:
    """A raw HTTP/1.1 upstream (asyncio streams on a thread of its own) that answers the first
    request on each connection, keeps the connection open, and closes it without an answer when
    a second request arrives on it: what a keep-alive race looks like from the client's side (the
    server closed an idle connection just as a request was written on it; it never processed
    that request). ``answered`` lists the bodies it answered, ``dropped`` counts the others."""

    REPLY = b'{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":' \
            b'{"role":"assistant","content":"hi"},"finish_reason":"stop"}],' \
            b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'

    def __init__(self) -> None:
        self.answered: list[bytes] = []
        self.dropped = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            for count in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = await reader.readexactly(length)
                if count:
                    self.dropped += 1
                    return  # closed, not answered
                self.answered.append(body)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                             % len(self.REPLY) + self.REPLY)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        """Stops serving, ends the connections still open (the gateway's pool keeps one) and
        closes the loop: a handler left suspended on a stopped loop would be finalised later,
        in another test, and its ``writer.close()`` would find the loop closed."""

        async def shutdown() -> None:
            self._server.close()
            handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(TIMEOUT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT)
        self._loop.close()


def test_a_request_on_a_pooled_connection_upstream_just_closed_is_sent_once_more(engine):
    """The keep-alive race: the second request goes out on the pooled connection of the first,
    which upstream closes unanswered. Neither aiohttp's pool nor hyper's resends a POST written
    on a connection (RFC 9112 9.3.1); the gateway sends it once more on a new connection. The
    client gets one correct reply to each request, and upstream answers each exactly once: the
    first, already answered, is not sent again."""
    upstream = KeepAliveRace()
    records = Records()
    try:
        with gateway_on(engine, upstream.url, on_complete=records) as gateway, \
                httpx.Client(timeout=TIMEOUT) as client:
            replies = [client.post(gateway.url + "/v1/chat/completions", json={"model": "m", "n": n})
                       for n in (1, 2)]
            got = records.take(2)
    finally:
        upstream.close()
    assert [r.status_code for r in replies] == [200, 200]
    assert [r.content for r in replies] == [KeepAliveRace.REPLY] * 2
    assert [json.loads(body)["n"] for body in upstream.answered] == [1, 2]  # each once, in order
    assert upstream.dropped == 1 and upstream.connections == 2  # the race did happen, once
    assert [(r.outcome, r.tokens) for r, _ in got] == [("complete", Tokens(input=1, output=1))] * 2


def test_unreachable_upstream_is_a_502_in_each_protocols_error_shape(engine):
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    records = Records()
    with gateway_on(engine, free_port_url(), on_complete=records, connect_timeout=2) as gateway:
        with pytest.raises(openai.APIStatusError) as raised:
            openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert raised.value.status_code == 502 and raised.value.body["type"] == "bad_gateway"
        with pytest.raises(anthropic.APIStatusError) as raised:
            anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0).messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}], stream=True)
        assert raised.value.status_code == 502 and raised.value.body["error"]["type"] == "api_error"
        with httpx.Client(timeout=TIMEOUT) as client:
            gemini = client.post(gateway.url + ROUTES["gemini"], json={})
            other = client.get(gateway.url + "/v1/models")
        assert gemini.status_code == 502 and gemini.json()["error"]["status"] == "UNAVAILABLE"
        assert other.status_code == 502 and other.json()["error"]["code"] == "upstream_unreachable"
        got = [r for r, _ in records.take(4)]
    assert [r.outcome for r in got] == ["upstream_error"] * 4 and {r.status for r in got} == {502}
    assert [r.protocol for r in got] == ["chat", "anthropic", "gemini", None]


def test_a_malformed_stream_is_forwarded_untouched_and_recorded_bad(engine):
    malformed = OPENING + b"data: {not json\n\n" + DELTA + b"data: [1, 2\n\n"
    upstream_app = FaultyUpstream("malformed", malformed)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records) as gateway:
        with httpx.Client(timeout=TIMEOUT) as client:
            reply = client.post(gateway.url + "/v1/responses?x=1", content=b'{"stream": true}',
                                headers={"authorization": "Bearer k", "anthropic-version": "v", "openai-beta": "b",
                                         "x-goog-api-key": "g", "connection": "keep-alive, x-hop", "x-hop": "no",
                                         "accept-encoding": "gzip"})
        (record, accumulator), = records.take(1)
    assert reply.content == malformed and reply.headers["x-upstream"] == "yes"
    assert record.outcome == "bad_stream" and "DecodeError" in record.error
    assert accumulator.output_text == "x"  # the tap read on past the bad payload
    sent, = upstream_app.requests
    assert sent["path"] == "/v1/responses" and sent["query"] == b"x=1" and sent["body"] == b'{"stream": true}'
    headers = sent["headers"]
    assert headers[b"authorization"] == b"Bearer k" and headers[b"anthropic-version"] == b"v"
    assert headers[b"openai-beta"] == b"b" and headers[b"x-goog-api-key"] == b"g"
    assert headers[b"accept-encoding"] == b"identity" and b"x-hop" not in headers


def test_an_exception_in_on_complete_is_logged_and_never_reaches_the_client(engine, synthetic, caplog):
    def broken(record, accumulator):
        raise RuntimeError("the billing database is down")

    with gateway_on(engine, synthetic.url, on_complete=broken) as gateway, \
            caplog.at_level(logging.ERROR, logger="rapidsse.gateway"):
        with httpx.Client(timeout=TIMEOUT) as client:
            first = client.post(gateway.url + "/v1/messages", json={"stream": True, "model": "m"})
            second = client.post(gateway.url + "/v1/messages", json={"stream": True, "model": "m"})
        deadline = time.monotonic() + TIMEOUT
        while sum("on_complete raised" in m for m in caplog.messages) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert first.status_code == second.status_code == 200
    assert first.content.count(b"event: content_block_delta") == 8 and b"message_stop" in second.content
    assert sum("on_complete raised" in m for m in caplog.messages) == 2
    assert "the billing database is down" in caplog.text


def kernel_queues(ports: set[int]) -> int:
    """Bytes in the kernel's send and receive queues of the loopback TCP sockets on ``ports``."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(fields[i].split(":")[1], 16) for i in (1, 2))
        if local in ports or remote in ports:
            tx, rx = (int(part, 16) for part in fields[4].split(":"))
            total += tx + rx
    return total


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the kernel's socket queues (Linux)")
def test_a_slow_client_gets_backpressure(engine):
    """A client that stops reading: upstream is read no further ahead, and what the gateway holds
    itself (what upstream sent, less what the client read and what the kernel's socket queues
    hold) stays under a MiB."""
    chunk = DELTA * 600  # ~64 KB
    upstream_app = FaultyUpstream("endless", OPENING, chunk)
    records = Records()
    with BackgroundServer(upstream_app) as upstream, \
            gateway_on(engine, upstream.url, on_complete=records) as gateway:
        client = socket.create_connection(("127.0.0.1", gateway.address[1]))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        client.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 16\r\n\r\n{\"stream\": true}")
        received = client.recv(65536)
        sent = -1
        deadline = time.monotonic() + TIMEOUT
        while upstream_app.sent != sent and time.monotonic() < deadline:  # until upstream is held back
            sent = upstream_app.sent
            time.sleep(0.5)
        assert upstream_app.sent == sent
        held = sent - len(received) - kernel_queues({upstream.port, gateway.address[1]})
        assert sent < 64 * 1024 * 1024 and held < 1024 * 1024, (sent, held)
        while len(received) < sent:  # the client reads on: the stream flows again
            received += client.recv(1 << 20)
        assert upstream_app.sent > sent
        client.close()
        (record, _), = records.take(1)
    assert record.outcome == "client_gone" and OPENING in received[:4096]


# --- The command line and the example --------------------------------------------------------------


# asyncio engine only: worker processes are the asyncio engine's way to use several cores.
def test_the_command_line_with_two_workers(synthetic, tmp_path):
    """``rapidsse gateway --workers 2``: records as JSON lines, and /metrics counts the exchanges
    of both workers."""
    process = subprocess.Popen([sys.executable, "-m", "rapidsse", "gateway", "--upstream", synthetic.url,
                                "--port", "0", "--workers", "2", "--engine", "asyncio"], stderr=subprocess.PIPE,
                               text=True)
    try:
        line = process.stderr.readline()
        assert line.startswith("rapidsse gateway: http://127.0.0.1:"), line
        url = line.split()[2]
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()
        with httpx.Client(timeout=TIMEOUT) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.get(url + "/metrics")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            for _ in range(6):  # new connections: spread over the workers
                with httpx.Client(timeout=TIMEOUT) as one:
                    assert one.post(url + "/v1/responses", json={"stream": True, "model": "cli"}).status_code == 200
            deadline = time.monotonic() + TIMEOUT
            while True:
                metrics = client.get(url + "/metrics").text
                if 'rapidsse_gateway_requests_total{model="cli",outcome="complete",protocol="responses"} 6.0' \
                        in metrics or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        assert 'rapidsse_gateway_requests_total{model="cli",outcome="complete",protocol="responses"} 6.0' in metrics
    finally:
        process.terminate()
        process.wait(30)
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(records) == 6 and {r["outcome"] for r in records} == {"complete"}
    assert {r["tokens"]["output"] for r in records} == {8}


def test_the_example_bills_each_key(engine, synthetic):
    spec = importlib.util.spec_from_file_location("rapidsse_example_gateway", ROOT / "examples" / "gateway.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    ledger = example.Ledger()
    upstreams = {name: synthetic.url for name in example.UPSTREAMS}
    with example.start_gateway(upstreams, ledger, engine=engine, port=0, log_level="warning", grace=2.0) as gateway, \
            httpx.Client(timeout=TIMEOUT) as c:
        body = {"stream": True, "model": "m", "input": "a b c d"}
        for key in ("one", "two", "two"):
            assert c.post(gateway.url + "/v1/responses", json=body, headers={"authorization": key}).status_code == 200
        claude = c.post(gateway.url + "/v1/messages", json={"stream": True, "model": "m", "max_tokens": 5,
                                                             "messages": [{"role": "user", "content": "a b c d"}]},
                        headers={"x-api-key": "one"})
        anonymous = c.post(gateway.url + "/v1/messages", json={"stream": True, "model": "m"})
        deadline = time.monotonic() + TIMEOUT
        while len(ledger.records) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert claude.status_code == 200 and b"message_stop" in claude.content
    assert anonymous.status_code == 401 and anonymous.json()["error"]["type"] == "authentication_error"
    one, two = (example.api_key({"authorization": key}) for key in ("one", "two"))
    assert one != two and "one" not in one
    fresh, _, output = example.PRICES["default"]
    responses_one = (4 * fresh + 8 * output) / 1e6
    assert ledger.owed[two] == pytest.approx(2 * responses_one)
    assert ledger.owed[one] == pytest.approx(responses_one + (4 * fresh + 5 * output) / 1e6)
    assert sorted((r.caller or "", r.protocol, r.outcome) for r in ledger.records) == sorted(
        [(one, "responses", "complete"), (two, "responses", "complete"), (two, "responses", "complete"),
         (one, "anthropic", "complete"), ("", "anthropic", "rejected")])


# --- The hooks: on_request, the upstreams, the recorder ----------------------------------------------


class RawUpstream:
    """A raw HTTP/1.1 upstream (asyncio streams on a thread of its own) that records each request
    as it came on the wire (request line, headers, body) and answers JSON naming itself, keeping
    the connection open. ``requests`` lists ``(request_line, {name: value}, body)``."""

    def __init__(self, name: str = "upstream", ssl_context=None) -> None:
        self.name = name
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0,
                                                                          ssl=ssl_context))
        self.url = "%s://127.0.0.1:%d" % ("https" if ssl_context else "http", self._server.sockets[0].getsockname()[1])
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    async def _serve(self, reader, writer):
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                headers = {}
                for line in head[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append((head[0], headers, body))
                reply = json.dumps({"upstream": self.name, "line": head[0]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                             % len(reply) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(TIMEOUT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT)
        self._loop.close()

    def __enter__(self) -> RawUpstream:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def test_parse_upstreams():
    assert parse_upstreams("https://api.openai.com/") == {"default": "https://api.openai.com"}
    assert parse_upstreams({"b": "http://127.0.0.1:8000/v1/", "a": "https://x.example"}) == {
        "b": "http://127.0.0.1:8000/v1", "a": "https://x.example"}
    assert list(parse_upstreams({"z": "http://z.example", "a": "http://a.example"})) == ["z", "a"]  # first: default
    for bad, said in [("ftp://x.example", "http:// or https://"), ("http://", "no host"), ("api.openai.com", "http"),
                      ("http://x.example/?a=1", "no query"), ("http://x.example/#f", "no query or fragment"),
                      ("http://user:pw@x.example", "credentials"), ("http://x.example:99999", "not a valid URL"),
                      ({}, "names no upstream"), ({"": "http://x.example"}, "non-empty"), (["http://x"], "mapping")]:
        with pytest.raises(ValueError, match=said):
            parse_upstreams(bad)


def test_reject_takes_error_statuses_only():
    assert Reject(403, "no").status == 403
    for status in (200, 302, 600):
        with pytest.raises(ValueError, match="400-599"):
            Reject(status, "no")


def test_engine_choice():
    with pytest.raises(ValueError, match="engine must be one of"):
        rapidsse.gateway.start("http://127.0.0.1:1", engine="twisted", port=0)
    with pytest.raises(ValueError, match="threads must be None or 1"):
        rapidsse.gateway.start("http://127.0.0.1:1", engine="asyncio", threads=4, port=0)
    with pytest.raises(ValueError, match="no host"):
        rapidsse.gateway.start("http://", engine="asyncio", port=0)
    if rapidsse.BACKEND == "python":
        assert rapidsse.gateway.default_engine() == "asyncio"
        with pytest.raises(RuntimeError, match="compiled extension"):
            rapidsse.gateway.start("http://127.0.0.1:1", engine="native", port=0)
    else:
        assert rapidsse.gateway.default_engine() == ("asyncio" if native_engine_skip() else "native")


def test_on_request_routes_by_protocol_to_one_of_several_upstreams(engine):
    routes = {"anthropic": "claude", "gemini": "google"}
    seen: list[GatewayRequest] = []

    def on_request(request: GatewayRequest):
        seen.append((request.method, request.path, request.query, request.protocol, request.model, request.body,
                     request.upstream))
        request.upstream = routes.get(request.protocol)
        return None

    records = Records()
    with RawUpstream("openai") as openai, RawUpstream("claude") as claude, RawUpstream("google") as google, \
            gateway_on(engine, {"openai": openai.url, "claude": claude.url, "google": google.url},
                       on_request=on_request, on_complete=records) as gateway, httpx.Client(timeout=TIMEOUT) as client:
        replies = [client.post(gateway.url + "/v1/chat/completions?x=1", json={"model": "gpt"}),
                   client.post(gateway.url + "/v1/messages", json={"model": "claude-x"}),
                   client.post(gateway.url + "/v1beta/models/gemini-x:generateContent", json={}),
                   client.get(gateway.url + "/v1/models")]
        got = [r for r, _ in records.take(4)]
    assert [r.json()["upstream"] for r in replies] == ["openai", "claude", "google", "openai"]
    assert [line for line, _, _ in openai.requests] == ["POST /v1/chat/completions?x=1 HTTP/1.1",
                                                        "GET /v1/models HTTP/1.1"]
    assert claude.requests[0][0] == "POST /v1/messages HTTP/1.1" and len(google.requests) == 1
    assert seen[0] == ("POST", "/v1/chat/completions", "x=1", "chat", "gpt", b'{"model":"gpt"}', None)
    assert seen[2][3:5] == ("gemini", "gemini-x") and seen[3][3] is None
    assert [(r.protocol, r.outcome, r.caller) for r in got] == [
        ("chat", "complete", None), ("anthropic", "complete", None), ("gemini", "complete", None), (None, "complete", None)]


def test_on_request_edits_the_headers_upstream_sees_and_names_the_caller(engine):
    def on_request(request: GatewayRequest):
        key = request.headers.pop("authorization")
        request.caller = "caller-" + key[-4:]
        request.headers["x-api-key"] = "gateway-held-key"  # replaces the client's
        request.headers["x-added"] = "yes"
        del request.headers["x-drop"]
        return None

    records = Records()
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_request=on_request,
                                               on_complete=records) as gateway:
        reply = httpx.post(gateway.url + "/v1/messages", json={"model": "m"}, timeout=TIMEOUT,
                           headers={"authorization": "Bearer client-1234", "x-api-key": "client-key",
                                    "x-drop": "no", "anthropic-version": "v"})
        (record, _), = records.take(1)
    assert reply.status_code == 200
    _, headers, _ = upstream.requests[0]
    assert headers["x-api-key"] == "gateway-held-key" and headers["x-added"] == "yes"
    assert headers["anthropic-version"] == "v" and "authorization" not in headers and "x-drop" not in headers
    assert record.caller == "caller-1234" and record.outcome == "complete"
    assert json.loads(msgspec_json(record))["caller"] == "caller-1234"


def msgspec_json(record) -> bytes:
    import msgspec

    return msgspec.json.encode(record)


@pytest.mark.parametrize("protocol,route,check", [
    ("chat", "/v1/chat/completions", lambda e: e["error"]["message"] == "quota spent" and e["error"]["type"]
     == "invalid_request_error"),
    ("anthropic", "/v1/messages", lambda e: e["type"] == "error" and e["error"] == {
        "type": "rate_limit_error", "message": "quota spent"}),
    ("gemini", "/v1beta/models/g:streamGenerateContent", lambda e: e["error"] == {
        "code": 429, "message": "quota spent", "status": "RESOURCE_EXHAUSTED"}),
])
def test_a_rejected_request_gets_the_status_in_its_apis_error_shape(engine, protocol, route, check):
    records = Records()
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_complete=records,
                                               on_request=lambda request: Reject(429, "quota spent")) as gateway:
        reply = httpx.post(gateway.url + route, json={"model": "m", "stream": True}, timeout=TIMEOUT)
        (record, accumulator), = records.take(1)
    assert reply.status_code == 429 and reply.headers["content-type"] == "application/json"
    assert check(reply.json()), reply.json()
    assert upstream.requests == []  # never contacted
    assert record.outcome == "rejected" and record.status == 429 and record.protocol == protocol
    assert "quota spent" in record.error and accumulator is None


def test_an_on_request_that_raises_is_a_500_and_logged(engine, caplog):
    def on_request(request):
        raise KeyError("the caller table is gone")

    records = Records()
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_request=on_request,
                                               on_complete=records) as gateway, \
            caplog.at_level(logging.ERROR, logger="rapidsse.gateway"):
        openai_style = httpx.post(gateway.url + "/v1/responses", json={}, timeout=TIMEOUT)
        anthropic_style = httpx.post(gateway.url + "/v1/messages", json={}, timeout=TIMEOUT)
        got = [r for r, _ in records.take(2)]
    assert openai_style.status_code == anthropic_style.status_code == 500
    assert openai_style.json()["error"]["type"] == "server_error"
    assert anthropic_style.json()["error"]["type"] == "api_error"
    assert "the caller table is gone" not in openai_style.text  # the client is not told the gateway's insides
    assert upstream.requests == []
    assert [r.outcome for r in got] == ["rejected"] * 2 and {r.status for r in got} == {500}
    assert all("on_request raised KeyError" in r.error for r in got)
    assert "the caller table is gone" in caplog.text and "on_request raised" in caplog.text


def test_a_slow_on_complete_does_not_delay_streams(engine, synthetic):
    """``on_complete`` sleeps 0.5 s per record: 24 streams still take well under that each, since
    the records wait on the recorder's thread, not the streams."""
    done: list[ExchangeRecord] = []

    def slow(record, accumulator):
        time.sleep(0.5)
        done.append(record)

    with gateway_on(engine, synthetic.url, on_complete=slow, grace=1.0) as gateway, \
            httpx.Client(timeout=TIMEOUT) as client:
        started = time.monotonic()
        for _ in range(24):
            reply = client.post(gateway.url + "/v1/chat/completions", json={"stream": True, "model": "m"})
            assert reply.status_code == 200 and b"[DONE]" in reply.content
        took = time.monotonic() - started
        assert took < 6.0, took  # 24 x 0.5 s = 12 s if the streams waited on the hook
        assert len(done) < 24  # the hook really is behind


def test_the_recorder_drops_and_counts_what_a_slow_on_complete_cannot_take(caplog):
    """Past ``max_pending`` queued records, ``submit`` drops (never blocks), counts each drop in
    ``rapidsse_gateway_records_dropped_total`` and warns once; the queued ones still reach the
    hook, an async one included."""
    release = threading.Event()
    entered = threading.Event()
    seen: list[str] = []

    async def slow(record, accumulator):
        await asyncio.sleep(0)
        entered.set()
        release.wait(TIMEOUT)
        seen.append(record.path)

    metrics = Metrics()
    recorder = Recorder(metrics, slow, max_pending=3)
    with caplog.at_level(logging.WARNING, logger="rapidsse.gateway"):
        recorder.submit(ExchangeRecord(protocol="chat", method="POST", path="/0"), None)
        assert entered.wait(TIMEOUT)
        started = time.monotonic()
        for n in range(1, 10):
            recorder.submit(ExchangeRecord(protocol="chat", method="POST", path=f"/{n}"), None)
        assert time.monotonic() - started < 0.5
        deadline = time.monotonic() + TIMEOUT
        while "falling behind" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
    # one is in the hook, three are queued: six dropped
    assert recorder.dropped == 6
    assert caplog.text.count("falling behind") == 1
    exposition = metrics.exposition().decode()
    assert "rapidsse_gateway_records_dropped_total 6.0" in exposition
    assert 'rapidsse_gateway_requests_total{model="",outcome="complete",protocol="chat"} 10.0' in exposition
    release.set()
    assert recorder.close(TIMEOUT)
    assert seen == ["/0", "/1", "/2", "/3"]


def test_the_recorder_logs_a_batch_as_one_message_unless_log_record_is_asked_for(caplog):
    """With no ``on_complete`` a batch of records is one log message, one JSON line per record, in
    order; ``on_complete=log_record`` passed on purpose keeps one log record per exchange."""
    paths = [f"/{n}" for n in range(50)]
    for on_complete, messages in ((None, None), (rapidsse.gateway.log_record, len(paths))):
        caplog.clear()
        recorder = Recorder(None, on_complete)
        with caplog.at_level(logging.INFO, logger="rapidsse.gateway"):
            recorder.submit_many([(ExchangeRecord(protocol="chat", method="POST", path=p), None)
                                  for p in paths])
            assert recorder.close(TIMEOUT)
        logged = [r.getMessage() for r in caplog.records if r.name == "rapidsse.gateway"]
        lines = [line for message in logged for line in message.split("\n")]
        assert [json.loads(line)["path"] for line in lines] == paths
        if messages is None:
            assert 1 <= len(logged) < len(paths)  # taken in batches, not one by one
        else:
            assert len(logged) == messages


# asyncio engine only: max_pending is create_gateway's (the recorder is the same on both engines, and
# is tested above on its own).
def test_records_past_max_pending_are_counted_in_the_metrics(synthetic):
    release = threading.Event()

    def stuck(record, accumulator):
        release.wait(TIMEOUT)

    app = create_gateway(synthetic.url, on_complete=stuck, max_pending=2)
    try:
        with BackgroundServer(app) as gateway, httpx.Client(timeout=TIMEOUT) as client:
            for _ in range(8):
                assert client.post(gateway.url + "/v1/chat/completions", json={"stream": True}).status_code == 200
            deadline = time.monotonic() + TIMEOUT
            while True:  # the last record is made just after its reply ended
                metrics = client.get(gateway.url + "/metrics").text
                if "requests_total" in metrics and 'protocol="chat"} 8.0' in metrics or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
    finally:
        release.set()
    assert app.recorder.dropped == 5  # one in the hook, two queued
    assert "rapidsse_gateway_records_dropped_total 5.0" in metrics


def test_metrics_on_a_port_of_their_own(engine, synthetic):
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_complete=Records(), metrics_port=0) \
            as gateway, httpx.Client(timeout=TIMEOUT) as client:
        client.post(gateway.url + "/v1/chat/completions", json={"model": "apart"})
        host, port = gateway.metrics_address
        deadline = time.monotonic() + TIMEOUT
        while True:
            metrics = client.get(f"http://{host}:{port}/metrics").text
            if 'model="apart"' in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        forwarded = client.get(gateway.url + "/metrics")
    assert 'rapidsse_gateway_requests_total{model="apart",outcome="complete",protocol="chat"} 1.0' in metrics
    assert forwarded.json()["upstream"] == "upstream" and upstream.requests[-1][0] == "GET /metrics HTTP/1.1"


# --- Security: the upstream is the configuration's, requests are framed strictly, limits hold ------


def raw_exchange(port: int, data: bytes, *, wait: float = TIMEOUT) -> bytes:
    """Sends ``data`` on a new connection and returns all that comes back until the server
    closes it (or ``wait`` seconds pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        received = b""
        try:
            while more := sock.recv(65536):
                received += more
        except (ConnectionResetError, socket.timeout):
            pass
    return received


def test_the_upstream_host_never_comes_from_the_request(engine):
    records = Records()
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_complete=records) as gateway:
        port = gateway.address[1]
        for target, host in [(b"http://evil.example/v1/models?a=1", b"evil.example"),
                             (b"//evil.example/v1/models", b"x"),
                             (b"/v1/models", b"evil.example:443")]:
            reply = raw_exchange(port, b"GET %s HTTP/1.1\r\nhost: %s\r\nconnection: close\r\n\r\n" % (target, host))
            assert reply.startswith(b"HTTP/1.1 200"), reply
        records.take(3)
    upstream_host = upstream.url.removeprefix("http://")
    assert [line for line, _, _ in upstream.requests] == [
        "GET /v1/models?a=1 HTTP/1.1", "GET //evil.example/v1/models HTTP/1.1", "GET /v1/models HTTP/1.1"]
    assert [headers["host"] for _, headers, _ in upstream.requests] == [upstream_host] * 3


@pytest.mark.parametrize("framing", [
    b"content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    b"transfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n",
    b"content-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
    b"content-length: 5\r\ncontent-length: 5\r\n\r\nhello",
], ids=["cl-then-te", "te-then-cl", "two-content-lengths", "two-equal-content-lengths"])
def test_an_ambiguous_body_framing_is_a_400(engine, framing):
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_complete=Records()) as gateway:
        reply = raw_exchange(gateway.address[1], b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + framing)
    assert reply.startswith(b"HTTP/1.1 400"), reply
    assert upstream.requests == []


def test_a_header_block_over_max_header_bytes_is_a_431(engine):
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_complete=Records(),
                                               max_header_bytes=4096) as gateway:
        port = gateway.address[1]
        under = raw_exchange(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-pad: %s\r\nconnection: close\r\n\r\n"
                             % (b"a" * 3000))
        one_big = raw_exchange(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-pad: %s\r\n\r\n" % (b"a" * 8000))
        many = raw_exchange(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\n"
                            + b"".join(b"x-pad-%d: %s\r\n" % (n, b"a" * 40) for n in range(200)) + b"\r\n")
        endless = raw_exchange(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 100_000)
    assert under.startswith(b"HTTP/1.1 200"), under
    for reply in (one_big, many, endless):
        assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
    assert len(upstream.requests) == 1


def test_a_body_over_max_body_bytes_is_a_413_before_upstream_is_contacted(engine):
    records = Records()
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_complete=records,
                                               max_body_bytes=1024) as gateway:
        port = gateway.address[1]
        fits = raw_exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n"
                            b"connection: close\r\n\r\n" + b"a" * 1000)
        declared = raw_exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2048\r\n\r\n"
                                + b"a" * 2048)
        chunks = b"".join(b"200\r\n" + b"a" * 512 + b"\r\n" for _ in range(4)) + b"0\r\n\r\n"
        chunked = raw_exchange(port, b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                               + chunks)
        got = [r for r, _ in records.take(3)]
    assert fits.startswith(b"HTTP/1.1 200"), fits
    assert declared.startswith(b"HTTP/1.1 413") and b'"code":"request_too_large"' in declared, declared
    assert chunked.startswith(b"HTTP/1.1 413") and b'"request_too_large"' in chunked, chunked  # Anthropic's shape
    assert [body for _, _, body in upstream.requests] == [b"a" * 1000]
    assert sorted((r.outcome, r.status) for r in got) == [("complete", 200), ("rejected", 413), ("rejected", 413)]


def test_a_client_that_does_not_finish_its_header_block_is_disconnected(engine):
    with RawUpstream() as upstream, gateway_on(engine, upstream.url, on_complete=Records(),
                                               header_timeout=0.5) as gateway:
        port = gateway.address[1]
        started = time.monotonic()
        partial = raw_exchange(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-slow: ")
        waited = time.monotonic() - started
        started = time.monotonic()
        silent = raw_exchange(port, b"")
        waited_silent = time.monotonic() - started
        # a client slower than that between its bytes, but within the timeout, is served
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n")
            time.sleep(0.2)
            sock.sendall(b"connection: close\r\n\r\n")
            served = sock.recv(65536)
    assert partial in (b"",) or partial.startswith(b"HTTP/1.1 408"), partial
    assert silent in (b"",) or silent.startswith(b"HTTP/1.1 408"), silent
    assert 0.4 <= waited < 5 and 0.4 <= waited_silent < 5, (waited, waited_silent)
    assert served.startswith(b"HTTP/1.1 200") and len(upstream.requests) == 1


def test_the_clients_keys_never_reach_a_record_a_log_line_or_a_metric(engine, synthetic, caplog, capfd):
    secrets = {"authorization": "Bearer sk-SECRET-AUTH-0001", "x-api-key": "SECRET-XAPI-0002",
               "x-goog-api-key": "SECRET-GOOG-0003"}
    records = Records()

    def on_complete(record, accumulator):
        rapidsse.gateway.log_record(record, accumulator)  # the default's JSON line, logged
        records(record, accumulator)

    def on_request(request):
        if request.path.endswith("/fail"):
            raise RuntimeError("the hook failed")
        request.upstream = "synthetic" if request.protocol == "chat" else None
        return None

    gateway_logger = logging.getLogger("rapidsse.gateway")
    level = gateway_logger.level
    try:
        with caplog.at_level(logging.DEBUG), RawUpstream() as upstream, \
                gateway_on(engine, {"raw": upstream.url, "synthetic": synthetic.url}, on_request=on_request,
                           on_complete=on_complete, log_level="debug", max_body_bytes=64) as gateway, \
                httpx.Client(timeout=TIMEOUT, headers=secrets) as client:
            assert b"[DONE]" in client.post(gateway.url + "/v1/chat/completions", json={"stream": True}).content
            assert client.post(gateway.url + "/v1/messages", json={"model": "m"}).status_code == 200
            assert client.post(gateway.url + "/v1beta/models/g:generateContent", json={}).status_code == 200
            assert client.post(gateway.url + "/v1/fail", json={}).status_code == 500
            assert client.post(gateway.url + "/v1/messages", content=b"x" * 100).status_code == 413
            got = records.take(5)
            metrics = client.get(gateway.url + "/metrics").text
            time.sleep(0.2)  # the last log lines
    finally:
        gateway_logger.setLevel(level)
    out, err = capfd.readouterr()
    seen = "\n".join([caplog.text, out, err, metrics] + [msgspec_json(r).decode() + repr(r) for r, _ in got])
    assert '"outcome":"complete"' in caplog.text and "on_request raised" in caplog.text  # the logs were captured
    for secret in secrets.values():
        assert secret.split()[-1] not in seen
    _, headers, _ = upstream.requests[0]
    assert headers["x-api-key"] == secrets["x-api-key"]  # they did go upstream, where they belong


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pipe_bytes_unread(fd: int) -> int:
    import fcntl
    import struct
    import termios

    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


@pytest.mark.skipif(sys.platform != "linux", reason="reads the pipe's fill (FIONREAD on Linux)")
def test_a_stderr_nobody_reads_stalls_no_stream(engine, synthetic):
    """``rapidsse gateway`` with its stderr a pipe the test never reads: the pipe fills with the
    records' JSON lines, and 600 streams still all go through (the log lines that do not fit are
    dropped, not waited for)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "rapidsse", "gateway", "--engine", engine, "--upstream",
                                synthetic.url, "--port", str(port), "--log-level", "debug"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=TIMEOUT, limits=httpx.Limits(max_connections=16)) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.get(url + "/metrics")
                    break
                except httpx.TransportError:
                    assert process.poll() is None and time.monotonic() < deadline
                    time.sleep(0.1)

            def stream(n: int) -> bool:
                reply = client.post(url + "/v1/chat/completions", json={"stream": True, "model": f"m{n % 7}"})
                return reply.status_code == 200 and reply.content.rstrip().endswith(b"data: [DONE]")

            started = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(stream, range(600), timeout=120))
            took = time.monotonic() - started
        assert all(results) and took < 120
        # The pipe is full, so the stall was real: 600 records' JSON lines (over 100 KB) did not fit
        # in its 64 KiB. (Not to the byte: the records are logged in batches, and the write of a
        # batch that does not fit leaves the pipe's last pages part empty.)
        assert pipe_bytes_unread(process.stderr.fileno()) >= 32_768
        # Its descriptor table was grown when it started (rust/src/net/fds.rs, rapidsse.serving.fds),
        # not while these streams opened.
        assert descriptor_table(process.pid) >= expected_table(), descriptor_table(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)
        process.stderr.close()


def private_ca(tmp_path: Path):
    """A CA of the test's own (its PEM in ``tmp_path``) and a server TLS context for 127.0.0.1
    signed by it."""
    import datetime
    import ipaddress
    import ssl

    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject, key, issuer, issuer_key, ca: bool):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                            critical=True)
        else:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(
                "127.0.0.1"))]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rapidsse test CA")])
    ca = certificate(ca_name, ca_key, ca_name, ca_key, True)
    leaf = certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), key, ca_name, ca_key, False)
    ca_pem = tmp_path / "ca.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = tmp_path / "server.pem"
    chain.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    return ca_pem, context


def test_an_https_upstream_signed_by_a_private_ca(engine, tmp_path):
    """``upstream_ca`` trusts a private CA for https upstreams; without it the same upstream is
    not trusted (a 502)."""
    ca_pem, context = private_ca(tmp_path)
    records = Records()
    with RawUpstream("tls", ssl_context=context) as upstream:
        with gateway_on(engine, upstream.url, on_complete=records, upstream_ca=str(ca_pem)) as gateway:
            trusted = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m"}, timeout=TIMEOUT)
        with gateway_on(engine, upstream.url, on_complete=records, connect_timeout=5) as gateway:
            untrusted = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m"}, timeout=TIMEOUT)
        got = [r for r, _ in records.take(2)]
    assert trusted.status_code == 200 and trusted.json()["upstream"] == "tls"
    assert untrusted.status_code == 502 and len(upstream.requests) == 1
    assert [r.outcome for r in got] == ["complete", "upstream_error"]


def test_an_http2_upstream_over_tls(engine, tmp_path):
    """hypercorn serving the replay app over TLS, offering HTTP/2 by ALPN: the native engine's
    pooled client takes HTTP/2 (aiohttp, the asyncio engine's, speaks HTTP/1.1 only), and either
    way the streams come through byte for byte and are tapped."""
    hypercorn = pytest.importorskip("hypercorn")
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    from rapidsse.serving.serve import create_app

    ca_pem, _ = private_ca(tmp_path)
    files = [SMALL["chat"][0], SMALL["anthropic"][0]]
    versions: list[str] = []
    app = create_app(files)

    async def seen(scope, receive, send):
        if scope["type"] == "http":
            versions.append(scope["http_version"])
        await app(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn's from here on
    config.certfile = config.keyfile = str(tmp_path / "server.pem")
    config.alpn_protocols = ["h2", "http/1.1"]
    config.loglevel = "WARNING"
    loop = asyncio.new_event_loop()
    stopping = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete,
                              args=(hypercorn_serve(seen, config, shutdown_trigger=stopping.wait),), daemon=True)
    thread.start()
    records = Records()
    try:
        with gateway_on(engine, f"https://127.0.0.1:{port}", on_complete=records, upstream_ca=str(ca_pem)) as gateway:
            replies = {}
            for path in files:
                protocol = "chat" if path in SMALL["chat"] else "anthropic"
                route = "/v1/chat/completions" if protocol == "chat" else "/v1/messages"
                reply = httpx.post(gateway.url + route, json={"model": "m", "stream": True}, timeout=TIMEOUT)
                replies[path] = reply
            got = [r for r, _ in records.take(len(files))]
    finally:
        loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout=10)
    assert hypercorn is not None
    for path, reply in replies.items():
        assert reply.status_code == 200 and reply.content == path.read_bytes(), path.name
    assert sorted(r.protocol for r in got) == ["anthropic", "chat"]
    assert all(r.outcome == "complete" and r.events and r.ttft is not None for r in got), got
    assert versions == (["2", "2"] if engine == "native" else ["1.1", "1.1"]), versions
