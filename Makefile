# Notee: `make run` starts everything; `make test` runs every test. Both do all set-up themselves.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
NOTEE := $(VENV)/bin/notee
STAMP := $(VENV)/.installed

.PHONY: run test test-unit test-integration test-faults soak chaos bench bench-quick bench-tools services-up services-down migrate venv lock cluster-up cluster-down browser lint

## The integration lane's test processes (pytest-xdist). Its tests mostly wait on MariaDB, Cassandra,
## the emulator and the processes they start: on this 2-core machine 3 was the fastest of 2, 3 and 4
## (docs/TESTING.md). LANE prints a lane's wall time and adds it to the summary `make test` ends with.
XDIST_N ?= 3
LANE := tests/lane.sh
LANES := .run/test-lanes.txt
export TEST_LANES := $(LANES)
# Not $(MAKE) itself in `test`'s recipe: make runs a line naming $(MAKE) even under `make -n`.
SUBMAKE := $(MAKE) --no-print-directory

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
	$(LOCK) --extra emulator --extra tracing --extra test --extra bench --extra dev -o requirements-dev.lock pyproject.toml
	$(LOCK) -c requirements-dev.lock -o requirements.lock pyproject.toml
	$(LOCK) -c requirements-dev.lock --extra emulator -o requirements-emulator.lock pyproject.toml

services-up:
	services/up.sh

services-down:
	services/down.sh

## Debian's headless chromium + chromedriver for the console's browser test (apt-get, like MariaDB),
## and axe-core for its accessibility pass (npm ci from tools/a11y/package-lock.json).
browser:
	services/chromium.sh
	npm ci --prefix tools/a11y --no-audit --no-fund --silent

migrate: venv services-up
	$(NOTEE) migrate

## The main job: stores, migrations, then the Notee processes of workers/Procfile until Ctrl-C/SIGTERM.
run: migrate
	exec workers/run.sh

## Style, types and dead code: ruff lint, ruff format check, mypy --strict on notee/, vulture (config in pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check notee tests bench chaos
	$(VENV)/bin/ruff format --check notee tests bench chaos
	$(VENV)/bin/mypy --strict notee
	$(VENV)/bin/mypy --strict chaos  # the chaos run's checker must be as exact as what it checks
	$(VENV)/bin/mypy --strict clients/python/notee_sdk  # the SDK: its users type-check their code against it
	$(VENV)/bin/vulture   # dead code: names nothing uses ([tool.vulture] in pyproject.toml, vulture_allowlist.py)

## Every test except the long fault suite and the soak, in lanes, each printing its wall time
## (docs/TESTING.md): setup (venv, stores, Debian's chromium for the console's browser test); then
## side by side, as they share nothing: lint (a lint or type regression fails it), unit, and
## integration-serial (the few integration tests that read or change what every tenant shares,
## alone); then integration (the rest of tests/integration, on XDIST_N processes). gorush, for the
## bench smoke test, builds in the background from the start (.run/bench-tools.log). Stops at the
## first failing stage; the lanes' summary prints either way.
UNIT := $(PY) -m pytest tests/unit $(PYTEST_ARGS)
INTEGRATION := $(PY) -m pytest tests/integration -m "not serial" -n $(XDIST_N) $(PYTEST_ARGS)
INTEGRATION_SERIAL := $(PY) -m pytest tests/integration -m serial $(PYTEST_ARGS)
test:
	@mkdir -p .run && rm -f $(LANES)
	@$(LANE) setup $(SUBMAKE) venv services-up browser && \
	{ $(SUBMAKE) bench-tools > .run/bench-tools.log 2>&1 & } && \
	tests/side_by_side.sh '$(LANE) lint $(SUBMAKE) lint' '$(LANE) unit $(UNIT)' \
		'$(LANE) integration-serial $(INTEGRATION_SERIAL)' && \
	$(LANE) integration $(INTEGRATION); \
	rc=$$?; echo "make test: wall time per lane"; cat $(LANES); exit $$rc

## The pure rules alone (tests/unit: no server, no socket, no sleep), well under a minute.
test-unit: venv
	@$(LANE) unit $(UNIT)

## tests/integration alone, as `make test` runs it: the serial tests alone, then the rest in parallel.
test-integration: venv services-up
	@$(LANE) integration-serial $(INTEGRATION_SERIAL)
	@$(LANE) integration $(INTEGRATION)

## Long fault-injection tests (3-node Cassandra cluster, restarts, storms), then the 5-minute seeded
## chaos run on the same cluster (tests/faults/test_chaos_run.py; docs/RELIABILITY.md, "The chaos run").
test-faults: venv services-up
	$(PY) -m pytest -m faults -s $(PYTEST_ARGS)

soak: venv services-up
	$(PY) -m pytest -m soak -s $(PYTEST_ARGS)

## The chaos run (issue 31; docs/RELIABILITY.md, "The chaos run"): a 3-node Cassandra cluster, a MariaDB
## of its own, the emulator and 2 api, 3 worker, 2 scheduler (one with a skewed clock) and 1 webhooks
## process, a mixed workload of 5 tenants and seeded faults of every kind for CHAOS_MINUTES (30);
## CHAOS_SEED replays a run. The ledger checker's report: .run/chaos/latest/report.{md,html}.
CHAOS_MINUTES ?= 30
chaos: venv
	CHAOS_MINUTES=$(CHAOS_MINUTES) CHAOS_SEED=$(CHAOS_SEED) $(PY) -m chaos

## Benchmarks (docs/BENCHMARKS.md): own database/keyspaces (*_bench_<checkout tag>) and emulator; bench/results/latest.{json,md}.
bench: venv services-up
	$(PY) -m bench.run

bench-quick: venv services-up
	$(PY) -m bench.run --quick

## gorush (bench/gorush.py), built once into .run/bench-tools from the Go module proxy; without Go it
## says so and the gorush comparison is skipped. `make test` runs it in the background.
bench-tools: venv
	$(PY) -m bench.gorush

## A 3-node local Cassandra cluster on 127.0.0.1-3 (CQL port 9043), to try a real cluster; returns once the nodes form one ring.
cluster-up: venv
	services/cassandra/cluster.sh start

cluster-down:
	services/cassandra/cluster.sh stop
