"""The CUDA path, for a machine with a GPU (marker ``cuda``; skipped without one): ``bash scripts/gpu_check.sh``
runs exactly these and prints one summary line.

What they check: the engine's ``full`` policy reproduces ``model.generate`` on the GPU; counter-causal scores
of a bf16 model on the GPU keep what float32 on the CPU keeps (kept-set overlap >= 0.9 at J = n/4 and n/2,
Spearman rank correlation >= 0.98; bf16 on the CPU measured 0.99-1.0 and 0.999 on this document); a policy of
each kind runs on the GPU; one app job runs through the model worker on the GPU (``CCVIZ_DEVICE=cuda``).
"""

import pytest
import torch
from engine_support import LONG_PROMPT, PROMPTS, generated_ids

from ccviz import RunConfig, generate, load_model
from ccviz.policies.counter_causal.surprise import counter_causal_surprise
from ccviz.prompts import encode_prompt

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bash scripts/gpu_check.sh on one)"),
]
KINDS = ["sliding", "h2o", "snapkv", "kvzip", "expected_attention", "counter_causal", "counter_causal_fast"]
OVERLAP, SPEARMAN = 0.9, 0.98  # the stated tolerance of bf16 on the GPU against float32 on the CPU
DEVICE = "cuda"


@pytest.fixture(scope="module")
def smollm_cuda():
    return load_model(device=DEVICE, dtype="float32")


@pytest.fixture(scope="module")
def smollm_bf16():
    return load_model(device=DEVICE, dtype="bfloat16")


@pytest.mark.parametrize("prompt", PROMPTS[::2], ids=["short", "long"])
def test_full_matches_generate_on_cuda(smollm_cuda, prompt):
    ids = encode_prompt(smollm_cuda.tokenizer, prompt, chat=True).ids
    with torch.inference_mode():
        reference = smollm_cuda.model.generate(
            torch.tensor([ids], device=DEVICE),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=DEVICE),
            max_new_tokens=24,
            do_sample=False,
        )[0, len(ids) :].tolist()
    trace = generate(smollm_cuda, prompt, policy="full", cache_size=64, max_new_tokens=24)
    assert generated_ids(trace) == reference


def _ranks(scores: torch.Tensor) -> torch.Tensor:
    return scores.argsort().argsort().float()


@pytest.mark.parametrize("variant, score", [("full", "logprob"), ("fast", "logit")])
def test_counter_causal_in_bf16_on_cuda_keeps_what_float32_on_the_cpu_keeps(smollm, smollm_bf16, variant, score):
    ids = torch.tensor([encode_prompt(smollm.tokenizer, LONG_PROMPT, chat=True).ids])
    cpu = counter_causal_surprise(smollm.model, ids, variant=variant, score=score)
    gpu = counter_causal_surprise(smollm_bf16.model, ids, variant=variant, score=score)
    finite = torch.isfinite(cpu)
    assert torch.equal(finite, torch.isfinite(gpu)) and gpu.dtype == torch.float32
    cpu, gpu = cpu[finite], gpu[finite]
    for J in (cpu.numel() // 4, cpu.numel() // 2):
        kept_cpu, kept_gpu = set(cpu.topk(J).indices.tolist()), set(gpu.topk(J).indices.tolist())
        assert len(kept_cpu & kept_gpu) >= OVERLAP * J, (J, len(kept_cpu & kept_gpu))
    assert torch.corrcoef(torch.stack([_ranks(cpu), _ranks(gpu)]))[0, 1] >= SPEARMAN


@pytest.mark.parametrize("policy", KINDS)
def test_a_policy_of_each_kind_runs_on_cuda(smollm_cuda, policy):
    trace = generate(smollm_cuda, LONG_PROMPT, policy=policy, cache_size=32, max_new_tokens=8, stop_at_eos=False)
    assert len(trace.cycles) > 3 and len(generated_ids(trace)) == 8
    assert all(len(cycle.kept) <= trace.config["frozen"] + 32 for cycle in trace.cycles)


def test_an_app_job_runs_through_the_worker_on_cuda(smollm_cuda, monkeypatch):
    """The worker process loads the model on the GPU (CCVIZ_DEVICE) and answers as the direct call does."""
    from ccviz.worker import ModelWorker
    from ccviz.worker.jobs import Job, ResultStore
    from ccviz.worker.tasks import RunTask

    monkeypatch.setenv("CCVIZ_DEVICE", DEVICE)
    config = RunConfig(policy="counter_causal_fast", cache_size=32, max_new_tokens=8)
    worker = ModelWorker(None)
    try:
        assert worker.wait_ready(300).ready, worker.status().message
        job = Job([RunTask(smollm_cuda.name, LONG_PROMPT, config)], worker, ResultStore()).start()
        assert job.wait(300) and job.errors == [], job.errors
    finally:
        worker.close()
    direct = generate(smollm_cuda, LONG_PROMPT, config)
    assert generated_ids(job.results[0]) == generated_ids(direct)
    assert [cycle.kept for cycle in job.results[0].cycles] == [cycle.kept for cycle in direct.cycles]
