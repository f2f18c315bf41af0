"""The command lines of the serving benchmark: ``rapidsse serve`` (registered by
:mod:`.serve`) and ``rapidsse measure``, which runs the one-process client of :mod:`.measure`,
or spreads it over processes or Ray actors with :mod:`.workers`, and prints or saves the report.

This module is the one that imports both: the client (:mod:`.measure`) and its workers
(:mod:`.workers`, which drive the client in each process) do not import each other's caller.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from . import measure as client, serve
from .measure import (DEFAULT_PROMPT, ENGINES, PROTOCOLS, TIMESTAMPS, RequestResult, _streaming, _target,
                      arrival_times, endpoint_url, format_report, generated_prompts, load_dataset, measure,
                      measure_native, native_available, parse_goodput, protocol_for_url, request_body, run_loop,
                      saturation_warning, summarize)

__all__ = ["register", "run_measure"]


def register(subparsers: Any) -> None:
    """Adds the ``serve`` and ``measure`` subcommands to the ``rapidsse`` command line."""
    serve.register(subparsers)
    register_measure(subparsers)


def register_measure(subparsers: Any) -> None:
    """Adds the ``measure`` subcommand to the ``rapidsse`` command line."""
    parser = subparsers.add_parser(
        "measure",
        help="benchmark a streaming endpoint, open loop: TTFT, TPOT, ITL, E2EL, throughput, goodput",
        description=(client.__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--url", required=True,
                        help="endpoint URL, or a base URL (http://host:port, .../v1) to append the protocol's route to")
    parser.add_argument("--protocol", choices=PROTOCOLS, help="default: from the URL's path, else responses")
    parser.add_argument("--model", default="default", help="model name in the bodies (and Gemini's URL)")
    parser.add_argument("--num-prompts", "--requests", "-n", dest="num_prompts", type=int, default=None,
                        help="requests to send (default: one per dataset record, or 10)")
    parser.add_argument("--request-rate", type=float, default=math.inf,
                        help="requests per second, 'inf' for all at once (default: %(default)s)")
    parser.add_argument("--burstiness", type=float, default=1.0,
                        help="gamma shape of the arrival gaps; 1 is Poisson (default: %(default)s)")
    parser.add_argument("--max-concurrency", "--concurrency", "-c", dest="max_concurrency", type=int,
                        default=None, help="requests in flight at most (default: no cap)")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--dataset", metavar="FILE.jsonl",
                      help="request bodies, one per line, or ShareGPT-style conversations")
    load.add_argument("--input-len", type=int, help="generated prompts of this many words")
    load.add_argument("--body", help='one request body as JSON, for every request ("stream": true is added)')
    parser.add_argument("--output-len", type=int, help="max tokens asked of each request")
    parser.add_argument("--warmup", type=int, default=0, help="requests sent first and not counted")
    parser.add_argument("--seed", type=int, default=0, help="seed of arrivals and prompts (default: %(default)s)")
    parser.add_argument("--percentiles", "--metric-percentiles", default="50,90,99",
                        help="comma-separated percentiles to report (default: %(default)s)")
    parser.add_argument("--goodput", nargs="+", metavar="METRIC:MS",
                        help="SLOs for goodput, e.g. ttft:200 tpot:50 e2el:5000")
    parser.add_argument("--header", "-H", action="append", default=[], metavar="NAME: VALUE",
                        help="an extra request header (repeatable), e.g. 'Authorization: Bearer ...'")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default: %(default)s)")
    parser.add_argument("--save-result", "--json", dest="save_result", metavar="FILE.json",
                        help="write the result with vLLM's key names to FILE ('-': stdout, instead of the report)")
    parser.add_argument("--timestamps", choices=TIMESTAMPS, default="auto",
                        help="when a token counts as arrived: the kernel's receive timestamp (plain http on Linux), "
                             "or when the event loop read it; auto: kernel where it can (default: %(default)s)")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="the client: native (Rust: tokio, pooled connections; the default on the Rust backend) "
                             "or asyncio (Python; the default on the pure backend)")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                        help="event loop of the asyncio engine (default: uvloop when installed)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--workers", default="1", metavar="N|auto",
                        help="client processes sharing the run's schedule and cap, samples merged exactly; "
                             "auto: one per core (with --ray: actors in total, auto: one per CPU of the cluster; "
                             "default: %(default)s)")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run the workers as Ray actors across the nodes of the cluster at ADDRESS "
                             "(none: the one Ray finds, or a local one); needs pip install 'rapidsse[ray]'")
    parser.set_defaults(func=run_measure)


def _progress(total: int, enabled: bool) -> tuple[Callable[[RequestResult], None] | None, Callable[[], None]]:
    """A rich progress bar on stderr when enabled, installed and stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        return None, lambda: None
    progress = Progress(TextColumn("measure"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[failed]} failed"), console=Console(stderr=True), transient=True)
    task = progress.add_task("requests", total=total, failed=0)
    failed = 0

    def advance(result: RequestResult) -> None:
        nonlocal failed
        failed += not result.ok
        progress.update(task, advance=1, failed=failed)

    progress.start()
    return advance, progress.stop


def _bodies(args: argparse.Namespace, protocol: str) -> list[dict[str, Any]]:
    if args.dataset:
        return load_dataset(args.dataset, protocol, model=args.model, max_tokens=args.output_len)
    count = args.num_prompts or 10
    if args.body:
        body = json.loads(args.body)
        if not isinstance(body, dict):
            raise ValueError("--body must be a JSON object")
        return [_streaming(protocol, body)]
    if args.input_len is not None:
        if args.input_len < 1:
            raise ValueError("--input-len must be at least 1")
        prompts = generated_prompts(count, args.input_len, seed=args.seed)
    else:
        prompts = [DEFAULT_PROMPT]
    return [request_body(protocol, p, model=args.model, max_tokens=args.output_len) for p in prompts]


def _engine(asked: str | None) -> str:
    """``--engine``: as asked, else native where it runs (the Rust backend)."""
    if asked == "native" and not native_available():
        raise ValueError("--engine native needs the Rust backend (this is the pure Python one): use --engine asyncio")
    return asked or ("native" if native_available() else "asyncio")


def run_measure(args: argparse.Namespace) -> int:
    """``rapidsse measure``: runs the benchmark, prints the report, returns the exit code (0: every
    request succeeded; 1: one failed, a bad option, or a missing dependency; 130: stopped by
    Ctrl-C, with the report of what was measured)."""
    try:
        engine = _engine(args.engine)
    except ValueError as exc:
        print(f"rapidsse measure: {exc}", file=sys.stderr)
        return 1
    if engine == "asyncio":
        try:
            import httptools  # noqa: F401
        except ImportError:
            print("rapidsse measure needs httptools: pip install 'rapidsse[measure]'", file=sys.stderr)
            return 1
    try:
        protocol = args.protocol or protocol_for_url(args.url)
        url = endpoint_url(args.url, protocol, args.model)
        bodies = _bodies(args, protocol)
        headers = {}
        for header in args.header:
            name, sep, value = header.partition(":")
            if not sep or not name.strip():
                raise ValueError(f"--header {header!r} is not 'Name: value'")
            headers[name.strip()] = value.strip()
        percentiles = [float(p) for p in args.percentiles.split(",") if p.strip()]
        if any(not 0 <= q <= 100 for q in percentiles):
            raise ValueError("--percentiles must be between 0 and 100")
        goodput = parse_goodput(args.goodput or [])
        count = args.num_prompts or (len(bodies) if args.dataset else 10)
        arrival_times(1, args.request_rate, args.burstiness)  # validates both
        _target(url, headers)
        workers = _workers(args.workers, args.ray is not None)
    except (ValueError, OSError) as exc:
        print(f"rapidsse measure: {exc}", file=sys.stderr)
        return 1

    advance, stop = _progress(count, not args.no_progress)
    options = dict(protocol=protocol, num_prompts=count, request_rate=args.request_rate, burstiness=args.burstiness,
                   max_concurrency=args.max_concurrency, warmup=args.warmup, seed=args.seed, headers=headers,
                   timeout=args.timeout, on_result=advance, timestamps=args.timestamps)
    try:
        if args.ray is not None:
            from .workers import measure_ray

            result = measure_ray(url, bodies, workers, address=args.ray, loop=args.loop, engine=engine, **options)
        elif workers is not None and workers > 1:
            from .workers import measure_workers

            result = measure_workers(url, bodies, workers, loop=args.loop, engine=engine, **options)
        elif engine == "native":
            result = measure_native(url, bodies, **options)
        else:
            result = run_loop(measure(url, bodies, **options), args.loop)
    except ImportError as exc:
        if exc.name == "ray":
            print("rapidsse measure: --ray needs Ray: pip install 'rapidsse[ray]'", file=sys.stderr)
        else:
            print("rapidsse measure: --loop uvloop needs uvloop: pip install uvloop", file=sys.stderr)
        return 1
    except (ValueError, OSError, TimeoutError) as exc:
        print(f"rapidsse measure: {exc}", file=sys.stderr)
        return 1
    finally:
        stop()
    report = {
        "date": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": "rapidsse",
        "endpoint_type": protocol,
        "protocol": protocol,
        "url": url,
        "model_id": args.model,
        "num_prompts": count,
        "request_rate": "inf" if math.isinf(args.request_rate) else args.request_rate,
        "burstiness": args.burstiness,
        "max_concurrency": args.max_concurrency,
        "engine": engine,
        **summarize(result, percentiles=percentiles, goodput=goodput),
    }
    if args.save_result == "-":
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report, percentiles))
        if args.save_result:
            with open(args.save_result, "w", encoding="utf-8") as out:
                json.dump(report, out, indent=2)
    warning = saturation_warning(report)
    if warning:
        print(f"rapidsse measure: {warning}", file=sys.stderr)
    if result.interrupted:
        return 130
    return 0 if report["failed"] == 0 else 1


def _workers(value: str, ray: bool) -> int | None:
    """``--workers``: a number at least 1, or ``auto`` (one per core; with Ray, None: one per CPU
    of the cluster)."""
    if value == "auto":
        if ray:
            return None
        from .workers import cpu_count

        return cpu_count()
    try:
        workers = int(value)
    except ValueError:
        workers = 0
    if workers < 1:
        raise ValueError(f"--workers must be a number at least 1, or auto, not {value!r}")
    return workers
