"""Probe ``cost``: refresh cost of counter-causal scoring against one plain causal forward over the same n tokens.

The baseline is what generate's prefill does (``logits_to_keep=1``); the reference code's figures
(docs/benchmarks.md#reference-figures) were measured against a forward that computed *all* logits, so that ratio is
printed too. Targets: full <= 1.0x, fast (logit or contrast) <= 0.03x at every n. Also
reports the H^(L-1) buffer as a percentage of the K/V bytes.

Run: ``python -m ccviz bench cost [--set sizes=640,1280,2560] [--set repeats=5]``
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from ccviz.cases.texts import long_document
from ccviz.fields import Validated, whole
from ccviz.models import load_model
from ccviz.policies.counter_causal.surprise import causal_pass, surprise_from_cache

from ..timing import median_seconds

CASES = [
    ("full", "logit"),
    ("full", "contrast"),
    ("full", "logprob"),
    ("fast", "logit"),
    ("fast", "contrast"),
    ("fast", "logprob"),
    ("fast_mlp", "logit"),
]
LAYER_SPLITS = (0, 0.25, 0.5, 0.75, 1.0)  # from_layer as a share of L - 1: the cost of the layer split (logit)


@dataclass(frozen=True)
class CostSettings(Validated):
    sizes: tuple[int, ...] = whole("sizes", 2, default=(640, 1280, 2560), each=True)
    repeats: int = whole("repeats", 1, default=5)

    @classmethod
    def quick(cls) -> CostSettings:
        return cls(sizes=(32,), repeats=1)


def title(settings: CostSettings) -> str:
    return f"counter-causal refresh cost / one plain forward over n tokens (median of {settings.repeats})"


def run(model_args: dict[str, Any], settings: CostSettings, emit: Callable[[str], None]) -> None:
    lm = load_model(**model_args)
    model, repeats = lm.model, settings.repeats
    text = long_document(lm.tokenizer, max(settings.sizes))
    all_ids = torch.tensor([lm.tokenizer(text, add_special_tokens=False)["input_ids"]])
    emit(f"{'n':>6} {'forward s':>10} {'all-logits s':>12} " + " ".join(f"{v + '/' + s:>17}" for v, s in CASES))
    for n in settings.sizes:
        ids = all_ids[:, :n]
        pos = torch.arange(n)[None]
        on_device = {"input_ids": ids.to(lm.device), "position_ids": pos.to(lm.device)}
        with torch.inference_mode():
            forward = median_seconds(partial(model, **on_device, logits_to_keep=1), repeats)
            all_logits = median_seconds(partial(model, **on_device), repeats)
        kv, hidden = causal_pass(model, ids, pos)
        cells = []
        for variant, score in CASES:
            score_once = partial(surprise_from_cache, model, kv, ids[0], pos[0], hidden, variant=variant, score=score)
            seconds = median_seconds(score_once, repeats)
            cells.append(f"{seconds / forward:>7.3f}x ({seconds / all_logits:.2f}x)")
        emit(f"{n:>6} {forward:>10.3f} {all_logits:>12.3f} " + " ".join(f"{c:>17}" for c in cells))
    _layer_split(model, all_ids, settings, emit)
    kv_bytes = sum(k.element_size() * k[0, :, 0].numel() * 2 for k, _ in kv)
    hidden_bytes = hidden.element_size() * hidden.shape[-1]
    emit("ratios: x plain forward (logits_to_keep=1), in brackets x forward computing all logits")
    emit(f"H^(L-1) buffer: {hidden_bytes} B/token vs K/V {kv_bytes} B/token = {100 * hidden_bytes / kv_bytes:.1f}%")


def _layer_split(
    model: torch.nn.Module, all_ids: torch.Tensor, settings: CostSettings, emit: Callable[[str], None]
) -> None:
    """Refresh cost of the full variant started at from_layer l (logit), as a ratio to l = 0: it should
    fall linearly with the layers re-run, L - l."""
    last = len(model.model.layers) - 1
    layers = list(dict.fromkeys(round(share * last) for share in LAYER_SPLITS))
    emit("layer split (score=logit): cost of from_layer=l / cost of from_layer=0 (the full variant)")
    emit(f"{'n':>6} " + " ".join(f"{'l=' + str(layer):>8}" for layer in layers))
    for n in settings.sizes:
        ids, pos = all_ids[:, :n], torch.arange(n)[None]
        times = []
        for layer in layers:
            kv, hidden = causal_pass(model, ids, pos, residual_layer=layer)
            score_once = partial(surprise_from_cache, model, kv, ids[0], pos[0], hidden, from_layer=layer)
            times.append(median_seconds(score_once, settings.repeats))
        emit(f"{n:>6} " + " ".join(f"{t / times[0]:>7.3f}x" for t in times))
