# Notee: `make run` starts everything; `make test` runs every test. Both do all set-up themselves.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
NOTEE := $(VENV)/bin/notee
STAMP := $(VENV)/.installed

.PHONY: run test test-faults soak bench bench-quick services-up services-down migrate venv lock cluster-up cluster-down browser

## The exact, hash-checked versions of requirements-dev.lock (runtime + test + bench + dev extras),
## then Notee itself without resolving anything again.
venv: $(STAMP)
$(STAMP): pyproject.toml requirements-dev.lock setup.py clients/python/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --require-hashes -r requirements-dev.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	$(VENV)/bin/pip install -q --no-deps -e clients/python  # the SDK (httpx and pydantic are already there)
	touch $(STAMP)

## Re-resolve both lock files from pyproject.toml (after changing a dependency or to take upgrades).
## requirements.lock (runtime only, the image's) is constrained to requirements-dev.lock's versions.
LOCK_VENV := .venv-lock
LOCK := $(LOCK_VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11
lock:
	test -x $(LOCK_VENV)/bin/uv || (python3 -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install -q 'uv>=0.9,<1')
	$(LOCK) --extra emulator --extra test --extra bench --extra dev -o requirements-dev.lock pyproject.toml
	$(LOCK) -c requirements-dev.lock -o requirements.lock pyproject.toml
	$(LOCK) -c requirements-dev.lock --extra emulator -o requirements-emulator.lock pyproject.toml

services-up:
	services/up.sh

services-down:
	services/down.sh

## Debian's headless chromium + chromedriver for the console's browser test (apt-get, like MariaDB).
browser:
	services/chromium.sh

migrate: venv services-up
	$(NOTEE) migrate

## The main job: stores, migrations, then the Notee processes of workers/Procfile until Ctrl-C/SIGTERM.
run: migrate
	exec workers/run.sh

## Style, types and dead code: ruff lint, ruff format check, mypy --strict on notee/, vulture (config in pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check notee tests bench
	$(VENV)/bin/ruff format --check notee tests bench
	$(VENV)/bin/mypy --strict notee
	$(VENV)/bin/vulture   # dead code: names nothing uses ([tool.vulture] in pyproject.toml, vulture_allowlist.py)

## Every test except the long fault suite and the soak, after `make lint` (a lint or type regression fails it).
test: venv lint services-up browser
	$(PY) -m pytest -m "not faults and not soak" $(PYTEST_ARGS)

## Long fault-injection tests (3-node Cassandra cluster, restarts, storms).
test-faults: venv services-up
	$(PY) -m pytest -m faults -s $(PYTEST_ARGS)

soak: venv services-up
	$(PY) -m pytest -m soak -s $(PYTEST_ARGS)

## Benchmarks (docs/BENCHMARKS.md): own database/keyspaces (*_bench) and emulator; bench/results/latest.{json,md}.
bench: venv services-up
	$(PY) -m bench.run

bench-quick: venv services-up
	$(PY) -m bench.run --quick

## A 3-node local Cassandra cluster on 127.0.0.1-3 (CQL port 9043), to try a real cluster; returns once the nodes form one ring.
cluster-up: venv
	services/cassandra/cluster.sh start

cluster-down:
	services/cassandra/cluster.sh stop
