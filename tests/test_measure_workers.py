"""``rapidsse measure --workers``: the exact merge (any split of the same samples gives the
one-process report), the schedule dealt across workers, the global slot cap, and runs of spawned
worker processes against the synthetic server: every request reported, the cap kept, a killed
worker's requests failed with the reason (no hang), Ctrl-C writing what was measured."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("httptools")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from rapidsse.serving import measure as m  # noqa: E402
from rapidsse.serving import cli, workers as w  # noqa: E402
from rapidsse.serving.serve import SyntheticServer  # noqa: E402

TIMEOUT = 120.0  # spawned workers import rapidsse afresh: seconds on a loaded machine


# --- The exact merge ---------------------------------------------------------------------------------

_times = st.floats(min_value=0.0, max_value=5.0, allow_nan=False)


@st.composite
def samples(draw):
    """Requests as a run would measure them: some failed with reasons, token times rising from the
    TTFT, usage sometimes sent."""
    count = draw(st.integers(1, 24))
    results = []
    due = 0.0
    for index in range(count):
        due += draw(st.floats(0.0, 0.5))
        ok = draw(st.booleans()) or draw(st.booleans())
        gaps = draw(st.lists(st.floats(0.0, 0.1), max_size=6))
        ttft = draw(_times)
        tokens = [ttft]
        for gap in gaps:
            tokens.append(tokens[-1] + gap)
        results.append(m.RequestResult(
            ok=ok, index=index, due=due, queued=draw(st.floats(0.0, 0.2)), ttft=ttft if ok or gaps else None,
            token_times=tokens if ok or gaps else [], latency=tokens[-1] + draw(st.floats(0.0, 0.1)),
            output_tokens=draw(st.none() | st.integers(0, 50)), input_tokens=draw(st.none() | st.integers(0, 50)),
            error=None if ok else draw(st.sampled_from(["HTTP 500: boom", "timeout after 1 s", "cut short: x"])),
            status_code=200))
    return results


@settings(max_examples=60, deadline=None)
@given(results=samples(), workers=st.integers(1, 6), data=st.data())
def test_any_split_across_workers_merges_to_the_one_process_report(results, workers, data):
    duration = max(r.due + r.latency for r in results) + data.draw(st.floats(0.0, 1.0))
    one = m.Run(list(results), duration, "kernel")
    owner = data.draw(st.lists(st.integers(0, workers - 1), min_size=len(results), max_size=len(results)))
    parts = []
    for number in range(workers):
        mine = [r for r, o in zip(results, owner) if o == number]
        mine = data.draw(st.permutations(mine))  # a worker's results come back in any order
        # every worker started on the barrier; the one that ended last gives the run's duration
        share = duration if number == 0 else data.draw(st.floats(0.0, duration))
        parts.append(m.Run(mine, share, "kernel"))
    merged = m.merge(data.draw(st.permutations(parts)))
    assert merged.results == one.results and merged.duration == duration
    options = dict(percentiles=[50, 90, 99, 99.9], goodput={"ttft": 1000.0, "e2el": 3000.0})
    report = m.summarize(merged, **options)
    assert report == m.summarize(one, **options)
    assert json.dumps(report) == json.dumps(m.summarize(one, **options))  # (the saved file, byte for byte)
    assert m.format_report(report) == m.format_report(m.summarize(one, **options))


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
@pytest.mark.parametrize("rate", [math.inf, 40.0])
def test_the_schedule_is_drawn_once_and_dealt_out(workers, rate):
    shares = w.split_schedule(50, rate, 0.5, 3, workers)
    assert len(shares) == workers
    assert sorted(p for share in shares for p in share) == list(enumerate(m.arrival_times(50, rate, 0.5, 3)))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_the_slot_book_grants_in_arrival_order_and_takes_back_a_dead_workers_slots():
    book = w.SlotBook(2)
    assert book.want(0, 3) == [(0, 3)]
    assert book.want(1, 1) == [(1, 1)]
    assert book.want(1, 4) == [] and book.want(0, 2) == [] and book.want(1, 5) == []
    assert book.release(3) == [(0, 2)]  # the earliest due goes first, whichever worker asked first
    assert book.release(3) == []  # (a slot is given back once)
    assert book.want(0, 6) == []
    assert book.forget(1) == [(0, 6)]  # worker 1 held 1 and waited with 4 and 5: 6 is next
    assert book.free == 0 and book.release(2) == [] and book.free == 1
    assert book.want(1, 7) == []  # a forgotten worker gets no slot
    assert book.free == 1


# --- Worker processes against the synthetic server ------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic():
    with SyntheticServer(tokens=10, rate=200, ttft=0.02) as server:
        yield server


def test_workers_report_every_request_and_keep_one_cap(synthetic, engine):
    url = m.endpoint_url(synthetic.url, "chat")
    bodies = [m.request_body("chat", p) for p in m.generated_prompts(5, 4, seed=2)]
    seen = []
    run = w.measure_workers(url, bodies, 2, protocol="chat", num_prompts=30, request_rate=200, seed=5,
                            max_concurrency=3, warmup=2, timeout=TIMEOUT, on_result=seen.append, engine=engine)
    report = m.summarize(run)
    assert report["failure_reasons"] == {} and report["completed"] == 30 and len(seen) == 30
    assert [r.index for r in run.results] == list(range(30))
    assert [r.due for r in run.results] == m.arrival_times(30, 200, 1.0, 5)  # the one-process schedule
    odd = [(r.index, r.ttft, r.token_times) for r in run.results if len(r.token_times) != 10 or r.ttft < 0.02]
    assert not odd
    assert report["total_input_tokens"] == 30 * 4
    # one cap across both workers: never more than 3 in flight, measured on the shared clock
    assert report["max_concurrent_requests"] <= 3 and report["timestamps"] == "kernel"
    assert not run.interrupted


def test_a_parent_that_falls_behind_loses_no_result(engine):
    # The parent stops reading (here: its first on_result waits until the server has sent every
    # token) while the workers end hundreds of requests of 300 token times each, far more than a
    # pipe holds. Each worker keeps what the pipe cannot take until the parent reads again: every
    # request is reported, none failed (a worker that wrote to its full, non-blocking pipe died).
    requests, tokens = 240, 300
    with SyntheticServer(tokens=tokens, rate=20000, ttft=0.0) as server:
        stalled = []

        def stall(result):
            if not stalled:
                stalled.append(result)
                deadline = time.monotonic() + TIMEOUT
                while server_health(server)["itl"]["count"] < requests * (tokens - 1):
                    if len(multiprocessing.active_children()) < 2:
                        break  # a worker died: its failures say why
                    assert time.monotonic() < deadline
                    time.sleep(0.1)

        run = w.measure_workers(m.endpoint_url(server.url, "chat"), [m.request_body("chat", "x")], 2,
                                protocol="chat", num_prompts=requests, timeout=TIMEOUT, on_result=stall,
                                engine=engine)
    report = m.summarize(run)
    assert report["failure_reasons"] == {} and report["completed"] == requests
    assert all(len(r.token_times) == tokens for r in run.results)


def test_a_killed_worker_fails_its_unfinished_requests_and_the_run_ends(synthetic, engine):
    url = m.endpoint_url(synthetic.url, "chat")
    seen = []

    def kill_one(result):
        seen.append(result)
        if len(seen) == 4:
            victim = min(multiprocessing.active_children(), key=lambda p: p.name)
            os.kill(victim.pid, signal.SIGKILL)

    started = time.monotonic()
    run = w.measure_workers(url, [m.request_body("chat", "x")], 2, protocol="chat", num_prompts=40,
                            request_rate=40, seed=1, max_concurrency=6, timeout=TIMEOUT, on_result=kill_one,
                            engine=engine)
    report = m.summarize(run)
    assert report["completed"] + report["failed"] == 40 and [r.index for r in run.results] == list(range(40))
    reasons = report["failure_reasons"]
    assert list(reasons) == ["worker 0 died (exit code -9) before this request ended"], reasons
    assert 0 < reasons[next(iter(reasons))] <= 20  # only worker 0's: the other's requests all stand
    assert all(r.ok for r in run.results if r.index % 2 == 1)
    assert time.monotonic() - started < TIMEOUT
    assert not multiprocessing.active_children()  # the other worker ended and was joined


@pytest.mark.parametrize("workers", ["2", "1"])
def test_ctrl_c_stops_the_workers_and_writes_what_was_measured(tmp_path, engine, workers):
    """Ctrl-C: exit 130 with the report of what was measured, the requests in flight failed as
    interrupted (with workers, or in one process: the native engine stops from Python)."""
    if workers == "1" and engine == "asyncio":
        pytest.skip("the one-process asyncio engine leaves Ctrl-C to asyncio.run")
    saved = tmp_path / "result.json"
    with SyntheticServer(tokens=40, rate=20, ttft=0.01) as server:  # 2 s a stream
        # Ctrl-C as a terminal sends it: to a process whose SIGINT is not ignored (a suite run in the
        # background without job control ignores it, and so would the CLI it starts, unstoppable).
        process = subprocess.Popen(
            [sys.executable, "-m", "rapidsse", "measure", "--url", server.url, "--protocol", "chat", "-n", "400",
             "--request-rate", "20", "--workers", workers, "--save-result", str(saved), "--no-progress",
             "--engine", engine],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + TIMEOUT
            # 20 streams a second, 2 s each: by 1600 tokens sent some have ended and dozens are in flight
            while server_health(server)["itl"]["count"] < 1600:
                assert time.monotonic() < deadline and process.poll() is None, process.communicate()
                time.sleep(0.2)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=TIMEOUT)
        finally:
            process.kill()
    assert process.returncode == 130, err
    assert "Serving Benchmark Result" in out
    result = json.loads(saved.read_text())
    assert result["completed"] > 0 and 0 < result["failed"] and result["completed"] + result["failed"] < 400
    assert list(result["failure_reasons"]) == [w.INTERRUPTED]


def server_health(server):
    import urllib.request

    with urllib.request.urlopen(server.url + "/health", timeout=10) as response:
        return json.load(response)


def test_bad_workers_option(synthetic):
    done = subprocess.run([sys.executable, "-m", "rapidsse", "measure", "--url", synthetic.url, "--workers", "0"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 1 and "--workers must be a number at least 1, or auto" in done.stderr, done.stderr
    for bad in ("x", "-2", "1.5"):
        with pytest.raises(ValueError, match="--workers must be"):
            cli._workers(bad, False)
    assert cli._workers("auto", False) == w.cpu_count() and cli._workers("auto", True) is None
    assert cli._workers("3", True) == 3
    with pytest.raises(ValueError, match="timestamps"):
        w.measure_workers(m.endpoint_url(synthetic.url, "chat"), [m.request_body("chat", "x")], 2, protocol="chat",
                          num_prompts=2, timestamps="wall")
