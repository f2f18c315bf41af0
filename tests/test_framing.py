"""SSE framing per WHATWG "parsing an event stream" (PROTOCOLS.md §1), at every chunking."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rapidsse
from rapidsse import EventTooLarge, ServerSentEvent, SSEDecoder, SSEError

from .conftest import chunked, corpus_files, sample_feed

E = ServerSentEvent
BOM = b"\xef\xbb\xbf"


def feed_chunks(decoder, chunks) -> list[ServerSentEvent]:
    out = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    out.extend(decoder.close())
    return out


def frame(data: bytes) -> list[ServerSentEvent]:
    """Frames ``data`` whole, byte by byte, at sizes 2..7 and with empty chunks in between; all must agree."""
    whole = feed_chunks(SSEDecoder(), [data])
    for size in range(1, 8):
        assert feed_chunks(SSEDecoder(), chunked(data, size)) == whole, f"chunk size {size}"
    with_empties = [piece for b in chunked(data, 1) for piece in (b"", b)]
    assert feed_chunks(SSEDecoder(), with_empties) == whole
    return whole


def test_backend_is_reported():
    assert rapidsse.BACKEND in ("rust", "python")


def test_basic_event_and_default_type():
    assert frame(b"data: hello\n\n") == [E("message", "hello")]
    assert frame(b"event: add\ndata: 1\n\n") == [E("add", "1")]
    assert frame(b"event:\ndata: 1\n\n") == [E("message", "1")]


@pytest.mark.parametrize(
    "data",
    [
        b"data: a\r\n\r\ndata: b\r\rdata: c\n\n",
        b"data: a\n\ndata: b\r\n\rdata: c\r\n\r\n",
        b"data: a\r\rdata: b\n\r\ndata: c\r\n\n",
    ],
)
def test_cr_lf_crlf_and_mixed_endings(data):
    assert frame(data) == [E(data="a"), E(data="b"), E(data="c")]


def test_lf_cr_lf_is_a_line_end_then_a_blank_line():
    assert frame(b"data: x\n\r\ndata: y\n\n") == [E(data="x"), E(data="y")]


def test_cr_at_chunk_end_dispatches_at_once_and_swallows_next_lf():
    d = SSEDecoder()
    assert d.feed(b"data: a\r\r") == [E(data="a")], "a CR must not be held back"
    assert d.feed(b"\ndata: b\r") == []
    assert d.feed(b"\n\n") == [E(data="b")]
    # The swallowed LF is only the one right after the CR, also across an empty chunk.
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    assert d.feed(b"") == []
    assert d.feed(b"\n") == []
    assert d.feed(b"\n") == [E(data="a")]


def test_bom_dropped_once_even_split_and_after_empty_chunks():
    data = BOM + b"data: a\n\n"
    assert frame(data) == [E(data="a")]
    d = SSEDecoder()
    assert d.feed(b"") == []
    assert d.feed(BOM[:1]) == []
    assert d.feed(b"") == []
    assert d.feed(BOM[1:2]) == []
    assert d.feed(BOM[2:] + b"data: a\n\n") == [E(data="a")]
    # A second BOM belongs to the first field name, so that line is ignored.
    assert frame(BOM + BOM + b"data: a\n\ndata: b\n\n") == [E(data="b")]
    # A BOM later in the stream is ordinary text.
    assert frame(b"data: a\n\n" + BOM + b"data: b\n\n") == [E(data="a")]
    # A partial BOM is ordinary bytes of the first line.
    assert frame(BOM[:2] + b"data: a\n\ndata: b\n\n") == [E(data="b")]
    assert frame(BOM[:2] + b"\n\ndata: b\n\n") == [E(data="b")]


def test_comments_and_fields():
    assert frame(b": ping\n\n:\n\ndata: x\n\n") == [E(data="x")]
    assert frame(b"data\n\n") == [E(data="")]
    assert frame(b"data:no space\n\n") == [E(data="no space")]
    assert frame(b"data:  two spaces\n\n") == [E(data=" two spaces")]
    assert frame(b"data:\ttab\n\n") == [E(data="\ttab")]
    assert frame(b"data: a:b: c\n\n") == [E(data="a:b: c")]
    assert frame(b"Data: x\nDATA: y\nfoo: z\n\n") == []
    assert frame(b"event\ndata: x\n\n") == [E(data="x")]


def test_multi_line_data():
    assert frame(b"data: a\ndata\ndata: b\n\n") == [E(data="a\n\nb")]
    assert frame(b"data:\ndata:\n\n") == [E(data="\n")]
    assert frame(b"data: a\n: comment inside\ndata: b\n\n") == [E(data="a\nb")]


def test_ids_sticky_nul_ignored_empty_resets():
    events = frame(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x00x\ndata: c\n\nid\ndata: d\n\nid: 3\ndata: e\n\n")
    assert [(e.data, e.id) for e in events] == [("a", "1"), ("b", "1"), ("c", "1"), ("d", ""), ("e", "3")]


def test_last_event_id_committed_at_dispatch_only():
    d = SSEDecoder()
    d.feed(b"id: 7\n")
    assert d.last_event_id == ""
    d.feed(b"\n")
    assert d.last_event_id == "7", "an id-only block commits the id without an event"
    assert d.feed(b"id: 8\ndata: x\n") == []
    d.close()
    assert d.last_event_id == "7", "an id seen only in an unfinished event is not committed"
    assert d.feed(b"data: y\n\n") == [E(data="y", id="7")], "the id survives close() for reconnects"


def test_retry_digits_only():
    d = SSEDecoder()
    assert d.retry is None
    events = feed_chunks(d, [b"retry: 03000\ndata: a\n\ndata: b\n\n"])
    assert events == [E(data="a", retry=3000), E(data="b")]
    assert d.retry == 3000
    for bad in [b"+5", b"-1", b" 5", b"1_0", b"", b"\xd9\xa1", b"5s", b"1.5", b"\xef\xbc\x95"]:
        d = SSEDecoder()
        assert feed_chunks(d, [b"retry: " + bad + b"\ndata: x\n\n"]) == [E(data="x")], bad
        assert d.retry is None
    big = frame(b"retry: 0123456789012345678901234567890\ndata: x\n\n")
    assert big[0].retry == 123456789012345678901234567890


def test_no_phantom_events_and_type_reset():
    assert frame(b"id: 1\n\n: c\n\nevent: ping\n\ndata: x\n\n") == [E(data="x", id="1")]
    assert frame(b"event: ping\n\n\n\n\ndata: x\n\n") == [E(data="x")]


def test_unfinished_last_event_is_discarded():
    assert frame(b"data: a\n\ndata: b\n") == [E(data="a")]
    assert frame(b"data: a\n\ndata: b") == [E(data="a")]


def test_invalid_utf8_becomes_replacement_character():
    assert frame(b"data: a\xffb\n\n") == [E(data="a\ufffdb")]
    assert frame(b"event: \xc3\n\xe2\x82\ndata: \xe2\x82\n\n") == [E("\ufffd", "\ufffd")]
    # A multi-byte character split across chunks is reassembled.
    snowman = "data: \u2603\n\n".encode()
    assert frame(snowman) == [E(data="\u2603")]


def test_unicode_line_separators_are_not_line_ends():
    text = "data: a\u2028b\u2029c\u0085d\x0ce\x0bf\x1cg\n\n"
    assert frame(text.encode()) == [E(data="a\u2028b\u2029c\u0085d\x0ce\x0bf\x1cg")]


def test_feed_accepts_bytes_like_and_rejects_str():
    d = SSEDecoder()
    assert d.feed(bytearray(b"data: a\n\n")) == [E(data="a")]
    assert d.feed(memoryview(b"data: b\n\n")) == [E(data="b")]
    with pytest.raises(TypeError):
        d.feed("data: c\n\n")


def test_event_too_large_on_data_and_on_unterminated_line():
    d = SSEDecoder(max_event_size=12)
    with pytest.raises(EventTooLarge) as info:
        d.feed(b"data: ok\n\ndata:0123456\ndata:0123456\n\n")
    err = info.value
    assert isinstance(err, SSEError)
    assert err.limit == 12
    assert err.events == [E(data="ok")], "events completed before the error are not lost"
    assert "max_event_size=12" in str(err) and "after 1 events" in str(err)
    with pytest.raises(SSEError, match="reset"):
        d.feed(b"data: x\n\n")
    d.reset()
    assert d.feed(b"data:012345\ndata:01234\n\n") == [E(data="012345\n01234")], "exactly the cap is allowed"

    d = SSEDecoder(max_event_size=1024)
    with pytest.raises(EventTooLarge) as info:
        for _ in range(1000):
            d.feed(b"x" * 100)  # a stream that never sends a newline
    assert info.value.offset == 1100
    assert "line without line end" in str(info.value)


def test_size_cap_is_independent_of_chunking():
    data = b"data: " + b"y" * 100 + b"\n\n"
    for size in (1, 7, 50, len(data)):
        d = SSEDecoder(max_event_size=100)
        with pytest.raises(EventTooLarge):
            feed_chunks(d, chunked(data, size))
        assert feed_chunks(SSEDecoder(max_event_size=106), chunked(data, size)) == [E(data="y" * 100)]


def test_no_cap_with_none():
    data = b"data: " + b"z" * (3 << 20) + b"\n\n"
    assert feed_chunks(SSEDecoder(max_event_size=None), chunked(data, 65536))[0].data == "z" * (3 << 20)
    with pytest.raises(EventTooLarge):
        feed_chunks(SSEDecoder(max_event_size=1 << 20), chunked(data, 65536))


def test_server_sent_event_value_type():
    e = E("x", '{"a": [1, 2]}', "7", 10)
    assert e == E(event="x", data='{"a": [1, 2]}', id="7", retry=10)
    assert e != E("x", '{"a": [1, 2]}', "7")
    assert e.json() == {"a": [1, 2]}
    assert E().event == "message" and E().data == "" and E().id == "" and E().retry is None
    with pytest.raises(rapidsse.DecodeError):
        E(data="not json").json()
    assert hash(e) == hash(E("x", '{"a": [1, 2]}', "7", 10))


def test_iter_sse_and_aiter_sse():
    chunks = [b"data: a\n", b"\ndata: b\n\n", b"data: unfinished"]
    assert list(rapidsse.iter_sse(chunks)) == [E(data="a"), E(data="b")]

    async def source():
        for c in chunks:
            yield c

    async def collect():
        return [e async for e in rapidsse.aiter_sse(source())]

    assert asyncio.run(collect()) == [E(data="a"), E(data="b")]


def test_iter_sse_yields_events_before_an_error():
    got = []
    with pytest.raises(EventTooLarge):
        for e in rapidsse.iter_sse([b"data: a\n\ndata: " + b"x" * 50 + b"\n\n"], max_event_size=20):
            got.append(e)
    assert got == [E(data="a")]


@pytest.mark.parametrize("kind", ["responses", "chat"])
def test_corpus_frames_identically_at_every_chunk_size(kind, pure_decoder):
    for path in corpus_files(kind):
        data = path.read_bytes()
        reference = feed_chunks(pure_decoder(), [data])
        assert reference, path.name
        assert all(e.data for e in reference)
        for size in (1, 7, 512, 65536):
            assert feed_chunks(SSEDecoder(), chunked(data, size)) == reference, (path.name, size)


# --- differential property test: Rust vs Python vs one chunk --------------------------------

_pieces = st.sampled_from(
    [
        b"data: x", b"data:y", b"data", b"data: \xe2\x98\x83", b"data: \xe2\x98", b"\xff", b"event: e",
        b"event:", b"id: 1", b"id: 2\x00", b"id", b"retry: 10", b"retry: 1x", b"retry:007", b": c",
        b":", b"foo: bar", b" data: z", b"data: a:b", b"\xef\xbb\xbf", "\u2028".encode(),
        b"\n", b"\r", b"\r\n", b"\n\n", b"\r\r", b"\n\r\n", b" ", b"\t",
    ]
)


@st.composite
def split_streams(draw):
    data = b"".join(draw(st.lists(_pieces, max_size=40)))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    chunks, prev = [], 0
    for cut in cuts:
        chunks.append(data[prev:cut])
        prev = cut
    chunks.append(data[prev:])
    return data, chunks


def _run(decoder, chunks):
    events, errors = [], []
    for chunk in chunks:
        try:
            events.extend(decoder.feed(chunk))
        except EventTooLarge as exc:
            errors.append(str(exc))
            events.extend(exc.events)
            decoder.reset()
    return [(e.event, e.data, e.id, e.retry) for e in events], errors, decoder.last_event_id, decoder.retry


@settings(max_examples=400, deadline=None)
@given(split_streams())
def test_differential_rust_python_and_single_chunk(pure_decoder, native_decoder, stream):
    data, chunks = stream
    single = _run(pure_decoder(), [data])
    assert _run(pure_decoder(), chunks) == single
    assert _run(native_decoder(), chunks) == single
    assert _run(native_decoder(), [data]) == single


@settings(max_examples=200, deadline=None)
@given(split_streams(), st.integers(0, 40))
def test_differential_with_size_cap(pure_decoder, native_decoder, stream, cap):
    _, chunks = stream
    assert _run(native_decoder(cap), chunks) == _run(pure_decoder(cap), chunks)


# --- drain: the loop behind every iterator (native on the Rust backend) -----------------------


def _drains():
    from rapidsse import framing

    from .conftest import native

    yield "python", framing._drain
    if native is not None:
        yield "rust", native.Drain


@pytest.mark.parametrize("name,drain", list(_drains()), ids=lambda v: v if isinstance(v, str) else "")
def test_drain_hands_out_events_then_errors_and_stops_reading(name, drain):
    log = []

    def source(chunks):
        for chunk in chunks:
            log.append(("read", chunk))
            yield chunk

    feed = sample_feed

    def at_end():
        log.append("end")

    # To the end: every event, then at_end once.
    assert list(drain(feed, source(["a", "b"]), None, at_end)) == ["a.1", "a.2", "b.1", "b.2"]
    assert log == [("read", "a"), ("read", "b"), "end"]

    # finished(): stops reading after the chunk that finished it; its events still come, then at_end.
    log.clear()
    done = iter([False, True])
    got = list(drain(feed, source(["a", "b", "c"]), lambda: next(done), at_end))
    assert got == ["a.1", "a.2", "b.1", "b.2"] and log == [("read", "a"), ("read", "b"), "end"]

    # An SSEError: the events completed before it, then the error; nothing more read, no at_end.
    log.clear()
    it = drain(feed, source(["a", "bad", "c"]), None, at_end)
    got = []
    with pytest.raises(SSEError, match="bad chunk"):
        for event in it:
            got.append(event)
    assert got == ["a.1", "a.2", "e-before-error"] and log == [("read", "a"), ("read", "bad")]
    assert list(it) == []

    # Any other error from feed or from the source: raised at once, the iterator is over.
    log.clear()
    it = drain(feed, source(["a", "boom", "c"]), None, at_end)
    assert next(it) == "a.1" and next(it) == "a.2"
    with pytest.raises(KeyError):
        next(it)
    assert list(it) == [] and "end" not in log

    def failing_source():
        yield "a"
        raise OSError("connection reset")

    it = drain(feed, failing_source(), None, at_end)
    assert [next(it), next(it)] == ["a.1", "a.2"]
    with pytest.raises(OSError):
        next(it)
    assert list(it) == []

    # Empty lists are skipped; an empty source gives nothing, then at_end.
    log.clear()
    assert list(drain(lambda c: [], source(["x", "y"]), None, at_end)) == []
    assert log == [("read", "x"), ("read", "y"), "end"]


def test_iterators_are_native_on_the_rust_backend():
    it = rapidsse.iter_events([b""])
    assert type(it).__name__ == ("Drain" if rapidsse.BACKEND == "rust" else "generator")
    assert list(it) == []


def test_cr_anywhere_in_events_of_the_usual_shape(pure_decoder, native_decoder):
    """The quick paths take `event:`/`data:`/blank-line events whole; a CR at any place in or
    around such events (a line end of its own) must give what the line-by-line reading gives,
    at every split into two chunks and with the event names repeating."""
    base = b"event: delta\ndata: {\"a\":1}\n\nevent: delta\ndata: {\"b\":2}\n\nevent: done\ndata: x\n\n"
    streams = [base]
    for i in range(len(base) + 1):
        streams.append(base[:i] + b"\r" + base[i:])
    for i in range(0, len(base), 3):
        if base[i : i + 1] == b"\n":
            streams.append(base[:i] + b"\r" + base[i + 1 :])
    for data in streams:
        single = _run(pure_decoder(), [data])
        for cut in range(len(data) + 1):
            chunks = [data[:cut], data[cut:]]
            assert _run(native_decoder(), chunks) == single, (data, cut)


_FEEDS = {
    "SSEDecoder": lambda: SSEDecoder().feed,
    "EventDecoder": lambda: rapidsse.decoding.EventDecoder("responses").feed,
    "ResponseAccumulator": lambda: rapidsse.ResponseAccumulator().feed,
    "ChatAccumulator": lambda: rapidsse.ChatAccumulator().feed,
}


@pytest.mark.parametrize("feed", sorted(_FEEDS))
def test_every_feed_takes_bytes_like_chunks_and_refuses_the_rest(feed):
    for chunk in (b"data: {}\n\n", bytearray(b"data: {}\n\n"), memoryview(b"data: {}\n\n")):
        _FEEDS[feed]()(chunk)
    with pytest.raises(TypeError, match="got str"):
        _FEEDS[feed]()("data: {}\n\n")
    # Not bytes(5) (five NUL bytes), nor anything else that is not bytes-like.
    for chunk in (5, None, [1, 2]):
        with pytest.raises(TypeError, match="bytes-like object is required"):
            _FEEDS[feed]()(chunk)
