"""Typed events from 3000-event streams in 512-byte chunks, and from every recorded stream:
rapidsse (both backends) against the msgspec floor (decoding pre-split payloads, no framing) and
the openai SDK iterating ``create(..., stream=True)`` over a mock transport."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.TYPED_RESPONSES)
def test_typed_responses(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.TYPED_CHAT)
def test_typed_chat(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.CORPUS)
def test_typed_corpus(time_contender, group, contender):
    time_contender(group, contender)
