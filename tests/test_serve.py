"""The replay and synthetic servers (``rapidsse serve``) on loopback, consumed by the openai,
anthropic and google-genai SDKs, httpx (sync and async, concurrent streams), ``rapidsse measure``
in a subprocess and a websockets client. The synthetic server's tests run on both engines
(``asyncio`` and ``native``; native is skipped on the pure-Python backend), and the native one's
streams are checked byte for byte against the asyncio one's."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import rapidsse  # noqa: E402
from rapidsse import ChatAccumulator, RealtimeAccumulator, ResponseAccumulator  # noqa: E402
from rapidsse.integrations import to_builtins  # noqa: E402
from rapidsse.serving.serve import (  # noqa: E402
    Pacing,
    ReplayServer,
    Synthetic,
    SyntheticServer,
    choose_engine,
    load_recording,
    native_available,
    recording_protocol,
    split_events,
)

from .conftest import ROOT, corpus_files, descriptor_table, expected_table  # noqa: E402

RESPONSES = corpus_files("responses")
CHATS = corpus_files("chat")
REALTIME = corpus_files("realtime")
ANTHROPIC = corpus_files("anthropic")
GEMINI = corpus_files("gemini")
TEXT_RESPONSE = next(p for p in RESPONSES if "include_raw_annotations" in p.name)
TEXT_CHAT = next(p for p in CHATS if p.name == "openai-python__e2aad469b71d.sse")
TIMEOUT = 10.0


def accumulated(path: Path) -> ResponseAccumulator | ChatAccumulator:
    acc = ChatAccumulator() if path.parent.name == "chat" else ResponseAccumulator()
    acc.feed(path.read_bytes())
    acc.close()
    return acc


# --- Recordings (no server) -------------------------------------------------------------------


@pytest.mark.parametrize("path", RESPONSES + CHATS + REALTIME + ANTHROPIC + GEMINI, ids=lambda p: p.stem)
def test_recordings_split_exactly_and_protocol_is_detected(path):
    data = path.read_bytes()
    expected = path.parent.name
    assert recording_protocol(data) == expected
    recording = load_recording(path)
    if expected == "realtime":
        assert recording.events == [line for line in data.splitlines() if line.strip()]
        return
    assert b"".join(split_events(data)) == data == recording.body
    framed = len([e for e in rapidsse.iter_sse([data])])
    assert framed <= len(recording.events) <= framed + 1  # a trailing comment or blank line may follow
    if expected == "gemini":
        assert recording.final is None  # its route always streams
        return
    if expected == "anthropic":
        accumulator = rapidsse.AnthropicAccumulator(on_error="skip")
        accumulator.feed(data)
        accumulator.close()
        assert recording.final == to_builtins(accumulator.message) and recording.final["id"]
        return
    assert recording.final == to_builtins(accumulated(path).response if expected == "responses"
                                          else accumulated(path).completion)


def test_split_events_keeps_every_line_ending():
    body = b"data: a\r\n\r\n\n\ndata: b\rdata: c\r\r: tail\n"
    assert split_events(body) == [b"data: a\r\n\r\n", b"\n\ndata: b\rdata: c\r\r", b": tail\n"]


def test_pacing_schedule_and_validation():
    assert Pacing(ttft=0.5, rate=4).due(0) == 0.5 and Pacing(ttft=0.5, rate=4).due(2) == 1.0
    assert Pacing().due(100) == 0.0
    with pytest.raises(ValueError):
        Pacing(rate=-1)
    assert recording_protocol(b": nothing yet\n\n") is None


# --- The openai SDK ------------------------------------------------------------------------------


def test_openai_sdk_responses_on_the_corpus(engine):
    """One server with the Responses recordings: requests rotate through them in order, so each
    pass of ``len(files)`` requests meets every file once. (The files over 50 KB are left to the
    httpx tests: the SDK's per-event pydantic work makes them slow.)"""
    openai = pytest.importorskip("openai")
    files = [p for p in RESPONSES if p.stat().st_size < 50_000]
    with ReplayServer(files, engine=engine) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        with warnings.catch_warnings():
            # the SDK's own serializer warns about recorded fields newer or older than its models
            warnings.simplefilter("ignore", UserWarning)
            streamed = [list(client.responses.create(model="m", input="hi", stream=True)) for _ in files]
            finals = []
            for _ in files:
                with client.responses.stream(model="m", input="hi") as stream:
                    finals.append(stream.get_final_response())
            wholes = [client.responses.create(model="m", input="hi") for _ in files]
    for path, events, final, whole in zip(files, streamed, finals, wholes):
        acc = accumulated(path)
        expected_types = [e.type for e in rapidsse.iter_events([path.read_bytes()], "responses")]
        assert [e.type for e in events] == expected_types, path.name
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert deltas == final.output_text == whole.output_text == acc.output_text, path.name
        assert final.id == whole.id == acc.response.id, path.name
        assert whole.status == acc.response.status, path.name


@pytest.mark.parametrize("path", [p for p in CHATS if p.stem.startswith(("openai-python", "test_zai", "test_groq"))],
                         ids=lambda p: p.stem)
def test_openai_sdk_chat(path, engine):
    openai = pytest.importorskip("openai")
    acc = accumulated(path)
    completion = acc.completion
    messages = [{"role": "user", "content": "hi"}]
    with ReplayServer([path], engine=engine) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        if any(w.startswith("error event") for w in acc.warnings):
            # an error chunk: the SDK raises, as it would against the server that sent it
            with pytest.raises(openai.APIError):
                list(client.chat.completions.create(model="m", messages=messages, stream=True))
            return
        chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True))
        whole = client.chat.completions.create(model="m", messages=messages)
    expected = list(rapidsse.iter_events([path.read_bytes()], "chat"))
    assert [c.id for c in chunks] == [c.id for c in expected]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (completion.choices[0].message.content or "")
    assert whole.choices[0].message.content == completion.choices[0].message.content
    assert whole.id == completion.id and whole.choices[0].finish_reason == completion.choices[0].finish_reason


# --- httpx: bytes as recorded, concurrent streams, pacing ----------------------------------------


def test_httpx_sync_rotates_and_bytes_equal_the_files(engine):
    files = [TEXT_RESPONSE, RESPONSES[0]]
    with ReplayServer(files + [TEXT_CHAT], engine=engine) as server, httpx.Client(timeout=TIMEOUT) as client:
        for i in range(4):
            with client.stream("POST", server.url + "/v1/responses", json={"stream": True}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                assert response.read() == files[i % 2].read_bytes()
        body = client.post(server.url + "/v1/chat/completions", json={"stream": True}).content
        assert body == TEXT_CHAT.read_bytes()


def test_httpx_async_concurrent_streams(engine):
    big = max(RESPONSES, key=lambda p: p.stat().st_size)
    files = {TEXT_RESPONSE.read_bytes(), big.read_bytes()}

    async def run(url: str) -> list[bytes]:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:

            async def one() -> bytes:
                async with client.stream("POST", url, json={"stream": True}) as response:
                    chunks = [chunk async for chunk in response.aiter_bytes()]
                return b"".join(chunks)

            return await asyncio.gather(*(one() for _ in range(8)))

    with ReplayServer([TEXT_RESPONSE, big], rate=2000, engine=engine) as server:
        bodies = asyncio.run(asyncio.wait_for(run(server.url + "/v1/responses"), TIMEOUT))
    assert set(bodies) == files and bodies.count(big.read_bytes()) == 4


def test_pacing_delays_first_event_then_paces(engine):
    path = TEXT_CHAT  # 34 SSE blocks
    events = load_recording(path).events
    with ReplayServer([path], ttft=0.15, rate=200, engine=engine) as server, httpx.Client(timeout=TIMEOUT) as client:
        start = time.perf_counter()
        with client.stream("POST", server.url + "/v1/chat/completions", json={"stream": True}) as response:
            first = None
            for _ in response.iter_raw():
                first = first if first is not None else time.perf_counter() - start
        total = time.perf_counter() - start
    expected_total = 0.15 + (len(events) - 1) / 200
    assert 0.14 <= first < 0.15 + 0.2
    assert expected_total - 0.01 <= total < expected_total + 0.5


def test_stream_false_returns_the_accumulated_object(engine):
    with ReplayServer([TEXT_RESPONSE, TEXT_CHAT], engine=engine) as server, httpx.Client(timeout=TIMEOUT) as client:
        for route, path, body in (
            ("/v1/responses", TEXT_RESPONSE, {"stream": False}),
            ("/v1/chat/completions", TEXT_CHAT, {}),
        ):
            response = client.post(server.url + route, json=body)
            assert response.status_code == 200 and response.headers["content-type"] == "application/json"
            acc = accumulated(path)
            final = acc.response if isinstance(acc, ResponseAccumulator) else acc.completion
            assert response.json() == to_builtins(final)


def test_errors_and_health(engine):
    with ReplayServer([TEXT_RESPONSE], engine=engine) as server, httpx.Client(timeout=TIMEOUT) as client:
        health = client.get(server.url + "/health").json()
        assert health == {"status": "ok", "recordings": {"responses": 1, "chat": 0, "completions": 0, "anthropic": 0,
                                                         "gemini": 0, "realtime": 0}}
        missing = client.post(server.url + "/v1/chat/completions", json={"stream": True})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "no_recording"
        bad = client.post(server.url + "/v1/responses", content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        listed = client.post(server.url + "/v1/responses", json=[1])
        assert listed.status_code == 400 and listed.json()["error"]["code"] == "invalid_json"
        assert client.get(server.url + "/v1/responses").status_code == 405
        assert client.post(server.url + "/v1/nowhere", json={}).status_code == 404
        websockets = pytest.importorskip("websockets")
        from websockets.sync.client import connect

        with pytest.raises(websockets.exceptions.InvalidStatus, match="403"):
            connect(server.ws_url, open_timeout=TIMEOUT)


# --- rapidsse measure ---------------------------------------------------------------------------


@pytest.mark.parametrize("route,protocol", [("/v1/responses", "responses"), ("/v1/chat/completions", "chat")])
def test_measure_subprocess(tmp_path, route, protocol, engine):
    report_file = tmp_path / "report.json"
    path = TEXT_RESPONSE if protocol == "responses" else TEXT_CHAT
    deltas = sum(
        1 for e in rapidsse.iter_events([path.read_bytes()], protocol)
        if (protocol == "responses" and e.type == "response.output_text.delta")
        or (protocol == "chat" and any(c.delta and c.delta.content for c in e.choices))
    )
    with ReplayServer([path], ttft=0.02, rate=1000, engine=engine) as server:
        done = subprocess.run(
            [sys.executable, "-m", "rapidsse", "measure", "--url", server.url + route, "--requests", "6",
             "--concurrency", "3", "--save-result", str(report_file), "--no-progress"],
            capture_output=True, text=True, timeout=30,
        )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Mean TTFT (ms):" in done.stdout
    report = json.loads(report_file.read_text())
    assert report["protocol"] == protocol and report["num_prompts"] == 6 and report["completed"] == 6
    assert report["failed"] == 0 and report["max_concurrency"] == 3
    usage = accumulated(path)
    final = usage.response if protocol == "responses" else usage.completion
    counted = getattr(final.usage, "output_tokens" if protocol == "responses" else "completion_tokens", None) \
        if final.usage is not None else None
    assert report["total_output_tokens"] == 6 * (counted if counted is not None else deltas)
    assert 20 <= report["median_ttft_ms"] <= report["p90_ttft_ms"] <= report["p99_ttft_ms"] < 5000
    assert report["median_itl_ms"] >= 0


def test_measure_reports_a_missing_recording(engine):
    from rapidsse.serving.measure import measure, request_body, summarize

    with ReplayServer([TEXT_RESPONSE], engine=engine) as server:
        run = asyncio.run(measure(server.url + "/v1/chat/completions", [request_body("chat", "x")], protocol="chat",
                                  num_prompts=2))
    report = summarize(run)
    assert report["failed"] == 2 and report["mean_ttft_ms"] == 0
    assert next(iter(report["failure_reasons"])).startswith("HTTP 404: ")


# --- Realtime over a WebSocket ------------------------------------------------------------------


@pytest.mark.parametrize("path", REALTIME[:4], ids=lambda p: p.stem)
def test_realtime_websocket(path, engine):
    pytest.importorskip("websockets")
    from websockets.sync.client import connect

    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    expected = RealtimeAccumulator()
    for line in lines:
        expected.feed(line)
    received = []
    acc = RealtimeAccumulator()
    # (ttft: the client's two messages go out before the replay starts; without it a short
    # recording could end, and the server close, before the second was sent.)
    with ReplayServer([path], rate=2000, ttft=0.2, engine=engine) as server:
        with connect(server.ws_url, open_timeout=TIMEOUT, close_timeout=2) as ws:
            ws.send(json.dumps({"type": "session.update", "session": {}}))
            ws.send(json.dumps({"type": "response.create"}))
            for message in ws:  # ends when the server closes after the recording
                received.append(message)
                acc.feed(message)
    assert [m.encode() for m in received] == lines
    assert acc.responses == expected.responses and acc.events == len(lines)


def test_realtime_concurrent_sessions_async(engine):
    websockets = pytest.importorskip("websockets")
    files = REALTIME[:2]

    async def session(url: str) -> list[str]:
        async with websockets.connect(url, open_timeout=TIMEOUT, close_timeout=2) as ws:
            return [message async for message in ws]

    async def run(url: str) -> list[list[str]]:
        return await asyncio.wait_for(asyncio.gather(*(session(url) for _ in range(4))), TIMEOUT)

    with ReplayServer(files, ttft=0.01, rate=1000, engine=engine) as server:
        sessions = asyncio.run(run(server.ws_url))
    expected = [[line.decode() for line in p.read_bytes().splitlines() if line.strip()] for p in files]
    assert sorted(map(len, sessions)) == sorted(map(len, expected * 2))
    assert all(s in expected for s in sessions)


def test_clients_leaving_early_do_not_disturb_the_server(engine):
    pytest.importorskip("websockets")
    from websockets.sync.client import connect

    path = REALTIME[0]
    lines = [line.decode() for line in path.read_bytes().splitlines() if line.strip()]
    with ReplayServer([path, TEXT_CHAT], rate=100, engine=engine) as server, httpx.Client(timeout=TIMEOUT) as client:
        with connect(server.ws_url, open_timeout=TIMEOUT, close_timeout=2) as ws:
            assert ws.recv(timeout=TIMEOUT) == lines[0]
        with client.stream("POST", server.url + "/v1/chat/completions", json={"stream": True}) as response:
            next(response.iter_raw())  # leave after the first event
        with connect(server.ws_url, open_timeout=TIMEOUT, close_timeout=2) as ws:
            ws.send(b"binary client frames are ignored too")
            assert list(ws) == lines
        assert client.post(server.url + "/v1/chat/completions", json={"stream": True}).content == \
            TEXT_CHAT.read_bytes()


# --- The command line ---------------------------------------------------------------------------


def test_register_adds_serve_and_measure():
    from rapidsse.serving import cli, register, serve

    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    register(subparsers)
    args = parser.parse_args(["serve", "a.sse", "b.jsonl", "--rate", "50", "--ttft", "200", "--port", "0"])
    assert args.func is serve.run and args.files == ["a.sse", "b.jsonl"] and args.rate == 50 and args.ttft == 200
    assert args.host == "127.0.0.1"
    args = parser.parse_args(["measure", "--url", "http://127.0.0.1:1/v1", "-n", "3", "-c", "2"])
    assert args.func is cli.run_measure and args.num_prompts == 3 and args.max_concurrency == 2
    args = parser.parse_args(["serve", "--synthetic", "--tokens", "7", "--rate", "20", "--ttft", "30"])
    assert args.synthetic and args.files == [] and args.tokens == 7 and args.rate == 20 and args.ttft == 30
    assert serve.run(parser.parse_args(["serve"])) == 1  # neither recordings nor --synthetic
    assert serve.run(parser.parse_args(["serve", "--synthetic", "a.sse"])) == 1
    assert serve.run(parser.parse_args(["serve", "--synthetic", "--tokens", "0"])) == 1
    assert serve.run(parser.parse_args(["serve", str(ROOT / "README.md")])) == 2  # not a recording


def test_serve_command_line(tmp_path, engine):
    """``rapidsse serve`` in a subprocess on a free port: it prints its URL, serves, and stops."""
    command = [sys.executable, "-m", "rapidsse", "serve", str(TEXT_RESPONSE), str(REALTIME[0]), "--port", "0",
               "--log-level", "warning", "--engine", engine]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()  # bounded: the server prints it before it starts serving
        assert "1 responses, 0 chat, 0 completions, 0 anthropic, 0 gemini, 1 realtime recording(s)" in banner, banner
        assert ("native engine on http://127.0.0.1:" in banner) == (engine == "native"), banner
        base = banner.rsplit(" on ", 1)[1].strip()
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                body = httpx.post(base + "/responses", json={"stream": True}, timeout=TIMEOUT).content
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
        assert body == TEXT_RESPONSE.read_bytes()
        if sys.platform.startswith("linux"):
            # Its descriptor table was grown before it served (rapidsse.serving.fds).
            assert descriptor_table(process.pid) >= expected_table(), descriptor_table(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)
        process.stderr.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the table is Linux's (and read from /proc)")
def test_the_descriptor_table_is_grown_and_nothing_is_left_open():
    from rapidsse.serving import fds

    wanted = min(3000, expected_table())
    assert fds.reserve(wanted) == wanted
    assert descriptor_table() >= wanted
    assert fds.reserve(1) == 0
    with open(os.devnull) as spare:  # nothing was left open up there: a low number is free
        assert spare.fileno() < wanted


# --- Anthropic, Gemini and Completions recordings, read by their SDKs ------------------------------


def _sse_json(path: Path) -> list[dict]:
    return [json.loads(e.data) for e in rapidsse.iter_sse([path.read_bytes()]) if e.data != "[DONE]"]


@pytest.mark.parametrize("path", ANTHROPIC, ids=lambda p: p.stem)
def test_anthropic_sdk_reads_the_replayed_recordings(path, engine):
    anthropic = pytest.importorskip("anthropic")
    events = _sse_json(path)
    texts: dict[int, str] = {}
    for event in events:
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
            texts[event["index"]] = texts.get(event["index"], "") + event["delta"]["text"]
    stop = [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"]
    with ReplayServer([path], rate=5000, engine=engine) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=TIMEOUT)
        with client.messages.stream(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as stream:
            streamed = list(stream)
            message = stream.get_final_message()
        with httpx.Client(timeout=TIMEOUT) as http:
            raw = http.post(server.url + "/v1/messages", json={"stream": True}).content
        whole = client.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert raw == path.read_bytes()
    # without "stream": the message the stream builds, as the SDK reads it
    assert whole.id == message.id and whole.stop_reason == message.stop_reason
    assert [b.type for b in whole.content] == [b.type for b in message.content]
    assert [getattr(b, "text", None) for b in whole.content] == [getattr(b, "text", None) for b in message.content]
    assert message.id == events[0]["message"]["id"] and message.stop_reason == stop[-1]
    assert {i: b.text for i, b in enumerate(message.content) if b.type == "text" and i in texts} == texts
    assert sum(e.type == "content_block_delta" for e in streamed) == sum(e["type"] == "content_block_delta"
                                                                         for e in events)


def test_google_genai_reads_the_replayed_gemini_recordings(engine):
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    with ReplayServer(GEMINI, rate=5000, engine=engine) as server:
        client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=server.url, timeout=10_000))
        streams = [list(client.models.generate_content_stream(model="gemini-x", contents="hi")) for _ in GEMINI]
        with httpx.Client(timeout=TIMEOUT) as http:
            raw = http.post(server.url + "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", json={}).content
    assert raw == GEMINI[0].read_bytes()  # the rotation starts over
    for path, chunks in zip(GEMINI, streams):
        events = _sse_json(path)
        assert len(chunks) == len(events), path.name
        expected = "".join(p.get("text", "") for e in events for c in e.get("candidates", [])
                           for p in (c.get("content") or {}).get("parts", []) if not p.get("thought"))
        got = "".join(p.text or "" for ch in chunks for c in (ch.candidates or []) for p in (c.content.parts or [])
                      if c.content is not None and not p.thought)
        assert got == expected, path.name
        assert chunks[-1].response_id == events[-1].get("responseId"), path.name


def test_completions_recording_replayed_to_the_openai_sdk(tmp_path, engine):
    """A Completions recording (made by the synthetic server: the corpus has none) replayed at
    /v1/completions, byte for byte, and read by the openai SDK."""
    openai = pytest.importorskip("openai")
    recording = tmp_path / "completions.sse"
    with SyntheticServer(tokens=9, rate=0, ttft=0) as server:
        body = {"model": "m", "prompt": "a b c", "stream": True, "stream_options": {"include_usage": True}}
        recording.write_bytes(httpx.post(server.url + "/v1/completions", json=body, timeout=TIMEOUT).content)
    assert recording_protocol(recording.read_bytes()) == "completions"
    with ReplayServer([recording], rate=2000, engine=engine) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        chunks = list(client.completions.create(model="m", prompt="hi", stream=True))
        raw = httpx.post(server.url + "/v1/completions", json={"stream": True}, timeout=TIMEOUT).content
        whole = client.completions.create(model="m", prompt="hi")
    assert raw == recording.read_bytes()
    assert whole.choices[0].text == Synthetic.text(9) and whole.usage.completion_tokens == 9
    assert "".join(c.choices[0].text for c in chunks if c.choices) == Synthetic.text(9)
    assert chunks[-1].usage.completion_tokens == 9 and chunks[-1].usage.prompt_tokens == 3


# --- The synthetic server, read by every client -----------------------------------------------------


def native_skip() -> str | None:
    """Why the native synthetic server cannot run here (None when it can)."""
    if rapidsse.BACKEND != "rust":
        return "the native engine needs the compiled extension (this run is on the pure Python backend)"
    return None if native_available() else "this build has no native synthetic server"


@pytest.fixture(params=["asyncio", "native"])
def engine(request):
    """Each engine of the synthetic server in turn."""
    if request.param == "native" and native_skip():
        pytest.skip(native_skip())
    return request.param


@pytest.fixture(scope="module", params=["asyncio", "native"])
def synthetic(request):
    if request.param == "native" and native_skip():
        pytest.skip(native_skip())
    with SyntheticServer(tokens=8, rate=1000, ttft=0.005, engine=request.param) as server:
        yield server


def test_synthetic_native_bodies_are_the_asyncio_ones_byte_for_byte():
    """The same requests to a fresh server of each engine: the same status, content type and
    body, but for the creation time (Unix seconds: the two runs may straddle a second)."""
    if native_skip():
        pytest.skip(native_skip())
    requests = [
        ("/v1/responses", {"stream": True, "input": "one two three", "model": "m\u00e9\"x\n"}),
        ("/v1/responses", {"stream": True, "input": [{"role": "user", "content": "a b"}], "max_output_tokens": 3}),
        ("/v1/responses", {"stream": True, "max_output_tokens": 6}),
        ("/v1/chat/completions", {"stream": True, "messages": [{"role": "user", "content": "say hi"}],
                                  "stream_options": {"include_usage": True}, "max_tokens": 5}),
        ("/v1/chat/completions", {"stream": True, "max_completion_tokens": None, "max_tokens": 2, "model": 7}),
        ("/v1/chat/completions", {"stream": True}),
        ("/v1/completions", {"stream": True, "prompt": ["p q", "r"], "max_tokens": 9,
                             "stream_options": {"include_usage": True}}),
        ("/v1/completions", {"stream": True, "max_tokens": 1}),
        ("/v1/messages", {"stream": True, "model": "claude", "max_tokens": 4,
                          "messages": [{"role": "user", "content": [{"type": "text", "text": "a\u3000b"}]}]}),
        ("/v1/messages", {"stream": True, "max_tokens": 100}),
        ("/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
         {"contents": [{"parts": [{"text": "one two"}]}], "generationConfig": {"maxOutputTokens": 2}}),
        ("/v1beta/models/gemini-x:streamGenerateContent", {}),
        ("/v1/models/g%C3%A9:streamGenerateContent?alt=sse", {"generationConfig": {"maxOutputTokens": 6}}),
        ("/v1/messages", {"stream": False}),
        ("/v1/chat/completions", {"model": "m"}),
        ("/v1/responses", [1]),
    ]
    replies = {}
    for engine in ("asyncio", "native"):
        with SyntheticServer(tokens=6, rate=0, ttft=0, engine=engine) as server, \
                httpx.Client(timeout=TIMEOUT) as client:
            replies[engine] = [client.post(server.url + path, json=body) for path, body in requests]

    def created_zeroed(body: bytes) -> bytes:
        return re.sub(rb'"(created|created_at)":\d+', rb'"\1":0', body)

    for (path, body), asyncio_reply, native_reply in zip(requests, replies["asyncio"], replies["native"]):
        assert native_reply.status_code == asyncio_reply.status_code, (path, body)
        assert native_reply.headers["content-type"] == asyncio_reply.headers["content-type"], (path, body)
        if asyncio_reply.status_code == 200:
            assert created_zeroed(native_reply.content) == created_zeroed(asyncio_reply.content), (path, body)
        else:  # (the messages differ where they quote the JSON parser)
            assert native_reply.json()["error"]["code"] == asyncio_reply.json()["error"]["code"], (path, body)


def test_engine_choice():
    assert choose_engine("asyncio") == "asyncio"
    assert choose_engine(None) == ("asyncio" if native_skip() else "native")
    if rapidsse.BACKEND == "python":
        with pytest.raises(ValueError, match="pure-Python backend"):
            choose_engine("native")
        with pytest.raises(ValueError, match="pure-Python backend"):
            SyntheticServer(engine="native")
        with pytest.raises(ValueError, match="pure-Python backend"):
            ReplayServer([TEXT_CHAT], engine="native")
    else:
        assert choose_engine("native") == "native"
    with pytest.raises(ValueError, match="one of native, asyncio"):
        choose_engine("trio")
    with pytest.raises(ValueError, match="workers=N is for engine='native'"):
        ReplayServer([TEXT_CHAT], engine="asyncio", workers=2)


def test_synthetic_responses_with_the_openai_sdk(synthetic):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=synthetic.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
    with client.responses.stream(model="m", input="one two three") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == Synthetic.text(8) and final.status == "completed"
    assert final.usage.output_tokens == 8 and final.usage.input_tokens == 3
    # truncated: the stream ends with response.incomplete, as OpenAI's does (the SDK's stream
    # helper wants response.completed, so read the events)
    events = list(client.responses.create(model="m", input="x", max_output_tokens=3, stream=True))
    short = events[-1]
    assert short.type == "response.incomplete" and short.response.status == "incomplete"
    assert short.response.output_text == Synthetic.text(3)
    assert short.response.incomplete_details.reason == "max_output_tokens"
    acc = ResponseAccumulator()
    acc.feed(httpx.post(synthetic.url + "/v1/responses", json={"stream": True, "input": "x"}, timeout=TIMEOUT).content)
    assert acc.output_text == Synthetic.text(8) and not acc.warnings


def test_synthetic_chat_and_completions_with_the_openai_sdk(synthetic):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=synthetic.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
    messages = [{"role": "user", "content": "say hi"}]
    chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}, max_tokens=5))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == Synthetic.text(5)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 5 and chunks[-1].usage.prompt_tokens == 2
    no_usage = list(client.chat.completions.create(model="m", messages=messages, stream=True))
    assert all(c.usage is None for c in no_usage) and no_usage[-1].choices[0].finish_reason == "stop"
    acc = ChatAccumulator()
    for chunk in client.chat.completions.with_streaming_response.create(model="m", messages=messages,
                                                                        stream=True).__enter__().iter_bytes():
        acc.feed(chunk)
    assert acc.completion.choices[0].message.content == Synthetic.text(8)
    text = "".join(c.choices[0].text for c in client.completions.create(model="m", prompt="p", stream=True)
                   if c.choices)
    assert text == Synthetic.text(8)


def test_synthetic_anthropic_with_the_sdk(synthetic):
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=synthetic.url, api_key="x", max_retries=0, timeout=TIMEOUT)
    with client.messages.stream(model="claude-x", max_tokens=100, messages=[{"role": "user", "content": "a b"}]) as s:
        text = "".join(s.text_stream)
        message = s.get_final_message()
    assert text == message.content[0].text == Synthetic.text(8) and message.stop_reason == "end_turn"
    assert message.model == "claude-x" and message.usage.output_tokens == 8 and message.usage.input_tokens == 2
    with client.messages.stream(model="m", max_tokens=4, messages=[{"role": "user", "content": "a"}]) as s:
        short = s.get_final_message()
    assert short.content[0].text == Synthetic.text(4) and short.stop_reason == "max_tokens"


def test_synthetic_gemini_with_google_genai(synthetic):
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=synthetic.url, timeout=10_000))
    chunks = list(client.models.generate_content_stream(model="gemini-x", contents="one two"))
    assert "".join(c.text for c in chunks) == Synthetic.text(8) and len(chunks) == 8
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == 8 and chunks[-1].model_version == "gemini-x"
    config = types.GenerateContentConfig(max_output_tokens=2)
    short = list(client.models.generate_content_stream(model="gemini-x", contents="x", config=config))
    assert short[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS and len(short) == 2
    raw = httpx.post(synthetic.url + "/v1beta/models/g:streamGenerateContent?alt=sse", json={}, timeout=TIMEOUT)
    assert raw.content.endswith(b"\r\n\r\n") and b"\n\n" not in raw.content.replace(b"\r\n", b"")


def test_synthetic_errors_and_health(synthetic):
    with httpx.Client(timeout=TIMEOUT) as client:
        health = client.get(synthetic.url + "/health").json()
        assert health["status"] == "ok" and health["synthetic"] == {"tokens": 8, "rate": 1000.0, "ttft": 0.005}
        assert set(health["lateness"]) == set(health["itl"]) == {"count", "median_ms", "p99_ms", "max_ms"}
        client.get(synthetic.url + "/health?reset")
        client.post(synthetic.url + "/v1/completions", json={"stream": True, "max_tokens": 3})
        after = client.get(synthetic.url + "/health").json()
        lateness, itl = after["lateness"], after["itl"]
        assert lateness["count"] == 3 and 0 <= lateness["median_ms"] <= lateness["p99_ms"] <= lateness["max_ms"]
        assert itl["count"] == 2 and itl["median_ms"] > 0.5  # one token per ms, as sent
        for route in ("/v1/responses", "/v1/chat/completions", "/v1/completions", "/v1/messages"):
            refused = client.post(synthetic.url + route, json={"stream": False})
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "stream_required", route
        bad = client.post(synthetic.url + "/v1/chat/completions", content=b"[1,")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"


def test_synthetic_concurrent_streams_httpx_async(synthetic):
    async def run() -> list[bytes]:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            async def one(i: int) -> bytes:
                body = {"stream": True, "messages": [{"role": "user", "content": "x"}]}
                async with client.stream("POST", synthetic.url + "/v1/chat/completions", json=body) as response:
                    return b"".join([chunk async for chunk in response.aiter_bytes()])

            return await asyncio.gather(*(one(i) for i in range(32)))

    bodies = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    for body in bodies:
        acc = ChatAccumulator()
        acc.feed(body)
        assert acc.completion.choices[0].message.content == Synthetic.text(8)
        assert body.endswith(b"data: [DONE]\n\n")


def test_synthetic_pacing_is_exact_enough(engine):
    """Each token leaves at ttft + i / rate after the request: measured by the client over real
    sockets (loose bounds: this checks the schedule, not the speed)."""
    from rapidsse.serving.measure import endpoint_url, measure, request_body

    rate, ttft, tokens = 100.0, 0.05, 20
    with SyntheticServer(tokens=tokens, rate=rate, ttft=ttft, engine=engine) as server:
        run = asyncio.run(asyncio.wait_for(measure(endpoint_url(server.url, "anthropic"),
                                                   [request_body("anthropic", "x")], protocol="anthropic",
                                                   num_prompts=4, max_concurrency=4), TIMEOUT))
    for result in run.results:
        assert result.ok and len(result.token_times) == tokens
        assert ttft <= result.ttft < ttft + 0.1  # (upper bounds loose: a busy machine)
        itls = sorted(result.itls)
        assert abs(itls[len(itls) // 2] - 1 / rate) < 0.002  # median within 2 ms of 10 ms
        # no drift: the last token is due at ttft + (tokens - 1) / rate
        assert result.token_times[-1] - (ttft + (tokens - 1) / rate) < 0.1


def test_serve_synthetic_command_line(engine):
    command = [sys.executable, "-m", "rapidsse", "serve", "--synthetic", "--tokens", "4", "--rate", "500",
               "--ttft", "1", "--port", "0", "--log-level", "warning", "--engine", engine]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()
        assert "synthetic streams of 4 tokens at 500 tokens/s after 1 ms" in banner, banner
        assert ("native engine on http://127.0.0.1:" in banner) == (engine == "native"), banner
        base = banner.rsplit(" on ", 1)[1].strip()
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                body = httpx.post(base + "/messages", json={"stream": True, "max_tokens": 9}, timeout=TIMEOUT).content
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
        texts = [json.loads(e.data)["delta"].get("text") for e in rapidsse.iter_sse([body])
                 if e.event == "content_block_delta"]
        assert "".join(texts) == Synthetic.text(4)
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)
        process.stderr.close()


def test_serve_synthetic_workers_share_the_port_and_health(engine):
    """``--workers 2``: two servers on one port (processes on asyncio, threads of one process on
    native), each pacing its own streams; ``/health`` (from whichever answers) counts the tokens
    of both."""
    command = [sys.executable, "-m", "rapidsse", "serve", "--synthetic", "--tokens", "5", "--rate", "500",
               "--ttft", "1", "--port", "0", "--log-level", "warning", "--workers", "2", "--engine", engine]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()
        shown = "2 worker threads (SO_REUSEPORT), native engine" if engine == "native" else "2 workers (SO_REUSEPORT)"
        assert f"{shown} on http://127.0.0.1:" in banner, banner
        base = banner.rsplit(" on ", 1)[1].strip().removesuffix("/v1")
        pids = set()
        with httpx.Client(timeout=TIMEOUT) as client:
            client.get(base + "/health?reset")
            for _ in range(16):  # new connections: the kernel spreads them over both processes
                with httpx.Client(timeout=TIMEOUT) as one:
                    response = one.post(base + "/v1/completions", json={"stream": True})
                    assert response.content.endswith(b"data: [DONE]\n\n")
                    pids.add(one.get(base + "/health").json()["pid"])
            health = client.get(base + "/health").json()
        if engine == "native":
            # one process, a listener per thread: sixteen new connections all answered (one that
            # the kernel gave to a thread not accepting would hang) from the two threads there
            assert pids == {process.pid}
            threads = {(task / "comm").read_text().strip() for task in Path(f"/proc/{process.pid}/task").iterdir()} \
                if sys.platform == "linux" else {"rapidsse-serve0", "rapidsse-serve1"}
            assert {"rapidsse-serve0", "rapidsse-serve1"} <= threads, threads
        else:
            assert len(pids) == 2  # both served
        assert health["workers"] == 2 and health["lateness"]["count"] == 16 * 5 and health["itl"]["count"] == 16 * 4
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)
        process.stderr.close()
    bad = subprocess.run([sys.executable, "-m", "rapidsse", "serve", "x.sse", "--workers", "2", "--engine", "asyncio"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert bad.returncode == 1 and "--workers replays on --engine native only" in bad.stderr, bad.stderr


def test_serve_engine_native_refuses_the_pure_backend():
    if rapidsse.BACKEND != "python":
        pytest.skip("the pure-Python backend's refusal")
    for what in (["--synthetic"], [str(TEXT_CHAT)]):
        pure = subprocess.run([sys.executable, "-m", "rapidsse", "serve", *what, "--engine", "native", "--port", "0"],
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert pure.returncode == 1 and "pure-Python backend" in pure.stderr, pure.stderr


def test_native_replay_workers_share_one_rotation():
    """``serve FILE... --engine native --workers 2``: two threads on the one port, and the
    requests rotate through the recordings whichever thread answers."""
    if native_skip():
        pytest.skip(native_skip())
    files = [TEXT_RESPONSE, RESPONSES[0]]
    with ReplayServer(files, engine="native", workers=2) as server:
        bodies = [httpx.post(server.url + "/v1/responses", json={"stream": True}, timeout=TIMEOUT).content
                  for _ in range(6)]
    assert bodies == [f.read_bytes() for f in files] * 3


def test_serve_synthetic_cannot_listen(engine):
    """A port taken (without SO_REUSEPORT): exit code 1 and why, on either engine."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "rapidsse", "serve", "--synthetic", "--port", str(port),
                               "--engine", engine], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 1 and f"127.0.0.1:{port}" in done.stderr, done.stderr


def test_tally_percentiles_match_the_samples_within_a_microsecond():
    import random

    from rapidsse.serving.serve import Tally

    rng = random.Random(3)
    values = [rng.uniform(0, 0.03) for _ in range(999)] + [0.5, 2.0]
    parts = (Tally(), Tally())
    for index, value in enumerate(values):
        parts[index % 2].add(value)
    stats = Tally.stats(parts)
    ordered = sorted(values)
    assert stats["count"] == len(values) and stats["max_ms"] == 2000.0
    for key, q in (("median_ms", 0.5), ("p99_ms", 0.99)):
        exact = ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0
        assert exact - 0.001 <= stats[key] <= exact, key
    for tally in parts:
        tally.reset()
    assert Tally.stats(parts) == {"count": 0, "median_ms": None, "p99_ms": None, "max_ms": None}
