"""``rapidsse measure``: arrivals, load, metrics against hand-checked values, goodput, failure
reasons, the saved result's keys, and runs against the synthetic server and small failing apps on
loopback (bounded in time)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import statistics
import subprocess
import sys
import time

import pytest

pytest.importorskip("httptools")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import rapidsse  # noqa: E402
from rapidsse.serving import measure as m  # noqa: E402
from rapidsse.serving.measure import RequestResult, Run  # noqa: E402
from rapidsse.serving.serve import BackgroundServer, SyntheticServer  # noqa: E402

from .conftest import chunked, corpus_files, cycles_left  # noqa: E402

TIMEOUT = 20.0


def run_async(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


# --- Arrivals ------------------------------------------------------------------------------------


def test_infinite_rate_sends_everything_at_once():
    assert m.arrival_times(5, math.inf) == [0.0] * 5
    assert m.arrival_times(0, 10.0) == []


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_arrival_gaps_are_gamma_with_the_asked_mean_and_shape(burstiness):
    rate = 20.0
    times = m.arrival_times(20_001, rate, burstiness, seed=7)
    assert times[0] == 0.0 and times == sorted(times)
    gaps = [b - a for a, b in zip(times, times[1:])]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / rate, rel=0.05)
    # a gamma distribution of shape k has a coefficient of variation of 1/sqrt(k) (1 for Poisson)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


def test_arrivals_are_reproducible_by_seed():
    assert m.arrival_times(50, 3.0, seed=1) == m.arrival_times(50, 3.0, seed=1)
    assert m.arrival_times(50, 3.0, seed=1) != m.arrival_times(50, 3.0, seed=2)


@pytest.mark.parametrize("rate,burstiness", [(0, 1), (-1, 1), (1, 0), (1, -2)])
def test_arrival_parameters_are_checked(rate, burstiness):
    with pytest.raises(ValueError):
        m.arrival_times(3, rate, burstiness)


# --- Load ----------------------------------------------------------------------------------------


def test_request_bodies_per_protocol():
    assert m.request_body("responses", "hi", model="x", max_tokens=5) == {
        "model": "x", "input": "hi", "stream": True, "max_output_tokens": 5}
    chat = m.request_body("chat", "hi", max_tokens=5)
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["max_completion_tokens"] == 5
    assert chat["stream_options"] == {"include_usage": True} and chat["stream"] is True
    completions = m.request_body("completions", "hi", max_tokens=5)
    assert completions["prompt"] == "hi" and completions["max_tokens"] == 5
    assert completions["stream_options"] == {"include_usage": True}
    assert m.request_body("anthropic", "hi")["max_tokens"] == 1024  # the API requires one
    gemini = m.request_body("gemini", "hi", max_tokens=5)
    assert gemini == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                      "generationConfig": {"maxOutputTokens": 5}}
    with pytest.raises(ValueError):
        m.request_body("realtime", "hi")


def test_generated_prompts_have_the_asked_length_and_follow_the_seed():
    prompts = m.generated_prompts(4, 32, seed=3)
    assert len(prompts) == 4 and all(len(p.split()) == 32 for p in prompts)
    assert prompts == m.generated_prompts(4, 32, seed=3) != m.generated_prompts(4, 32, seed=4)


def test_dataset_of_request_bodies_and_sharegpt(tmp_path):
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text('{"model": "a", "messages": [{"role": "user", "content": "one"}]}\n\n'
                      '{"model": "b", "messages": [], "stream_options": {"x": 1}}\n')
    loaded = m.load_dataset(bodies, "chat")
    assert [b["model"] for b in loaded] == ["a", "b"] and all(b["stream"] is True for b in loaded)
    assert loaded[1]["stream_options"] == {"x": 1, "include_usage": True}

    records = [
        {"id": "1", "conversations": [{"from": "human", "value": "What is SSE?"}, {"from": "gpt", "value": "A..."}]},
        {"id": "2", "conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"id": "3", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "Second"}]},
    ]
    sharegpt = tmp_path / "sharegpt.jsonl"
    sharegpt.write_text("\n".join(json.dumps(r) for r in records))
    as_array = tmp_path / "sharegpt.json"
    as_array.write_text(json.dumps(records))
    for path in (sharegpt, as_array):
        loaded = m.load_dataset(path, "anthropic", model="claude", max_tokens=7)
        assert [b["messages"][0]["content"] for b in loaded] == ["What is SSE?", "Second"]
        assert all(b["model"] == "claude" and b["max_tokens"] == 7 for b in loaded)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError):
        m.load_dataset(empty, "chat")


@pytest.mark.parametrize("url,protocol,expected", [
    ("http://h:1", "chat", "http://h:1/v1/chat/completions"),
    ("http://h:1/v1", "responses", "http://h:1/v1/responses"),
    ("http://h:1/v1/", "completions", "http://h:1/v1/completions"),
    ("http://h:1/v1/messages", "anthropic", "http://h:1/v1/messages"),
    ("http://h:1", "gemini", "http://h:1/v1beta/models/m:streamGenerateContent?alt=sse"),
    ("http://h:1/v1beta", "gemini", "http://h:1/v1beta/models/m:streamGenerateContent?alt=sse"),
    ("http://h:1/openai/v1/chat/completions", "chat", "http://h:1/openai/v1/chat/completions"),
])
def test_endpoint_urls(url, protocol, expected):
    assert m.endpoint_url(url, protocol, "m") == expected
    assert m.protocol_for_url(expected) == protocol


# --- Metrics ---------------------------------------------------------------------------------------


def result(ttft, token_times, latency, *, usage=None, inputs=None, queued=0.0, due=0.0, ok=True, error=None):
    return RequestResult(ok=ok, error=error, ttft=ttft, token_times=token_times, latency=latency,
                         output_tokens=usage, input_tokens=inputs, queued=queued, due=due)


def test_metrics_against_hand_checked_values():
    results = [
        # tokens at 0.1, 0.2, 0.4 s; ends at 0.5 s; no usage: 3 counted tokens
        result(0.1, [0.1, 0.2, 0.4], 0.5, inputs=10),
        # usage says 5 output tokens (events carried several); ends at 1.3 s
        result(0.3, [0.3, 0.5, 0.9], 1.3, usage=5, inputs=20, queued=0.2, due=0.5),
        result(None, [], 0.05, ok=False, error="HTTP 500: boom"),
    ]
    report = m.summarize(Run(results, 2.0), percentiles=[50, 90, 99])
    assert report["completed"] == 2 and report["failed"] == 1
    assert report["total_output_tokens"] == 3 + 5 and report["total_input_tokens"] == 30
    assert report["request_throughput"] == pytest.approx(1.0)
    assert report["output_throughput"] == pytest.approx(4.0)
    assert report["total_token_throughput"] == pytest.approx(19.0)
    assert report["request_goodput"] is None
    # TTFT: 100 and 300 ms
    assert report["mean_ttft_ms"] == pytest.approx(200) and report["median_ttft_ms"] == pytest.approx(200)
    assert report["std_ttft_ms"] == pytest.approx(100)  # population standard deviation, as numpy's
    assert report["p90_ttft_ms"] == pytest.approx(280) and report["p99_ttft_ms"] == pytest.approx(298)
    # TPOT: (0.5 - 0.1) / 2 = 200 ms; (1.3 - 0.3) / 4 = 250 ms
    assert report["mean_tpot_ms"] == pytest.approx(225) and report["median_tpot_ms"] == pytest.approx(225)
    # ITL over all requests: 100, 200, 200, 400 ms
    assert report["mean_itl_ms"] == pytest.approx(225) and report["median_itl_ms"] == pytest.approx(200)
    assert report["std_itl_ms"] == pytest.approx(statistics.pstdev([100, 200, 200, 400]))
    assert report["p99_itl_ms"] == pytest.approx(200 + 0.97 * 200)
    # E2EL 500 and 1300 ms; queue 0 and 200 ms
    assert report["mean_e2el_ms"] == pytest.approx(900) and report["p50_e2el_ms"] == pytest.approx(900)
    assert report["mean_client_queue_time_ms"] == pytest.approx(100)
    assert report["failure_reasons"] == {"HTTP 500: boom": 1}
    # request 1 runs 0..0.5 s, request 2 is sent at 0.7 s: never both in flight
    assert report["max_concurrent_requests"] == 1


def test_empty_metrics_are_zero_as_vllm_writes_them():
    report = m.summarize(Run([result(None, [], 0.1, ok=False, error="timeout")], 1.0))
    assert report["completed"] == 0 and report["mean_ttft_ms"] == 0 and report["p99_itl_ms"] == 0
    assert report["failure_reasons"] == {"timeout": 1}


def test_goodput_counts_requests_meeting_every_slo():
    results = [
        result(0.1, [0.1, 0.2], 0.2),            # ttft 100, tpot 100, e2el 200
        result(0.3, [0.3, 0.4], 0.4),            # ttft 300
        result(0.1, [0.1, 0.6], 0.6),            # tpot 500
        result(0.1, [0.1], 0.1),                 # one token: tpot counts as 0
    ]
    run = Run(results, 2.0)
    assert m.summarize(run, goodput={"ttft": 200})["request_goodput"] == pytest.approx(3 / 2)
    assert m.summarize(run, goodput={"ttft": 200, "tpot": 150})["request_goodput"] == pytest.approx(2 / 2)
    assert m.summarize(run, goodput={"e2el": 150})["request_goodput"] == pytest.approx(1 / 2)
    assert m.parse_goodput(["ttft:200", "TPOT:1.5", "e2el:0"]) == {"ttft": 200, "tpot": 1.5, "e2el": 0}
    for bad in (["ttft"], ["itl:5"], ["ttft:x"], ["ttft:-1"]):
        with pytest.raises(ValueError):
            m.parse_goodput(bad)


def test_saved_result_uses_vllms_key_names():
    report = m.summarize(Run([result(0.1, [0.1, 0.2], 0.3)], 1.0), percentiles=[50, 99.9], goodput={"ttft": 1})
    expected = {"completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                "max_concurrent_requests", "failure_reasons", "timestamps", "token_reads", "multi_token_reads",
                "client_cpu_share", "client_saturated"}
    for name in ("ttft", "tpot", "itl", "e2el", "client_queue_time"):
        expected |= {f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms", f"p50_{name}_ms",
                     f"p99.9_{name}_ms"}
    assert set(report) == expected
    text = m.format_report(report, [50, 99.9])
    assert "Mean TTFT (ms):" in text and "P99.9 ITL (ms):" in text and "Request goodput (req/s):" in text


# --- The adapters on real recordings ----------------------------------------------------------------


def _expected_tokens(protocol: str, data: bytes) -> int:
    """Token events counted independently: stdlib json over rapidsse's framing."""
    count = 0
    for event in rapidsse.iter_sse([data]):
        if event.data == "[DONE]":
            continue
        try:
            obj = json.loads(event.data)
        except ValueError:
            continue
        if protocol == "anthropic":
            delta = obj.get("delta") or {}
            count += obj.get("type") == "content_block_delta" and bool(
                delta.get("text") or delta.get("thinking") or delta.get("partial_json"))
        elif protocol == "gemini":
            count += any(any(p.get("text") or p.get("functionCall") or p.get("executableCode")
                             for p in (c.get("content") or {}).get("parts", [])) for c in obj.get("candidates", []))
    return count


@pytest.mark.parametrize("path", corpus_files("anthropic") + corpus_files("gemini"), ids=lambda p: p.stem)
def test_adapters_count_tokens_and_see_the_end_of_real_streams(path):
    protocol = path.parent.name
    data = path.read_bytes()
    adapter = m._ADAPTERS[protocol]()
    tokens = sum(adapter.feed(chunk) for chunk in chunked(data, 97))
    assert tokens == _expected_tokens(protocol, data)  # 0 for a refusal with no content
    events = [json.loads(e.data) for e in rapidsse.iter_sse([data])]
    if protocol == "anthropic":
        assert adapter.finished == any(e.get("type") == "message_stop" for e in events)
        if any(e.get("type") == "error" for e in events):
            assert adapter.error.startswith("error event:")
        deltas = [e for e in events if e.get("type") == "message_delta" and "output_tokens" in e.get("usage", {})]
        assert adapter.output_tokens == (deltas[-1]["usage"]["output_tokens"] if deltas else None)
    else:
        assert adapter.finished == any(c.get("finishReason") for e in events for c in e.get("candidates", []))
        usage = [e["usageMetadata"] for e in events if "usageMetadata" in e]
        if usage and "candidatesTokenCount" in usage[-1]:
            last = usage[-1]
            assert adapter.output_tokens == last["candidatesTokenCount"] + last.get("thoughtsTokenCount", 0)


@pytest.mark.parametrize("path", corpus_files("responses")[:8] + corpus_files("chat")[:8], ids=lambda p: p.stem)
def test_typed_adapters_on_the_corpus(path):
    protocol = path.parent.name
    data = path.read_bytes()
    adapter = m._ADAPTERS[protocol]()
    tokens = sum(adapter.feed(chunk) for chunk in chunked(data, 256))
    events = list(rapidsse.iter_events([data], protocol, on_error="skip"))
    if protocol == "responses":
        expected = sum(isinstance(e, m._RESPONSES_TOKEN_TYPES) for e in events)
        finished = any(isinstance(e, m._RESPONSES_FINAL_TYPES) for e in events)
    else:
        expected = sum(any(c.delta and (c.delta.content or c.delta.refusal or c.delta.reasoning
                                        or c.delta.reasoning_content or c.delta.tool_calls) for c in e.choices)
                       for e in events)
        finished = b"[DONE]" in data or any(c.finish_reason for e in events for c in e.choices)
    assert tokens == expected and adapter.finished == finished


# --- Against servers on loopback ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic():
    with SyntheticServer(tokens=12, rate=400, ttft=0.02) as server:
        yield server


@pytest.mark.parametrize("protocol", m.PROTOCOLS)
def test_every_protocol_against_the_synthetic_server(synthetic, protocol, engine):
    url = m.endpoint_url(synthetic.url, protocol, "some-model")
    bodies = [m.request_body(protocol, p, model="some-model") for p in m.generated_prompts(3, 5, seed=1)]
    run = run_async(m.measure(url, bodies, protocol=protocol, num_prompts=6, max_concurrency=3, engine=engine))
    report = m.summarize(run)
    assert report["failure_reasons"] == {} and report["completed"] == 6
    assert all(len(r.token_times) == 12 and r.output_tokens == 12 for r in run.results)
    assert report["total_output_tokens"] == 72 and report["total_input_tokens"] == 6 * 5
    assert all(r.ttft >= 0.02 and r.latency >= r.token_times[-1] >= r.ttft for r in run.results)
    assert report["max_concurrent_requests"] <= 3


def test_output_len_caps_the_synthetic_stream(synthetic, engine):
    url = m.endpoint_url(synthetic.url, "chat")
    run = run_async(m.measure(url, [m.request_body("chat", "hi", max_tokens=4)], protocol="chat", num_prompts=2,
                              engine=engine))
    assert [len(r.token_times) for r in run.results] == [4, 4] and all(r.ok for r in run.results)


def test_waiting_for_a_slot_shows_in_ttft_and_e2el(engine):
    """Three requests due at once, one slot: the third waits for two whole streams, and its TTFT
    and E2EL count that wait (vLLM would count from the moment it was sent)."""
    with SyntheticServer(tokens=5, rate=100, ttft=0.05) as server:  # a stream lasts 90 ms
        url = m.endpoint_url(server.url, "completions")
        run = run_async(m.measure(url, [m.request_body("completions", "x")], protocol="completions",
                                  num_prompts=3, max_concurrency=1, engine=engine))
    first, second, third = run.results
    assert all(r.ok for r in run.results)
    assert 0.05 <= first.ttft < 0.2 and first.queued < 0.1  # (upper bounds loose: a busy machine)
    assert second.queued >= first.latency - 0.005 and second.ttft >= second.queued + 0.05
    assert third.queued >= 2 * 0.09 - 0.005 and third.ttft >= 0.05 + 2 * 0.09 - 0.005
    assert third.latency >= 3 * 0.09 - 0.005
    assert m.summarize(run)["max_concurrent_requests"] == 1


def test_open_loop_arrivals_are_followed(engine):
    with SyntheticServer(tokens=2, rate=1000, ttft=0.0) as server:
        url = m.endpoint_url(server.url, "chat")
        run = run_async(m.measure(url, [m.request_body("chat", "x")], protocol="chat", num_prompts=10,
                                  request_rate=50, seed=5, engine=engine))
    expected = m.arrival_times(10, 50, seed=5)
    assert [r.due for r in run.results] == expected
    assert run.duration >= expected[-1] and all(r.ok for r in run.results)


def test_warmup_requests_are_not_counted(engine):
    seen = []
    with SyntheticServer(tokens=2, rate=1000, ttft=0.0) as server:
        url = m.endpoint_url(server.url, "responses")
        run = run_async(m.measure(url, [m.request_body("responses", "x")], protocol="responses", num_prompts=3,
                                  warmup=4, on_result=seen.append, engine=engine))
    assert len(run.results) == 3 and len(seen) == 3 and all(r.ok for r in run.results)


# Failures: small apps that fail the way servers do.


def _failing_app():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    def sse(blocks):
        async def body():
            for block in blocks:
                yield block

        return StreamingResponse(body(), media_type="text/event-stream")

    chunk = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'

    async def status_500(request):
        return JSONResponse({"error": {"message": "boom"}}, status_code=500)

    async def error_event(request):
        return sse([chunk, b'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n', b"data: [DONE]\n\n"])

    async def cut_short(request):
        return sse([chunk, chunk])  # no finish_reason, no [DONE]

    async def not_a_stream(request):
        return Response(b'{"id": "x"}', media_type="application/json")

    async def anthropic_error(request):
        return sse([b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3}}}\n\n',
                    b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'])

    async def responses_failed(request):
        return sse([b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"a"}\n\n',
                    b'event: response.failed\ndata: {"type":"response.failed","response":{"id":"r","status":"failed",'
                    b'"error":{"code":"server_error","message":"it broke"}}}\n\n'])

    return Starlette(routes=[
        Route("/500/v1/chat/completions", status_500, methods=["POST"]),
        Route("/error/v1/chat/completions", error_event, methods=["POST"]),
        Route("/cut/v1/chat/completions", cut_short, methods=["POST"]),
        Route("/json/v1/chat/completions", not_a_stream, methods=["POST"]),
        Route("/anthropic/v1/messages", anthropic_error, methods=["POST"]),
        Route("/failed/v1/responses", responses_failed, methods=["POST"]),
    ])


def test_failure_reasons(engine):
    bodies = [m.request_body("chat", "x")]
    with BackgroundServer(_failing_app()) as server:
        def reasons(prefix, protocol="chat", n=2):
            url = m.endpoint_url(server.url + prefix, protocol)
            run = run_async(m.measure(url, [m.request_body(protocol, "x")], protocol=protocol, num_prompts=n,
                                      engine=engine))
            assert all(not r.ok for r in run.results)
            return m.summarize(run)["failure_reasons"], run.results

        failures, results = reasons("/500/v1")
        assert failures == {'HTTP 500: {"error":{"message":"boom"}}': 2}
        assert results[0].status_code == 500
        assert reasons("/error/v1")[0] == {"error event: overloaded": 2}
        failures, results = reasons("/cut/v1")
        assert failures == {"cut short: the stream ended before a finish_reason or [DONE]": 2}
        assert len(results[0].token_times) == 2  # what arrived is still measured
        assert reasons("/json/v1")[0] == {"not an event stream: content type 'application/json'": 2}
        assert reasons("/anthropic/v1", "anthropic")[0] == {"error event: Overloaded": 2}
        assert reasons("/failed/v1", "responses")[0] == {"response.failed: it broke": 2}
        refused = m.endpoint_url("http://127.0.0.1:1", "chat")
        run = run_async(m.measure(refused, bodies, protocol="chat", num_prompts=1, engine=engine))
        assert not run.results[0].ok and "ConnectionRefusedError" in run.results[0].error


def test_a_connection_closed_mid_stream_is_cut_short(engine):
    """The server sends a chunk of a chunked body, then drops the connection."""

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        event = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     + b"%x\r\n" % len(event) + event + b"\r\n")
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await m.measure(f"http://127.0.0.1:{port}/v1/chat/completions", [m.request_body("chat", "x")],
                                   protocol="chat", num_prompts=1, engine=engine)

    one = run_async(main()).results[0]
    assert not one.ok and one.error.startswith("cut short:") and len(one.token_times) == 1


def test_timeout_is_a_failure(engine):
    with SyntheticServer(tokens=3, rate=1, ttft=5) as server:
        run = run_async(m.measure(m.endpoint_url(server.url, "chat"), [m.request_body("chat", "x")], protocol="chat",
                                  num_prompts=1, timeout=0.2, engine=engine))
    assert run.results[0].error == "timeout after 0.2 s" and 0.2 <= run.results[0].latency < 2


def test_the_collector_is_paused_for_the_run_and_restored():
    import gc

    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with m.collector_paused():
                assert not gc.isenabled() and gc.get_freeze_count() > 0
            assert gc.isenabled() is enabled and gc.get_freeze_count() == 0
        finally:
            gc.enable()


@pytest.mark.parametrize("timestamps", ["kernel", "read"])
@pytest.mark.parametrize("protocol", m.PROTOCOLS)
def test_streams_leave_no_reference_cycles(protocol, timestamps):
    """With the collector paused (the harness) or off (``serve --synthetic``), a reference cycle
    per request would pile up: neither the harness nor the synthetic server may make one, neither
    for a stream read to its end nor for one cut off by a timeout. (On the loop the harness runs
    on, uvloop's; asyncio's own leaves a cycle in a transport whose connection a timeout cancels.)"""
    pytest.importorskip("uvloop")
    if timestamps == "kernel" and not m.kernel_timestamps():
        pytest.skip("no kernel receive timestamps here")

    with SyntheticServer(tokens=8, rate=400, ttft=0.01) as server:
        url = m.endpoint_url(server.url, protocol, "some-model")
        bodies = [m.request_body(protocol, "hi there", model="some-model")]
        run_async(m.measure(url, bodies, protocol=protocol, num_prompts=2))  # imports, first-call caches
        runs = []

        def streams() -> None:
            runs.append(m.run_loop(m.measure(url, bodies, protocol=protocol, num_prompts=12, max_concurrency=4,
                                             timestamps=timestamps)))
            runs.append(m.run_loop(m.measure(url, bodies, protocol=protocol, num_prompts=3, timeout=0.015,
                                             timestamps=timestamps)))
            time.sleep(0.2)  # the server's side of the cut streams ends (all are done by 28 ms)

        found, kinds = cycles_left(streams)
    run, cut = runs
    assert all(r.ok for r in run.results) and all(r.error.startswith("timeout") for r in cut.results)
    assert found == 0, kinds


@pytest.mark.parametrize("timestamps", ["kernel", "read"])
def test_kernel_timestamps_count_a_token_when_it_arrived_not_when_it_was_read(timestamps, monkeypatch):
    """Tokens paced 100 ms apart (at 10, 110, 210 ... ms); the event loop is blocked from 60 to
    140 ms, so the token of 110 ms is read 30 ms late: read timestamps see gaps of 130 and 70 ms,
    kernel ones the server's 100 ms. (A block longer than a gap would put two tokens in one read,
    which then share the time its last byte arrived.)"""
    if timestamps == "kernel" and not m.kernel_timestamps():
        pytest.skip("no kernel receive timestamps here")
    class Blocking(m._ChatAdapter):
        def feed(self, chunk):
            tokens = super().feed(chunk)
            if tokens and not hasattr(self, "blocked"):  # the first token (10 ms): block from 60 to 140 ms
                self.blocked = asyncio.get_running_loop().call_later(0.05, time.sleep, 0.08)
            return tokens

    monkeypatch.setitem(m._ADAPTERS, "chat", Blocking)
    with SyntheticServer(tokens=5, rate=10, ttft=0.01) as server:
        run = run_async(m.measure(m.endpoint_url(server.url, "chat"), [m.request_body("chat", "x")], protocol="chat",
                                  num_prompts=1, timestamps=timestamps))
    (one,) = run.results
    assert one.ok and len(one.token_times) == 5 and run.timestamps == timestamps
    assert m.summarize(run)["timestamps"] == timestamps
    if timestamps == "read":
        assert max(one.itls) >= 0.12
    else:
        assert all(0.085 < gap < 0.115 for gap in one.itls), one.itls


@pytest.mark.parametrize("step", [5.0, -5.0, 0.2])
def test_kernel_timestamps_survive_a_stepped_wall_clock(step, monkeypatch):
    """The kernel stamps on the wall clock. Stepped by ``step`` seconds after the first token (as a
    resumed VM's clock is set), a stamp that would put a read before the connection or the read
    before it is not taken: the token counts when it was read, never before its request, and the
    times stay in order."""
    if not m.kernel_timestamps():
        pytest.skip("no kernel receive timestamps here")
    wall = time.time_ns
    stepped = []

    class Stepping(m._ChatAdapter):
        def feed(self, chunk):
            tokens = super().feed(chunk)
            if tokens and not stepped:
                stepped.append(True)
                monkeypatch.setattr(time, "time_ns", lambda: wall() + int(step * 1e9))
            return tokens

    monkeypatch.setitem(m._ADAPTERS, "chat", Stepping)
    with SyntheticServer(tokens=5, rate=20, ttft=0.03) as server:
        run = run_async(m.measure(m.endpoint_url(server.url, "chat"), [m.request_body("chat", "x")], protocol="chat",
                                  num_prompts=1, timestamps="kernel"))
    (one,) = run.results
    assert one.ok and len(one.token_times) == 5 and stepped
    assert 0.03 <= one.ttft < 1.0 and one.token_times == sorted(one.token_times)
    assert 0.03 + 4 / 20 <= one.token_times[-1] < 2.0, one.token_times


def test_kernel_stamped_connections_try_every_address():
    """As create_connection does: ``localhost`` may resolve to ``::1`` first and be served on
    ``127.0.0.1`` only. Here the first address refuses, the second serves."""
    import socket

    if not m.kernel_timestamps():
        pytest.skip("no kernel receive timestamps here")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = closed.getsockname()  # bound, not listening: refuses
        with SyntheticServer(tokens=3, rate=200, ttft=0.01) as server:
            port = int(server.url.rsplit(":", 1)[1])
            target = m._target(m.endpoint_url(server.url, "chat"), {})
            target = dataclasses.replace(target, addresses=((socket.AF_INET, refused), (socket.AF_INET, ("127.0.0.1", port))))

            async def one():
                result = RequestResult()
                await m._one_request(target, "chat", m.request_body("chat", "x"), time.perf_counter(), result, 10)
                return result

            result = run_async(one())
            assert result.ok and len(result.token_times) == 3
            only_refused = dataclasses.replace(target, addresses=((socket.AF_INET, refused),))

            async def refused_one():
                result = RequestResult()
                await m._one_request(only_refused, "chat", m.request_body("chat", "x"), time.perf_counter(), result, 10)
                return result

            failed = run_async(refused_one())
            assert not failed.ok and failed.error.startswith("ConnectionRefusedError")


def test_timestamps_choice(engine):
    with SyntheticServer(tokens=2, rate=100, ttft=0.01) as server:
        url = m.endpoint_url(server.url, "chat")
        auto = run_async(m.measure(url, [m.request_body("chat", "x")], protocol="chat", num_prompts=1, engine=engine))
        assert auto.timestamps == ("kernel" if m.kernel_timestamps() else "read") and auto.results[0].ok
        read = run_async(m.measure(url, [m.request_body("chat", "x")], protocol="chat", num_prompts=1,
                                   timestamps="read", engine=engine))
        assert read.timestamps == "read" and read.results[0].ok
        with pytest.raises(ValueError, match="timestamps must be one of"):
            run_async(m.measure(url, [m.request_body("chat", "x")], protocol="chat", timestamps="wall", engine=engine))
    with pytest.raises(ValueError, match="plain http"):  # TLS: checked before anything is sent
        run_async(m.measure("https://127.0.0.1:9/v1/chat/completions", [m.request_body("chat", "x")],
                            protocol="chat", timestamps="kernel", engine=engine))


# --- The command line ---------------------------------------------------------------------------------


def test_command_line_saves_the_result(tmp_path, engine):
    saved = tmp_path / "result.json"
    with SyntheticServer(tokens=6, rate=500, ttft=0.01) as server:
        done = subprocess.run(
            [sys.executable, "-m", "rapidsse", "measure", "--url", server.url + "/v1", "--protocol", "anthropic",
             "-n", "8", "--request-rate", "200", "--burstiness", "2", "--max-concurrency", "4", "--input-len", "9",
             "--output-len", "5", "--warmup", "2", "--seed", "3", "--percentiles", "50,95",
             "--goodput", "ttft:5000", "e2el:5000", "--save-result", str(saved), "--no-progress",
             "--engine", engine],
            capture_output=True, text=True, timeout=TIMEOUT,
        )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Serving Benchmark Result" in done.stdout and "P95 TTFT (ms):" in done.stdout
    result = json.loads(saved.read_text())
    assert result["completed"] == 8 and result["failed"] == 0 and result["total_output_tokens"] == 8 * 5
    assert result["total_input_tokens"] == 8 * 9 and result["request_goodput"] > 0
    assert result["request_rate"] == 200 and result["burstiness"] == 2 and result["max_concurrency"] == 4
    assert result["protocol"] == "anthropic" and result["url"].endswith("/v1/messages")
    assert {"p95_ttft_ms", "median_itl_ms", "std_e2el_ms", "mean_tpot_ms", "duration"} <= set(result)
    assert result["engine"] == engine and result["token_reads"] >= 8 and 0 <= result["client_cpu_share"] < 1


def test_command_line_exit_codes(tmp_path, engine):
    def measure(*args):
        return subprocess.run([sys.executable, "-m", "rapidsse", "measure", *args, "--no-progress", "--engine", engine],
                              capture_output=True, text=True, timeout=TIMEOUT)

    failed = measure("--url", "http://127.0.0.1:1/v1", "-n", "1", "--save-result", "-")
    assert failed.returncode == 1 and json.loads(failed.stdout)["failed"] == 1
    for bad in (["--goodput", "itl:3"], ["--request-rate", "0"], ["--percentiles", "101"],
                ["--dataset", str(tmp_path / "missing.jsonl")], ["--url", "ftp://x"]):
        done = measure("--url", "http://127.0.0.1:1/v1", *bad) if bad[0] != "--url" else measure(*bad)
        assert done.returncode == 1 and "rapidsse measure:" in done.stderr, bad


# --- Both engines: token counts, timestamps, saturation -------------------------------------------------


async def _read_request(reader):
    """One request off a raw connection (its head, then its ``content-length`` of body);
    IncompleteReadError when the client closed it."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    await reader.readexactly(length)


def _corpus_app(files):
    """Serves each recording at ``/{protocol}/{stem}`` + the protocol's route, as a stream in
    pieces cut at odd places (97 bytes, or a 64th of a long recording; one write each)."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    by_name = {f"{path.parent.name}/{path.stem}": path for path in files}

    async def replay(request):
        path = by_name[request.path_params["name"]]

        async def body():
            data = path.read_bytes()
            for piece in chunked(data, max(97, len(data) // 64 | 1)):
                yield piece

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/{name:path}/v1/{rest:path}", replay, methods=["POST"])])


def _corpus_run(server, path, engine):
    protocol = path.parent.name
    url = m.endpoint_url(f"{server.url}/{protocol}/{path.stem}/v1", protocol, "m")
    (one,) = run_async(m.measure(url, [m.request_body(protocol, "x", model="m")], protocol=protocol, num_prompts=1,
                                 engine=engine)).results
    return len(one.token_times), one.output_tokens, one.input_tokens, one.ok, one.error


def test_token_counts_agree_across_engines_on_every_recording():
    """The native engine counts tokens in Rust: on every recording of the corpus (Responses, Chat,
    Anthropic, Gemini; it has no Completions streams) it finds the tokens, usage, end and errors
    the asyncio engine's adapters find."""
    if not m.native_available():
        pytest.skip("the native engine needs the Rust backend (this run is on the pure Python one)")
    files = [path for kind in ("responses", "chat", "anthropic", "gemini") for path in corpus_files(kind)]
    with BackgroundServer(_corpus_app(files)) as server:
        disagree, tokens = {}, 0
        for path in files:
            native, asyncio_ = _corpus_run(server, path, "native"), _corpus_run(server, path, "asyncio")
            tokens += native[0]
            if native != asyncio_:
                disagree[path.name] = (native, asyncio_)
    assert not disagree, disagree
    assert len(files) > 80 and tokens > 1000, (len(files), tokens)


def _paced_app(writes):
    """A Chat stream whose events go out in groups, 60 ms apart: ``writes[i]`` events in write
    ``i``. The moment before each write is kept (on ``time.perf_counter``'s clock) in ``sent``."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    sent = []
    event = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

    async def paced(request):
        async def body():
            for count in writes:
                await asyncio.sleep(0.06)
                sent.append(time.perf_counter())
                yield event * count
            yield end

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", paced, methods=["POST"])]), sent


def _run_from(engine, url, start):
    """One Chat request to ``url`` due at ``start`` (:func:`time.perf_counter`), on ``engine``."""
    bodies, plan = [m.request_body("chat", "x")], [(0, 0.0)]
    if engine == "native":
        handle, kind = m.native_engine(url, "chat", None, "auto", bodies, TIMEOUT)
        return m.drive_native(handle, kind, plan, started=lambda: start)

    async def main():
        target = await m.prepared_target(url, "chat", None, "auto")
        return await m.drive(target, "chat", bodies, plan, started=lambda: start)

    return run_async(main())


def test_a_tokens_time_is_never_before_its_bytes_were_sent(engine):
    """Kernel timestamps (or read times) on one clock with the server's: each token counts as
    arrived after the server wrote it, and soon after (the loopback's and the client's delay)."""
    app, sent = _paced_app([1] * 6)
    with BackgroundServer(app) as server:
        start = time.perf_counter() + 0.05
        run = _run_from(engine, server.url + "/v1/chat/completions", start)
    (one,) = run.results
    assert one.ok and len(one.token_times) == 6 == len(sent), (one, sent)
    arrived = [start + t for t in one.token_times]
    assert all(at >= written - 0.0005 for at, written in zip(arrived, sent)), list(zip(arrived, sent))
    assert all(at - written < 0.05 for at, written in zip(arrived, sent)), list(zip(arrived, sent))
    assert one.multi_token_reads == 0 and one.token_reads == 6


def test_reads_of_several_tokens_are_counted_and_share_a_time(engine):
    """A server that writes three tokens at once: one read holds them, they share its time, and
    the report counts it."""
    app, sent = _paced_app([1, 3, 1, 3])
    with BackgroundServer(app) as server:
        start = time.perf_counter() + 0.05
        run = _run_from(engine, server.url + "/v1/chat/completions", start)
    (one,) = run.results
    assert one.ok and len(one.token_times) == 8
    assert one.multi_token_reads == 2 and one.token_reads == 4
    assert one.token_times[1] == one.token_times[2] == one.token_times[3] and one.itls.count(0.0) == 4
    report = m.summarize(run)
    assert report["multi_token_reads"] == 2 and report["token_reads"] == 4


def test_a_light_run_is_not_saturated(engine):
    """Tokens 50 ms apart, a few streams: the client keeps up (a read of two tokens needs it to be
    50 ms late, and one or two such on a loaded machine are below the threshold)."""
    with SyntheticServer(tokens=6, rate=20, ttft=0.01) as server:
        run = run_async(m.measure(m.endpoint_url(server.url, "completions"), [m.request_body("completions", "x")],
                                  protocol="completions", num_prompts=4, request_rate=20, seed=1, engine=engine))
    report = m.summarize(run)
    assert report["completed"] == 4 and report["total_output_tokens"] == 24
    assert report["token_reads"] > 20 and report["multi_token_reads"] < 3
    assert 0 < report["client_cpu_share"] < 0.5
    assert report["client_saturated"] is False and m.saturation_warning(report) is None


def test_saturation_thresholds():
    def run(cpu, multi, reads, processes=1):
        tokens = [RequestResult(ok=True, ttft=0.1, token_times=[0.1], latency=0.2, token_reads=reads,
                                multi_token_reads=multi)]
        return m.summarize(Run(tokens, 10.0, client_cpu=cpu, client_processes=processes))

    assert run(8.9, 0, 100)["client_saturated"] is False
    busy = run(9.5, 0, 100)
    assert busy["client_saturated"] is True and busy["client_cpu_share"] == pytest.approx(0.95)
    assert "95% of a core" in m.saturation_warning(busy)
    assert run(9.5 * 2, 0, 100, processes=4)["client_saturated"] is False  # shared by the processes
    assert run(0.1, 9, 100)["client_saturated"] is False  # (too few to tell)
    assert run(0.1, 10, 2000)["client_saturated"] is False  # 0.5%
    bunched = run(0.1, 30, 2000)
    assert bunched["client_saturated"] is True and "30 of its 2000 token reads" in m.saturation_warning(bunched)


def test_the_native_engine_is_refused_on_the_pure_backend():
    import os

    pure = subprocess.run([sys.executable, "-m", "rapidsse", "measure", "--url", "http://127.0.0.1:1/v1", "-n", "1",
                           "--engine", "native", "--no-progress"], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "RAPIDSSE_BACKEND": "python"})
    assert pure.returncode == 1 and "--engine native needs the Rust backend" in pure.stderr, pure.stderr


def test_https_with_the_roots_of_ssl_cert_file(engine, tmp_path, monkeypatch):
    """An https server whose certificate a private CA signed: trusted through ``SSL_CERT_FILE``
    (Python's default TLS context reads it, and the native engine too), streams measured with read
    timestamps; without it the certificate is refused."""
    import ssl

    from .test_gateway import private_ca

    ca_pem, context = private_ca(tmp_path)
    event = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    body = event * 3 + end
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body) + body

    async def handle(reader, writer):
        try:
            while True:
                await _read_request(reader)
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        writer.close()

    async def main(**options):
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await m.measure(f"https://127.0.0.1:{port}/v1/chat/completions", [m.request_body("chat", "x")],
                                   protocol="chat", num_prompts=3, max_concurrency=1, engine=engine, **options)

    untrusted = run_async(main(timeout=5))
    assert not any(r.ok for r in untrusted.results), untrusted.results
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_pem))
    run = run_async(main())
    assert run.timestamps == "read" and all(r.ok and len(r.token_times) == 3 for r in run.results), run.results
    with pytest.raises(ValueError, match="plain http"):
        run_async(main(timestamps="kernel"))


def test_the_native_engine_keeps_connections_alive_and_retries_one_closed_while_idle():
    """One slot, five requests: one connection carries them all. A server that closes each
    connection after its response without saying so (no ``connection: close``): the next request
    finds the pooled connection gone before any reply, and goes again on a new one."""
    if not m.native_available():
        pytest.skip("the native engine needs the Rust backend (this run is on the pure Python one)")
    event = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    reply = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(event)) + event

    def serve(close_after_reply):
        connections = []

        async def handle(reader, writer):
            connections.append(writer)
            try:
                while True:
                    await _read_request(reader)
                    writer.write(reply)
                    await writer.drain()
                    if close_after_reply:
                        break
            except asyncio.IncompleteReadError:
                pass
            writer.close()

        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with server:
                run = await m.measure(f"http://127.0.0.1:{port}/v1/chat/completions", [m.request_body("chat", "x")],
                                      protocol="chat", num_prompts=5, max_concurrency=1, engine="native")
            return run, len(connections)

        return run_async(main())

    kept, connections = serve(close_after_reply=False)
    assert all(r.ok for r in kept.results) and connections == 1
    closed, connections = serve(close_after_reply=True)
    assert all(r.ok for r in closed.results), [r.error for r in closed.results]
    assert connections == 5
