"""What does a gateway cost? ``rapidsse measure`` streams chat completions from
``rapidsse serve --synthetic`` (60 tokens at 50 tokens/s per stream) at rising concurrency, side by
side in one run, through:

- ``direct``: no gateway (the floor of the ITL);
- ``gateway --no-tap``: ``rapidsse gateway`` forwarding without an accumulator;
- ``gateway``: ``rapidsse gateway`` tapping every stream (a record per exchange, with its tokens);
- ``litellm``: LiteLLM's proxy (``litellm --model openai/synthetic --api_base ...``), the most used
  Python gateway, pointed at the same server as an OpenAI-compatible upstream.

Each gateway is one process (one worker) pinned to its own core; the server and the client share
the other. Reported per point: the gateway process's CPU time (user + system, from
``/proc/<pid>/stat`` through psutil) per token chunk delivered (the synthetic server writes one
chunk per token), and the p99 ITL it adds over ``direct`` in the same round.

    pytest benches/test_gateway.py -s     # the table on stdout
    python benches/test_gateway.py --concurrency 16 64 256 512 --repeat 3

Needs the ``gateway`` and ``measure`` extras; LiteLLM (``bench`` extra, or ``LITELLM=path/to/litellm``)
and psutil are benchmark-only: without LiteLLM its rows are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import pytest

from rapidsse.serving import measure as m

sys.path.insert(0, os.path.dirname(__file__))
from test_serving import PROTOCOL, TOKENS, Server, _cores  # noqa: E402  (the synthetic server, pinned)

CONCURRENCIES = (16, 64, 256, 512)
STREAMS = 160  # at least this many streams per point: the CPU clock ticks at 10 ms
CONTENDERS = ("direct", "gateway --no-tap", "gateway", "litellm")
MODEL = "openai/synthetic"  # LiteLLM's name of the upstream model; the synthetic server takes any
KEY = "sk-rapidsse-bench-0123456789abcdef0123456789abcdef"  # LiteLLM's master key (it needs one)
HEADERS = {"authorization": f"Bearer {KEY}"}  # sent to every contender


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def litellm_command() -> str | None:
    return os.environ.get("LITELLM") or shutil.which("litellm")


class Gateway:
    """One gateway process (``rapidsse gateway`` or LiteLLM's proxy) pinned to ``pin``."""

    def __init__(self, contender: str, upstream: str, pin: set[int] | None) -> None:
        port = _free_port()
        env = dict(os.environ)
        if contender == "litellm":
            command = [litellm_command() or "litellm", "--model", MODEL, "--api_base", upstream + "/v1",
                       "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
            # no network at startup (the model cost map is bundled), no telemetry, quiet logs
            env.update(OPENAI_API_KEY="x", LITELLM_MASTER_KEY=KEY, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR",
                       LITELLM_TELEMETRY="False")
        else:
            command = [sys.executable, "-m", "rapidsse", "gateway", "--upstream", upstream, "--port", str(port),
                       "--log-level", "warning"]
            if contender == "gateway --no-tap":
                command.append("--no-tap")
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
        self.url = m.endpoint_url(f"http://127.0.0.1:{port}", PROTOCOL)
        deadline = time.monotonic() + 120
        while True:  # until it streams a reply
            try:
                run = asyncio.run(m.measure(self.url, _bodies(), protocol=PROTOCOL, num_prompts=1, timeout=60,
                                               headers=HEADERS))
                if run.results[0].ok:
                    break
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{contender} did not start ({' '.join(command)})")
            time.sleep(0.2)

    def cpu_seconds(self) -> float:
        import psutil

        process = psutil.Process(self.process.pid)
        times = [process.cpu_times()] + [child.cpu_times() for child in process.children(recursive=True)]
        return sum(t.user + t.system for t in times)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _bodies() -> list[dict[str, Any]]:
    return [m.request_body(PROTOCOL, "Tell me a story.", model=MODEL)]


def run_point(url: str, concurrency: int, gateway: Gateway | None, streams: int = STREAMS) -> dict[str, Any]:
    """``2 x concurrency`` streams (at least ``streams``), ``concurrency`` at a time; the gateway's CPU
    time over it."""
    before = gateway.cpu_seconds() if gateway is not None else 0.0
    run = m.run_loop(m.measure(url, _bodies(), protocol=PROTOCOL, num_prompts=max(2 * concurrency, streams),
                               max_concurrency=concurrency, timeout=120, headers=HEADERS))
    cpu = (gateway.cpu_seconds() - before) if gateway is not None else None
    report = m.summarize(run, percentiles=(50.0, 99.0))
    tokens = report["total_output_tokens"] or sum(r.tokens for r in run.results if r.ok)
    chunks = sum(len(r.token_times) for r in run.results)
    return {
        "concurrency": concurrency,
        "completed": report["completed"],
        "failed": report["failed"],
        "failure_reasons": report.get("failure_reasons") or {},
        "median_itl_ms": report["median_itl_ms"],
        "p99_itl_ms": report["p99_itl_ms"],
        "cpu_s": cpu,
        "chunks": chunks,
        "streams": len(run.results),
        "tokens": tokens,
        "cpu_us_per_chunk": cpu / chunks * 1e6 if cpu is not None and chunks else None,
    }


def run_all(concurrencies: tuple[int, ...], repeat: int = 1, with_litellm: bool = True, tokens: int = TOKENS,
            streams: int = STREAMS) -> list[dict[str, Any]]:
    """Every contender at every concurrency, taking turns within each round; medians of the rounds.
    ``tokens``: per stream (the synthetic server's ``--tokens``); ``streams``: at least this many per
    point."""
    cores = _cores()
    server_core, gateway_core = (cores[0], cores[1]) if cores else (None, None)
    if server_core is not None:
        os.sched_setaffinity(0, server_core)  # the client beside the server; each gateway on the other core
    server = Server(server_core, tokens=tokens)
    contenders = [c for c in CONTENDERS if with_litellm or c != "litellm"]
    gateways: dict[str, Gateway] = {}
    rows: list[dict[str, Any]] = []
    try:
        for contender in contenders:
            if contender != "direct":
                gateways[contender] = Gateway(contender, server.base, gateway_core)
        for concurrency in concurrencies:
            rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
            for _ in range(repeat):
                for contender in contenders:
                    gateway = gateways.get(contender)
                    row = run_point(gateway.url if gateway else server.url, concurrency, gateway, streams)
                    row["contender"] = contender
                    print(row, file=sys.stderr, flush=True)
                    rounds[contender].append(row)
            direct_p99 = statistics.median(r["p99_itl_ms"] for r in rounds["direct"])
            for contender, runs in rounds.items():
                row = dict(runs[0])
                for key in ("median_itl_ms", "p99_itl_ms", "cpu_s", "cpu_us_per_chunk"):
                    values = [r[key] for r in runs if r[key] is not None]
                    row[key] = statistics.median(values) if values else None
                row["failed"] = sum(r["failed"] for r in runs)
                row["failure_reasons"] = {k: sum(r["failure_reasons"].get(k, 0) for r in runs)
                                          for k in {k for r in runs for k in r["failure_reasons"]}}
                row["added_p99_itl_ms"] = row["p99_itl_ms"] - direct_p99 if row["p99_itl_ms"] is not None else None
                row["repeats"] = len(runs)
                rows.append(row)
    finally:
        for gateway in gateways.values():
            gateway.stop()
        server.stop()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def num(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = ["| streams | contender | completed | CPU us/chunk | vs --no-tap | median ITL ms | p99 ITL ms | "
             "added p99 ms |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    floor = {r["concurrency"]: r["cpu_us_per_chunk"] for r in rows if r["contender"] == "gateway --no-tap"}
    for r in rows:
        base = floor.get(r["concurrency"])
        ratio = r["cpu_us_per_chunk"] / base if base and r["cpu_us_per_chunk"] else None
        lines.append(f"| {r['concurrency']} | {r['contender']} | {r['completed']}/{r['completed'] + r['failed']} | "
                     f"{num(r['cpu_us_per_chunk'], '.1f')} | {num(ratio, '.2f')}x | {num(r['median_itl_ms'], '.2f')} | "
                     f"{num(r['p99_itl_ms'], '.2f')} | {num(r['added_p99_itl_ms'], '+.2f')} |")
    return "\n".join(lines)


# --- pytest-benchmark --------------------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", (16, 256))
def test_gateway_cost(benchmark, concurrency):
    for name in ("aiohttp", "uvicorn", "prometheus_client", "psutil", "httptools"):
        pytest.importorskip(name)
    benchmark.group = f"gateway: {concurrency} streams"
    rows = benchmark.pedantic(run_all, args=((concurrency,),), kwargs={"with_litellm": bool(litellm_command())},
                              rounds=1, iterations=1)
    benchmark.extra_info["rows"] = rows
    print("\n" + table(rows))
    assert all(r["completed"] == max(2 * concurrency, STREAMS) for r in rows), rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCIES))
    parser.add_argument("--repeat", type=int, default=1, help="rounds per point, the contenders taking turns")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--tokens", type=int, default=TOKENS, help=f"tokens per stream (default {TOKENS})")
    parser.add_argument("--streams", type=int, default=STREAMS,
                        help=f"at least this many streams per point (default {STREAMS})")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    rows = run_all(tuple(args.concurrency), args.repeat, with_litellm=not args.no_litellm and bool(litellm_command()),
                   tokens=args.tokens, streams=args.streams)
    print(table(rows))
    if args.json:
        import json

        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
