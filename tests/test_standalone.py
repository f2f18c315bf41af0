"""The repository stands alone: no tracked file outside the docs reads from beside the checkout
(the recorded corpus lives in ``tests/corpus``), and the corpus there is complete."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from .conftest import ROOT

# A path that leaves the repository for the folder beside it (the parent's "shared" folder, where
# the corpus came from), written in pieces so that this file does not name it itself.
SHARED = b"sha" + b"red"
OUTSIDE = re.compile(rb"\.\./" + SHARED + rb"|[\"']" + SHARED + rb"[\"']\s*/\s*[\"']corpus[\"']|parent\s*/\s*[\"']" + SHARED + rb"[\"']")


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an installed wheel or an sdist)")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name]


def test_no_tracked_file_outside_the_docs_reads_beside_the_checkout():
    offenders = []
    for name in tracked_files():
        if name.endswith(".md") or name.startswith(("docs/", "tests/corpus/")):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}: {line.decode(errors='replace').strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_guard_sees_the_paths_it_forbids():
    for line in (b'CORPUS = ROOT.parent / "' + SHARED + b'" / "corpus"', b"cat ../" + SHARED + b"/corpus/x.sse",
                 b"Path(__file__).parents[2].parent / '" + SHARED + b"'"):
        assert OUTSIDE.search(line), line
    assert not OUTSIDE.search(b'CORPUS = ROOT / "tests" / "corpus"')


@pytest.mark.parametrize("kind, count", [("responses", 22), ("chat", 37), ("realtime", 17), ("anthropic", 14), ("gemini", 9)])
def test_the_recorded_corpus_is_tracked_in_the_repository(kind, count):
    tracked = set(tracked_files())
    folder = ROOT / "tests" / "corpus" / kind
    recordings = sorted(p for p in folder.iterdir() if p.suffix in (".sse", ".jsonl"))
    assert len(recordings) == count
    assert {str(p.relative_to(ROOT)) for p in recordings} <= tracked
    for name in ("README.md", "LICENSE-pydantic-ai.txt", "LICENSE-openai-python.txt", "LICENSE-anthropic-sdk-python.txt"):
        assert f"tests/corpus/{name}" in tracked
