"""adrain, the loop behind every async iterator: the pure backend's async generator
(``framing._adrain``) and the Rust backend's native ``AsyncDrain`` must behave alike, under
``async for``, under asyncio cancellation, and driven by hand (``send`` / ``throw`` / ``close``)."""

from __future__ import annotations

import asyncio
import gc
import sys
import tracemalloc
import types
import weakref

import pytest

import rapidsse
from rapidsse import framing
from rapidsse.errors import SSEError

from .conftest import native, sample_feed


def _adrains():
    yield "python", framing._adrain
    if native is not None:
        yield "rust", native.AsyncDrain


ADRAINS = pytest.mark.parametrize("name,adrain", list(_adrains()), ids=lambda v: v if isinstance(v, str) else "")


feed = sample_feed  # two events a chunk; "bad" raises an SSEError with one, "boom" a KeyError


def run(coro):
    return asyncio.run(coro)


async def collect(it):
    return [event async for event in it]


class Source:
    """An async generator of chunks that logs what happens to it; each read awaits a real
    future (resolved by the loop on its next turn) when ``suspend`` is set."""

    def __init__(self, chunks, suspend=True):
        self.chunks, self.suspend, self.log = chunks, suspend, []

    async def _gen(self):
        try:
            for chunk in self.chunks:
                if self.suspend:
                    fut = asyncio.get_running_loop().create_future()
                    asyncio.get_running_loop().call_soon(fut.set_result, None)
                    await fut
                if chunk == "oserror":
                    raise OSError("connection reset")
                self.log.append(("read", chunk))
                yield chunk
        except BaseException as exc:
            self.log.append(("raised", type(exc).__name__))
            raise
        finally:
            self.log.append("closed")

    def __aiter__(self):
        self.it = self._gen()
        return self.it


@ADRAINS
@pytest.mark.parametrize("suspend", [True, False], ids=["awaits-futures", "completes-synchronously"])
def test_events_finished_errors_and_at_end(name, adrain, suspend):
    ends = []
    at_end = lambda: ends.append("end")  # noqa: E731

    src = Source(["a", "b"], suspend)
    assert run(collect(adrain(feed, src, None, at_end))) == ["a.1", "a.2", "b.1", "b.2"]
    assert ends == ["end"] and src.log == [("read", "a"), ("read", "b"), "closed"]

    # finished(): no further read after the chunk that finished it; its events still come.
    ends.clear()
    done = iter([False, True])
    src = Source(["a", "b", "c"], suspend)
    assert run(collect(adrain(feed, src, lambda: next(done), at_end))) == ["a.1", "a.2", "b.1", "b.2"]
    assert ends == ["end"] and src.log[:2] == [("read", "a"), ("read", "b")]

    # An SSEError: its events, then the error; nothing more read, no at_end; then over.
    async def sse_error():
        it = adrain(feed, Source(["a", "bad", "c"], suspend), None, at_end)
        got = []
        with pytest.raises(SSEError, match="bad chunk"):
            async for event in it:
                got.append(event)
        assert got == ["a.1", "a.2", "e-before-error"]
        assert await collect(it) == []

    ends.clear()
    run(sse_error())
    assert ends == []

    # Any other error, from feed or from the source: at once, and then over.
    async def other_errors():
        it = adrain(feed, Source(["a", "boom", "c"], suspend), None, at_end)
        assert [await it.__anext__(), await it.__anext__()] == ["a.1", "a.2"]
        with pytest.raises(KeyError):
            await it.__anext__()
        assert await collect(it) == []
        it = adrain(feed, Source(["a", "oserror"], suspend), None, at_end)
        assert [await anext(it), await anext(it)] == ["a.1", "a.2"]
        with pytest.raises(OSError, match="connection reset"):
            await anext(it)
        with pytest.raises(StopAsyncIteration):
            await anext(it)

    run(other_errors())
    assert ends == []

    # Empty lists are skipped.
    src = Source(["x", "y"], suspend)
    assert run(collect(adrain(lambda c: [], src, None, at_end))) == []
    assert ends == ["end"]


@ADRAINS
def test_any_object_is_an_event(name, adrain):
    """Tuples and exception instances come out as themselves (a bare StopIteration(value) would
    take them for arguments / the exception), also on the tp_iternext path SEND takes from
    CPython 3.12 (on 3.11 while a trace function is set)."""
    events = [(1, 2), (), ValueError("an event"), None, StopIteration(5)]

    async def main():
        return await collect(adrain(lambda c: list(events), Source(["a"])))

    assert run(main()) == events
    sys.settrace(lambda *a: None)
    try:
        assert run(main()) == events
    finally:
        sys.settrace(None)


@ADRAINS
@pytest.mark.parametrize("suspend", [True, False], ids=["awaits-futures", "completes-synchronously"])
def test_the_list_feed_returned_is_read_live_as_the_sync_drains_read_it(name, adrain, suspend):
    """A feed may hand back the same list every time (refilled per chunk), and what is appended to
    it while its events go out goes out too, as the sync ``Drain`` / ``_drain`` read it (the
    native loop hands the events out of the list itself, not out of a copy)."""
    from .test_framing import _drains

    def make_feed():
        buffer = []

        def feed(chunk):
            buffer[:] = [f"{chunk}.1", f"{chunk}.2"]
            return buffer

        return feed, buffer

    def consume(events, buffer):
        out = []
        for event in events:
            out.append(event)
            if event == "a.1":
                buffer.append("a.extra")
        return out

    async def aconsume(events, buffer):
        out = []
        async for event in events:
            out.append(event)
            if event == "a.1":
                buffer.append("a.extra")
        return out

    expected = ["a.1", "a.2", "a.extra", "b.1", "b.2"]
    for _, drain in _drains():
        f, buffer = make_feed()
        assert consume(drain(f, ["a", "b"]), buffer) == expected
    f, buffer = make_feed()
    assert run(aconsume(adrain(f, Source(["a", "b"], suspend)), buffer)) == expected


@ADRAINS
def test_aclose_mid_chunk_closes_the_source_and_drops_the_rest(name, adrain):
    ends = []

    async def main():
        src = Source(["a", "b"])
        it = adrain(feed, src, None, lambda: ends.append("end"))
        assert await anext(it) == "a.1"
        await it.aclose()
        assert src.log == [("read", "a"), ("raised", "GeneratorExit"), "closed"]
        with pytest.raises(StopAsyncIteration):
            await anext(it)
        await it.aclose()  # again: nothing

        # Before the first event: the source is not touched at all.
        src = Source(["a"])
        it = adrain(feed, src)
        await it.aclose()
        assert src.log == [] and not hasattr(src, "it")
        with pytest.raises(StopAsyncIteration):
            await anext(it)

        # A source without aclose: just over.
        class Plain:
            def __init__(self):
                self.chunks = iter(["a", "b"])

            def __aiter__(self):
                return self

            async def __anext__(self):
                try:
                    return next(self.chunks)
                except StopIteration:
                    raise StopAsyncIteration from None

        it = adrain(feed, Plain())
        assert await anext(it) == "a.1"
        await it.aclose()
        assert await collect(it) == []

    run(main())
    assert ends == []


@ADRAINS
def test_cancellation_reaches_the_source_where_it_awaits(name, adrain):
    async def main():
        started = asyncio.Event()
        never = asyncio.get_running_loop().create_future()
        log = []

        async def source():
            yield "a"
            started.set()
            try:
                await never
            except asyncio.CancelledError:
                log.append("cancelled in source")
                raise
            yield "b"

        got = []

        async def consume():
            async for event in adrain(feed, source()):
                got.append(event)

        task = asyncio.ensure_future(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert got == ["a.1", "a.2"] and log == ["cancelled in source"]

    run(main())


class Suspend:
    """An awaitable that yields ``value`` once and returns what is sent back."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        return (yield self.value)


@ADRAINS
def test_throw_and_send_reach_the_read_in_progress(name, adrain):
    """Driven by hand as an event loop would: what the source's read yields comes up, what is
    sent or thrown goes down to it; a source that catches a thrown error goes on."""
    log = []

    async def source():
        got = await Suspend("waiting-1")
        log.append(("sent", got))
        yield "a"
        try:
            await Suspend("waiting-2")
        except ValueError as exc:
            log.append(("caught", str(exc)))
        yield "b"
        await Suspend("waiting-3")
        yield "c"

    it = adrain(feed, source())
    aw = it.__anext__().__await__()
    assert aw.send(None) == "waiting-1"
    with pytest.raises(StopIteration) as stop:
        aw.send("hello")
    assert stop.value.value == "a.1" and log == [("sent", "hello")]
    aw = it.__anext__().__await__()
    with pytest.raises(StopIteration) as stop:
        aw.send(None)
    assert stop.value.value == "a.2"
    aw = it.__anext__().__await__()
    assert aw.send(None) == "waiting-2"
    with pytest.raises(StopIteration) as stop:
        aw.throw(ValueError("into the read"))
    assert stop.value.value == "b.1" and log[-1] == ("caught", "into the read")
    aw = it.__anext__().__await__()
    with pytest.raises(StopIteration):
        aw.send(None)
    # An error the source does not catch ends the iteration.
    aw = it.__anext__().__await__()
    assert aw.send(None) == "waiting-3"
    with pytest.raises(KeyError):
        aw.throw(KeyError("uncaught"))
    aw = it.__anext__().__await__()
    with pytest.raises(StopAsyncIteration):
        aw.send(None)


@ADRAINS
def test_no_leaks(name, adrain):
    """Every event, chunk and callable is released: by refcount after a full iteration, after
    aclose and after an error; a cycle through feed is collected; memory does not grow."""
    marker = object()
    before = sys.getrefcount(marker)

    async def main():
        for _ in range(50):
            assert len(await collect(adrain(lambda c: [marker, marker], Source(["a", "b"], False), None, None))) == 4
            it = adrain(lambda c: [marker, marker, marker], Source(["a", "b"], False))
            assert await anext(it) is marker
            await it.aclose()
            it = adrain(feed, Source(["a", "bad"], False))
            with pytest.raises(SSEError):
                await collect(it)
            del it

    run(main())
    gc.collect()
    assert sys.getrefcount(marker) == before

    class Feed:
        def __call__(self, chunk):
            return [chunk]

    async def cycle():
        f = Feed()
        it = adrain(f, Source(["a", "b"], False))
        f.it = it  # feed -> iterator -> feed
        assert await anext(it) == "a"
        return weakref.ref(f)

    ref = run(cycle())
    gc.collect()
    assert ref() is None

    async def many():
        for _ in range(2000):
            await collect(adrain(feed, Source(["a", "b", "c"], False)))

    run(many())  # warm up (caches, freelists)
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        run(many())
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown


def test_async_iterators_are_native_on_the_rust_backend():
    async def chunks():
        yield b""

    it = rapidsse.aiter_events(chunks())
    expected = "AsyncDrain" if rapidsse.BACKEND == "rust" else "async_generator"
    assert type(it).__name__ == expected
    assert run(collect(it)) == []
    if native is not None:
        assert isinstance(native.AsyncDrain(feed, chunks()), native.AsyncDrainType)
        assert not isinstance(native.AsyncDrain(feed, chunks()), types.AsyncGeneratorType)



def _feeds():
    """The kinds of ``feed`` a drain calls, with chunks and the events they make: a Python
    function, a bound builtin method of one argument (``METH_O``) and a builtin of the fast-call
    convention (``METH_FASTCALL | METH_KEYWORDS``, as PyO3's methods are). The native drains call
    the C function of the last two directly."""
    split = ["a.1", "a.2", "b.1", "b.2"]
    yield "python function", sample_feed, ["a", "b"], split
    yield "METH_O builtin", {"a": split[:2], "b": split[2:]}.__getitem__, ["a", "b"], split
    yield "fast-call builtin", sorted, ["ba", "dc"], ["a", "b", "c", "d"]


class AnextSource:
    """An async iterator of a class of its own (a heap type, whose ``__anext__`` may change):
    the native drain looks its slots up at each read."""

    def __init__(self, chunks):
        self.chunks = list(chunks)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.chunks:
            raise StopAsyncIteration
        return self.chunks.pop(0)


@ADRAINS
@pytest.mark.parametrize("kind,feed_,chunks,expected", list(_feeds()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_kind_of_feed_and_source_gives_the_same_events(name, adrain, kind, feed_, chunks, expected):
    async def generator(chunks):
        for chunk in chunks:
            yield chunk

    for source in (generator(chunks), AnextSource(chunks), generator(chunks)):
        assert run(collect(adrain(feed_, source))) == expected
    sync = native.Drain if name == "rust" else framing._drain
    assert list(sync(feed_, iter(chunks))) == expected


@ADRAINS
def test_a_feed_that_makes_no_list_is_an_error(name, adrain):
    async def generator():
        yield "a"

    with pytest.raises(TypeError):
        run(collect(adrain(len, generator())))  # a builtin of one argument, returning an int
