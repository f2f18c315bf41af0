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


def _mutate_one(rng, lines: list) -> None:
    """One byte of one line (not the first) replaced by a byte that matters to JSON."""
    at = rng.randrange(1, len(lines))
    mutated = bytearray(lines[at])
    mutated[rng.randrange(len(mutated))] = rng.choice(b'"\\{}[],:0-e. ')
    lines[at] = bytes(mutated)


def _assert_twin_lines(lines: list, max_event_size, round_) -> None:
    """The Rust and pure Chat cores fed the same lines agree after every one."""
    rust, py = core_pair("ChatCore", max_event_size=max_event_size)
    for line in lines:
        assert py.add_json(line) == rust.add_json(line), (round_, line)
        assert_twins(rust, py, (round_, line))


@needs_native
def test_twin_cores_on_runs_broken_by_odd_and_mutated_chunks():
    rng = random.Random(22)
    for round_ in range(60):
        lines = [FIRST]
        for _ in range(4):
            lines += _run(rng.randint(1, 6), rng.randint(0, 1))
            lines.insert(rng.randint(1, len(lines)), rng.choice(ODD))
        _mutate_one(rng, lines)
        _assert_twin_lines(lines, rng.choice([None, 6, 1 << 20]), round_)


@needs_native
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(STREAMS)), st.data())
def test_twin_cores_at_random_chunkings(name, data):
    stream = STREAMS[name][: 20_000]
    rust, py = core_pair("ChatCore")
    for chunk in data.draw(chunking(stream)):
        assert py.feed(chunk) == rust.feed(chunk)
    assert_twins(rust, py)


def _turn(choice: int, delta: bytes, tail: bytes = b"", top: bytes = b"") -> bytes:
    return (b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",%s"usage":null,"choices":[{"index":%d,'
            b'"delta":%s%s}],"obfuscation":"%s"}' % (top, choice, delta, tail, b"q" * (choice % 3)))


def _rotation(rng: random.Random, n: int, turns: int) -> list[bytes]:
    """``n`` choices (each with a tool call) taking turns at random kinds of delta: text, tool call
    arguments, reasoning, a ``finish_reason`` or ``role`` that changes, a top-level value fixed
    in one shape (no numbers) and a hole (numbers) or a string in another, a hole of another type."""
    first = b",".join(
        b'{"index":%d,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"t%d","type":"function",'
        b'"function":{"name":"f","arguments":""}}]}}' % (c, c)
        for c in range(n)
    )
    lines = [b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[%s]}' % first]
    kinds = [
        lambda c, t: _turn(c, b'{"content":"%s"}' % t),
        lambda c, t: _turn(c, b'{"tool_calls":[{"index":0,"function":{"arguments":"%s"}}]}' % t),
        lambda c, t: _turn(c, b'{"reasoning":"%s"}' % t, b',"finish_reason":null'),
        lambda c, t: _turn(c, b'{"content":"%s"}' % t, b',"finish_reason":"%s"' % rng.choice([b"stop", b"length"])),
        lambda c, t: _turn(c, b'{"content":"%s","role":"%s"}' % (t, rng.choice([b"tool", b"user"]))),
        lambda c, t: _turn(c, b'{"content":"%s"}' % t, top=rng.choice(
            [b'"moderation":{"flagged":false},', b'"moderation":{"score":%d},' % c, b'"moderation":"m",'])),
        lambda c, t: _turn(c, rng.choice([b'{"content":%d}' % c, b'{"content":"%s"}' % t])),
    ]
    for i in range(turns):
        choice = i % n if rng.random() < 0.8 else rng.randrange(n)
        text = rng.choice([b"a", b"b\\n", b"\\u00e9", b'\\"q'])
        lines.append(kinds[rng.choice([0, 0, 1, 1, 2, 3, 4, 5, 6])](choice, text))
    return lines


@needs_native
def test_twin_cores_on_choices_taking_turns():
    """The Rust tap's shapes (several kept, the least recently used evicted, kept together only
    when what they set agrees) against the pure core: ``n`` = 2, 3 and more choices than shapes."""
    rng = random.Random(2222)
    for round_ in range(80):
        n = rng.choice([2, 3, 4, 9])
        lines = _rotation(rng, n, rng.randint(10, 60))
        if rng.random() < 0.5:
            _mutate_one(rng, lines)
        _assert_twin_lines(lines, rng.choice([None, 9, 1 << 20]), round_)


@needs_native
def test_twin_cores_on_a_field_fixed_in_one_shape_and_a_hole_in_another():
    """Two shapes taking turns, one with a ``moderation`` without numbers (fixed in its template,
    so set by it), the other with numbers (its template's holes): each chunk sets its own. (The
    tap once kept both shapes, and the first one's chunks left the second's value in place.)"""
    head = b'{"id":"c","object":"chat.completion.chunk","model":"m",'
    first = head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}},{"index":1,"delta":{"content":""}}]}'
    fixed = head + b'"moderation":{"flagged":false},"choices":[{"index":0,"delta":{"content":"e"}}]}'
    hole = head + b'"moderation":{"score":1},"choices":[{"index":1,"delta":{"content":"f"}}]}'
    rust, py = core_pair("ChatCore")
    for line in [first, fixed, hole, fixed, hole, fixed]:
        assert py.add_json(line) == rust.add_json(line)
        assert_twins(rust, py, line)
    assert json.loads(rust.snapshot_json())["moderation"] == {"flagged": False}
