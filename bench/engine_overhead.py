"""Engine overhead: decode tokens/s of ``generate(policy="full")`` against ``model.generate``.

Both run in this process on the same prompt and the same number of new tokens; decode speed of
model.generate is (time for N tokens - time for 1 token) / (N - 1), i.e. without its prefill.
Target (issue 2): ratio >= 0.9. Also: wall time of a 1,000-token prompt + 200 new tokens under
``sliding`` at J=256, h=64.

Run: ``python bench/engine_overhead.py [--repeats 5]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import header, median_seconds  # noqa: E402
from ccviz import generate, load_model  # noqa: E402
from ccviz.prompts import encode_prompt  # noqa: E402

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."


def long_document(tokenizer, n_tokens: int) -> str:
    """Real English prose from the standard library's documentation, cut to about n tokens."""
    from pydoc_data.topics import topics

    text = " ".join(topics[key] for key in sorted(topics))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]
    return tokenizer.decode(ids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    lm = load_model()
    n = args.new_tokens
    ids = torch.tensor([encode_prompt(lm.tokenizer, PROMPT, chat=True).ids])
    mask = torch.ones_like(ids)

    def hf(new: int):
        with torch.inference_mode():
            lm.model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False)

    hf_decode = (median_seconds(lambda: hf(n), args.repeats) - median_seconds(lambda: hf(1), args.repeats)) / (n - 1)

    def engine():
        return generate(lm, PROMPT, policy="full", cache_size=64, max_new_tokens=n, stop_at_eos=False)

    engine()  # warm-up
    per_token = []
    for _ in range(args.repeats):
        trace = engine()
        per_token.append(trace.timings["decode_seconds"] / (n - 1))
    per_token.sort()
    engine_decode = per_token[len(per_token) // 2]

    doc = long_document(lm.tokenizer, 1000)
    sliding = median_seconds(
        lambda: generate(lm, doc, policy="sliding", cache_size=256, chunk_size=64, max_new_tokens=200, chat=False,
                         stop_at_eos=False),
        max(1, args.repeats // 2), warmup=0,
    )
    print(header("engine overhead"))
    print(f"model.generate decode: {1 / hf_decode:8.1f} tokens/s")
    print(f"ccviz full decode:     {1 / engine_decode:8.1f} tokens/s")
    print(f"ratio (ccviz / model.generate): {hf_decode / engine_decode:.3f}   target >= 0.9")
    print(f"sliding J=256 h=64, 1,000-token prompt + 200 new tokens: {sliding:.2f} s (median)")


if __name__ == "__main__":
    main()
