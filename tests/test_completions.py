"""Legacy Completions streams (``protocol="completions"``, :class:`rapidsse.CompletionsAccumulator`),
checked against the openai SDK (``client.completions.create(stream=True)`` over an httpx
MockTransport) on the synthetic fixtures and on generated streams, on the live backend; the Rust
and pure-Python cores side by side; hostile input. There is no real recording of this API in the
corpus: the fixtures in tests/fixtures/completions are synthetic (see their README)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import msgspec
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rapidsse
import rapidsse._wire
from rapidsse import CompletionsAccumulator, EventTooLarge, StreamError, completions, iter_events
from rapidsse.decoding import detect_protocol

from .conftest import assert_ways_in_agree, chunked, wires
from .test_hostile import SETTINGS, assert_only_sse_errors, chunking, mutated, random_stream
from .twins import assert_twins, assert_twins_feed, assert_twins_on_payloads, core_pair, needs_native

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "completions").glob("*.sse"))
SIZES = (1, 7, 512, 65536)


def payloads(data: bytes) -> list[bytes]:
    return [line[len(b"data: "):] for line in data.split(b"\n") if line.startswith(b"data: ")]


def sdk_chunks(data: bytes) -> list:
    """The chunks the openai SDK's ``completions.create(stream=True)`` hands out for ``data``."""

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/completions"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    client = openai.OpenAI(api_key="test", base_url="http://completions.test/v1",
                           http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    return list(client.completions.create(model="m", prompt="hi", stream=True))


def sdk_view(chunks: list) -> dict:
    """Per choice index, what going through the SDK's chunks gives: joined text and logprobs,
    the last finish reason; the last usage."""
    choices: dict[int, dict] = {}
    usage = None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            c = choices.setdefault(choice.index, {"text": "", "tokens": [], "token_logprobs": [], "top_logprobs": [],
                                                  "text_offset": [], "finish_reason": None})
            c["text"] += choice.text
            if choice.logprobs is not None:
                for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                    c[key].extend(getattr(choice.logprobs, key) or [])
            c["finish_reason"] = choice.finish_reason or c["finish_reason"]
    return {"choices": choices, "usage": usage.model_dump(exclude_none=True) if usage else None,
            "id": chunks[0].id if chunks else None, "model": chunks[0].model if chunks else None}


def our_view(completion: completions.Completion) -> dict:
    choices = {}
    for choice in completion.choices:
        lp = choice.logprobs or completions.Logprobs()
        choices[choice.index] = {"text": choice.text, "tokens": lp.tokens or [], "token_logprobs": lp.token_logprobs or [],
                                 "top_logprobs": lp.top_logprobs or [], "text_offset": lp.text_offset or [],
                                 "finish_reason": choice.finish_reason}
    usage = msgspec.to_builtins(completion.usage) if completion.usage else None
    return {"choices": choices, "usage": usage, "id": completion.id, "model": completion.model}


def test_the_fixtures_are_there_and_labelled_synthetic():
    assert len(FIXTURES) == 2
    for path in FIXTURES:
        assert path.read_bytes().startswith(b": SYNTHETIC recording, not real traffic")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_typed_chunks_at_every_chunking(path):
    data = path.read_bytes()
    raw = [p for p in payloads(data) if p != b"[DONE]"]
    expected = [rapidsse._wire.decode(p, completions.Completion) for p in raw]
    for size in SIZES:
        decoder = rapidsse.EventDecoder("completions")
        got = [e for chunk in chunked(data, size) for e in decoder.feed(chunk)]
        assert got == expected and decoder.done, size
        assert wires(got) == wires(expected), size
        assert list(iter_events(chunked(data + b"data: junk\n\n", size), protocol="completions")) == expected
    for chunk in expected:
        assert list(iter_events([rapidsse.encode_sse(chunk)], protocol="completions")) == [chunk]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_accumulated_completion_agrees_with_the_sdk(path):
    data = path.read_bytes()
    expected = sdk_view(sdk_chunks(data))
    acc = CompletionsAccumulator()
    acc.feed(data)
    completion = acc.completion
    assert our_view(completion) == expected
    assert completion.object == "text_completion"
    assert acc.warnings == [] and acc.unknown_events == 0
    assert [c.index for c in completion.choices] == sorted(expected["choices"])


def test_the_vllm_fixture_in_detail():
    acc = CompletionsAccumulator()
    acc.feed(FIXTURES[-1].read_bytes() if "vllm" in FIXTURES[-1].name else FIXTURES[0].read_bytes())
    c = acc.completion
    first, second = c.choices
    assert first.text.startswith(" Paris is the capital of France.") and "café" in first.text
    assert (first.finish_reason, second.finish_reason, second.stop_reason) == ("length", "stop", "\n")
    lp = first.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 22
    assert "".join(lp.tokens) == first.text
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(22)]
    assert c.usage.completion_tokens == 38 and c.usage.total_tokens == 47


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_feed_add_and_add_json_agree(path):
    data = path.read_bytes()
    by_json = assert_ways_in_agree("completions", CompletionsAccumulator, "completion", data, payloads(data), SIZES, 64)
    assert by_json.events == len(payloads(data)) - 1  # all but the [DONE]


def test_errors_and_other_objects():
    head = b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":"Hi"}]}\n\n'
    error = b'data: {"error":{"message":"out of capacity","type":"server_error","code":503}}\n\n'
    chat = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"text":"no"}]}\n\n'
    events = list(iter_events([head + error + chat], protocol="completions"))
    assert events[1].error.message == "out of capacity"
    with pytest.raises(StreamError) as info:
        list(iter_events([head + error], protocol="completions", raise_on_error_event=True))
    assert info.value.events == events[:1]
    acc = CompletionsAccumulator()
    acc.feed(head + error + chat + b'data: {"object":7}\n\n')
    assert acc.warnings == ["error event: out of capacity", "completions: malformed chunk ignored"]
    assert (acc.events, acc.unknown_events) == (4, 3)
    assert acc.completion.choices[0].text == "Hi"


def test_detection_and_cli(capsys):
    from rapidsse import cli

    for path in FIXTURES:
        assert detect_protocol(path.read_bytes()) == "completions"
        assert cli.main(["parse", str(path), "--json"]) == 0
        acc = CompletionsAccumulator()
        acc.feed(path.read_bytes())
        assert json.loads(capsys.readouterr().out) == json.loads(rapidsse.encode(acc.completion))
        assert cli.main(["parse", str(path)]) == 0
        out = capsys.readouterr().out
        assert "text completion" in out and "completions stream" in out
    # no `object`: told from chat by `text` without `delta`
    assert detect_protocol(b'data: {"choices":[{"index":0,"text":"a"}]}\n\n') == "completions"
    assert detect_protocol(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n') == "chat"


def test_caps():
    text = lambda t: '{"choices":[{"index":0,"text":"' + t + '"}]}'  # noqa: E731
    acc = CompletionsAccumulator(max_event_size=80)
    acc.add_json(text("a" * 40))
    with pytest.raises(EventTooLarge):
        acc.add_json(text("b" * 50))
    acc.add_json(text("c" * 40))
    assert acc.completion.choices[0].text == "a" * 40 + "c" * 40
    with pytest.raises(EventTooLarge):
        CompletionsAccumulator(max_event_size=50).feed(b"data: " + b"x" * 100 + b"\n\n")
    with pytest.raises(EventTooLarge):
        list(iter_events([b"data: " + b"x" * 100 + b"\n\n"], protocol="completions", max_event_size=50))


# --- generated streams against the SDK ------------------------------------------------------------

token = st.sampled_from([" a", "b", "é", "😀", "\n", '"', ""])


@st.composite
def choice_chunk(draw, index: int, with_logprobs: bool) -> dict:
    tokens = draw(st.lists(token, min_size=0, max_size=3))
    choice: dict = {"index": index, "text": "".join(tokens),
                    "finish_reason": draw(st.sampled_from([None, None, "stop", "length"]))}
    if with_logprobs:
        choice["logprobs"] = {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens),
                              "top_logprobs": [{t: -0.5} for t in tokens], "text_offset": list(range(len(tokens)))}
    else:
        choice["logprobs"] = None
    return choice


@st.composite
def completion_stream(draw) -> list[dict]:
    n = draw(st.integers(1, 3))
    with_logprobs = draw(st.booleans())
    chunks = []
    for _ in range(draw(st.integers(1, 10))):
        indices = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        chunks.append({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
                       "choices": [draw(choice_chunk(i, with_logprobs)) for i in indices]})
    if draw(st.booleans()):
        chunks.append({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}})
    return chunks


def sse(chunks: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@settings(max_examples=60, deadline=None)
@given(completion_stream())
def test_generated_streams_agree_with_the_sdk(chunks):
    data = sse(chunks)
    acc = CompletionsAccumulator()
    acc.feed(data)
    ours, theirs = our_view(acc.completion), sdk_view(sdk_chunks(data))
    # choices in order of first appearance (ours) vs by index (the view's dict): compare as dicts
    assert ours == theirs


# --- Rust and pure-Python cores side by side ----------------------------------------------------

@needs_native
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_twin_cores_on_the_fixtures(path):
    assert_twins_feed("CompletionsCore", path.read_bytes(), SIZES)


ODD = [
    b'{"choices":5}', b'{"choices":[5,{"text":"a"}]}', b'{"choices":null,"usage":{"total_tokens":1e400}}',
    b'{"choices":[{"text":5,"index":-1},{"text":"x","index":1.0},{"text":"y","index":true}]}',
    b'{"choices":[{"index":0,"logprobs":5},{"index":0,"logprobs":{"tokens":"x","token_logprobs":[],"extra":1}}]}',
    b'{"choices":[{"index":0,"logprobs":{"tokens":["a"],"top_logprobs":[null],"text_offset":[0]}}]}',
    b'{"choices":[{"index":0,"logprobs":{"tokens":["b"],"token_logprobs":[null],"top_logprobs":[{"b":-1}]}}]}',
    b'{"choices":[{"index":0,"finish_reason":""},{"index":0,"finish_reason":5,"stop_reason":7}]}',
    b'{"choices":[{"index":0,"text":"\\ud800"}]}', b'{"choices":[{"index":0,"text":"a","text":"b"}]}',
    b'{"object":null,"choices":[{"text":"n"}]}', b'{"object":"","choices":[]}', b'{"object":5}',
    b'{"object":"\\ud800"}', b'{"usage":1,"usage":2}', b'{"error":5}', b'{"error":{"message":7}}',
    b'{"system_fingerprint":"fp","id":"\\ud800"}', b"[DONE]", b" [DONE] ", b"[]", b'"x"', b"{", b"\xff",
    b'{"choices":[{"index":0,"text":"' + "é".encode() * 3 + b'"}]}',
    b'{"choices":[' + b"[" * 130 + b"]" * 130 + b"]}",
]


@needs_native
def test_twin_cores_on_odd_payloads():
    assert_twins_on_payloads("CompletionsCore", ODD, b'{"choices":[{"text":"ab"}]}', cap=4)


@needs_native
@settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "300")), deadline=None)
@given(completion_stream(), st.sampled_from([None, 1 << 20]), st.data())
def test_twin_cores_on_generated_streams(chunks, cap, data):
    rust, py = core_pair("CompletionsCore", max_event_size=cap)
    stream = sse(chunks)
    for chunk in data.draw(chunking(stream)):
        assert py.feed(chunk) == rust.feed(chunk)
    assert_twins(rust, py)
    # a text cap smaller than the texts: the same refusals
    rust, py = core_pair("CompletionsCore", max_event_size=6)
    for payload in payloads(stream):
        assert py.add_json(payload) == rust.add_json(payload)
    assert_twins(rust, py)


# --- hostile input (the live backend: only SSEError subclasses) ----------------------------------

_EVENTS = [e + b"\n\n" for path in FIXTURES for e in path.read_bytes().split(b"\n\n") if e.startswith(b"data")]


@st.composite
def hostile_stream(draw) -> bytes:
    start = draw(st.integers(0, len(_EVENTS) - 1))
    return draw(mutated(b"".join(_EVENTS[start : start + draw(st.integers(1, 8))])))


@settings(max_examples=400, **SETTINGS)
@given(st.data(), st.sampled_from(["raise", "skip", "keep"]), st.sampled_from([None, 16 << 20, 300]), st.booleans())
def test_hostile_streams_raise_only_sse_errors(data, on_error, cap, raise_on_error_event):
    stream = data.draw(st.one_of(hostile_stream(), hostile_stream(), random_stream()))
    chunks = data.draw(chunking(stream))
    assert_only_sse_errors("completions", CompletionsAccumulator, "completion", stream, chunks, on_error, cap, raise_on_error_event)
