# One target per habit. `make test` is what CI runs (.ci/run) and what the README's Quickstart says.
VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))

.PHONY: test dev cargo-test pytest bench clean

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

# Benchmarks need the optimised build.
bench: $(VENV)/bin/python
	$(VENV)/bin/maturin develop -q --release -E test
	RAPIDSSE_BACKEND=rust $(PY) -m pytest benches -q --benchmark-columns=median,ops,rounds --benchmark-sort=name

clean:
	rm -rf target $(VENV) python/rapidsse/*.so
