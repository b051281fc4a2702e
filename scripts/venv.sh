#!/usr/bin/env bash
# Make .venv exist and match a requirements file, re-installing only when it is out of date.
#
#   scripts/venv.sh requirements.txt        # runtime (make run)
#   scripts/venv.sh requirements-dev.txt    # runtime + test tooling (make test, lint, ...)
#
# "Out of date" is decided by a fingerprint of the interpreter version and the content of every
# requirements*.txt (requirements-dev.txt includes requirements.txt with -r), stored next to the
# venv. Content hashes, not mtimes, so a fresh clone or a branch switch does the right thing.
# PYTHON selects the base interpreter (default: python3, which must be 3.11 or newer).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

requirements=${1:?usage: scripts/venv.sh REQUIREMENTS_FILE}
[[ -f $requirements ]] || { echo "venv.sh: no such file: $requirements" >&2; exit 1; }
base_python=${PYTHON:-python3}
venv=.venv
stamp="$venv/.installed-$(basename "$requirements" .txt)"

if ! command -v "$base_python" >/dev/null; then
    echo "venv.sh: $base_python not found; install Python 3.11+ (Debian: apt-get install python3 python3-venv)" >&2
    exit 1
fi
if ! "$base_python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "venv.sh: $("$base_python" --version 2>&1) is too old; Python 3.11+ is required (set PYTHON=...)" >&2
    exit 1
fi

# A venv whose interpreter no longer starts (base Python removed or upgraded) or differs in
# version from the base interpreter is stale: rebuild it from scratch rather than patch it.
base_version=$("$base_python" -c 'import sys; print(sys.version)')
if [[ -d $venv ]]; then
    venv_version=$("$venv/bin/python" -c 'import sys; print(sys.version)' 2>/dev/null || true)
    if [[ $venv_version != "$base_version" ]]; then
        echo "venv.sh: $venv is stale (its Python is '${venv_version:-broken}'); recreating it"
        rm -rf "$venv"
    fi
fi
if [[ ! -x $venv/bin/python ]]; then
    echo "venv.sh: creating $venv with $base_python ($("$base_python" --version 2>&1))"
    "$base_python" -m venv "$venv"
fi

fingerprint=$({ printf '%s\n' "$base_version"; cat requirements*.txt; } | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(<"$stamp") == "$fingerprint" ]]; then
    exit 0
fi
echo "venv.sh: installing $requirements into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
# Written last, so an interrupted install is retried next time.
printf '%s\n' "$fingerprint" >"$stamp"
