"""What does a gateway cost? ``rapidsse measure`` streams chat completions from
``rapidsse serve --synthetic`` (60 tokens at 50 tokens/s per stream) at rising concurrency, side by
side in one run, through:

- ``direct``: no gateway (the floor of the ITL);
- ``relay (C)``: ``benches/floor/relay.c``, a TCP relay in C on one thread of edge-triggered epoll
  that writes whatever it reads to the other side at once: no HTTP, no parsing, the least any proxy
  of a stream must do (the floor of the CPU; left out where there is no C compiler, ``cc``);
- ``nginx``: Debian's nginx, ``proxy_pass`` with ``proxy_buffering off``, one worker, upstream
  keep-alive (a benchmark-only dependency: its rows are left out where ``nginx`` is not on PATH);
- ``native --no-tap`` / ``native``: ``rapidsse gateway --engine native --threads 1``, forwarding
  only, then tapping every stream (a record per exchange, with its tokens, logged as JSON);
- ``asyncio --no-tap`` / ``asyncio``: the same with ``--engine asyncio`` (uvicorn and aiohttp);
- ``litellm``: LiteLLM's proxy (``litellm --model openai/synthetic --api_base ...``), the most used
  Python gateway, pointed at the same server as an OpenAI-compatible upstream.

Each gateway is one process pinned to its own core; the server and the client (each a process of
its own, both on the native engine where the extension has it) share the other. Reported per point: the
gateway process's CPU time (user + system, with its children's, through psutil) per token chunk
delivered (the synthetic server writes one chunk per token), the p99 ITL it adds over ``direct`` in
the same round, the ratios to nginx and to native ``--no-tap`` within each round (their medians
over the rounds), and the server's own p99 lateness (``/health``) beside it.

Then, per gateway: the resident memory each open stream costs with 4,096 idle streams held open
(upstream has not answered yet), and the chunks per second it forwards at saturation (``native``
with ``--threads 1`` and ``--threads 2``, nginx with one worker), unpinned, with the CPU share it
used to do so.

    pytest benches/test_gateway.py -s     # the table on stdout
    python benches/test_gateway.py --concurrency 64 256 1024 --repeat 3 --json gateway.json

Needs the ``gateway`` and ``measure`` extras and psutil; LiteLLM (``bench`` extra, or
``LITELLM=path/to/litellm``) and nginx are benchmark-only: without them their rows are left out.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import pytest

from rapidsse.serving import measure as m

PROTOCOL = "chat"
RATE = 50.0
TOKENS = 60
TTFT_MS = 100
CONCURRENCIES = (64, 256, 1024)
STREAMS = 160  # at least this many streams per point (two rounds of the concurrency at most)
CONTENDERS = ("direct", "relay (C)", "nginx", "native --no-tap", "native", "asyncio --no-tap", "asyncio", "litellm")
RELAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor", "relay.c")
MODEL = "openai/synthetic"  # LiteLLM's name of the upstream model; the synthetic server takes any
KEY = "sk-rapidsse-bench-0123456789abcdef0123456789abcdef"  # LiteLLM's master key (it needs one)
IDLE_STREAMS = 4096


def _cores() -> tuple[set[int], set[int]] | None:
    """(server and client core, gateway core) when two are there to pin to."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None
    return ({cores[0]}, {cores[1]}) if len(cores) >= 2 else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pinned(pin: set[int] | None) -> Any:
    return (lambda: os.sched_setaffinity(0, pin)) if pin else None


def litellm_command() -> str | None:
    return os.environ.get("LITELLM") or shutil.which("litellm")


def nginx_command() -> str | None:
    return os.environ.get("NGINX") or shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def _options(command: str) -> str:
    """``rapidsse COMMAND --help``, to pass ``--engine`` only where the command has it."""
    return subprocess.run([sys.executable, "-m", "rapidsse", command, "--help"], capture_output=True, text=True,
                          timeout=60).stdout


def available(contender: str) -> bool:
    if contender == "relay (C)":
        return sys.platform.startswith("linux") and shutil.which("cc") is not None
    if contender == "litellm":
        return litellm_command() is not None
    if contender == "nginx":
        return nginx_command() is not None
    if contender.startswith("native"):
        from rapidsse.gateway import native

        return native.available()
    return True


class Server:
    """``rapidsse serve --synthetic`` in a subprocess pinned to ``pin``."""

    def __init__(self, pin: set[int] | None, tokens: int = TOKENS, rate: float = RATE, ttft_ms: float = TTFT_MS):
        command = [sys.executable, "-m", "rapidsse", "serve", "--synthetic", "--tokens", str(tokens), "--rate",
                   str(rate), "--ttft", str(ttft_ms), "--port", "0", "--log-level", "warning", *server_engine()]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, preexec_fn=_pinned(pin))
        banner = self.process.stderr.readline()
        if " on " not in banner:
            self.process.kill()
            raise RuntimeError(f"the synthetic server did not start: {banner}")
        self.base = banner.rsplit(" on ", 1)[1].strip().removesuffix("/v1")

    def sent(self) -> dict[str, Any]:
        """How the server kept its schedule since the last call (``/health?reset``)."""
        with urllib.request.urlopen(self.base + "/health?reset", timeout=30) as response:
            return json.load(response)

    def stop(self) -> None:
        self.process.terminate()
        try:  # a graceful stop waits for the streams in flight: held ones (idle_rss) are cut
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stderr.close()


_NGINX_CONF = """\
worker_processes 1;
worker_rlimit_nofile 65536;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log stderr error;
events {{ worker_connections 20000; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream synthetic {{ server {upstream}; keepalive 1024; }}
    server {{
        listen 127.0.0.1:{port} backlog=8192;
        location / {{
            proxy_pass http://synthetic;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


class Gateway:
    """One gateway process (the C relay, nginx, ``rapidsse gateway`` or LiteLLM's proxy) pinned to ``pin``
    (``threads``: the native engine's)."""

    def __init__(self, contender: str, upstream: str, pin: set[int] | None, threads: int = 1,
                 probe: bool = True) -> None:
        port = _free_port()
        env = dict(os.environ)
        self.dir = tempfile.mkdtemp(prefix="rapidsse-bench-gw-")
        if contender == "litellm":
            command = [litellm_command() or "litellm", "--model", MODEL, "--api_base", upstream + "/v1",
                       "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
            # no network at startup (the model cost map is bundled), no telemetry, quiet logs
            env.update(OPENAI_API_KEY="x", LITELLM_MASTER_KEY=KEY, LITELLM_LOCAL_MODEL_COST_MAP="True",
                       LITELLM_LOG="ERROR", LITELLM_TELEMETRY="False")
        elif contender == "relay (C)":
            binary = os.path.join(self.dir, "relay")
            subprocess.run(["cc", "-O2", "-o", binary, RELAY], check=True)
            command = [binary, str(port), upstream.removeprefix("http://")]
        elif contender == "nginx":
            conf = os.path.join(self.dir, "nginx.conf")
            with open(conf, "w") as out:
                out.write(_NGINX_CONF.format(dir=self.dir, upstream=upstream.removeprefix("http://"), port=port))
            command = [nginx_command() or "nginx", "-c", conf, "-p", self.dir, "-e", "stderr"]
        else:
            engine = contender.split()[0]
            command = [sys.executable, "-m", "rapidsse", "gateway", "--upstream", upstream, "--port", str(port),
                       "--log-level", "warning", "--engine", engine]
            if engine == "native":
                command += ["--threads", str(threads)]
            if contender.endswith("--no-tap"):
                command.append("--no-tap")
        self.contender = contender
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=_pinned(pin))
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:  # until it streams a reply (or, with an upstream that never answers, accepts)
            try:
                if not probe:
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                    break
                run = m.run_loop(m.measure(self.url, _bodies(), protocol=PROTOCOL, num_prompts=1, timeout=60,
                                           headers=_headers(), timestamps="read"))
                if run.results[0].ok:
                    break
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{contender} did not start ({' '.join(command)})")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return m.endpoint_url(self.base, PROTOCOL)

    def _processes(self) -> list[Any]:
        import psutil

        process = psutil.Process(self.process.pid)
        return [process] + process.children(recursive=True)

    def cpu_seconds(self) -> float:
        """The CPU time of the gateway's processes, every thread of each: from the scheduler's
        nanosecond counters (``/proc/PID/task/TID/schedstat``) where Linux has them, else from
        psutil (clock ticks of 10 ms, too coarse for a point of a few thousand chunks)."""
        total = 0.0
        for process in self._processes():
            try:
                tasks = os.listdir(f"/proc/{process.pid}/task")
            except OSError:
                tasks = []
            stamped = 0.0
            for tid in tasks:
                try:
                    with open(f"/proc/{process.pid}/task/{tid}/schedstat") as stat:
                        stamped += int(stat.read().split()[0]) / 1e9
                except (OSError, ValueError, IndexError):
                    tasks = []
                    break
            if tasks:
                total += stamped
            else:
                times = process.cpu_times()
                total += times.user + times.system
        return total

    def rss(self) -> int:
        return sum(p.memory_info().rss for p in self._processes())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _bodies() -> list[dict[str, Any]]:
    return [m.request_body(PROTOCOL, "Tell me a story.", model=MODEL)]


def _headers() -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}"}  # sent to every contender (LiteLLM checks it)


_MEASURE_ENGINE: list[str] | None = None


@functools.lru_cache(maxsize=None)
def server_engine() -> tuple[str, ...]:
    """The synthetic server's engine, named: native where the extension has it (it paces 1024
    streams from its half of the shared core; the asyncio one falls behind there)."""
    return ("--engine", "native") if "--engine" in _options("serve") and _native() else ()


def client_engine() -> list[str]:
    global _MEASURE_ENGINE
    if _MEASURE_ENGINE is None:
        _MEASURE_ENGINE = ["--engine", "native"] if "--engine" in _options("measure") and _native() else []
    return _MEASURE_ENGINE


def measure(url: str, count: int, concurrency: int, pin: set[int] | None, timeout: float = 300) -> dict[str, Any]:
    """``rapidsse measure`` in a process of its own (pinned to ``pin``), its report back."""
    command = [sys.executable, "-m", "rapidsse", "measure", "--url", url, "--protocol", PROTOCOL, "--model", MODEL,
               "-n", str(count), "-c", str(concurrency), "--save-result", "-", "--no-progress", "--timeout",
               str(timeout), "-H", f"authorization: Bearer {KEY}", *client_engine()]
    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=_pinned(pin), timeout=timeout + 120)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"rapidsse measure failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _native() -> bool:
    from rapidsse.gateway import native

    return native.available()


def run_point(url: str, concurrency: int, gateway: Gateway | None, server: Server, client_pin: set[int] | None,
              streams: int = STREAMS) -> dict[str, Any]:
    """``2 x concurrency`` streams (at least ``streams``), ``concurrency`` at a time; the gateway's CPU
    time over it."""
    server.sent()  # reset its tallies
    before = gateway.cpu_seconds() if gateway is not None else 0.0
    report = measure(url, max(2 * concurrency, streams), concurrency, client_pin)
    cpu = (gateway.cpu_seconds() - before) if gateway is not None else None
    sent = server.sent()
    chunks = report["total_output_tokens"]
    return {
        "concurrency": concurrency,
        "completed": report["completed"],
        "failed": report["failed"],
        "failure_reasons": report.get("failure_reasons") or {},
        "median_itl_ms": report["median_itl_ms"],
        "p99_itl_ms": report["p99_itl_ms"],
        "server_p99_late_ms": (sent.get("lateness") or {}).get("p99_ms"),
        "cpu_s": cpu,
        "chunks": chunks,
        "cpu_us_per_chunk": cpu / chunks * 1e6 if cpu is not None and chunks else None,
    }


def _round_ratios(rounds: dict[str, list[dict[str, Any]]]) -> None:
    """Each run's CPU per chunk over nginx's and native ``--no-tap``'s in the same round (the
    contenders take turns, so a round shares the machine's state; the table gives the medians of
    these ratios, not a ratio of medians)."""
    for contender, runs in rounds.items():
        for i, run in enumerate(runs):
            for key, name in (("vs_nginx", "nginx"), ("vs_no_tap", "native --no-tap")):
                other = rounds.get(name, [])
                base = other[i]["cpu_us_per_chunk"] if i < len(other) else None
                cpu = run["cpu_us_per_chunk"]
                run[key] = cpu / base if cpu and base else None


def run_all(concurrencies: tuple[int, ...], repeat: int = 1, contenders: tuple[str, ...] = CONTENDERS,
            streams: int = STREAMS) -> list[dict[str, Any]]:
    """Every contender at every concurrency, taking turns within each round; medians of the rounds."""
    cores = _cores()
    shared_core, gateway_core = cores if cores else (None, None)
    server = Server(shared_core)
    contenders = tuple(c for c in contenders if available(c))
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
                    url = gateway.url if gateway else m.endpoint_url(server.base, PROTOCOL)
                    row = run_point(url, concurrency, gateway, server, shared_core, streams)
                    row["contender"] = contender
                    print(row, file=sys.stderr, flush=True)
                    rounds[contender].append(row)
            _round_ratios(rounds)
            direct = [r["p99_itl_ms"] for r in rounds.get("direct", []) if r["p99_itl_ms"] is not None]
            direct_p99 = statistics.median(direct) if direct else None
            for contender, runs in rounds.items():
                row = dict(runs[0])
                for key in ("median_itl_ms", "p99_itl_ms", "server_p99_late_ms", "cpu_s", "cpu_us_per_chunk",
                            "vs_nginx", "vs_no_tap"):
                    values = [r[key] for r in runs if r[key] is not None]
                    row[key] = statistics.median(values) if values else None
                row["failed"] = sum(r["failed"] for r in runs)
                row["failure_reasons"] = {k: sum(r["failure_reasons"].get(k, 0) for r in runs)
                                          for k in {k for r in runs for k in r["failure_reasons"]}}
                row["added_p99_itl_ms"] = (row["p99_itl_ms"] - direct_p99
                                           if row["p99_itl_ms"] is not None and direct_p99 is not None else None)
                row["repeats"] = len(runs)
                rows.append(row)
    finally:
        for gateway in gateways.values():
            gateway.stop()
        server.stop()
    return rows


# --- Idle streams held, and saturation ---------------------------------------------------------------


def _established(pid: int) -> int:
    import psutil

    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp") if c.status == psutil.CONN_ESTABLISHED)


def idle_rss(contender: str, streams: int = IDLE_STREAMS) -> dict[str, Any]:
    """The gateway's resident memory per open stream, ``streams`` of them held open while upstream
    has not answered (a synthetic server whose first token is ten minutes away)."""
    cores = _cores()
    shared_core, gateway_core = cores if cores else (None, None)
    server = Server(shared_core, ttft_ms=600_000)
    gateway = None
    socks: list[socket.socket] = []
    try:
        gateway = Gateway(contender, server.base, gateway_core, probe=False)
        time.sleep(1.0)
        before = gateway.rss()
        body = json.dumps(_bodies()[0]).encode()
        request = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                   f"authorization: Bearer {KEY}\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
        port = int(gateway.base.rsplit(":", 1)[1])
        for _ in range(streams):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(request)
            socks.append(sock)
        deadline = time.monotonic() + 120
        held = 0
        while time.monotonic() < deadline:  # until upstream holds them all (or stops gaining)
            held = _established(server.process.pid)
            if held >= streams:
                break
            time.sleep(1.0)
        time.sleep(1.0)
        after = gateway.rss()
        return {"contender": contender, "streams": streams, "held_upstream": held,
                "rss_before_mib": before / 2**20, "rss_after_mib": after / 2**20,
                "kib_per_stream": (after - before) / streams / 1024}
    finally:
        for sock in socks:
            sock.close()
        if gateway is not None:
            gateway.stop()
        server.stop()


def saturation(contender: str, threads: int = 1, streams: int = 512, tokens: int = 400, rate: float = 1000.0,
               seconds_of_tokens: float | None = None) -> dict[str, Any]:
    """Chunks per second forwarded with everything unpinned and every stream as fast as the server
    goes (``streams`` at once, ``tokens`` each at ``rate`` per second): the chunks per second
    delivered, the gateway's CPU share while doing it (1.0 per thread: saturated) and the chunks
    per gateway CPU-second."""
    server = Server(None, tokens=tokens, rate=rate, ttft_ms=1)
    gateway = Gateway(contender, server.base, None, threads=threads) if contender != "direct" else None
    try:
        url = gateway.url if gateway else m.endpoint_url(server.base, PROTOCOL)
        before = gateway.cpu_seconds() if gateway else 0.0
        report = measure(url, streams, streams, None)
        cpu = gateway.cpu_seconds() - before if gateway else None
        chunks = report["total_output_tokens"]
        return {"contender": contender, "threads": threads, "streams": streams, "completed": report["completed"],
                "chunks_per_s": chunks / report["duration"],
                "cpu_share": cpu / report["duration"] if cpu is not None else None,
                "chunks_per_cpu_s": chunks / cpu if cpu else None}
    finally:
        if gateway is not None:
            gateway.stop()
        server.stop()


# --- Tables -----------------------------------------------------------------------------------------


def _num(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| streams | contender | completed | CPU µs/chunk | vs nginx | vs native --no-tap | median ITL ms | "
             "p99 ITL ms | added p99 ms | server's own p99 late ms |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    for r in rows:
        cpu, vs_nginx, vs_floor = r["cpu_us_per_chunk"], r.get("vs_nginx"), r.get("vs_no_tap")
        lines.append(f"| {r['concurrency']} | {r['contender']} | {r['completed']}/{r['completed'] + r['failed']} | "
                     f"{_num(cpu, '.1f')} | {_num(vs_nginx, '.2f')}x | {_num(vs_floor, '.2f')}x | "
                     f"{_num(r['median_itl_ms'], '.2f')} | {_num(r['p99_itl_ms'], '.2f')} | "
                     f"{_num(r['added_p99_itl_ms'], '+.2f')} | {_num(r['server_p99_late_ms'], '.2f')} |")
    return "\n".join(lines)


def idle_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| gateway | idle streams held | RSS before MiB | RSS after MiB | KiB per stream |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['held_upstream']}/{r['streams']} | {r['rss_before_mib']:.1f} | "
                     f"{r['rss_after_mib']:.1f} | {r['kib_per_stream']:.1f} |")
    return "\n".join(lines)


def saturation_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| gateway | threads | streams | chunks/s delivered | gateway CPU share | chunks per gateway CPU-s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['threads']} | {r['completed']}/{r['streams']} | {r['chunks_per_s']:,.0f} | "
                     f"{_num(r['cpu_share'], '.2f')} | {_num(r['chunks_per_cpu_s'], ',.0f')} |")
    return "\n".join(lines)


# --- pytest-benchmark --------------------------------------------------------------------------------


def _needs() -> None:
    for name in ("aiohttp", "uvicorn", "prometheus_client", "psutil", "httptools"):
        pytest.importorskip(name)


@pytest.mark.parametrize("concurrency", (64, 256))
def test_gateway_cost(benchmark, concurrency):
    _needs()
    benchmark.group = f"gateway: {concurrency} streams"
    rows = benchmark.pedantic(run_all, args=((concurrency,),), rounds=1, iterations=1)
    benchmark.extra_info["rows"] = rows
    print("\n" + table(rows))
    assert all(r["completed"] == max(2 * concurrency, STREAMS) for r in rows), rows


def test_gateway_idle_streams(benchmark):
    _needs()
    benchmark.group = "gateway: idle streams"
    contenders = [c for c in ("nginx", "native", "asyncio") if available(c)]
    rows = benchmark.pedantic(lambda: [idle_rss(c, 1024) for c in contenders], rounds=1, iterations=1)
    benchmark.extra_info["rows"] = rows
    print("\n" + idle_table(rows))
    assert all(r["held_upstream"] >= 1024 for r in rows), rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="*", default=list(CONCURRENCIES))
    parser.add_argument("--repeat", type=int, default=1, help="rounds per point, the contenders taking turns")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--streams", type=int, default=STREAMS,
                        help=f"at least this many streams per point (default {STREAMS})")
    parser.add_argument("--idle", type=int, default=IDLE_STREAMS, help="idle streams held (0: not measured)")
    parser.add_argument("--saturation", action="store_true", help="also the chunks/s at saturation")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    result["engines"] = {"server": " ".join(server_engine()) or "default", "client": " ".join(client_engine()) or "default"}
    print(f"synthetic server: {result['engines']['server']}; rapidsse measure: {result['engines']['client']}",
          file=sys.stderr, flush=True)
    if args.concurrency:
        result["cost"] = run_all(tuple(args.concurrency), args.repeat, tuple(args.contenders), args.streams)
        print(table(result["cost"]), flush=True)
    if args.idle:
        result["idle"] = [idle_rss(c, args.idle) for c in args.contenders
                          if c != "direct" and not c.endswith("--no-tap") and available(c)]
        print("\n" + idle_table(result["idle"]), flush=True)
    if args.saturation:
        result["saturation"] = [saturation(c, threads) for c, threads in
                                (("direct", 1), ("nginx", 1), ("native", 1), ("native", 2), ("asyncio", 1))
                                if available(c)]
        print("\n" + saturation_table(result["saturation"]), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
