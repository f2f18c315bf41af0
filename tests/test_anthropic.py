"""Anthropic Messages streams: typed events, the accumulator against the anthropic SDK's own
`messages.stream(...).get_final_message()` on every recording, the two backends against each
other, and hostile input."""

from __future__ import annotations

import functools

import asyncio
import json
import os
import random
import warnings

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rapidsse
from rapidsse import anthropic
from rapidsse._schema import UnknownVariant
from rapidsse._wire import decode as decode_lenient  # with the wire info, as decoded events have

from . import twins
from .conftest import chunked, corpus_files, native, sse_transport, wires
from .twins import assert_twins, assert_twins_feed, needs_native
from .test_accumulate_twin import odd_payloads

RECORDINGS = corpus_files("anthropic")
# Block types only the beta client knows: the GA client's final message differs on these.
BETA_ONLY = {"fallback", "compaction", "advisor_tool_result"}


def payloads(data: bytes) -> list[bytes]:
    return [e.data.encode() for e in rapidsse.SSEDecoder(None).feed(data)]


def tapped(data: bytes, size: int = 512, **kw) -> rapidsse.AnthropicAccumulator:
    acc = rapidsse.AnthropicAccumulator(**kw)
    for chunk in chunked(data, size):
        acc.feed(chunk)
    acc.close()
    return acc


def raw_snapshot(acc) -> dict:
    return json.loads(acc._core.snapshot_json())


# ---------------------------------------------------------------------------------------------
# The SDK's final message


def sdk_final_message(data: bytes, beta: bool):
    anthropic_sdk = pytest.importorskip("anthropic")
    httpx = sdk_httpx(anthropic_sdk)

    def handler(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    client = anthropic_sdk.Anthropic(api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    messages = client.beta.messages if beta else client.messages
    with messages.stream(model="claude", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as stream:
        for _ in stream:
            pass
        return stream.get_final_message()


def mismatches(sdk, ours, path="$") -> list[str]:
    """Where ``ours`` differs from ``sdk``: every key the SDK has must be in ours with an equal
    value (same JSON type); ours may hold more (fields the SDK's models drop)."""
    if isinstance(sdk, dict):
        if not isinstance(ours, dict):
            return [f"{path}: {sdk!r} != {ours!r}"]
        out = []
        for key, value in sdk.items():
            if key not in ours:
                out.append(f"{path}.{key} missing")
            else:
                out += mismatches(value, ours[key], f"{path}.{key}")
        return out
    if isinstance(sdk, list):
        if not isinstance(ours, list) or len(sdk) != len(ours):
            return [f"{path}: {sdk!r} != {ours!r}"]
        return [m for i, (a, b) in enumerate(zip(sdk, ours)) for m in mismatches(a, b, f"{path}[{i}]")]
    if type(sdk) is not type(ours) or sdk != ours:
        return [f"{path}: {sdk!r} != {ours!r}"]
    return []


def plain(value):
    """A typed value as JSON-like data with every field (defaults included), an unknown
    variant as its original object."""
    if isinstance(value, UnknownVariant):
        return value.data
    if isinstance(value, msgspec.Struct):
        out = {}
        tag = getattr(value, "type", None)
        if isinstance(tag, str):
            out["type"] = tag
        names = getattr(type(value), "__struct_encode_fields__", value.__struct_fields__)
        for name, attr in zip(names, value.__struct_fields__):
            out[name] = plain(getattr(value, attr))
        return out
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def known_only(sdk, ours):
    """The SDK's value restricted to the keys the typed value has (the schemas ignore unknown
    fields; the raw snapshot keeps them and is compared whole)."""
    if isinstance(sdk, dict) and isinstance(ours, dict):
        return {k: known_only(v, ours[k]) for k, v in sdk.items() if k in ours}
    if isinstance(sdk, list) and isinstance(ours, list) and len(sdk) == len(ours):
        return [known_only(a, b) for a, b in zip(sdk, ours)]
    return sdk


def block_types(data: bytes) -> set[str]:
    out = set()
    for p in payloads(data):
        obj = json.loads(p)
        if obj.get("type") == "content_block_start":
            out.add(obj["content_block"]["type"])
    return out


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "ga"])
def test_message_equals_the_sdks_final_message(path, beta):
    data = path.read_bytes()
    if not beta and block_types(data) & BETA_ONLY:
        pytest.skip("beta blocks: the beta client is the reference")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic's serializer warnings on the SDK's own unions
        sdk = sdk_final_message(data, beta).to_dict()
    acc = tapped(data)
    assert mismatches(sdk, raw_snapshot(acc)) == []
    typed = plain(acc.message)
    assert mismatches(known_only(sdk, typed), typed) == []
    assert acc.warnings == []


def test_fields_the_sdk_drops_are_kept():
    data = next(p for p in RECORDINGS if "advisor" in p.name).read_bytes()
    snap = raw_snapshot(tapped(data))
    assert snap["usage"]["iterations"][1]["model"] == "claude-opus-4-8"
    assert snap["content"][3]["content"]["text"].startswith("4.")
    message = tapped(data).message
    assert isinstance(message.content[3], anthropic.UnknownContentBlock)
    assert message.content[3].type == "advisor_tool_result"
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 145


def test_stream_cut_mid_json_gives_the_partial_parse():
    data = next(p for p in RECORDINGS if "incomplete_partial_json" in p.name).read_bytes()
    message = tapped(data).message
    tool = message.content[1]
    assert isinstance(tool, anthropic.ToolUseBlock)
    assert tool.input == {
        "filename": "taxes.txt",
        "lines_of_text": ["# COMPREHENSIVE TAX GUIDE FOR INDIVIDUALS WITH MULTIPLE W-2s", "", "## INTRODUCTION", ""],
    }
    assert message.stop_reason == "max_tokens"


# ---------------------------------------------------------------------------------------------
# Typed events


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_typed_events_at_every_chunking(path):
    data = path.read_bytes()
    expected = [decode_lenient(p, anthropic.Event) for p in payloads(data)]
    for size in (1, 7, 512, len(data)):
        if size == 1 and len(data) > 20_000:
            continue
        events = list(rapidsse.iter_events(chunked(data, size), protocol="anthropic"))
        assert events == expected and wires(events) == wires(expected), size


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_add_and_add_json_build_what_the_tap_builds(path):
    data = path.read_bytes()
    want = raw_snapshot(tapped(data, 7))
    by_event = rapidsse.AnthropicAccumulator()
    for event in rapidsse.iter_events([data], protocol="anthropic"):
        by_event.add(event)
    by_json = rapidsse.AnthropicAccumulator()
    for payload in payloads(data):
        by_json.add_json(payload)
    assert raw_snapshot(by_json) == want
    # (A typed event is added by its encoding, which leaves out fields at their defaults: the
    # typed message is the same.)
    for acc in (by_event, by_json):
        assert acc.message == tapped(data).message
        assert acc.warnings == []


def test_aiter_events_and_decoder():
    data = RECORDINGS[0].read_bytes()

    async def source():
        for chunk in chunked(data, 64):
            yield chunk

    async def collect():
        return [e async for e in rapidsse.aiter_events(source(), protocol="anthropic")]

    events = asyncio.run(collect())
    assert events == list(rapidsse.iter_events([data], protocol="anthropic"))
    assert [type(e) for e in events][:2] == [anthropic.MessageStart, anthropic.ContentBlockStart]
    decoder = rapidsse.EventDecoder("anthropic")
    assert decoder.feed(data) == events


ERROR_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","content":[]}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
)


def test_error_events_are_typed_and_can_raise():
    events = list(rapidsse.iter_events([ERROR_STREAM], protocol="anthropic"))
    assert isinstance(events[1], anthropic.Ping)
    assert isinstance(events[2], anthropic.Error) and events[2].error.type == "overloaded_error"
    with pytest.raises(rapidsse.StreamError) as info:
        list(rapidsse.iter_events([ERROR_STREAM], protocol="anthropic", raise_on_error_event=True))
    assert info.value.events[0].type == "message_start"
    acc = tapped(ERROR_STREAM)
    assert acc.warnings == ["error event: Overloaded"]
    assert acc.unknown_events == 2  # the ping and the error


def test_unknown_events_blocks_deltas_and_citations_pass_through():
    stream = (
        b'data: {"type":"message_start","message":{"id":"m","content":[]}}\n\n'
        b'data: {"type":"hologram","x":1}\n\n'
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"hologram_block","z":2}}\n\n'
        b'data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}\n\n'
        b'data: {"type":"content_block_delta","index":1,"delta":{"type":"sparkle_delta","s":1}}\n\n'
        b'data: {"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"new_location","q":1}}}\n\n'
        b'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"hi"}}\n\n'
    )
    events = list(rapidsse.iter_events([stream], protocol="anthropic"))
    assert isinstance(events[1], rapidsse.UnknownEvent) and events[1].type == "hologram"
    assert isinstance(events[2].content_block, anthropic.UnknownContentBlock)
    assert events[2].content_block.data == {"type": "hologram_block", "z": 2}
    assert isinstance(events[4].delta, anthropic.UnknownDelta) and events[4].delta.type == "sparkle_delta"
    assert isinstance(events[5].delta.citation, anthropic.UnknownCitation)
    for acc in (tapped(stream, 5), rapidsse.AnthropicAccumulator()):
        if acc.events == 0:
            for event in events:
                acc.add(event)
        snap = raw_snapshot(acc)
        assert snap["content"] == [
            {"type": "hologram_block", "z": 2},
            {"type": "text", "text": "hi", "citations": [{"type": "new_location", "q": 1}]},
        ]
        assert acc.unknown_events == 2  # the unknown event and the unknown delta


def test_detect_protocol():
    from rapidsse.decoding import detect_protocol

    for path in RECORDINGS:
        assert detect_protocol(path.read_bytes()[:4096]) == "anthropic", path.name
    assert detect_protocol(b'data: {"type":"content_block_delta","index":0}\n\n') == "anthropic"
    assert detect_protocol(b'data: {"type":"ping"}\n\n') == "responses"  # nothing Anthropic-only yet


def test_events_before_message_start_and_bad_deltas_are_warnings():
    acc = rapidsse.AnthropicAccumulator()
    acc.add_json(b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"a"}}')
    acc.add_json(b'{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}')
    acc.add_json(b'{"type":"content_block_delta","index":0,"delta":[1]}')
    acc.add_json(b'{"type":"message_start","message":{"id":"m1","model":"c","content":[]}}')
    assert acc.warnings == [
        "content_block_start before message_start",
        "content_block_delta: no content block at index 3",
        "content_block_delta: malformed event ignored",
    ]
    message = acc.message
    assert message.id == "m1" and message.content[0].text == "a"


# ---------------------------------------------------------------------------------------------
# Limits and hostile input


def test_text_cap_refuses_a_delta_and_keeps_going():
    start = b'data: {"type":"message_start","message":{"id":"m","content":[]}}\n\n'
    block = b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    delta = b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"%s"}}\n\n'
    acc = rapidsse.AnthropicAccumulator(max_event_size=150)
    acc.feed(start + block + delta % (b"a" * 60) + delta % (b"b" * 60))
    with pytest.raises(rapidsse.EventTooLarge):
        acc.feed(delta % (b"x" * 60))
    acc.feed(delta % b"d")
    assert acc.message.content[0].text == "a" * 60 + "b" * 60 + "d"
    with pytest.raises(rapidsse.EventTooLarge):
        rapidsse.AnthropicAccumulator(max_event_size=10).add_json(b'{"type":"ping","padding":"xxxxxxxxxxxxx"}')
    with pytest.raises(rapidsse.EventTooLarge):
        list(rapidsse.iter_events([b"data: " + b"x" * 100 + b"\n\n"], protocol="anthropic", max_event_size=50))


def hostile_streams(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    corpus = [p.read_bytes()[:6000] for p in RECORDINGS]
    out = []
    for _ in range(n):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(data))
            op = rng.randint(0, 3)
            if op == 0:
                data[at] = rng.randrange(256)
            elif op == 1:
                del data[at : at + rng.randint(1, 20)]
            elif op == 2:
                data[at:at] = rng.choice([b"{", b"}", b"\n\n", b'"', b"\\u", b"\xff", b"[", b"\r", b"null", b"-1"])
            else:
                data[at:at] = data[rng.randrange(len(data)) :][: rng.randint(1, 50)]
        out.append(bytes(data))
    return out


def test_hostile_input_raises_only_sse_errors():
    for data in hostile_streams(16, 150):
        for on_error in ("raise", "keep"):
            try:
                for _ in rapidsse.iter_events(chunked(data, 97), protocol="anthropic", on_error=on_error):
                    pass
            except rapidsse.SSEError:
                pass
            acc = rapidsse.AnthropicAccumulator(on_error=on_error, max_event_size=4096)
            for chunk in chunked(data, 97):
                try:
                    acc.feed(chunk)
                except rapidsse.SSEError:
                    pass
            try:
                acc.message
            except rapidsse.SSEError:
                pass


# ---------------------------------------------------------------------------------------------
# The two backends, side by side

def core_pair(**kw):
    return twins.core_pair("AnthropicCore", **kw)


@needs_native
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_backends_agree_on_the_corpus(path):
    data = path.read_bytes()
    assert_twins_feed("AnthropicCore", data, (7, 512, 65536))
    rust, py = core_pair()
    for n, payload in enumerate(payloads(data)):
        assert py.add_json(payload) == rust.add_json(payload)
        if n % 8 == 0:
            assert_twins(rust, py, n)


@needs_native
def test_backends_agree_on_hostile_streams():
    for data in hostile_streams(61, 120):
        rust, py = core_pair(max_event_size=2048)
        for chunk in chunked(data, 101):
            results = []
            for core in (rust, py):
                try:
                    results.append(("ok", core.feed(chunk)))
                except rapidsse.SSEError as exc:
                    results.append((type(exc).__name__, str(exc)))
            assert results[0] == results[1]
        assert_twins(rust, py)


texts = st.text(alphabet=st.sampled_from("ab \"\\\n\u00e9\U0001f600{}[]:,0-"), max_size=8)
indices = st.one_of(st.integers(0, 3), st.just(-1), st.just("0"), st.none(), st.just(2**64))
delta_types = st.sampled_from(
    ["text_delta", "thinking_delta", "signature_delta", "input_json_delta", "citations_delta", "compaction_delta", "x", "__unknown__"]
)
block_types_st = st.sampled_from(
    ["text", "thinking", "tool_use", "server_tool_use", "mcp_tool_use", "compaction", "fallback", "web_search_tool_result", "__unknown__"]
)
anything = st.one_of(st.none(), texts, st.integers(-2, 2), st.just({}), st.just([]), st.just({"type": "char_location"}))


@st.composite
def anthropic_event(draw) -> dict:
    kind = draw(st.sampled_from(
        ["message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
         "content_block_stop", "message_delta", "message_stop", "ping", "error", "other"]
    ))
    ev: dict = {"type": kind}
    if draw(st.booleans()):
        ev["index"] = draw(indices)
    if kind == "message_start":
        ev["message"] = draw(st.one_of(st.just({"id": "m", "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}}),
                                       st.just({"id": "m", "content": [{"type": "text", "text": "pre"}]}), anything))
    elif kind == "content_block_start":
        block = {"type": draw(block_types_st)}
        block.update(draw(st.fixed_dictionaries({}, optional={"text": anything, "input": anything, "thinking": texts,
                                                               "to": st.just({"model": "b"}), "data": st.just({"type": "q"}),
                                                               "citations": anything})))
        ev["content_block"] = draw(st.one_of(st.just(block), anything))
    elif kind == "content_block_delta":
        delta = {"type": draw(delta_types)}
        delta.update(draw(st.fixed_dictionaries({}, optional={
            "text": st.one_of(texts, anything), "thinking": texts, "signature": texts, "partial_json": texts,
            "citation": anything, "content": anything, "encrypted_content": anything,
            "data": st.just({"type": "text_delta", "text": "w"}), "original_type": st.just("y")})))
        ev["delta"] = draw(st.one_of(st.just(delta), st.just(delta), anything))
    elif kind == "message_delta":
        ev.update(draw(st.fixed_dictionaries({}, optional={
            "delta": st.one_of(st.just({"stop_reason": "end_turn", "x": 1, "stop_details": None}), anything),
            "usage": st.one_of(st.just({"output_tokens": 4, "input_tokens": None, "new": 1}), anything),
            "context_management": anything, "input_transformations": anything})))
    elif kind == "error":
        ev["error"] = draw(st.one_of(st.just({"message": "boom"}), anything))
    return ev


@needs_native
@settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_backends_agree_on_generated_events(data):
    events = data.draw(st.lists(st.one_of(anthropic_event().map(lambda e: json.dumps(e).encode()),
                                          anthropic_event().map(lambda e: json.dumps(e).encode()),
                                          odd_payloads), max_size=20))
    rust, py = core_pair(max_event_size=data.draw(st.sampled_from([None, 64, 1 << 20])))
    for n, payload in enumerate(events):
        assert py.add_json(payload) == rust.add_json(payload), (n, payload)
        assert_twins(rust, py, (n, payload))


# ---------------------------------------------------------------------------------------------
# The command line and the SDK integration


def test_parse_summarises_an_anthropic_stream():
    from .test_cli import run

    path = next(p for p in RECORDINGS if "tool_use_response" in p.name)
    proc = run("parse", path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "message msg_019Q1hrJbZG26Fb9BQhrkHEr  model claude-sonnet-4-20250514  stop: tool_use"
    assert lines[1] == "  text: I'll check the current weather in Paris for you."
    assert lines[2].startswith('  tool call: get_weather({"location": "Paris')
    assert lines[-1].startswith("anthropic stream: ")
    proc = run("parse", "--json", path)
    assert json.loads(proc.stdout)["content"][1]["input"] == tapped(path.read_bytes()).message.content[1].input


@pytest.mark.parametrize("path", RECORDINGS[:3], ids=lambda p: p.name)
def test_httpx_integration_reads_a_messages_url(path):
    """``connect_sse`` on a ``/v1/messages`` URL reads Anthropic events without being told, and its
    stream accumulates the message (sync and async)."""
    import asyncio

    import httpx

    from rapidsse.integrations import protocol_for_path
    from rapidsse.integrations.httpx import aconnect_sse, connect_sse

    data = path.read_bytes()
    transport = sse_transport(data)
    url = "http://anthropic.test/v1/messages"
    with httpx.Client(transport=transport) as client, connect_sse(client, "POST", url, json={}) as source:
        stream = source.stream()
        events = list(stream)
    assert events == list(rapidsse.iter_events([data], protocol="anthropic"))
    assert stream.message == tapped(data).message

    async def read_async():
        async with httpx.AsyncClient(transport=transport) as client, aconnect_sse(client, "POST", url) as source:
            stream = source.astream()
            return [event async for event in stream], stream.message

    assert asyncio.run(read_async()) == (events, stream.message)
    assert protocol_for_path("/v1/messages") == "anthropic" and protocol_for_path("/v1/messages/") == "anthropic"


def sdk_client(data: bytes, status: int = 200, content_type: str = "text/event-stream"):
    anthropic_sdk = pytest.importorskip("anthropic")
    httpx = sdk_httpx(anthropic_sdk)

    def handler(request):
        return httpx.Response(status, headers={"content-type": content_type}, content=data)

    return anthropic_sdk.Anthropic(
        api_key="test", max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(handler))
    )


def sdk_httpx(anthropic_sdk):
    """The HTTP client package the SDK is built on (httpx, or httpx2 in its newer releases)."""
    source = open(anthropic_sdk._base_client.__file__, encoding="utf-8").read()
    return pytest.importorskip("httpx2" if "import httpx2" in source else "httpx")


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_iter_events_from_anthropic_and_to_anthropic_message(path):
    from rapidsse.integrations.anthropic import iter_events_from_anthropic, to_anthropic_message

    data = path.read_bytes()
    client = sdk_client(data)
    beta = bool(block_types(data) & BETA_ONLY)
    messages = client.beta.messages if beta else client.messages
    body = dict(model="claude", max_tokens=16, messages=[{"role": "user", "content": "hi"}], stream=True)
    with messages.with_streaming_response.create(**body) as raw:
        events = list(iter_events_from_anthropic(raw))
    assert events == list(rapidsse.iter_events([data], protocol="anthropic"))
    acc = rapidsse.AnthropicAccumulator()
    for event in events:
        acc.add(event)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = to_anthropic_message(acc.message, beta=beta).to_dict()
        sdk = sdk_final_message(data, beta).to_dict()
    assert mismatches(known_only(sdk, converted), converted) == []


def test_iter_events_from_anthropic_refuses_an_error_reply():
    from rapidsse.integrations import SSEContentTypeError
    from rapidsse.integrations.anthropic import iter_events_from_anthropic

    client = sdk_client(b'{"type":"error"}', status=200, content_type="application/json")
    with client.messages.with_streaming_response.create(
        model="claude", max_tokens=16, messages=[{"role": "user", "content": "hi"}], stream=True
    ) as raw:
        with pytest.raises(SSEContentTypeError):
            list(iter_events_from_anthropic(raw))
    with pytest.raises(TypeError):
        iter_events_from_anthropic(object())


# ---------------------------------------------------------------------------------------------
# The Struct builder (Rust backend) on the nested tagged unions of these schemas


def native_check(batch: list[bytes]) -> int:
    """Every payload the builder builds equals msgspec's (same classes, same field types);
    where msgspec refuses one, the builder declines it. Returns how many were built."""
    from rapidsse import _native

    from .test_native import deep_same

    built_schema = _native.native_schema(native, anthropic.Event, tagged_unions=True)
    decode = functools.partial(decode_lenient, type=anthropic.Event)
    built = 0
    for payload, ours in zip(batch, built_schema.decode_each(batch)):
        try:
            theirs = decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            assert ours is None, payload
            continue
        if ours is not None:
            built += 1
            deep_same(ours, theirs)
            assert msgspec.json.encode(ours) == msgspec.json.encode(theirs)
    return built


needs_builder = pytest.mark.skipif(
    rapidsse.BACKEND != "rust" or native is None, reason="the Struct builder is the Rust backend's"
)


@needs_builder
def test_builder_builds_the_corpus_events_as_msgspec_does():
    batch = [p for path in RECORDINGS for p in payloads(path.read_bytes())]
    built = native_check(batch)
    deltas = sum(b'"content_block_delta"' in p for p in batch)
    assert built >= deltas, (built, deltas, len(batch))


@needs_builder
def test_builder_declines_what_it_must():
    batch = [
        b'{"type":"content_block_delta","index":0,"delta":{"text":"x","type":"text_delta"}}',  # tag not first
        b'{"type":"content_block_delta","index":0,"delta":{"type":"sparkle_delta"}}',  # unknown tag
        b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","type":"text_delta"}}',
        b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}',
        b'{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","input":{"a":1}}}',  # Any
        b'{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location","start_char_index":1.5}}}',
    ]
    from rapidsse import _native

    built = _native.native_schema(native, anthropic.Event, tagged_unions=True).decode_each(batch)
    assert built == [None] * len(batch)
    native_check(batch)


@needs_builder
def test_builder_agrees_with_msgspec_on_random_mutations():
    from .test_native import mutations

    rng = random.Random(16)
    corpus = [p for path in RECORDINGS for p in payloads(path.read_bytes()) if len(p) < 3000]
    native_check([mutations(rng.choice(corpus), rng) for _ in range(20_000)])


def _delta_payload(index: int, kind: str, key: str, value: str, extra: str = "") -> bytes:
    return (
        '{"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":%s%s}}' % (index, kind, key, value, extra)
    ).encode()


@needs_builder
def test_runs_of_deltas_are_built_through_a_shape_into_the_nested_union_as_msgspec_builds_them():
    """A run of deltas of one type is built through a shape that reaches into the delta (its tag
    fixed, its text a hole); where the tag changes, the shape is learned again from that run.
    Every event equals msgspec's, with the wire info of the Python pass."""
    from rapidsse import _native, _wire

    from .test_native import deep_same

    texts = ['" word"', '"line\\nnext \\"q\\" \\u00e9\\ud83d\\ude00"', '"\u00e9t\u00e9"', '""', '"' + "y" * 300 + '"']
    batch = []
    for index, kind, key in ((0, "thinking_delta", "thinking"), (3, "text_delta", "text"), (4, "input_json_delta", "partial_json")):
        batch += [_delta_payload(index, kind, key, texts[i % len(texts)]) for i in range(20)]
    # The tag changes at one index, each way, and back (text, thinking at 3: the class differs).
    batch += [_delta_payload(3, "text_delta", "text", '"a"'), _delta_payload(3, "thinking_delta", "thinking", '"b"')] * 3
    # Fixed bytes but another class: the same text after the tag.
    batch += [_delta_payload(5, "text_delta", "text", '"a"')] * 3 + [_delta_payload(5, "thinking_delta", "thinking", '"a"')]
    # Unknown members in the delta, fixed and varying; a member at its default; null; another index.
    batch += [_delta_payload(6, "text_delta", "text", '"t%d"' % i, ',"x":1') for i in range(4)]
    batch += [_delta_payload(6, "text_delta", "text", '"t%d"' % i, ',"x":%d' % i) for i in range(4)]
    batch += [_delta_payload(6, "text_delta", "text", '"t"', ',"x":1,"x":2')]
    batch += [b'{"type":"content_block_delta","index":6,"delta":null}', _delta_payload(7, "text_delta", "text", '"z"')]
    batch += [_delta_payload(0, "text_delta", "text", '"t%d"' % i) for i in range(4)]
    built_schema = _native.native_schema(native, anthropic.Event, tagged_unions=True)
    ours, shaped = built_schema.decode_counting(batch)
    # Each run of like deltas after its first two (and the runs of text at index 0 and 6) through
    # a shape, at least.
    assert shaped >= 3 * 18 + 2 + 2, shaped
    for payload, built in zip(batch, ours):
        theirs = decode_lenient(payload, anthropic.Event)
        if built is None:
            assert payload.endswith(b'"x":2}}'), payload  # a repeated unknown key is left to msgspec
            continue
        _wire.compute(theirs, payload)
        deep_same(built, theirs)
        assert rapidsse.encode(built) == rapidsse.encode(theirs)
    # The same stream through the decoder, in chunks that cut events anywhere.
    stream = b"".join(b"event: content_block_delta\ndata: " + p + b"\n\n" for p in batch)
    for size in (1, 7, 100, 512):
        events = list(rapidsse.iter_events(chunked(stream, size), protocol="anthropic"))
        assert [rapidsse.encode(e) for e in events] == [rapidsse.encode(e) for e in ours_or_theirs(batch, ours)]


def ours_or_theirs(batch: list[bytes], ours: list[Any]) -> list[Any]:
    return [o if o is not None else decode_lenient(p, anthropic.Event) for p, o in zip(batch, ours)]


def test_stream_anthropic_hands_out_events_and_the_message():
    data = next(p for p in RECORDINGS if "thinking_part" in p.name).read_bytes()
    stream = rapidsse.stream_anthropic(chunked(data, 333))
    events = list(stream)
    assert events == list(rapidsse.iter_events([data], protocol="anthropic"))
    assert stream.message == tapped(data).message and stream.warnings == []

    async def source():
        for chunk in chunked(data, 100):
            yield chunk

    async def collect():
        astream = rapidsse.astream_anthropic(source())
        return [e async for e in astream], astream.message

    assert asyncio.run(collect()) == (events, stream.message)
    with pytest.raises(rapidsse.StreamError):
        list(rapidsse.stream_anthropic([ERROR_STREAM], raise_on_error_event=True))


# ---------------------------------------------------------------------------------------------
# A mixed stream: thinking with signatures, text over cited blocks, tool input

MIXED = None


def mixed_stream() -> bytes:
    global MIXED
    if MIXED is None:
        from rapidsse import bench

        MIXED = bench.anthropic_mixed_stream(60, 300, 40)
    return MIXED


def test_a_mixed_stream_equals_the_sdks_final_message():
    data = mixed_stream()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sdk = sdk_final_message(data, beta=False).to_dict()
    acc = tapped(data)
    assert mismatches(sdk, raw_snapshot(acc)) == []
    assert [b["type"] for b in sdk["content"]].count("text") == 6
    assert acc.warnings == [] and acc.events == data.count(b"\n\n")


@settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "300")) // 10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(0, 10**9), max_size=40), size=st.sampled_from([7, 64, 512, 4096]))
def test_a_mixed_stream_at_any_chunking_is_the_one_chunk_result(cuts, size):
    data = mixed_stream()
    whole = rapidsse.AnthropicAccumulator()
    whole.feed(data)
    acc = rapidsse.AnthropicAccumulator()
    points = sorted({0, len(data), *(c % len(data) for c in cuts)})
    for a, b in zip(points, points[1:]):
        for chunk in chunked(data[a:b], size):
            acc.feed(chunk)
    assert raw_snapshot(acc) == raw_snapshot(whole)
    assert acc.message == whole.message
    assert (acc.warnings, acc.events, acc.unknown_events) == (whole.warnings, whole.events, whole.unknown_events)


@needs_native
def test_backends_agree_on_a_mixed_stream_and_its_edits():
    data = mixed_stream()
    assert_twins_feed("AnthropicCore", data, (1, 33, 512))
    rng = random.Random(22)
    edits = [b'"', b"\\", b"}", b"\r", b"\n", b"\\u00e9", b"\\ud800", b"0", b" ", b"\xc3"]
    for _ in range(60):
        at = rng.randrange(len(data))
        edited = data[:at] + rng.choice(edits) + data[at + rng.randrange(2):]
        assert_twins_feed("AnthropicCore", edited, (rng.choice((5, 512)),))
