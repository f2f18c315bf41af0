"""``rapidsse measure --ray``: two Ray actors on a local Ray instance (one per module: a Ray start
takes seconds) against the synthetic server: the merged report has every request, the global cap
holds, a killed actor's requests are failures with the reason (not lost, not hung), the actors run
at this process's priority and measure paced tokens at their pace, and the command line runs on
Ray."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("httptools")
pytest.importorskip("uvicorn")
ray = pytest.importorskip("ray")
if os.environ.get("RAPIDSSE_BACKEND") == "python":
    # What is tested is Ray's placement, barrier and failures, not the parser, and a Ray start
    # costs seconds: once, in the Rust-backend run of the suite.
    pytest.skip("the Ray tests run in the Rust-backend run of the suite", allow_module_level=True)

from rapidsse.serving import measure as m  # noqa: E402
from rapidsse.serving import workers as w  # noqa: E402
from rapidsse.serving.serve import SyntheticServer  # noqa: E402

TIMEOUT = 120.0


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def synthetic():
    with SyntheticServer(tokens=10, rate=200, ttft=0.02) as server:
        yield server


def test_two_actors_report_every_request(cluster, synthetic, engine):
    url = m.endpoint_url(synthetic.url, "chat")
    seen = []
    run = w.measure_ray(url, [m.request_body("chat", "hi")], 2, protocol="chat", num_prompts=24, request_rate=100,
                        seed=4, max_concurrency=4, timeout=TIMEOUT, on_result=seen.append, poll=0.05, engine=engine)
    report = m.summarize(run)
    assert report["failure_reasons"] == {} and report["completed"] == 24 and len(seen) == 24
    assert [r.index for r in run.results] == list(range(24))
    assert [r.due for r in run.results] == m.arrival_times(24, 100, 1.0, 4)
    assert all(len(r.token_times) == 10 and r.ttft >= 0.02 for r in run.results)
    assert report["max_concurrent_requests"] <= 4
    assert not ray.util.list_named_actors()  # the actors are gone with the run


def test_a_killed_actor_fails_its_requests_and_the_run_ends(cluster, synthetic):
    url = m.endpoint_url(synthetic.url, "chat")
    seen = []

    def kill_one(result):
        seen.append(result)
        if len(seen) == 3:
            ray.kill(ray.get_actor("killed-run-0"))

    started = time.monotonic()
    run = w.measure_ray(url, [m.request_body("chat", "hi")], 2, protocol="chat", num_prompts=40, request_rate=40,
                        seed=2, max_concurrency=6, timeout=TIMEOUT, on_result=kill_one, poll=0.05, name="killed-run")
    report = m.summarize(run)
    assert report["completed"] + report["failed"] == 40 and [r.index for r in run.results] == list(range(40))
    reasons = report["failure_reasons"]
    assert list(reasons) == ["worker 0 (Ray actor) died before this request ended: ActorDiedError"], reasons
    assert all(r.ok for r in run.results if r.index % 2 == 1)  # the other actor's requests all stand
    assert time.monotonic() - started < TIMEOUT


def test_the_actors_run_at_this_process_priority(cluster):
    # Ray starts its workers at niceness 15: on a machine whose cores are taken (the server under
    # test, the driver) such an actor is run last, reads its streams late and in bursts, and its
    # samples are wrong (the bug this guards against: ITLs mostly 0, then gaps of hundreds of ms).
    @ray.remote(num_cpus=0)
    def niceness():
        return os.nice(0)

    assert ray.get(niceness.options(**w.ray_actor_options()).remote()) == os.nice(0)


def paced_itls_ms(run):
    return sorted(gap * 1000 for r in run.results for gap in r.itls)


@contextlib.contextmanager
def busy_cores():
    """Every core of this machine kept busy by a process at this one's priority, as a server under
    test and other work keep them on a benchmark machine."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(w.cpu_count())]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_paced_tokens_are_measured_at_their_pace_on_busy_cores(cluster):
    # A correctness property of the samples, not a speed: at a few streams per actor, a token every
    # 20 ms is measured a token every 20 ms, even with the cores taken by other work. An actor the
    # kernel runs last (Ray's niceness 15) reads its streams in bursts, several tokens per read (an
    # ITL of 0 each), and the median is 0.
    with SyntheticServer(tokens=20, rate=50, ttft=0.02) as server, busy_cores():
        run = w.measure_ray(m.endpoint_url(server.url, "chat"), [m.request_body("chat", "hi")], 2,
                            protocol="chat", num_prompts=16, request_rate=20, seed=3, timeout=TIMEOUT, poll=0.05)
    report = m.summarize(run, percentiles=[50])
    assert report["completed"] == 16 and report["failure_reasons"] == {}
    assert all(len(r.token_times) == 20 for r in run.results)
    itls = paced_itls_ms(run)
    assert abs(m.percentile(itls, 50) - 20.0) < 5.0, itls
    assert sum(gap < 1.0 for gap in itls) < len(itls) / 10, itls  # (a burst is rare, not the rule)


def test_the_command_line_runs_on_ray(tmp_path, engine):
    # Through the CLI's entry point, in a process of its own: `--ray local` starts a Ray instance
    # of its own (without an address the CLI joins the cluster Ray finds: RAY_ADDRESS, or the last
    # one `ray start` began on this machine, which a test must not depend on).
    saved = tmp_path / "result.json"
    with SyntheticServer(tokens=20, rate=50, ttft=0.02) as server:
        done = subprocess.run(
            [sys.executable, "-m", "rapidsse", "measure", "--url", server.url, "--protocol", "chat", "-n", "16",
             "--request-rate", "20", "--max-concurrency", "6", "--workers", "2", "--ray", "local",
             "--save-result", str(saved), "--no-progress", "--engine", engine],
            capture_output=True, text=True, timeout=5 * TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert "Serving Benchmark Result" in done.stdout
    result = json.loads(saved.read_text())
    assert result["completed"] == 16 and result["failed"] == 0 and result["total_output_tokens"] == 16 * 20
    assert result["max_concurrent_requests"] <= 6
    assert result["timestamps"] == ("kernel" if m.kernel_timestamps() else "read")
    assert abs(result["median_itl_ms"] - 20.0) < 5.0, result
    assert result["engine"] == engine
