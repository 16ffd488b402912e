# The two commands of the README: `make run` and `make test`. Both start from a fresh machine
# with nothing but Python 3.11+ (and, for the polyglot test, Node.js): they create .venv and
# install the project into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME_STAMP := $(VENV)/.runtime-stamp
STAMP := $(VENV)/.installed-stamp
NPM_CI := npm ci --no-audit --no-fund --loglevel=error

# Python writes its bytecode caches (__pycache__, ignored by git) even where the environment
# says PYTHONDONTWRITEBYTECODE: the tests start hundreds of Python processes (servers, the CLI,
# pytest's workers), and without the caches each one compiles again every module it imports
# (about 0.7 CPU s per server start, 6 CPU s per collection of the suite).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install install-runtime run test test-fast checks lint format typecheck protos stubs-check \
	client-rules buf-lint pytest pytest-fast pytest-quick pytest-slow pytest-container node-test \
	bench clean

# Two distributions, both editable: the light client (clients/python: wm_client, wm_proto, the
# `wm` CLI) and the server, which depends on it. Given in one pip command, the local client
# satisfies the server's `wm-client` requirement (it is never looked up on an index).
# `make run` needs only the runtime (this stamp); the dev tools (linters, mypy, pytest, buf,
# the browser and deployment checkers) come with the second stamp, for `make test` and the rest.
# --no-compile: Python compiles the modules the server imports when it first imports them,
# instead of pip compiling every module of every package (a quarter of the install's CPU and
# 50 MB of the venv; bench/start_bench.py measures the start).
#
# Over an older venv, our own two distributions are uninstalled first: pip installs the client
# before the server that depends on it and only then uninstalls the older server, whose file
# list may still name a file that has moved to the client since (older servers carried the
# `wm` script), so the client's new copy would be deleted. PIP_OPTIONS: extra options for
# both pip installs (tests/ci/test_make_install.py passes --no-index).
define prepare_venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip uninstall -qq --yes --disable-pip-version-check \
		working-memory-service wm-client
endef

$(RUNTIME_STAMP): pyproject.toml clients/python/pyproject.toml
	$(prepare_venv)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile $(PIP_OPTIONS) \
		-e './clients/python[cli]' -e .
	touch $(RUNTIME_STAMP)

# `make install` (the dev tools: `make test` and the rest) installs the runtime too, all of it
# through uv (Astral's installer, from PyPI like the rest): the same requirements, resolved and
# installed in parallel, and like pip --no-compile it writes no bytecode. Measured on a fresh
# clone on 2 busy cores: the dev tools alone, pip 68 s wall / 60 CPU s against uv about 15 s /
# 10 CPU s; the runtime first through pip, as `make run` installs it, cost 111 s wall / 52 CPU s
# more (2026-12-07), serial before every CI run's tests. The runtime stamp is set too, so
# `make run` after it installs nothing; `make run` alone stays on pip, the installer every
# Python has.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(prepare_venv)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip 'uv>=0.9,<1'
	$(BIN)/uv pip install --quiet --python $(BIN)/python $(PIP_OPTIONS) \
		-e './clients/python[cli]' -e '.[dev]'
	touch $(RUNTIME_STAMP) $(STAMP)

install-runtime: $(RUNTIME_STAMP)

install: $(STAMP)

# The inspector and the HTTP door are on under `make run` (WM_INSPECTOR_ADDRESS and
# WM_HTTP_ADDRESS set in the environment win). Runtime packages only.
run: install-runtime
	WM_INSPECTOR_ADDRESS=$${WM_INSPECTOR_ADDRESS-127.0.0.1:8080} \
	WM_HTTP_ADDRESS=$${WM_HTTP_ADDRESS-127.0.0.1:8081} $(BIN)/wm-server

# `make test` runs everything, in tiers side by side (scripts/test_tiers.py: each tier's output
# whole as it ends, a summary, a failure if any tier fails): the checks (buf, stub drift, ruff,
# mypy), the fast pytest tier on PYTEST_WORKERS xdist workers, the slow pytest tier in two
# processes (pytest-slow, pytest-container), and the node tests. The tiers are pytest markers (pyproject.toml; tests/conftest.py
# puts whole folders in the slow tier): `slow` (container build, soak, packaging, PostgreSQL
# restarts, process kills, the browser) and `serial` (measures time or memory: never on a
# shared worker) make the slow tier, everything else the fast one, so together they are the
# whole suite.
#
# `make test-fast` is the loop while you work, side by side: lint (ruff, the import contracts),
# typecheck (mypy) and pytest-quick. pytest-quick runs the fast tier's tests under QUICK_TESTS
# (the domain in tests/unit, the contract and conformance cases, the storage suite on both
# engines with its port coverage check, and the service on loopback in tests/integration on
# SQLite) except those marked `server_process` (every test of a module that runs wm-server as
# a child process: replicas, restarts, request ids across servers, log formats, the ready
# line, tracing, event loops) or `postgres_service` (the service tests' PostgreSQL cases: the
# storage suite already runs every statement on PostgreSQL; these cost about 52 CPU s, most of
# it in the PostgreSQL server), on QUICK_WORKERS xdist workers: about 165 CPU s with a warm
# mypy cache (2026-12-07, 1,720 tests: 112 s wall on this quiet machine; the extractor's two
# linear-time checks, 20-40 CPU s of 100 KB inputs, are in the slow tier). Four workers on two
# cores, because alone a test spends much of its time waiting (a server starting, a stream, a
# timeout): measured on 2 quiet (slow) cores, 1,701 tests, 2 workers 248 s wall, 4 workers
# 157 s, 6 workers 160 s (more CPU in their collections). Under `make test` the other tiers fill that waiting, so its fast tier keeps
# PYTEST_WORKERS=2 (with 4: 1,175 CPU s instead of 1,075 and no shorter). Why not the whole
# fast tier: it needs about 480 CPU s, so no less than 4 minutes on 2 cores. Left to `make
# test` (and `make pytest-fast`): the server-process tests, the service tests on PostgreSQL, tests/clients (the CLI, the client
# library), tests/docs (the docs' code blocks), tests/reliability (faults, fuzzing, load),
# tests/integrations (the agent frameworks) and the ci, deploy, bench and examples checks.
PYTEST_WORKERS ?= 2
QUICK_WORKERS ?= 4
FAST_TIER := not slow and not serial
SLOW_TIER := slow or serial
QUICK_TIER := $(FAST_TIER) and not server_process and not postgres_service
QUICK_TESTS := tests/unit tests/contract tests/conformance tests/storage tests/integration

test: install
	$(BIN)/python scripts/test_tiers.py checks pytest-fast pytest-slow pytest-container node-test

test-fast: install
	$(BIN)/python scripts/test_tiers.py lint typecheck pytest-quick

checks: buf-lint stubs-check lint typecheck

buf-lint: install
	$(BIN)/buf lint
	$(BIN)/buf format --diff --exit-code
	@# wm.v1 as released (issue 38's one breaking step): from it on, only additive changes pass.
	$(BIN)/buf breaking protos --against protos/wm-v1.binpb

# The proto stubs, and the client rules generated from clients/rules.json (both clients).
stubs-check: install
	$(BIN)/python scripts/gen_protos.py --check
	$(BIN)/python scripts/gen_limits_table.py --check
	$(BIN)/python scripts/gen_client_rules.py --check

# The rules both clients follow (clients/rules.json and the server's contract limits) as
# clients/python/wm_client/_rules.py and clients/typescript/src/rules.ts.
client-rules: install
	$(BIN)/python scripts/gen_client_rules.py

# The Python stubs, and (with Node) the TypeScript client's code from buf generate.
protos: install
	$(BIN)/python scripts/gen_protos.py
	$(BIN)/python scripts/gen_limits_table.py
	@if command -v node >/dev/null 2>&1; then \
		cd clients/typescript && $(NPM_CI) && BUF=$(CURDIR)/$(BIN)/buf npm run --silent generate; \
	else echo "protos: node is not installed; clients/typescript/src/gen left as it is"; fi

# ruff check also fails on an import of a private wm_core module (wm_core._*) anywhere but in
# wm_core and the tests (rule TID251, configured in pyproject.toml).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install
	$(BIN)/mypy  # the files of [tool.mypy] in pyproject.toml, strict

# Under CI=true the property tests draw the same examples every run (hypothesis' seed 0): a
# landing is not decided by a rare draw; a developer's runs keep drawing new ones.
CI_SEED := $(if $(filter true,$(CI)),--hypothesis-seed=0)

# Both pytest tiers side by side; `$(BIN)/pytest` alone still runs the whole suite in one
# process, and `$(BIN)/pytest -n 2` on two workers.
pytest: install
	$(BIN)/python scripts/test_tiers.py pytest-fast pytest-slow pytest-container

pytest-fast: install
	$(BIN)/pytest -m "$(FAST_TIER)" -n $(PYTEST_WORKERS) --durations=15 $(CI_SEED)

pytest-quick: install
	$(BIN)/pytest -m "$(QUICK_TIER)" -n $(QUICK_WORKERS) --durations=15 $(CI_SEED) $(QUICK_TESTS)

# The slow tier in two processes: the container build (CONTAINER_TEST: up to three minutes
# when the tree has changed, mostly the image's pip install and layer commits) beside the rest,
# which would otherwise wait for it in one serial process (the longest tier of `make test`).
CONTAINER_TEST := tests/deploy/test_container.py

pytest-slow: install
	$(BIN)/pytest -m "$(SLOW_TIER)" --durations=15 $(CI_SEED) --ignore=$(CONTAINER_TEST)

pytest-container: install
	$(BIN)/pytest -m "$(SLOW_TIER)" --durations=15 $(CI_SEED) $(CONTAINER_TEST)

# The polyglot proof: the TypeScript client (clients/typescript) and its agent example
# (examples/typescript) against the real Python server: npm ci, the drift check of the code
# buf generates from protos/, tsc, then node --test. Without Node it is skipped with a
# message, except under CI=true, where a missing node fails.
#
# Each project is installed (npm ci) and compiled (tsc) once: the client, then the example
# against it. --ignore-scripts on the later npm runs skips only their pre-scripts, which would
# do it again: the client's pretest builds it, the example's prebuild (also run by its
# pretest) reinstalls and rebuilds the client (so `npm run build` alone works in a fresh
# example); the named script itself still runs. Six tsc runs and four npm ci were two of each.
#
# It reinstalls and rebuilds clients/typescript, which tests/docs uses too while the pytest
# tiers run beside it: both hold var/typescript.lock (flock; without flock(1) it runs unlocked).
node-test: install
	@mkdir -p var; exec 9>var/typescript.lock; \
	if command -v flock >/dev/null 2>&1; then flock 9; fi; \
	if command -v node >/dev/null 2>&1; then \
		cd clients/typescript && $(NPM_CI) && \
		BUF=$(CURDIR)/$(BIN)/buf node scripts/check-generated.mjs && \
		npm run --silent build && \
		WM_PYTHON=$(CURDIR)/$(BIN)/python npm test --silent --ignore-scripts && \
		cd $(CURDIR)/examples/typescript && $(NPM_CI) && \
		npm run --silent build --ignore-scripts && \
		WM_PYTHON=$(CURDIR)/$(BIN)/python npm test --silent --ignore-scripts; \
	elif [ "$$CI" = "true" ]; then \
		echo "node-test: node is required under CI=true (install Node.js 20+)" >&2; exit 1; \
	else \
		echo "node-test: skipped, node is not installed (install Node.js 20+ to run it)"; \
	fi

bench: install
	$(BIN)/python bench/merge_bench.py
	$(BIN)/python bench/assembly_bench.py

clean:
	rm -rf $(VENV) var build .pytest_cache .mypy_cache .ruff_cache
