"""``rapidsse measure --ray``: two Ray actors on a local Ray instance (one per module: a Ray start
takes seconds) against the synthetic server: the merged report has every request, the global cap
holds, and a killed actor's requests are failures with the reason (not lost, not hung)."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("httptools")
pytest.importorskip("uvicorn")
ray = pytest.importorskip("ray")
if os.environ.get("RAPIDSSE_BACKEND") == "python":
    # What is tested is Ray's placement, barrier and failures, not the parser, and a Ray start
    # costs seconds: once, in the Rust-backend run of the suite.
    pytest.skip("the Ray tests run in the Rust-backend run of the suite", allow_module_level=True)

from rapidsse import measure as m  # noqa: E402
from rapidsse import measure_workers as w  # noqa: E402
from rapidsse.serve import SyntheticServer  # noqa: E402

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


def test_two_actors_report_every_request(cluster, synthetic):
    url = m.endpoint_url(synthetic.url, "chat")
    seen = []
    run = w.measure_ray(url, [m.request_body("chat", "hi")], 2, protocol="chat", num_prompts=24, request_rate=100,
                        seed=4, max_concurrency=4, timeout=TIMEOUT, on_result=seen.append, poll=0.05)
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
