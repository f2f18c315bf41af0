"""Wheels: the native abi3 wheel (``make wheel``: manylinux_2_17, confirmed by auditwheel), the
pure-Python wheel (``scripts/build_pure_wheel.py``) and the sdist (``maturin sdist``, rebuilt by
pip into a wheel in an empty folder where Rust is available) each install into a fresh venv,
import, report the right ``BACKEND`` and decode a recorded stream exactly as this checkout does;
each carries the LICENSE and the version of Cargo.toml. The pure wheel passes a smoke subset of
the suite, the sdist's wheel the core tests (scripts/test_pythons.sh on this interpreter).

Slow (minutes on a fresh machine: Rust builds and PyPI downloads), so it runs in one of the
suite's two runs only: the one whose ``RAPIDSSE_BACKEND`` is not ``python`` (``make test`` runs
the suite once per backend); the backend is a property of the installed wheel, not of the run.
The native wheel is the release build as shipped (fat LTO; minutes from cold on 2 cores), made
by ``make wheel``, which ``make test-pythons`` then finds up to date and tests on every CPython:
one release build per CI run. The sdist's wheel proves the sdist complete, not fast: it builds
with the dev profile (``MATURIN_PEP517_ARGS``) in the checkout's ``target/`` (the dependencies
``make dev`` compiled are reused; the crate itself compiles from the sdist's sources).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from .conftest import CORPUS, ROOT, corpus_files

if os.environ.get("RAPIDSSE_BACKEND") == "python":
    pytest.skip("the wheel tests run once per suite run, in its Rust (or unset-backend) run",
                allow_module_level=True)

RUST = shutil.which("cargo") is not None
CARGO_VERSION = (
    re.search(r'^\[package\]\s*$.*?^version\s*=\s*"([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M | re.S)[1]
)


def run(*args, cwd=None, env=None, timeout=900) -> str:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def build_env(**extra) -> dict:
    env = dict(os.environ, **extra)
    env.pop("RAPIDSSE_BACKEND", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def maturin() -> list[str]:
    exe = shutil.which("maturin") or str(Path(sys.executable).with_name("maturin"))
    if not Path(exe).exists():
        pytest.skip("maturin is not installed (pip install maturin)")
    return [exe]


# uv (the Makefile puts it in the venv) makes and fills the fresh venvs from its cache in seconds;
# without it, venv and pip as before.
UV = next((str(p) for p in (Path(sys.executable).with_name("uv"), shutil.which("uv")) if p and Path(p).exists()), None)


def fresh_venv(path: Path) -> Path:
    python = path / "bin" / "python"
    if UV:
        run(UV, "venv", "-q", "--python", sys.executable, path)
        return python
    run(sys.executable, "-m", "venv", path)
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-U", "pip")
    return python


def pip_install(python: Path, *args, env=None) -> None:
    if UV:
        run(UV, "pip", "install", "-q", "--python", python, *args, env=env, timeout=1800)
        return
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


def check_licence_and_version(wheel: Path) -> None:
    """The wheel carries LICENSE under .dist-info/licenses (PEP 639) and Cargo.toml's version."""
    meta = metadata_of(wheel)
    assert meta["Version"] == [CARGO_VERSION]
    assert meta["License-Expression"] == ["MIT"] and meta["License-File"] == ["LICENSE"]
    assert {url.split(",")[0] for url in meta["Project-URL"]} >= {"Homepage", "Repository", "Changelog"}
    assert "Programming Language :: Python :: 3.10" in meta["Classifier"]
    with zipfile.ZipFile(wheel) as zf:
        licence = zf.read(f"rapidsse-{CARGO_VERSION}.dist-info/licenses/LICENSE")
    assert licence == (ROOT / "LICENSE").read_bytes()


def metadata_of(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode()
    return parse_headers(text)


def parse_headers(text: str) -> dict:
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
    check_licence_and_version(pure_wheel)
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


def make_wheel() -> Path:
    """``make wheel`` (a no-op when the last build is newer than every tracked source)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    run("make", "-s", "-C", ROOT, "wheel", f"VENV={sys.prefix}", env=build_env(), timeout=3600)
    (wheel,) = (ROOT / "target" / "wheelhouse").glob("*.whl")
    return wheel


def platform_tag(auditwheel_show: str) -> str:
    match = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"', auditwheel_show)
    assert match, auditwheel_show
    return match[1]


@pytest.mark.skipif(not RUST, reason="no Rust toolchain (cargo) here")
@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="make wheel builds the Linux x86-64 wheel")
def test_make_wheel_is_manylinux_2_17_and_installs_on_the_rust_backend(tmp_path):
    wheel = make_wheel()
    prefix = f"rapidsse-{CARGO_VERSION}-cp310-abi3-"
    assert wheel.name.startswith(prefix), wheel.name
    assert set(wheel.name[len(prefix):-len(".whl")].split(".")) == {"manylinux_2_17_x86_64", "manylinux2014_x86_64"}
    auditwheel = Path(sys.executable).with_name("auditwheel")
    show = run(auditwheel, "show", wheel)
    # The lowest tag the binary's symbol versions allow: glibc 2.17, whatever this host has.
    assert platform_tag(show) == "manylinux_2_17_x86_64", show
    with zipfile.ZipFile(wheel) as zf:
        assert [n for n in zf.namelist() if n.startswith("rapidsse/_rapidsse") and n.endswith(".so")]
    check_record(wheel)
    check_licence_and_version(wheel)
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, wheel)
    check_installed(python, "rust", tmp_path)


def sdist_members(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tf:
        prefix = f"rapidsse-{CARGO_VERSION}/"
        names = tf.getnames()
    assert all(n.startswith(prefix) for n in names)
    return {n[len(prefix):] for n in names}


def tracked_sources() -> list[str]:
    """What a build needs, as git tracks it: the Rust crate, the Python package, the build files."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = run("git", "ls-files", "rust", "python", "Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md",
              "LICENSE", cwd=ROOT)
    return out.split()


@pytest.mark.skipif(not RUST, reason="no Rust toolchain (cargo) here")
def test_sdist_is_complete_and_builds_a_wheel_that_passes_the_core_tests(tmp_path):
    out = tmp_path / "sdist"
    run(*maturin(), "sdist", "-o", out, cwd=ROOT, env=build_env())
    (sdist,) = out.glob("*.tar.gz")
    members = sdist_members(sdist)
    missing = [name for name in tracked_sources() if name not in members]
    assert not missing, missing
    assert {"LICENSE", "Cargo.lock", "PKG-INFO"} <= members
    with tarfile.open(sdist) as tf:
        pkg_info = parse_headers(tf.extractfile(f"rapidsse-{CARGO_VERSION}/PKG-INFO").read().decode())
    assert pkg_info["Version"] == [CARGO_VERSION] and pkg_info["License-File"] == ["LICENSE"]

    # Only the sdist in an empty folder; pip builds it in isolation (maturin from PyPI), with
    # Cargo.lock as it is (--locked) and the quick dev profile.
    clean = tmp_path / "clean"
    clean.mkdir()
    shutil.copy(sdist, clean)
    env = build_env(CARGO_TARGET_DIR=str(ROOT / "target"), MATURIN_PEP517_ARGS="--profile dev --locked")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", clean / "wheel",
        clean / sdist.name, cwd=clean, env=env, timeout=1800)
    (wheel,) = (clean / "wheel").glob("*.whl")
    assert "-cp310-abi3-" in wheel.name, wheel.name
    check_licence_and_version(wheel)
    check_record(wheel)
    # The core tests against that wheel installed in a fresh venv (the script checks the import).
    env = build_env(WHEEL=str(wheel), PYTHONS=sys.executable, PYTHONS_VENVS=str(tmp_path / "venvs"), UV=UV or "")
    env.pop("PYTHONPATH", None)
    out = run("bash", ROOT / "scripts" / "test_pythons.sh", cwd=ROOT, env=env, timeout=1800)
    assert f"rapidsse {CARGO_VERSION} from {os.path.realpath(tmp_path / 'venvs')}" in out and " passed" in out, out[-2000:]
