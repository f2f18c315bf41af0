"""rapidsse.integrations.httpx_sse against the real httpx-sse: the same API and results, except
where httpx-sse departs from the WHATWG rules (each such difference has its own test)."""

from __future__ import annotations

import asyncio
import json

import httpx
import httpx_sse as reference
import pytest

import rapidsse
from rapidsse.integrations import httpx_sse

from .conftest import chunked, corpus_files

SSE_HEADERS = {"content-type": "text/event-stream"}


def transport(body: bytes, chunk_size: int = 64, headers: dict | None = None, seen: list | None = None):
    """A MockTransport whose response streams ``body`` in ``chunk_size`` pieces."""

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(200, headers=headers or SSE_HEADERS, stream=ChunkStream(chunked(body, chunk_size)))

    return httpx.MockTransport(handler)


class ChunkStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self):
        yield from self.chunks

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk


def read(module, body: bytes, chunk_size: int = 64) -> list:
    with httpx.Client(transport=transport(body, chunk_size)) as client:
        with module.connect_sse(client, "GET", "http://test/sse") as source:
            return list(source.iter_sse())


def fields(events) -> list[tuple]:
    return [(e.event, e.data, e.id, e.retry) for e in events]


def test_the_public_api_is_httpx_sses():
    assert set(reference.__all__) <= set(httpx_sse.__all__)
    for name in reference.__all__:
        assert hasattr(httpx_sse, name), name
    assert issubclass(httpx_sse.SSEError, httpx.TransportError)
    assert issubclass(httpx_sse.SSEError, rapidsse.SSEError)


@pytest.mark.parametrize("path", corpus_files("responses")[:6] + corpus_files("chat")[:6] + corpus_files("anthropic")[:4] + corpus_files("gemini")[:3], ids=lambda p: p.name)
@pytest.mark.parametrize("chunk_size", [1, 7, 512, 65536])
def test_the_corpus_gives_httpx_sses_events(path, chunk_size):
    body = path.read_bytes()
    if chunk_size == 1 and len(body) > 40_000:
        body = body[:40_000]  # httpx-sse itself is slow byte by byte
    expected = [e for e in read(reference, body, chunk_size) if e.data != ""]  # see test_a_block_without_data
    got = read(httpx_sse, body, chunk_size)
    assert fields(got) == fields(expected)
    assert [repr(e) for e in got] == [repr(e) for e in expected]
    assert all(type(e) is httpx_sse.ServerSentEvent for e in got)


def test_the_server_sent_event_matches_httpx_sses():
    cases = [dict(), dict(event="ping"), dict(event="", data="x"), dict(data="a\nb", id="7", retry=3000),
             dict(event=None, data=None, id=None, retry=None), dict(id="", retry=0)]
    for kwargs in cases:
        ours, theirs = httpx_sse.ServerSentEvent(**kwargs), reference.ServerSentEvent(**kwargs)
        assert fields([ours]) == fields([theirs])
        assert repr(ours) == repr(theirs)
    positional = httpx_sse.ServerSentEvent("update", '{"a": [1, 2]}', "1", 5)
    assert positional.json() == reference.ServerSentEvent("update", '{"a": [1, 2]}', "1", 5).json() == {"a": [1, 2]}
    with pytest.raises(json.JSONDecodeError):
        httpx_sse.ServerSentEvent(data="not json").json()
    with pytest.raises(AttributeError):
        positional.data = "changed"  # read-only properties, as in httpx-sse


def test_events_compare_and_hash_by_value():
    a, b = httpx_sse.ServerSentEvent("e", "d", "i", 1), httpx_sse.ServerSentEvent("e", "d", "i", 1)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != httpx_sse.ServerSentEvent("e", "d", "i", 2)
    assert a != ("e", "d", "i", 1)


def test_readme_sync_example_with_the_request_headers():
    seen: list[httpx.Request] = []
    body = b"event: greeting\ndata: hello\nid: 1\nretry: 2000\n\ndata: {\"n\": 2}\n\n"
    with httpx.Client(transport=transport(body, 5, seen=seen)) as client:
        with httpx_sse.connect_sse(client, "GET", "http://localhost:8000/sse", headers={"Accept": "x/y", "X-Key": "k"}) as event_source:
            assert isinstance(event_source.response, httpx.Response)
            events = list(event_source.iter_sse())
    assert fields(events) == [("greeting", "hello", "1", 2000), ("message", '{"n": 2}', "1", None)]
    assert events[1].json() == {"n": 2}
    request = seen[0]
    assert request.headers["accept"] == "text/event-stream"
    assert request.headers["cache-control"] == "no-store"
    assert request.headers["x-key"] == "k"


def test_readme_async_example():
    body = b"data: one\n\ndata: two\n\n"

    async def main():
        async with httpx.AsyncClient(transport=transport(body, 3)) as client:
            async with httpx_sse.aconnect_sse(client, "GET", "http://localhost:8000/sse") as event_source:
                return [sse async for sse in event_source.aiter_sse()]

    assert [e.data for e in asyncio.run(main())] == ["one", "two"]


def test_an_asgi_app_streaming_events_post_with_json():
    starlette = pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def numbers(request):
        body = await request.json()

        async def stream():
            for i in range(body["count"]):
                yield f"id: {i}\nevent: number\ndata: {json.dumps({'i': i})}\n\n".encode()
                await asyncio.sleep(0)

        return StreamingResponse(stream(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/sse", numbers, methods=["POST"])])

    async def main(module):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            async with module.aconnect_sse(client, "POST", "/sse", json={"count": 5}) as event_source:
                return [sse async for sse in event_source.aiter_sse()]

    ours, theirs = asyncio.run(main(httpx_sse)), asyncio.run(main(reference))
    assert fields(ours) == fields(theirs) == [("number", json.dumps({"i": i}), str(i), None) for i in range(5)]
    assert starlette


@pytest.mark.parametrize("content_type", ["application/json", "", "text/plain; charset=utf-8"])
def test_a_response_that_is_not_an_event_stream_raises_sse_error(content_type):
    def handler(request):
        return httpx.Response(500, headers={"content-type": content_type} if content_type else {}, content=b'{"error": "x"}')

    for module in (httpx_sse, reference):
        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            with module.connect_sse(client, "GET", "http://test/sse") as event_source:
                with pytest.raises(module.SSEError) as caught:
                    list(event_source.iter_sse())
                assert event_source.response.status_code == 500
        assert str(caught.value) == f"Expected response header Content-Type to contain 'text/event-stream', got {content_type.partition(';')[0]!r}"
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        with httpx_sse.connect_sse(client, "GET", "http://test/sse") as event_source:
            with pytest.raises(httpx.TransportError):
                list(event_source.iter_sse())


# ---- where httpx-sse departs from the WHATWG rules, and rapidsse does not ----------------------


def test_a_block_without_data_dispatches_nothing():
    body = b"event: ping\n\nretry: 3000\n\nid: 9\n\ndata: real\n\n"
    assert fields(read(reference, body)) == [("ping", "", "", None), ("message", "", "", 3000), ("message", "", "9", None), ("message", "real", "9", None)]
    assert fields(read(httpx_sse, body)) == [("message", "real", "9", None)]


def test_a_leading_byte_order_mark_is_dropped():
    body = b"\xef\xbb\xbfdata: first\n\ndata: second\n\n"
    assert [e.data for e in read(reference, body)] == ["second"]
    assert [e.data for e in read(httpx_sse, body, 1)] == ["first", "second"]


@pytest.mark.parametrize("value, whatwg", [(b"03000", 3000), (b"+5", None), (b"-1", None), (b" 5", 5), (b"1_0", None), ("\u0665".encode(), None)])
def test_retry_takes_ascii_digits_only(value, whatwg):
    # " 5": the one leading space is not part of the value, in both
    body = b"retry:" + value + b"\ndata: x\n\n"
    assert read(httpx_sse, body)[0].retry == whatwg


def test_the_stream_is_utf8_whatever_the_charset():
    body = "data: café\n\n".encode()

    def handler(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream; charset=latin-1"}, content=body)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        with httpx_sse.connect_sse(client, "GET", "http://t/") as source:
            assert [e.data for e in source.iter_sse()] == ["café"]
        with reference.connect_sse(client, "GET", "http://t/") as source:
            assert [e.data for e in source.iter_sse()] == ["cafÃ©"]


def test_an_event_over_the_cap_raises_sse_error_after_the_events_before_it():
    body = b"data: small\n\ndata: " + b"x" * 5000 + b"\n\n"
    got = []
    with httpx.Client(transport=transport(body, 1024)) as client:
        with httpx_sse.connect_sse(client, "GET", "http://t/") as source:
            with pytest.raises(httpx_sse.SSEError) as caught:
                for event in source.iter_sse(max_event_size=1000):
                    got.append(event)
    assert [e.data for e in got] == ["small"]
    assert isinstance(caught.value.__cause__, rapidsse.EventTooLarge)
    assert [len(e.data) for e in read(httpx_sse, body)] == [5, 5000]  # the 16 MiB default
    with httpx.Client(transport=transport(body, 1024)) as client:
        with httpx_sse.connect_sse(client, "GET", "http://t/") as source:
            assert len(list(source.iter_sse(max_event_size=None))) == 2
