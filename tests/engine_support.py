"""What the engine's tests share: prompts, the ids transformers' own generate gives, a trace's generated ids
and its text without timings, and a strategy of hostile traces."""

import json
import math

import torch
from hypothesis import strategies as st

from ccviz import Trace
from ccviz.prompts import encode_prompt
from ccviz.trace import Cycle, TokenRecord

LONG_PROMPT = (
    "Summarise the following notes in two sentences. The committee met on Tuesday to review the budget "
    "for the new library wing. Construction costs rose by twelve percent because of steel prices, and the "
    "architect proposed replacing the glass atrium with a cheaper skylight. Several members objected, "
    "noting that the atrium was the main reason the city council approved the project. The treasurer "
    "suggested delaying the children's reading room by one year instead. After a long discussion the "
    "committee agreed to ask the council for a small supplementary grant and to postpone any decision "
    "about the atrium until the next meeting in March."
)


PROMPTS = ["What is the capital of France?", "Write a haiku about autumn leaves.", LONG_PROMPT]


def reference_ids(lm, prompt, max_new_tokens):
    ids = encode_prompt(lm.tokenizer, prompt, chat=True).ids
    with torch.inference_mode():
        out = lm.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
        )
    return out[0, len(ids) :].tolist()


def generated_ids(trace):
    return [tok.id for tok in trace.tokens if tok.source == "generated"]


def without_timings(trace) -> str:
    data = json.loads(trace.to_json())
    data["timings"] = {}
    for cycle in data["cycles"]:
        cycle["seconds"] = 0
    return json.dumps(data)


@st.composite
def traces(draw):
    n = draw(st.integers(1, 30))
    tokens = [
        TokenRecord(
            t=t,
            id=draw(st.integers(0, 50000)),
            text=draw(st.text(max_size=6)),
            source=draw(st.sampled_from(["prompt", "generated"])),
        )
        for t in range(n)
    ]
    cycles = []
    for index in range(draw(st.integers(0, 4))):
        candidates = sorted(draw(st.sets(st.integers(0, n - 1), max_size=n)))
        kept = sorted(draw(st.sets(st.integers(0, n - 1), max_size=n)))
        score = st.one_of(st.floats(allow_nan=False, width=32), st.just(math.inf), st.just(-math.inf))
        signals = draw(st.lists(st.sampled_from(["surprise", "recency", "attention_last"]), unique=True, max_size=2))
        scores = {name: [float(draw(score)) for _ in candidates] for name in signals}
        cycles.append(
            Cycle(
                index=index,
                step=draw(st.integers(1, n)),
                phase=draw(st.sampled_from(["prefill", "decode"])),
                candidates=candidates,
                kept=kept,
                scores=scores,
                seconds=draw(st.floats(0, 100, allow_nan=False)),
            )
        )
    return Trace(
        config={"policy": draw(st.text(max_size=10)), "cache_size": draw(st.integers(1, 100))},
        tokens=tokens,
        cycles=cycles,
        output_text=draw(st.text(max_size=20)),
        timings={"total_seconds": draw(st.floats(0, 1e6, allow_nan=False))},
        peak_cache_length=draw(st.integers(0, 1000)),
        status=draw(st.sampled_from(["complete", "cancelled", "error"])),
        stop_reason=draw(st.sampled_from(["eos", "max_new_tokens", "cancelled"])),
    )
