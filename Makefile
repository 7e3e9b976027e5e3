PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench lint wheel-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip 'setuptools>=68' wheel
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/orchestrate run examples/quickstart.yaml --report examples/results/quickstart-run.json

test: $(STAMP)
	$(BIN)/python -m pytest -q

# mypy --strict on the package (mypy.ini) and the layer contracts of DESIGN §2 (.importlinter)
lint: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run_all.py

# A normal install, as remote workers and containers do it: build the wheel, install it
# into a fresh venv, run the quickstart from outside the source tree.
WHEEL_VENV := build/wheel-venv

wheel-check: $(STAMP)
	rm -rf dist $(WHEEL_VENV) build/wheel-run
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet dist/orchestrator-*.whl
	mkdir -p build/wheel-run
	cd build/wheel-run && ../wheel-venv/bin/orchestrate run $(CURDIR)/examples/quickstart.yaml --output-dir .
	cd build/wheel-run && ../wheel-venv/bin/orchestrate worker $(CURDIR)/examples/towers.yaml --job localhost --task 0 --dask-commands

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
