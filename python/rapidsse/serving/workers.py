"""``rapidsse measure`` past one core and one machine: the schedule of one run spread over client
processes (``--workers N``) or Ray actors (``--ray [ADDRESS]``), their samples merged exactly.

The parent draws the whole arrival schedule once (:func:`rapidsse.serving.measure.arrival_times` from
``--seed``: rate, burstiness, count and the dataset's order), gives request ``i`` to worker
``i mod N``, and starts every worker on one barrier, at one instant (on one machine, of the
monotonic clock all its processes share; with Ray, a wall-clock time each actor turns into its own
monotonic clock). Each worker runs the one-process engine (:func:`rapidsse.serving.measure.drive`) on its
share, timing every latency on its own monotonic clock,
and sends each request's raw samples (a :class:`~rapidsse.serving.measure.RequestResult`: TTFT, token
times, E2EL, queue time, usage, the failure reason) back as it ends (on its pipe, framed here, never
blocking its loop nor lost when the parent falls behind; a Ray actor keeps them for the parent's
``drain`` calls, and runs at the parent's niceness, not Ray's 15). The parent merges them in
arrival order (:func:`rapidsse.serving.measure.merge`) and computes the report with the same
:func:`rapidsse.serving.measure.summarize` as one process: same keys, same percentiles, one progress bar.

``--max-concurrency`` stays one cap for the whole run: the parent is its dispenser
(:class:`SlotBook`). A due request asks the parent for a slot (a message on its worker's pipe, or a
call of the Ray slot actor) and the parent grants slots in arrival order, as one process's
semaphore would; a request's result gives its slot back. The round trip (a pipe's on one machine,
a Ray call with ``--ray``) is part of the request's queue time, so of its TTFT and
E2EL, as any wait for a slot is.

Faults: a worker that dies mid-run (killed, out of memory, a Ray node lost) has its unfinished
requests reported as failures (``worker 1 died (exit code -9) before this request ended``), its
slots are given back, and the run ends with the rest of the report as measured. Ctrl-C in the
parent stops every worker; the requests that were due and had not ended fail as ``interrupted``,
those not yet due are left out, and the report of what was measured is written.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import multiprocessing
import os
import pickle
import selectors
import signal
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import measure as m

__all__ = ["SlotBook", "WorkerJob", "cpu_count", "measure_ray", "measure_workers", "split_schedule",
           "stop_processes"]

START_AHEAD = 0.05
"""Seconds from the barrier's release to the start of the schedule (for the workers to wake)."""
RAY_START_AHEAD = 0.5
"""Seconds from the Ray barrier to the start: the start calls reach every actor before it."""
INTERRUPTED = m.INTERRUPTED


def cpu_count() -> int:
    """The cores this process may run on (``--workers auto``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def split_schedule(count: int, request_rate: float, burstiness: float, seed: int | None,
                   workers: int) -> list[list[tuple[int, float]]]:
    """The run's schedule (``(index, offset)``: request ``index`` due ``offset`` seconds after
    the start), drawn once, dealt round-robin to ``workers``: together exactly what one process
    would send."""
    offsets = m.arrival_times(count, request_rate, burstiness, seed)
    shares: list[list[tuple[int, float]]] = [[] for _ in range(workers)]
    for index, offset in enumerate(offsets):
        shares[index % workers].append((index, offset))
    return shares


class SlotBook:
    """The global ``--max-concurrency`` cap, kept by the parent: who waits (in arrival order, as
    one process's FIFO semaphore would serve them) and who holds a slot. Each method returns the
    grants it made, ``(worker, index)`` pairs, for the caller to deliver."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._waiting: list[tuple[int, int]] = []  # (index, worker), a heap
        self._held: dict[int, int] = {}  # index -> worker
        self._gone: set[int] = set()

    def want(self, worker: int, index: int) -> list[tuple[int, int]]:
        if worker not in self._gone:
            heapq.heappush(self._waiting, (index, worker))
        return self._grant()

    def release(self, index: int) -> list[tuple[int, int]]:
        if self._held.pop(index, None) is not None:
            self.free += 1
        return self._grant()

    def forget(self, worker: int) -> list[tuple[int, int]]:
        """A worker is gone: its slots come back, its waiters leave the queue."""
        self._gone.add(worker)
        for index in [i for i, w in self._held.items() if w == worker]:
            del self._held[index]
            self.free += 1
        self._waiting = [(i, w) for i, w in self._waiting if w != worker]
        heapq.heapify(self._waiting)
        return self._grant()

    def _grant(self) -> list[tuple[int, int]]:
        grants = []
        while self.free and self._waiting:
            index, worker = heapq.heappop(self._waiting)
            self._held[index] = worker
            self.free -= 1
            grants.append((worker, index))
        return grants


@dataclass
class WorkerJob:
    """What one worker is given: the endpoint, the bodies, its share of the schedule."""

    number: int
    url: str
    protocol: str
    bodies: list[dict[str, Any]]
    plan: list[tuple[int, float]]
    capped: bool = False
    warmup: int = 0
    warmup_cap: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 600.0
    timestamps: str = "auto"
    loop: str = "auto"
    engine: str = "asyncio"


def _warmup_share(warmup: int, workers: int, number: int) -> int:
    return warmup // workers + (number < warmup % workers)


def _jobs(url: str, bodies: Sequence[dict[str, Any]], workers: int, *, protocol: str, num_prompts: int | None,
          request_rate: float, burstiness: float, max_concurrency: int | None, warmup: int, seed: int | None,
          headers: dict[str, str] | None, timeout: float, timestamps: str, loop: str,
          engine: str = "asyncio") -> list[WorkerJob]:
    count = len(bodies) if num_prompts is None else num_prompts
    m._check(protocol, bodies, count, warmup, max_concurrency)
    if workers < 1:
        raise ValueError("workers must be at least 1")
    if engine not in m.ENGINES:
        raise ValueError(f"engine must be one of {', '.join(m.ENGINES)}, not {engine!r}")
    if engine == "native" and not m.native_available():
        raise ValueError("the native engine needs the Rust backend (this is the pure Python one)")
    m._target(url, headers or {})  # validates the URL here rather than in every worker
    shares = split_schedule(count, request_rate, burstiness, seed, workers)
    # Warmup is not measured: each worker warms its own connections up with its part of it, capped
    # by its part of --max-concurrency.
    warmup_cap = max(1, max_concurrency // workers) if max_concurrency else None
    return [WorkerJob(number, url, protocol, list(bodies), share, max_concurrency is not None,
                      _warmup_share(warmup, workers, number), warmup_cap, dict(headers or {}), timeout, timestamps,
                      loop, engine) for number, share in enumerate(shares)]


class _Collector:
    """The parent's side of a run: the results as they come (each handed to ``on_result``), the
    workers' durations, and the failures of what did not come."""

    def __init__(self, jobs: Sequence[WorkerJob], on_result: Callable[[m.RequestResult], None] | None) -> None:
        self.jobs = jobs
        self.on_result = on_result
        self.results: dict[int, m.RequestResult] = {}
        self.durations: dict[int, float] = {}
        self.timestamps: set[str] = set()
        self.start: float | None = None
        self.cpu = 0.0
        self.run_cpu = 0.0

    def add(self, result: m.RequestResult) -> None:
        if result.index in self.results:
            return
        self.results[result.index] = result
        if self.on_result is not None:
            self.on_result(result)

    def fail_rest(self, number: int, reason: str, *, due_only: bool = False) -> None:
        """Worker ``number``'s requests that did not end fail with ``reason`` (``due_only``: only
        those already due; the rest are left out of the run)."""
        elapsed = time.perf_counter() - self.start if self.start is not None else 0.0
        for index, offset in self.jobs[number].plan:
            if index in self.results or (due_only and (self.start is None or offset > elapsed)):
                continue
            self.add(m.RequestResult(index=index, due=offset, error=reason,
                                     latency=max(0.0, elapsed - offset)))

    def interrupted(self, live: set[int]) -> m.Run:
        """The run stopped by Ctrl-C: what the ``live`` workers had due and unfinished fails."""
        for number in live:
            self.fail_rest(number, INTERRUPTED, due_only=True)
        return self.run(interrupted=True)

    def run(self, interrupted: bool = False) -> m.Run:
        elapsed = time.perf_counter() - self.start if self.start is not None else 0.0
        durations = list(self.durations.values())
        if interrupted or len(durations) < len(self.jobs):
            durations.append(elapsed)  # a worker that did not finish ran until now
        parts = [m.Run(list(self.results.values()), max(durations, default=0.0),
                       "+".join(sorted(self.timestamps)) or "read", worker_cpu=self.cpu, client_cpu=self.run_cpu,
                       client_processes=len(self.jobs))]
        run = m.merge(parts)
        run.interrupted = interrupted
        return run


# --- Worker processes --------------------------------------------------------------------------


class _PipeSlots(m.Slots):
    """A worker's view of the parent's :class:`SlotBook`: ``want`` and ``go`` messages on its pipe;
    a request's result gives its slot back."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        import asyncio

        self._send = send
        self._loop = asyncio.get_running_loop()
        self._granted: dict[int, Any] = {}

    async def acquire(self, index: int) -> None:
        future = self._loop.create_future()
        self._granted[index] = future
        self._send(("want", index))
        await future

    def release(self, index: int) -> None:
        pass  # the result, sent next, gives it back

    def grant(self, index: int) -> None:
        future = self._granted.pop(index, None)
        if future is not None and not future.done():
            future.set_result(None)


_FRAME = struct.Struct("!I")


def _frame(message: Any) -> bytes:
    """One message on a worker's pipe: its pickle's length (4 bytes), then the pickle."""
    payload = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(payload)) + payload


def _write_all(fd: int, data: bytes) -> None:
    """``data`` written to a blocking ``fd``, all of it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Unframer:
    """The messages of a pipe's bytes, as they come (a message may span reads, a read hold many)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        buffer = self._buffer
        buffer += data
        messages, offset = [], 0
        while len(buffer) - offset >= _FRAME.size:
            (size,) = _FRAME.unpack_from(buffer, offset)
            end = offset + _FRAME.size + size
            if end > len(buffer):
                break
            messages.append(pickle.loads(buffer[offset + _FRAME.size:end]))
            offset = end
        del buffer[:offset]
        return messages


class _Outbox:
    """A worker's messages to the parent, written without blocking its event loop and without
    losing one: what the pipe cannot take now (the parent fell behind, its core taken) waits here
    and goes when the pipe is writable. (``Connection.send`` would not do: uvloop's ``add_reader``
    makes the pipe non-blocking, and a full pipe then raised BlockingIOError mid-run and killed
    the worker, every one of its unfinished requests failed.)"""

    def __init__(self, loop: Any, fd: int) -> None:
        self._loop, self._fd = loop, fd
        self._pending = bytearray()
        self._broken: OSError | None = None
        os.set_blocking(fd, False)

    def send(self, message: Any) -> None:
        if self._broken is not None:
            raise self._broken
        frame = _frame(message)
        if self._pending:
            self._pending += frame
            return
        try:
            written = os.write(self._fd, frame)
        except BlockingIOError:
            written = 0
        if written < len(frame):
            self._pending += frame[written:]
            self._loop.add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        try:
            written = os.write(self._fd, self._pending)
        except BlockingIOError:
            return
        except OSError as exc:  # the parent is gone: the next send says so
            self._broken, written = exc, len(self._pending)
        del self._pending[:written]
        if not self._pending:
            self._loop.remove_writer(self._fd)

    def flush(self) -> None:
        """Writes what waits, blocking (before the barrier, and at the end, with nothing else to
        do)."""
        if self._broken is not None:
            raise self._broken
        if self._pending:
            self._loop.remove_writer(self._fd)
            os.set_blocking(self._fd, True)
            try:
                _write_all(self._fd, bytes(self._pending))
            finally:
                os.set_blocking(self._fd, False)
            self._pending.clear()


def _worker_process(connection: Any, job: WorkerJob, start: Any) -> None:
    """The main of a worker process: Ctrl-C is the parent's to handle (it stops the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if job.engine == "native":
            _native_worker(connection, job, start)
        else:
            m.run_loop(_worker(connection, job, start), job.loop)
    except (BrokenPipeError, EOFError, ConnectionResetError):
        pass  # the parent is gone


def _native_worker(connection: Any, job: WorkerJob, start: Any) -> None:
    """A worker on the native engine: the engine runs its share in its own thread; this one
    hands over what ends (blocking writes to the pipe: the engine goes on meanwhile) and a reader
    thread takes the parent's slot grants to the engine."""
    import threading

    fd = connection.fileno()
    cpu = time.process_time()

    def send(message: Any) -> None:
        _write_all(fd, _frame(message))

    try:
        engine, kind = m.native_engine(job.url, job.protocol, job.headers, job.timestamps, job.bodies, job.timeout)
    except (ValueError, OSError) as exc:
        send(("error", str(exc)))
        return

    def grants() -> None:
        inbox = _Unframer()
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                return
            if not data:
                return  # the parent is gone: the next send says so
            for kind_, index in inbox.feed(data):
                if kind_ == "go":
                    engine.grant(index)

    parent = os.getppid()

    def barrier() -> float:
        send(("ready", kind))
        event, instant = start
        while not event.wait(0.5):
            if os.getppid() != parent:
                raise EOFError("the parent is gone")
        threading.Thread(target=grants, daemon=True, name="rapidsse-measure-grants").start()
        return instant.value

    def wants(indexes: list[int]) -> None:
        for index in indexes:
            send(("want", index))

    run = m.drive_native(engine, kind, job.plan, slots="external" if job.capped else None, warmup=job.warmup,
                         warmup_cap=job.warmup_cap, on_result=lambda r: send(("result", r)), started=barrier,
                         on_want=wants)
    send(("done", (run.duration, time.process_time() - cpu, run.client_cpu)))


async def _worker(connection: Any, job: WorkerJob, start: Any) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    fd = connection.fileno()
    outbox = _Outbox(loop, fd)
    send = outbox.send
    cpu = time.process_time()
    try:
        target = await m.prepared_target(job.url, job.protocol, job.headers, job.timestamps)
    except (ValueError, OSError) as exc:
        send(("error", str(exc)))
        outbox.flush()
        return
    slots = _PipeSlots(send) if job.capped else None
    inbox = _Unframer()

    def readable() -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            return  # the parent is gone: the next send says so
        for kind, index in inbox.feed(data):
            if kind == "go" and slots is not None:
                slots.grant(index)

    loop.add_reader(fd, readable)
    parent = os.getppid()

    def barrier() -> float:
        send(("ready", "kernel" if target.addresses else "read"))
        outbox.flush()
        event, instant = start
        while not event.wait(0.5):  # (blocking: nothing else runs before the start)
            if os.getppid() != parent:
                raise EOFError("the parent is gone")
        return instant.value  # (one machine, one monotonic clock: the same instant for all)

    warmup_slots = m.LocalSlots(job.warmup_cap) if job.warmup_cap else None
    run = await m.drive(target, job.protocol, job.bodies, job.plan, slots=slots, warmup=job.warmup,
                        warmup_slots=warmup_slots, timeout=job.timeout, on_result=lambda r: send(("result", r)),
                        started=barrier)
    loop.remove_reader(fd)
    send(("done", (run.duration, time.process_time() - cpu, run.client_cpu)))
    outbox.flush()


def measure_workers(url: str, bodies: Sequence[dict[str, Any]], workers: int, *, protocol: str = "responses",
                    num_prompts: int | None = None, request_rate: float = math.inf, burstiness: float = 1.0,
                    max_concurrency: int | None = None, warmup: int = 0, seed: int | None = None,
                    headers: dict[str, str] | None = None, timeout: float = 600.0,
                    on_result: Callable[[m.RequestResult], None] | None = None, timestamps: str = "auto",
                    loop: str = "auto", start_timeout: float = 120.0, engine: str = "asyncio") -> m.Run:
    """:func:`rapidsse.serving.measure.measure`'s run spread over ``workers`` client processes (spawned:
    the parent may hold threads), one schedule for all, started on one barrier, merged exactly.
    ``on_result`` is called in the parent as each request ends. A setup error of a worker (a bad
    option) raises :class:`ValueError`; a worker that dies fails its unfinished requests; Ctrl-C
    (:class:`KeyboardInterrupt`) stops them all and returns what was measured (``run.interrupted``).
    ``engine``: each worker's client, ``"asyncio"`` or ``"native"`` (see
    :func:`rapidsse.serving.measure.drive_native`)."""
    jobs = _jobs(url, bodies, workers, protocol=protocol, num_prompts=num_prompts, request_rate=request_rate,
                 burstiness=burstiness, max_concurrency=max_concurrency, warmup=warmup, seed=seed, headers=headers,
                 timeout=timeout, timestamps=timestamps, loop=loop, engine=engine)
    context = multiprocessing.get_context("spawn")
    start = (context.Event(), context.RawValue("d", 0.0))
    collector = _Collector(jobs, on_result)
    book = SlotBook(max_concurrency) if max_concurrency else None
    pipes, processes = [], []
    for job in jobs:
        mine, theirs = context.Pipe()
        process = context.Process(target=_worker_process, args=(theirs, job, start), daemon=True,
                                  name=f"rapidsse-measure-{job.number}")
        process.start()
        theirs.close()
        pipes.append(mine)
        processes.append(process)
    live = set(range(len(jobs)))
    # One selector for the run, and the pipes read by the 64 KiB, not multiprocessing's wait and
    # poll (a new selector each call) and one recv a message: that was about half of the parent's
    # CPU (docs/measure.md).
    selector = selectors.DefaultSelector()
    for number, (pipe, process) in enumerate(zip(pipes, processes)):
        selector.register(pipe, selectors.EVENT_READ, number)
        selector.register(process.sentinel, selectors.EVENT_READ, number)
    ready: set[int] = set()
    started = False

    def retire(number: int) -> None:
        live.discard(number)
        for item in (pipes[number], processes[number].sentinel):
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(item)

    deadline = time.monotonic() + start_timeout

    def deliver(grants: list[tuple[int, int]]) -> None:
        for worker, index in grants:
            try:
                _write_all(pipes[worker].fileno(), _frame(("go", index)))
            except OSError:
                pass  # it died; its sentinel says so next

    def lost(number: int, reason: str) -> None:
        retire(number)
        ready.discard(number)
        collector.fail_rest(number, reason)
        if book is not None:
            deliver(book.forget(number))

    inboxes = [_Unframer() for _ in jobs]

    def receive(number: int) -> bool:
        """Handles what worker ``number``'s pipe holds (one read: the selector wakes again for
        more); False at its end."""
        try:
            data = os.read(pipes[number].fileno(), 1 << 16)
        except OSError:
            return False
        if not data:
            return False
        for message in inboxes[number].feed(data):
            if number in live:
                handle(number, message)
        return True

    def handle(number: int, message: tuple[str, Any]) -> None:
        kind, value = message
        if kind == "result":
            collector.add(value)
            if book is not None:
                deliver(book.release(value.index))
        elif kind == "want" and book is not None:
            deliver(book.want(number, value))
        elif kind == "ready":
            ready.add(number)
            collector.timestamps.add(value)
        elif kind == "done":
            collector.durations[number], cpu, run_cpu = value
            collector.cpu += cpu
            collector.run_cpu += run_cpu
            retire(number)
        elif kind == "error":
            raise ValueError(value)

    try:
        while live:
            if not started and ready == live:
                # The workers' start: a moment from now that all of them are likely awake by (one
                # that wakes later finds its first requests due, and their wait counts).
                collector.start = start[1].value = time.perf_counter() + START_AHEAD
                start[0].set()
                started = True
            if not started and time.monotonic() > deadline:
                raise TimeoutError(f"the workers were not ready within {start_timeout:g} s")
            for key, _events in selector.select(timeout=0.5):
                number = key.data
                if number not in live:
                    continue
                pipe = pipes[number]
                if key.fileobj is pipe:
                    if not receive(number):  # it closed its end: its sentinel says why
                        with contextlib.suppress(KeyError, ValueError):
                            selector.unregister(pipe)
                    continue
                # Its sentinel: the process ended. What it sent before it did counts first.
                while number in live and receive(number):
                    pass
                if number in live:
                    processes[number].join()
                    lost(number, f"worker {number} died (exit code {processes[number].exitcode}) "
                                 "before this request ended")
        return collector.run()
    except KeyboardInterrupt:
        return collector.interrupted(live)
    finally:
        selector.close()
        stop_processes(processes)
        for pipe in pipes:
            pipe.close()


def stop_processes(processes: Sequence[Any]) -> None:
    """Terminates those still running (SIGTERM), then joins them all (bounded)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)


# --- Ray actors ----------------------------------------------------------------------------------


def _ray_classes() -> tuple[Any, Any]:
    """The Ray actor classes (made on first use: Ray is an optional dependency)."""
    global _RAY_CLASSES
    if _RAY_CLASSES is not None:
        return _RAY_CLASSES
    import asyncio

    import ray

    @ray.remote(num_cpus=0)
    class RaySlots:
        """The global cap as a Ray actor: a :class:`SlotBook` whose grants release waiting calls."""

        def __init__(self, limit: int) -> None:
            self.book = SlotBook(limit)
            self.futures: dict[int, asyncio.Future[None]] = {}

        def _deliver(self, grants: list[tuple[int, int]]) -> None:
            for _worker, index in grants:
                future = self.futures.pop(index, None)
                if future is not None and not future.done():
                    future.set_result(None)

        async def acquire(self, worker: int, index: int) -> None:
            future = asyncio.get_running_loop().create_future()
            self.futures[index] = future
            self._deliver(self.book.want(worker, index))
            await future

        async def release(self, index: int) -> None:
            self._deliver(self.book.release(index))

        async def forget(self, worker: int) -> None:
            self._deliver(self.book.forget(worker))

    class _RaySlotsClient(m.Slots):
        def __init__(self, slots: Any, worker: int) -> None:
            self.slots, self.worker = slots, worker

        async def acquire(self, index: int) -> None:
            # (the engine's loop is not Ray's: wait on the reference's concurrent future)
            await asyncio.wrap_future(self.slots.acquire.remote(self.worker, index).future())

        def release(self, index: int) -> None:
            self.slots.release.remote(index)

    @ray.remote(num_cpus=1, max_concurrency=4)
    class RayWorker:
        """One client: the engine on its share of the schedule, in a thread of its own (its own
        event loop, uvloop's when installed); :meth:`drain` hands over what ended so far."""

        def __init__(self, job: WorkerJob, slots: Any) -> None:
            import threading

            self.job, self.slots = job, slots
            self.results: list[m.RequestResult] = []
            self.lock = threading.Lock()
            self.ready = threading.Event()
            self.go = threading.Event()
            self.at = 0.0
            self.kind = "read"
            self.duration: float | None = None
            self.cpu = time.process_time()
            self.run_cpu = 0.0
            self.error: str | None = None
            self.thread = threading.Thread(target=self._main, daemon=True)
            self.thread.start()

        def _main(self) -> None:
            try:
                if self.job.engine == "native":
                    self._run_native()
                else:
                    m.run_loop(self._run(), self.job.loop)
            except Exception as exc:  # reported to the parent by prepare() / finish()
                self.error = f"{type(exc).__name__}: {exc}"
                self.ready.set()

        def _started(self) -> float:
            self.ready.set()
            self.go.wait()
            # the start, told on the wall clock, on this node's monotonic clock: skew between
            # machines shifts a share of the schedule, never a latency (each timed here)
            return time.perf_counter() + (self.at - time.time())

        def _ended(self, result: m.RequestResult) -> None:
            with self.lock:
                self.results.append(result)

        def _over(self, run: m.Run) -> None:
            self.cpu = time.process_time() - self.cpu
            self.run_cpu = run.client_cpu
            self.duration = run.duration

        async def _run(self) -> None:
            job = self.job
            target = await m.prepared_target(job.url, job.protocol, job.headers, job.timestamps)
            self.kind = "kernel" if target.addresses else "read"
            slots = _RaySlotsClient(self.slots, job.number) if self.slots is not None else None
            warmup_slots = m.LocalSlots(job.warmup_cap) if job.warmup_cap else None
            self._over(await m.drive(target, job.protocol, job.bodies, job.plan, slots=slots, warmup=job.warmup,
                                     warmup_slots=warmup_slots, timeout=job.timeout, on_result=self._ended,
                                     started=self._started))

        def _run_native(self) -> None:
            """The native engine in this thread: a due request's slot is asked of the slot actor
            and granted when the call returns; its result gives it back."""
            job, slots = self.job, self.slots
            engine, self.kind = m.native_engine(job.url, job.protocol, job.headers, job.timestamps, job.bodies,
                                                job.timeout)

            def wants(indexes: list[int]) -> None:
                for index in indexes:
                    slots.acquire.remote(job.number, index).future().add_done_callback(
                        lambda _done, index=index: engine.grant(index))

            def ended(result: m.RequestResult) -> None:
                if slots is not None:
                    slots.release.remote(result.index)
                self._ended(result)

            self._over(m.drive_native(engine, self.kind, job.plan, slots="external" if slots is not None else None,
                                      warmup=job.warmup, warmup_cap=job.warmup_cap, on_result=ended,
                                      started=self._started, on_want=wants))

        def prepare(self) -> str:
            """Returns when this worker is warmed up and waits at the start (Ray's barrier)."""
            self.ready.wait()
            if self.error is not None:
                raise ValueError(self.error)
            return self.kind

        def start(self, at: float) -> None:
            """Starts the run at ``at`` (:func:`time.time`)."""
            self.at = at
            self.go.set()

        def drain(self) -> tuple[list[m.RequestResult], tuple[float, float, float] | None, str | None]:
            """What ended since the last call, the duration and CPU seconds (from setup, and of the
            timed run) once the run is over, any error."""
            over = not self.thread.is_alive() and self.duration is not None  # (first: then all are in)
            with self.lock:
                results, self.results = self.results, []
            return results, (self.duration, self.cpu, self.run_cpu) if over else None, self.error

    _RAY_CLASSES = (RaySlots, RayWorker)
    return _RAY_CLASSES


_RAY_CLASSES: tuple[Any, Any] | None = None


def ray_actor_options() -> dict[str, Any]:
    """The options that make an actor of the run a client like a ``--workers`` process: at this
    process's scheduling priority. Ray starts its worker processes at niceness 15
    (``RAY_worker_niceness``, read by each worker process as it starts), so that on a machine whose
    cores are taken (by the server under test, by the driver) the kernel runs an actor last: its
    reads of the streams come late and in bursts (several tokens per read, so ITLs of 0 and a gap
    of hundreds of ms), and it sends its requests late, while its CPU per token falls (it waits,
    it is not busy). Ray merges these ``env_vars`` into the job's runtime environment, whose other
    fields the actors keep."""
    if not hasattr(os, "nice"):  # (Windows has no niceness to give)
        return {}
    return {"runtime_env": {"env_vars": {"RAY_worker_niceness": str(os.nice(0))}}}


def ray_workers(workers: int | None) -> list[str]:
    """The node of each Ray worker: ``workers`` in total (``None``: one per CPU of the cluster),
    dealt round-robin over the cluster's live nodes."""
    import ray

    nodes = [node for node in ray.nodes() if node.get("Alive")]
    if not nodes:
        raise ValueError("the Ray cluster has no live node")
    if workers is None:
        workers = max(1, int(sum(node.get("Resources", {}).get("CPU", 1) for node in nodes)))
    return [nodes[number % len(nodes)]["NodeID"] for number in range(workers)]


def measure_ray(url: str, bodies: Sequence[dict[str, Any]], workers: int | None = None, *, address: str | None = None,
                protocol: str = "responses", num_prompts: int | None = None, request_rate: float = math.inf,
                burstiness: float = 1.0, max_concurrency: int | None = None, warmup: int = 0,
                seed: int | None = None, headers: dict[str, str] | None = None, timeout: float = 600.0,
                on_result: Callable[[m.RequestResult], None] | None = None, timestamps: str = "auto",
                loop: str = "auto", poll: float = 0.2, name: str | None = None,
                start_timeout: float = 120.0, engine: str = "asyncio") -> m.Run:
    """:func:`measure_workers` with Ray actors across a cluster's nodes instead of local processes:
    ``workers`` in total (``None``: one per CPU of the cluster), placed round-robin on the live
    nodes. Connects to the cluster at ``address`` (``ray.init(address)``; none: the one Ray finds,
    or a new local one) unless Ray is initialised already. Latencies are timed on each actor's own
    monotonic clock, so clock skew between machines never enters them. The start barrier: every
    actor warmed up and waiting (``ray.get`` of all ``prepare`` calls), then all told to start at
    one wall-clock time :data:`RAY_START_AHEAD` ahead (skew shifts an actor's share of the
    schedule, not its latencies). An actor that dies fails its unfinished requests. The actors are named
    ``{name}-{number}`` (``name``: ``rapidsse-measure-<pid>``) and killed at the end. ``engine``: each
    actor's client, as in :func:`measure_workers`."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        ray.init(address=address or None, log_to_driver=False)
    nodes = ray_workers(workers)
    jobs = _jobs(url, bodies, len(nodes), protocol=protocol, num_prompts=num_prompts, request_rate=request_rate,
                 burstiness=burstiness, max_concurrency=max_concurrency, warmup=warmup, seed=seed, headers=headers,
                 timeout=timeout, timestamps=timestamps, loop=loop, engine=engine)
    slots_class, worker_class = _ray_classes()
    name = name or f"rapidsse-measure-{os.getpid()}"
    priority = ray_actor_options()
    slots = (slots_class.options(name=f"{name}-slots", **priority).remote(max_concurrency)
             if max_concurrency else None)
    actors = [worker_class.options(name=f"{name}-{job.number}", max_restarts=0, **priority,
                                   scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True)
                                   ).remote(job, slots) for job, node in zip(jobs, nodes)]
    collector = _Collector(jobs, on_result)
    live = set(range(len(actors)))

    def lost(number: int, exc: BaseException) -> None:
        live.discard(number)
        collector.fail_rest(number, f"worker {number} (Ray actor) died before this request ended: "
                                    f"{type(exc).__name__}")
        if slots is not None:
            slots.forget.remote(number)

    try:
        deadline = time.monotonic() + start_timeout
        for number, actor in enumerate(actors):  # the barrier
            try:
                collector.timestamps.add(ray.get(actor.prepare.remote(),
                                                 timeout=max(0.0, deadline - time.monotonic())))
            except RayActorError as exc:
                lost(number, exc)
            except GetTimeoutError:
                raise TimeoutError(f"the Ray actors were not ready within {start_timeout:g} s (each needs a CPU: "
                                   f"{len(actors)} asked of the cluster's {ray.cluster_resources().get('CPU', 0):g})"
                                   ) from None
        at = time.time() + RAY_START_AHEAD
        collector.start = time.perf_counter() + RAY_START_AHEAD
        ray.get([actors[n].start.remote(at) for n in live])
        while live:
            time.sleep(poll)
            for number in sorted(live):
                try:
                    results, duration, error = ray.get(actors[number].drain.remote())
                except RayActorError as exc:
                    lost(number, exc)
                    continue
                for result in results:
                    collector.add(result)
                if error is not None:
                    raise ValueError(error)
                if duration is not None:
                    collector.durations[number], cpu, run_cpu = duration
                    collector.cpu += cpu
                    collector.run_cpu += run_cpu
                    live.discard(number)
        return collector.run()
    except KeyboardInterrupt:
        return collector.interrupted(live)
    finally:
        for actor in actors + ([slots] if slots is not None else []):
            ray.kill(actor)
