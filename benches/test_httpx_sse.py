"""httpx-sse's loop (``EventSource(response).iter_sse()`` over an httpx response) with
``rapidsse.integrations.httpx_sse`` (both backends) against httpx-sse itself, on a 3000-event
Responses stream in 512-byte chunks."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.HTTPX_SSE)
def test_httpx_sse_drop_in(time_contender, group, contender):
    time_contender(group, contender)
