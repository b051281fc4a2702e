# Think for Django: the two commands are `make run` and `make test` (see README.md).
# Every target uses .venv/bin/... directly; nothing needs an activated virtualenv.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
RUFF := $(VENV)/bin/ruff
# Extra pytest arguments: make test PYTEST_ARGS="-k smoke -x"
PYTEST_ARGS ?=

.PHONY: help run test test-fast lint format bench clean dev-venv

help:
	@echo "make run     start Redis, Daphne, a Celery worker and Celery beat (Ctrl-C stops all)"
	@echo "make test    checks + the whole pytest suite (creates/updates $(VENV))"
	@echo "make test-fast  checks + the tests that start no server (unit, integration, golden)"
	@echo "make lint    ruff check + lint-imports (the layers of agents_app)"
	@echo "make format  ruff format + import sorting"
	@echo "make bench   run the scripts in bench/"
	@echo "make clean   remove the venv, caches, node_modules and logs (keeps var/ data)"

# The whole system on embedded defaults (SQLite in var/, a local redis-server).
run:
	scripts/run.sh

# Exits non-zero iff a check or pytest fails; scripts/test.sh reports pytest's own exit code.
test:
	scripts/test.sh $(PYTEST_ARGS)

# The inner loop: the same checks, then tests/unit, tests/integration and tests/golden (no servers).
test-fast:
	scripts/test.sh --fast $(PYTEST_ARGS)

dev-venv:
	scripts/venv.sh requirements-dev.txt

lint: dev-venv
	$(RUFF) check .
	PYTHONPATH=. $(VENV)/bin/lint-imports --no-cache

format: dev-venv
	$(RUFF) check --select I --fix .
	$(RUFF) format .

# Every bench/*.py that is a script (has a __main__ block; helpers like _stack.py and ASGI apps
# are skipped), run as a module from the repository root (they import bench._stack and
# tests.support); stops at the first failure.
bench: dev-venv
	@shopt -s nullglob; ran=0; \
	for script in bench/[!_]*.py; do \
	  grep -q '__name__ == "__main__"' "$$script" || continue; \
	  module=$${script%.py}; module=$${module//\//.}; \
	  echo "== $(PY) -m $$module"; $(PY) -m "$$module"; ran=1; \
	done; \
	if (( ran == 0 )); then echo "bench/: no scripts"; fi

# Generated files only: the database and Redis data in var/ survive (rm -rf var/ resets the demo).
clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache staticfiles tests/conformance/node_modules var/log
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
