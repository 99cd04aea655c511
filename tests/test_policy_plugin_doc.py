"""The plugin shown in docs/policies.md#adding-a-policy is complete: its exact text registers a policy that runs."""

import re
from pathlib import Path

import pytest
import torch

import ccviz
from ccviz import generate
from ccviz.policies import POLICIES
from ccviz.policies.counter_causal.surprise import causal_pass

DOC = Path(__file__).resolve().parents[1] / "docs" / "policies.md"


def _plugin_source() -> str:
    """The first Python block of the section "Adding a policy"."""
    section = DOC.read_text(encoding="utf-8").split("## Adding a policy", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


@pytest.fixture
def plugin():
    namespace: dict = {"__name__": "docs_plugin"}
    exec(compile(_plugin_source(), str(DOC), "exec"), namespace)
    yield namespace
    POLICIES.pop("key_norm", None)


def test_the_plugin_is_about_ten_lines():
    code = [line for line in _plugin_source().splitlines() if line.strip()]
    assert len(code) <= 14, "\n".join(code)
    assert "from ccviz import" in _plugin_source()
    assert hasattr(ccviz, "register_policy") and hasattr(ccviz, "Candidates")


def test_the_documented_plugin_registers_and_runs(plugin, tiny):
    assert POLICIES["key_norm"] is plugin["KeyNorm"]
    text = "The locker code is 4817. " * 6
    trace = generate(tiny, text, policy="key_norm", cache_size=16, chunk_size=8, max_new_tokens=4, chat=False)
    first = trace.cycles[0]
    assert trace.config["policy"] == "key_norm" and set(first.scores) == {"key_norm"}
    # Nothing is evicted before the first refresh: its scores are minus the key norms of the text's own causal pass.
    ids = torch.tensor([[tok.id for tok in trace.tokens[: first.step]]])
    kv, _ = causal_pass(tiny.model, ids, torch.arange(first.step)[None])
    expected = -kv[-1][0].float().norm(dim=-1).mean(dim=(0, 1))
    torch.testing.assert_close(torch.tensor(first.scores["key_norm"]), expected, rtol=1e-5, atol=1e-5)
    evicting = next(c for c in trace.cycles if len(c.candidates) > 16)
    scores = torch.tensor(evicting.scores["key_norm"])
    kept = torch.tensor([t in evicting.kept for t in evicting.candidates])
    assert int(kept.sum()) == 16 and scores[kept].min() >= scores[~kept].max()  # the 16 best survive
