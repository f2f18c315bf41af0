"""The ``rapidsse`` command line, end to end: each command runs as ``python -m rapidsse`` in a
subprocess (with this environment, so RAPIDSSE_BACKEND applies), on the bundled recordings, the
corpus and broken input. Protocol detection is also checked in-process over the whole corpus."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

import rapidsse
from rapidsse import ChatAccumulator, RealtimeAccumulator, ResponseAccumulator, cli

from .conftest import CORPUS, corpus_files

ENV = {**os.environ, "PYTHONUTF8": "1"}  # the output has "µs" and "°C" whatever the locale

# One representative recording per protocol: text, reasoning and a tool call in each.
RESPONSES_FILE = CORPUS / "responses" / "test_deepseek_responses__test_deepseek_responses_function_tool_stream_.sse"
CHAT_FILE = CORPUS / "chat" / "test_zai__test_zai_thinking_stream.sse"
REALTIME_FILE = CORPUS / "realtime" / "test_openai_ws__test_tool_call_round.jsonl"
FILES = {"responses": RESPONSES_FILE, "chat": CHAT_FILE, "realtime": REALTIME_FILE}

BAD_SSE = (
    b'event: response.created\ndata: {"type":"response.created","response":{"id":"r"}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Hi"\n\n'
)
BAD_OFFSET = BAD_SSE.index(b"event: response.output_text.delta")


def run(*args: str | Path, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs ``python -m rapidsse ARGS``; stdout and stderr are decoded (UTF-8)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rapidsse", *map(str, args)],
        input=input, capture_output=True, env=ENV, timeout=timeout,
    )  # fmt: skip
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    )


def accumulated(protocol: str, path: Path) -> object:
    """The final object of a recording, built in-process with the public accumulators."""
    data = path.read_bytes()
    if protocol == "realtime":
        acc = RealtimeAccumulator()
        for line in data.splitlines():
            if line.strip():
                acc.feed(line)
        return acc.responses
    acc = ResponseAccumulator() if protocol == "responses" else ChatAccumulator()
    acc.feed(data)
    acc.close()
    return acc.response if protocol == "responses" else acc.completion


def accumulated_message(path: Path) -> rapidsse.anthropic.Message:
    """The final Anthropic message of a recording, built in-process."""
    acc = rapidsse.AnthropicAccumulator()
    acc.feed(path.read_bytes())
    acc.close()
    return acc.message


def typed_events(protocol: str, path: Path) -> list:
    data = path.read_bytes()
    if protocol == "realtime":
        return list(rapidsse.iter_realtime(line for line in data.splitlines() if line.strip()))
    return list(rapidsse.iter_events([data], protocol))


# --- help and version ------------------------------------------------------------------------------


def test_help_lists_the_commands_the_exit_codes_and_the_live_backend():
    proc = run("--help")
    assert proc.returncode == 0
    for command in ("demo", "parse", "bench"):
        assert command in proc.stdout
    assert "exit codes:" in proc.stdout
    assert re.search(r"^\s+2\s+bad input", proc.stdout, re.MULTILINE)
    assert f"backend: {rapidsse.BACKEND}" in proc.stdout


def test_version_names_the_version_and_backend():
    proc = run("--version")
    assert proc.returncode == 0
    assert re.fullmatch(rf"rapidsse \S+ \(backend {rapidsse.BACKEND}\)\n", proc.stdout)


def test_no_command_is_a_usage_error():
    proc = run()
    assert proc.returncode == cli.EXIT_ERROR
    assert "usage: rapidsse" in proc.stderr


# --- demo --------------------------------------------------------------------------------------------


def test_demo_shows_text_tool_call_reasoning_usage_and_speed():
    start = time.perf_counter()
    proc = run("demo", "--no-stream")
    assert proc.returncode == 0, proc.stderr
    assert time.perf_counter() - start < 10  # no pacing; the speed measure takes about half a second
    out = proc.stdout
    assert "\x1b[" not in out  # piped: no ANSI codes
    # turn 1: streamed reasoning, then the streamed function call; the final response repeats both
    assert "thinking: The user asks about temperature in Tokyo. I'll call the tool." in out
    assert '→ get_temperature({"city": "Tokyo"})' in out
    assert 'tool call: get_temperature({"city": "Tokyo"})  call_00_xjY8Z2BvSlzgEmmw0DtH0464' in out
    # turn 2 and the OpenAI stream: their text, status, model and usage
    assert out.count("text: The current temperature in Tokyo is **21.0°C**.") == 1
    assert "web search: 'weather: San Francisco, CA' completed" in out
    assert "text: San Francisco weather today (Tuesday, September 16, 2025): Mostly sunny" in out
    assert "completed  model gpt-5-2025-08-07" in out
    assert "usage: 366 input · 256 cached · 59 output · 14 reasoning · 425 total" in out
    assert "usage: 9,463 input · 8,320 cached · 582 output · 512 reasoning · 10,045 total" in out
    # the Anthropic stream: its typed events live (the text, the tool call as its input JSON streams),
    # then the accumulated message, from the text block to the usage
    anthropic_part = out[out.index("▸ Anthropic Messages"):out.index("\nspeed: ")]
    assert anthropic_part.splitlines()[1:] == [
        "  I'll check the current weather in Paris for you.",
        '  → get_weather({"location": "Paris"})',
        "  final message, as accumulated:",
        "  message msg_019Q1hrJbZG26Fb9BQhrkHEr  model claude-sonnet-4-20250514  stop: tool_use",
        "    text: I'll check the current weather in Paris for you.",
        '    tool call: get_weather({"location": "Paris"})  toolu_01NRLabsLyVHZPKxbKvkfSMn',
        "    usage: 377 input · 0 cache read · 0 cache write · 65 output",
    ]
    message = accumulated_message(_bundled()[-1])
    assert f"  message {message.id}  model {message.model}  stop: {message.stop_reason}" in anthropic_part
    speed = re.search(
        r"^speed: parsed (\d+) events \(([\d.]+) KB\) in ([\d,]+) µs: ([\d.]+) µs/event, ([\d,]+) MB/s, "
        r"backend (\w+)$", out, re.MULTILINE,
    )  # fmt: skip
    assert speed, out
    n_events = sum(len(typed_events(rec.protocol, path)) for rec, path in zip(cli.DEMO, _bundled()))
    assert int(speed[1]) == n_events
    assert float(speed[2]) == pytest.approx(sum(p.stat().st_size for p in _bundled()) / 1000, abs=0.05)
    assert speed[6] == rapidsse.BACKEND


def test_demo_paced_replay_prints_the_same_and_speed_shortens_it():
    fast = run("demo", "--no-stream")
    start = time.perf_counter()
    paced = run("demo", "--speed", "3")
    elapsed = time.perf_counter() - start
    assert paced.returncode == 0, paced.stderr
    assert 0.8 < elapsed < 10  # ~3 s at --speed 1, so ~1 s at --speed 3
    assert _without_speed(paced.stdout) == _without_speed(fast.stdout)


def test_demo_rejects_a_speed_that_is_not_positive():
    proc = run("demo", "--speed", "0")
    assert proc.returncode == cli.EXIT_ERROR
    assert "must be positive" in proc.stderr


def test_bundled_recordings_are_unedited_corpus_files_with_their_licence():
    """rapidsse/data/README.md says the files are byte-for-byte recordings from the corpus."""
    assert {rec.protocol for rec in cli.DEMO} == {"responses", "anthropic"}
    for rec, path in zip(cli.DEMO, _bundled()):
        assert path.read_bytes() in {p.read_bytes() for p in corpus_files(rec.protocol)}, path.name
    data = Path(cli.__file__).parent / "data"
    notice = (data / "README.md").read_text(encoding="utf-8")
    assert "MIT" in notice and "Permission is hereby granted" in notice
    for source, licence in (("pydantic-ai", "LICENSE-pydantic-ai.txt"),
                            ("anthropic-sdk-python", "LICENSE-anthropic-sdk-python.txt")):
        text = (data / licence).read_text(encoding="utf-8")
        assert source in notice and licence in notice
        assert text == (CORPUS.parent / "corpus" / licence).read_text(encoding="utf-8")
        assert next(line for line in text.splitlines() if line.startswith("Copyright")) in notice
    for path in _bundled():
        assert path.name in notice


def _bundled() -> list[Path]:
    return [Path(cli.__file__).parent / "data" / recording.file for recording in cli.DEMO]


def _without_speed(out: str) -> str:
    return out[: out.index("\nspeed: ")]


# --- parse ---------------------------------------------------------------------------------------------


def test_parse_summarises_a_responses_stream():
    proc = run("parse", RESPONSES_FILE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "response 1235b7ba-fdc9-4a1c-bfe4-6137c207baf3  completed  model deepseek-v4-flash",
        "  reasoning: The user asks about temperature in Tokyo. I'll call the tool.",
        '  tool call: get_temperature({"city": "Tokyo"})  call_00_xjY8Z2BvSlzgEmmw0DtH0464',
        "  usage: 366 input · 256 cached · 59 output · 14 reasoning · 425 total",
        "responses stream: 34 events, 0 not used",
    ]
    assert proc.stderr == ""


def test_parse_summarises_a_chat_stream():
    proc = run("parse", CHAT_FILE)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "chat completion 202607010739425543ff9439144b2c  model glm-4.7"
    assert lines[1] == "  choice 0  finish: stop"
    assert lines[2].startswith("    reasoning: ") and "What is 2 + 2?" in proc.stdout
    assert "    text: 4" in lines
    assert "  usage: 13 prompt · 0 cached · 564 completion · 561 reasoning · 577 total" in lines
    assert lines[-1] == f"chat stream: {len(typed_events('chat', CHAT_FILE))} events, 0 not used"


def test_parse_summarises_a_realtime_session():
    proc = run("parse", REALTIME_FILE)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "response resp_E6U11oof93olA0JOwdA0H  completed"
    assert lines[1].startswith("  tool call: get_weather({")
    assert "  text: It is foggy and 12 degrees in London." in lines
    assert "  usage: 103 input · 13 output · 116 total" in lines
    assert lines[-1].startswith("realtime stream: 45 events")


@pytest.mark.parametrize("protocol", FILES)
def test_parse_json_is_the_accumulated_object(protocol):
    path = FILES[protocol]
    proc = run("parse", "--json", path)
    assert proc.returncode == 0, proc.stderr
    result = accumulated(protocol, path)
    if isinstance(result, dict):  # realtime: response id -> response
        expected = {key: json.loads(rapidsse.encode(value)) for key, value in result.items()}
    else:
        expected = json.loads(rapidsse.encode(result))
    assert json.loads(proc.stdout) == expected


@pytest.mark.parametrize("protocol", FILES)
def test_parse_events_prints_one_json_line_per_typed_event(protocol):
    path = FILES[protocol]
    proc = run("parse", "--events", path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    events = typed_events(protocol, path)
    assert len(lines) == len(events)
    for line, event in zip(lines, events):
        assert json.loads(line) == json.loads(cli.event_json(event))
    if protocol != "chat":
        assert [json.loads(line)["type"] for line in lines] == [event.type for event in events]


def test_parse_events_writes_unknown_events_with_their_raw_payload():
    unknown = b'{"type":"response.hologram.delta","delta":"x","depth":3}'
    data = RESPONSES_FILE.read_bytes() + b"event: response.hologram.delta\ndata: " + unknown + b"\n\n"
    proc = run("parse", "--events", "-", input=data)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"type": "response.hologram.delta", "raw": json.loads(unknown)}


@pytest.mark.parametrize("protocol", FILES)
def test_parse_reads_stdin_and_detects_the_protocol(protocol):
    path = FILES[protocol]
    from_file = run("parse", "--protocol", protocol, path)
    from_stdin = run("parse", "-", input=path.read_bytes())
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout == from_file.stdout


@pytest.mark.parametrize("kind", ["responses", "chat", "realtime"])
def test_protocol_detection_on_the_whole_corpus(kind):
    for path in corpus_files(kind):
        assert rapidsse.decoding.detect_protocol(path.read_bytes()[: cli.READ_SIZE]) == kind, path.name


def test_parse_reports_accumulator_warnings_on_stderr():
    # the server's final text disagrees with the deltas: the server wins, a warning says so
    data = (
        b'data: {"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"Hi"}\n\n'
        b'data: {"type":"response.output_text.done","item_id":"m","output_index":0,"content_index":0,"text":"Hello"}\n\n'
    )
    proc = run("parse", "-", input=data)
    assert proc.returncode == 0, proc.stderr
    assert "text: Hello" in proc.stdout
    assert proc.stderr.startswith("rapidsse parse: warning: ")


# --- bad input and usage errors ------------------------------------------------------------------------


def test_parse_invalid_json_exits_2_naming_the_event_and_byte_offset(tmp_path):
    path = tmp_path / "bad.sse"
    path.write_bytes(BAD_SSE)
    proc = run("parse", path)
    assert proc.returncode == cli.EXIT_BAD_INPUT
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert f"bad input in {path}: invalid JSON" in proc.stderr
    assert f"event #1 'response.output_text.delta' at byte {BAD_OFFSET}" in proc.stderr
    assert '\'{"type":"response.output_text.delta","delta":"Hi"\'' in proc.stderr  # the excerpt


def test_parse_events_prints_the_events_before_the_bad_one(tmp_path):
    proc = run("parse", "--events", "-", input=BAD_SSE)
    assert proc.returncode == cli.EXIT_BAD_INPUT
    assert [json.loads(line)["type"] for line in proc.stdout.splitlines()] == ["response.created"]
    assert f"at byte {BAD_OFFSET}" in proc.stderr


def test_parse_on_error_skip_and_keep():
    skipped = run("parse", "--on-error", "skip", "--events", "-", input=BAD_SSE)
    assert skipped.returncode == 0
    assert len(skipped.stdout.splitlines()) == 1
    kept = run("parse", "--on-error", "keep", "--events", "-", input=BAD_SSE)
    assert kept.returncode == 0
    invalid = json.loads(kept.stdout.splitlines()[1])
    assert invalid["index"] == 1 and invalid["offset"] == BAD_OFFSET
    assert invalid["error"].startswith("invalid JSON")
    assert invalid["raw"] == '{"type":"response.output_text.delta","delta":"Hi"'
    summary = run("parse", "--on-error", "keep", "-", input=BAD_SSE)
    assert summary.returncode == 0
    assert summary.stdout.splitlines()[-1] == "responses stream: 1 event, 0 not used, 1 invalid"
    assert f"at byte {BAD_OFFSET}" in summary.stderr


def test_parse_bad_realtime_line_exits_2_with_its_index_and_offset():
    good = REALTIME_FILE.read_bytes().splitlines(keepends=True)[:3]
    data = b"".join(good) + b'{"type": "response.done", oops}\n'
    proc = run("parse", "-", input=data)
    assert proc.returncode == cli.EXIT_BAD_INPUT
    assert f"event #3 'message' at byte {len(b''.join(good))}" in proc.stderr


@pytest.mark.parametrize("protocol", FILES)
def test_parse_event_over_the_size_cap_exits_2(protocol):
    proc = run("parse", "--max-event-size", "100", FILES[protocol])
    assert proc.returncode == cli.EXIT_BAD_INPUT
    assert "bad input" in proc.stderr and "100" in proc.stderr


def test_parse_missing_file_exits_1(tmp_path):
    proc = run("parse", tmp_path / "nope.sse")
    assert proc.returncode == cli.EXIT_ERROR
    assert proc.stderr == f"rapidsse parse: cannot read {tmp_path / 'nope.sse'}: No such file or directory\n"


def test_parse_unknown_protocol_is_a_usage_error():
    proc = run("parse", "--protocol", "carrier-pigeon", RESPONSES_FILE)
    assert proc.returncode == cli.EXIT_ERROR
    assert "usage: rapidsse parse" in proc.stderr and "invalid choice: 'carrier-pigeon'" in proc.stderr


def test_parse_json_and_events_are_exclusive():
    proc = run("parse", "--json", "--events", RESPONSES_FILE)
    assert proc.returncode == cli.EXIT_ERROR
    assert "not allowed with argument" in proc.stderr


@pytest.mark.parametrize("data", [b"", b": just a comment\n\n", b"data: [1, 2]\n\n"])
def test_parse_undetectable_input_asks_for_the_protocol(data):
    proc = run("parse", "-", input=data)
    assert proc.returncode == cli.EXIT_ERROR
    assert "pass --protocol" in proc.stderr


def test_parse_empty_stream_with_a_protocol_has_no_response():
    proc = run("parse", "--protocol", "chat", "-", input=b"")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["no completion in the stream", "chat stream: 0 events, 0 not used"]


def test_parse_into_a_closed_pipe_ends_quietly(tmp_path):
    big = tmp_path / "big.sse"
    big.write_bytes(RESPONSES_FILE.read_bytes() * 200)  # far more output than a pipe buffers
    with big.open("rb") as stdin:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rapidsse", "parse", "--events", "-"],
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # like `| head -1`
        stderr = proc.stderr.read()
        proc.wait(timeout=60)
    assert b"Traceback" not in stderr
    assert proc.returncode == cli.EXIT_ERROR


# --- bench ----------------------------------------------------------------------------------------------


def test_bench_quick_prints_the_table_and_writes_the_rows(tmp_path):
    out = tmp_path / "rows.json"
    # (no timed assertion: the 180 s timeout only guards against a hang)
    proc = run("bench", "--quick", "--json", out, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "| group | contender |" in proc.stdout
    rows = json.loads(out.read_text(encoding="utf-8"))
    contenders = {row["contender"] for row in rows}
    assert {"rapidsse rust", "rapidsse python"} <= contenders
    timed = [row for row in rows if row["contender"] == "rapidsse python" and not row["skipped"]]
    assert timed and all(row["us_per_event"] > 0 for row in timed)


def test_bench_plot_without_matplotlib_exits_1_before_running(tmp_path):
    shadow = tmp_path / "matplotlib"  # a matplotlib that cannot be imported
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "rapidsse", "bench", "--quick", "--plot", str(tmp_path / "b.png")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == cli.EXIT_ERROR
    assert "pip install 'rapidsse[plot]'" in proc.stderr
    assert proc.stdout == ""  # the benchmarks did not run
    assert not (tmp_path / "b.png").exists()


def test_plot_rows_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [
        {"group": "g", "contender": "rapidsse rust", "us_per_event": 0.5, "skipped": None},
        {"group": "g", "contender": "other", "us_per_event": 5.0, "skipped": None},
        {"group": "h", "contender": "absent", "us_per_event": None, "skipped": "not installed"},
    ]
    cli.plot_rows(rows, str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").read_bytes().startswith(b"\x89PNG")
