"""Nothing received is lost: every payload's members reachable from its typed event (known fields
as attributes, the rest in ``rapidsse.extras``), and ``rapidsse.encode`` writing it back as the
JSON it came from, on the live backend (the suite runs once per backend)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rapidsse
from rapidsse import chat, realtime, responses
from rapidsse._backend import using
from rapidsse._schema import WIRE_NAME, Model, UnknownVariant, Wire
from rapidsse._wire import DEEP, compute

from .conftest import chunked, corpus_files, native, wires

SSE_FILES = corpus_files("responses") + corpus_files("chat")
PROTOCOL = {path: path.parent.name for path in SSE_FILES}


def sse_payloads(data: bytes) -> list[bytes]:
    return [e.data.encode() for e in rapidsse.iter_sse([data]) if e.data != "[DONE]"]


def realtime_messages(path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def as_json(payload: bytes) -> Any:
    return msgspec.json.decode(payload)


def check_extras_everywhere(doc: Any, obj: Any, where: str = "$") -> int:
    """Every member of ``doc`` at every depth is reachable from ``obj``: a known field as its
    attribute, an unknown one in ``rapidsse.extras`` with the same value. Returns the extras met."""
    if isinstance(obj, UnknownVariant):
        assert obj.data == doc, where
        return 0
    if isinstance(obj, Model):
        assert isinstance(doc, dict), where
        config = obj.__struct_config__
        names = dict(zip(obj.__struct_encode_fields__, obj.__struct_fields__))
        found = rapidsse.extras(obj)
        met = 0
        for key, value in doc.items():
            if key == config.tag_field:
                assert value == config.tag, where
            elif key in names and key != WIRE_NAME:
                met += check_extras_everywhere(value, getattr(obj, names[key]), f"{where}.{key}")
            else:
                assert key in found and found[key] == value, f"{where}.{key}"
                met += 1
        assert set(found) <= set(doc), where
        return met
    if isinstance(obj, list) and isinstance(doc, list):
        assert len(obj) == len(doc), where
        return sum(check_extras_everywhere(d, o, f"{where}[{i}]") for i, (d, o) in enumerate(zip(doc, obj)))
    if isinstance(obj, dict) and isinstance(doc, dict):
        return sum(check_extras_everywhere(doc[k], o, f"{where}.{k}") for k, o in obj.items() if k in doc)
    return 0


# --- the whole corpus ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_sse_payload_encodes_back_as_received(path):
    data = path.read_bytes()
    protocol = PROTOCOL[path]
    events = list(rapidsse.iter_events(chunked(data, 700), protocol))
    payloads = sse_payloads(data)
    assert len(events) == len(payloads)
    for event, payload in zip(events, payloads):
        assert as_json(rapidsse.encode(event)) == as_json(payload), payload[:200]
        check_extras_everywhere(as_json(payload), event)
    # encode_sse writes the same payloads, and they decode back into equal events, wire info too
    written = b"".join(rapidsse.encode_sse(e) for e in events)
    assert [as_json(p) for p in sse_payloads(written)] == [as_json(p) for p in payloads]
    again = list(rapidsse.iter_events(chunked(written, 333), protocol))
    assert again == events and wires(again) == wires(events)


@pytest.mark.parametrize("path", corpus_files("realtime"), ids=lambda p: p.stem)
def test_every_realtime_message_encodes_back_as_received(path):
    for message in realtime_messages(path):
        event = rapidsse.decode_realtime(message)
        assert as_json(rapidsse.encode(event)) == as_json(message), message[:200]
        check_extras_everywhere(as_json(message), event)
        assert rapidsse.decode_realtime(rapidsse.encode(event)) == event
    assert [rapidsse.encode(e) for e in rapidsse.iter_realtime(realtime_messages(path))] == [
        rapidsse.encode(rapidsse.decode_realtime(m)) for m in realtime_messages(path)
    ]


def test_the_corpus_has_extras_at_several_depths():
    """The corpus does exercise what the round trip checks: unknown members at the top level
    and below, and defaults that were sent."""
    depths: set[int] = set()
    present = 0
    for path in SSE_FILES:
        for event in rapidsse.iter_events([path.read_bytes()], PROTOCOL[path]):
            stack = [(event, 0)]
            while stack:
                obj, depth = stack.pop()
                if isinstance(obj, Model):
                    if rapidsse.extras(obj):
                        depths.add(depth)
                    if isinstance(obj._wire, Wire):
                        present += len(obj._wire.present)
                    stack.extend((getattr(obj, f), depth + 1) for f in obj.__struct_fields__)
                elif isinstance(obj, list):
                    stack.extend((item, depth) for item in obj)
    assert {0, 1, 2} <= depths and present > 1000


def test_vendor_fields_are_reachable():
    groq = [p for p in corpus_files("chat") if p.name == "test_groq__test_groq_model_web_search_tool_stream.sse"][0]
    chunks = list(rapidsse.iter_events([groq.read_bytes()], "chat"))
    last = [c for c in chunks if "usage" in rapidsse.extras(c).get("x_groq", {})][-1]
    assert rapidsse.extras(last)["x_groq"]["usage"]["prompt_tokens"] > 0
    crusoe = [p for p in corpus_files("chat") if p.name == "test_crusoe__test_crusoe_model_streaming.sse"][0]
    chunks = list(rapidsse.iter_events([crusoe.read_bytes()], "chat"))
    assert rapidsse.extras(chunks[0]) == {"prompt_token_ids": None, "prompt_text": None}
    assert any(rapidsse.extras(choice) == {"token_ids": None} for c in chunks for choice in c.choices)


def test_wire_info_is_none_for_an_exact_payload_and_shared_marks_above():
    exact = rapidsse.decode_realtime(b'{"type":"session.closed","reason":"bye"}')
    assert exact._wire is None
    raw = b'{"id":"c","choices":[{"index":0,"delta":{"content":"Hi","token_id":5},"finish_reason":null}]}'
    (chunk,) = rapidsse.EventDecoder("chat").feed(b"data: " + raw + b"\n\n")
    assert chunk._wire is DEEP
    assert chunk.choices[0]._wire == Wire(present=("index", "finish_reason"))
    assert chunk.choices[0].delta._wire == Wire(extra=b'{"token_id":5}')
    assert rapidsse.extras(chunk) == {} and rapidsse.extras(chunk.choices[0].delta) == {"token_id": 5}
    assert chunk.choices[0].finish_reason is None  # absent or null: None to users, as before
    assert "Wire(" not in repr(chunk) and "Wire(" not in repr(chunk.choices[0])  # no field: not shown


def test_raw_extras_keep_their_text():
    raw = b'{"type":"session.closed","reason":"bye","ts": 1.50,"rid" :"r1" ,"n":[1, 2.0]}'
    event = rapidsse.decode_realtime(raw)
    assert event._wire.extra == b'{"ts":1.50,"rid":"r1","n":[1, 2.0]}'
    assert rapidsse.extras(event) == {"ts": 1.5, "rid": "r1", "n": [1, 2.0]}
    assert rapidsse.encode(event) == b'{"type":"session.closed","reason":"bye","ts":1.50,"rid":"r1","n":[1, 2.0]}'


def test_a_payload_carrying_the_hidden_name_keeps_it_as_an_extra():
    raw = b'{"id":"c","choices":[],"' + WIRE_NAME.encode() + b'":{"x":1}}'
    (chunk,) = rapidsse.EventDecoder("chat").feed(b"data: " + raw + b"\n\n")
    assert isinstance(chunk._wire, Wire) and rapidsse.extras(chunk) == {WIRE_NAME: {"x": 1}}
    assert as_json(rapidsse.encode(chunk)) == as_json(raw)


def test_unknown_nested_types_and_unknown_events_encode_as_received():
    raw = (b'{"type":"response.output_item.done","output_index":0,"sequence_number":3,'
           b'"item":{"type":"hologram_call","id":"h1","depth":{"z":null}}}')
    (event,) = rapidsse.EventDecoder("responses").feed(b"data: " + raw + b"\n\n")
    assert isinstance(event.item, UnknownVariant) and event._wire is DEEP
    assert as_json(rapidsse.encode(event)) == as_json(raw)
    unknown = b'{"type":"x.new","a":[1,{"b":null}]}'
    (event,) = rapidsse.EventDecoder("responses").feed(b"data: " + unknown + b"\n\n")
    assert rapidsse.encode(event) == unknown and rapidsse.extras(event) == {}


def test_encode_takes_only_rapidsse_objects():
    with pytest.raises(TypeError):
        rapidsse.encode(object())
    with pytest.raises(TypeError):
        rapidsse.extras({"a": 1})


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_backends_compute_the_same_wire_info(kind):
    """The reference pass on the pure backend and whatever the Rust backend does give equal
    events, ``_wire`` included at every depth."""
    if native is None:
        pytest.skip("the compiled extension is not built")
    for path in corpus_files(kind):
        data = path.read_bytes()
        with using("rust"):
            rust = list(rapidsse.iter_events(chunked(data, 512), kind))
        with using("python"):
            py = list(rapidsse.iter_events(chunked(data, 512), kind))
        assert wires(rust) == wires(py), path.name
        assert rust == py, path.name


# --- changed events ----------------------------------------------------------------------------


GROQ_LIKE = (b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
             b'"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}],'
             b'"x_groq":{"id":"req_1"}}')


def decode_chunk(raw: bytes) -> chat.ChatCompletionChunk:
    (chunk,) = rapidsse.EventDecoder("chat").feed(b"data: " + raw + b"\n\n")
    return chunk


def test_a_changed_attribute_is_written_and_the_rest_as_received():
    chunk = decode_chunk(GROQ_LIKE)
    chunk.choices[0].delta.content = "Hello"
    chunk.model = "other"
    expected = as_json(GROQ_LIKE)
    expected["choices"][0]["delta"]["content"] = "Hello"
    expected["model"] = "other"
    assert as_json(rapidsse.encode(chunk)) == expected
    chunk.choices[0].finish_reason = "stop"  # was null on the wire: now written with its value
    expected["choices"][0]["finish_reason"] = "stop"
    assert as_json(rapidsse.encode(chunk)) == expected


def test_replace_keeps_what_came():
    chunk = decode_chunk(GROQ_LIKE)
    changed = msgspec.structs.replace(chunk, id="c2")
    expected = as_json(GROQ_LIKE)
    expected["id"] = "c2"
    assert as_json(rapidsse.encode(changed)) == expected
    assert rapidsse.extras(changed) == {"x_groq": {"id": "req_1"}}
    sse = rapidsse.encode_sse(changed)
    assert sse.startswith(b"data: ") and as_json(sse[6:].strip()) == expected


def test_constructed_events_encode_as_msgspec_does():
    event = responses.OutputTextDelta(delta="x", item_id="m", output_index=0, content_index=0)
    assert rapidsse.encode(event) == msgspec.json.encode(event)
    # a Struct carrying wire info put inside one that does not is still written as received
    usage = decode_chunk(b'{"usage":{"prompt_tokens":1,"prompt_cache_hit_tokens":0}}').usage
    chunk = chat.ChatCompletionChunk(id="c", usage=usage)
    assert as_json(rapidsse.encode(chunk)) == {"id": "c", "usage": {"prompt_tokens": 1, "prompt_cache_hit_tokens": 0}}


# --- hypothesis: real payloads with extra keys, nulls and nested unknown objects ---------------

SAMPLE = []
for _path in SSE_FILES[::3]:
    SAMPLE.extend((PROTOCOL[_path], p) for p in sse_payloads(_path.read_bytes())[:12])
for _path in corpus_files("realtime")[::4]:
    SAMPLE.extend(("realtime", m) for m in realtime_messages(_path)[:8])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
# Names that are known somewhere in the schemas (so a null or a default may land on a real field)
# and names no schema knows.
member_names = st.sampled_from(
    ["index", "logprobs", "finish_reason", "role", "status", "text", "usage", "id", "type", "annotations",
     "x_vendor", "token_id", "rid", "ts", WIRE_NAME]
) | st.text(min_size=1, max_size=8)


def objects_in(doc: Any) -> list[dict]:
    out = []
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def decode_one(protocol: str, raw: bytes) -> Any:
    if protocol == "realtime":
        try:
            return rapidsse.decode_realtime(raw)
        except rapidsse.DecodeError:
            return None
    events = rapidsse.EventDecoder(protocol, on_error="skip").feed(b"data: " + raw + b"\n\n")
    return events[0] if events else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(SAMPLE),
    edits=st.lists(st.tuples(st.integers(0, 10_000), member_names, json_values), min_size=1, max_size=4),
)
def test_added_members_round_trip(case, edits):
    protocol, raw = case
    doc = as_json(raw)
    for where, name, value in edits:
        targets = objects_in(doc)
        targets[where % len(targets)][name] = value
    mutated = msgspec.json.encode(doc)
    event = decode_one(protocol, mutated)
    if event is None or isinstance(event, (rapidsse.UnknownEvent, rapidsse.InvalidEvent)):
        return  # an edit made it invalid or of another type: nothing typed to check
    assert as_json(rapidsse.encode(event)) == doc
    check_extras_everywhere(doc, event)
    assert decode_one(protocol, rapidsse.encode(event)) == event


# --- accumulators ------------------------------------------------------------------------------


def final_response(data: bytes) -> Any:
    final = None
    for payload in sse_payloads(data):
        obj = as_json(payload)
        if obj.get("type") in ("response.completed", "response.failed", "response.incomplete"):
            final = obj["response"]
    return final


@pytest.mark.parametrize("path", corpus_files("responses"), ids=lambda p: p.stem)
def test_final_response_is_the_servers_whole_object(path):
    data = path.read_bytes()
    final = final_response(data)
    if final is None:
        pytest.skip("no final response in this recording")
    tapped = rapidsse.ResponseAccumulator()
    for c in chunked(data, 512):
        tapped.feed(c)
    added = rapidsse.ResponseAccumulator()
    for event in rapidsse.iter_events([data]):
        added.add(event)
    stream = rapidsse.stream_responses(chunked(data, 512))
    for _ in stream:
        pass
    for acc in (tapped, added, stream.accumulator):
        assert as_json(rapidsse.encode(acc.response)) == final


@pytest.mark.parametrize("path", corpus_files("chat"), ids=lambda p: p.stem)
def test_chat_usage_keeps_every_key_of_the_last_usage_chunk(path):
    data = path.read_bytes()
    usage = None
    for payload in sse_payloads(data):
        obj = as_json(payload)
        if obj.get("usage") is not None and obj.get("error") is None:
            usage = obj["usage"]
    acc = rapidsse.ChatAccumulator()
    acc.feed(data)
    if usage is None:
        assert acc.completion is None or acc.completion.usage is None
    else:
        assert as_json(rapidsse.encode(acc.completion.usage)) == usage


def test_chat_usage_vendor_extras_survive():
    deepseek = (b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
                b'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,'
                b'"completion_tokens":1,"total_tokens":4,"prompt_cache_hit_tokens":2,"prompt_cache_miss_tokens":1}}\n\n'
                b"data: [DONE]\n\n")
    acc = rapidsse.ChatAccumulator()
    acc.feed(deepseek)
    assert rapidsse.extras(acc.completion.usage) == {"prompt_cache_hit_tokens": 2, "prompt_cache_miss_tokens": 1}


@pytest.mark.parametrize("path", corpus_files("chat"), ids=lambda p: p.stem)
def test_chat_completion_keeps_the_newest_vendor_members(path):
    """Top-level members the schema does not know (Groq's ``x_groq``, whose last chunk carries
    its usage) are in the completion's extras with the newest non-null value sent."""
    data = path.read_bytes()
    newest: dict[str, Any] = {}
    first = True
    for payload in sse_payloads(data):
        obj = as_json(payload)
        if obj.get("error") is not None or obj.get("object") not in (None, "chat.completion.chunk"):
            continue
        for key, value in obj.items():
            if key in chat.ChatCompletionChunk.__struct_encode_fields__ or key in chat.ChatCompletion.__struct_encode_fields__:
                continue
            if first or value is not None:
                newest[key] = value
        first = False
    acc = rapidsse.ChatAccumulator()
    acc.feed(data)
    if acc.completion is not None:
        assert rapidsse.extras(acc.completion) == newest


def test_groq_usage_reaches_the_completion():
    groq = [p for p in corpus_files("chat") if p.name == "test_groq__test_groq_model_web_search_tool_stream.sse"][0]
    acc = rapidsse.ChatAccumulator()
    acc.feed(groq.read_bytes())
    assert rapidsse.extras(acc.completion)["x_groq"]["usage"]["total_tokens"] == 5362


@pytest.mark.parametrize("path", corpus_files("realtime"), ids=lambda p: p.stem)
def test_realtime_responses_keep_the_servers_members(path):
    acc = rapidsse.RealtimeAccumulator()
    finals: dict[str, Any] = {}
    for message in realtime_messages(path):
        acc.feed(message)
        obj = as_json(message)
        if obj.get("type") == "response.done":
            finals[obj["response"]["id"]] = obj["response"]
    for rid, final in finals.items():
        ours = as_json(rapidsse.encode(acc.responses[rid]))
        if final.get("usage") == {}:  # xAI sends usage beside the response: the accumulator takes it
            ours["usage"] = {}
        assert ours == final


def test_to_openai_puts_extras_in_model_extra():
    from rapidsse.integrations.openai import to_openai_chat_completion, to_openai_response

    moderation = [p for p in corpus_files("chat") if p.name == "test_openai__test_openai_moderation_stream.sse"][0]
    acc = rapidsse.ChatAccumulator()
    acc.feed(moderation.read_bytes())
    completion = to_openai_chat_completion(acc.completion)
    assert completion.model_dump()["moderation"] == rapidsse.extras(acc.completion)["moderation"]
    raw = (b'data: {"type":"response.completed","sequence_number":1,"response":{"id":"r","object":"response",'
           b'"created_at":1,"status":"completed","model":"m","output":[],"tool_usage":{"web_search":1},"x_vendor":{"a":[1]},'
           b'"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2,"cost_usd":0.5}}}\n\n')
    acc = rapidsse.ResponseAccumulator()
    acc.feed(raw)
    response = to_openai_response(acc.response)
    assert response.model_extra["x_vendor"] == {"a": [1]}  # the SDK does not know it either
    assert response.tool_usage.web_search == 1  # newer than rapidsse's schema, known to the SDK
    assert response.usage.model_extra == {"cost_usd": 0.5}


# --- the openai SDK reads what encode_sse writes ----------------------------------------------


def sdk_final(data: bytes, protocol: str) -> Any:
    import openai

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    client = openai.OpenAI(api_key="x", base_url="http://test/v1", max_retries=0,
                           http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    if protocol == "responses":
        with client.responses.stream(model="m", input="hi") as stream:
            for _ in stream:
                pass
            return stream.get_final_response().model_dump()
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
        for _ in stream:
            pass
        return stream.current_completion_snapshot.model_dump()


# The SDK's models lag a recording (a web-search source of type "api"): pydantic warns as the SDK
# dumps its own objects while it accumulates, for the recording and our stream alike.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_openai_sdk_reads_the_written_stream_as_the_recorded_one(path):
    data = path.read_bytes()
    protocol = PROTOCOL[path]
    try:
        theirs = sdk_final(data, protocol)
    except Exception as exc:  # noqa: BLE001 - the SDK does not read this recording itself
        pytest.skip(f"the openai SDK cannot read the recording: {type(exc).__name__}: {exc}"[:200])
    events = list(rapidsse.iter_events(chunked(data, 512), protocol))
    written = b"".join(rapidsse.encode_sse(e) for e in events)
    if protocol == "chat":
        written += b"data: [DONE]\n\n"
    assert sdk_final(written, protocol) == theirs
