"""Shared machinery of the benchmark suite: every benchmark is one ``rapidsse.bench`` contender
timed on its group's workload, so that ``pytest benches --benchmark-group-by=group`` prints the same
side-by-side comparisons as ``rapidsse bench``. Run it on the optimised build (``make bench``).

A test marked ``@pytest.mark.bench_group(group)`` is run once per contender of that group, with the
``group`` and ``contender`` arguments; it hands them to the ``time_contender`` fixture.
"""

from __future__ import annotations

import functools

import pytest

import rapidsse
from rapidsse import bench


def pytest_configure(config):
    config.addinivalue_line("markers", "bench_group(group): run the test once per contender of a rapidsse.bench group")


def pytest_report_header(config):
    return [f"rapidsse backend: {rapidsse.BACKEND}"]


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("bench_group")
    if marker is not None:
        group = marker.args[0]
        metafunc.parametrize(
            ("group", "contender"), [pytest.param(group, c, id=c.name) for c in bench.contenders(group)]
        )


@functools.lru_cache(maxsize=None)
def _workload(group: str) -> bench.Workload:
    """Each group's input, built once per session (the large-event one is 64 MiB)."""
    return bench.workload(group)


@pytest.fixture
def time_contender(benchmark):
    """Times one contender on its group's workload and checks that it produced every event;
    skips it when a module it needs is missing (or, for rapidsse rust, when that backend is not live)."""

    def time(group: str, contender: bench.Contender) -> None:
        for module in contender.requires:
            pytest.importorskip(module)
        if contender.skipped:
            pytest.skip(contender.skipped)
        try:
            load = _workload(group)
        except FileNotFoundError as exc:
            pytest.skip(str(exc))
        inputs = contender.prepare(load.inputs) if contender.prepare else load.inputs
        benchmark.group = group
        benchmark.extra_info.update(n_events=load.n_events, n_bytes=load.n_bytes)
        produced = benchmark(contender.run, inputs)
        assert produced == load.n_events, f"{contender.name} produced {produced} of {load.n_events} events"

    return time
