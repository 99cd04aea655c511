"""Cost of the attention-based policies: refresh scoring, attention capture, and decode speed.

1. Refresh: scoring the n + 64 entries of a cache (``score_candidates`` + top-k), against one plain
   causal forward over n tokens (``logits_to_keep=1``, as generate's prefill).
2. Capture: one 64-token chunk forward over an n-entry cache with the policy's attention capture and
   ``observe`` (TOVA: one row of the last layer; SnapKV: every row of the last layer; H2O: every row
   of every layer), against the same forward capturing nothing (what ``full`` and ``sliding`` run).
3. ``full`` decode through ccviz's attention function against plain SDPA (the path before attention
   capture existed).
4. Decode tokens/s of each policy against ``full`` (refresh time included), (a) after a short prompt
   with J large enough that nothing is evicted: pure overhead; (b) after a 1,000-token document at
   J=256, h=64, where the evicting policies also attend over a smaller cache than ``full``.

All timings are interleaved across policies and repeated; the medians are compared.

Run: ``python bench/attention_policies.py [--sizes 640 1280 2560] [--repeats 5] [--new-tokens 64] [--threads N]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import header, median_seconds  # noqa: E402
from bench.engine_overhead import PROMPT, long_document  # noqa: E402
from ccviz import generate, load_model, make_policy  # noqa: E402
from ccviz.cache import CacheState  # noqa: E402
from ccviz.capture import ATTENTION_IMPLEMENTATION, CAPTURE_KWARG, Capture, install_hooks  # noqa: E402
from ccviz.engine import prepare_run  # noqa: E402
from ccviz.policies import select_survivors  # noqa: E402

SCORED = ["tova", "h2o", "snapkv", "importance_keyproxy"]
DECODED = ["full", "sliding", *SCORED]
CHUNK = 64


def _cache_of(lm, text: str) -> CacheState:
    """The engine's own cache after prefilling ``text`` with nothing evicted."""
    n = len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    run = prepare_run(
        lm, text, policy="full", cache_size=n + CHUNK, chunk_size=CHUNK, frozen=0, recent=None, max_new_tokens=1,
        chat=False, seed=None, do_sample=False, temperature=1.0, top_p=1.0, policy_options=None, prefill_step=None,
    )
    run.run(None, None)
    return run.state


@torch.inference_mode()
def _chunk_then_refresh(model, base: CacheState, chunk: torch.Tensor, policy) -> tuple[float, float]:
    """Seconds of one chunk forward (+ capture and observe) and of the refresh that follows; undone after."""
    n = len(base)
    state = CacheState(kv=base.kv, frozen=0, tok=base.tok, pos=base.pos)
    pos = torch.arange(n, n + chunk.numel())
    capture = Capture.for_needs(model, [policy.attention] if policy is not None and policy.attention else [])
    started = time.perf_counter()
    model(input_ids=chunk[None], position_ids=pos[None], past_key_values=state.kv, use_cache=True, logits_to_keep=1,
          **{CAPTURE_KWARG: capture})
    state.append(chunk, pos)
    if policy is not None:
        policy.observe(model, state, capture)
    forwarded = time.perf_counter()
    if policy is not None:
        J = n // 2
        select_survivors(policy.score_candidates(model, state).float().cpu(), J, policy.default_recent(J))
    refreshed = time.perf_counter()
    base.kv.crop(-chunk.numel())
    return forwarded - started, refreshed - forwarded


def refresh_and_capture(lm, sizes: list[int], repeats: int) -> None:
    model = lm.model
    print(f"\n## refresh (score + top-k) and capture cost, {CHUNK}-token chunks, median of {repeats}")
    print(f"{'n':>6} {'forward s':>10} {'chunk s':>8} " + " ".join(f"{p:>20}" for p in SCORED))
    for n in sizes:
        text = long_document(lm.tokenizer, n + CHUNK)
        base = _cache_of(lm, text)
        chunk = base.tok[-CHUNK:]
        base.kv.crop(-CHUNK)
        base = CacheState(kv=base.kv, frozen=0, tok=base.tok[:-CHUNK], pos=base.pos[:-CHUNK])
        ids, pos = base.tok[None], base.pos[None]
        with torch.inference_mode():
            forward = median_seconds(lambda: model(input_ids=ids, position_ids=pos, logits_to_keep=1), repeats)
        policies = {name: make_policy(name) for name in SCORED}
        samples: dict[str | None, list[tuple[float, float]]] = {name: [] for name in [None, *SCORED]}
        for _ in range(repeats + 1):  # the first round is a warm-up
            for name in samples:
                samples[name].append(_chunk_then_refresh(model, base, chunk, policies.get(name)))
        plain = statistics.median(s[0] for s in samples[None][1:])
        cells = []
        for name in SCORED:
            capture = statistics.median(s[0] for s in samples[name][1:]) / plain
            refresh = statistics.median(s[1] for s in samples[name][1:]) / forward
            cells.append(f"{refresh:>9.1e}x ({capture:>5.2f}x)")
        print(f"{len(base):>6} {forward:>10.3f} {plain:>8.3f} " + " ".join(f"{c:>20}" for c in cells))
    print("cells: refresh / plain forward over n tokens; in brackets: chunk forward with capture / without")


def _decode_rate(trace) -> float:
    """Generated tokens per second of the decode phase: forward passes plus decode-phase refreshes."""
    seconds = trace.timings["decode_seconds"] + sum(c.seconds for c in trace.cycles if c.phase == "decode")
    generated = sum(tok.source == "generated" for tok in trace.tokens)
    return (generated - 1) / seconds


def decode_speed(lm, title: str, prompt: str, repeats: int, **kw) -> None:
    rates: dict[str, list[float]] = {policy: [] for policy in DECODED}
    for _ in range(repeats + 1):  # interleaved, so load changes hit every policy alike; the first is a warm-up
        for policy in DECODED:
            rates[policy].append(_decode_rate(generate(lm, prompt, policy=policy, stop_at_eos=False, **kw)))
    medians = {policy: statistics.median(values[1:]) for policy, values in rates.items()}
    print(f"\n## decode tokens/s, {title}, median of {repeats}")
    for policy in DECODED:
        print(f"{policy:>20} {medians[policy]:7.1f} tokens/s   {medians[policy] / medians['full']:.2f}x full")


def full_path_overhead(lm, repeats: int, new_tokens: int) -> None:
    """``full`` decode through ccviz's attention function against the plain SDPA function it wraps."""
    rates: dict[str, list[float]] = {"sdpa": [], ATTENTION_IMPLEMENTATION: []}
    for _ in range(repeats + 1):
        for implementation in rates:
            lm.model.set_attn_implementation(implementation)
            trace = generate(lm, PROMPT, policy="full", cache_size=64, max_new_tokens=new_tokens, stop_at_eos=False)
            rates[implementation].append(_decode_rate(trace))
    lm.model.set_attn_implementation(ATTENTION_IMPLEMENTATION)
    plain, ours = (statistics.median(values[1:]) for values in rates.values())
    print(f"\n## full decode, {new_tokens} new tokens, median of {repeats}: plain SDPA {plain:.1f} tokens/s, "
          f"ccviz_sdpa {ours:.1f} tokens/s, ratio {ours / plain:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[640, 1280, 2560])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, help="torch threads (1 gives steadier ratios on a shared machine)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_model()
    install_hooks(lm.model)
    print(header("attention-based policies"))
    full_path_overhead(lm, args.repeats, args.new_tokens)
    refresh_and_capture(lm, args.sizes, args.repeats)
    n = args.new_tokens
    decode_speed(lm, f"short chat prompt, J=512 (nothing evicted), {n} new tokens", PROMPT, args.repeats,
                 cache_size=512, chunk_size=64, max_new_tokens=n)
    decode_speed(lm, f"1,000-token document, J=256, h=64, {n} new tokens", long_document(lm.tokenizer, 1000),
                 args.repeats, cache_size=256, chunk_size=64, max_new_tokens=n, chat=False)


if __name__ == "__main__":
    main()
