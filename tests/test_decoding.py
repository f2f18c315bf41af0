"""Typed events: corpus streams, unknown and bad payloads, on_error, [DONE], realtime, encode_sse."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rapidsse
from rapidsse import (
    DecodeError,
    EventDecoder,
    EventTooLarge,
    InvalidEvent,
    SSEError,
    StreamError,
    UnknownEvent,
    chat,
    realtime,
    responses,
)
from rapidsse._backend import using

from .conftest import chunked, corpus_files, native

BACKENDS = ("python", "rust") if native is not None else ("python",)


def sse_payloads(data: bytes) -> list[tuple[str, bytes]]:
    """(event name, payload) per event, via the (separately tested) framer."""
    return [(e.event, e.data.encode()) for e in rapidsse.iter_sse([data])]


def decode_all(data: bytes, protocol: str, size: int, **kw) -> list:
    return list(rapidsse.iter_events(chunked(data, size), protocol, **kw))


def as_builtins(events: list) -> list:
    return [(type(e).__name__, msgspec.to_builtins(e, enc_hook=repr)) for e in events]


def delta(text: str, seq: int = 0) -> bytes:
    payload = {"type": "response.output_text.delta", "sequence_number": seq, "item_id": "m", "output_index": 0,
               "content_index": 0, "delta": text}
    return b"event: response.output_text.delta\ndata: " + json.dumps(payload).encode() + b"\n\n"


# --- the corpus --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_files("responses"), ids=lambda p: p.stem)
def test_responses_corpus_decodes_fully(path):
    data = path.read_bytes()
    expected = sse_payloads(data)
    for size in (7, 512, 65536):
        events = decode_all(data, "responses", size)
        assert len(events) == len(expected)
        for event, (name, payload) in zip(events, expected):
            wire = json.loads(payload)
            assert not isinstance(event, (UnknownEvent, InvalidEvent)), wire["type"]
            assert isinstance(event, responses.EVENT_TYPES[wire["type"]])
            assert event.type == wire["type"]
            for key, value in wire.items():
                if key != "type" and isinstance(value, (str, int, float, bool)) and hasattr(event, key):
                    assert getattr(event, key) == value, (wire["type"], key)


@pytest.mark.parametrize("path", corpus_files("chat"), ids=lambda p: p.stem)
def test_chat_corpus_decodes_fully_and_done_ends_it(path):
    data = path.read_bytes()
    expected = [p for _, p in sse_payloads(data) if p != b"[DONE]"]
    for size in (7, 512, 65536):
        events = decode_all(data, "chat", size)
        assert len(events) == len(expected)
        for event, payload in zip(events, expected):
            wire = json.loads(payload)
            assert isinstance(event, chat.ChatCompletionChunk)
            assert event.id == wire.get("id", event.id)
            assert len(event.choices) == len(wire.get("choices", []))
            for choice, wchoice in zip(event.choices, wire.get("choices", [])):
                assert choice.index == wchoice["index"]
                assert choice.finish_reason == wchoice.get("finish_reason")
                assert choice.delta.content == wchoice.get("delta", {}).get("content")


@pytest.mark.parametrize("path", corpus_files("realtime"), ids=lambda p: p.stem)
def test_realtime_corpus_decodes_message_by_message(path):
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    events = list(rapidsse.iter_realtime(lines))
    assert len(events) == len(lines)
    for event, line in zip(events, lines):
        wire = json.loads(line)
        assert not isinstance(event, (UnknownEvent, InvalidEvent)), wire["type"]
        assert event.type == wire["type"]
        assert rapidsse.decode_realtime(line.decode()) == event
        if "event_id" in wire:
            assert event.event_id == wire["event_id"]


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_backends_give_identical_events_on_the_corpus(kind):
    if native is None:
        pytest.skip("the compiled extension is not built")
    for path in corpus_files(kind):
        data = path.read_bytes()
        for size in (1, 512):
            rust = EventDecoder(kind)
            py = _pure_decoder(kind)
            got_rust = [e for c in chunked(data, size) for e in rust.feed(c)]
            got_py = [e for c in chunked(data, size) for e in py.feed(c)]
            assert got_rust == got_py, path.name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["responses", "chat", "anthropic"])
def test_decoders_made_per_stream_share_their_protocols_parts_and_nothing_else(backend, kind):
    """A decoder is made per stream from parts built once per protocol (its known types, its
    msgspec decoder, its Struct builder): decoders of one protocol fed the corpus's recordings
    all at once, chunk by chunk in turns, give each recording what a decoder made for it alone
    gives it; a bad payload at the start of one stream (its decoder routes by type from then on)
    changes nothing in the others."""
    paths = corpus_files(kind)
    streams = [chunked(p.read_bytes(), 512) for p in paths]
    streams[0] = [b'data: {"type":"x.hologram.delta","delta":}\n\n'] + streams[0]

    def seen(event):
        if isinstance(event, InvalidEvent):
            return ("invalid", event.raw)
        return ("event", type(event).__name__, rapidsse.encode(event))

    with using(backend):
        alone = [[seen(e) for e in EventDecoder(kind, on_error="keep").feed(b"".join(chunks))] for chunks in streams]
        decoders = [EventDecoder(kind, on_error="keep") for _ in streams]
        together: list[list] = [[] for _ in streams]
        for turn in range(max(map(len, streams))):
            for i, chunks in enumerate(streams):
                if turn < len(chunks):
                    together[i].extend(seen(e) for e in decoders[i].feed(chunks[turn]))
    assert len(paths) > 1 and together == alone
    assert alone[0][0][0] == "invalid" and all(e[0] == "event" for got in alone[1:] for e in got)


def _pure_decoder(protocol: str, on_error: str = "raise", max_event_size=16 << 20) -> EventDecoder:
    with using("python"):
        return EventDecoder(protocol, on_error=on_error, max_event_size=max_event_size)


# --- unknown, odd and bad payloads ---------------------------------------------------------------


def test_unknown_event_type_passes_through_untouched():
    raw = b'{"type":"response.hologram.delta","sequence_number":3,"delta":"x"}'
    stream = delta("a") + b"event: response.hologram.delta\ndata: " + raw + b"\n\n" + delta("b")
    for size in (1, 5, 1000):
        events = decode_all(stream, "responses", size)
        assert [type(e).__name__ for e in events] == ["OutputTextDelta", "UnknownEvent", "OutputTextDelta"]
        assert events[1] == UnknownEvent(type="response.hologram.delta", raw=raw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stream_turning_odd_midway_loses_nothing_and_keeps_order(backend):
    """Chunks batched without routing, then one with unknown and bad payloads among known ones
    (the Rust decoder routes from then on), then clean chunks again: every event, in order."""
    unknown = b'data: {"type":"response.hologram.delta","delta":"?"}\n\n'
    bad = b'data: {"type":"response.output_text.delta","delta":}\n\n'
    clean = b"".join(delta(c) for c in "abc")
    odd = delta("d") + unknown + delta("e") + bad + delta("f")
    with using(backend):
        decoder = EventDecoder("responses", on_error="keep")
        out = [decoder.feed(clean), decoder.feed(odd), decoder.feed(clean), decoder.feed(unknown + clean)]
    kinds = [[type(e).__name__ for e in chunk] for chunk in out]
    assert kinds == [
        ["OutputTextDelta"] * 3,
        ["OutputTextDelta", "UnknownEvent", "OutputTextDelta", "InvalidEvent", "OutputTextDelta"],
        ["OutputTextDelta"] * 3,
        ["UnknownEvent"] + ["OutputTextDelta"] * 3,
    ]
    texts = [e.delta for chunk in out for e in chunk if type(e).__name__ == "OutputTextDelta"]
    assert texts == list("abcdefabcabc")


def test_missing_type_falls_back_to_sse_event_name():
    stream = b'event: response.output_text.delta\ndata: {"delta":"hi","item_id":"m"}\n\n'
    (event,) = decode_all(stream, "responses", 100)
    assert isinstance(event, responses.OutputTextDelta) and event.delta == "hi"
    (event,) = decode_all(b'event: custom\ndata: {"x":1}\n\n', "responses", 100)
    assert event == UnknownEvent(type="custom", raw=b'{"x":1}')


def test_multi_line_data_payload_is_decoded():
    stream = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",\ndata: "delta":"two lines"}\n\n'
    (event,) = decode_all(stream, "responses", 3)
    assert event.delta == "two lines"


def test_nested_unknown_item_type_is_kept():
    response = {"id": "r", "object": "response", "status": "completed", "created_at": 1, "model": "m",
                "output": [{"type": "hologram_call", "id": "h1", "shape": "cube"}]}
    payload = json.dumps({"type": "response.completed", "response": response}).encode()
    (event,) = decode_all(b"data: " + payload + b"\n\n", "responses", 64)
    item = event.response.output[0]
    assert item.type == "hologram_call" and item.data["shape"] == "cube"


BAD = [
    (b"{not json", "invalid JSON"),
    (b"[1, 2]", "expected a JSON object, got array"),
    (b'{"type": 5}', "`type` must be a string"),
    (b'{"type":"response.output_text.delta","delta":5}', "Expected `str`, got `int`"),
]


@pytest.mark.parametrize("payload,reason", BAD)
def test_bad_payload_raises_decode_error_with_position(payload, reason):
    stream = delta("a") + b"event: oops\ndata: " + payload + b"\n\n" + delta("b")
    got = []
    with pytest.raises(DecodeError) as info:
        for event in rapidsse.iter_events(chunked(stream, 1000)):
            got.append(event)
    err = info.value
    assert isinstance(err, SSEError)
    assert [e.delta for e in got] == ["a"], "events before the bad one are yielded first"
    assert reason in str(err)
    assert err.index == 1 and err.event == "oops" and err.offset == len(delta("a"))
    assert err.raw == payload
    assert "event #1 'oops' at byte" in str(err)


def test_on_error_skip_and_keep_lose_nothing_else():
    stream = delta("a") + b"data: {bad\n\n" + delta("b") + b"data: [1]\n\n" + delta("c")
    for size in (1, 9, 10_000):
        skipped = decode_all(stream, "responses", size, on_error="skip")
        assert [e.delta for e in skipped] == ["a", "b", "c"]
        kept = decode_all(stream, "responses", size, on_error="keep")
        assert [type(e).__name__ for e in kept] == ["OutputTextDelta", "InvalidEvent", "OutputTextDelta",
                                                    "InvalidEvent", "OutputTextDelta"]
        assert kept[1].raw == b"{bad" and isinstance(kept[1].error, DecodeError) and kept[1].error.index == 1
        assert kept[3].error.index == 3


CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("builder", [True, False], ids=["builder", "msgspec"])
@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_each_payload_is_one_json_value_however_a_chunk_batches_them(backend, builder, protocol, monkeypatch):
    """A payload holding two JSON values, and a value cut over two payloads (the second followed by
    another value), are bad payloads, in one chunk as alone: reading the chunk's payloads as one
    stream of JSON values would make two good events of two bad payloads, or of one."""
    monkeypatch.setattr("rapidsse._wire.NATIVE_WIRE", builder)
    docs = [dict(CHUNK, choices=[dict(CHUNK["choices"][0], delta={"content": t})]) for t in "abcd"]
    if protocol == "responses":
        docs = [{"type": "response.output_text.delta", "sequence_number": i, "item_id": "m", "output_index": 0,
                 "content_index": 0, "delta": t} for i, t in enumerate("abcd")]
    a, b, c, d = (json.dumps(doc, separators=(",", ":")).encode() for doc in docs)
    payloads = [a, b[:-1], b"} " + c, c + b" " + c, b" " + d + b" "]
    stream = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    text = (lambda e: e.choices[0].delta.content) if protocol == "chat" else (lambda e: e.delta)
    with using(backend):
        for size in (len(stream), 7):
            kept = decode_all(stream, protocol, size, on_error="keep")
            assert [type(e).__name__ for e in kept[1:4]] == ["InvalidEvent"] * 3
            assert [e.raw for e in kept[1:4]] == payloads[1:4]
            assert [text(kept[0]), text(kept[4])] == ["a", "d"] and len(kept) == 5
            assert [text(e) for e in decode_all(stream, protocol, size, on_error="skip")] == ["a", "d"]
            with pytest.raises(DecodeError) as info:
                decode_all(stream, protocol, size)
            assert info.value.index == 1 and info.value.raw == b[:-1]


def test_invalid_utf8_in_payload_is_replaced_not_an_error():
    stream = b'data: {"type":"response.output_text.delta","delta":"a\xffb"}\n\n'
    (event,) = decode_all(stream, "responses", 4)
    assert event.delta == "a\ufffdb"


def test_error_events_are_typed_and_optionally_raised():
    err_payload = b'{"type":"error","code":"rate_limit","message":"slow down","param":null,"sequence_number":1}'
    stream = delta("a") + b"event: error\ndata: " + err_payload + b"\n\n" + delta("b")
    events = decode_all(stream, "responses", 50)
    assert isinstance(events[1], responses.Error) and events[1].code == "rate_limit"
    got = []
    with pytest.raises(StreamError) as info:
        for e in rapidsse.iter_events([stream], raise_on_error_event=True):
            got.append(e)
    assert [e.delta for e in got] == ["a"]
    assert info.value.code == "rate_limit" and "slow down" in str(info.value)

    groq = b'data: {"error":{"message":"Tool choice is required","type":"invalid_request_error","code":"tool_use_failed"}}\n\n'
    (chunk,) = decode_all(groq, "chat", 10)
    assert chunk.error.code == "tool_use_failed"
    with pytest.raises(StreamError, match="tool_use_failed"):
        decode_all(groq, "chat", 10, raise_on_error_event=True)


def test_chat_done_stops_and_later_input_is_ignored():
    chunk = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}\n\n'
    dec = EventDecoder("chat")
    assert len(dec.feed(chunk + b"data: [DONE]\n\n" + chunk)) == 1
    assert dec.done
    assert dec.feed(chunk) == []
    dec.close()
    assert not dec.done and len(dec.feed(chunk)) == 1, "close() readies the decoder for a new stream"

    pulled = []

    def source():
        for piece in (chunk, b"data: [DONE]\n\n", chunk):
            pulled.append(piece)
            yield piece

    assert len(list(rapidsse.iter_events(source(), "chat"))) == 1
    assert len(pulled) == 2, "iteration stops reading the source at [DONE]"


def test_event_too_large_keeps_earlier_events():
    big = b"data: " + b"x" * 300 + b"\n\n"
    dec = EventDecoder(max_event_size=200)
    with pytest.raises(EventTooLarge) as info:
        dec.feed(delta("a") + big)
    assert [e.delta for e in info.value.events] == ["a"]


def test_aiter_events_and_httpx_like_sources():
    stream = delta("a") + delta("b")

    async def source():
        for c in chunked(stream, 7):
            yield c

    async def collect():
        return [e.delta async for e in rapidsse.aiter_events(source())]

    assert asyncio.run(collect()) == ["a", "b"]

    class FakeResponse:
        def iter_bytes(self):
            return iter(chunked(stream, 5))

    assert [e.delta for e in rapidsse.iter_events(FakeResponse())] == ["a", "b"]


async def _agen(chunks, log=None, pause=False):
    """An async generator of ``chunks`` (suspending to the loop before each when ``pause``);
    appends "closed" to ``log`` when it is closed or cancelled, "pulled" per chunk."""
    try:
        for chunk in chunks:
            if pause:
                await asyncio.sleep(0)
            if log is not None:
                log.append("pulled")
            yield chunk
    finally:
        if log is not None:
            log.append("closed")


def _events_and_error(events_then_error):
    events, error = events_then_error
    return as_builtins(events), None if error is None else (type(error).__name__, str(error))


@pytest.mark.parametrize("on_error", ["raise", "skip", "keep"])
@pytest.mark.parametrize("pause", [False, True])
def test_aiter_events_yields_what_iter_events_does_up_to_the_same_error(on_error, pause):
    stream = delta("a") + delta("b") + b"data: {bad\n\n" + delta("c") + b"event: x\ndata: " + b"y" * 300 + b"\n\n" + delta("d")
    for size in (1, 7, 64, len(stream)):
        chunks = chunked(stream, size)

        def sync():
            out = []
            try:
                for e in rapidsse.iter_events(chunks, on_error=on_error, max_event_size=200):
                    out.append(e)
            except rapidsse.SSEError as exc:
                return out, exc
            return out, None

        async def asynchronous():
            out = []
            try:
                async for e in rapidsse.aiter_events(_agen(chunks, pause=pause), on_error=on_error, max_event_size=200):
                    out.append(e)
            except rapidsse.SSEError as exc:
                return out, exc
            return out, None

        expected = _events_and_error(sync())
        assert expected[1] is not None  # the oversized event raises in every mode
        assert _events_and_error(asyncio.run(asynchronous())) == expected, size


def test_aiter_events_stops_reading_at_done_and_aclose_closes_the_source():
    stream = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}\n\ndata: [DONE]\n\n'
    log = []

    async def until_done():
        return [e async for e in rapidsse.aiter_events(_agen([stream, b"data: never read\n\n"], log), "chat")]

    assert len(asyncio.run(until_done())) == 1
    assert log.count("pulled") == 1, "iteration stops reading the source at [DONE]"

    async def closed_early():
        log.clear()
        events = rapidsse.aiter_events(_agen([delta("a") + delta("b"), delta("c")], log))
        first = await events.__anext__()
        await events.aclose()
        with pytest.raises(StopAsyncIteration):
            await events.__anext__()  # the held second event is not handed out after aclose
        return first.delta

    assert asyncio.run(closed_early()) == "a"
    assert log == ["pulled", "closed"]


def test_aiter_events_cancelled_while_awaiting_a_chunk():
    log = []
    started = []

    async def stalled():
        try:
            yield delta("a")
            started.append(True)
            await asyncio.Event().wait()  # never set
            yield delta("b")
        finally:
            log.append("source closed")

    async def run():
        got = []

        async def consume():
            async for e in rapidsse.aiter_events(stalled()):
                got.append(e.delta)

        task = asyncio.ensure_future(consume())
        while not started:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    assert asyncio.run(run()) == ["a"]
    assert log == ["source closed"], "the cancellation reached the source where it awaited"


def test_argument_validation():
    with pytest.raises(ValueError):
        EventDecoder("realtime")
    with pytest.raises(ValueError):
        EventDecoder(on_error="ignore")


# --- realtime -------------------------------------------------------------------------------


def test_decode_realtime_unknown_and_bad():
    assert rapidsse.decode_realtime('{"type":"x.new","a":1}') == UnknownEvent(type="x.new", raw=b'{"type":"x.new","a":1}')
    with pytest.raises(DecodeError, match="invalid JSON"):
        rapidsse.decode_realtime(b"{")
    done = rapidsse.decode_realtime(
        b'{"type":"response.done","response":{"id":"r","status":"completed","max_output_tokens":"inf","output":[]}}'
    )
    assert isinstance(done, realtime.ResponseDone) and done.response.max_output_tokens == "inf"
    kept = list(rapidsse.iter_realtime([b"{", b'{"type":"session.closed","reason":"bye"}'], on_error="keep"))
    assert isinstance(kept[0], InvalidEvent) and kept[1].type == "session.closed"


# --- encode_sse round trip ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_encode_sse_round_trips_the_corpus(kind):
    for path in corpus_files(kind):
        events = decode_all(path.read_bytes(), kind, 65536)
        encoded = b"".join(rapidsse.encode_sse(e) for e in events)
        assert decode_all(encoded, kind, 333) == events, path.name


def test_encode_sse_unknown_invalid_and_plain_events():
    unknown = UnknownEvent(type="x.y", raw=b'{"type":"x.y","v":[1,\n2]}')
    assert decode_all(rapidsse.encode_sse(unknown), "responses", 3) == [
        UnknownEvent(type="x.y", raw=b'{"type":"x.y","v":[1,\n2]}')
    ]
    sse = rapidsse.ServerSentEvent("ping", "a\nb", "7", 1500)
    assert list(rapidsse.iter_sse([rapidsse.encode_sse(sse)])) == [sse]
    with pytest.raises(TypeError):
        rapidsse.encode_sse({"type": "x"})


# --- differential: random payload streams, random chunking, both backends ------------------------

_payloads = st.sampled_from(
    [
        b'{"type":"response.output_text.delta","delta":"x","item_id":"i"}',
        b'{"type":"response.created","response":{"id":"r","status":"in_progress","output":[]}}',
        b'{"type":"keepalive"}',
        b'{"type":"unknown.future","a":[1,{"b":"}"}]}',
        b'{"delta":"no type"}',
        b'{"type":"response.output_text.delta","delta":7}',
        b'{"type":"response.output_text.delta"',
        b'[1]', b'"s"', b"", b" ", b"{}", b"[DONE]", b"{\xff}", b'{"type":5}',
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}',
        b'{"type":"error","message":"m"}',
    ]
)
_names = st.sampled_from([b"", b"event: response.output_text.delta\n", b"event: x\n", b"event: error\n"])


@st.composite
def payload_streams(draw):
    parts = []
    for payload, name in draw(st.lists(st.tuples(_payloads, _names), max_size=12)):
        lines = payload.split(b"\n") if draw(st.booleans()) else [payload]
        if draw(st.booleans()) and len(payload) > 4:
            lines = [payload[:3], payload[3:]]  # a payload split across data lines
        parts.append(name + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n")
    data = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    return data, [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def _outcome(decoder, chunks):
    out = []
    for chunk in chunks:
        try:
            out.extend(as_builtins(decoder.feed(chunk)))
        except SSEError as exc:
            out.extend(as_builtins(exc.events))
            out.append(("error", type(exc).__name__, str(exc)))
            break
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload_streams(), st.sampled_from(["responses", "chat"]), st.sampled_from(["raise", "skip", "keep"]))
def test_differential_typed_decoding(stream, protocol, on_error):
    data, chunks = stream
    reference = _outcome(_pure_decoder(protocol, on_error), [data])
    assert _outcome(_pure_decoder(protocol, on_error), chunks) == reference
    if native is not None:
        assert _outcome(EventDecoder(protocol, on_error=on_error), chunks) == reference
