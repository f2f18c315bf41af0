"""The pure-Python accumulator cores (``rapidsse._pure.accumulate``) against the Rust ones
(``rapidsse._rapidsse``): same snapshots, warnings, counts, texts and rejections, on the recorded
corpus and on generated event sequences."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rapidsse._pure import accumulate as pure

from .conftest import ROOT, chunked, corpus_files

try:
    from rapidsse import _rapidsse as native
except ImportError:
    native = None

if native is None or not hasattr(native, "ResponseCore"):
    if os.environ.get("RAPIDSSE_BACKEND") == "rust":
        raise RuntimeError("RAPIDSSE_BACKEND=rust but the extension (with the accumulator cores) is missing")
    pytestmark = pytest.mark.skip("the compiled extension is not built")
elif os.environ.get("RAPIDSSE_BACKEND") == "python":
    # Every check here builds both backends' cores itself, whichever backend is live: run once, in
    # the suite's run on the Rust backend.
    pytestmark = pytest.mark.skip("twin checks run in the Rust-backend run of the suite")

KINDS = ("ResponseCore", "ChatCore", "RealtimeCore")


def pair(kind: str, **kw):
    return getattr(native, kind)(**kw), getattr(pure, kind)(**kw)


def state(core, kind: str) -> dict:
    snap = core.snapshot_json()
    out = {
        "snapshot": None if snap is None else json.loads(snap),
        "warnings": core.warnings(),
        "unknown": core.unknown_events(),
        "events": core.events(),
    }
    if kind == "ResponseCore":
        out["output_text"] = core.output_text()
    return out


def assert_same(rust, py, kind: str, where: str = "") -> None:
    a, b = state(rust, kind), state(py, kind)
    assert b == a, where
    if a["snapshot"] is not None:
        # Same key order too (cheap to keep), and JSON values that compare strictly equal.
        assert json.dumps(b["snapshot"]) == json.dumps(a["snapshot"]), where


def sse_payloads(data: bytes) -> list[bytes]:
    from rapidsse._pure.framing import Framer

    out: list = []
    framer = Framer(None)
    framer.feed(data, out, lambda event, payload, *rest: payload)
    framer.close()
    return out


def event_type(payload: bytes) -> str:
    try:
        value = json.loads(payload)
    except ValueError:
        return ""
    return value.get("type", "") if isinstance(value, dict) else ""


def is_done_or_final(payload: bytes, kind: str) -> bool:
    t = event_type(payload)
    if kind == "ChatCore":
        return False
    return t.endswith(".done") or t in ("response.completed", "response.incomplete", "response.failed")


CORPUS = {
    "ResponseCore": lambda: corpus_files("responses"),
    "ChatCore": lambda: corpus_files("chat"),
}


def corpus_params():
    params = []
    for kind, files in CORPUS.items():
        for path in files():
            params.append(pytest.param(kind, path, id=f"{kind}-{path.name}"))
    return params


@pytest.mark.parametrize(("kind", "path"), corpus_params())
def test_corpus_feed_at_every_chunking(kind, path):
    data = path.read_bytes()
    sizes = [7, 512, 65536] + ([1] if len(data) <= 20_000 else [])
    for size in sizes:
        rust, py = pair(kind)
        for chunk in chunked(data, size):
            assert py.feed(chunk) == rust.feed(chunk)
        rust.close()
        py.close()
        assert_same(rust, py, kind, f"chunk size {size}")


@pytest.mark.parametrize(("kind", "path"), corpus_params())
def test_corpus_add_json_per_payload(kind, path):
    payloads = sse_payloads(path.read_bytes())
    rust, py = pair(kind)
    for n, payload in enumerate(payloads):
        assert py.add_json(payload) == rust.add_json(payload)
        if n % 16 == 0 or n == len(payloads) - 1:
            assert_same(rust, py, kind, f"after payload {n}")
    # `.done` events and final events withheld: texts come from the deltas alone.
    rust, py = pair(kind)
    kept = [p for p in payloads if not is_done_or_final(p, kind)]
    if kind == "ChatCore":
        kept = payloads[:-2]  # the last chunks (usage, finish) withheld
    for payload in kept:
        assert py.add_json(memoryview(payload)) == rust.add_json(bytearray(payload))
    assert_same(rust, py, kind, "withheld")


@pytest.mark.parametrize("path", corpus_files("realtime"), ids=lambda p: p.name)
def test_realtime_corpus(path):
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    for withhold in (False, True):
        rust, py = pair("RealtimeCore")
        for n, line in enumerate(lines):
            if withhold and event_type(line).endswith(".done"):
                continue
            assert py.add_json(line) == rust.add_json(line)
            if n % 8 == 0:
                assert_same(rust, py, "RealtimeCore", f"line {n}")
        assert_same(rust, py, "RealtimeCore", f"withhold={withhold}")


# ---------------------------------------------------------------------------------------------
# Edge cases of JSON reading, one by one (messages included).

ODD_PAYLOADS = [
    b"",
    b"   ",
    b"[DONE]",
    b" \t[DONE]\r\n",
    b"\x0b[DONE]",
    b"\x0c[DONE]\x0c",
    b"[1, 2]",
    b"42",
    b'"str"',
    b"null",
    b"{",
    b"{}",
    b"{} ",
    b"{}x",
    b'{"a":1,}',
    b"[1,]",
    b'{"a" 1}',
    b'{"a":1 "b":2}',
    b"{1:2}",
    b'{"a":NaN}',
    b'{"a":-Infinity}',
    b'{"a":nul}',
    b'{"a":tru}',
    b'{"a":01}',
    b'{"a":1.}',
    b'{"a":1e}',
    b'{"a":1e+}',
    b'{"a":-}',
    b'{"a":.5}',
    b'{"a":1e400}',
    b'{"type":"response.output_text.delta","delta":1e400}',
    b'{"type":"response.output_text.delta","sequence_number":1e400}',
    b'{"type":"response.output_text.delta","junk":1e400,"delta":"x"}',
    b'{"type":"response.output_text.delta","delta":"x","sequence_number":18446744073709551616}',
    b'{"type":"response.output_text.delta","delta":"x","sequence_number":18446744073709551615}',
    b'{"type":"response.output_text.delta","delta":"x","sequence_number":-0}',
    b'{"type":"response.output_text.delta","delta":"x","sequence_number":1.0}',
    b'{"type":"response.output_text.delta","delta":"x","output_index":-1}',
    b'{"type":"response.output_text.delta","delta":"\\ud800"}',
    b'{"type":"response.output_text.delta","delta":"\\ud83d\\ude00 ok"}',
    b'{"type":"response.output_text.delta","delta":"\\udc00\\ud800"}',
    b'{"type":"response.output_text.delta","delta":"\\ud800\\u0041"}',
    b'{"type":"response.output_text.delta","delta":"x","junk":"\\ud800"}',
    b'{"type":"response.output_text.delta","delta":"x","\\ud800":1}',
    b'{"type":"response.output_text.delta","delta":"\xff"}',
    b'{"type":"response.output_text.delta","delta":"x","junk":"\xff"}',
    b'{"type":"response.output_text.delta","delta":"x","item":"\xff"}',
    b'{"type":"response.output_text.delta","delta":"x","item":"\\ud800"}',
    b'{"type":"response.output_text.delta","delta":"x"}\xff',
    b'\xef\xbb\xbf{"type":"x"}',
    b'{"type":"\xc3\xa9\xcc\x81 \xe2\x80\x8d \xf0\x9f\x98\x80 \x7f","x":nope}',
    b'{"type":"response.output_text.delta","delta":"x","delta":"y"}',
    b'{"type":"a","type":"b"}',
    b'{"type":"response.output_text.delta","delta":5}',
    b'{"type":"response.output_text.delta","delta":"x","junk":1,"junk":2}',
    b'{"type":5}',
    b'{"type":null,"delta":"x"}',
    b'{"type":"response.output_text.delta","delta":"a\\u0000b\\n"}',
    b'{"type":"response.output_text.delta","delta":"a\x01b"}',
    b'{"type":"response.output_text.delta","delta":"a\\x"}',
    b'{"type":"response.output_text.delta","delta":"a\\u12"}',
    b'{"type":"response.output_text.delta","delta":"a\\u12zz"}',
    b'{"type":"response.output_text.delta","delta":"abc',
    b'{"type":"response.output_text.delta","delta":"abc\\',
    b'{"type":"response.output_text.delta",\n"delta":\n"x"\n,}',
    b'{"type":"error","message":"boom","code":"x"}',
    b'{"type":"error","error":{"message":"nested"}}',
    b'{"type":"error","error":{"message":5},"message":"flat"}',
    b'{"type":"error","message":7}',
    b'{"type":"error","error":"str"}',
    b'{"error":{"message":"chat boom"}}',
    b'{"error":"chat str"}',
    b'{"object":"","choices":[]}',
    b'{"object":5}',
    b'{"choices":[1]}',
    b'{"choices":[{"\\ud800":1}]}',
    b'{"choices":[{"index":0,"delta":{"content":"\xff"}}]}',
    b'{"choices":[{"index":0,"delta":{"content":"\\ud800"}}]}',
    b'{"choices":[{"index":0,"delta":{"\\ud800":"x","content":"y"}}]}',
    b'{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}',
    b'{"choices":[{"index":0,"index":1,"delta":{"content":"a"}}]}',
    b'{"choices":"x"}',
    b'{"id":"\\ud800","choices":[{"index":0,"delta":{"content":"a"}}]}',
    b'{"choices":[{"index":0,"delta":{"n":1e400,"m":[1,2]}}]}',
    b'{"choices":[{"index":0,"delta":{"n":' + b"9" * 400 + b"}}]}",
    b'{"choices":[{"index":0,"delta":{"n":-0,"f":1e2,"g":-9223372036854775809}}]}',
    b'{"type":"response.created","response":{"id":"r","output":[],"x":' + b"[" * 130 + b"]" * 130 + b"}}",
    b'{"type":"response.created","response":{"id":"r","output":[],"x":' + b"[" * 126 + b"]" * 126 + b"}}",
    b'{"type":"response.created","response":{"id":"r","output":[],"x":' + b"[" * 127 + b"]" * 127 + b"}}",
    b'{"type":"response.created","response":{"id":"r","output":[],"x":' + b"[" * 2000 + b"]" * 2000 + b"}}",
    b'{"type":"response.created","response":{"id":"r","output":[],"x":' + b"[" * 2000 + b"]" * 1999 + b"}}",
    b'{"type":"session.created","response_id":"r","x":' + b"{\"a\":" * 3000 + b"1" + b"}" * 3000 + b"}",
    b'{"type":"response.created","response":{"id":"r","output":[],"x":"\xff"}}',
    b'{"type":"response.created","response":{"id":"r","output":[],"x":"\\udfff"}}',
    b'{"type":"response.created","response":{"id":"r","n":1.5,"m":-0.0,"k":12345678901234567890123}}',
]


@pytest.mark.parametrize("kind", KINDS)
def test_odd_payloads_one_by_one(kind):
    for payload in ODD_PAYLOADS:
        rust, py = pair(kind)
        assert py.add_json(b'{"type":"keepalive"}') == rust.add_json(b'{"type":"keepalive"}')
        assert py.add_json(payload) == rust.add_json(payload), payload
        assert_same(rust, py, kind, repr(payload))


@pytest.mark.parametrize("kind", KINDS)
def test_odd_payloads_in_one_stream(kind):
    rust, py = pair(kind)
    for payload in ODD_PAYLOADS:
        assert py.add_json(payload) == rust.add_json(payload), payload
    assert_same(rust, py, kind)
    # and framed: reasons, indices, event names, offsets and raw payloads
    rust, py = pair(kind)
    stream = b"".join(
        b"event: e%d\ndata: " % n + p.replace(b"\n", b"\ndata: ").replace(b"\r", b"") + b"\n\n"
        for n, p in enumerate(ODD_PAYLOADS)
    )
    for chunk in chunked(stream, 100):
        assert py.feed(chunk) == rust.feed(chunk)
    assert_same(rust, py, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_framing_errors_and_argument_types(kind):
    rust, py = pair(kind, max_event_size=64)
    big = b"data: " + b"x" * 100 + b"\n\n"
    ok = b'data: {"type":"keepalive"}\n\n'
    for core in (rust, py):
        core.feed(ok)
    errors = []
    for core in (rust, py):
        with pytest.raises(Exception) as info:
            core.feed(ok + big)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1])
    assert str(errors[0]) == str(errors[1])
    assert (errors[0].limit, errors[0].offset, errors[0].events) == (errors[1].limit, errors[1].offset, errors[1].events)
    assert_same(rust, py, kind)
    for core in (rust, py):
        with pytest.raises(Exception) as info:
            core.feed(ok)
        errors.append(info.value)
    assert type(errors[2]) is type(errors[3]) and str(errors[2]) == str(errors[3])
    for arg in ("str", 5):
        outcomes = []
        for core in pair(kind):
            try:
                outcomes.append(("ok", core.add_json(arg)))
            except Exception as exc:  # noqa: BLE001
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1]


# ---------------------------------------------------------------------------------------------
# Generated event sequences

ids = st.sampled_from(["item_a", "msg_1", ""])
small = st.one_of(st.integers(min_value=0, max_value=1), st.just(300))
texts = st.sampled_from(["", "Hello", "é✓😀", "{\"a\":", "\n"])
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731


def optional_fields(**fields) -> st.SearchStrategy[dict]:
    """A dict holding any subset of the fields (values drawn from their strategies)."""
    return st.fixed_dictionaries({}, optional=fields)


@st.composite
def json_payload(draw, obj: dict) -> bytes:
    """Encodes ``obj``, sometimes with odd but valid spacing, duplicates or escapes."""
    mode = draw(st.integers(0, 9))
    if mode == 0:
        return json.dumps(obj, indent=1).encode()
    if mode == 1:
        return json.dumps(obj, ensure_ascii=True).encode()
    if mode == 2 and obj:
        # duplicate one key (read field or not)
        key = draw(st.sampled_from(sorted(obj)))
        body = json.dumps(obj)[1:-1]
        return ("{" + body + ", " + json.dumps(key) + ": " + json.dumps(obj[key]) + "}").encode()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


part_types = st.sampled_from(["output_text", "refusal", "reasoning_text", "summary_text", "text", "audio", "output_audio", "weird"])


@st.composite
def parts(draw) -> dict:
    t = draw(part_types)
    part = {"type": t}
    extra = draw(optional_fields(text=maybe(texts), refusal=texts, transcript=texts, annotations=st.sampled_from([[], [{"type": "url_citation"}], None])))
    part.update(extra)
    return part


item_types = st.sampled_from(["message", "reasoning", "function_call", "custom_tool_call", "mcp_call", "code_interpreter_call", "web_search_call"])


@st.composite
def items(draw) -> dict:
    item = draw(optional_fields(id=ids, type=item_types, status=st.sampled_from(["in_progress", "completed"])))
    item.update(draw(optional_fields(
        content=st.one_of(st.none(), st.lists(parts(), max_size=3)),
        summary=st.lists(parts(), max_size=2),
        arguments=texts, input=texts, code=maybe(texts), name=texts, call_id=ids,
    )))
    return item


locators = optional_fields(
    item_id=maybe(ids), output_index=maybe(small), content_index=maybe(small),
    summary_index=maybe(small), sequence_number=st.integers(0, 12), response_id=maybe(st.sampled_from(["r1", "r2", ""])),
)

RESPONSE_TEXT_TYPES = [
    "response.output_text", "response.refusal", "response.reasoning_text", "response.reasoning_summary_text",
    "response.function_call_arguments", "response.custom_tool_call_input", "response.mcp_call_arguments",
    "response.code_interpreter_call_code",
]
REALTIME_TEXT_TYPES = [
    "response.output_text", "response.text", "response.output_audio_transcript", "response.audio_transcript",
    "response.function_call_arguments", "response.mcp_call_arguments",
]
DONE_FIELDS = ["text", "refusal", "arguments", "input", "code", "transcript"]


@st.composite
def stream_event(draw, realtime: bool) -> dict:
    ev = draw(locators)
    choice = draw(st.integers(0, 10))
    text_types = REALTIME_TEXT_TYPES if realtime else RESPONSE_TEXT_TYPES
    if choice <= 3:
        ev["type"] = draw(st.sampled_from(text_types)) + ".delta"
        ev.update(draw(optional_fields(delta=texts)) if choice == 0 else {"delta": draw(texts)})
        if realtime:
            ev.update(draw(optional_fields(call_id=ids, name=texts)))
    elif choice == 4:
        ev["type"] = draw(st.sampled_from(text_types)) + ".done"
        ev.update(draw(optional_fields(**{f: texts for f in DONE_FIELDS})))
    elif choice == 5:
        ev["type"] = "response.output_item." + draw(st.sampled_from(["added", "done"]))
        ev.update(draw(optional_fields(item=st.one_of(items(), st.none(), st.just("x")))))
    elif choice == 6:
        family = draw(st.sampled_from(["content_part", "reasoning_part", "reasoning_summary_part"] if not realtime else ["content_part"]))
        ev["type"] = f"response.{family}." + draw(st.sampled_from(["added", "done"]))
        ev.update(draw(optional_fields(part=st.one_of(parts(), st.none()))))
    elif choice == 7:
        life = ["response.created", "response.done"] if realtime else [
            "response.created", "response.in_progress", "response.queued", "response.completed", "response.incomplete", "response.failed"]
        ev["type"] = draw(st.sampled_from(life))
        response = draw(optional_fields(
            id=st.sampled_from(["r1", "r2", ""]), status=st.sampled_from(["completed", "in_progress"]),
            output=st.one_of(st.none(), st.lists(st.one_of(items(), st.just(3)), max_size=3)),
            usage=st.one_of(st.none(), st.just({}), st.just({"total_tokens": 3})),
        ))
        ev.update(draw(optional_fields(response=st.one_of(st.just(response), st.none()), usage=st.just({"total_tokens": 9}))))
    elif choice == 8:
        ev["type"] = "response.output_text.annotation.added"
        ev.update(draw(optional_fields(annotation=st.one_of(st.none(), st.just({"type": "url_citation"}), st.integers()), annotation_index=small)))
    elif choice == 9:
        ev["type"] = draw(st.sampled_from(["error", "keepalive", "response.audio.delta", "session.created", "x.y", ""]))
        ev.update(draw(optional_fields(message=st.one_of(texts, st.integers()), error=st.one_of(st.just({"message": "bad"}), st.just({}), st.just("e")), code=texts)))
    else:
        # malformed: wrong types on read fields
        ev["type"] = draw(st.sampled_from(text_types)) + draw(st.sampled_from([".delta", ".done"]))
        bad_field = draw(st.sampled_from(["delta", "item_id", "output_index", "content_index", "sequence_number", "text", "type"]))
        ev[bad_field] = draw(st.sampled_from([1, -1, 1.5, "3", [], {}, True, 2**64]))
    return ev


@st.composite
def chat_chunk(draw) -> dict:
    chunk = draw(optional_fields(
        id=st.sampled_from(["c1", "c2"]), object=st.sampled_from(["chat.completion.chunk", "chat.completion.chunk", "", "other", 5]),
        model=st.just("m"), created=st.integers(0, 10), usage=st.one_of(st.none(), st.just({"total_tokens": 5})),
        system_fingerprint=maybe(st.just("fp")), obfuscation=st.just("zz"), error=st.one_of(st.none(), st.just({"message": "e"}), st.just(1)),
    ))
    tool_call = optional_fields(
        index=st.one_of(small, small, st.just(-1), st.just("0")), id=maybe(st.sampled_from(["call_1", "call_2"])),
        type=maybe(st.just("function")),
        function=optional_fields(name=texts, arguments=texts),
    )
    delta = optional_fields(
        role=maybe(st.just("assistant")), content=st.one_of(st.none(), texts, st.lists(st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
            st.fixed_dictionaries({"type": st.just("thinking"), "thinking": st.one_of(texts, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2))}),
            st.just({"type": "image"}), st.just(3)), max_size=2)),
        refusal=maybe(texts), reasoning_content=texts,
        tool_calls=st.one_of(st.none(), st.lists(st.one_of(tool_call, tool_call, st.just("junk")), min_size=1, max_size=3)),
        n=st.one_of(st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False, width=32), st.just(2**63), st.just(2**64 - 1)),
        tags=st.lists(st.one_of(texts, st.integers(0, 3)), max_size=2),
        flag=st.booleans(), extra=optional_fields(a=texts, b=small),
    )
    choice = optional_fields(
        index=st.one_of(small, st.just(-1), st.just(1.0)), delta=st.one_of(delta, st.none(), st.just([])),
        finish_reason=st.one_of(st.none(), st.just(""), st.just("stop"), st.just(5)),
        logprobs=st.one_of(st.none(), st.just({"content": [{"token": "a"}], "refusal": None}), st.just({"content": []}), st.just("x")),
    )
    chunk.update(draw(optional_fields(choices=st.one_of(st.none(), st.lists(choice, max_size=3), st.just([1])))))
    return chunk


odd_payloads = st.sampled_from(ODD_PAYLOADS[:20] + [b"[DONE]", b'{"a":NaN}', b'{"type":"response.output_text.delta","delta":"\\ud800"}', b'{"x":1e999}'])


def payloads_for(kind: str):
    if kind == "ChatCore":
        base = chat_chunk()
    else:
        base = stream_event(kind == "RealtimeCore")
    encoded = base.flatmap(json_payload)
    return st.lists(st.one_of(encoded, encoded, encoded, odd_payloads), max_size=25)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_sequences_agree(kind, data):
    payloads = data.draw(payloads_for(kind))
    rust, py = pair(kind)
    for n, payload in enumerate(payloads):
        assert py.add_json(payload) == rust.add_json(payload), (n, payload)
        assert_same(rust, py, kind, f"after {n}: {payload!r}")


@st.composite
def raw_json_value(draw, depth=0):
    """Arbitrary JSON-ish values written by hand: odd numbers, escapes, invalid bytes."""
    leaf = st.sampled_from([
        b"0", b"-0", b"1", b"-1", b"1.5", b"-0.0", b"1e2", b"1E-2", b"1e400", b"-1e400", b"18446744073709551615",
        b"18446744073709551616", b"-9223372036854775808", b"-9223372036854775809", b"1" * 30, b"true", b"false",
        b"null", b'""', b'"a"', b'"\\ud800"', b'"\\udc00x"', b'"\\ud83d\\ude00"', b'"\\u00e9"', b'"\xff"', b'"\\n\\t\\/"',
        b"NaN", b"01", b"1.", b'"\x01"',
    ])
    if depth > 2:
        return draw(leaf)
    kind = draw(st.integers(0, 4))
    if kind == 0:
        elems = draw(st.lists(raw_json_value(depth + 1), max_size=3))
        return b"[" + b",".join(elems) + b"]"
    if kind == 1:
        keys = st.sampled_from([b'"a"', b'"b"', b'"type"', b'"delta"', b'"content"', b'"index"', b'"\\ud800"', b'"text"'])
        entries = draw(st.lists(st.tuples(keys, raw_json_value(depth + 1)), max_size=3))
        return b"{" + b",".join(k + b":" + v for k, v in entries) + b"}"
    return draw(leaf)


@st.composite
def raw_event(draw, kind: str) -> bytes:
    if kind == "ChatCore":
        fields = [b'"object":"chat.completion.chunk"']
        delta = draw(raw_json_value())
        fields.append(b'"choices":[{"index":' + draw(st.sampled_from([b"0", b"1", b"-0", b"1e400"])) + b',"delta":' + delta + b"}]")
        for key in draw(st.lists(st.sampled_from([b"usage", b"id", b"moderation", b"error", b"x"]), max_size=2)):
            fields.append(b'"' + key + b'":' + draw(raw_json_value()))
    else:
        text_types = REALTIME_TEXT_TYPES if kind == "RealtimeCore" else RESPONSE_TEXT_TYPES
        t = draw(st.sampled_from([x + ".delta" for x in text_types] + ["response.output_item.done", "response.content_part.done", "response.created", "error"]))
        fields = [b'"type":"' + t.encode() + b'"']
        for key in draw(st.lists(st.sampled_from([b"delta", b"item", b"part", b"response", b"item_id", b"output_index", b"message", b"x", b"text"]), max_size=3)):
            fields.append(b'"' + key + b'":' + draw(raw_json_value()))
    draw(st.randoms()).shuffle(fields)
    return b"{" + b",".join(fields) + b"}"


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_raw_json_agrees(kind, data):
    payloads = data.draw(st.lists(raw_event(kind), max_size=6))
    rust, py = pair(kind)
    for payload in payloads:
        assert py.add_json(payload) == rust.add_json(payload), payload
        assert_same(rust, py, kind, repr(payload))


# ---------------------------------------------------------------------------------------------
# Linearity


def _deltas(kind: str, n: int) -> tuple[bytes, list[bytes]]:
    if kind == "ChatCore":
        first = b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":""}}]}}]}'
        delta = b'{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ab","tool_calls":[{"index":0,"function":{"arguments":"xy"}}]}}]}'
    else:
        first = b'{"type":"response.output_item.added","output_index":0,"item":{"id":"m","type":"message","content":[]}}'
        delta = b'{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"ab"}'
    return first, [delta] * n


def _cpu_seconds(kind: str, n: int) -> float:
    """CPU time of this process (not wall time: other processes on a busy machine do not count) to
    add n deltas, the best of three."""
    first, deltas = _deltas(kind, n)
    best = float("inf")
    for _ in range(3):
        core = getattr(pure, kind)()
        core.add_json(first)
        start = time.process_time()
        for d in deltas:
            core.add_json(d)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("kind", KINDS)
def test_many_deltas_stay_linear(kind):
    n = 100_000
    first, deltas = _deltas(kind, n)
    core = getattr(pure, kind)()
    core.add_json(first)
    for d in deltas:
        core.add_json(d)
    snap = json.loads(core.snapshot_json())
    assert core.events() == n + 1
    assert "ab" * n in json.dumps(snap)
    # A complexity check, not a speed check: four times the deltas cost about four times the CPU
    # time when appending is linear, sixteen times when each delta re-copies the text so far.
    ratio = _cpu_seconds(kind, 40_000) / _cpu_seconds(kind, 10_000)
    assert ratio < 8, ratio


@st.composite
def scripted_stream(draw, kind: str) -> list[bytes]:
    """A coherent stream (item added, parts, deltas, done events, final response), with random
    events dropped or their texts changed: exercises settling and its warnings."""
    realtime = kind == "RealtimeCore"
    events: list[dict] = []
    output = []
    n_items = draw(st.integers(1, 3))
    for k in range(n_items):
        item_id = draw(st.sampled_from([f"it_{k}", "", f"it_{k}"]))
        loc = {"output_index": k} if draw(st.booleans()) else {}
        if item_id:
            loc["item_id"] = item_id
        if realtime and draw(st.booleans()):
            loc["response_id"] = "r1"
        item_kind = draw(st.sampled_from(["message", "function_call", "reasoning"] if not realtime else ["message", "function_call"]))
        item = {"id": item_id, "type": item_kind} if item_id else {"type": item_kind}
        events.append({"type": "response.output_item.added", "item": dict(item, **({"content": []} if item_kind == "message" else {})), **loc})
        if item_kind == "function_call":
            pieces = draw(st.lists(texts, max_size=3))
            for piece in pieces:
                events.append({"type": "response.function_call_arguments.delta", "delta": piece, **loc})
            full = draw(st.sampled_from(["".join(pieces), "other", ""]))
            events.append({"type": "response.function_call_arguments.done", "arguments": full, **loc})
            final_item = dict(item, arguments=draw(st.sampled_from([full, "", "changed"])), status="completed")
        else:
            family = "response.output_text" if item_kind == "message" else "response.reasoning_text"
            ptype = ("text" if realtime else "output_text") if item_kind == "message" else "reasoning_text"
            parts_final = []
            for c in range(draw(st.integers(1, 2))):
                ploc = dict(loc, content_index=c) if draw(st.booleans()) else dict(loc)
                part_family = "response.content_part" if item_kind == "message" else "response.reasoning_part"
                events.append({"type": part_family + ".added", "part": {"type": ptype, "text": ""}, **ploc})
                pieces = draw(st.lists(texts, max_size=3))
                for piece in pieces:
                    events.append({"type": family + ".delta", "delta": piece, **ploc})
                full = draw(st.sampled_from(["".join(pieces), "other", ""]))
                events.append({"type": family + ".done", "text": full, **ploc})
                done_part = {"type": ptype, "text": draw(st.sampled_from([full, "", "changed"]))}
                if ptype == "output_text" and draw(st.booleans()):
                    done_part["annotations"] = draw(st.sampled_from([[], [{"type": "url_citation"}]]))
                events.append({"type": part_family + ".done", "part": done_part, **ploc})
                parts_final.append(done_part)
            final_item = dict(item, content=draw(st.sampled_from([parts_final, [], parts_final[:1]])), status="completed")
        events.append({"type": "response.output_item.done", "item": final_item, **loc})
        output.append(final_item)
    final_type = "response.done" if realtime else draw(st.sampled_from(["response.completed", "response.incomplete"]))
    created = {"type": "response.created", "response": {"id": "r1", "status": "in_progress", "output": []}}
    final = {"type": final_type, "response": {"id": "r1", "status": "completed", "output": draw(st.sampled_from([output, [], output[::-1]]))}}
    events = [created] + events + [final]
    keep = draw(st.lists(st.booleans(), min_size=len(events), max_size=len(events)))
    events = [e for e, k in zip(events, keep) if k or draw(st.integers(0, 3)) > 0]
    if not realtime:
        for n, e in enumerate(events):
            e["sequence_number"] = n
    return [json.dumps(e).encode() for e in events]


@st.composite
def scripted_chat(draw) -> list[bytes]:
    chunks = [{"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    for _ in range(draw(st.integers(1, 8))):
        entry = draw(st.one_of(
            st.fixed_dictionaries({"index": st.integers(0, 1)}, optional={"id": st.sampled_from(["a", "b"]), "type": st.just("function"), "function": optional_fields(name=texts, arguments=texts)}),
            st.fixed_dictionaries({"id": st.sampled_from(["a", "b"])}, optional={"function": optional_fields(arguments=texts)}),
            st.sampled_from(["junk", 3, None]),
        ))
        delta = draw(optional_fields(content=texts, reasoning_content=texts, role=st.just("assistant")))
        if draw(st.booleans()):
            delta["tool_calls"] = [entry]
        choice = {"index": draw(st.sampled_from([0, 0, 1])), "delta": delta}
        choice.update(draw(optional_fields(finish_reason=st.sampled_from([None, "", "stop", "tool_calls"]), logprobs=st.sampled_from([None, {"content": [{"token": "t"}]}, {"content": [], "refusal": [{"token": "r"}]}]))))
        chunk = {"object": "chat.completion.chunk", "choices": [choice]}
        chunk.update(draw(optional_fields(usage=st.sampled_from([None, {"total_tokens": 3}]), system_fingerprint=st.sampled_from([None, "fp"]))))
        chunks.append(chunk)
    return [json.dumps(c).encode() for c in chunks] + [b"[DONE]"]


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_scripted_streams_agree(kind, data):
    payloads = data.draw(scripted_chat() if kind == "ChatCore" else scripted_stream(kind))
    rust, py = pair(kind)
    for n, payload in enumerate(payloads):
        assert py.add_json(payload) == rust.add_json(payload), (n, payload)
        assert_same(rust, py, kind, f"after {n}: {payload!r}")
    stream = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    rust, py = pair(kind)
    for chunk in chunked(stream, data.draw(st.integers(1, 200))):
        assert py.feed(chunk) == rust.feed(chunk)
    assert_same(rust, py, kind, "fed")


def test_the_pure_cores_mirror_the_rust_files():
    """A protocol's two implementations sit side by side: each ``pub struct <Name>Accumulator`` of
    ``rust/src/accumulate/<file>.rs`` has its twin ``<Name>Core`` in
    ``rapidsse/_pure/accumulate/<file>.py``, the pure package exports no other core, and each of
    its modules is named after a Rust file."""
    rust_dir = ROOT / "rust" / "src" / "accumulate"
    if not rust_dir.is_dir():
        pytest.skip("no Rust sources here (an installed wheel)")
    rust_files = {path.stem: path.read_text(encoding="utf-8") for path in rust_dir.glob("*.rs")}
    rust = {
        name + "Core": stem
        for stem, source in rust_files.items()
        for name in re.findall(r"^pub struct (\w+)Accumulator\b", source, re.M)
    }
    assert rust, "no accumulator found in rust/src/accumulate"
    homes = {name: getattr(pure, name).__module__ for name in pure.__all__}
    assert homes == {name: f"{pure.__name__}.{stem}" for name, stem in rust.items()}
    modules = {path.stem for path in Path(pure.__file__).parent.glob("*.py")} - {"__init__"}
    assert modules <= set(rust_files), sorted(modules - set(rust_files))
