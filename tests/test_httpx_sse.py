"""rapidsse.integrations.httpx_sse as a drop-in for httpx-sse: held to the real httpx-sse package
(installed as a test dependency) on its documented behaviour, its README's examples, sync and
async clients, ASGI apps and the recorded corpus; and to the WHATWG rules where the two differ."""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import pickle
import time
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")
real = pytest.importorskip("httpx_sse")

import rapidsse  # noqa: E402
from rapidsse import bench  # noqa: E402
from rapidsse.integrations import SSEContentTypeError as RapidsseContentTypeError  # noqa: E402
from rapidsse.integrations import httpx_sse  # noqa: E402

from .conftest import chunked, corpus_files  # noqa: E402

TIMEOUT = 10.0
SSE = {"content-type": "text/event-stream"}


def fields(events):
    return [(e.event, e.data, e.id, e.retry) for e in events]


def response(chunks, headers=SSE):
    return httpx.Response(200, headers=headers, content=iter(chunks))


class AsyncBody(httpx.AsyncByteStream):
    def __init__(self, chunks):
        self.chunks = chunks

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk
            await asyncio.sleep(0)


def aresponse(chunks, headers=SSE):
    return httpx.Response(200, headers=headers, stream=AsyncBody(chunks))


def read(module, chunks, headers=SSE):
    """The events ``module``'s EventSource reads from a response made of ``chunks``."""
    return fields(module.EventSource(response(chunks, headers)).iter_sse())


def read_both(data, size=None, headers=SSE):
    chunks = chunked(data, size) if size else [data]
    return read(real, chunks, headers), read(httpx_sse, chunks, headers)


# --- the public API -------------------------------------------------------------------------


def test_every_public_name_of_httpx_sse_is_here():
    for name in real.__all__:
        assert hasattr(httpx_sse, name), name
    assert httpx_sse.__version__.rsplit(".", 1)[0] == real.__version__.rsplit(".", 1)[0]
    for name in ("connect_sse", "aconnect_sse"):
        ours, theirs = inspect.signature(getattr(httpx_sse, name)), inspect.signature(getattr(real, name))
        assert list(ours.parameters) == list(theirs.parameters)
    assert list(inspect.signature(httpx_sse.EventSource).parameters) == ["response"]
    assert list(inspect.signature(httpx_sse.ServerSentEvent).parameters) == ["event", "data", "id", "retry"]


CONSTRUCTIONS = [
    ((), {}),
    (("ping",), {}),
    (("ping", "hello", "7", 3000), {}),
    ((), {"event": None, "data": None, "id": None, "retry": None}),
    ((), {"event": ""}),
    ((), {"data": ""}),
    ((), {"data": "x"}),
    ((), {"id": "abc"}),
    ((), {"retry": 0}),
    ((), {"data": "line 1\nline 2", "event": "update"}),
    ((), {"data": "data", "retry": 3, "id": "id", "event": "event"}),
    ((), {"data": "quote ' \" \\ é \u2028"}),
]


@pytest.mark.parametrize(("args", "kwargs"), CONSTRUCTIONS)
def test_server_sent_event_defaults_and_repr_match(args, kwargs):
    ours, theirs = httpx_sse.ServerSentEvent(*args, **kwargs), real.ServerSentEvent(*args, **kwargs)
    assert (ours.event, ours.data, ours.id, ours.retry) == (theirs.event, theirs.data, theirs.id, theirs.retry)
    assert repr(ours) == repr(theirs)


def test_server_sent_event_documented_defaults():
    sse = httpx_sse.ServerSentEvent()
    assert (sse.event, sse.data, sse.id, sse.retry) == ("message", "", "", None)
    assert repr(sse) == "ServerSentEvent(event='message')"


@pytest.mark.parametrize("name", ["event", "data", "id", "retry"])
def test_server_sent_event_attributes_are_read_only(name):
    for module in (real, httpx_sse):
        with pytest.raises(AttributeError):
            setattr(module.ServerSentEvent(data="x"), name, "y")


def test_server_sent_event_equality_is_identity_as_in_httpx_sse():
    for module in (real, httpx_sse):
        a, b = module.ServerSentEvent(data="x", id="1"), module.ServerSentEvent(data="x", id="1")
        assert a == a and not (a != a)
        assert a != b and not (a == b)
        assert hash(a) == hash(a)
        assert len({a, b}) == 2
        assert [a, b].index(b) == 1
    assert httpx_sse.ServerSentEvent(data="x") != real.ServerSentEvent(data="x")


def test_server_sent_event_pickles_and_copies():
    sse = httpx_sse.ServerSentEvent("update", "payload", "42", 1500)
    for clone in (pickle.loads(pickle.dumps(sse)), copy.copy(sse), copy.deepcopy(sse)):
        assert type(clone) is httpx_sse.ServerSentEvent
        assert fields([clone]) == fields([sse])
    assert pickle.loads(pickle.dumps(httpx_sse.ServerSentEvent(event=None))).event == "message"


def test_server_sent_event_rich_repr_is_its_repr():
    pretty = pytest.importorskip("rich.pretty")
    for sse in (httpx_sse.ServerSentEvent(), httpx_sse.ServerSentEvent("e", "d", "i", 1)):
        assert pretty.pretty_repr(sse) == repr(sse)


# --- ServerSentEvent.json() -----------------------------------------------------------------

JSON_DOCUMENTS = [
    '{"key": "value"}',
    '["item1", "item2"]',
    '{"type":"response.output_text.delta","delta":" hi","sequence_number":4}',
    "123456789012345678901234567890",
    "-0",
    "-0.0",
    "1e400",
    "-1e400",
    "1.7976931348623157e309",
    "NaN",
    "Infinity",
    "-Infinity",
    '"\\ud800"',
    '"\\udc00\\ud83d"',
    '{"a": 1, "a": 2}',
    ' \t\r\n[1] \n',
    '"\\u0000\\u2028"',
    "1.0000000000000000000000000001",
    "null",
    "true",
    '"é \U0001F600"',
]


@pytest.mark.parametrize("document", JSON_DOCUMENTS)
def test_json_gives_what_json_loads_gives(document):
    expected = json.loads(document)
    for module in (real, httpx_sse):
        value = module.ServerSentEvent(data=document).json()
        assert type(value) is type(expected) and repr(value) == repr(expected)


NOT_JSON = ["", "{", "[1,]", '{"a":1,}', "nan", "1 2", "\ufeff1", "{'a': 1}", '"a\x01"', "01", ".5", "{\n  \"a\": }"]


@pytest.mark.parametrize("data", NOT_JSON)
def test_json_raises_json_decode_error_as_json_loads_does(data):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(data)
    with pytest.raises(json.JSONDecodeError) as theirs:
        real.ServerSentEvent(data=data).json()
    with pytest.raises(json.JSONDecodeError) as ours:
        httpx_sse.ServerSentEvent(event="update", data=data).json()
    err = ours.value
    for other in (expected.value, theirs.value):
        assert (err.msg, err.doc, err.pos, err.lineno, err.colno, str(err)) == (
            other.msg, other.doc, other.pos, other.lineno, other.colno, str(other))
    assert isinstance(err, httpx_sse.JSONDecodeError) and isinstance(err, ValueError)
    assert isinstance(err, rapidsse.DecodeError) and isinstance(err, rapidsse.SSEError)
    assert (err.reason, err.event, err.raw, err.index, err.offset) == (err.msg, "update", data.encode(), -1, -1)
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is httpx_sse.JSONDecodeError and str(clone) == str(err)


def test_json_passes_other_errors_through_as_json_loads_does():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(deep)
    with pytest.raises(RecursionError):
        httpx_sse.ServerSentEvent(data=deep).json()


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
_json_ish = st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.eE+-tfnulrsaNIiy \t\n\\u\ud800é')), max_size=30)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_json_values.map(json.dumps), _json_ish))
def test_json_matches_json_loads_on_any_text(text):
    try:
        expected = ("ok", json.loads(text))
    except json.JSONDecodeError as exc:
        expected = ("error", (exc.msg, exc.pos))
    try:
        got = ("ok", httpx_sse.ServerSentEvent(data=text).json())
    except json.JSONDecodeError as exc:
        got = ("error", (exc.msg, exc.pos))
    assert got[0] == expected[0]
    if got[0] == "ok":
        assert repr(got[1]) == repr(expected[1]) and type(got[1]) is type(expected[1])
    else:
        assert got[1] == expected[1]


# --- errors ---------------------------------------------------------------------------------


def test_sse_error_is_an_httpx_transport_error_and_a_rapidsse_error():
    for base in (httpx.TransportError, httpx.RequestError, httpx.HTTPError, rapidsse.SSEError):
        assert issubclass(httpx_sse.SSEError, base)
    assert issubclass(real.SSEError, httpx.TransportError)
    err = httpx_sse.SSEError("boom")
    assert str(err) == "boom" and err.events == []
    with pytest.raises(RuntimeError):
        err.request  # as for httpx-sse's: none was set
    request = httpx.Request("GET", "http://test/")
    assert httpx_sse.SSEError("boom", request=request).request is request
    for cls in (httpx_sse.SSEContentTypeError, httpx_sse.EventTooLarge):
        assert issubclass(cls, httpx_sse.SSEError)
    assert issubclass(httpx_sse.SSEContentTypeError, RapidsseContentTypeError)
    assert issubclass(httpx_sse.EventTooLarge, rapidsse.EventTooLarge)


@pytest.mark.parametrize("content_type", [None, "application/json", "text/plain; charset=utf-8", "text/html"])
def test_wrong_content_type_raises_sse_error_when_iteration_starts(content_type):
    headers = {} if content_type is None else {"content-type": content_type}
    messages = []
    for module in (real, httpx_sse):
        source = module.EventSource(httpx.Response(200, headers=headers, content=b"data: x\n\n"))
        events = source.iter_sse()  # a generator: nothing is checked yet
        assert inspect.isgenerator(events)
        with pytest.raises(module.SSEError) as info:
            next(events)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    err = info.value
    assert isinstance(err, httpx_sse.SSEContentTypeError) and isinstance(err, RapidsseContentTypeError)
    assert isinstance(err, httpx.TransportError) and isinstance(err, rapidsse.SSEError)
    assert (err.content_type, err.status_code) == (content_type or "", 200)
    assert err.response is source.response


@pytest.mark.parametrize(
    "content_type",
    ["text/event-stream", "text/event-stream; charset=utf-8", "application/json, text/event-stream; charset=utf-8"],
)
def test_content_types_httpx_sse_accepts(content_type):
    theirs, ours = read_both(b"data: test\n\n", headers={"content-type": content_type})
    assert ours == theirs == [("message", "test", "", None)]


def test_content_type_check_ignores_case_where_httpx_sse_does_not():
    headers = {"content-type": "Text/Event-Stream"}
    with pytest.raises(real.SSEError):
        read(real, [b"data: x\n\n"], headers)
    assert read(httpx_sse, [b"data: x\n\n"], headers) == [("message", "x", "", None)]


def test_wrong_content_type_async():
    async def run():
        for module in (real, httpx_sse):
            source = module.EventSource(httpx.Response(200, headers={"content-type": "application/json"}, content=b"{}"))
            with pytest.raises(module.SSEError, match="text/event-stream"):
                async for _ in source.aiter_sse():
                    pass

    asyncio.run(run())


# --- connect_sse / aconnect_sse -------------------------------------------------------------


class Recorder:
    """A MockTransport handler: records each request and answers with ``body`` as SSE (or
    ``status`` / ``content_type`` when given)."""

    def __init__(self, body=b"data: test\n\n", status=200, content_type="text/event-stream"):
        self.body, self.status, self.content_type = body, status, content_type
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        return httpx.Response(self.status, headers={"content-type": self.content_type}, content=self.body)


def test_connect_sse_sends_the_sse_headers_and_the_request_as_httpx_sse_does():
    sent = []
    for module in (real, httpx_sse):
        handler = Recorder()
        headers = {"Authorization": "Bearer t", "Accept": "application/json"}
        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            with module.connect_sse(client, "POST", "http://test/sse", params={"q": "1"}, json={"a": 1},
                                    headers=headers) as source:
                assert isinstance(source, module.EventSource)
                assert source.response.request.headers["cache-control"] == "no-store"
                events = fields(source.iter_sse())
            assert source.response.is_closed
        (request,) = handler.requests
        assert events == [("message", "test", "", None)]
        assert request.headers["accept"] == "text/event-stream"
        assert request.headers["authorization"] == "Bearer t"
        sent.append((request.method, str(request.url), request.content))
    assert sent[0] == sent[1] == ("POST", "http://test/sse?q=1", b'{"a":1}')
    assert headers == {"Authorization": "Bearer t", "Accept": "application/json"}  # ours left it alone


def test_connect_sse_replaces_the_sse_headers_in_any_case():
    sent = {}
    for module in (real, httpx_sse):
        handler = Recorder()
        headers = {"accept": "application/json", "cache-control": "max-age=60"}
        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            with module.connect_sse(client, "GET", "http://test/sse", headers=headers):
                pass
        (request,) = handler.requests
        sent[module] = (request.headers.get_list("accept"), request.headers.get_list("cache-control"), headers)
    assert sent[real] == (["application/json", "text/event-stream"], ["max-age=60", "no-store"],
                          {"accept": "application/json", "cache-control": "max-age=60",
                           "Accept": "text/event-stream", "Cache-Control": "no-store"})
    assert sent[httpx_sse] == (["text/event-stream"], ["no-store"],
                               {"accept": "application/json", "cache-control": "max-age=60"})


def test_aconnect_sse_with_an_async_client():
    async def run(module):
        handler = Recorder(b"event: update\ndata: {\"n\": 1}\nid: 1\n\ndata: two\n\n")
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            async with module.aconnect_sse(client, "GET", "http://test/sse") as source:
                assert source.response.request.headers["accept"] == "text/event-stream"
                assert source.response.request.headers["cache-control"] == "no-store"
                events = [sse async for sse in source.aiter_sse()]
        assert [type(e) for e in events] == [module.ServerSentEvent] * 2
        assert events[0].json() == {"n": 1}
        return fields(events)

    assert asyncio.run(run(httpx_sse)) == asyncio.run(run(real)) == [
        ("update", '{"n": 1}', "1", None), ("message", "two", "1", None)]


def test_response_raise_for_status_before_iterating():
    """httpx-sse's README: check the status on ``event_source.response`` first."""
    handler = Recorder(b'{"error": "down"}', status=503, content_type="application/json")
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        with httpx_sse.connect_sse(client, "GET", "http://test/sse") as event_source:
            with pytest.raises(httpx.HTTPStatusError):
                event_source.response.raise_for_status()
            with pytest.raises(httpx_sse.SSEError) as info:
                for _sse in event_source.iter_sse():
                    pass
            assert info.value.request is event_source.response.request
            assert info.value.status_code == 503


# --- framing: httpx-sse's documented behaviour ----------------------------------------------

DOCUMENTED = {
    # The WHATWG specification's examples.
    "three data lines": [b"data: YH00\n", b"data: +2\n", b"data: 10\n", b"\n"],
    "ids and a comment": [b": test stream\n", b"\n", b"data: first event\n", b"id: 1\n", b"\n",
                          b"data: second event\n", b"id\n", b"\n", b"data:  third event\n", b"\n"],
    "bare data fields": [b"data\n", b"\n", b"data\n", b"data\n", b"\n", b"data:\n"],
    "space after the colon": [b"data:test\n", b"\n", b"data: test\n", b"\n"],
    "event name": [b"event: logline\n", b"data: New user connected\n", b"\n"],
    "NUL in an id": [b"data: test\n", b"id: 123\0\n", b"\n"],
    "invalid retry": [b"retry: 1667a\n", b"\n"],
    "unknown field": [b"something: ignore\n", b"\n"],
    "U+2028 is not a newline": [b"event: message\n", b'data: {"text":"Hello\xe2\x80\xa8World"}\n', b"\n"],
    "CR and CRLF": [b"data: a\r\ndata: b\rid: 9\r", b"\r\ndata: c\r\n\r\n"],
    "retry with data": [b"retry: 2500\ndata: x\n\ndata: y\n\n"],
    "unterminated last event": [b"data: kept\n\ndata: dropped\n"],
    "invalid UTF-8": [b"data: \xff\xfe \xe2\x82\n\n", b"event: \xc3\n", b"data: \xa9\n\n"],
}
EXPECTED = {
    "three data lines": [("message", "YH00\n+2\n10", "", None)],
    "ids and a comment": [("message", "first event", "1", None), ("message", "second event", "", None),
                          ("message", " third event", "", None)],
    "bare data fields": [("message", "", "", None), ("message", "\n", "", None)],
    "space after the colon": [("message", "test", "", None)] * 2,
    "event name": [("logline", "New user connected", "", None)],
    "NUL in an id": [("message", "test", "", None)],
    "invalid retry": [],
    "unknown field": [],
    "U+2028 is not a newline": [("message", '{"text":"Hello\u2028World"}', "", None)],
    "CR and CRLF": [("message", "a\nb", "9", None), ("message", "c", "9", None)],
    "retry with data": [("message", "x", "", 2500), ("message", "y", "", None)],
    "unterminated last event": [("message", "kept", "", None)],
    "invalid UTF-8": [("message", "\ufffd\ufffd \ufffd", "", None), ("\ufffd", "\ufffd", "", None)],
}


@pytest.mark.parametrize("case", list(DOCUMENTED))
@pytest.mark.parametrize("size", [None, 1, 3])
def test_documented_streams_read_as_httpx_sse_reads_them(case, size):
    chunks = DOCUMENTED[case] if size is None else chunked(b"".join(DOCUMENTED[case]), size)
    assert read(httpx_sse, chunks) == read(real, chunks) == EXPECTED[case]


def test_aiter_sse_reads_as_iter_sse():
    async def run(module):
        source = module.EventSource(aresponse(DOCUMENTED["ids and a comment"]))
        return fields([sse async for sse in source.aiter_sse()])

    assert asyncio.run(run(httpx_sse)) == asyncio.run(run(real)) == EXPECTED["ids and a comment"]


# --- framing: where httpx-sse departs from the WHATWG rules ---------------------------------


def test_a_lone_retry_block_is_not_an_event():
    theirs, ours = read_both(b"retry: 10000\n\ndata: x\n\n")
    assert theirs == [("message", "", "", 10000), ("message", "x", "", None)]
    assert ours == [("message", "x", "", None)]
    source = httpx_sse.EventSource(response([b"retry: 10000\n\ndata: x\n\n"]))
    assert source.retry is None and source.last_event_id == ""
    list(source.iter_sse())
    assert source.retry == 10000


def test_blocks_without_data_are_not_events():
    data = b"id: 1\n\nevent: ping\n\ndata: a\n\n\n\n: comment\n\ndata: b\nid: 2\n\n\n"
    theirs, ours = read_both(data)
    assert theirs == [("message", "", "1", None), ("ping", "", "1", None), ("message", "a", "1", None),
                      ("message", "", "1", None), ("message", "", "1", None), ("message", "", "1", None),
                      ("message", "b", "2", None), ("message", "", "2", None)]
    assert ours == [("message", "a", "1", None), ("message", "b", "2", None)]
    source = httpx_sse.EventSource(response([b"data: a\nid: 1\n\nid: 2\n\n"]))
    assert [e.id for e in source.iter_sse()] == ["1"]
    assert source.last_event_id == "2"


def test_a_leading_byte_order_mark_is_skipped():
    theirs, ours = read_both(b"\xef\xbb\xbfdata: first\n\ndata: second\n\n")
    assert theirs == [("message", "second", "", None)]  # the first event's field is "\ufeffdata"
    assert ours == [("message", "first", "", None), ("message", "second", "", None)]


def test_the_stream_is_utf8_whatever_the_charset():
    headers = {"content-type": "text/event-stream; charset=latin-1"}
    theirs, ours = read_both("data: café\n\n".encode(), headers=headers)
    assert theirs == [("message", "cafÃ©", "", None)]
    assert ours == [("message", "café", "", None)]


@pytest.mark.parametrize("value", [b"-1", b"+5", b" 5", b"5_000", "\u0665".encode()])
def test_retry_takes_ascii_digits_only(value):
    theirs, ours = read_both(b"data: x\nretry: " + value + b"\n\n")
    assert theirs == [("message", "x", "", int(value.decode()))]
    assert ours == [("message", "x", "", None)]


_line_end = st.sampled_from([b"\n", b"\r", b"\r\n"])
_value = st.lists(st.sampled_from([b"a", b"Z", b"0", b" ", b":", b"\xc3\xa9", b"\xe2\x80\xa8", b"\xff", b"\x00"]),
                  max_size=6).map(b"".join)
_data_value = st.tuples(st.sampled_from([b"x", b"{", b"\xc3\xa9", b"\xff"]), _value).map(b"".join)  # never empty
_data_line = st.tuples(st.sampled_from([b"data: ", b"data:"]), _data_value).map(b"".join)
_other_line = st.one_of(
    st.tuples(st.sampled_from([b"event: ", b"event:", b"id: ", b"id:"]), _value).map(b"".join),
    st.sampled_from([b"event", b"id", b"retry"]),  # a field name alone: an empty value
    st.integers(0, 10**12).map(lambda n: b"retry: %d" % n),
    st.tuples(st.sampled_from([b":", b"foo: ", b"retry: x", b"Data: "]), _value).map(b"".join),
)
_terminated = st.tuples(st.one_of(_data_line, _other_line), _line_end).map(b"".join)
_block = st.tuples(st.lists(_terminated, max_size=5).map(b"".join), _line_end).map(b"".join)  # lines, a blank line
_stream = st.tuples(st.lists(_block, min_size=1, max_size=8).map(b"".join), st.lists(_terminated, max_size=2).map(b"".join),
                    st.sampled_from([b"", b"data: unterminated"])).map(b"".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_stream, st.lists(st.integers(1, 40), min_size=1, max_size=8))
def test_differs_from_httpx_sse_only_by_not_dispatching_blocks_without_data(data, sizes):
    """Streams whose data lines are never empty: an event httpx-sse yields with empty data is one
    from a block without data lines, which the WHATWG rules do not dispatch; every other event is
    the same, at any chunking."""
    chunks, start = [], 0
    for size in sizes * (len(data) // sum(sizes) + 1):
        if start >= len(data):
            break
        chunks.append(data[start : start + size])
        start += size
    theirs = read(real, chunks or [b""])
    assert read(httpx_sse, chunks or [b""]) == [event for event in theirs if event[1] != ""]


# --- the recorded corpus --------------------------------------------------------------------

RECORDINGS = [p for kind in ("responses", "chat", "anthropic", "gemini") for p in corpus_files(kind) if p.suffix == ".sse"]


@pytest.mark.parametrize("size", [5, 512, None])
def test_corpus_reads_as_with_httpx_sse(size):
    """No recording hits one of the documented differences: the events are the same."""
    for path in RECORDINGS:
        theirs, ours = read_both(path.read_bytes(), size)
        assert ours == theirs, path.name
        assert theirs, path.name


def test_corpus_json_as_with_httpx_sse():
    for path in RECORDINGS:
        data = path.read_bytes()
        theirs = [_json_or_error(e) for e in real.EventSource(response([data])).iter_sse()]
        ours = [_json_or_error(e) for e in httpx_sse.EventSource(response([data])).iter_sse()]
        assert ours == theirs, path.name


def _json_or_error(sse):
    try:
        return sse.json()
    except json.JSONDecodeError as exc:  # e.g. data: [DONE]
        return ("error", str(exc))


# --- size cap -------------------------------------------------------------------------------


def test_an_event_over_the_cap_raises_event_too_large_after_the_events_before_it():
    source = httpx_sse.EventSource(response([b"data: small\n\ndata: " + b"x" * 100 + b"\n\n"]))
    seen = []
    with pytest.raises(httpx_sse.EventTooLarge) as info:
        for sse in source.iter_sse(max_event_size=64):
            seen.append(sse)
    assert fields(seen) == [("message", "small", "", None)]
    err = info.value
    assert isinstance(err, httpx_sse.SSEError) and isinstance(err, httpx.TransportError)
    assert isinstance(err, rapidsse.EventTooLarge) and err.limit == 64
    assert [type(e) for e in err.events] == [httpx_sse.ServerSentEvent]
    assert inspect.signature(httpx_sse.EventSource.iter_sse).parameters["max_event_size"].default == (
        rapidsse.DEFAULT_MAX_EVENT_SIZE)
    big = b"data: " + b"x" * (rapidsse.DEFAULT_MAX_EVENT_SIZE + 1) + b"\n\n"
    with pytest.raises(httpx_sse.EventTooLarge):
        list(httpx_sse.EventSource(response([big])).iter_sse())
    (event,) = httpx_sse.EventSource(response([big])).iter_sse(max_event_size=None)
    assert len(event.data) == rapidsse.DEFAULT_MAX_EVENT_SIZE + 1


def test_event_too_large_async():
    async def run():
        source = httpx_sse.EventSource(aresponse([b"data: small\n\n", b"data: " + b"x" * 100 + b"\n\n"]))
        seen = []
        with pytest.raises(httpx_sse.EventTooLarge):
            async for sse in source.aiter_sse(max_event_size=64):
                seen.append(sse.data)
        return seen

    assert asyncio.run(run()) == ["small"]


def test_aiter_sse_closes_the_byte_iterator_when_stopped_early():
    closed = []

    async def aiter_bytes():
        try:
            for i in range(5):
                yield b"data: %d\n\n" % i
        finally:
            closed.append(True)

    async def run():
        source = httpx_sse.EventSource(httpx.Response(200, headers=SSE, content=b""))
        source.response.aiter_bytes = aiter_bytes  # the response's own generator, observed
        events = source.aiter_sse()
        first = await events.__anext__()
        await events.aclose()
        return first.data

    assert asyncio.run(run()) == "0"
    assert closed == [True]


def test_read_errors_pass_through():
    def body():
        yield b"data: one\n\n"
        raise httpx.ReadError("connection lost")

    for module in (real, httpx_sse):
        seen = []
        with pytest.raises(httpx.ReadError):
            for sse in module.EventSource(response(body())).iter_sse():
                seen.append(sse.data)
        assert seen == ["one"]


# --- httpx-sse's README examples, with only the import changed ------------------------------


def _readme_numbers_app(delay):
    """The README's example Starlette server (sse-starlette), with a shorter sleep."""
    pytest.importorskip("sse_starlette")
    from sse_starlette.sse import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.routing import Route

    async def numbers(minimum, maximum):
        for i in range(minimum, maximum + 1):
            await asyncio.sleep(delay)
            yield {"data": i}

    async def sse(request):
        generator = numbers(1, 5)
        return EventSourceResponse(generator)

    routes = [Route("/sse", endpoint=sse)]
    return Starlette(routes=routes)


def test_readme_quickstart_with_a_sync_client_over_loopback(capsys):
    pytest.importorskip("uvicorn")
    from rapidsse.serving.serve import BackgroundServer

    def quickstart(connect_sse, url):
        with httpx.Client(timeout=TIMEOUT) as client:
            with connect_sse(client, "GET", url) as event_source:
                for sse in event_source.iter_sse():
                    print(sse.event, sse.data, sse.id, sse.retry)

    with BackgroundServer(_readme_numbers_app(0.01)) as server:
        quickstart(real.connect_sse, server.url + "/sse")
        theirs = capsys.readouterr().out
        quickstart(httpx_sse.connect_sse, server.url + "/sse")
        ours = capsys.readouterr().out
    assert ours == theirs == "".join(f"message {i}  None\n" for i in range(1, 6))


def test_readme_calling_into_an_asgi_app():
    pytest.importorskip("sse_starlette")
    from sse_starlette.sse import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.routing import Route

    from rapidsse.integrations.httpx_sse import aconnect_sse

    async def auth_events(request):
        async def events():
            yield {
                "event": "login",
                "data": '{"user_id": "4135"}',
            }

        return EventSourceResponse(events())

    app = Starlette(routes=[Route("/sse/auth/", endpoint=auth_events)])

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app)) as client:
            async with aconnect_sse(
                client, "GET", "http://localhost:8000/sse/auth/"
            ) as event_source:
                events = [sse async for sse in event_source.aiter_sse()]
                (sse,) = events
                assert sse.event == "login"
                assert sse.json() == {"user_id": "4135"}

    asyncio.run(main())


def test_readme_handling_reconnections_with_stamina():
    stamina = pytest.importorskip("stamina")
    from stamina import retry

    from rapidsse.integrations.httpx_sse import connect_sse

    def iter_sse_retrying(client, method, url):
        last_event_id = ""
        reconnection_delay = 0.0

        # `stamina` will apply jitter and exponential backoff on top of
        # the `retry` reconnection delay sent by the server.
        @retry(on=httpx.ReadError)
        def _iter_sse():
            nonlocal last_event_id, reconnection_delay

            time.sleep(reconnection_delay)

            headers = {"Accept": "text/event-stream"}

            if last_event_id:
                headers["Last-Event-ID"] = last_event_id

            with connect_sse(client, method, url, headers=headers) as event_source:
                for sse in event_source.iter_sse():
                    last_event_id = sse.id

                    if sse.retry is not None:
                        reconnection_delay = sse.retry / 1000

                    yield sse

        return _iter_sse()

    asked_from = []

    def handler(request):
        """Events 1..6, cut after the third on the first connection."""
        start = int(request.headers.get("last-event-id", "0"))
        asked_from.append(start)

        def body():
            for n in range(start + 1, 7):
                yield b"retry: 1\nid: %d\ndata: event %d\n\n" % (n, n)
                if n == 3 and start == 0:
                    raise httpx.ReadError("connection lost")

        return httpx.Response(200, headers=SSE, content=body())

    with stamina.set_testing(True, attempts=3):
        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            events = [(sse.event, sse.data) for sse in iter_sse_retrying(client, "GET", "http://localhost:8000/sse")]
    assert events == [("message", f"event {n}") for n in range(1, 7)]
    assert asked_from == [0, 3]


# --- ASGI apps and real servers -------------------------------------------------------------

_PIECES = [b": hello\r\n\r\n", b"retry: 3000\r\nid: a", b"1\r\nevent: update\r\ndata: {\"n\":", b" 1}\r\n\r",
           b"\ndata: line 1\ndata: line 2\n\n", b"event: done\ndata: [DONE]\n", b"\n"]
_PIECES_EVENTS = [("update", '{"n": 1}', "a1", 3000), ("message", "line 1\nline 2", "a1", None),
                  ("done", "[DONE]", "a1", None)]


def _starlette_app():
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def stream(request):
        async def body():
            for piece in _PIECES:
                yield piece
                await asyncio.sleep(0)

        return StreamingResponse(body(), media_type="text/event-stream")

    async def echo(request):
        """A POST endpoint, as LLM APIs are: one event per word of the JSON body's ``input``."""
        words = (await request.json())["input"].split()

        async def body():
            for i, word in enumerate(words):
                yield f"id: {i}\nevent: word\ndata: {json.dumps({'word': word})}\n\n".encode()

        return StreamingResponse(body(), media_type="text/event-stream; charset=utf-8")

    return Starlette(routes=[Route("/events", endpoint=stream), Route("/echo", endpoint=echo, methods=["POST"])])


def test_asgi_starlette_endpoint_async_client():
    pytest.importorskip("starlette")
    app = _starlette_app()

    async def run(module):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app") as client:
            async with module.aconnect_sse(client, "GET", "/events") as source:
                return fields([sse async for sse in source.aiter_sse()])

    assert asyncio.run(run(httpx_sse)) == asyncio.run(run(real)) == _PIECES_EVENTS


def test_asgi_post_with_a_json_body():
    pytest.importorskip("starlette")
    app = _starlette_app()

    async def run(module):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app") as client:
            async with module.aconnect_sse(client, "POST", "/echo", json={"input": "héllo streamed world"}) as source:
                assert source.response.status_code == 200
                return [(sse.event, sse.id, sse.json()) async for sse in source.aiter_sse()]

    expected = [("word", str(i), {"word": w}) for i, w in enumerate(["héllo", "streamed", "world"])]
    assert asyncio.run(run(httpx_sse)) == asyncio.run(run(real)) == expected


def test_starlette_endpoint_sync_and_async_clients_over_loopback():
    pytest.importorskip("uvicorn")
    from rapidsse.serving.serve import BackgroundServer

    async def read_async(module, url):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            async with module.aconnect_sse(client, "GET", url) as source:
                return fields([sse async for sse in source.aiter_sse()])

    with BackgroundServer(_starlette_app()) as server, httpx.Client(timeout=TIMEOUT) as client:
        url = server.url + "/events"
        for module in (real, httpx_sse):
            with module.connect_sse(client, "GET", url) as source:
                assert fields(source.iter_sse()) == _PIECES_EVENTS
            assert asyncio.run(read_async(module, url)) == _PIECES_EVENTS


def test_events_are_the_drop_in_class_on_both_backends():
    events = list(httpx_sse.EventSource(response([b"data: x\n\n"])).iter_sse())
    assert [type(e) for e in events] == [httpx_sse.ServerSentEvent]
    assert isinstance(events[0], msgspec.Struct)


# --- the benchmark group --------------------------------------------------------------------


@pytest.mark.parametrize("group", [bench.HTTPX_SSE, bench.HTTPX_SSE_ASYNC])
def test_bench_contenders_count_every_event(group):
    load = bench.workload(group, 50)
    contenders = [c for c in bench.contenders(group) if not c.skipped]
    assert "httpx-sse" in [c.name for c in contenders]
    if rapidsse.BACKEND == "rust":
        assert contenders[0].name.startswith("rapidsse.integrations.httpx_sse")
    for contender in contenders:
        inputs = contender.prepare(load.inputs) if contender.prepare else load.inputs
        assert contender.run(inputs) == 50, contender.name


def test_bench_corpus_contenders_agree():
    load = bench.workload(bench.HTTPX_SSE_CORPUS)
    sample = load.inputs[:3] + load.inputs[-3:]
    counts = {c.name: c.run(sample) for c in bench.contenders(bench.HTTPX_SSE_CORPUS) if not c.skipped}
    assert len(set(counts.values())) == 1 and min(counts.values()) > 0, counts
