"""Accumulators (public API) on the corpus and synthetic streams, on the live backend."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

import rapidsse
from rapidsse import (
    ChatAccumulator,
    DecodeError,
    RealtimeAccumulator,
    ResponseAccumulator,
    chat,
    responses,
)

from .conftest import chunked, corpus_files, wires

FINAL_TYPES = ("response.completed", "response.incomplete", "response.failed")


def payloads(data: bytes) -> list[dict]:
    return [json.loads(e.data) for e in rapidsse.iter_sse([data]) if e.data != "[DONE]"]


def to_sse(events: list[dict]) -> bytes:
    return b"".join(b"event: " + e.get("type", "message").encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
                    for e in events)


def item_texts(item: dict) -> dict:
    """The streamed texts of an output item: what must come from the deltas alone."""
    out = {}
    for key in ("arguments", "input", "code"):
        if item.get(key):
            out[key] = item[key]
    for i, part in enumerate(item.get("content") or []):
        for key in ("text", "refusal", "transcript"):
            if isinstance(part, dict) and part.get(key):
                out[f"content[{i}].{key}"] = part[key]
    for i, part in enumerate(item.get("summary") or []):
        if part.get("text"):
            out[f"summary[{i}].text"] = part["text"]
    return out


# --- Responses ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_files("responses"), ids=lambda p: p.stem)
def test_response_equals_server_final_response(path):
    data = path.read_bytes()
    events = list(rapidsse.iter_events([data]))
    final = [e for e in events if e.type in FINAL_TYPES][-1].response
    for size in (7, 512, 65536):
        acc = ResponseAccumulator()
        for chunk in chunked(data, size):
            acc.feed(chunk)
        assert acc.response == final
        assert acc.warnings == []
        assert acc.events == len(events)
    added = ResponseAccumulator()
    for event in events:
        added.add(event)
    assert added.response == final
    assert added.output_text == acc.output_text
    assert (added.warnings, added.events, added.unknown_events) == (acc.warnings, acc.events, acc.unknown_events)
    expected_text = "".join(
        part.text for item in final.output if item.type == "message"
        for part in item.content if part.type == "output_text"
    )
    assert acc.output_text == expected_text


@pytest.mark.parametrize("path", corpus_files("responses"), ids=lambda p: p.stem)
def test_response_texts_come_from_deltas_alone(path):
    data = path.read_bytes()
    wire = payloads(data)
    final = [e for e in wire if e["type"] in FINAL_TYPES][-1]["response"]
    kept = [e for e in wire if not e["type"].endswith(".done") and e["type"] not in FINAL_TYPES]
    acc = ResponseAccumulator()
    for chunk in chunked(to_sse(kept), 512):
        acc.feed(chunk)
    snapshot = msgspec.to_builtins(acc.response) if acc.response else {"output": []}
    built = {item.get("id"): item_texts(item) for item in snapshot["output"]}
    streamed = {e.get("item_id") for e in kept if e["type"].endswith(".delta")}
    for item in final["output"]:
        if item.get("id") in streamed:
            assert built[item["id"]] == item_texts(item), item["id"]


def test_response_mismatch_is_recorded_and_server_wins():
    events = [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "message", "id": "m", "role": "assistant", "status": "in_progress", "content": []}},
        {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0, "delta": "Hel"},
        {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0, "delta": "lo"},
        {"type": "response.output_text.done", "item_id": "m", "output_index": 0, "content_index": 0, "text": "Help"},
    ]
    acc = ResponseAccumulator()
    acc.feed(to_sse(events))
    assert acc.output_text == "Help"
    assert any("differs from the accumulated deltas" in w for w in acc.warnings)


def test_cut_short_stream_keeps_everything_with_last_status():
    events = [
        {"type": "response.created", "sequence_number": 0,
         "response": {"id": "r1", "object": "response", "status": "in_progress", "output": [], "model": "m"}},
        {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "m", "output_index": 0,
         "content_index": 0, "delta": "partial "},
        {"type": "keepalive", "sequence_number": 2},
        {"type": "response.output_text.delta", "sequence_number": 5, "item_id": "m", "output_index": 0,
         "content_index": 0, "delta": "answer"},
    ]
    acc = ResponseAccumulator()
    acc.feed(to_sse(events))
    assert acc.response.id == "r1" and acc.response.status == "in_progress"
    assert acc.output_text == "partial answer"
    assert acc.unknown_events == 1
    assert any("sequence gap" in w for w in acc.warnings)


def test_llama_cpp_style_deltas_without_indices():
    events = [{"type": "response.output_text.delta", "delta": piece} for piece in ("a", "b", "c")]
    acc = ResponseAccumulator()
    acc.feed(to_sse(events))
    assert acc.output_text == "abc"
    assert acc.response.output[0].type == "message"


def test_response_is_none_before_any_event_and_snapshot_is_cached():
    acc = ResponseAccumulator()
    assert acc.response is None and acc.output_text == "" and acc.events == 0
    acc.feed(to_sse([{"type": "response.output_text.delta", "item_id": "m", "delta": "x"}]))
    first = acc.response
    assert acc.response is first, "unchanged state: the decoded snapshot is reused"
    acc.feed(to_sse([{"type": "response.output_text.delta", "item_id": "m", "delta": "y"}]))
    assert acc.response is not first and acc.output_text == "xy"


def test_accumulator_on_error_policies():
    good = to_sse([{"type": "response.output_text.delta", "item_id": "m", "delta": "ok"}])
    bad = b"data: {nope\n\n"
    acc = ResponseAccumulator()
    with pytest.raises(DecodeError) as info:
        acc.feed(bad + good)
    assert info.value.index == 0 and info.value.raw == b"{nope"
    assert acc.output_text == "ok", "the rest of the chunk was still added"
    skip = ResponseAccumulator(on_error="skip")
    skip.feed(bad + good)
    assert skip.output_text == "ok" and skip.invalid_events == []
    keep = ResponseAccumulator(on_error="keep")
    keep.feed(good + bad)
    assert keep.output_text == "ok" and keep.invalid_events[0].raw == b"{nope"
    assert isinstance(keep.invalid_events[0].error, DecodeError)


def test_stream_responses_iterates_and_accumulates():
    path = corpus_files("responses")[-1]
    data = path.read_bytes()
    stream = rapidsse.stream_responses(chunked(data, 300))
    events = list(stream)
    final = [e for e in events if e.type in FINAL_TYPES][-1].response
    assert stream.response == final and stream.warnings == []

    async def source():
        for chunk in chunked(data, 300):
            yield chunk

    async def run():
        s = rapidsse.astream_responses(source())
        n = len([e async for e in s])
        return n, s.response

    n, response = asyncio.run(run())
    assert n == len(events) and response == final


# --- Chat -----------------------------------------------------------------------------------


def sdk_completion(data: bytes) -> dict:
    from openai._models import construct_type
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    state = ChatCompletionStreamState()
    for payload in payloads(data):
        if "error" in payload:  # the SDK raises APIError here; the stream ends for it
            break
        # As the SDK's own stream does: lenient construction, no validation.
        chunk = construct_type(type_=ChatCompletionChunk, value=payload)
        if chunk.object and chunk.object != "chat.completion.chunk":
            continue
        state.handle_chunk(chunk)
    return state.current_completion_snapshot.model_dump()


@pytest.mark.parametrize("path", corpus_files("chat"), ids=lambda p: p.stem)
def test_chat_equals_openai_sdk_stream_state(path):
    data = path.read_bytes()
    acc = ChatAccumulator()
    for chunk in chunked(data, 512):
        acc.feed(chunk)
    ours = acc.completion
    theirs = sdk_completion(data)
    assert ours.id == theirs["id"] and ours.model == theirs["model"]
    assert len(ours.choices) == len(theirs["choices"])
    for mine, sdk in zip(ours.choices, theirs["choices"]):
        assert mine.index == sdk["index"]
        assert mine.finish_reason == sdk["finish_reason"]
        m, s = mine.message, sdk["message"]
        assert m.content == s["content"]
        assert m.refusal == s["refusal"]
        assert [(t.id, t.function.name, t.function.arguments) for t in m.tool_calls or []] == [
            (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in s.get("tool_calls") or []
        ]
        if sdk.get("logprobs"):
            assert len(mine.logprobs.content or []) == len(sdk["logprobs"]["content"] or [])
    if theirs.get("usage"):
        assert ours.usage.total_tokens == theirs["usage"]["total_tokens"]
    added = ChatAccumulator()
    for event in rapidsse.iter_events([data], "chat"):
        added.add(event)
    assert added.completion == acc.completion


def test_chat_tool_calls_merge_by_index_and_n_choices():
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [
            {"index": 0, "delta": {"role": "assistant", "tool_calls": [
                {"index": 0, "id": "t0", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}},
            {"index": 1, "delta": {"role": "assistant", "content": "B"}}]},
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}},
            {"index": 1, "delta": {"content": "C"}, "finish_reason": "stop"}]},
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}},
    ]
    acc = ChatAccumulator()
    acc.feed(b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n")
    c = acc.completion
    assert isinstance(c, chat.ChatCompletion)
    assert c.choices[0].message.tool_calls[0].function.arguments == '{"a": 1}'
    assert c.choices[1].message.content == "BC" and c.choices[1].finish_reason == "stop"
    assert c.usage.total_tokens == 3


# --- Realtime -------------------------------------------------------------------------------


def realtime_texts(response: dict) -> list:
    out = []
    for item in response.get("output") or []:
        if item.get("arguments"):
            out.append((item.get("id"), "arguments", item["arguments"]))
        for part in item.get("content") or []:
            for key in ("text", "transcript"):
                if part.get(key):
                    out.append((item.get("id"), key, part[key]))
    return out


@pytest.mark.parametrize("path", corpus_files("realtime"), ids=lambda p: p.stem)
@pytest.mark.parametrize("withhold_done", [False, True])
def test_realtime_responses_equal_their_response_done(path, withhold_done):
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    wire = [json.loads(line) for line in lines]
    done = {e["response"]["id"]: e["response"] for e in wire if e["type"] == "response.done"}
    acc = RealtimeAccumulator()
    for line, event in zip(lines, wire):
        is_done = event["type"].endswith(".done") and event["type"] != "response.done"
        if withhold_done and (is_done or event["type"] == "response.done"):
            continue
        acc.feed(line)
    built = {rid: msgspec.to_builtins(r) for rid, r in acc.responses.items()}
    for rid, response in done.items():
        assert rid in built
        assert realtime_texts(built[rid]) == realtime_texts(response), rid
        if not withhold_done:
            assert built[rid]["status"] == response["status"]


def test_realtime_avatar_response_done_with_inf_and_add_typed():
    messages = [
        b'{"type":"response.created","event_id":"e1","response":{"id":"r","status":"in_progress","output":[]}}',
        b'{"type":"response.output_text.delta","response_id":"r","item_id":"i","output_index":0,"content_index":0,"delta":"Hel"}',
        b'{"type":"response.text.delta","response_id":"r","item_id":"i","output_index":0,"content_index":0,"delta":"lo"}',
        b'{"type":"response.render.started","event_id":"e2","response_id":"r"}',
        b'{"type":"response.render.stopped","event_id":"e3","response_id":"r"}',
        b'{"type":"response.done","event_id":"e4","response":{"id":"r","status":"completed","max_output_tokens":"inf",'
        b'"output":[{"id":"i","type":"message","role":"assistant","content":[{"type":"text","text":"Hello"}]}]}}',
        b'{"type":"session.closed","event_id":"e5","reason":"idle"}',
    ]
    acc = RealtimeAccumulator()
    for m in messages:
        acc.add(rapidsse.decode_realtime(m))
    r = acc.responses["r"]
    assert r.status == "completed" and r.max_output_tokens == "inf"
    assert r.output[0].content[0].text == "Hello"
    assert acc.warnings == []
    cut = RealtimeAccumulator()
    for m in messages[:3]:
        cut.feed(m)
    assert cut.responses["r"].output[0].content[0].text == "Hello"
    assert cut.responses["r"].status == "in_progress"


# --- the Struct walk behind add() (Rust backend) ----------------------------------------------


def _walk_agrees(native, obj) -> bool:
    """The extension's walk of `obj` equals msgspec's encoding of it, parsed (same keys in the
    same order); False when the walk declines it."""
    walked = native._struct_json(obj)
    if walked is None:
        return False
    expected = json.loads(msgspec.json.encode(obj))
    got = json.loads(walked)
    assert got == expected
    assert list(got) == list(expected)
    return True


def test_struct_walk_equals_msgspec_encoding_on_the_corpus():
    from .conftest import native

    if native is None:
        pytest.skip("the compiled extension is not built")
    walked = 0
    for protocol in ("responses", "chat"):
        for path in corpus_files(protocol):
            for event in rapidsse.iter_events([path.read_bytes()], protocol=protocol, on_error="skip"):
                walked += _walk_agrees(native, event)
    for path in corpus_files("realtime"):
        for line in path.read_bytes().splitlines():
            if line.strip():
                try:
                    walked += _walk_agrees(native, rapidsse.decode_realtime(line))
                except DecodeError:
                    pass
    # (Events that carry wire info, a third of the corpus, go by rapidsse.encode: the walk
    # declines a Wire until it reads `_wire` itself.)
    assert walked > 2000


def test_struct_walk_mirrors_msgspec_options_and_declines_the_rest():
    from .conftest import native

    if native is None:
        pytest.skip("the compiled extension is not built")

    class Inner(msgspec.Struct, omit_defaults=True, tag_field="kind", tag="inner"):
        x: int = 0

    class Plain(msgspec.Struct):
        a: int = 1

    class S(msgspec.Struct, omit_defaults=True, rename={"b": "bee"}):
        a: str = "xy"
        b: float = 1.5
        c: list = msgspec.field(default_factory=list)
        d: dict = msgspec.field(default_factory=dict)
        e: tuple = ()
        f: object = None
        g: object = msgspec.UNSET
        h: list = msgspec.field(default_factory=lambda: [1])

    cases = [
        S(),
        S(a="".join(["x", "y"]), b=float("1.5"), c=[], d={}, e=(), f=None, h=[1]),  # equal, not identical
        S(c=[1, 2.5, None, True, "s"], d={"k": [Inner(x=3), Plain()]}, e=(1, (2, [3])), f=-(2**63), h=[]),
        S(b=float("nan"), f=float("-inf"), a="é😀", c=[2**64 - 1, -1, 0.1]),
        S(f={"nested": {"deep": [{"a": Inner()}]}}, g=5),
        Plain(),
        Inner(),
    ]
    for case in cases:
        assert _walk_agrees(native, case), case

    class Sub(str):
        pass

    class Odd(msgspec.Struct):
        v: object = None

    assert _walk_agrees(native, Odd(v=msgspec.UNSET))  # an UNSET field is left out
    # What the walk does not mirror goes the encoding way (which may then refuse it).
    for value in (2**64, -(2**63) - 1, b"x", Sub("x"), {1: "a"}, {"a"}, [msgspec.UNSET]):
        assert native._struct_json(Odd(v=value)) is None, value

    class Array(msgspec.Struct, array_like=True):
        a: int = 1

    assert native._struct_json(Array()) is None
    deep: object = 1
    for _ in range(100):
        deep = [deep]
    assert native._struct_json(Odd(v=deep)) is None


def test_an_accumulator_is_freed_at_once_without_a_collection():
    """The core reports rejected payloads to the accumulator through a weak reference, so the
    two form no reference cycle: dropping the accumulator frees it (and its texts) at once."""
    import gc
    import weakref

    gc.disable()
    try:
        acc = ResponseAccumulator(on_error="keep")
        acc.feed(b'data: {"type":"response.output_text.delta","item_id":"m","delta":"Hi"}\n\ndata: nope\n\n')
        assert acc.output_text == "Hi" and len(acc.invalid_events) == 1
        ref = weakref.ref(acc)
        del acc
        assert ref() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("splice_min", [0, 1, 1024])
def test_snapshot_with_texts_set_aside_equals_the_whole_json(monkeypatch, splice_min):
    """The Rust core hands long texts beside the snapshot's JSON (written there as ""); put back,
    the Response is the one the whole JSON decodes to, on every recording (at 0 and 1 bytes,
    every text is set aside), midway and at the end, and with the texts in unknown items."""
    from rapidsse import accumulate as acc_module
    from rapidsse._wire import decode as decode_lenient  # with the wire info, as the snapshot has

    monkeypatch.setattr(acc_module, "_SPLICE_MIN", splice_min)
    set_aside = 0
    for path in corpus_files("responses"):
        data = path.read_bytes()
        acc = rapidsse.ResponseAccumulator(on_error="skip")
        for half in (data[: len(data) // 2], data[len(data) // 2 :]):
            acc.feed(half)
            whole = acc._core.snapshot_json()
            expected = None if whole is None else decode_lenient(whole, rapidsse.responses.Response)
            assert acc.response == expected and wires(acc.response) == wires(expected), path.name
            spliced = getattr(acc._core, "snapshot_spliced", None)
            if spliced is not None and whole is not None:
                set_aside += len(spliced(splice_min)[1])
    if rapidsse.BACKEND == "rust" and splice_min < 1024:
        assert set_aside > 50
    # An item of a type the schemas do not know keeps its text in `data` (an UnknownVariant):
    # that text goes back through the whole JSON.
    events = [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "hologram_call", "id": "h1", "content": [{"type": "output_text", "text": ""}]}},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"type": "hologram_call", "id": "h1", "content": [{"type": "output_text", "text": "x" * 2000}]}},
    ]
    acc = rapidsse.ResponseAccumulator()
    acc.feed(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events))
    assert acc.response.output[0].data["content"][0]["text"] == "x" * 2000
    assert acc.response == decode_lenient(acc._core.snapshot_json(), rapidsse.responses.Response)
