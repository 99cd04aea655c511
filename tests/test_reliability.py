"""Reliability: determinism, concurrent runs on the shared model, hostile numbers and text."""

import json
import threading

import pytest
from engine_support import without_timings

from ccviz import POLICIES, CcvizError, GenerationFailed, Trace, generate
from ccviz.policies.sliding import Sliding
from ccviz.prompts import encode_prompt

DOC = (
    "Meeting notes, 14 March. Present: Ana, Bo, Chidi. The vendor contract renews on 1 June; Bo will ask for "
    "a ten percent discount. The staging server moves to the new rack next week. Ana reported that the "
    "backup job failed twice because the disk was full. The access code for the archive room is 7310. "
    "Chidi will draft the hiring plan. Next meeting on 28 March. What is the archive room's access code?"
)


@pytest.mark.parametrize("policy", sorted(name for name in POLICIES if name != "full"))
def test_same_config_and_seed_give_identical_traces(tiny, policy):
    kwargs = dict(policy=policy, cache_size=16, chunk_size=4, max_new_tokens=10, do_sample=True, seed=7, top_p=0.9)
    assert without_timings(generate(tiny, DOC, **kwargs)) == without_timings(generate(tiny, DOC, **kwargs))


def test_concurrent_runs_match_runs_alone(smollm):
    """Three runs on the one shared model at the same moment give what each gives alone."""
    configs = [
        dict(policy="sliding", cache_size=32),
        dict(policy="counter_causal_fast", cache_size=24, policy_options={"score": "contrast"}),
        dict(policy=next(p for p in ("h2o", "counter_causal") if p in POLICIES), cache_size=40),
    ]
    alone = [without_timings(generate(smollm, DOC, max_new_tokens=8, **c)) for c in configs]
    results: list = [None] * len(configs)
    barrier = threading.Barrier(len(configs))

    def work(i):
        barrier.wait()
        results[i] = without_timings(generate(smollm, DOC, max_new_tokens=8, **configs[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(configs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert results == alone


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(cache_size=-3), "cache size J must be at least 1"),
        (dict(cache_size=2.5), "cache size J must be a whole number"),
        (dict(cache_size="8"), "cache size J must be a whole number"),
        (dict(cache_size=True), "cache size J must be a whole number"),
        (dict(cache_size=8, chunk_size=-1), "chunk size h must be at least 1"),
        (dict(cache_size=8, chunk_size=16), "must not exceed the cache size"),
        (dict(cache_size=8, frozen=-1), "frozen must be at least 0"),
        (dict(cache_size=8, frozen=10**6), "larger than the prompt"),
        (dict(cache_size=8, frozen=1.5), "frozen must be a whole number"),
        (dict(cache_size=8, recent=-2), "recent must be at least 0"),
        (dict(cache_size=8, recent=9), "must not exceed the cache size"),
        (dict(cache_size=8, max_new_tokens=0), "max new tokens must be at least 1"),
        (dict(cache_size=8, max_new_tokens=10**9), "exceeds the model's"),
        (dict(cache_size=8, policy_options={"min_gap": -1}), "min_gap"),
        (dict(cache_size=8, policy_options={"min_gap": 0.5}), "min_gap"),
        (dict(cache_size=8, policy_options={"smooth": -4}), "smooth"),
        (dict(cache_size=8, policy_options={"colour": "red"}), "has no option 'colour'"),
        (dict(cache_size=8, do_sample=True, temperature=0), "temperature"),
        (dict(cache_size=8, do_sample=True, top_p=1.5), "top-p"),
        (dict(cache_size=8, seed=-1), "seed must be at least 0"),
    ],
)
def test_bad_numbers_get_clear_messages(tiny, kwargs, message):
    with pytest.raises(CcvizError, match=message):
        generate(tiny, DOC, policy="counter_causal_fast", **kwargs)


@pytest.mark.parametrize("prompt", ["", "   \n\t ", None])
def test_empty_prompts(tiny, prompt):
    with pytest.raises(CcvizError, match="prompt is empty"):
        generate(tiny, prompt, policy="sliding", cache_size=8)


def test_control_characters_and_markup_pass_through_as_text(tiny):
    text = "<script>alert('x')</script>\x00\x07\x1b[31m bold </b> &amp; \u202e reversed"
    trace = generate(tiny, text, policy="sliding", cache_size=8, max_new_tokens=3)
    prompt_text = "".join(tok.text for tok in trace.tokens if tok.source == "prompt")
    assert "<script>alert('x')</script>" in prompt_text
    assert json.loads(trace.to_json())["tokens"]  # still valid, strict JSON


class _BreaksAt(Sliding):
    """A sliding window whose refresh number ``fail_at`` raises (a plain subclass: used in this process only)."""

    name = "sliding"  # not registered: passed to generate as an instance

    def __init__(self, fail_at: int):
        self.fail_at, self.calls = fail_at, 0

    def score_candidates(self, model, candidates):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("injected failure")
        return super().score_candidates(model, candidates)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_a_run_that_fails_keeps_a_loadable_trace_of_every_token_so_far(tiny, tmp_path, phase):
    n_prompt = len(encode_prompt(tiny.tokenizer, DOC, chat=True).ids)
    fail_at = 3 if phase == "prefill" else n_prompt // 4 + 3  # at h = 4, refresh k comes after 4k tokens
    with pytest.raises(GenerationFailed) as err:
        generate(tiny, DOC, policy=_BreaksAt(fail_at), cache_size=8, chunk_size=4, max_new_tokens=40, stop_at_eos=False)
    partial = err.value.trace
    assert partial.status == "error" and "injected failure" in partial.error and len(partial.cycles) == fail_at - 1
    assert len(partial.tokens) >= 4 * fail_at and [tok.t for tok in partial.tokens] == list(range(len(partial.tokens)))
    assert (partial.prompt_length < len(partial.tokens)) == (phase == "decode")  # generated tokens are kept too
    assert partial.timings["total_seconds"] > 0
    partial.save(tmp_path / "partial.json")
    loaded = Trace.load(tmp_path / "partial.json")
    assert loaded.cycles == partial.cycles and loaded.tokens == partial.tokens and loaded.status == "error"


def test_on_refresh_streams_a_loadable_partial_trace_at_every_refresh(tiny):
    seen: list[tuple[int, int]] = []
    n_prompt = len(encode_prompt(tiny.tokenizer, DOC, chat=True).ids)

    def on_refresh(trace: Trace) -> None:
        Trace.from_json(trace.to_json())  # loadable as it stands
        assert (
            trace.config["prompt_tokens"] == n_prompt
        )  # from the first refresh on (the worker streams the config then)
        seen.append((len(trace.cycles), len(trace.tokens)))
        assert len(trace.tokens) == trace.cycles[-1].step  # every token up to the refresh, none beyond

    final = generate(tiny, DOC, policy="sliding", cache_size=8, chunk_size=4, max_new_tokens=10, on_refresh=on_refresh)
    assert [n for n, _ in seen] == list(range(1, len(final.cycles) + 1))
    assert len(final.tokens) >= seen[-1][1]
