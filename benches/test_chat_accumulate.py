"""The final ChatCompletion, side by side: the tap, typed iteration (counted, and with each
chunk added), msgspec's own decode of the same payloads, the pure-Python tap, the openai SDK's
accumulating stream and LiteLLM's stream_chunk_builder (when installed: the ``bench`` extra). The
corpus's chat recordings are timed together, then split at ``bench.SHORT_STREAM`` events: where a
stream is short, what it pays once weighs as much as its chunks."""

import pytest

from rapidsse import bench


@pytest.mark.bench_group(bench.CHAT_ACCUMULATE)
def test_final_chat_completion(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.CHAT_ACCUMULATE_MIXED)
def test_final_chat_completion_mixed(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.CHAT_ACCUMULATE_CORPUS)
def test_final_chat_completion_corpus(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.CHAT_ACCUMULATE_CORPUS_SHORT)
def test_final_chat_completion_corpus_short(time_contender, group, contender):
    time_contender(group, contender)


@pytest.mark.bench_group(bench.CHAT_ACCUMULATE_CORPUS_LONG)
def test_final_chat_completion_corpus_long(time_contender, group, contender):
    time_contender(group, contender)
