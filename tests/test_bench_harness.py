"""The benchmark harness (``rapidsse.bench``) works: its inputs are what they claim, every installed
contender returns the right count, missing peers are skipped rather than timed, and the table renders.
Timing itself is exercised only briefly; the benchmarks live in ``benches/``."""

from __future__ import annotations

import json
import sys

import pytest

import rapidsse
from rapidsse import bench, chat, responses

N = 50


def test_responses_stream_decodes_into_the_expected_events():
    events = rapidsse.EventDecoder("responses").feed(bench.responses_stream(N))
    assert len(events) == N
    assert [type(e) for e in events[:4]] == [
        responses.ResponseCreated,
        responses.ResponseInProgress,
        responses.OutputItemAdded,
        responses.ContentPartAdded,
    ]
    deltas = events[4:-4]
    assert all(type(e) is responses.OutputTextDelta for e in deltas)
    assert [type(e) for e in events[-4:]] == [
        responses.OutputTextDone,
        responses.ContentPartDone,
        responses.OutputItemDone,
        responses.ResponseCompleted,
    ]
    text = "".join(e.delta for e in deltas)
    assert events[-4].text == text
    assert events[-1].response.usage.output_tokens == len(deltas)
    assert [e.sequence_number for e in events] == list(range(N))


def test_delta_events_are_sized_like_openais():
    frames = rapidsse.SSEDecoder().feed(bench.responses_stream(N))
    sizes = [len(f.data) for f in frames if f.event == "response.output_text.delta"]
    assert all(180 <= size <= 260 for size in sizes), sizes


def test_chat_stream_decodes_into_the_expected_chunks():
    decoder = rapidsse.EventDecoder("chat")
    events = decoder.feed(bench.chat_stream(N))
    assert decoder.done
    assert len(events) == N
    assert all(type(e) is chat.ChatCompletionChunk for e in events)
    assert events[0].choices[0].delta.role == "assistant"
    assert events[-2].choices[0].finish_reason == "stop"
    assert events[-1].choices == [] and events[-1].usage.completion_tokens == N - 3
    assert len(rapidsse.SSEDecoder().feed(bench.chat_stream(N))) == N + 1  # and data: [DONE]


def test_large_event_stream_is_one_event_of_the_given_size():
    data = bench.large_event_stream(1 << 20)
    chunks = bench.chunked(data, 4096)
    assert b"".join(chunks) == data and {len(c) for c in chunks[:-1]} == {4096}
    (event,) = rapidsse.SSEDecoder().feed(data)
    assert len(event.data) == 1 << 20
    assert event.json()["type"] == "response.image_generation_call.partial_image"


def _available(group: str) -> list[bench.Contender]:
    return [c for c in bench.contenders(group) if not c.skipped]


@pytest.mark.parametrize("group", [bench.FRAMING, bench.TYPED_RESPONSES, bench.TYPED_CHAT])
def test_every_installed_contender_counts_every_event(group):
    load = bench.workload(group, N)
    contenders = _available(group)
    assert "rapidsse python" in [c.name for c in contenders]
    for contender in contenders:
        inputs = contender.prepare(load.inputs) if contender.prepare else load.inputs
        assert contender.run(inputs) == N, contender.name


def test_gemini_and_completions_streams_decode_into_the_expected_chunks():
    data = bench.gemini_stream(N)
    assert data.count(b"\r\n\r\n") == N
    chunks = list(rapidsse.iter_events([data], protocol="gemini"))
    assert len(chunks) == N and chunks[-1].candidates[0].finish_reason == "STOP"
    assert chunks[0].candidates[0].content.parts[0].text and chunks[-1].candidates[0].content.parts[0].thought_signature
    data = bench.completions_stream(N)
    chunks = list(rapidsse.iter_events([data], protocol="completions"))
    assert len(chunks) == N and data.endswith(b"data: [DONE]\n\n")
    assert chunks[-2].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == N - 1


@pytest.mark.parametrize(
    "group", [bench.TYPED_GEMINI, bench.GEMINI_ACCUMULATE, bench.TYPED_COMPLETIONS, bench.COMPLETIONS_ACCUMULATE]
)
def test_gemini_and_completions_contenders_count_every_chunk(group):
    load = bench.workload(group, N)
    contenders = _available(group)
    assert any(c.name.startswith(("google-genai", "openai SDK")) for c in contenders)
    for contender in contenders:
        inputs = contender.prepare(load.inputs) if contender.prepare else load.inputs
        assert contender.run(inputs) == N, contender.name


def test_large_event_contenders_frame_one_event():
    chunks = bench.chunked(bench.large_event_stream(1 << 16), 4096)
    for contender in _available(bench.LARGE_EVENT):
        inputs = contender.prepare(chunks) if contender.prepare else chunks
        assert len(inputs) == (1 if "one chunk" in contender.name else 17)
        assert contender.run(inputs) == 1, contender.name


@pytest.mark.parametrize("group", [bench.ASYNC_RESPONSES, bench.ASYNC_CHAT])
def test_async_contenders_count_every_event_against_their_sync_twin(group):
    load = bench.workload(group, N)
    contenders = _available(group)
    names = {c.name for c in contenders}
    assert any("async for" in name for name in names)
    for contender in contenders:
        prepared = contender.prepare(load.inputs) if contender.prepare else load.inputs
        assert contender.run(prepared) == N, contender.name
        if "async for" in contender.name:
            assert contender.baseline in names and "async" not in contender.baseline, contender.name
    # The source alone (no decoding) is a row of its own, its ratio taken against the bare list.
    bare = {c.name: c for c in contenders if "drained bare" in c.name}
    assert sorted(bare) == ["chunks alone, async for chunk in async generator, drained bare",
                            "chunks alone, for chunk in list, drained bare"]
    assert bare["chunks alone, async for chunk in async generator, drained bare"].baseline in bare


def test_corpus_contenders_agree_on_a_few_recordings():
    try:
        recordings = bench.corpus_recordings()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    sample = [r for r in recordings if r.protocol == "responses"][:2] + [r for r in recordings if r.protocol == "chat"][:2]
    inputs = [(r.protocol, bench.chunked(r.data, bench.CHUNK_SIZE)) for r in sample]
    expected = sum(map(bench._typed_event_count, sample))
    for contender in _available(bench.CORPUS):
        assert contender.run(inputs) == expected, contender.name


def test_the_short_and_long_chat_corpus_groups_split_the_corpus_group():
    try:
        whole = bench.workload(bench.CHAT_ACCUMULATE_CORPUS)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    short = bench.workload(bench.CHAT_ACCUMULATE_CORPUS_SHORT)
    long = bench.workload(bench.CHAT_ACCUMULATE_CORPUS_LONG)
    assert short.inputs and long.inputs
    assert sorted(map(repr, short.inputs + long.inputs)) == sorted(map(repr, whole.inputs))
    assert (short.n_events + long.n_events, short.n_bytes + long.n_bytes) == (whole.n_events, whole.n_bytes)
    counts = lambda load: [bench._typed_rust("chat", chunks) for _, chunks in load.inputs]  # noqa: E731
    assert max(counts(short)) < bench.SHORT_STREAM <= min(counts(long))
    for contender in _available(bench.CHAT_ACCUMULATE_CORPUS_SHORT):
        if contender.name.startswith("rapidsse"):
            inputs = contender.prepare(short.inputs) if contender.prepare else short.inputs
            assert contender.run(inputs) == short.n_events, contender.name


def test_measure_rejects_a_contender_that_loses_events():
    broken = bench.Contender("broken", lambda chunks: len(chunks) - 1)
    with pytest.raises(AssertionError, match="broken produced"):
        bench.measure(broken, [b"data: 1\n\n", b"data: 2\n\n"], 2, min_time=0)


def test_missing_peers_are_skipped_not_timed_and_the_table_renders(monkeypatch):
    monkeypatch.setitem(sys.modules, "sseclient", None)  # makes `import sseclient` fail
    rows = bench.run_all(quick=True, groups=(bench.FRAMING,))
    by_name = {row["contender"]: row for row in rows}
    assert list(by_name) == [c.name for c in bench.contenders(bench.FRAMING)]

    skipped = by_name["sseclient-py"]
    assert "Error: " in skipped["skipped"] and "sseclient" in skipped["skipped"]
    assert skipped["us_per_event"] is None and skipped["rounds"] == 0

    python = by_name["rapidsse python"]
    assert python["skipped"] is None and python["us_per_event"] > 0 and python["rounds"] >= 3
    if rapidsse.BACKEND == "rust":
        assert by_name["rapidsse rust"]["ratio"] == 1.0
        assert python["ratio"] == pytest.approx(python["us_per_event"] / by_name["rapidsse rust"]["us_per_event"])
    else:
        assert by_name["rapidsse rust"]["skipped"] and python["ratio"] is None

    table = bench.format_table(rows).splitlines()
    assert table[0].startswith("| group | contender | µs/event | MB/s |")
    assert len(table) == 2 + len(rows)
    assert any("| sseclient-py | skipped: ModuleNotFoundError" in line for line in table)
    assert any(f"| {bench.FRAMING} | rapidsse python | " in line for line in table)


def test_anthropic_stream_decodes_into_the_expected_events():
    from rapidsse import anthropic

    data = bench.anthropic_stream(200)
    events = rapidsse.EventDecoder("anthropic").feed(data)
    assert len(events) == 200
    assert not any(isinstance(e, rapidsse.UnknownEvent) for e in events)
    assert type(events[0]) is anthropic.MessageStart and type(events[-1]) is anthropic.MessageStop
    acc = rapidsse.AnthropicAccumulator()
    acc.feed(data)
    message = acc.message
    assert [b.type for b in message.content] == ["thinking", "server_tool_use", "web_search_tool_result", "text", "tool_use"]
    assert message.content[1].input == {"query": "San Francisco weather today"}
    assert message.content[4].input["filename"] == "weather.txt"
    assert len(message.content[3].citations) == 1 and acc.warnings == []
    sizes = [len(e.data) for e in rapidsse.SSEDecoder().feed(data) if e.event == "content_block_delta"]
    assert 90 <= sorted(sizes)[len(sizes) // 2] <= 160


def test_chat_tool_and_mixed_streams_decode_into_the_expected_chunks():
    data, n = bench.chat_tool_stream(n_text=20, n_args=12)
    chunks = list(rapidsse.iter_events([data], protocol="chat"))
    assert len(chunks) == n == 20 + 12 + 4 and data.endswith(b"data: [DONE]\n\n")
    assert all(b'"obfuscation"' in e for e in data.split(b"\n\n")[:-3])
    acc = rapidsse.ChatAccumulator()
    acc.feed(data)
    (choice,) = acc.completion.choices
    assert choice.finish_reason == "tool_calls" and len(choice.message.content) > 20
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)
    assert acc.completion.usage.completion_tokens == 32
    data, n = bench.chat_mixed_stream(n_text=20, n_args=12)
    acc = rapidsse.ChatAccumulator()
    acc.feed(data)
    assert acc.events == n and [c.index for c in acc.completion.choices] == [0, 1]
    for choice in acc.completion.choices:
        assert [t.function.name for t in choice.message.tool_calls] == ["get_weather", "get_time"]
        assert all(json.loads(t.function.arguments) for t in choice.message.tool_calls)


@pytest.mark.parametrize("group", [bench.CHAT_ACCUMULATE, bench.CHAT_ACCUMULATE_MIXED])
def test_final_chat_completion_contenders_count_every_chunk(group):
    load = bench.workload(group, 150)
    contenders = _available(group)
    assert any(c.name.startswith("openai SDK") for c in contenders)
    for contender in contenders:
        inputs = contender.prepare(load.inputs) if contender.prepare else load.inputs
        assert contender.run(inputs) == load.n_events, contender.name
