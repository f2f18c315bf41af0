"""The Chat tap's fast path (``rust/src/accumulate/chat.rs``: later chunks read with the tap's
reader, a chunk shaped like a recent one read by its template) against the pure-Python core,
which has neither: ``rapidsse bench``'s synthetic streams (OpenAI's text deltas with their
``obfuscation``, then a tool call; ``n = 2`` with parallel tool calls), runs of one shape broken
by odd chunks and mutated chunks, at random chunkings; and the result against the openai SDK's and
the lossless contract, on the live backend."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings, strategies as st

import rapidsse
from rapidsse import bench

from .test_accumulate import sdk_completion
from .test_hostile import chunking
from .twins import assert_twins, assert_twins_feed, core_pair, needs_native

STREAMS = {
    "tool": bench.chat_tool_stream(300, 40)[0],
    "mixed": bench.chat_mixed_stream(300, 40)[0],
}


def payloads(data: bytes) -> list[bytes]:
    return [e[len(b"data: "):] for e in data.split(b"\n\n") if e.startswith(b"data: ")]


@needs_native
@pytest.mark.parametrize("name", STREAMS)
def test_twin_cores_on_the_bench_streams(name):
    assert_twins_feed("ChatCore", STREAMS[name], [7, 512, 1 << 20])


@pytest.mark.parametrize("name", STREAMS)
def test_bench_streams_equal_the_openai_sdk(name):
    data = STREAMS[name]
    acc = rapidsse.ChatAccumulator()
    for chunk in bench.chunked(data, 512):
        acc.feed(chunk)
    ours, theirs = acc.completion, sdk_completion(data)
    assert len(ours.choices) == len(theirs["choices"]) == (2 if name == "mixed" else 1)
    for mine, sdk in zip(ours.choices, theirs["choices"]):
        assert mine.finish_reason == sdk["finish_reason"] == "tool_calls"
        assert mine.message.content == sdk["message"]["content"]
        assert [(t.id, t.function.name, t.function.arguments) for t in mine.message.tool_calls] == [
            (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in sdk["message"]["tool_calls"]
        ]
        for call in mine.message.tool_calls:
            json.loads(call.function.arguments)
    assert json.loads(rapidsse.encode(ours.usage)) == json.loads(payloads(data)[-2])["usage"]
    # The lossless contract: encode(completion) is the core's JSON, obfuscation dropped.
    assert json.loads(rapidsse.encode(ours)) == json.loads(acc._core.snapshot_json())
    assert "obfuscation" not in json.loads(rapidsse.encode(ours))


def _run(n: int, choice: int = 0) -> list[bytes]:
    """``n`` text deltas of one shape (OpenAI's), an ``obfuscation`` of every length."""
    head = b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","usage":null,'
    return [
        head + b'"choices":[{"index":%d,"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}],"obfuscation":"%s"}'
        % (choice, [b"a", b"b\\n", b"\\u00e9", b'\\"q\\"'][i % 4], b"x" * (i % 7))
        for i in range(n)
    ]


FIRST = (b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
         b'"delta":{"role":"assistant","content":""}},{"index":1,"delta":{"role":"assistant","content":""}}]}')
ODD = [
    b'{"error":{"message":"busy"}}', b'{"object":"","choices":[{"index":0,"delta":{"content":"f"}}]}',
    b'{"choices":[{"index":0,"index":1}]}', b'{"choices":[{"index":-1,"delta":{"content":"x"}}]}',
    b'{"choices":[{"delta":{"content":"y","content":"z"}}]}', b'{"choices":[{"delta":{"content":"\\ud800"}}]}',
    b'{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{"}}]}}]}',
    b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1","arguments":"2"}}]}}]}',
    b'{"choices":[{"delta":{"content":[{"type":"text","text":"M"},{"type":"thinking","thinking":"t"}]}}]}',
    b'{"choices":[{"delta":{"reasoning_content":"r"},"finish_reason":"stop","logprobs":{"content":[{"token":"r"}]}}]}',
    b'{"choices":[{"index":1,"delta":{"role":"tool","refusal":"no"}}],"x_groq":{"usage":{"total_tokens":1e400}}}',
    b'{"choices":[],"usage":{"prompt_tokens":3,"prompt_cache_hit_tokens":2},"x_groq":{"id":"q"}}',
    b'{"choices":[{"delta":{"n":-0}}]}', b"[DONE]", b'"x"', b"{",
]


@needs_native
def test_twin_cores_on_runs_broken_by_odd_and_mutated_chunks():
    rng = random.Random(22)
    for round_ in range(60):
        lines = [FIRST]
        for _ in range(4):
            lines += _run(rng.randint(1, 6), rng.randint(0, 1))
            lines.insert(rng.randint(1, len(lines)), rng.choice(ODD))
        at = rng.randrange(1, len(lines))
        mutated = bytearray(lines[at])
        mutated[rng.randrange(len(mutated))] = rng.choice(b'"\\{}[],:0-e. ')
        lines[at] = bytes(mutated)
        rust, py = core_pair("ChatCore", max_event_size=rng.choice([None, 6, 1 << 20]))
        for line in lines:
            assert py.add_json(line) == rust.add_json(line), (round_, line)
            assert_twins(rust, py, (round_, line))


@needs_native
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(STREAMS)), st.data())
def test_twin_cores_at_random_chunkings(name, data):
    stream = STREAMS[name][: 20_000]
    rust, py = core_pair("ChatCore")
    for chunk in data.draw(chunking(stream)):
        assert py.feed(chunk) == rust.feed(chunk)
    assert_twins(rust, py)
