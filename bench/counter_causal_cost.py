"""Refresh cost of counter-causal scoring against one plain causal forward over the same n tokens.

The baseline is what generate's prefill does (``logits_to_keep=1``); the reference code's figures in
method.md section 5 were measured against a forward that computed *all* logits, so that ratio is
printed too. Targets (issue 3): full <= 1.0x, fast (logit or contrast) <= 0.03x at every n. Also
reports the H^(L-1) buffer as a percentage of the K/V bytes.

Run: ``python bench/counter_causal_cost.py [--sizes 640 1280 2560] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import header, median_seconds  # noqa: E402
from bench.engine_overhead import long_document  # noqa: E402
from ccviz import load_model  # noqa: E402
from ccviz.scoring import causal_pass, surprise_from_cache  # noqa: E402

CASES = [("full", "logit"), ("full", "contrast"), ("full", "logprob"), ("fast", "logit"), ("fast", "contrast"),
         ("fast", "logprob"), ("fast_mlp", "logit")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[640, 1280, 2560])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lm = load_model()
    model = lm.model
    text = long_document(lm.tokenizer, max(args.sizes))
    all_ids = torch.tensor([lm.tokenizer(text, add_special_tokens=False)["input_ids"]])
    print(header("counter-causal refresh cost / one plain forward over n tokens (median of %d)" % args.repeats))
    print(f"{'n':>6} {'forward s':>10} {'all-logits s':>12} " + " ".join(f"{v + '/' + s:>17}" for v, s in CASES))
    for n in args.sizes:
        ids = all_ids[:, :n]
        pos = torch.arange(n)[None]
        with torch.inference_mode():
            forward = median_seconds(lambda: model(input_ids=ids, position_ids=pos, logits_to_keep=1), args.repeats)
            all_logits = median_seconds(lambda: model(input_ids=ids, position_ids=pos), args.repeats)
        kv, hidden = causal_pass(model, ids, pos)
        cells = []
        for variant, score in CASES:
            seconds = median_seconds(
                lambda: surprise_from_cache(model, kv, ids[0], pos[0], hidden, variant=variant, score=score),
                args.repeats,
            )
            cells.append(f"{seconds / forward:>7.3f}x ({seconds / all_logits:.2f}x)")
        print(f"{n:>6} {forward:>10.3f} {all_logits:>12.3f} " + " ".join(f"{c:>17}" for c in cells))
    kv_bytes = sum(k.element_size() * k[0, :, 0].numel() * 2 for k, _ in kv)
    hidden_bytes = hidden.element_size() * hidden.shape[-1]
    print(f"ratios: x plain forward (logits_to_keep=1), in brackets x forward computing all logits")
    print(f"H^(L-1) buffer: {hidden_bytes} B/token vs K/V {kv_bytes} B/token = {100 * hidden_bytes / kv_bytes:.1f}%")


if __name__ == "__main__":
    main()
