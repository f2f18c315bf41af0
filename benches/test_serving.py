"""Can the serving benchmark be trusted, and what does it cost? ``rapidsse serve --synthetic`` paces
every token exactly (one every ``1000 / rate`` ms); a client that measures a different inter-token
latency is measuring itself. This runs the server pinned to one core (the native engine where the
extension has it) and the clients on the other, at rising concurrency (streams in flight, 200
tokens at 50 tokens/s each), and reports per client the error of the measured median and p99 ITL
against the paced truth, the server's own p99 error as it sent the gaps and its lateness, the
client's CPU time per token, and whether the client says it was saturated:

- ``rapidsse measure --engine native``: the Rust client of :mod:`rapidsse.serving.measure` (tokio
  tasks, pooled HTTP/1.1, the protocol's token counter in Rust), a token counted at the kernel's
  receive timestamp of its bytes (Linux; elsewhere when read);
- ``rapidsse measure --engine asyncio``: the asyncio client (a protocol per request, httptools
  framing, rapidsse's typed decoder), the same timestamps;
- ``rapidsse measure, read timestamps``: the asyncio client counting a token when the event loop
  read it (``--timestamps read``), as the two others do (``--clients``);
- ``aiohttp + rapidsse``: aiohttp's streaming reads with the same decoder (``--clients``);
- ``aiohttp + json.loads``: a vLLM-style client, as ``vllm bench serve``'s request function reads a
  chat stream: aiohttp's reads, each stripped and split on blank lines by hand, a JSON parse to see
  whether a trailing message is complete, then ``json.loads`` per message.

All use the same open-loop schedule (due times, a slot cap, latency from the due time) and the same
statistics (:func:`rapidsse.serving.measure.summarize`), in the same run; the Python clients the
same event loop (uvloop's when installed, as ``rapidsse measure`` picks). A client's CPU is this
process's (every thread's: the native engine's runtime included) over the run.

    pytest benches/test_serving.py -s --benchmark-columns=median,rounds   # the table on stdout
    python benches/test_serving.py --repeat 3 --json serving.json --plot docs/serving-benchmark.png

Each point runs ``2 x concurrency`` requests (about 8 s of schedule plus a stream). The server
reports how it kept its own schedule during each run (``/health``): on a shared machine its core
is not always its own, and the columns "server's own p99 error" and "server p99 late" say how much
of a client's error came from there.

Past one core (``test_serving_scale_out``, or ``--scale``): at 512, 1024 and 2048 streams the
server runs with ``--workers 2`` and the client as ``rapidsse measure --workers 1`` (one process),
``--workers 2`` (two spawned processes) and ``--ray`` with two actors on a local Ray instance
(when ray is installed), unpinned, taking turns in the same run; the table adds the tokens per
second delivered against those the schedule asks for (short of it: the machine is saturated),
and the client's CPU counts every worker's (with the parent's own part in a column of its own)::

    python benches/test_serving.py --scale --repeat 3 --json scale.json
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from rapidsse.serving import measure as m

RATE = 50.0  # tokens per second per stream
TOKENS = 200
TTFT = 0.1
CONCURRENCIES = (64, 256, 1024, 2048, 4096)
TRUTH_MS = 1000.0 / RATE
PROTOCOL = "chat"


# --- The server, on its own core ---------------------------------------------------------------------


def _cores() -> tuple[set[int], set[int]] | None:
    """(server core, client core) when two are there to pin to."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None
    return ({cores[0]}, {cores[1]}) if len(cores) >= 2 else None


SERVER_ENGINE = ("--engine", "native") if m.native_available() else ()
"""The synthetic server's engine: native where the extension has it (one core paces 2048 streams)."""


class Server:
    """``rapidsse serve --synthetic`` in a subprocess pinned to the server core (``pin``), with
    ``workers`` processes on its port."""

    def __init__(self, pin: set[int] | None, workers: int = 1, tokens: int = TOKENS) -> None:
        command = [sys.executable, "-m", "rapidsse", "serve", "--synthetic", "--tokens", str(tokens), "--rate",
                   str(RATE), "--ttft", str(TTFT * 1000), "--port", "0", "--log-level", "warning",
                   "--workers", str(workers), *SERVER_ENGINE]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                                        preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
        banner = self.process.stderr.readline()
        if " on " not in banner:
            self.process.kill()
            raise RuntimeError(f"the synthetic server did not start: {banner}")
        self.base = banner.rsplit(" on ", 1)[1].strip().removesuffix("/v1")
        self.url = m.endpoint_url(self.base, PROTOCOL)
        deadline = time.monotonic() + 60
        while True:  # wait until it accepts a request
            try:
                run = asyncio.run(m.measure(self.url, _bodies(), protocol=PROTOCOL, num_prompts=1,
                                            timeout=5 + tokens / RATE))
                if run.results[0].ok:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the synthetic server does not answer")
            time.sleep(0.1)

    def sent(self) -> dict[str, Any]:
        """How the server kept its schedule since the last call (its ``/health?reset``): the
        lateness of its tokens and the ITLs as it sent them."""
        import urllib.request

        with urllib.request.urlopen(self.base + "/health?reset", timeout=10) as response:
            return json.load(response)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process.stderr.close()


def _bodies() -> list[dict[str, Any]]:
    return [m.request_body(PROTOCOL, "Tell me a story.", model="synthetic")]


# --- The clients -----------------------------------------------------------------------------------


async def _open_loop(send: Callable[[float, m.RequestResult], Any], count: int, rate: float,
                     concurrency: int) -> m.Run:
    """The driver of :func:`rapidsse.serving.measure.measure` for the aiohttp clients: requests due at Poisson
    arrivals, at most ``concurrency`` in flight, latency from the due time."""
    slots = asyncio.Semaphore(concurrency)

    async def one(due: float, result: m.RequestResult) -> m.RequestResult:
        async with slots:
            result.queued = time.perf_counter() - due
            await send(due, result)
        return result

    with m.collector_paused():  # as rapidsse measure does: no collection stops the loop mid-run
        start = time.perf_counter()
        tasks = []
        for offset in m.arrival_times(count, rate, seed=0):
            wait = start + offset - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.ensure_future(one(start + offset, m.RequestResult(due=offset))))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    return m.Run(list(results), duration)


def _aiohttp_client(read: str) -> Callable[[str, int, float, int], m.Run]:
    """An aiohttp client; ``read`` is ``"json.loads"`` (vLLM-style) or ``"rapidsse"``."""

    async def run(url: str, count: int, rate: float, concurrency: int) -> m.Run:
        import aiohttp

        body = _bodies()[0]
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

            async def send(due: float, result: m.RequestResult) -> None:
                times = result.token_times
                try:
                    async with session.post(url, json=body) as response:
                        result.status_code = response.status
                        if response.status != 200:
                            result.error = f"HTTP {response.status}"
                            return
                        if read == "rapidsse":
                            adapter = m._ADAPTERS[PROTOCOL]()
                            async for chunk in response.content.iter_any():
                                now = time.perf_counter() - due
                                tokens = adapter.feed(chunk)
                                if tokens:
                                    times.extend([now] * tokens)
                            result.output_tokens = adapter.output_tokens
                            finished = adapter.finished
                        else:
                            finished = False
                            split = _VllmStyleSplitter()
                            async for chunk in response.content.iter_any():
                                chunk = chunk.strip()
                                if not chunk:
                                    continue
                                for message in split.add(chunk):
                                    if message.startswith(":"):
                                        continue
                                    data = message.removeprefix("data: ")
                                    if data == "[DONE]":
                                        finished = True
                                        continue
                                    timestamp = time.perf_counter() - due
                                    chunk_json = json.loads(data)
                                    if choices := chunk_json.get("choices"):
                                        if choices[0]["delta"].get("content"):
                                            times.append(timestamp)
                                    elif usage := chunk_json.get("usage"):
                                        result.output_tokens = usage.get("completion_tokens")
                        result.latency = time.perf_counter() - due
                        result.ttft = times[0] if times else None
                        result.ok = finished and bool(times)
                        result.error = None if result.ok else "cut short"
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                    result.error = type(exc).__name__

            return await _open_loop(send, count, rate, concurrency)

    return lambda *args: m.run_loop(run(*args))


class _VllmStyleSplitter:
    """The way vLLM's benchmark client cuts a stream into messages: reads decoded and appended to a
    string, split on blank lines, and a trailing ``data:`` message taken when it parses as JSON
    (its reads arrive stripped, so that is where most messages come from)."""

    def __init__(self) -> None:
        self.buffer = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")()

    def add(self, chunk: bytes) -> list[str]:
        self.buffer += self.decoder.decode(chunk)
        messages = []
        while "\n\n" in self.buffer:
            message, self.buffer = self.buffer.split("\n\n", 1)
            message = message.strip()
            if message:
                messages.append(message)
        if self.buffer.startswith("data: "):
            content = self.buffer.removeprefix("data: ").strip()
            if content == "[DONE]":
                messages.append(self.buffer.strip())
                self.buffer = ""
            elif content:
                try:
                    json.loads(content)
                except json.JSONDecodeError:
                    pass
                else:
                    messages.append(self.buffer.strip())
                    self.buffer = ""
        return messages


def _rapidsse_measure(timestamps: str, engine: str = "asyncio") -> Callable[[str, int, float, int], m.Run]:
    def run(url: str, count: int, rate: float, concurrency: int) -> m.Run:
        return m.run_loop(m.measure(url, _bodies(), protocol=PROTOCOL, num_prompts=count, request_rate=rate,
                                    max_concurrency=concurrency, seed=0, timeout=300, timestamps=timestamps,
                                    engine=engine))

    return run


CLIENTS: dict[str, Callable[[str, int, float, int], m.Run]] = {
    "rapidsse measure --engine native": _rapidsse_measure("auto", "native"),
    "rapidsse measure --engine asyncio": _rapidsse_measure("auto"),
    "rapidsse measure, read timestamps": _rapidsse_measure("read"),
    "aiohttp + rapidsse": _aiohttp_client("rapidsse"),
    "aiohttp + json.loads": _aiohttp_client("json.loads"),
}
DEFAULT_CLIENTS = ("rapidsse measure --engine native", "rapidsse measure --engine asyncio", "aiohttp + json.loads")
"""The clients of the published table; the others on ``--clients``."""


def _clients(names: Sequence[str] = DEFAULT_CLIENTS) -> dict[str, Callable[[str, int, float, int], m.Run]]:
    """``names`` that this process can run (the native engine needs the Rust backend)."""
    return {name: CLIENTS[name] for name in names if "--engine native" not in name or m.native_available()}


def _scaled(workers: int, ray: bool) -> Callable[[str, int, float, int], m.Run]:
    """``rapidsse measure --workers N`` (spawned processes) or ``--ray`` (N actors)."""
    from rapidsse.serving import workers as measure_workers

    def run(url: str, count: int, rate: float, concurrency: int) -> m.Run:
        # (no cap: the arrival rate keeps `concurrency` streams in flight, and a global cap costs
        # each request a round trip to the parent, or a Ray call, that this table is not about)
        options = dict(protocol=PROTOCOL, num_prompts=count, request_rate=rate, seed=0, timeout=120)
        if ray:
            return measure_workers.measure_ray(url, _bodies(), workers, **options)
        return measure_workers.measure_workers(url, _bodies(), workers, **options)

    return run


SCALE_CONCURRENCIES = (512, 1024, 2048)
SCALE_CLIENTS: dict[str, Callable[[str, int, float, int], m.Run]] = {
    "rapidsse measure --workers 1": lambda url, count, rate, concurrency: m.run_loop(m.measure(
        url, _bodies(), protocol=PROTOCOL, num_prompts=count, request_rate=rate, seed=0, timeout=120)),
    "rapidsse measure --workers 2": _scaled(2, ray=False),
    "rapidsse measure --ray, 2 actors": _scaled(2, ray=True),
}
"""Past one core: the server with ``--workers 2`` and the client as one process, two, or two Ray
actors (on a local Ray instance), unpinned (two cores for all of them on the machine of the
published table)."""


# --- One point ---------------------------------------------------------------------------------------


def run_point(server: Server, client: str, concurrency: int,
              clients: dict[str, Callable[[str, int, float, int], m.Run]] = CLIENTS) -> dict[str, Any]:
    """``2 x concurrency`` requests arriving at the rate that keeps ``concurrency`` streams in
    flight; the ITL error against the paced truth and the CPU time per token of the client (this
    process and its workers)."""
    count = 2 * concurrency
    rate = concurrency / (TTFT + (TOKENS - 1) / RATE)
    server.sent()  # (resets the server's count)
    cpu = time.process_time()
    run = clients[client](server.url, count, rate, concurrency)
    parent_cpu = time.process_time() - cpu  # (with workers: the dealing, the merge, the slot book)
    cpu = parent_cpu + run.worker_cpu
    sent = server.sent()
    report = m.summarize(run, percentiles=[50, 99])
    tokens = sum(len(r.token_times) for r in run.results)
    return {
        "client": client,
        "concurrency": concurrency,
        "completed": report["completed"],
        "failed": report["failed"],
        "failure_reasons": report["failure_reasons"],
        "median_itl_error_ms": report["median_itl_ms"] - TRUTH_MS,
        "p99_itl_error_ms": report["p99_itl_ms"] - TRUTH_MS,
        "median_ttft_error_ms": report["median_ttft_ms"] - TTFT * 1000,
        "cpu_us_per_token": cpu / tokens * 1e6 if tokens else float("nan"),
        "parent_cpu_us_per_token": parent_cpu / tokens * 1e6 if tokens else float("nan"),
        "tokens": tokens,
        "server_p99_late_ms": sent["lateness"]["p99_ms"],
        "multi_token_reads": report.get("multi_token_reads", 0),
        "token_reads": report.get("token_reads", 0),
        "client_cpu_share": cpu / run.duration if run.duration else float("nan"),
        "client_saturated": bool(report.get("client_saturated")),
        "server_median_itl_error_ms": sent["itl"]["median_ms"] - TRUTH_MS,
        "server_p99_itl_error_ms": sent["itl"]["p99_ms"] - TRUTH_MS,
        "output_tokens_per_s": report["output_throughput"],
        # what the schedule asks for over the run, ramps included: its tokens over the time from the
        # first request to the end of the last one when each stream keeps its pace
        "offered_tokens_per_s": count * TOKENS / (count / rate + TTFT + (TOKENS - 1) / RATE),
    }


def _markdown(rows: list[dict[str, Any]], columns: list[tuple[str, Callable[[dict[str, Any]], str]]]) -> str:
    """``rows`` by concurrency as a markdown table: streams, client (and its failures), then
    ``columns`` (header, cell of a row)."""
    lines = ["| streams | client | " + " | ".join(header for header, _ in columns) + " |",
             "| ---: | --- |" + " ---: |" * len(columns)]
    for row in sorted(rows, key=lambda r: r["concurrency"]):
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        lines.append(f"| {row['concurrency']} | {row['client']}{failed} | "
                     + " | ".join(cell(row) for _, cell in columns) + " |")
    return "\n".join(lines)


def _tells(row: dict[str, Any]) -> bool:
    """Whether the client of ``row`` checks its own saturation (``rapidsse measure`` does; the
    aiohttp clients count neither their reads nor their CPU)."""
    return row["client"].startswith("rapidsse measure")


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table: per concurrency and client, the measured ITL's error
    against the paced truth, the same for the ITLs as the server sent them (what the server itself
    added, e.g. when its core was busy), and the client's CPU time per token."""
    return _markdown(rows, [
        ("median ITL error ms", lambda r: f"{r['median_itl_error_ms']:+.2f}"),
        ("p99 ITL error ms", lambda r: f"{r['p99_itl_error_ms']:+.2f}"),
        ("server's own p99 error ms", lambda r: f"{r['server_p99_itl_error_ms']:+.2f}"),
        ("server p99 late ms", lambda r: f"{r['server_p99_late_ms']:.2f}"),
        ("client CPU µs/token", lambda r: f"{r['cpu_us_per_token']:.1f}"),
        ("client CPU share", lambda r: f"{r['client_cpu_share']:.2f}"),
        ("reads of several tokens", lambda r: f"{r['multi_token_reads']:,.0f} of {r['token_reads']:,.0f}"
         if _tells(r) else "—"),
        ("says saturated", lambda r: ("yes" if r["client_saturated"] else "no") if _tells(r) else "—"),
    ])


def scale_table(rows: list[dict[str, Any]]) -> str:
    """The scale-out results: per concurrency and client, the p99 ITL error (the client's and the
    server's own), the tokens per second delivered against the ones the schedule asks for (where
    they fall short, the machine is saturated), and the client's CPU per token."""
    return _markdown(rows, [
        ("p99 ITL error ms", lambda r: f"{r['p99_itl_error_ms']:+.2f}"),
        ("server's own p99 error ms", lambda r: f"{r['server_p99_itl_error_ms']:+.2f}"),
        ("tokens/s delivered / asked",
         lambda r: f"{r['output_tokens_per_s'] / 1000:.1f}k / {r['offered_tokens_per_s'] / 1000:.1f}k"),
        ("client CPU µs/token", lambda r: f"{r['cpu_us_per_token']:.0f}"),
        ("of which the parent's", lambda r: f"{r['parent_cpu_us_per_token']:.1f}"),
    ])


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """The chart: p99 and median ITL error (with the server's own p99 error, dotted), and the
    client's CPU time per token, against concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (p99_axes, median_axes, cpu_axes) = plt.subplots(1, 3, figsize=(14, 4.4))
    for client in dict.fromkeys(r["client"] for r in rows):
        mine = sorted((r for r in rows if r["client"] == client), key=lambda r: r["concurrency"])
        xs = [r["concurrency"] for r in mine]
        line, = p99_axes.plot(xs, [r["p99_itl_error_ms"] for r in mine], marker="o", label=client)
        color = line.get_color()
        p99_axes.plot(xs, [r["server_p99_itl_error_ms"] for r in mine], linestyle=":", color=color)
        median_axes.plot(xs, [r["median_itl_error_ms"] for r in mine], marker="o", color=color, label=client)
        cpu_axes.plot(xs, [r["cpu_us_per_token"] for r in mine], marker="o", color=color, label=client)
    for axes in (p99_axes, median_axes):
        axes.axhspan(-1, 1, color="green", alpha=0.1)
        axes.set_yscale("symlog", linthresh=1)
        axes.set_ylabel(f"measured − paced truth ({TRUTH_MS:g} ms), ms")
    for axes in (p99_axes, median_axes, cpu_axes):
        axes.set_xscale("log", base=2)
        ticks = sorted({r["concurrency"] for r in rows})
        axes.set_xticks(ticks, [str(c) for c in ticks])
        axes.set_xlabel(f"concurrent streams at {RATE:g} tokens/s")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8, loc="upper left")
    p99_axes.set_title("p99 ITL error (dotted: the server's own, as it sent)", fontsize=10)
    median_axes.set_title("median ITL error (green band: ±1 ms)", fontsize=10)
    cpu_axes.set_ylabel("client CPU µs per token")
    cpu_axes.set_title("client cost", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --- pytest-benchmark --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("httptools")
    pytest.importorskip("aiohttp")
    pytest.importorskip("uvicorn")
    cores = _cores()
    if cores is not None:
        os.sched_setaffinity(0, cores[1])
    started = Server(cores[0] if cores else None)
    yield started
    started.stop()


def _printed(render: Callable[[list[dict[str, Any]]], str]) -> Any:
    """A module fixture's body: the rows its tests collect, printed as ``render`` draws them."""
    collected: list[dict[str, Any]] = []
    yield collected
    if collected:
        print("\n" + render(collected))


@pytest.fixture(scope="module")
def rows():
    yield from _printed(table)


def _bench_point(benchmark: Any, group: str, rows: list[dict[str, Any]], *args: Any) -> dict[str, Any]:
    benchmark.group = group
    row = benchmark.pedantic(run_point, args=args, rounds=1, iterations=1)
    benchmark.extra_info.update(row)
    rows.append(row)
    return row


@pytest.mark.parametrize("concurrency", CONCURRENCIES)
@pytest.mark.parametrize("client", DEFAULT_CLIENTS)
def test_serving_client(benchmark, server, rows, client, concurrency):
    if client not in _clients():
        pytest.skip("the native engine needs the Rust backend")
    row = _bench_point(benchmark, f"serving: {concurrency} streams", rows, server, client, concurrency)
    assert row["completed"] == 2 * concurrency, row


@pytest.fixture(scope="module")
def scale_server():
    pytest.importorskip("httptools")
    started = Server(None, workers=2)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def scale_rows():
    yield from _printed(scale_table)


@pytest.mark.parametrize("concurrency", SCALE_CONCURRENCIES)
@pytest.mark.parametrize("client", list(SCALE_CLIENTS))
def test_serving_scale_out(benchmark, scale_server, scale_rows, request, client, concurrency):
    if "--ray" in client:
        request.getfixturevalue("ray_cluster")
    row = _bench_point(benchmark, f"serving past one core: {concurrency} streams", scale_rows, scale_server,
                       client, concurrency, SCALE_CLIENTS)
    assert row["completed"] + row["failed"] == 2 * concurrency, row


def median_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from repeats of a point: the median of each number (failures: the sum)."""
    merged = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, bool):  # saturated in any run: said so
            merged[key] = any(r[key] for r in rows)
        elif isinstance(value, (int, float)) and key not in ("concurrency", "failed"):
            merged[key] = statistics.median(r[key] for r in rows)
    merged["failed"] = sum(r["failed"] for r in rows)
    merged["failure_reasons"] = dict(sum((Counter(r["failure_reasons"]) for r in rows), Counter()))
    merged["repeats"] = len(rows)
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the chart")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCIES))
    parser.add_argument("--clients", nargs="+", default=list(DEFAULT_CLIENTS), choices=list(CLIENTS))
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each point, the clients taking turns; the table gives their medians")
    parser.add_argument("--scale", action="store_true",
                        help="past one core: the server with --workers 2 and the clients of SCALE_CLIENTS "
                             "(Ray's when ray is installed), at 512, 1024 and 2048 streams by default")
    args = parser.parse_args(argv)
    if args.scale:
        return scale_main(args)
    cores = _cores()
    if cores is not None:
        os.sched_setaffinity(0, cores[1])
    print(f"synthetic server: {' '.join(SERVER_ENGINE) or 'default engine'}", file=sys.stderr, flush=True)
    collected = interleaved(Server(cores[0] if cores else None), _clients(args.clients), args.concurrency,
                            args.repeat, args.json)
    print(table(collected))
    if args.plot:
        plot(collected, args.plot)
    return 0


def interleaved(server: Server, clients: dict[str, Callable[[str, int, float, int], m.Run]],
                concurrencies: list[int], repeat: int, json_path: str | None) -> list[dict[str, Any]]:
    """Every point of ``concurrencies``, the ``clients`` taking turns ``repeat`` times; the medians
    (also written to ``json_path``). Stops the server at the end."""
    collected = []
    try:
        for concurrency in concurrencies:
            runs: dict[str, list[dict[str, Any]]] = {client: [] for client in clients}
            for _ in range(repeat):
                for client in clients:
                    row = run_point(server, client, concurrency, clients)
                    print(row, file=sys.stderr, flush=True)
                    runs[client].append(row)
            collected += [median_of(rows) for rows in runs.values()]
    finally:
        server.stop()
    if json_path:
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump(collected, out, indent=2)
    return collected


def scale_main(args: argparse.Namespace) -> int:
    """``--scale``: the scale-out table (and ``--json``), clients taking turns at each point."""
    concurrencies = args.concurrency if args.concurrency != list(CONCURRENCIES) else list(SCALE_CONCURRENCIES)
    clients = dict(SCALE_CLIENTS)
    try:
        import ray
    except ImportError:
        print("ray is not installed: the Ray client is left out", file=sys.stderr)
        clients = {name: run for name, run in clients.items() if "--ray" not in name}
    else:
        ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False, log_to_driver=False)
    print(scale_table(interleaved(Server(None, workers=2), clients, concurrencies, args.repeat, args.json)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
