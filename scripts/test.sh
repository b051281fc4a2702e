#!/usr/bin/env bash
# `make test`: the venv, Django's static checks, the Node client of the conformance tests, then
# the whole pytest suite. Exits with pytest's exit code (or the code of the step that failed
# before pytest could run). Extra arguments go to pytest: scripts/test.sh -k smoke -x
#
# `make test-fast` (scripts/test.sh --fast ...): the same checks, then only the tests that start
# no server (tests/unit, tests/integration, tests/golden): the inner loop, under 3 minutes.
#
# PYTEST_EXIT_FILE, if set, receives pytest's exit code: `make` turns every failure into exit
# status 2, so .ci/run reads the real code from there.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

py=.venv/bin/python
fast=0
if [[ ${1:-} == --fast ]]; then
    fast=1
    shift
fi

scripts/venv.sh requirements-dev.txt

# Checks run with the test settings (in-memory channel layer): they must not need Redis.
export DJANGO_SETTINGS_MODULE=thinkproject.settings_test
# `manage.py check --fail-level WARNING` and `manage.py makemigrations --check --dry-run`, in one
# process: each Django start-up is 6 s of a 2-core machine's inner loop.
echo "== manage.py check --fail-level WARNING; manage.py makemigrations --check --dry-run"
"$py" -c 'from django.core.management import execute_from_command_line as manage
manage(["manage.py", "check", "--fail-level", "WARNING"])
manage(["manage.py", "makemigrations", "--check", "--dry-run"])'
# The layers of agents_app (pyproject.toml [tool.importlinter]): imports run one way.
echo "== lint-imports"
PYTHONPATH=. .venv/bin/lint-imports --no-cache

# The conformance tests drive the real @cloudflare/ai-chat client from Node. `npm ci` wipes and
# reinstalls node_modules, so skip it while node_modules matches package-lock.json.
conformance=tests/conformance
if ((fast == 0)) && [[ -f $conformance/package-lock.json ]]; then
    lock_hash=$(sha256sum "$conformance/package-lock.json" | cut -d' ' -f1)
    npm_stamp=$conformance/node_modules/.make-test-stamp
    if [[ -f $npm_stamp && $(<"$npm_stamp") == "$lock_hash" ]]; then
        echo "== npm ci in $conformance: node_modules up to date"
    else
        echo "== npm ci in $conformance"
        (cd "$conformance" && npm ci --no-audit --no-fund)
        printf '%s\n' "$lock_hash" >"$npm_stamp"
    fi
fi

# pytest-xdist workers: the tests wait more than they compute. On 2 cores the whole suite took 26
# min in one process and 18 and a half in two, a test file per worker (--dist loadfile: the servers
# a module starts serve its tests). The fast suite's tests start no server and go one by one to
# three workers: 2 min 29 to 35 s against 2 min 53 to 56 s in two, in the same hour.
args=(-n 2 --dist loadfile)
# The fast suite: the directories whose tests need no server (no Redis, PostgreSQL, Daphne,
# Celery, browser or Node client).
if ((fast == 1)); then
    args=(-n 3 tests/unit tests/integration tests/golden)
    # The parse fuzzer's 10,000 frames are one to two minutes on 2 cores: the inner loop sends 1,000.
    export THINK_FUZZ_EXAMPLES=${THINK_FUZZ_EXAMPLES:-1000}
fi

echo "== pytest ${args[*]} $*"
status=0
"$py" -m pytest "${args[@]}" "$@" || status=$?
if [[ -n ${PYTEST_EXIT_FILE:-} ]]; then
    printf '%s\n' "$status" >"$PYTEST_EXIT_FILE"
fi
if ((status != 0)); then
    echo "pytest exited with status $status" >&2
fi
exit "$status"
