"""``async for`` over an async generator of chunks against ``for`` over a list of the same
chunks: ``aiter_events`` / ``iter_events`` on both backends, ``stream_*`` and ``aiter_sse`` /
``iter_sse`` (Responses and Chat streams, 512-byte chunks). Compare within a group."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.ASYNC_RESPONSES)
def test_async_responses(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.ASYNC_CHAT)
def test_async_chat(time_contender, group, contender):
    time_contender(group, contender)
