"""httpx-sse's ``connect_sse`` + ``iter_sse()`` (and the async twins) against rapidsse's drop-in,
``rapidsse.integrations.httpx_sse``, on the same stream served by an httpx MockTransport: the
synthetic 3000-event Responses stream in 512-byte chunks, and every recording."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.HTTPX_SSE)
def test_httpx_sse(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.HTTPX_SSE_ASYNC)
def test_httpx_sse_async(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.HTTPX_SSE_CORPUS)
def test_httpx_sse_corpus(time_contender, group, contender):
    time_contender(group, contender)
