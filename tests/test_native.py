"""The Structs the Rust core builds itself (``rust/src/bindings/native.rs``) against msgspec's.

On the Rust backend, ``EventDecoder`` builds the plain events of a stream without msgspec and
hands msgspec the rest. Whatever the builder returns must be exactly what msgspec decodes: the
same class, equal fields of the same types, all the way down. Where msgspec refuses a payload,
the builder must decline it (then msgspec's error reaches the user as before). These tests hold
it to that on every corpus payload, on hand-made edge cases and on random mutations.

The builder is part of the Rust backend only: in the pure-Python run these tests are skipped
(the rest of the suite covers both backends' decoders, which give equal events).
"""

from __future__ import annotations

import gc
import json
import random
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rapidsse
from rapidsse import _native, _wire, chat, decoding, realtime, responses
from rapidsse._schema import decode_lenient

from .conftest import chunked, corpus_files, native

pytestmark = pytest.mark.skipif(
    rapidsse.BACKEND != "rust" or native is None, reason="the Struct builder is the Rust backend's"
)

PROTOCOLS = {"responses": responses, "chat": chat}


def schema(protocol: str) -> Any:
    return _native.native_schema(native, PROTOCOLS[protocol].Event)


def deep_same(a: Any, b: Any, path: str = "$") -> None:
    """``a`` and ``b`` are the same value: same types (int is not float, not bool), equal."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, msgspec.Struct):
        # (No field: `_wire` is compared here, None and unset alike.)
        assert getattr(a, "_wire", None) == getattr(b, "_wire", None), f"{path}._wire"
        for name in a.__struct_fields__:
            deep_same(getattr(a, name), getattr(b, name), f"{path}.{name}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            deep_same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            deep_same(a[k], b[k], f"{path}.{k}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def strip_wire(obj: Any) -> Any:
    """``obj`` with ``_wire`` None at every depth (a copy)."""
    if isinstance(obj, list):
        return [strip_wire(x) for x in obj]
    if isinstance(obj, msgspec.Struct):
        copy = msgspec.structs.replace(obj, **{n: strip_wire(getattr(obj, n)) for n in obj.__struct_fields__})
        if hasattr(type(obj), "_wire"):
            copy._wire = None
        return copy
    return obj


def payloads(protocol: str) -> list[bytes]:
    out = []
    for path in corpus_files(protocol):
        for event in rapidsse.SSEDecoder(None).feed(path.read_bytes()):
            if event.data and event.data != "[DONE]" and "\n" not in event.data:
                out.append(event.data.encode())
    return out


def check(protocol: str, batch: list[bytes]) -> int:
    """Every payload of ``batch`` built natively equals msgspec's; declined where msgspec fails.
    Returns how many were built."""
    decode = msgspec.json.Decoder(PROTOCOLS[protocol].Event).decode
    built = 0
    for payload, ours in zip(batch, schema(protocol).decode_each(batch)):
        try:
            theirs = decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            assert ours is None, payload
            continue
        try:
            # The wire info of the Python pass, the reference: `_wire` is compared with the
            # other fields, at every depth.
            _wire.compute(theirs, payload)
        except msgspec.DecodeError:
            # A key that is not UTF-8: msgspec's Struct decoder skips it, the builder declines
            # it, the Python pass cannot read the payload: the fields alone are compared.
            theirs = strip_wire(theirs)
            ours = None if ours is None else strip_wire(ours)
        if ours is not None:
            built += 1
            deep_same(ours, theirs)
            assert msgspec.json.encode(ours) == msgspec.json.encode(theirs)
    return built


@pytest.mark.parametrize("protocol", ["responses", "chat"])
def test_every_corpus_payload_built_equals_msgspec(protocol):
    batch = payloads(protocol)
    built = check(protocol, batch)
    # The builder is for the bulk of a stream: deltas and chunks. (Items, parts and responses
    # hold tagged unions, which it leaves to msgspec.)
    floor = 0.85 if protocol == "responses" else 1.0
    assert built >= floor * len(batch), (built, len(batch))


def test_the_hot_classes_are_built_natively():
    classes = set(schema("responses").native_classes())
    assert {"OutputTextDelta", "OutputTextDone", "FunctionCallArgumentsDelta", "ReasoningSummaryTextDelta"} <= classes
    assert {"ChatCompletionChunk", "ChunkChoice", "ChoiceDelta", "ToolCallDelta"} <= set(schema("chat").native_classes())


DELTA = '"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0'

ACCEPTED = [
    "{" + DELTA + ',"delta":"plain"}',
    "{" + DELTA + r',"delta":"esc \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00 \u0000"}',
    "{" + DELTA + ',"delta":"caf\u00e9 \u4e2d\u6587 \U0001f600"}',
    "{" + DELTA + ',"delta":"' + "x" * 100 + '\u00e9"}',
    '{ "type" : "response.output_text.delta" , "delta" : "spaced" ,\n\t"sequence_number" : 7 }\r\n ',
    '{"type":"response.output_text.delta","sequence_number":3,"delta":"reordered","item_id":"x"}',
    "{" + DELTA + ',"delta":"","unknown":{"a":[1,2.5,-0,1e400,null,true,"\\ud83d\\ude00"]},"more":123456789012345678901234567890}',
    "{" + DELTA + ',"delta":"x","logprobs":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]}',
    "{" + DELTA + ',"delta":"x","logprobs":[{"token":"a","logprob":-1,"top_logprobs":[{"token":"b","logprob":-2.5e-3}]}]}',
    "{" + DELTA + ',"delta":"x","logprobs":null,"obfuscation":null,"sequence_number":null}',
    "{" + DELTA + ',"delta":"x","sequence_number":9223372036854775807}',
    "{" + DELTA + ',"delta":"x","sequence_number":-9223372036854775808}',
    '{"type":"response.output_text.done","item_id":"m","output_index":0,"content_index":0,"text":"done"}',
    '{"type":"keepalive"}',
    '{"type":"keepalive","sequence_number":1}',
]

REFUSED_BY_MSGSPEC = [
    "{" + DELTA + "}",  # a required field missing
    "{" + DELTA + ',"delta":1}',
    "{" + DELTA + ',"delta":"x","sequence_number":1.5}',
    "{" + DELTA + ',"delta":"x","sequence_number":"1"}',
    "{" + DELTA + ',"delta":"x","sequence_number":true}',
    "{" + DELTA + ',"delta":"x","logprobs":{}}',
    "{" + DELTA + ',"delta":"x","logprobs":[1]}',
    "{" + DELTA + ',"delta":"x",}',
    "{" + DELTA + ',"delta":"x"',
    "{" + DELTA + ',"delta":"x"}}',
    "{" + DELTA + ',"delta":"x"} x',
    "{" + DELTA + ',"delta":"x","u":[1,]}',
    "{" + DELTA + ',"delta":"x","u":01}',
    "{" + DELTA + ',"delta":"x\\q"}',
    '{"type":"response.output_text.delta","delta":"x","type":"response.refusal.delta"}',
    '{"type":"response.not.a.type","delta":"x"}',
    "[1]",
    "",
]

DECLINED = [
    # msgspec reads these; the builder leaves them to it.
    '{"delta":"x","type":"response.output_text.delta"}',  # the tag not first
    "{" + DELTA + ',"delta":"x","delta":"y"}',  # a duplicate key
    "{" + DELTA + r',"delt\u0061":"x"}',  # an escape in a key
    "{" + DELTA + r',"delta":"\ud83d"}',  # a lone surrogate
    "{" + DELTA + ',"delta":"x","sequence_number":123456789012345678901234567890}',
    "{" + DELTA + ',"delta":"tab\there"}',  # a raw control character
    '{"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"m","content":[]}}',
]


@pytest.mark.parametrize("payload", ACCEPTED)
def test_built(payload):
    assert check("responses", [payload.encode()]) == 1


@pytest.mark.parametrize("payload", REFUSED_BY_MSGSPEC + DECLINED)
def test_declined(payload):
    assert schema("responses").decode_each([payload.encode()]) == [None]
    check("responses", [payload.encode()])


def test_invalid_utf8_is_declined():
    raw = b"{" + DELTA.encode() + b',"delta":"\xff\xfe"}'
    assert schema("responses").decode_each([raw]) == [None]
    bad_unknown = b"{" + DELTA.encode() + b',"delta":"x","u":"\xc3"}'
    assert schema("responses").decode_each([bad_unknown]) == [None]


def test_chat_edge_cases():
    cases = [
        '{"id":"c","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"part"}]}}]}',
        '{"id":"c","choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"t"}]}]}}]}',
        '{"id":"c","created":1.5,"choices":[]}',
        '{"id":"c","created":17,"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\":1}"}}]}}]}',
        '{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens_details":{"reasoning_tokens":0}}}',
        '{"id":"c","error":{"message":"m","code":500}}',
        '{"id":"c","error":{"message":"m","code":"x"}}',
        '{"choices":[{"delta":{"content":{"type":"text"}}}]}',  # msgspec refuses
        '{"choices":[{"index":"0"}]}',  # msgspec refuses
        '{"id":"c","choices":[{"index":0,"delta":{"content":[{"type":"image_url","image_url":{"url":"u"}}]}}]}',
    ]
    built = check("chat", [c.encode() for c in cases])
    assert built >= 7


def mutations(payload: bytes, rng: random.Random) -> bytes:
    b = bytearray(payload)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(5)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(i, len(b) - 1)]
        elif op == 1:
            b.insert(i, rng.choice(b'{}[],:"\\ 0123456789-.eEtrufalsn\xc3\xa9\x01'))
        elif op == 2 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 3:
            b[i:i] = rng.choice([b'"\\u00e9"', b"null", b"-0", b"1e999", b'"k":1,', b"[", b"}", b"\\ud83d"])
        elif b:
            j = rng.randrange(len(b))
            b[i:j] = b""
    return bytes(b)


@pytest.mark.parametrize("protocol", ["responses", "chat"])
def test_random_mutations_agree_with_msgspec(protocol):
    rng = random.Random(20261130)
    corpus = [p for p in payloads(protocol) if len(p) < 2000]
    sample = rng.sample(corpus, min(400, len(corpus)))
    batch = [mutations(p, rng) for p in sample for _ in range(25)]
    # Many mutants stay valid (a changed digit or letter): a fair share is built and compared.
    assert check(protocol, batch) > len(batch) // 5


def test_no_reference_leaks():
    """Built and declined objects release everything: the classes (each instance holds one
    reference to its heap type) and the shared defaults come back to their counts."""
    sch = schema("responses")
    good = ("{" + DELTA + ',"delta":"x","logprobs":[{"token":"a","logprob":-1.0,"top_logprobs":[]}]}').encode()
    declined = ("{" + DELTA + ',"delta":"x","logprobs":[{"token":"a"}],"sequence_number":1.5}').encode()
    gc.collect()
    before = (sys.getrefcount(responses.OutputTextDelta), sys.getrefcount(responses.Logprob))
    for _ in range(3):
        out = sch.decode_each([good, declined] * 500)
        assert out.count(None) == 500
        del out
    gc.collect()
    after = (sys.getrefcount(responses.OutputTextDelta), sys.getrefcount(responses.Logprob))
    assert after == before


def test_strings_reused_across_events_are_equal_strings():
    sch = schema("responses")
    batch = [("{" + DELTA + f',"delta":"d{i}","obfuscation":"same"}}').encode() for i in range(50)]
    out = sch.decode_each(batch)
    assert [e.delta for e in out] == [f"d{i}" for i in range(50)]
    assert {e.item_id for e in out} == {"msg_1"} and {e.obfuscation for e in out} == {"same"}


def test_decoder_with_and_without_the_builder_give_equal_events(monkeypatch):
    for protocol in ("responses", "chat"):
        for path in corpus_files(protocol)[:20]:
            chunks = chunked(path.read_bytes(), 97)
            with_builder = list(rapidsse.iter_events(chunks, protocol=protocol, on_error="keep"))
            monkeypatch.setattr(_native, "ENABLED", False)
            without = list(rapidsse.iter_events(chunks, protocol=protocol, on_error="keep"))
            monkeypatch.setattr(_native, "ENABLED", True)
            assert len(with_builder) == len(without)
            for a, b in zip(with_builder, without):
                if isinstance(a, decoding.InvalidEvent):
                    assert type(b) is type(a) and a.raw == b.raw
                else:
                    deep_same(a, b)


def test_ints_reused_across_events_keep_their_values():
    sch = schema("chat")
    created = [1756315696, 1756315696, 1756315697, 1756315696, 7, -7, 2**40, -6, -5, 0, 255, 256, 257, -1] + [1756315696] * 40 + list(range(10**6, 10**6 + 40))
    batch = [f'{{"id":"c","created":{c},"choices":[]}}'.encode() for c in created]
    out = sch.decode_each(batch)
    assert [e.created for e in out] == created
    assert all(type(e.created) is int for e in out)


@pytest.mark.parametrize("length", [1, 3, 4, 7, 8, 9, 15, 16, 17, 24, 31, 33, 52, 64])
def test_cached_strings_differing_in_one_byte_are_not_confused(length):
    sch = schema("responses")
    ids = []
    for at in range(length):
        ids.append("a" * length)
        ids.append("a" * at + "b" + "a" * (length - at - 1))
    batch = [('{"type":"response.output_text.delta","item_id":"%s","delta":"x"}' % i).encode() for i in ids]
    assert [e.item_id for e in sch.decode_each(batch)] == ids


# Shapes: runs of like events built by comparing fixed bytes and reading only the holes.

RUN = (
    '{{"type":"response.output_text.delta","sequence_number":{seq},"item_id":"msg_1",'
    '"output_index":0,"content_index":0,"delta":{delta},"logprobs":[],"obfuscation":{obf}}}'
)


def run_payload(seq: Any = 1, delta: str = '"x"', obf: str = '"ab"') -> bytes:
    return RUN.format(seq=seq, delta=delta, obf=obf).encode()


def test_a_run_of_deltas_is_built_through_a_shape_as_msgspec_builds_it():
    deltas = ['" word"', '"line\\nnext \\"q\\" \\u00e9\\ud83d\\ude00"', '"\u00e9t\u00e9"', '""', '"' + "y" * 300 + '"']
    batch = [run_payload(i, deltas[i % len(deltas)], '"o%d"' % i) for i in range(60)]
    ours, shaped = schema("responses").decode_counting(batch)
    # The first two are read member by member (the shape is learned from their difference).
    assert shaped == len(batch) - 2
    assert check("responses", batch) == len(batch)
    assert [e.delta for e in ours] == [msgspec.json.decode(p)["delta"] for p in batch]


def test_payloads_off_the_shape_are_built_member_by_member_or_declined():
    """Each odd payload comes after a learned run: msgspec's answer, whatever the shape."""
    odd = [
        run_payload(5, "null"),
        run_payload(5, "5"),
        run_payload(5, '"\\ud800"'),
        run_payload(5, '"a\\q"'),
        run_payload(5, '"a'),
        run_payload(5.5),
        run_payload(-5),
        run_payload(2**64),
        run_payload("05"),
        run_payload(5, obf="[1, {}]"),
        run_payload(5, obf='"\\u0041"'),
        run_payload(5, obf='"\u00e9"'),
        run_payload(5).replace(b"msg_1", b"msg_2"),
        run_payload(5).replace(b'"content_index":0', b'"content_index":1'),
        run_payload(5).replace(b'"logprobs":[]', b'"logprobs":[{"token":"a","logprob":-1.0,"top_logprobs":[]}]'),
        run_payload(5).replace(b"response.output_text.delta", b"response.refusal.delta"),
        run_payload(5) + b" ",
        run_payload(5) + b"x",
        run_payload(5).replace(b'"delta":', b'"delta" :'),
        run_payload(5).replace(b"}", b',"extra":1}'),
        run_payload(5).replace(b'"item_id":"msg_1",', b""),
        run_payload(5)[:-1],
        run_payload(5, '"a\x01"'),
        b"[]",
        b"{}",
    ]
    for payload in odd:
        batch = [run_payload(1), run_payload(2, '"y"', '"cd"'), run_payload(3, '"z"'), payload, run_payload(4)]
        check("responses", batch)
    invalid_utf8 = run_payload(5).replace(b'"ab"', b'"\xff"')
    assert schema("responses").decode_each([run_payload(1), run_payload(2, '"y"'), invalid_utf8]) == [
        *schema("responses").decode_each([run_payload(1), run_payload(2, '"y"')]),
        None,
    ]


def test_fields_kept_by_a_shape_are_shared_only_when_immutable():
    batch = [run_payload(i, '"d%d"' % i) for i in range(10)]
    out, shaped = schema("responses").decode_counting(batch)
    assert shaped == 8
    # A new empty list for each event, as msgspec makes: appending to one changes no other.
    assert len({id(e.logprobs) for e in out}) == len(out)
    out[5].logprobs.append(1)
    assert [len(e.logprobs) for e in out] == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert {e.item_id for e in out} == {"msg_1"} and [e.sequence_number for e in out] == list(range(10))


def test_chat_chunks_are_built_through_a_shape():
    batch = [
        (
            '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1756315696,"model":"m",'
            '"choices":[{"index":0,"delta":{"content":"t%d"},"logprobs":null,"finish_reason":null}],'
            '"usage":null}' % i
        ).encode()
        for i in range(30)
    ]
    _, shaped = schema("chat").decode_counting(batch)
    assert shaped == 28
    assert check("chat", batch) == 30


def test_no_reference_leaks_through_shapes():
    sch = schema("responses")
    batch = [run_payload(i, '"d%d"' % i, '"o%d"' % i) for i in range(400)]
    batch[200] = run_payload(200, "null")  # declined: msgspec decides
    gc.collect()
    before = sys.getrefcount(responses.OutputTextDelta)
    for _ in range(3):
        out, shaped = sch.decode_counting(batch)
        declined = out.count(None)
        del out
        assert shaped > 390 and declined == 1
    gc.collect()
    after = sys.getrefcount(responses.OutputTextDelta)  # (not inside the assert: pytest's
    assert after == before  # rewriting would hold one more reference while it calls)


CHUNK = (
    '{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1756315696,"model":"m",'
    '"choices":[{{"index":0,"delta":{{"content":{content}}},"logprobs":null,"finish_reason":null}}],'
    '"usage":null,"obfuscation":{obf}}}'
)


def chunk_payload(content: str = '"t"', obf: str = '"ab"') -> bytes:
    return CHUNK.format(content=content, obf=obf).encode()


def test_chunks_off_the_nested_shape_are_built_member_by_member_or_declined():
    """The choice and its delta are nested shapes: anything off them gets msgspec's answer."""
    base = chunk_payload()
    odd = [
        chunk_payload("null"),
        chunk_payload("5"),
        chunk_payload('[{"type":"text","text":"x"}]'),
        chunk_payload('"\\ud800"'),
        chunk_payload('"a\\n\\u00e9"'),
        base.replace(b'"choices":[{', b'"choices":[ {'),
        base.replace(b'}],"usage"', b'},{"index":1,"delta":{},"logprobs":null,"finish_reason":null}],"usage"'),
        base.replace(b'"choices":[{"index":0,"delta":{"content":"t"},"logprobs":null,"finish_reason":null}]', b'"choices":[]'),
        base.replace(b'{"content":"t"}', b'{"role":"assistant","content":"t"}'),
        base.replace(b'{"content":"t"}', b'{"content":"t","content":"u"}'),
        base.replace(b'{"content":"t"}', b'{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}'),
        base.replace(b'"finish_reason":null', b'"finish_reason":"stop"'),
        base.replace(b'"finish_reason":null', b'"finish_reason":7'),
        base.replace(b'"index":0', b'"index":1'),
        base.replace(b'"index":0', b'"index":-1'),
        base.replace(b'"index":0', b'"index":0.5'),
        base.replace(b'"logprobs":null', b'"logprobs":{"content":[]}'),
        base.replace(b'"usage":null', b'"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}'),
        base.replace(b'"choices":[{', b'"choices":{'),
        base.replace(b'{"content":"t"}', b'{"content":"t"'),
        base[:-1],
    ]
    for payload in odd:
        batch = [chunk_payload('"a"'), chunk_payload('"b"', '"cd"'), chunk_payload('"c"'), payload, chunk_payload('"d"')]
        check("chat", batch)
    # Runs whose nested values change shape too are still built as msgspec builds them.
    for i, payload in enumerate(odd):
        batch = [payload, payload.replace(b'"ab"', b'"xy"'), odd[(i + 1) % len(odd)], payload]
        check("chat", batch)


def test_nested_shapes_give_each_event_its_own_nested_objects():
    batch = [chunk_payload('"t%d"' % i) for i in range(12)]
    out, shaped = schema("chat").decode_counting(batch)
    assert shaped == 10
    choices = [e.choices for e in out]
    assert len({id(c) for c in choices}) == 12 and len({id(c[0]) for c in choices}) == 12
    assert len({id(c[0].delta) for c in choices}) == 12
    assert [c[0].delta.content for c in choices] == ["t%d" % i for i in range(12)]
    out[3].choices[0].delta.content = "changed"
    assert out[4].choices[0].delta.content == "t4"


# --- Wire info (`_wire`) against the Python pass ----------------------------------------------

_JSON_LEAVES = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("abxyz_", min_size=1, max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _small_payloads(protocol: str) -> list[dict[str, Any]]:
    return [msgspec.json.decode(p) for p in payloads(protocol) if len(p) < 1500][::7]


_SMALL = {}


def _sample(protocol: str) -> list[dict[str, Any]]:
    if protocol not in _SMALL:
        _SMALL[protocol] = _small_payloads(protocol)
    return _SMALL[protocol]


def _mutate(doc: Any, draw: Any, depth: int = 0) -> Any:
    """``doc`` with unknown members added, known members nulled or dropped, at every depth."""
    if isinstance(doc, list):
        return [_mutate(x, draw, depth + 1) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for key, value in doc.items():
        op = draw(st.integers(0, 9))
        if op == 0 and key != "type":
            out[key] = None
        elif op == 1 and key != "type":
            continue
        else:
            out[key] = _mutate(value, draw, depth + 1)
    for i in range(draw(st.integers(0, 2))):
        out[f"x_{depth}_{i}"] = draw(_JSON)
    return out


@pytest.mark.parametrize("protocol", ["responses", "chat"])
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_wire_info_of_mutated_payloads_is_the_python_pass(protocol, data):
    """Real payloads with unknown members (nested objects, nulls, numbers), known members nulled
    or dropped, at every depth: the builder's ``_wire`` equals the Python pass's, and
    ``rapidsse.encode`` gives back the payload as a JSON value. Each mutant is decoded in a run of
    three that differ in one unknown value (so the third is built through a shape)."""
    doc = _mutate(data.draw(st.sampled_from(_sample(protocol))), data.draw)
    spaced = data.draw(st.booleans())
    run = []
    for i in range(3):
        variant = dict(doc, x_run=i)
        text = msgspec.json.encode(variant)
        if spaced:
            text = json.dumps(variant, separators=(", ", " : "), ensure_ascii=False).encode()
        run.append(text)
    check(protocol, run)
    for payload, ours in zip(run, schema(protocol).decode_each(run)):
        if ours is not None:
            assert msgspec.json.decode(rapidsse.encode(ours)) == msgspec.json.decode(payload)


def test_wire_objects_are_shared():
    """Events without unknown members share one Wire per class and set of present fields; a
    shape hit whose unknown members are all fixed shares the learned event's Wire."""
    raw = b'{"id":"c","choices":[{"index":0,"delta":{"content":"%d"},"finish_reason":null}]}'
    out = schema("chat").decode_each([raw % i for i in range(10)])
    wires = {id(e.choices[0]._wire) for e in out}
    assert len(wires) == 1 and out[0].choices[0]._wire.present == ("index", "finish_reason")
    assert all(e._wire is _wire.DEEP for e in out)
    raw = ("{" + DELTA + ',"delta":"%d","x_vendor":"fixed"}').encode()
    out = schema("responses").decode_each([raw % i for i in range(10)])
    assert len({id(e._wire) for e in out[2:]}) == 1
    assert rapidsse.extras(out[5]) == {"x_vendor": "fixed"}
    raw = ("{" + DELTA + ',"delta":"x","x_vendor":"%d"}').encode()
    out = schema("responses").decode_each([raw % i for i in range(10)])
    assert [rapidsse.extras(e) for e in out] == [{"x_vendor": str(i)} for i in range(10)]


# --- The native wire-info pass (``rust/src/bindings/wire.rs``) against the Python pass --------


def _python_pass(obj: Any, payload: bytes, monkeypatch: Any) -> Any:
    with monkeypatch.context() as m:
        m.setattr(_wire, "_native_compute", None)
        return _wire.compute(obj, payload)


def _pass_agrees(protocol_module: Any, batch: list[bytes], monkeypatch: Any) -> int:
    """Each payload decoded twice by msgspec (nested unknown types kept): the native pass gives
    every Struct the ``_wire`` the Python pass gives it. Returns how many it took on."""
    taken = 0
    for payload in batch:
        try:
            ours = decode_lenient(payload, protocol_module.Event)
            theirs = decode_lenient(payload, protocol_module.Event)
            _python_pass(theirs, payload, monkeypatch)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if native.wire_compute(ours, payload):
            taken += 1
            deep_same(ours, theirs)
    return taken


def _realtime_payloads() -> list[bytes]:
    out = []
    for path in corpus_files("realtime"):
        out += [line for line in path.read_bytes().splitlines() if line.strip()]
    return out


@pytest.mark.parametrize("protocol", ["responses", "chat", "realtime"])
def test_native_pass_is_the_python_pass_on_the_corpus(protocol, monkeypatch):
    module = {"responses": responses, "chat": chat, "realtime": realtime}[protocol]
    batch = _realtime_payloads() if protocol == "realtime" else payloads(protocol)
    taken = _pass_agrees(module, batch, monkeypatch)
    assert taken >= 0.99 * len(batch), (taken, len(batch))


@pytest.mark.parametrize("protocol", ["responses", "chat"])
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_native_pass_is_the_python_pass_on_mutated_payloads(protocol, data, monkeypatch):
    doc = _mutate(data.draw(st.sampled_from(_sample(protocol))), data.draw)
    payload = msgspec.json.encode(doc)
    if data.draw(st.booleans()):
        payload = json.dumps(doc, separators=(", ", " : "), ensure_ascii=False).encode()
    _pass_agrees(PROTOCOLS[protocol], [payload], monkeypatch)


def test_native_pass_of_lines_is_the_python_pass(monkeypatch):
    batch = [p for p in payloads("responses") if b'"item"' in p or b'"response"' in p][:300]
    lines = b"\n".join(batch) + b"\n\n"
    decode_lines = msgspec.json.Decoder(responses.Event).decode_lines
    ours, theirs = decode_lines(lines), decode_lines(lines)
    assert native.wire_compute_lines(ours, lines)
    with monkeypatch.context() as m:
        m.setattr(_wire, "_native_lines", None)
        _wire.compute_lines(theirs, lines)
    deep_same(ours, theirs)
    assert any(e._wire is not None for e in ours)


def test_native_pass_leaves_what_it_cannot_read_to_the_python_pass():
    delta = ("{" + DELTA + ',"delta":"x"').encode()
    for payload in [delta + rb',"x\u0061":1}', delta + b',"u":1,"u":2}', delta + b',"delta":"y"}']:
        obj = msgspec.json.decode(payload, type=responses.Event)
        assert not native.wire_compute(obj, payload)
        assert _wire.compute(obj, payload) is obj  # the Python pass took it


# --- The native writer (``wire_encode``) against the Python one -------------------------------


def _python_encode(obj: Any, monkeypatch: Any) -> bytes:
    with monkeypatch.context() as m:
        m.setattr(_wire, "_native_encode", None)
        return rapidsse.encode(obj)


@pytest.mark.parametrize("protocol", ["responses", "chat"])
def test_native_encode_is_the_python_encode_on_the_corpus(protocol, monkeypatch):
    written = total = 0
    for path in corpus_files(protocol):
        for event in rapidsse.iter_events([path.read_bytes()], protocol=protocol, on_error="skip"):
            if not isinstance(event, msgspec.Struct) or not hasattr(event, "_wire"):
                continue
            total += 1
            ours = native.wire_encode(event)
            if ours is not None:
                written += 1
                theirs = _python_encode(event, monkeypatch)
                assert msgspec.json.decode(ours) == msgspec.json.decode(theirs)
                # The unknown members are spliced as received, byte for byte.
                if event._wire is not None and event._wire.extra:
                    assert event._wire.extra[1:-1] in ours
    assert written >= 0.99 * total, (written, total)


def test_native_encode_writes_changes_and_declines_what_it_cannot_write(monkeypatch):
    raw = b'{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null,"token_id":5}],"x_groq":{"id":"r"}}'
    event = rapidsse.EventDecoder("chat").feed(b"data: " + raw + b"\n\n")[0]
    assert msgspec.json.decode(native.wire_encode(event)) == msgspec.json.decode(raw)
    changed = msgspec.structs.replace(event, model="m2")
    assert msgspec.json.decode(native.wire_encode(changed)) == dict(msgspec.json.decode(raw), model="m2")
    assert native.wire_encode(changed) == rapidsse.encode(changed)
    big = rapidsse.EventDecoder("chat").feed(b'data: {"id":"c","x":123456789012345678901234567890}\n\n')[0]
    assert native.wire_encode(big) is None  # an integer beyond 64 bits: the Python writer's
    assert msgspec.json.decode(rapidsse.encode(big)) == {"id": "c", "x": 123456789012345678901234567890}


@pytest.mark.parametrize(
    "cls, protocol, floor",
    [(rapidsse.ChatAccumulator, "chat", 1.0), (rapidsse.GeminiAccumulator, "gemini", 0.7)],
)
def test_snapshots_built_natively_are_msgspec_and_the_wire_pass(cls, protocol, floor):
    """``.completion`` / ``.response`` of an accumulator whose snapshot the builder makes
    (``NativeSchema.build``) is what msgspec and the Python wire pass make of the same snapshot
    JSON, at every depth (``_wire`` included), and encodes alike; where the builder declines, the
    accumulator still gives msgspec's. At least ``floor`` of the recordings are built natively."""
    from rapidsse.accumulate import _snapshot_builder

    build = _snapshot_builder(cls._snapshot_type)
    assert build is not None
    built = total = 0
    for path in corpus_files(protocol):
        for chunks in (chunked(path.read_bytes(), 512), [path.read_bytes()]):
            acc = cls(on_error="skip")
            for chunk in chunks:
                acc.feed(chunk)
            raw = acc._core.snapshot_json()
            theirs = _wire.compute(decode_lenient(raw, cls._snapshot_type), raw)
            ours = acc._snapshot()
            deep_same(ours, theirs)
            assert rapidsse.encode(ours) == rapidsse.encode(theirs)
            total += 1
            built += build(raw) is not None
    assert total and built >= floor * total, (built, total)


def test_the_snapshot_builder_keeps_no_state_that_shows():
    """``NativeSchema.build`` keeps its work state between calls (its string caches, its ``Wire``
    objects): a snapshot is built the same after any others, declined ones included, and
    from several threads at once, as the first time."""
    from concurrent.futures import ThreadPoolExecutor

    from rapidsse.accumulate import _snapshot_builder

    build = _snapshot_builder(chat.ChatCompletion)
    raws = []
    for path in corpus_files("chat"):
        acc = rapidsse.ChatAccumulator()
        acc.feed(path.read_bytes())
        raws.append(acc._core.snapshot_json())
    first = [build(raw) for raw in raws]
    assert all(built is not None for built in first)
    declined = [b"{", b'{"id":"c","choices":[{"index":0,"message":{"content":5}}]}']
    for _ in range(3):
        for raw, expected in zip(reversed(raws), reversed(first)):
            assert build(declined[0]) is None
            build(declined[1])
            again = build(raw)
            assert again is not expected
            deep_same(again, expected)

    def builds(_: int) -> int:
        for raw, expected in zip(raws * 5, first * 5):
            deep_same(build(raw), expected)
        return len(raws) * 5

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(builds, range(4))) == 4 * 5 * len(raws)


def test_a_declined_snapshot_goes_to_msgspec(monkeypatch):
    """A snapshot the builder declines (here: all of them) is decoded by msgspec as before."""
    from rapidsse import accumulate

    path = corpus_files("chat")[0]
    ours = rapidsse.ChatAccumulator()
    ours.feed(path.read_bytes())
    monkeypatch.setitem(accumulate._BUILDERS, chat.ChatCompletion, lambda raw: None)
    monkeypatch.setattr(accumulate, "_PARTS", {})  # found again, with the builder above
    declined = rapidsse.ChatAccumulator()
    declined.feed(path.read_bytes())
    assert declined._build is not None and declined._build(b"{}") is None
    deep_same(declined.completion, ours.completion)


def test_accumulators_are_made_on_the_backend_of_their_context():
    """The backend's parts are found once per backend: an accumulator made under
    ``using("python")`` has the pure core and no native builder, whichever was made first, and
    one made after it is the Rust one again; both give the same completion."""
    from rapidsse._backend import using
    from rapidsse._pure import accumulate as pure

    data = corpus_files("chat")[0].read_bytes()
    made = []
    for choice in ("python", "rust", "python"):
        with using(choice):
            acc = rapidsse.ChatAccumulator()
        acc.feed(data)
        made.append(acc)
    assert [isinstance(acc._core, pure.ChatCore) for acc in made] == [True, False, True]
    assert [acc._build is None for acc in made] == [True, False, True]
    assert not any(acc._spliced for acc in made)
    with using("python"):
        assert rapidsse.ResponseAccumulator()._spliced is hasattr(pure.ResponseCore, "snapshot_spliced")
    assert rapidsse.ResponseAccumulator()._spliced
    for acc in made[1:]:
        deep_same(acc.completion, made[0].completion)
        assert rapidsse.encode(acc.completion) == rapidsse.encode(made[0].completion)
