"""The final Response of a 3000-event Responses stream in 512-byte chunks: the Rust tap
(``ResponseAccumulator.feed``), typed iteration with and without ``add()``, ``stream_responses``,
the pure-Python tap and the openai SDK's ``responses.stream`` + ``get_final_response()``."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.ACCUMULATE)
def test_final_response(time_contender, group, contender):
    time_contender(group, contender)
