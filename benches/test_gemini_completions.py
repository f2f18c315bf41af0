"""Gemini and legacy Completions streams, 3000 chunks in 512-byte chunks: typed chunks (rapidsse on
both backends, the msgspec floor, google-genai's ``generate_content_stream`` / the openai SDK's
``completions.create(stream=True)`` over a mock transport) and the final accumulated object (the
tap, typed events added, and the SDKs' chunks joined by hand)."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.TYPED_GEMINI)
def test_typed_gemini(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.GEMINI_ACCUMULATE)
def test_final_gemini_response(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.TYPED_COMPLETIONS)
def test_typed_completions(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.COMPLETIONS_ACCUMULATE)
def test_final_completion(time_contender, group, contender):
    time_contender(group, contender)
