#!/usr/bin/env bash
# Runs the tests marked `cuda` (tests/test_cuda.py: the engine, counter-causal bf16 against float32, a policy of
# each kind and one app job through the worker, all on the GPU) and prints one summary line. A few minutes on
# one GPU; needs a CUDA build of torch (pyproject pins the CPU wheel). Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
log=$(mktemp -t ccviz-gpu-check.XXXXXX)
"$PY" -m pytest -m cuda tests/test_cuda.py -q -rs -p no:cacheprovider "$@" >"$log" 2>&1
status=$?
gpu=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA GPU')" 2>&1)
summary=$(grep -E "(passed|failed|skipped|error|no tests ran)" "$log" | tail -n 1 | tr -d '=' | xargs)
[ "$gpu" = "no CUDA GPU" ] && status=1  # every test skipped: nothing was verified
echo "gpu_check on ${gpu}: ${summary:-pytest printed no summary} (exit ${status}; full log: ${log})"
exit "$status"
