"""The floor under a benchmark client's CPU per token on this machine, beside the native client.

``benches/floor/wake.c`` is a reader with nothing in the way: chunks written RATE a second to each
of STREAMS loopback connections by a thread on the other core, read by one thread that waits on
epoll and reads each ready socket with ``recvmsg`` and its kernel timestamp, as the native measure
client reads (no HTTP, no parsing, no runtime). Its CPU per chunk is what the kernel charges for the
wake and the read alone; with a pause before each wait the arrivals gather into fewer wakes, the
one lever left to a client that must read every token on time (the kernel's stamps keep the times;
a read late by more than a stream's gap merges tokens). The sender is the floor under the synthetic
server in turn: paced writes and nothing else (it spins the last 200 µs before a deadline, as the
server's clock spins), its CPU per chunk and how late it wrote. At the serving benchmark's points (50
tokens a second a stream) with no pause, 1 ms and 5 ms; ``--native`` adds the native client and the
native server's lateness (``benches/test_serving.py``'s point, the synthetic server on the other
core) in the same run, the two taking turns::

    python benches/test_floor.py --repeat 3 --native
    pytest benches/test_floor.py -s --benchmark-columns=median,rounds

Linux, with a C compiler (``cc``); skipped elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_serving  # noqa: E402  (the serving benchmark's points, server and native client)

SOURCE = Path(__file__).parent / "floor" / "wake.c"
STREAMS = test_serving.CONCURRENCIES
RATE = int(test_serving.RATE)
PAUSES_US = (0, 1000, 5000)
SECONDS = 5
NATIVE = "rapidsse measure --engine native"
FIXED = ("streams", "rate", "seconds", "pause_us", "chunk")
"""The keys of a report that name its point (the others are measured: medians over repeats)."""


def build(directory: str | Path) -> Path:
    """``wake.c`` compiled into ``directory``."""
    binary = Path(directory) / "wake"
    subprocess.run(["cc", "-O2", "-pthread", "-o", str(binary), str(SOURCE)], check=True)
    return binary


def run_floor(binary: Path, streams: int, pause_us: int, seconds: int = SECONDS,
              cpus: set[int] | None = None) -> dict[str, Any]:
    """One run of the reader (on ``cpus``, by default this process's: the reader on the first,
    the sender on the second): its JSON report."""
    allowed = cpus if cpus is not None else os.sched_getaffinity(0)
    done = subprocess.run([str(binary), str(streams), str(RATE), str(seconds), str(pause_us)],
                          capture_output=True, text=True, timeout=seconds * 10 + 60,
                          preexec_fn=lambda: os.sched_setaffinity(0, allowed))
    if done.returncode != 0:
        raise RuntimeError(f"wake {streams} {pause_us}: exit {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def table(rows: list[dict[str, Any]], native: dict[int, dict[str, float]]) -> str:
    """A markdown table: a line per streams and pause, the native client's CPU per token and the
    native server's p99 lateness beside (on the line without a pause)."""
    lines = ["| streams | pause | chunks/s (asked) | wakes per chunk | reads of several chunks "
             "| floor CPU µs/chunk (system) | native client µs/token "
             "| sender CPU µs/chunk | sender p99 late ms | native server p99 late ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        pause = f"{row['pause_us'] / 1000:g} ms" if row["pause_us"] else "none"
        beside = native.get(row["streams"], {}) if row["pause_us"] == 0 else {}
        client, server = beside.get("cpu_us_per_token"), beside.get("server_p99_late_ms")
        lines.append(
            f"| {row['streams']} | {pause} | {row['chunks_per_s']:,.0f} ({row['streams'] * row['rate']:,}) "
            f"| {row['wakes_per_chunk']:.2f} | {row['multi_chunk_reads']:,} "
            f"| {row['cpu_us_per_chunk']:.1f} ({row['sys_us_per_chunk']:.1f}) "
            f"| {'' if client is None else f'{client:.1f}'} "
            f"| {row['sender_cpu_us_per_chunk']:.1f} | {row['sender_late_p99_ms']:.2f} "
            f"| {'' if server is None else f'{server:.2f}'} |")
    return "\n".join(lines)


# --- pytest-benchmark --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wake(tmp_path_factory):
    if not sys.platform.startswith("linux") or shutil.which("cc") is None:
        pytest.skip("the floor needs Linux and a C compiler (cc)")
    return build(tmp_path_factory.mktemp("floor"))


@pytest.fixture(scope="module")
def rows():
    collected: list[dict[str, Any]] = []
    yield collected
    if collected:
        print("\n" + table(collected, {}))


@pytest.mark.parametrize("pause_us", PAUSES_US)
@pytest.mark.parametrize("streams", STREAMS)
def test_floor(benchmark, wake, rows, streams, pause_us):
    benchmark.group = f"floor: {streams} streams"
    row = benchmark.pedantic(run_floor, args=(wake, streams, pause_us), rounds=1, iterations=1)
    benchmark.extra_info.update(row)
    rows.append(row)
    # every byte the sender wrote was read, to the end of every stream; the sender's lateness is a
    # percentile of every write's
    assert row["chunks"] == streams * RATE * SECONDS, row
    assert 0 <= row["sender_late_p99_ms"] <= row["sender_late_max_ms"] + 0.001, row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=list(STREAMS))
    parser.add_argument("--pauses", type=int, nargs="+", default=list(PAUSES_US), metavar="MICROSECONDS")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each point; the table gives medians")
    parser.add_argument("--native", action="store_true",
                        help="the native client at each point too (the Rust backend and the serve extra)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if shutil.which("cc") is None:
        parser.error("no C compiler (cc) on PATH")
    server = None
    machine = os.sched_getaffinity(0)  # (the floor's reader and sender on two cores, as client and server)
    if args.native:
        from rapidsse.serving import measure

        if not measure.native_available():
            parser.error("--native needs the Rust backend")
        cores = test_serving._cores()
        if cores is not None:
            os.sched_setaffinity(0, cores[1])
        server = test_serving.Server(cores[0] if cores else None)
    floor: list[dict[str, Any]] = []
    native: dict[int, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as directory:
            binary = build(directory)
            for streams in args.streams:
                runs: dict[int, list[dict[str, Any]]] = {pause: [] for pause in args.pauses}
                natives = []
                for _ in range(args.repeat):
                    for pause in args.pauses:
                        runs[pause].append(run_floor(binary, streams, pause, cpus=machine))
                    if server is not None:
                        natives.append(test_serving.run_point(server, NATIVE, streams))
                for pause, repeats in runs.items():
                    merged = {key: value if key in FIXED else statistics.median(r[key] for r in repeats)
                              for key, value in repeats[0].items()}
                    floor.append(merged)
                if natives:
                    native[streams] = {key: statistics.median(point[key] for point in natives)
                                       for key in ("cpu_us_per_token", "server_p99_late_ms")}
                print(table([r for r in floor if r["streams"] == streams], native), file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps({"floor": floor, "native": native}, indent=1))
    print(table(floor, native))
    return 0


if __name__ == "__main__":
    sys.exit(main())
