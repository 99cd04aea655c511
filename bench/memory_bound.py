"""Peak memory of a run is bounded by the cache budget, not by the generated length.

Each case runs in a fresh subprocess: load the model, note peak RSS, generate N new tokens, note
peak RSS again; the difference is what the run itself needed. Under eviction it should not grow
with N (ratio ~1.0 between N = 800 and N = 200); under ``full`` it does.

Run: ``python bench/memory_bound.py``
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import header  # noqa: E402

CHILD = """
import json, resource, sys
from ccviz import generate, load_model
lm = load_model()
generate(lm, "Hello", policy="sliding", cache_size=8, max_new_tokens=2)  # warm-up: allocator, kernels
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
policy, new = sys.argv[1], int(sys.argv[2])
generate(lm, "Write a very long story about a ship.", policy=policy, cache_size=128, chunk_size=32,
         max_new_tokens=new, stop_at_eos=False)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"delta_mb": (after - before) / 1024}))
"""


def run_case(policy: str, new_tokens: int) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, policy, str(new_tokens)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["delta_mb"]


def main() -> None:
    print(header("peak RSS growth of one run (MB above the loaded model), J=128, h=32"))
    print(f"{'policy':<22} {'N=200':>8} {'N=800':>8} {'ratio':>7}")
    for policy in ("sliding", "counter_causal_fast", "full"):
        short, long = run_case(policy, 200), run_case(policy, 800)
        print(f"{policy:<22} {short:>8.1f} {long:>8.1f} {long / max(short, 1e-9):>7.2f}")


if __name__ == "__main__":
    main()
