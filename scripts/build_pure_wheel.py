#!/usr/bin/env python3
"""Builds the pure-Python wheel of rapidsse: ``rapidsse-<version>-py3-none-any.whl``.

    python scripts/build_pure_wheel.py [--out dist]

It packs the same ``python/rapidsse`` tree as the native wheel, less any compiled extension
(``_rapidsse*.so`` / ``.pyd``) and caches, so that it installs anywhere without a Rust toolchain
and runs on the pure-Python backend (``rapidsse.BACKEND == "python"``). Metadata comes from
pyproject.toml (with the ``license-files`` under ``.dist-info/licenses/``), the version from
Cargo.toml (where maturin takes it). Standard library only; the archive is reproducible (sorted
entries, fixed timestamps, or ``SOURCE_DATE_EPOCH``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "rapidsse"
EXCLUDED_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".pyc", ".pyo")
EXCLUDED_DIRS = {"__pycache__"}

try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport, if installed
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ImportError:
        tomllib = None  # type: ignore[assignment]


def _load_toml(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    if tomllib is not None:
        return tomllib.loads(text)
    raise RuntimeError("reading pyproject.toml needs Python 3.11+ (tomllib) or `pip install tomli`")


def cargo_version() -> str:
    cargo = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    package = re.search(r"^\[package\]\s*$(.*?)(?=^\[|\Z)", cargo, re.M | re.S)
    match = package and re.search(r'^version\s*=\s*"([^"]+)"', package.group(1), re.M)
    if not match:
        raise RuntimeError("no [package] version in Cargo.toml")
    # Cargo's semver pre-releases (1.0.0-alpha.1) in PEP 440 form, as maturin writes them.
    return re.sub(r"-(alpha|beta|rc)\.?(\d+)", lambda m: {"alpha": "a", "beta": "b", "rc": "rc"}[m[1]] + m[2], match[1])


def license_files(project: dict) -> list[tuple[str, Path]]:
    """PEP 639 ``license-files`` (glob patterns from the project root): (name, path) pairs."""
    found: dict[str, Path] = {}
    for pattern in project.get("license-files", []):
        matches = sorted(p for p in ROOT.glob(pattern) if p.is_file())
        if not matches:
            raise RuntimeError(f"license-files pattern {pattern!r} matches no file")
        for path in matches:
            found[path.relative_to(ROOT).as_posix()] = path
    return sorted(found.items())


def metadata(project: dict, version: str) -> str:
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {project['name']}",
        f"Version: {version}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    license_ = project.get("license")
    if isinstance(license_, str):
        lines.append(f"License-Expression: {license_}")
    elif isinstance(license_, dict) and "text" in license_:
        lines.append(f"License: {license_['text']}")
    for name, _ in license_files(project):
        lines.append(f"License-File: {name}")
    for classifier in project.get("classifiers", []):
        lines.append(f"Classifier: {classifier}")
    for label, url in project.get("urls", {}).items():
        lines.append(f"Project-URL: {label}, {url}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    for requirement in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {requirement}")
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for requirement in requirements:
            marker = f'extra == "{extra}"'
            joiner = " and " if ";" in requirement else "; "
            lines.append(f"Requires-Dist: {requirement}{joiner}{marker}")
    readme = project.get("readme")
    body = ""
    if isinstance(readme, str) and (ROOT / readme).is_file():
        kind = "text/markdown" if readme.endswith(".md") else "text/plain"
        lines.append(f"Description-Content-Type: {kind}")
        body = (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + body


def entry_points(project: dict) -> str | None:
    scripts = project.get("scripts", {})
    if not scripts:
        return None
    return "[console_scripts]\n" + "".join(f"{name} = {target}\n" for name, target in scripts.items())


def package_files() -> list[tuple[str, Path]]:
    files = []
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PACKAGE.parent)
        if not path.is_file() or EXCLUDED_DIRS & set(rel.parts) or path.name.endswith(EXCLUDED_SUFFIXES):
            continue
        files.append((rel.as_posix(), path))
    return files


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build(out_dir: Path) -> Path:
    pyproject = _load_toml(ROOT / "pyproject.toml")
    project = pyproject["project"]
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    version = cargo_version()
    dist_info = f"{name}-{version}.dist-info"
    wheel_name = f"{name}-{version}-py3-none-any.whl"

    contents: list[tuple[str, bytes]] = [(arc, path.read_bytes()) for arc, path in package_files()]
    if not any(arc == "rapidsse/__init__.py" for arc, _ in contents):
        raise RuntimeError(f"{PACKAGE} has no __init__.py")
    contents.append((f"{dist_info}/METADATA", metadata(project, version).encode("utf-8")))
    contents += [(f"{dist_info}/licenses/{name}", path.read_bytes()) for name, path in license_files(project)]
    contents.append(
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: rapidsse scripts/build_pure_wheel.py\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    eps = entry_points(project)
    if eps is not None:
        contents.append((f"{dist_info}/entry_points.txt", eps.encode("utf-8")))
    record_name = f"{dist_info}/RECORD"
    record = "".join(f"{arc},{_record_hash(data)},{len(data)}\n" for arc, data in contents)
    record += f"{record_name},,\n"
    contents.append((record_name, record.encode("utf-8")))

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, zip's earliest
    stamp = time.gmtime(max(epoch, 315532800))[:6]
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel_name
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arc, data in contents:
            info = zipfile.ZipInfo(arc, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output folder (default: dist/)")
    args = parser.parse_args(argv)
    print(build(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
