"""One 64 MiB event (a base64 image) framed from 4 KiB chunks and from one chunk, on both
backends: the chunked run must stay within a small factor of the one-chunk run (linear buffering,
no rescanning of the accumulated data)."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.LARGE_EVENT)
def test_large_event(time_contender, group, contender):
    time_contender(group, contender)
