#!/usr/bin/env bash
# The project's checks, in the order CI runs them: lint, format, the public API's types, then the tests
# (arguments go to pytest). Run after `bash scripts/install.sh --test`, which installs ruff and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m ruff check .
"$PY" -m ruff format --check .
"$PY" -m mypy
"$PY" -m pytest "$@"
