"""Wheels: the native abi3 wheel (``maturin build``), the pure-Python wheel
(``scripts/build_pure_wheel.py``) and the sdist (``maturin sdist``, built by pip where Rust is
available) each install into a fresh venv, import, report the right ``BACKEND`` and decode a
recorded stream exactly as this checkout does; the pure wheel also passes a smoke subset of the
test suite.

Slow (a few minutes on a fresh machine: Rust builds and PyPI downloads for msgspec, maturin,
pytest, hypothesis), so it runs in one of the suite's two runs only: the one whose
``RAPIDSSE_BACKEND`` is not ``python`` (``make test`` runs the suite once per backend). The Rust
builds are release builds, as shipped (``maturin build --release``; pip's build of the sdist is
release too): about a minute from cold on 2 cores, seconds after that, in a target folder of
their own (``target/wheel-tests``) kept between runs.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import CORPUS, ROOT, corpus_files

if os.environ.get("RAPIDSSE_BACKEND") == "python":
    pytest.skip("the wheel tests run once per suite run, in its Rust (or unset-backend) run",
                allow_module_level=True)

TARGET_DIR = ROOT / "target" / "wheel-tests"
RUST = shutil.which("cargo") is not None


def run(*args, cwd=None, env=None, timeout=900) -> str:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def build_env() -> dict:
    env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET_DIR))
    env.pop("RAPIDSSE_BACKEND", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def maturin() -> list[str]:
    exe = shutil.which("maturin") or str(Path(sys.executable).with_name("maturin"))
    if not Path(exe).exists():
        pytest.skip("maturin is not installed (pip install maturin)")
    return [exe]


def fresh_venv(path: Path) -> Path:
    run(sys.executable, "-m", "venv", path)
    python = path / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-U", "pip")
    return python


def pip_install(python: Path, *args, env=None) -> None:
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args, env=env, timeout=1800)


# What the installed package must reproduce: this checkout's events and result on a corpus file.
SMOKE = r"""
import json, sys
import msgspec, rapidsse
path = sys.argv[1]
data = open(path, "rb").read()
chunks = [data[i:i + 700] for i in range(0, len(data), 700)]
events = list(rapidsse.iter_events(chunks, "responses", "keep"))
acc = rapidsse.ResponseAccumulator()
for c in chunks:
    acc.feed(c)
frames = list(rapidsse.iter_sse(chunks))
print(json.dumps({
    "backend": rapidsse.BACKEND,
    "file": rapidsse.__file__,
    "events": msgspec.to_builtins(events, enc_hook=repr),
    "frames": len(frames),
    "text": acc.output_text,
    "response": msgspec.to_builtins(acc.response),
}))
"""


def corpus_stream() -> Path:
    return max(corpus_files("responses"), key=lambda p: p.stat().st_size if p.stat().st_size < 60_000 else 0)


def expected_smoke(path: Path) -> dict:
    """The checkout's answer, on this run's backend (the two backends answer alike)."""
    return json.loads(run(sys.executable, "-c", SMOKE, path, cwd=ROOT))


def check_installed(python: Path, backend: str, tmp: Path) -> None:
    path = corpus_stream()
    env = dict(os.environ)
    env.pop("RAPIDSSE_BACKEND", None)
    env.pop("PYTHONPATH", None)
    got = json.loads(run(python, "-c", SMOKE, path, cwd=tmp, env=env))
    assert got["backend"] == backend
    assert str(ROOT) not in got["file"], "imported the checkout, not the installed wheel"
    want = expected_smoke(path)
    for key in ("events", "frames", "text", "response"):
        assert got[key] == want[key], key
    assert got["text"] and got["frames"] > 10


def check_record(wheel: Path) -> None:
    """RECORD lists every file with its sha256 and size (itself without)."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(zf.read(record_name).decode().splitlines()))
        assert {row[0] for row in rows} == names
        for name, digest, size in rows:
            if name == record_name:
                assert digest == "" and size == ""
                continue
            data = zf.read(name)
            algo, _, value = digest.partition("=")
            assert algo == "sha256"
            assert value == base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(), name
            assert int(size) == len(data), name


def metadata_of(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode()
    headers: dict = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        headers.setdefault(key, []).append(value)
    return headers


@pytest.fixture(scope="module")
def pure_wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pure")
    run(sys.executable, ROOT / "scripts" / "build_pure_wheel.py", "--out", out)
    (wheel,) = out.glob("*.whl")
    return wheel


def test_pure_wheel_is_py3_none_any_without_compiled_code(pure_wheel):
    assert pure_wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(pure_wheel) as zf:
        names = zf.namelist()
        wheel_meta = zf.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    assert "rapidsse/__init__.py" in names and "rapidsse/_pure/framing.py" in names
    package = ROOT / "python" / "rapidsse"
    sources = {f"rapidsse/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    assert sources <= set(names), sorted(sources - set(names))
    assert not [n for n in names if n.endswith((".so", ".pyd", ".pyc")) or "__pycache__" in n]
    assert "Tag: py3-none-any" in wheel_meta and "Root-Is-Purelib: true" in wheel_meta
    meta = metadata_of(pure_wheel)
    cargo = (ROOT / "Cargo.toml").read_text()
    assert meta["Name"] == ["rapidsse"]
    assert f'version = "{meta["Version"][0]}"' in cargo
    assert any(r.startswith("msgspec") for r in meta["Requires-Dist"])
    check_record(pure_wheel)


def test_pure_wheel_installs_and_runs_on_the_python_backend(pure_wheel, tmp_path):
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, pure_wheel)
    check_installed(python, "python", tmp_path)
    # The console script is there too.
    assert (tmp_path / "venv" / "bin" / "rapidsse").exists()
    # A smoke subset of the suite against the installed wheel (not the checkout).
    pip_install(python, "pytest>=8", "hypothesis>=6.100")
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("__init__.py", "conftest.py", "test_framing.py", "test_decoding.py"):
        shutil.copy(ROOT / "tests" / name, tests / name)
    env = dict(os.environ, RAPIDSSE_CORPUS=str(CORPUS))
    env.pop("RAPIDSSE_BACKEND", None)
    env.pop("PYTHONPATH", None)
    out = run(python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests", cwd=tmp_path, env=env)
    assert " passed" in out


@pytest.mark.skipif(not RUST, reason="no Rust toolchain (cargo) here")
def test_native_wheel_installs_and_runs_on_the_rust_backend(tmp_path):
    out = tmp_path / "wheels"
    run(*maturin(), "build", "--release", "-q", "-o", out, "-i", sys.executable, cwd=ROOT, env=build_env(),
        timeout=1800)
    (wheel,) = out.glob("*.whl")
    assert "-cp310-abi3-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as zf:
        assert [n for n in zf.namelist() if n.startswith("rapidsse/_rapidsse") and n.endswith(".so")]
    check_record(wheel)
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, wheel)
    check_installed(python, "rust", tmp_path)


@pytest.mark.skipif(not RUST, reason="no Rust toolchain (cargo) here")
def test_sdist_builds_the_native_extension(tmp_path):
    out = tmp_path / "sdist"
    run(*maturin(), "sdist", "-o", out, cwd=ROOT, env=build_env())
    (sdist,) = out.glob("*.tar.gz")
    python = fresh_venv(tmp_path / "venv")
    # pip fetches maturin from PyPI (build isolation) and builds the extension (release).
    pip_install(python, sdist, env=build_env())
    check_installed(python, "rust", tmp_path)
