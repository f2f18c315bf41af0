"""Gemini streams (``protocol="gemini"``, :class:`rapidsse.GeminiAccumulator`) on the recorded corpus,
checked against the google-genai SDK (its ``generate_content_stream`` over an httpx MockTransport),
on the live backend; the Rust and pure-Python cores side by side; hostile input."""

from __future__ import annotations

import base64
import json
import os

import httpx
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rapidsse
import rapidsse._wire
from rapidsse import EventTooLarge, GeminiAccumulator, StreamError, gemini, iter_events
from rapidsse.decoding import detect_protocol

from .conftest import assert_ways_in_agree, chunked, corpus_files, sse_transport, wires
from .test_hostile import SETTINGS, assert_only_sse_errors, chunking, mutated, random_stream
from .twins import assert_twins, assert_twins_feed, assert_twins_on_payloads, core_pair, needs_native

genai = pytest.importorskip("google.genai")
types = genai.types

FILES = corpus_files("gemini")
SIZES = (1, 7, 512, 65536)


def payloads(data: bytes) -> list[bytes]:
    return [line[len(b"data: "):] for line in data.split(b"\r\n") if line.startswith(b"data: ")]


def sdk_chunks(data: bytes) -> list:
    """The chunks google-genai's ``generate_content_stream`` hands out for the recorded body."""

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith(":streamGenerateContent")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    client = genai.Client(
        api_key="test-key",
        http_options=types.HttpOptions(
            base_url="http://gemini.test", httpx_client=httpx.Client(transport=httpx.MockTransport(handler))
        ),
    )
    return list(client.models.generate_content_stream(model="gemini-test", contents="hi"))


def sdk_view(chunks: list) -> dict:
    """What a caller of the SDK gets by going through the chunks (candidate 0)."""
    parts = [p for c in chunks if c.candidates for p in (c.candidates[0].content.parts or [])]
    reasons = [c.candidates[0].finish_reason for c in chunks if c.candidates and c.candidates[0].finish_reason]
    return {
        "text": "".join(c.text or "" for c in chunks),
        "thoughts": "".join(p.text for p in parts if p.text is not None and p.thought),
        "calls": [(f.id, f.name, f.args) for c in chunks for f in (c.function_calls or [])],
        "code": [(p.executable_code.language.value, p.executable_code.code) for p in parts if p.executable_code],
        "results": [(p.code_execution_result.outcome.value, p.code_execution_result.output) for p in parts if p.code_execution_result],
        "signatures": [base64.b64encode(p.thought_signature).decode() for p in parts if p.thought_signature],
        "finish_reason": reasons[-1].value if reasons else None,
        "usage": chunks[-1].usage_metadata.model_dump(mode="json", by_alias=True, exclude_none=True),
        "model_version": chunks[-1].model_version,
        "response_id": chunks[-1].response_id,
    }


def our_view(response: gemini.GenerateContentResponse) -> dict:
    parts = response.candidates[0].content.parts
    return {
        "text": "".join(p.text for p in parts if p.text is not None and not p.thought),
        "thoughts": "".join(p.text for p in parts if p.text is not None and p.thought),
        "calls": [(p.function_call.id, p.function_call.name, p.function_call.args) for p in parts if p.function_call],
        "code": [(p.executable_code.language, p.executable_code.code) for p in parts if p.executable_code],
        "results": [(p.code_execution_result.outcome, p.code_execution_result.output) for p in parts if p.code_execution_result],
        "signatures": [p.thought_signature for p in parts if p.thought_signature],
        "finish_reason": response.candidates[0].finish_reason,
        "usage": msgspec.to_builtins(response.usage_metadata),
        "model_version": response.model_version,
        "response_id": response.response_id,
    }


# --- the corpus ---------------------------------------------------------------------------------


def test_the_corpus_is_there():
    assert len(FILES) == 9
    assert all(b"\r\n" in path.read_bytes() for path in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_typed_chunks_at_every_chunking(path):
    data = path.read_bytes()
    expected = [rapidsse._wire.decode(p, gemini.GenerateContentResponse) for p in payloads(data)]
    assert expected and all(c.candidates for c in expected)
    for size in SIZES:
        got = list(iter_events(chunked(data, size), protocol="gemini"))
        assert got == expected and wires(got) == wires(expected), size
    # camelCase on the wire, snake_case attributes; encode_sse writes the wire names back
    for chunk in expected:
        assert chunk.model_version and chunk.response_id and chunk.usage_metadata.total_token_count
        written = rapidsse.encode_sse(chunk)
        assert written.startswith(b"data: {") and b'"usageMetadata":' in written and b"usage_metadata" not in written
        assert list(iter_events([written], protocol="gemini")) == [chunk]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_accumulated_response_agrees_with_the_sdk(path):
    data = path.read_bytes()
    expected = sdk_view(sdk_chunks(data))
    acc = GeminiAccumulator()
    acc.feed(data)
    acc.close()
    response = acc.response
    ours = our_view(response)
    # The last chunk's usage, whole: the SDK drops what it does not know (``serviceTier``).
    assert ours.pop("usage") == json.loads(payloads(data)[-1])["usageMetadata"]
    sdk_usage = expected.pop("usage")
    assert {k: v for k, v in msgspec.to_builtins(response.usage_metadata).items() if k in sdk_usage} == sdk_usage
    assert ours == expected
    assert acc.warnings == [] and acc.unknown_events == 0 and acc.events == len(payloads(data))
    # The SDK takes the accumulated response as one of its own (as it takes a chunk: extra
    # fields removed, then model_validate), with the same text and calls.
    sdk = types.GenerateContentResponse._from_response(response=json.loads(msgspec.json.encode(response)), kwargs={})
    assert (sdk.text or "") == expected["text"]
    assert [(f.id, f.name, f.args) for f in sdk.function_calls or []] == expected["calls"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_feed_add_and_add_json_agree(path):
    data = path.read_bytes()
    texts = [payload.decode() for payload in payloads(data)]  # add_json takes str too
    assert_ways_in_agree("gemini", GeminiAccumulator, "response", data, texts, SIZES, 100)


def test_joining_rules():
    acc = GeminiAccumulator()
    acc.add_json(b'{"candidates":[{"content":{"role":"model","parts":[{"text":"Let me","thought":true}]}}],"responseId":"a"}')
    acc.add_json(b'{"candidates":[{"content":{"parts":[{"text":" see","thought":true},{"text":"Hel"}]}}]}')
    acc.add_json(b'{"candidates":[{"content":{"parts":[{"text":"lo","thoughtSignature":"c2ln"},'
                 b'{"functionCall":{"id":"f1","name":"f","args":{"x":1}},"thoughtSignature":"c2lnMg=="},'
                 b'{"functionCall":{"name":"g","args":{}}}]},"finishReason":"STOP"}],'
                 b'"usageMetadata":{"totalTokenCount":9},"modelVersion":"m"}')
    acc.add_json(b'{"candidates":[{"content":{"parts":[{"text":"!"},{"text":"","thoughtSignature":"c2lnMw=="}]}}]}')
    parts = acc.response.candidates[0].content.parts
    assert [(p.text, p.thought, p.thought_signature, p.function_call and p.function_call.name) for p in parts] == [
        ("Let me see", True, None, None),
        ("Hello", None, "c2ln", None),
        (None, None, "c2lnMg==", "f"),
        (None, None, None, "g"),
        ("!", None, "c2lnMw==", None),
    ]
    r = acc.response
    assert (r.response_id, r.model_version, r.usage_metadata.total_token_count, r.candidates[0].finish_reason) == (
        "a", "m", 9, "STOP"
    )
    assert r.candidates[0].content.role == "model" and r.candidates[0].index == 0


def test_candidates_by_index():
    acc = GeminiAccumulator()
    acc.add_json(b'{"candidates":[{"content":{"parts":[{"text":"A"}]}},{"index":1,"content":{"parts":[{"text":"B"}]}}]}')
    acc.add_json(b'{"candidates":[{"index":1,"content":{"parts":[{"text":"b"}]},"finishReason":"MAX_TOKENS"},'
                 b'{"index":0,"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}]}')
    got = [(c.index, c.content.parts[0].text, c.finish_reason) for c in acc.response.candidates]
    assert got == [(0, "Aa", "STOP"), (1, "Bb", "MAX_TOKENS")]


ERROR_CHUNK = b'data: {"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}\r\n\r\n'


def test_error_chunks():
    first = FILES[0].read_bytes().split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    events = list(iter_events([first + ERROR_CHUNK], protocol="gemini"))
    assert events[1].error == gemini.Error(code=503, message="The model is overloaded.", status="UNAVAILABLE")
    with pytest.raises(StreamError) as info:
        list(iter_events([first + ERROR_CHUNK], protocol="gemini", raise_on_error_event=True))
    assert info.value.events == events[:1]
    acc = GeminiAccumulator()
    acc.feed(first + ERROR_CHUNK)
    assert acc.warnings == ["error event: The model is overloaded."]
    assert (acc.events, acc.unknown_events) == (2, 1)
    assert acc.response.candidates[0].content.parts[0].executable_code.code


def test_detection():
    for path in FILES:
        assert detect_protocol(path.read_bytes()[:4096]) == "gemini"


def test_cli_parse_detects_gemini(capsys):
    from rapidsse import cli

    path = FILES[0]
    assert cli.main(["parse", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    acc = GeminiAccumulator()
    acc.feed(path.read_bytes())
    assert out == msgspec.to_builtins(acc.response)
    assert cli.main(["parse", str(path)]) == 0
    summary = capsys.readouterr().out
    assert "gemini response" in summary and "code result" in summary and "OUTCOME_OK" in summary


# --- caps and bad input --------------------------------------------------------------------------


def test_caps():
    """One part's joined text is capped at max_event_size (a piece past it is not appended and
    raises EventTooLarge, the accumulator stays usable); so is one payload and one event."""
    text = lambda t: '{"candidates":[{"content":{"parts":[{"text":"' + t + '"}]}}]}'  # noqa: E731
    acc = GeminiAccumulator(max_event_size=100)
    acc.add_json(text("a" * 45))
    acc.add_json(text("b" * 45))
    with pytest.raises(EventTooLarge):
        acc.add_json(text("c" * 20))
    acc.add_json(text("d" * 10))
    assert acc.response.candidates[0].content.parts[0].text == "a" * 45 + "b" * 45 + "d" * 10
    with pytest.raises(EventTooLarge):
        acc.add_json(text("d" * 100))
    with pytest.raises(EventTooLarge):
        list(iter_events([b"data: " + b"x" * 100 + b"\r\n\r\n"], protocol="gemini", max_event_size=50))
    with pytest.raises(EventTooLarge):
        GeminiAccumulator(max_event_size=50).feed(b"data: " + b"x" * 100 + b"\r\n\r\n")


def test_bad_payloads():
    with pytest.raises(rapidsse.DecodeError):
        list(iter_events([b'data: {"candidates": 5}\r\n\r\n'], protocol="gemini"))
    kept = list(iter_events([b'data: {"candidates": 5}\r\n\r\ndata: [1]\r\n\r\n'], protocol="gemini", on_error="keep"))
    assert [type(e).__name__ for e in kept] == ["InvalidEvent", "InvalidEvent"]
    acc = GeminiAccumulator(on_error="keep")
    acc.feed(b'data: {"candidates":[{"content":{"parts":[{"text":"ok"}]}}]}\r\n\r\ndata: nope\r\n\r\n')
    assert len(acc.invalid_events) == 1 and acc.response.candidates[0].content.parts[0].text == "ok"
    acc = GeminiAccumulator()
    acc.feed(b'data: {"candidates":[],"candidates":[]}\r\n\r\n')
    assert acc.warnings == ["gemini: malformed chunk ignored"]


# --- Rust and pure-Python cores side by side ----------------------------------------------------

@needs_native
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_twin_cores_on_the_corpus(path):
    assert_twins_feed("GeminiCore", path.read_bytes(), SIZES)


ODD = [
    b'{"candidates":5}', b'{"candidates":[5,{"content":{"parts":[{"text":"a"}]}}]}', b'{"candidates":null}',
    b'{"candidates":[{"content":{"parts":"x"}}]}', b'{"candidates":[{"content":5}]}',
    b'{"candidates":[{"content":{"parts":[{"text":5},{"text":"a","thought":"yes"},{"text":"b","x":1}]}}]}',
    b'{"candidates":[{"content":{"parts":[{"text":"a","thoughtSignature":5},{"text":"\\ud800"}]}}]}',
    b'{"candidates":[{"index":-1,"content":{"parts":[{"text":"n"}]}},{"index":1.0},{"index":true}]}',
    b'{"candidates":[{"index":18446744073709551615,"content":{"parts":[{"text":"big"}]}}]}',
    b'{"candidates":[{"content":{"parts":[{"text":"a","text":"b"}]}}]}',
    b'{"usageMetadata":{"x":1e400}}', b'{"usageMetadata":null,"modelVersion":"m2","createTime":"t"}',
    b'{"error":5}', b'{"error":{"message":7}}', b'{"error":null,"responseId":"r"}',
    b'{"responseId":"a","responseId":"b"}', b'{"\\ud800":1,"candidates":[]}', b'[]', b'"x"', b"{", b"\xff",
    b'{"candidates":[{"content":{"parts":[' + b"[" * 130 + b"]" * 130 + b"]}}]}",
    b'{"candidates":[{"content":{"role":"model","parts":[{"thought":true,"text":"t"},{"text":"","thought":null}]}}]}',
]


@needs_native
def test_twin_cores_on_odd_payloads():
    first = b'{"candidates":[{"content":{"parts":[{"text":"ab"}]}}]}'
    assert_twins_on_payloads("GeminiCore", ODD, first, cap=3)


texts = st.sampled_from(["", "Hi", "é✓😀", "\n", '"'])
part = st.one_of(
    st.fixed_dictionaries({"text": texts}, optional={"thought": st.sampled_from([True, False, None]),
                                                      "thoughtSignature": st.sampled_from(["c2lnMQ==", "c2lnMg==", None])}),
    st.fixed_dictionaries({"functionCall": st.fixed_dictionaries({"name": st.just("f")}, optional={"args": st.just({"a": [1]}), "id": st.just("i")})},
                          optional={"thoughtSignature": st.just("c2lnMw==")}),
    st.just({"executableCode": {"language": "PYTHON", "code": "print(1)"}}),
    st.just({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}}),
    st.just({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}),
    st.just({"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/f.pdf"}}),
)
candidate = st.fixed_dictionaries(
    {"content": st.fixed_dictionaries({"parts": st.lists(part, max_size=4)}, optional={"role": st.just("model")})},
    optional={"index": st.sampled_from([0, 1, 2]), "finishReason": st.sampled_from(["STOP", "MAX_TOKENS", None]),
              "safetyRatings": st.just([{"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "NEGLIGIBLE"}]),
              "citationMetadata": st.just({"citations": [{"startIndex": 0, "endIndex": 2, "uri": "https://x"}]}),
              "groundingMetadata": st.just({"webSearchQueries": ["q"]})},
)
chunk = st.fixed_dictionaries(
    {"candidates": st.lists(candidate, max_size=3)},
    optional={"usageMetadata": st.builds(lambda n: {"promptTokenCount": 3, "totalTokenCount": n,
                                                    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 3}]},
                                         st.integers(0, 99)),
              "modelVersion": st.sampled_from(["gemini-2.5-flash", "gemini-3-pro-preview"]),
              "responseId": st.sampled_from(["r1", "r2"]),
              "promptFeedback": st.just({"blockReason": "SAFETY"}),
              "createTime": st.just("2025-01-01T00:00:00Z")},
)
chunks_strategy = st.lists(st.one_of(chunk, chunk, chunk, st.just({"error": {"code": 500, "message": "x"}})), min_size=1, max_size=8)


def sse(chunks: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)


@needs_native
@settings(max_examples=int(os.environ.get("TWIN_EXAMPLES", "300")), deadline=None)
@given(chunks_strategy, st.sampled_from([None, 8, 1 << 20]))
def test_twin_cores_on_generated_streams(chunks, cap):
    rust, py = core_pair("GeminiCore", max_event_size=cap)
    for c in chunks:
        payload = json.dumps(c).encode()
        assert py.add_json(payload) == rust.add_json(payload)
    assert_twins(rust, py)


@settings(max_examples=50, deadline=None)
@given(chunks_strategy.filter(lambda cs: "error" not in cs[0]))
def test_generated_streams_agree_with_the_sdk(chunks):
    """On generated streams (any part mix, several candidates), the joined text, thoughts and
    function calls of candidate 0 are what the SDK's chunks give."""
    chunks = [c for c in chunks if "error" not in c]
    chunks = [{**c, "candidates": [dict(cand, index=0) for cand in c["candidates"][:1]] or
               [{"content": {"parts": []}, "index": 0}], "usageMetadata": {"totalTokenCount": 1}} for c in chunks]
    data = sse(chunks)
    acc = GeminiAccumulator()
    acc.feed(data)
    ours, theirs = our_view(acc.response), sdk_view(sdk_chunks(data))
    for key in ("text", "thoughts", "calls", "code", "results"):
        assert ours[key] == theirs[key], key
    assert [base64.b64decode(s) for s in ours["signatures"]] == [base64.b64decode(s) for s in theirs["signatures"]]


# --- hostile input (the live backend: only SSEError subclasses) ----------------------------------

_GEMINI_EVENTS = [e + b"\r\n\r\n" for path in FILES for e in path.read_bytes().split(b"\r\n\r\n") if e.strip()]


@st.composite
def hostile_stream(draw) -> bytes:
    start = draw(st.integers(0, len(_GEMINI_EVENTS) - 1))
    base = b"".join(_GEMINI_EVENTS[start : start + draw(st.integers(1, 6))]) + ERROR_CHUNK * draw(st.integers(0, 1))
    return draw(mutated(base))


@settings(max_examples=400, **SETTINGS)
@given(st.data(), st.sampled_from(["raise", "skip", "keep"]), st.sampled_from([None, 16 << 20, 300]), st.booleans())
def test_hostile_streams_raise_only_sse_errors(data, on_error, cap, raise_on_error_event):
    stream = data.draw(st.one_of(hostile_stream(), hostile_stream(), random_stream()))
    chunks = data.draw(chunking(stream))
    assert_only_sse_errors("gemini", GeminiAccumulator, "response", stream, chunks, on_error, cap, raise_on_error_event)


def test_httpx_integration_reads_a_gemini_url():
    """``connect_sse`` on a ``:streamGenerateContent`` URL reads Gemini without being told."""
    from rapidsse.integrations import protocol_for_path
    from rapidsse.integrations.httpx import connect_sse

    data = FILES[0].read_bytes()
    transport = sse_transport(data)
    url = "http://gemini.test/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    with httpx.Client(transport=transport) as client, connect_sse(client, "POST", url, json={}) as source:
        stream = source.stream()
        chunks = list(stream)
    acc = GeminiAccumulator()
    acc.feed(data)
    assert chunks == list(iter_events([data], protocol="gemini")) and stream.response == acc.response
    assert protocol_for_path("/v1/completions") == "completions"
    assert protocol_for_path("/v1/chat/completions") == "chat"
    assert protocol_for_path("/v1/responses") == "responses"
