# One target per habit. `make test` is what CI runs (.ci/run) and what the README's Quickstart says.
VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))

.PHONY: test test-pythons wheel dev cargo-test pytest bench clean

# uv (PyPI) installs into the venvs: maturin's `--uv`, the wheel group, scripts/test_pythons.sh and
# the wheel tests' fresh venvs (it resolves and links from its cache in seconds where pip takes
# minutes for the test extra). pip stays in the venv for what must use it (pip's sdist build).
$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip maturin uv

# Debug-profile build of the extension (opt-level 1, see Cargo.toml) plus the test extras.
dev: $(VENV)/bin/python
	$(VENV)/bin/maturin develop -q --uv -E test

cargo-test:
	cargo test -q

# The whole suite, once per backend; --durations names the slowest tests of each run.
# PYTEST_AT_ONCE=1 runs the two at the same time (each is one single-threaded pytest, and the Rust
# run's installs and fat-LTO link leave a core idle; the pure run's output follows the Rust run's).
# Not the default: on a loaded 2-core machine the timing-sensitive checks of tests/test_measure*.py
# (kernel timestamps within 15 ms, Ctrl-C during a measure) failed that way once.
PYTEST_ARGS ?= -q --durations=15
PYTEST_AT_ONCE ?=
pytest: dev
ifeq ($(PYTEST_AT_ONCE),1)
	@pure_log=$$(mktemp); \
	echo "RAPIDSSE_BACKEND=python $(PY) -m pytest $(PYTEST_ARGS) -p no:cacheprovider (in the background)"; \
	RAPIDSSE_BACKEND=python $(PY) -m pytest $(PYTEST_ARGS) -p no:cacheprovider >$$pure_log 2>&1 & pure=$$!; \
	echo "RAPIDSSE_BACKEND=rust $(PY) -m pytest $(PYTEST_ARGS)"; \
	RAPIDSSE_BACKEND=rust $(PY) -m pytest $(PYTEST_ARGS); rust_rc=$$?; \
	wait $$pure; pure_rc=$$?; \
	echo "== RAPIDSSE_BACKEND=python:"; cat $$pure_log; rm -f $$pure_log; \
	echo "pytest: Rust backend exit $$rust_rc, Python backend exit $$pure_rc"; \
	test $$rust_rc = 0 && test $$pure_rc = 0
else
	RAPIDSSE_BACKEND=rust $(PY) -m pytest $(PYTEST_ARGS)
	RAPIDSSE_BACKEND=python $(PY) -m pytest $(PYTEST_ARGS)
endif

test: dev cargo-test pytest

# The release wheel as published for Linux x86-64, into target/wheelhouse: abi3 (CPython >= 3.10),
# fat LTO, manylinux_2_17 (manylinux2014), linked by zig (the ziglang package) against glibc 2.17
# whatever this machine's glibc is; `auditwheel show` reports its tag. Rebuilt only when a tracked
# source is newer than the last build, so the suite's wheel test and test-pythons share one build.
# (Not target/wheels, where maturin puts the wheels it builds by default, e.g. pip's of the sdist.)
WHEEL_DIR := target/wheelhouse
WHEEL_SOURCES := $(shell git ls-files Cargo.toml Cargo.lock pyproject.toml README.md LICENSE rust python 2>/dev/null)

wheel: $(WHEEL_DIR)/.built

$(WHEEL_DIR)/.built: $(VENV)/bin/python $(WHEEL_SOURCES) Makefile
	$(VENV)/bin/uv pip install -q --group wheel
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR) && touch $(WHEEL_DIR)/.started
	PATH=$(VIRTUAL_ENV)/bin:$$PATH CARGO_TARGET_DIR=target/release-wheel $(VENV)/bin/maturin build -q --release --zig \
		--compatibility manylinux2014 -i $(PY) -o $(WHEEL_DIR)
	$(VENV)/bin/auditwheel show $(WHEEL_DIR)/rapidsse-*.whl
	mv $(WHEEL_DIR)/.started $@  # stamped with the start: a source edited meanwhile rebuilds

# That wheel in a venv of every CPython >= 3.10 on the machine, running the Rust-backend tests
# that exercise the compiled core there (scripts/test_pythons.sh; PYTHONS_TESTS=tests for all).
test-pythons: wheel
	WHEEL=$(abspath $(WHEEL_DIR)) UV=$(abspath $(VENV)/bin/uv) bash scripts/test_pythons.sh

# Benchmarks need the optimised build.
bench: $(VENV)/bin/python
	$(VENV)/bin/maturin develop -q --release -E test
	RAPIDSSE_BACKEND=rust $(PY) -m pytest benches -q --benchmark-columns=median,ops,rounds --benchmark-sort=name

clean:
	rm -rf target $(VENV) python/rapidsse/*.so
