"""The Anthropic Messages group: a synthetic 1,700-event stream shaped like the recordings, in
512-byte chunks: typed events (both backends), the msgspec floor, the tap and the anthropic
SDK's own iteration (``messages.create(stream=True)``) and final message
(``messages.stream`` + ``get_final_message()``) over a mock transport."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.ANTHROPIC)
def test_anthropic(time_contender, group, contender):
    time_contender(group, contender)
