"""What msgspec writes of a rapidsse object is the schema's view (issue 40): the wire record
(``_wire``: unknown members, defaults that were sent) is no field, so ``msgspec.json.encode``,
``msgspec.msgpack.encode``, ``msgspec.to_builtins``, ``msgspec.structs.asdict`` / ``astuple`` and
``repr`` show the schema's fields only, at every depth, and that view decodes back and encodes the
same again. ``rapidsse.encode`` still writes what came (tests/test_fidelity.py). On every corpus
recording of every protocol, for each typed event and each accumulator's final object; the suite
runs once per backend."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rapidsse
from rapidsse._schema import WIRE_NAME, Model, Wire

from .conftest import corpus_files, wires

COMPLETIONS = sorted((Path(__file__).parent / "fixtures" / "completions").glob("*.sse"))
SSE = [(p, kind) for kind in ("responses", "chat", "anthropic", "gemini") for p in corpus_files(kind)]
SSE += [(p, "completions") for p in COMPLETIONS]
ACCUMULATORS = {
    "responses": (rapidsse.ResponseAccumulator, "response"),
    "chat": (rapidsse.ChatAccumulator, "completion"),
    "anthropic": (rapidsse.AnthropicAccumulator, "message"),
    "gemini": (rapidsse.GeminiAccumulator, "response"),
    "completions": (rapidsse.CompletionsAccumulator, "completion"),
}

_json = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Encoder()
# The names the wire record went (or could go) by in any output.
LEAKS = (WIRE_NAME, "_wire", "Wire(")


def no_wire_in(value: Any, where: str) -> None:
    """``value`` (builtins from to_builtins / asdict / astuple, or a repr) holds no wire record
    and no Wire object, at any depth."""
    stack = [value]
    while stack:
        x = stack.pop()
        assert not isinstance(x, Wire), where
        if isinstance(x, dict):
            assert not any(isinstance(k, str) and k in (WIRE_NAME, "_wire") for k in x), where
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, Model):  # asdict/astuple are shallow: look inside the Structs they keep
            stack.append(msgspec.structs.asdict(x))


def check_schema_view(obj: Any) -> int:
    """msgspec's functions on ``obj`` show the schema's fields only; the JSON and MessagePack
    views decode back into ``type(obj)`` and encode the same again. Returns 1 if ``obj`` carried
    a wire record (at any depth) that the view left out."""
    cls = type(obj)
    name = cls.__name__
    as_json = _json.encode(obj)
    for leak in LEAKS:
        assert leak.encode() not in as_json, (name, as_json[:300])
    assert WIRE_NAME.encode() not in _msgpack.encode(obj), name
    rep = repr(obj)
    assert not any(leak in rep for leak in LEAKS), (name, rep[:300])
    fields = set(cls.__struct_fields__)
    assert "_wire" not in fields and WIRE_NAME not in set(cls.__struct_encode_fields__), name
    builtins = msgspec.to_builtins(obj)
    no_wire_in(builtins, f"to_builtins({name})")
    as_dict = msgspec.structs.asdict(obj)
    assert set(as_dict) == fields, name
    no_wire_in(as_dict, f"asdict({name})")
    as_tuple = msgspec.structs.astuple(obj)
    assert len(as_tuple) == len(fields), name
    no_wire_in(as_tuple, f"astuple({name})")
    # The schema view round-trips: decoded back it is equal, and encodes to the same bytes.
    back = msgspec.json.decode(as_json, type=cls)
    assert back == obj and _json.encode(back) == as_json, name
    assert msgspec.convert(builtins, type=cls) == obj, name
    packed = _msgpack.encode(obj)
    assert msgspec.msgpack.decode(packed, type=cls) == obj, name
    return int(any(w is not None for _, _, w in wires(obj)))


def sse_payloads(data: bytes) -> list[bytes]:
    return [e.data.encode() for e in rapidsse.iter_sse([data]) if e.data and e.data != "[DONE]"]


@pytest.mark.parametrize("path,kind", SSE, ids=lambda x: x.stem if isinstance(x, Path) else x)
def test_msgspec_sees_the_schema_view_of_every_event_and_final_object(path, kind):
    data = path.read_bytes()
    events = list(rapidsse.iter_events([data], kind))
    typed = [e for e in events if isinstance(e, Model)]
    assert typed, path.name
    for event in typed:
        check_schema_view(event)
    # ... and rapidsse.encode still writes each payload as received.
    if kind != "anthropic" or all(isinstance(e, Model) for e in events):
        payloads = sse_payloads(data)
        if len(payloads) == len(events):
            for event, payload in zip(events, payloads):
                assert msgspec.json.decode(rapidsse.encode(event)) == msgspec.json.decode(payload)
    acc_type, attr = ACCUMULATORS[kind]
    acc = acc_type(on_error="skip")
    acc.feed(data)
    final = getattr(acc, attr)
    if final is not None:
        check_schema_view(final)



@pytest.mark.parametrize("path", corpus_files("realtime"), ids=lambda p: p.stem)
def test_msgspec_sees_the_schema_view_of_every_realtime_event_and_response(path):
    messages = [line for line in path.read_bytes().splitlines() if line.strip()]
    acc = rapidsse.RealtimeAccumulator(on_error="skip")
    for message in messages:
        event = rapidsse.decode_realtime(message)
        if isinstance(event, Model):
            check_schema_view(event)
        acc.feed(message)
    for response in acc.responses.values():
        check_schema_view(response)


def test_the_corpus_carries_wire_records_that_the_view_leaves_out():
    """The checks above are not vacuous: many events of the corpus carry a wire record (at some
    depth), and it is still there for rapidsse.extras and rapidsse.encode after msgspec wrote
    the schema's view."""
    carried = total = 0
    for path, kind in SSE:
        for event in rapidsse.iter_events([path.read_bytes()], kind):
            if isinstance(event, Model):
                total += 1
                carried += check_schema_view(event)
    assert total > 4000 and carried > 1500, (carried, total)  # (1797 of 4532 SSE events)
    (chunk,) = rapidsse.EventDecoder("chat").feed(
        b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":6,"prompt_cache_hit_tokens":0}}\n\n'
    )
    assert _json.encode(chunk) == b'{"id":"c","usage":{"prompt_tokens":6}}'
    assert rapidsse.extras(chunk.usage) == {"prompt_cache_hit_tokens": 0}
    assert rapidsse.encode(chunk) == b'{"id":"c","choices":[],"usage":{"prompt_tokens":6,"prompt_cache_hit_tokens":0}}'


RAW = (b'{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi","token_id":5},"logprobs":null,'
       b'"finish_reason":null}],"x_groq":{"id":"r1"}}')


def decode_chunk() -> Any:
    (chunk,) = rapidsse.EventDecoder("chat").feed(b"data: " + RAW + b"\n\n")
    return chunk


@pytest.mark.parametrize(
    "copier",
    [
        lambda c: msgspec.structs.replace(c, id="c2"),
        lambda c: c.__replace__(id="c2"),  # what copy.replace calls (Python 3.13+)
        lambda c: rapidsse._schema.replace(c, id="c2"),
        lambda c: msgspec.structs.replace(copy.copy(c), id="c2"),
    ],
    ids=["msgspec.structs.replace", "__replace__", "_schema.replace", "copy.copy"],
)
def test_copies_carry_the_wire(copier):
    """msgspec copies fields only; the copies of a schema Struct keep its wire record, so that
    rapidsse.encode writes the change and the rest as received."""
    chunk = decode_chunk()
    changed = copier(chunk)
    assert type(changed) is type(chunk) and changed.id == "c2" and changed is not chunk
    assert rapidsse.extras(changed) == {"x_groq": {"id": "r1"}}
    expected = msgspec.json.decode(RAW)
    expected["id"] = "c2"
    assert msgspec.json.decode(rapidsse.encode(changed)) == expected
    assert _json.encode(changed) == b'{"id":"c2","choices":[{"delta":{"content":"Hi"}}]}'


def test_replace_of_other_structs_is_msgspecs():
    class Point(msgspec.Struct):
        x: int
        y: int = 0

    assert msgspec.structs.replace(Point(1, 2), y=3) == Point(1, 3)
    assert msgspec.structs.replace.__wrapped__(Point(1, 2), x=0) == Point(0, 2)
    with pytest.raises(TypeError):
        msgspec.structs.replace(Point(1), z=1)
    with pytest.raises(TypeError):
        msgspec.structs.replace({"x": 1}, x=2)


def test_attribute_assignment_carries_the_wire_and_the_view_follows():
    chunk = decode_chunk()
    chunk.choices[0].delta.content = "Hello"
    chunk.model = "m"
    assert _json.encode(chunk) == b'{"id":"c1","model":"m","choices":[{"delta":{"content":"Hello"}}]}'
    expected = msgspec.json.decode(RAW)
    expected["choices"][0]["delta"]["content"] = "Hello"
    expected["model"] = "m"
    assert msgspec.json.decode(rapidsse.encode(chunk)) == expected
    # A decoded Struct set into one built by hand is written as received too.
    outer = rapidsse.chat.ChatCompletionChunk(id="x", choices=decode_chunk().choices)
    assert b"token_id" not in _json.encode(outer)
    assert msgspec.json.decode(rapidsse.encode(outer))["choices"][0]["delta"] == {"content": "Hi", "token_id": 5}


def test_a_struct_built_by_hand_has_no_wire_record():
    delta = rapidsse.responses.OutputTextDelta(delta="x", item_id="m", output_index=0, content_index=0)
    assert getattr(delta, "_wire", None) is None and rapidsse.extras(delta) == {}
    assert rapidsse.encode(delta) == _json.encode(delta)
    check_schema_view(delta)
