"""SSE framing of a 3000-event Responses stream in 512-byte chunks: rapidsse (both backends)
against httpx-sse, the openai SDK's SSEDecoder and sseclient-py."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.FRAMING)
def test_framing(time_contender, group, contender):
    time_contender(group, contender)
