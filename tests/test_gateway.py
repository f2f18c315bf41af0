"""examples/gateway.py between the replay server (upstream) and clients, all on loopback: the
clients get the upstream bytes exactly, and the tap's result equals the file's accumulated response."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from rapidsse import ResponseAccumulator  # noqa: E402
from rapidsse.serve import BackgroundServer, ReplayServer  # noqa: E402

from .conftest import ROOT, corpus_files  # noqa: E402

RESPONSES = corpus_files("responses")
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def gateway_module():
    spec = importlib.util.spec_from_file_location("rapidsse_example_gateway", ROOT / "examples" / "gateway.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def accumulated(path):
    acc = ResponseAccumulator()
    acc.feed(path.read_bytes())
    acc.close()
    return acc


def test_gateway_forwards_bytes_and_taps_the_response(gateway_module, caplog):
    small = next(p for p in RESPONSES if "include_raw_annotations" in p.name)
    big = max(RESPONSES, key=lambda p: p.stat().st_size)
    tapped: list[ResponseAccumulator] = []

    def on_complete(acc):
        gateway_module.log_usage(acc)
        tapped.append(acc)

    with ReplayServer([small, big], rate=5000) as upstream:
        app = gateway_module.create_app(upstream.url + "/v1/responses", on_complete=on_complete)
        with BackgroundServer(app) as gateway, caplog.at_level("INFO", logger="rapidsse.gateway"):
            url = gateway.url + "/v1/responses"
            with httpx.Client(timeout=TIMEOUT) as client:
                with client.stream("POST", url, json={"stream": True}, headers={"authorization": "Bearer x"}) as r:
                    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                    body = b"".join(r.iter_raw())
            assert body == small.read_bytes()

            async def several() -> list[bytes]:
                async with httpx.AsyncClient(timeout=TIMEOUT) as client:

                    async def one() -> bytes:
                        async with client.stream("POST", url, json={"stream": True}) as response:
                            return b"".join([chunk async for chunk in response.aiter_raw()])

                    return await asyncio.gather(*(one() for _ in range(4)))

            bodies = asyncio.run(asyncio.wait_for(several(), TIMEOUT))
    assert sorted(bodies) == sorted([small.read_bytes(), big.read_bytes()] * 2)
    assert len(tapped) == 5
    # streams complete in any order: match each tapped result to its recording by response id
    by_id = {acc.response.id: acc for acc in map(accumulated, (small, big))}
    for acc in tapped:
        want = by_id[acc.response.id]
        assert acc.response == want.response and acc.output_text == want.output_text
    assert sum(acc.response.id == accumulated(big).response.id for acc in tapped) == 2
    assert any("output_text=%d chars" % len(accumulated(small).output_text) in m for m in caplog.messages)


def test_gateway_passes_non_stream_replies_untapped(gateway_module):
    path = next(p for p in RESPONSES if "include_raw_annotations" in p.name)
    tapped = []
    with ReplayServer([path]) as upstream:
        app = gateway_module.create_app(upstream.url + "/v1/responses", on_complete=tapped.append)
        with BackgroundServer(app) as gateway, httpx.Client(timeout=TIMEOUT) as client:
            whole = client.post(gateway.url + "/v1/responses", json={"stream": False})
            direct = client.post(upstream.url + "/v1/responses", json={"stream": False})
    assert whole.status_code == 200 and whole.content == direct.content
    assert whole.headers["content-type"] == "application/json" and tapped == []


def test_gateway_reports_an_unreachable_upstream(gateway_module):
    with ReplayServer([RESPONSES[0]]) as stopped:
        dead_url = stopped.url + "/v1/responses"
    app = gateway_module.create_app(dead_url, on_complete=lambda acc: None)
    with BackgroundServer(app) as gateway, httpx.Client(timeout=TIMEOUT) as client:
        response = client.post(gateway.url + "/v1/responses", json={"stream": True})
    assert response.status_code == 502 and response.json()["error"]["type"] == "bad_gateway"
