#!/usr/bin/env bash
# The shipped wheel on every CPython the project claims: for every CPython >= 3.10 found on the
# machine, installs the wheel (with the test extra) into a venv of that interpreter and runs the
# Rust-backend tests that exercise the compiled core there, from the installed wheel, not from the
# source tree. The native Struct builder relies on each version's slot layout, so each version
# must run the tests that build Structs.
#
#   make test-pythons                       # builds the release wheel (make wheel), then this
#   bash scripts/test_pythons.sh            # the version subset (PYTHONS_TESTS below) on each
#   PYTHONS_TESTS=tests bash scripts/...    # the whole suite on each
#
# WHEEL: the wheel file to test, or a folder of wheels from which pip picks the one that fits each
# interpreter (default target/wheelhouse, what `make wheel` writes). PYTHONS: the interpreters, space
# separated (default: python3.1X on PATH and under pyenv's versions/, one per minor version, the
# newest patch release; then it fails when fewer than two are found, so a machine that lost its
# extra interpreters cannot pass this silently). PYTHONS_VENVS: where the venvs go
# (target/pythons; kept between runs, the wheel is force-reinstalled). The release workflow runs
# this on every platform with WHEEL=dist and one PYTHONS each.
#
# UV: a uv executable (make test-pythons passes the project venv's): the venvs are made and filled
# by uv, from its cache in seconds where pip takes minutes for the test extra; without it, venv and
# pip. PYTHONS_JOBS: how many interpreters install and test at once (default: the CPU count; each
# run of the subset is one single-threaded pytest); each one's output is shown whole, in order.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# The suite's files that exercise the compiled core on the interpreter's own object layout:
# framing, typed decoding (the Struct builder), schemas, accumulation, the integrations, the
# CLI and the native async iterator (whose slots each version calls differently). (The rest, wheel builds, memory, threads, serving, are the same on every version.)
PYTHONS_TESTS=${PYTHONS_TESTS:-"tests/test_framing.py tests/test_decoding.py tests/test_native.py tests/test_schemas.py tests/test_accumulate.py tests/test_integrations.py tests/test_cli.py tests/test_async_drain.py"}
WHEEL=${WHEEL:-"$ROOT/target/wheelhouse"}
VENVS=${PYTHONS_VENVS:-"$ROOT/target/pythons"}
mkdir -p "$VENVS"

if [ -n "${PYTHONS:-}" ]; then
  read -r -a PYTHONS <<<"$PYTHONS"
else
  mapfile -t PYTHONS < <(python3 - <<'PY'
import glob, os, shutil, subprocess
candidates = [shutil.which(f"python3.{minor}") for minor in range(10, 20)]
pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.*", "bin", "python3")))
found = {}
for exe in filter(None, candidates):
    try:
        out = subprocess.run([exe, "-c", "import sys, sysconfig; print(sys.version_info[0], sys.version_info[1], sys.version_info[2], int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))), sys.implementation.name)"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        continue
    if out.returncode != 0:
        continue  # e.g. a pyenv shim for a version that is not installed
    major, minor, micro, free, impl = out.stdout.split()
    if impl != "cpython" or int(free) or (int(major), int(minor)) < (3, 10):
        continue
    key = (int(major), int(minor))
    if key not in found or int(micro) > found[key][0]:
        found[key] = (int(micro), os.path.realpath(exe))
for key in sorted(found):
    print(found[key][1])
PY
  )
  if [ "${#PYTHONS[@]}" -lt 2 ]; then
    echo "test_pythons: found ${#PYTHONS[@]} CPython >= 3.10 interpreter(s): ${PYTHONS[*]:-none}; need at least two" >&2
    exit 1
  fi
fi
echo "test_pythons: ${PYTHONS[*]}"

if [ -d "$WHEEL" ]; then
  ls "$WHEEL"/rapidsse-*.whl >/dev/null 2>&1 || { echo "test_pythons: no rapidsse wheel in $WHEEL (make wheel builds one)" >&2; exit 1; }
  # pip (or uv) chooses, among the folder's wheels, the one this interpreter takes (and only from there).
  wheel=(--no-index --find-links "$WHEEL" rapidsse)
  with_test=(--find-links "$WHEEL" "rapidsse[test]")
elif [ -f "$WHEEL" ]; then
  wheel=("$WHEEL")
  with_test=("${WHEEL}[test]")
else
  echo "test_pythons: no wheel at $WHEEL (make wheel builds one)" >&2
  exit 1
fi

UV=${UV:-}
JOBS=${PYTHONS_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/test_pythons.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

# One interpreter: its venv, the wheel (force-reinstalled) and the test extra, the import check,
# then the subset. Its output goes to its own log, its exit status to the log's .rc.
one() {
  local exe=$1 version venv python
  version=$("$exe" -c 'import sys, sysconfig; print("%d.%d%s" % (*sys.version_info[:2], "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))')
  venv="$VENVS/venv-$version"
  if [ -n "$UV" ]; then
    [ -d "$venv" ] || "$UV" venv -q --python "$exe" "$venv"
  else
    [ -d "$venv" ] || "$exe" -m venv "$venv"
  fi
  python="$venv/bin/python"
  [ -x "$python" ] || python="$venv/Scripts/python.exe"  # Windows
  if [ -n "$UV" ]; then
    "$UV" pip install -q --python "$python" --reinstall --no-deps "${wheel[@]}"
    "$UV" pip install -q --python "$python" "${with_test[@]}"
  else
    "$python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "${wheel[@]}"
    "$python" -m pip install -q --disable-pip-version-check "${with_test[@]}"
  fi
  echo "== CPython $version ($exe): $PYTHONS_TESTS"
  # The source package lives in python/, which is not on sys.path here: `import rapidsse` must be
  # the installed wheel, on the Rust backend (checked first).
  if ! (cd "$ROOT" && RAPIDSSE_BACKEND=rust PYTHONPATH= "$python" - <<'PY'
import os, sys, sysconfig
import rapidsse
where = os.path.realpath(rapidsse.__file__)
print(f"   rapidsse {rapidsse.__version__} from {where}, backend {rapidsse.BACKEND}"
      + (f", GIL enabled after import: {sys._is_gil_enabled()}" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))
if not where.startswith(os.path.realpath(sys.prefix)) or rapidsse.BACKEND != "rust":
    sys.exit("rapidsse did not come from the installed wheel on the Rust backend")
PY
  ); then
    echo "== CPython $version: the import check FAILED" >&2
    return 1
  fi
  if ! (cd "$ROOT" && RAPIDSSE_BACKEND=rust PYTHONPATH= "$python" -m pytest -q -p no:cacheprovider $PYTHONS_TESTS); then
    echo "== CPython $version: FAILED" >&2
    return 1
  fi
}

# Up to JOBS interpreters at a time (`wait -n`: bash >= 4.3, as mapfile above needs bash 4).
for n in "${!PYTHONS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  ( set +e; (set -e; one "${PYTHONS[$n]}") >"$LOGS/$n.log" 2>&1; echo $? >"$LOGS/$n.rc" ) &
done
wait

status=0
for n in "${!PYTHONS[@]}"; do
  cat "$LOGS/$n.log"
  [ "$(cat "$LOGS/$n.rc" 2>/dev/null)" = 0 ] || { echo "== ${PYTHONS[$n]}: exit status $(cat "$LOGS/$n.rc" 2>/dev/null || echo missing)" >&2; status=1; }
done
exit $status
