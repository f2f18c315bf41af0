"""The Anthropic Messages groups, in 512-byte chunks: a synthetic 1,700-event stream shaped like
the recordings, and a held-out mixed stream (300 thinking deltas with their signatures, 2,000 text
deltas over six blocks with citations, 100 tool input deltas): typed events (both backends), the
msgspec floor, the tap and the anthropic SDK's own iteration (``messages.create(stream=True)``)
and final message (``messages.stream`` + ``get_final_message()``) over a mock transport."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.ANTHROPIC)
def test_anthropic(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.ANTHROPIC_MIXED)
def test_anthropic_mixed(time_contender, group, contender):
    time_contender(group, contender)
