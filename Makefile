# One target per habit. `make test` is what CI runs (.ci/run) and what the README's Quickstart says.
VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))

.PHONY: test test-pythons dev cargo-test pytest bench clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip maturin

# Debug-profile build of the extension (opt-level 1, see Cargo.toml) plus the test extras.
dev: $(VENV)/bin/python
	$(VENV)/bin/maturin develop -q -E test

cargo-test:
	cargo test -q

# The whole suite, once per backend.
pytest: dev
	RAPIDSSE_BACKEND=rust $(PY) -m pytest -q
	RAPIDSSE_BACKEND=python $(PY) -m pytest -q

test: dev cargo-test pytest

# The release wheel in a venv of every CPython >= 3.10 on the machine, running the Rust-backend
# tests that exercise the compiled core there (scripts/test_pythons.sh; PYTHONS_TESTS=tests for all).
test-pythons: $(VENV)/bin/python
	MATURIN=$(VENV)/bin/maturin bash scripts/test_pythons.sh

# Benchmarks need the optimised build.
bench: $(VENV)/bin/python
	$(VENV)/bin/maturin develop -q --release -E test
	RAPIDSSE_BACKEND=rust $(PY) -m pytest benches -q --benchmark-columns=median,ops,rounds --benchmark-sort=name

clean:
	rm -rf target $(VENV) python/rapidsse/*.so
