#!/usr/bin/env bash
# Fuzzes the rapidsse core with libFuzzer: bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Targets (fuzz/fuzz_targets/): framer, scan, batch, accumulate, tap. Default: 60 s each, all five.
# Seeds come from the recorded corpus (tests/corpus, or $RAPIDSSE_CORPUS) into fuzz/corpus/<target>
# (git-ignored); crashes land in fuzz/artifacts/<target>/. Replay one with
#   bash scripts/fuzz.sh replay <target> <file>
#
# With a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`) it runs `cargo +nightly fuzz run`
# (AddressSanitizer on); otherwise it builds the same targets with stable cargo as plain libFuzzer
# binaries (sanitizer-coverage instrumentation, no ASan: the core is safe Rust but for bounds-checked
# SSE2 loads and one borrowed RawValue, checked against serde by a debug assertion) and runs those.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGETS_ALL=(framer scan batch accumulate tap)
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
STABLE_FLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"

use_cargo_fuzz() {
    [[ "${RAPIDSSE_FUZZ_STABLE:-}" != 1 ]] && rustup run nightly rustc --version >/dev/null 2>&1 \
        && cargo fuzz --version >/dev/null 2>&1
}

build_stable() {
    (cd fuzz && RUSTFLAGS="$STABLE_FLAGS" cargo build --release --target "$TRIPLE" --target-dir target/stable "$@")
}

binary() { echo "$ROOT/fuzz/target/stable/$TRIPLE/release/$1"; }

if [[ "${1:-}" == replay ]]; then
    target=$2; shift 2
    if use_cargo_fuzz; then
        exec cargo +nightly fuzz run -O "$target" "$@"
    fi
    build_stable --bin "$target"
    exec "$(binary "$target")" "$@"
fi

SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -eq 0 ]] && TARGETS=("${TARGETS_ALL[@]}")

python3 - "$ROOT" <<'PY'
"""Seeds each target's corpus from the recorded streams (small windows: libFuzzer's max_len)."""
import hashlib, os, sys
from pathlib import Path

root = Path(sys.argv[1])
corpus = Path(os.environ.get("RAPIDSSE_CORPUS", root / "tests" / "corpus"))
out = root / "fuzz" / "corpus"

def put(target, data):
    folder = out / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)

def payloads(data):
    return [line[5:].strip() for line in data.splitlines() if line.startswith(b"data:")]

for kind in ("responses", "chat", "gemini", "anthropic"):
    for path in sorted((corpus / kind).glob("*.sse")) if (corpus / kind).is_dir() else []:
        data = path.read_bytes()
        for i, start in enumerate(range(0, min(len(data), 32768), 4096)):
            put("framer", bytes([(i * 37) % 256, i % 256, 7]) + data[start : start + 4096])
            put("tap", bytes([(i * 53) % 256, (i * 11) % 256, i % 3]) + data[start : start + 4096])
        ps = payloads(data)
        for p in ps[:40]:
            put("scan", p[:4096])
        head = b"response.created,response.output_text.delta,response.completed,error" if kind == "responses" else b""
        for i in range(0, min(len(ps), 120), 12):
            put("batch", head + b"\xff" + b"\xff".join(ps[i : i + 12]))
            put("accumulate", b"\n".join(p for p in ps[i : i + 24] if len(p) < 4096))
# Completions: the synthetic fixtures (the corpus has no recording of that API).
for path in sorted((root / "tests" / "fixtures" / "completions").glob("*.sse")):
    data = path.read_bytes()
    put("tap", bytes([5, 0, 1]) + data[:4096])
    put("accumulate", b"\n".join(p for p in payloads(data)[:24]))
for path in sorted((corpus / "realtime").glob("*.jsonl")) if (corpus / "realtime").is_dir() else []:
    lines = [l for l in path.read_bytes().splitlines() if l.strip() and len(l) < 4096]
    for i in range(0, min(len(lines), 120), 24):
        put("accumulate", b"\n".join(lines[i : i + 24]))
PY

status=0
for target in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    echo "== fuzzing $target for ${SECONDS_PER_TARGET}s"
    if use_cargo_fuzz; then
        cargo +nightly fuzz run -O "$target" -- -max_total_time="$SECONDS_PER_TARGET" -max_len=16384 \
            -print_final_stats=1 || status=1
    else
        build_stable --bin "$target"
        "$(binary "$target")" "fuzz/corpus/$target" -artifact_prefix="fuzz/artifacts/$target/" \
            -max_total_time="$SECONDS_PER_TARGET" -max_len=16384 -print_final_stats=1 || status=1
    fi
done
[[ $status == 0 ]] || echo "a target failed: see fuzz/artifacts/" >&2
exit $status
