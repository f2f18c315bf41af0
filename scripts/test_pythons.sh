#!/usr/bin/env bash
# The shipped wheel on every CPython the project claims: builds the abi3 release wheel once, then
# for every CPython >= 3.10 found on the machine installs it (with the test extra) into a venv of
# that interpreter and runs the Rust-backend suite there, from the installed wheel, not from the
# source tree. The native Struct builder relies on each version's slot layout, so each version
# must run the tests that build Structs.
#
#   bash scripts/test_pythons.sh            # the version subset (PYTHONS_TESTS below) on each
#   PYTHONS_TESTS=tests bash scripts/...    # the whole suite on each
#
# Interpreters: python3.1X on PATH and under pyenv's versions/ (one per minor version, the newest
# patch release). Fails when fewer than two versions are found, so a machine that lost its extra
# interpreters cannot pass this silently.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# The suite's files that exercise the compiled core on the interpreter's own object layout:
# framing, typed decoding (the Struct builder), schemas, accumulation, the integrations and the
# CLI. (The rest, wheel builds, memory, threads, serving, are the same on every version.)
PYTHONS_TESTS=${PYTHONS_TESTS:-"tests/test_framing.py tests/test_decoding.py tests/test_native.py tests/test_schemas.py tests/test_accumulate.py tests/test_integrations.py tests/test_cli.py"}
OUT="$ROOT/target/pythons"
mkdir -p "$OUT"

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
echo "test_pythons: ${PYTHONS[*]}"

# One abi3 wheel for all of them, the release build as shipped (the wheel tests share its target).
rm -rf "$OUT/wheel" && mkdir -p "$OUT/wheel"
MATURIN=${MATURIN:-$(command -v maturin || echo "$ROOT/.venv/bin/maturin")}
CARGO_TARGET_DIR="$ROOT/target/wheel-tests" "$MATURIN" build -q --release -o "$OUT/wheel" -i python3
WHEEL=$(ls "$OUT"/wheel/rapidsse-*.whl)

status=0
for exe in "${PYTHONS[@]}"; do
  version=$("$exe" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv="$OUT/venv-$version"
  [ -x "$venv/bin/python" ] || "$exe" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${WHEEL}[test]"
  echo "== CPython $version ($exe): $PYTHONS_TESTS"
  # The source package lives in python/, which is not on sys.path here: `import rapidsse` is the
  # installed wheel (checked first).
  where=$(cd "$ROOT" && RAPIDSSE_BACKEND=rust PYTHONPATH= "$venv/bin/python" -c 'import rapidsse; print(rapidsse.__file__, rapidsse.BACKEND)')
  case "$where" in
    "$venv"/*" rust") ;;
    *) echo "== CPython $version: rapidsse did not come from the wheel on the Rust backend: $where" >&2; status=1; continue ;;
  esac
  if ! (cd "$ROOT" && RAPIDSSE_BACKEND=rust PYTHONPATH= "$venv/bin/python" -m pytest -q -p no:cacheprovider $PYTHONS_TESTS); then
    echo "== CPython $version: FAILED" >&2
    status=1
  fi
done
exit $status
