"""rapidsse.integrations: httpx (connect_sse / aconnect_sse), aiohttp, the openai SDK's raw responses
and model converters, against the replay server on loopback and on the corpus."""

from __future__ import annotations

import asyncio
import warnings

import msgspec
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import rapidsse  # noqa: E402
from rapidsse import ChatAccumulator, ResponseAccumulator, SSEError, responses  # noqa: E402
from rapidsse.integrations import SSEContentTypeError, to_builtins  # noqa: E402
from rapidsse.integrations.httpx import aconnect_sse, connect_sse  # noqa: E402
from rapidsse.serving.serve import ReplayServer  # noqa: E402

from .conftest import corpus_files  # noqa: E402

RESPONSES = corpus_files("responses")
CHATS = corpus_files("chat")
TEXT_RESPONSE = next(p for p in RESPONSES if "include_raw_annotations" in p.name)
TEXT_CHAT = next(p for p in CHATS if p.name == "openai-python__e2aad469b71d.sse")
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def server():
    """One Responses and one Chat recording (each route always serves the same file)."""
    with ReplayServer([TEXT_RESPONSE, TEXT_CHAT]) as running:
        yield running


def expected_events(path, protocol):
    return list(rapidsse.iter_events([path.read_bytes()], protocol))


def final_response(path):
    acc = ResponseAccumulator()
    acc.feed(path.read_bytes())
    return acc.response


def output_text(path):
    acc = ResponseAccumulator()
    acc.feed(path.read_bytes())
    return acc.output_text


def final_completion(path):
    acc = ChatAccumulator()
    acc.feed(path.read_bytes())
    return acc.completion


# --- to_builtins ----------------------------------------------------------------------------


def test_to_builtins_writes_defaults_and_unknown_objects_as_received():
    raw = b'{"id": "r", "output": [{"type": "hologram_call", "id": "h1", "depth": 3}, ' \
          b'{"type": "message", "id": "m", "content": [{"type": "output_text", "text": "hi"}]}]}'
    response = rapidsse._schema.decode_lenient(raw, responses.Response)
    plain = to_builtins(response)
    assert plain["output"][0] == {"type": "hologram_call", "id": "h1", "depth": 3}
    part = plain["output"][1]["content"][0]
    assert part["type"] == "output_text" and part["text"] == "hi" and "annotations" in part
    assert msgspec.json.decode(msgspec.json.encode(plain)) == plain
    assert to_builtins(final_completion(TEXT_CHAT))["choices"][0]["index"] == 0


# --- httpx ----------------------------------------------------------------------------------


def test_connect_sse_sync(server):
    with httpx.Client(timeout=TIMEOUT) as client:
        with connect_sse(client, "POST", server.url + "/v1/responses", json={"stream": True}) as source:
            assert source.response.request.headers["accept"] == "text/event-stream"
            assert source.response.request.headers["cache-control"] == "no-store"
            events = list(source.iter_events())
        assert events == expected_events(TEXT_RESPONSE, "responses")
        with connect_sse(client, "POST", server.url + "/v1/responses", json={"stream": True}) as source:
            stream = source.stream()
            assert len(list(stream)) == len(events)
            assert stream.response == final_response(TEXT_RESPONSE)
        url = server.url + "/v1/chat/completions"
        with connect_sse(client, "POST", url, json={"stream": True}, headers={"Accept": "*/*"}) as source:
            assert source.response.request.headers["accept"] == "*/*"
            sse = list(source.iter_sse())
        assert sse == list(rapidsse.iter_sse([TEXT_CHAT.read_bytes()]))
        with connect_sse(client, "POST", url, json={"stream": True}) as source:
            stream = source.stream()  # the protocol comes from the URL
            chunks = list(stream)
        assert chunks == expected_events(TEXT_CHAT, "chat")
        assert stream.completion == final_completion(TEXT_CHAT)


def test_aconnect_sse_async_concurrent(server):
    async def one(client, route):
        async with aconnect_sse(client, "POST", server.url + route, json={"stream": True}) as source:
            stream = source.astream()
            events = [event async for event in stream]
            return events, stream.accumulator

    async def sse(client):
        async with aconnect_sse(client, "POST", server.url + "/v1/responses", json={"stream": True}) as source:
            return [event async for event in source.aiter_sse()]

    async def typed(client):
        async with aconnect_sse(client, "POST", server.url + "/v1/chat/completions", json={"stream": True}) as source:
            return [event async for event in source.aiter_events()]

    async def run():
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            streams = await asyncio.gather(*(one(client, r) for r in ["/v1/responses", "/v1/chat/completions"] * 3))
            return streams, await sse(client), await typed(client)

    streams, raw, chunks = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    for (events, acc), (path, protocol) in zip(streams, [(TEXT_RESPONSE, "responses"), (TEXT_CHAT, "chat")] * 3):
        assert events == expected_events(path, protocol)
        final = acc.response if protocol == "responses" else acc.completion
        assert final == (final_response(path) if protocol == "responses" else final_completion(path))
    assert raw == list(rapidsse.iter_sse([TEXT_RESPONSE.read_bytes()]))
    assert chunks == expected_events(TEXT_CHAT, "chat")


def test_wrong_content_type_raises(server):
    with ReplayServer([TEXT_RESPONSE]) as responses_only, httpx.Client(timeout=TIMEOUT) as client:
        with connect_sse(client, "GET", server.url + "/health") as source:
            with pytest.raises(SSEContentTypeError) as info:
                source.iter_events()
        assert isinstance(info.value, SSEError)
        assert info.value.status_code == 200 and info.value.content_type == "application/json"
        assert "text/event-stream" in str(info.value)
        url = responses_only.url + "/v1/chat/completions"
        with connect_sse(client, "POST", url, json={"stream": True}) as source:
            with pytest.raises(SSEContentTypeError) as info:
                list(source.iter_sse())
            assert info.value.status_code == 404 and info.value.response is source.response
            assert source.response.read()  # the error body is still there to read

    async def run():
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            async with aconnect_sse(client, "GET", server.url + "/health") as source:
                with pytest.raises(SSEContentTypeError):
                    source.aiter_events()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT))


# --- aiohttp --------------------------------------------------------------------------------


def test_aiohttp_helpers(server):
    aiohttp = pytest.importorskip("aiohttp")
    from rapidsse.integrations.aiohttp import aiter_events, aiter_sse

    async def run():
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.post(server.url + "/v1/responses", json={"stream": True}) as response:
                events = [event async for event in aiter_events(response)]
            async with session.post(server.url + "/v1/chat/completions", json={"stream": True}) as response:
                chunks = [event async for event in aiter_events(response)]  # protocol from the URL
            async with session.post(server.url + "/v1/chat/completions", json={"stream": True}) as response:
                sse = [event async for event in aiter_sse(response)]
            async with session.get(server.url + "/health") as response:
                with pytest.raises(SSEContentTypeError):
                    async for _ in aiter_events(response, "responses"):
                        pass
            return events, chunks, sse

    events, chunks, sse = asyncio.run(run())
    assert events == expected_events(TEXT_RESPONSE, "responses")
    assert chunks == expected_events(TEXT_CHAT, "chat")
    assert sse == list(rapidsse.iter_sse([TEXT_CHAT.read_bytes()]))


# --- the openai SDK -------------------------------------------------------------------------


def test_openai_raw_responses_parsed_by_rapidsse(server):
    openai = pytest.importorskip("openai")
    from rapidsse.integrations.openai import aiter_events_from_openai, iter_events_from_openai

    messages = [{"role": "user", "content": "hi"}]
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
    with client.responses.with_streaming_response.create(model="m", input="hi", stream=True) as raw:
        events = list(iter_events_from_openai(raw))
    assert events == expected_events(TEXT_RESPONSE, "responses")
    with client.chat.completions.with_streaming_response.create(model="m", messages=messages, stream=True) as raw:
        chunks = list(iter_events_from_openai(raw))
    assert chunks == expected_events(TEXT_CHAT, "chat")
    legacy = client.chat.completions.with_raw_response.create(model="m", messages=messages, stream=True)
    assert list(iter_events_from_openai(legacy, "chat")) == chunks
    with pytest.raises(TypeError):
        list(iter_events_from_openai(object()))

    async def run():
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        async with aclient.responses.with_streaming_response.create(model="m", input="hi", stream=True) as raw:
            return [event async for event in aiter_events_from_openai(raw)]

    assert asyncio.run(asyncio.wait_for(run(), TIMEOUT)) == events


@pytest.mark.parametrize("path", RESPONSES, ids=lambda p: p.stem)
def test_to_openai_response_on_the_corpus(path):
    pytest.importorskip("openai")
    from openai.types.responses import Response
    from rapidsse.integrations.openai import to_openai_response

    ours = final_response(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pydantic serializer warnings on unvalidated models
        theirs = to_openai_response(ours)
    assert isinstance(theirs, Response)
    assert theirs.id == ours.id and theirs.status == ours.status and theirs.model == ours.model
    assert theirs.output_text == output_text(path)
    assert [item.type for item in theirs.output] == [item.type for item in ours.output]
    assert not any(isinstance(item, dict) for item in theirs.output)  # typed, nested models
    if ours.usage is not None:
        assert theirs.usage.output_tokens == ours.usage.output_tokens


@pytest.mark.parametrize("path", CHATS, ids=lambda p: p.stem)
def test_to_openai_chat_completion_on_the_corpus(path):
    pytest.importorskip("openai")
    from openai.types.chat import ChatCompletion
    from rapidsse.integrations.openai import to_openai_chat_completion

    ours = final_completion(path)
    theirs = to_openai_chat_completion(ours)
    assert isinstance(theirs, ChatCompletion) and theirs.id == ours.id
    for mine, sdk in zip(ours.choices, theirs.choices, strict=True):
        assert sdk.index == mine.index and sdk.finish_reason == mine.finish_reason
        assert sdk.message.content == mine.message.content
        assert [t.function.arguments for t in sdk.message.tool_calls or []] == [
            t.function.arguments for t in mine.message.tool_calls or []
        ]


def test_converters_strict_mode_and_type_checks():
    pydantic = pytest.importorskip("pydantic")
    pytest.importorskip("openai")
    from rapidsse.integrations.openai import to_openai_chat_completion, to_openai_response

    strict = to_openai_chat_completion(final_completion(TEXT_CHAT), strict=True)
    assert strict.choices[0].message.content == final_completion(TEXT_CHAT).choices[0].message.content
    bare = responses.Response(id="resp_1")  # no created_at, model, tools...: not a valid SDK Response
    with pytest.raises(pydantic.ValidationError):
        to_openai_response(bare, strict=True)
    assert to_openai_response(bare).id == "resp_1"  # the default falls back to unvalidated construction
    with pytest.raises(TypeError):
        to_openai_response(final_completion(TEXT_CHAT))
    with pytest.raises(TypeError):
        to_openai_chat_completion(bare)
