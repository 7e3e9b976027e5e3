PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
STAMP := $(VENV)/.installed

# Every install of ours comes from a lock of exact versions with hashes
# (requirements/, made by `make lock` with uv; docs/installing.md says why uv):
# tools.lock pins uv itself, dev.lock the package's dependencies with the dev
# extra and the build backend, bench.lock the same plus the bench extra. The
# ranges in pyproject.toml are for people who install the library; test-lowest
# and test-latest check that they are true.
# Installs compile bytecode (--compile-bytecode), and the tests compile the
# package first: where PYTHONDONTWRITEBYTECODE is set (CI machines), every
# process (each worker, each command a test runs) otherwise compiled Dask,
# NumPy and this package from source again: seconds per cluster.
TOOLS_LOCK := requirements/tools.lock
DEV_LOCK := requirements/dev.lock
BENCH_LOCK := requirements/bench.lock

.PHONY: run test test-busy bench lint wheel-check lock test-lowest test-latest wheelhouse gpu-check screenshots clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(UV): $(BIN)/python $(TOOLS_LOCK)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(TOOLS_LOCK)
	touch $(UV)

# --no-build-isolation: the editable install is built with the locked setuptools,
# not with whatever setuptools is newest today.
$(STAMP): $(UV) $(DEV_LOCK) pyproject.toml
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python --require-hashes -r $(DEV_LOCK)
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/orchestrate run examples/quickstart.yaml --report examples/results/quickstart-run.json

# The suite but the tests marked `faults`, which CI runs beside two busy loops (make test-busy, as two suites):
# each suite within CI's 10 minutes. `make test TESTS=` runs every test.
TESTS ?= -m "not faults"

test: $(STAMP)
	$(BIN)/python -m compileall -q orchestrator
	$(BIN)/python -m pytest -q $(TESTS)

# docs/images/*.png from real runs, in headless Chromium (docs/screenshots.py; Debian: apt-get install chromium)
screenshots: $(STAMP)
	$(BIN)/python docs/screenshots.py

# A busy machine is not a fault: the tests marked `faults` (a lost worker or link, stop signals,
# workers started apart from the run) beside two busy-looping processes, which .ci/beside-hogs
# starts and stops. Waits in the product and the tests watch progress, not a clock (docs/ci.md).
# BUSY_TESTS picks other tests: `make test-busy BUSY_TESTS=` runs the whole suite beside them; the
# recovery tests (a lost worker redone, re-plan, drain, retry) are a suite of their own: `make test-busy BUSY_TESTS="-m recovery"`.
BUSY_TESTS ?= -m "faults and not recovery"

test-busy: $(STAMP)
	$(BIN)/python -m compileall -q orchestrator
	HOG_PYTHON=$(BIN)/python .ci/beside-hogs 2 $(BIN)/python -m pytest -q -p no:cacheprovider $(BUSY_TESTS)

# mypy --strict on the package (mypy.ini) and the import contracts (.importlinter)
lint: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

# Regenerate the locks from pyproject.toml's ranges: the newest versions that
# satisfy them, for Python 3.11 and newer on any platform (one universal lock
# serves CI, developers and the Python 3.12 wheelhouse of GPU hosts).
LOCK_FLAGS := --universal --python-version 3.11 --generate-hashes --quiet --custom-compile-command 'make lock'

lock: $(UV)
	$(UV) pip compile $(LOCK_FLAGS) requirements/tools.in -o $(TOOLS_LOCK)
	$(UV) pip compile $(LOCK_FLAGS) pyproject.toml requirements/build.in --extra dev -o $(DEV_LOCK)
	$(UV) pip compile $(LOCK_FLAGS) pyproject.toml requirements/build.in --extra dev --extra bench -o $(BENCH_LOCK)

# The suite on the lowest versions pyproject.toml allows for our direct
# dependencies (their own dependencies as new as those allow), and on the newest
# releases of everything. Each in a venv of its own, never touching .venv.
test-lowest: $(UV)
	rm -rf build/venv-lowest
	$(UV) venv --quiet --seed --python $(PYTHON) build/venv-lowest
	$(UV) pip install --quiet --compile-bytecode --python build/venv-lowest/bin/python --resolution lowest-direct -e '.[dev]'
	build/venv-lowest/bin/python -m compileall -q orchestrator
	build/venv-lowest/bin/python -m pytest -q -p no:cacheprovider $(TESTS)

test-latest: $(UV)
	rm -rf build/venv-latest
	$(UV) venv --quiet --seed --python $(PYTHON) build/venv-latest
	$(UV) pip install --quiet --compile-bytecode --python build/venv-latest/bin/python --refresh --upgrade -e '.[dev]'
	build/venv-latest/bin/python -m compileall -q orchestrator
	build/venv-latest/bin/python -m pytest -q -p no:cacheprovider

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) $(BENCH_LOCK)
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python --require-hashes -r $(BENCH_LOCK)
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run_all.py

# A normal install, as remote workers and containers do it: build the wheel, install it
# into a fresh venv (its dependencies at the locked versions), run the quickstart from
# outside the source tree.
WHEEL_VENV := build/wheel-venv

wheel-check: $(STAMP)
	rm -rf dist $(WHEEL_VENV) build/wheel-run
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(WHEEL_VENV)/bin/python dist/orchestrator-*.whl --constraints $(DEV_LOCK)
	mkdir -p build/wheel-run
	cd build/wheel-run && ../wheel-venv/bin/orchestrate run $(CURDIR)/examples/quickstart.yaml --output-dir .
	cd build/wheel-run && ../wheel-venv/bin/orchestrate worker $(CURDIR)/examples/towers.yaml --job localhost --task 0 --dask-commands

# Every wheel an offline machine needs to install the package and run its tests
# (air-gapped clusters, GPU hosts): the locked versions for Python $(PY) on
# Linux x86-64, hash-checked, and the package's own wheel. See docs/gpu.md.
PY ?= 3.11
WHEELHOUSE := build/wheelhouse
# GPU hosts keep the NumPy their CuPy was built against and run no linters (the
# device link carries 64 MiB: these would be half of it)
WHEELHOUSE_LEAVES_OUT := numpy mypy librt ast_serialize grimp import_linter ruff
MANYLINUX := $(foreach n,2_28 2_27 2_24 2_17 2014 1,--platform manylinux$(if $(findstring _,$(n)),_$(n),$(n))_x86_64)

wheelhouse: $(STAMP)
	rm -rf $(WHEELHOUSE) && mkdir -p $(WHEELHOUSE)
	$(UV) pip compile --quiet --no-deps --generate-hashes --python-version $(PY) --python-platform x86_64-manylinux_2_28 \
		--custom-compile-command 'make wheelhouse PY=$(PY)' $(DEV_LOCK) -o $(WHEELHOUSE)/requirements.txt
	$(BIN)/python -m pip download --quiet --only-binary=:all: --implementation cp --python-version $(PY) \
		$(MANYLINUX) --require-hashes --no-deps -r $(WHEELHOUSE)/requirements.txt -d $(WHEELHOUSE)
	cd $(WHEELHOUSE) && rm -f $(foreach n,$(WHEELHOUSE_LEAVES_OUT),$(n)-*.whl)
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w $(WHEELHOUSE) .
	@echo "$(WHEELHOUSE): $$(ls $(WHEELHOUSE) | wc -l) wheels for Python $(PY), $$(du -sh $(WHEELHOUSE) | cut -f1)"

# On a machine with CUDA and CuPy (and no network): install from the wheelhouse
# into a venv that sees the machine's CuPy, then run the gpu-marked tests, every
# example on the cupy backend and benchmarks B4 and B6, into one log.
GPU_PYTHON ?= python3
GPU_LOG ?= build/gpu-check.log

gpu-check:
	bash benchmarks/gpu_check.sh $(GPU_PYTHON) $(WHEELHOUSE) $(GPU_LOG)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
