"""The release as configured: the GitHub workflows (valid against GitHub's workflow schema, and
building, testing and publishing what the README promises), the one version, the licence and the
changelog. Cheap (a few seconds), so it runs on both backends; the wheels themselves are built
and tested in tests/test_wheels.py.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from ruamel.yaml import YAML  # comes with check-jsonschema (the test extra)

import rapidsse

from .conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CARGO_VERSION = load_script("build_pure_wheel").cargo_version()


def check_jsonschema(*paths) -> subprocess.CompletedProcess:
    # A proxy that refuses every connection: the built-in schema must not need the network.
    env = dict(os.environ, HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="")
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
        capture_output=True, text=True, env=env, timeout=120,
    )


def workflow(name: str) -> dict:
    return YAML(typ="safe").load((WORKFLOWS / name).read_text())


def steps_using(job: dict, action: str) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").split("@")[0] == action]


def test_the_workflows_validate_against_githubs_workflow_schema(tmp_path):
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} == {"ci.yml", "release.yml"}
    # Checked beside a broken workflow (no runs-on), in one run: the check must reject that one,
    # and only that one.
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  build:\n    steps:\n      - run: echo\n")
    proc = check_jsonschema(*files, broken)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 1, report
    assert set(re.findall(r"^\s+(\S+?)::\$", report, re.M)) == {str(broken)}, report
    assert "'runs-on' is a required property" in report


def test_every_action_is_pinned_to_a_release():
    for name in ("ci.yml", "release.yml"):
        for job in workflow(name)["jobs"].values():
            for step in job["steps"]:
                if "uses" in step:
                    _, _, ref = step["uses"].partition("@")
                    assert re.fullmatch(r"v\d+\.\d+\.\d+|[0-9a-f]{40}", ref), (name, step["uses"])


def test_the_release_builds_every_platform_and_tests_each_wheel_on_oldest_and_newest():
    release = workflow("release.yml")
    assert "tags" in release["on"]["push"] and "workflow_dispatch" in release["on"]
    jobs = release["jobs"]
    builds = {entry["name"]: entry for entry in jobs["wheels"]["strategy"]["matrix"]["include"]}
    abi3 = {"manylinux-x86_64", "manylinux-aarch64", "musllinux-x86_64", "musllinux-aarch64",
            "macos-x86_64", "macos-arm64", "windows-x64"}
    assert abi3 <= set(builds)
    for name in abi3:
        assert builds[name]["interpreter"] == "3.10", name  # cp310-abi3
    assert {builds[n].get("manylinux") for n in abi3 if n.startswith("manylinux")} == {"2_17"}
    assert {builds[n].get("manylinux") for n in abi3 if n.startswith("musllinux")} == {"musllinux_1_2"}
    free_threaded = {n for n in builds if n.startswith("ft-")}
    assert free_threaded and all(builds[n]["interpreter"] == "3.13t 3.14t" for n in free_threaded)
    (build,) = steps_using(jobs["wheels"], "PyO3/maturin-action")
    assert "--release" in build["with"]["args"]

    # Every wheel is tested on the oldest and the newest CPython it serves (the classifiers'
    # range), the free-threaded ones on each free-threaded version.
    tested: dict[str, set] = {}
    for entry in jobs["test"]["strategy"]["matrix"]["include"]:
        tested.setdefault(entry["wheels"], set()).add(entry["python"])
    versions = re.findall(r"Python :: (3\.\d+)\"", (ROOT / "pyproject.toml").read_text())
    oldest, newest = min(versions, key=lambda v: int(v[2:])), max(versions, key=lambda v: int(v[2:]))
    assert set(tested) == set(builds)
    for name in builds:
        assert tested[name] == ({"3.13t", "3.14t"} if name in free_threaded else {oldest, newest}), name
    assert any("scripts/test_pythons.sh" in step.get("run", "") for step in jobs["test"]["steps"])
    # The pure wheel and the sdist (rebuilt into a tested wheel) are made too.
    assert any("scripts/build_pure_wheel.py" in step.get("run", "") for step in jobs["pure"]["steps"])
    assert any(step.get("with", {}).get("command") == "sdist" for step in jobs["sdist"]["steps"])
    assert any("scripts/test_pythons.sh" in step.get("run", "") for step in jobs["sdist"]["steps"])


def test_publishing_is_trusted_publishing_after_every_test():
    jobs = workflow("release.yml")["jobs"]
    publish = jobs["publish"]
    assert set(publish["needs"]) == set(jobs) - {"publish"}
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    assert "refs/tags/" in publish["if"]
    (upload,) = steps_using(publish, "pypa/gh-action-pypi-publish")
    assert "password" not in upload.get("with", {})  # OIDC, no token
    text = (WORKFLOWS / "release.yml").read_text()
    assert "secrets." not in text


def test_pull_requests_run_the_ci_script():
    ci = workflow("ci.yml")
    assert "pull_request" in ci["on"]
    (job,) = ci["jobs"].values()
    assert [step["run"] for step in job["steps"] if "run" in step][-1] == "bash .ci/run"


def test_the_version_is_cargos():
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", CARGO_VERSION)
    assert rapidsse.__version__ == CARGO_VERSION
    # pyproject.toml leaves it to maturin, which reads Cargo.toml.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]$', pyproject, re.M)
    assert not re.search(r"^version\s*=", pyproject, re.M)


def test_the_changelog_starts_with_this_release():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## (\S+)", changelog, re.M)
    assert first and first[1] == CARGO_VERSION


def test_the_licence_is_mit_and_named_in_the_metadata():
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License\n\nCopyright (c) 2026 the rapidsse authors\n")
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in licence
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = "MIT"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
