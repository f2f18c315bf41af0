"""The replay server (``rapidsse serve``) on loopback, consumed by the openai SDK, httpx (sync and
async, concurrent streams), ``rapidsse measure`` in a subprocess and a websockets client."""

from __future__ import annotations

import argparse
import asyncio
import json
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
from rapidsse.serve import BackgroundServer, Pacing, ReplayServer, detect_protocol, load_recording, split_events  # noqa: E402

from .conftest import ROOT, corpus_files  # noqa: E402

RESPONSES = corpus_files("responses")
CHATS = corpus_files("chat")
REALTIME = corpus_files("realtime")
TEXT_RESPONSE = next(p for p in RESPONSES if "include_raw_annotations" in p.name)
TEXT_CHAT = next(p for p in CHATS if p.name == "openai-python__e2aad469b71d.sse")
TIMEOUT = 10.0


def accumulated(path: Path) -> ResponseAccumulator | ChatAccumulator:
    acc = ChatAccumulator() if path.parent.name == "chat" else ResponseAccumulator()
    acc.feed(path.read_bytes())
    acc.close()
    return acc


# --- Recordings (no server) -------------------------------------------------------------------


@pytest.mark.parametrize("path", RESPONSES + CHATS + REALTIME, ids=lambda p: p.stem)
def test_recordings_split_exactly_and_protocol_is_detected(path):
    data = path.read_bytes()
    expected = path.parent.name
    assert detect_protocol(data) == expected
    recording = load_recording(path)
    if expected == "realtime":
        assert recording.events == [line for line in data.splitlines() if line.strip()]
        return
    assert b"".join(split_events(data)) == data == recording.body
    framed = len([e for e in rapidsse.iter_sse([data])])
    assert framed <= len(recording.events) <= framed + 1  # a trailing comment or blank line may follow
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
    assert detect_protocol(b": nothing yet\n\n") is None


# --- The openai SDK ------------------------------------------------------------------------------


def test_openai_sdk_responses_on_the_corpus():
    """One server with the Responses recordings: requests rotate through them in order, so each
    pass of ``len(files)`` requests meets every file once. (The files over 50 KB are left to the
    httpx tests: the SDK's per-event pydantic work makes them slow.)"""
    openai = pytest.importorskip("openai")
    files = [p for p in RESPONSES if p.stat().st_size < 50_000]
    with ReplayServer(files) as server:
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
def test_openai_sdk_chat(path):
    openai = pytest.importorskip("openai")
    acc = accumulated(path)
    completion = acc.completion
    messages = [{"role": "user", "content": "hi"}]
    with ReplayServer([path]) as server:
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


def test_httpx_sync_rotates_and_bytes_equal_the_files():
    files = [TEXT_RESPONSE, RESPONSES[0]]
    with ReplayServer(files + [TEXT_CHAT]) as server, httpx.Client(timeout=TIMEOUT) as client:
        for i in range(4):
            with client.stream("POST", server.url + "/v1/responses", json={"stream": True}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                assert response.read() == files[i % 2].read_bytes()
        body = client.post(server.url + "/v1/chat/completions", json={"stream": True}).content
        assert body == TEXT_CHAT.read_bytes()


def test_httpx_async_concurrent_streams():
    big = max(RESPONSES, key=lambda p: p.stat().st_size)
    files = {TEXT_RESPONSE.read_bytes(), big.read_bytes()}

    async def run(url: str) -> list[bytes]:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:

            async def one() -> bytes:
                async with client.stream("POST", url, json={"stream": True}) as response:
                    chunks = [chunk async for chunk in response.aiter_bytes()]
                return b"".join(chunks)

            return await asyncio.gather(*(one() for _ in range(8)))

    with ReplayServer([TEXT_RESPONSE, big], rate=2000) as server:
        bodies = asyncio.run(asyncio.wait_for(run(server.url + "/v1/responses"), TIMEOUT))
    assert set(bodies) == files and bodies.count(big.read_bytes()) == 4


def test_pacing_delays_first_event_then_paces():
    path = TEXT_CHAT  # 34 SSE blocks
    events = load_recording(path).events
    with ReplayServer([path], ttft=0.15, rate=200) as server, httpx.Client(timeout=TIMEOUT) as client:
        start = time.perf_counter()
        with client.stream("POST", server.url + "/v1/chat/completions", json={"stream": True}) as response:
            first = None
            for _ in response.iter_raw():
                first = first if first is not None else time.perf_counter() - start
        total = time.perf_counter() - start
    expected_total = 0.15 + (len(events) - 1) / 200
    assert 0.14 <= first < 0.15 + 0.2
    assert expected_total - 0.01 <= total < expected_total + 0.5


def test_stream_false_returns_the_accumulated_object():
    with ReplayServer([TEXT_RESPONSE, TEXT_CHAT]) as server, httpx.Client(timeout=TIMEOUT) as client:
        for route, path, body in (
            ("/v1/responses", TEXT_RESPONSE, {"stream": False}),
            ("/v1/chat/completions", TEXT_CHAT, {}),
        ):
            response = client.post(server.url + route, json=body)
            assert response.status_code == 200 and response.headers["content-type"] == "application/json"
            acc = accumulated(path)
            final = acc.response if isinstance(acc, ResponseAccumulator) else acc.completion
            assert response.json() == to_builtins(final)


def test_errors_and_health():
    with ReplayServer([TEXT_RESPONSE]) as server, httpx.Client(timeout=TIMEOUT) as client:
        health = client.get(server.url + "/health").json()
        assert health == {"status": "ok", "recordings": {"responses": 1, "chat": 0, "realtime": 0}}
        missing = client.post(server.url + "/v1/chat/completions", json={"stream": True})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "no_recording"
        bad = client.post(server.url + "/v1/responses", content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"


# --- rapidsse measure ---------------------------------------------------------------------------


@pytest.mark.parametrize("route,protocol", [("/v1/responses", "responses"), ("/v1/chat/completions", "chat")])
def test_measure_subprocess(tmp_path, route, protocol):
    report_file = tmp_path / "report.json"
    path = TEXT_RESPONSE if protocol == "responses" else TEXT_CHAT
    deltas = sum(
        1 for e in rapidsse.iter_events([path.read_bytes()], protocol)
        if (protocol == "responses" and e.type == "response.output_text.delta")
        or (protocol == "chat" and any(c.delta and c.delta.content for c in e.choices))
    )
    with ReplayServer([path], ttft=0.02, rate=1000) as server:
        done = subprocess.run(
            [sys.executable, "-m", "rapidsse", "measure", "--url", server.url + route, "--requests", "6",
             "--concurrency", "3", "--json", str(report_file), "--no-progress"],
            capture_output=True, text=True, timeout=30,
        )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "TTFT ms" in done.stdout
    report = json.loads(report_file.read_text())
    assert report["protocol"] == protocol and report["requests"] == 6 and report["succeeded"] == 6
    assert report["errors"] == 0 and report["tokens"] == 6 * deltas
    assert 20 <= report["ttft_ms"]["p50"] <= report["ttft_ms"]["p90"] <= report["ttft_ms"]["p99"] < 5000
    assert report["itl_ms"]["p50"] is not None


def test_measure_counts_failures():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from rapidsse.measure import measure, summarize

    async def json_reply(request):
        return JSONResponse({"id": "not a stream"})

    json_app = Starlette(routes=[Route("/v1/responses", json_reply, methods=["POST"])])
    with ReplayServer([TEXT_RESPONSE]) as server, BackgroundServer(json_app) as json_server:
        results, wall = asyncio.run(measure(server.url + "/v1/chat/completions", requests=2, protocol="chat"))
        not_a_stream, _ = asyncio.run(measure(json_server.url + "/v1/responses", requests=1))
    report = summarize(results, wall)
    assert report["errors"] == 2 and report["ttft_ms"]["p50"] is None
    assert "HTTP 404" in next(iter(report["error_messages"]))
    assert not not_a_stream[0].ok and "SSEContentTypeError" in not_a_stream[0].error


# --- Realtime over a WebSocket ------------------------------------------------------------------


@pytest.mark.parametrize("path", REALTIME[:4], ids=lambda p: p.stem)
def test_realtime_websocket(path):
    pytest.importorskip("websockets")
    from websockets.sync.client import connect

    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    expected = RealtimeAccumulator()
    for line in lines:
        expected.feed(line)
    received = []
    acc = RealtimeAccumulator()
    with ReplayServer([path], rate=2000) as server:
        with connect(server.ws_url, open_timeout=TIMEOUT, close_timeout=2) as ws:
            ws.send(json.dumps({"type": "session.update", "session": {}}))
            ws.send(json.dumps({"type": "response.create"}))
            for message in ws:  # ends when the server closes after the recording
                received.append(message)
                acc.feed(message)
    assert [m.encode() for m in received] == lines
    assert acc.responses == expected.responses and acc.events == len(lines)


def test_realtime_concurrent_sessions_async():
    websockets = pytest.importorskip("websockets")
    files = REALTIME[:2]

    async def session(url: str) -> list[str]:
        async with websockets.connect(url, open_timeout=TIMEOUT, close_timeout=2) as ws:
            return [message async for message in ws]

    async def run(url: str) -> list[list[str]]:
        return await asyncio.wait_for(asyncio.gather(*(session(url) for _ in range(4))), TIMEOUT)

    with ReplayServer(files, ttft=0.01, rate=1000) as server:
        sessions = asyncio.run(run(server.ws_url))
    expected = [[line.decode() for line in p.read_bytes().splitlines() if line.strip()] for p in files]
    assert sorted(map(len, sessions)) == sorted(map(len, expected * 2))
    assert all(s in expected for s in sessions)


def test_clients_leaving_early_do_not_disturb_the_server():
    pytest.importorskip("websockets")
    from websockets.sync.client import connect

    path = REALTIME[0]
    lines = [line.decode() for line in path.read_bytes().splitlines() if line.strip()]
    with ReplayServer([path, TEXT_CHAT], rate=100) as server, httpx.Client(timeout=TIMEOUT) as client:
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
    from rapidsse import measure, serve

    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    serve.register(subparsers)
    measure.register(subparsers)
    args = parser.parse_args(["serve", "a.sse", "b.jsonl", "--rate", "50", "--ttft", "200", "--port", "0"])
    assert args.func is serve.run and args.files == ["a.sse", "b.jsonl"] and args.rate == 50 and args.ttft == 200
    assert args.host == "127.0.0.1"
    args = parser.parse_args(["measure", "--url", "http://127.0.0.1:1/v1", "-n", "3", "-c", "2"])
    assert args.func is measure.run and args.requests == 3 and args.concurrency == 2
    assert serve.run(parser.parse_args(["serve", str(ROOT / "README.md")])) == 2  # not a recording


def test_serve_command_line(tmp_path):
    """``rapidsse serve`` in a subprocess on a free port: it prints its URL, serves, and stops."""
    command = [sys.executable, "-m", "rapidsse", "serve", str(TEXT_RESPONSE), str(REALTIME[0]), "--port", "0",
               "--log-level", "warning"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()  # bounded: the server prints it before it starts serving
        assert "1 responses, 0 chat, 1 realtime" in banner, banner
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
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)
        process.stderr.close()
