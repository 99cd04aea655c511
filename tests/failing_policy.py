"""A test plugin (``CCVIZ_PLUGINS=failing_policy``): a sliding window that raises at a chosen refresh.

It breaks runs on purpose where the app runs them, in the model worker process, which a monkeypatch
in the test process cannot reach.
"""

from dataclasses import dataclass

import torch

from ccviz.cache import Candidates
from ccviz.policies import register_policy
from ccviz.policies.sliding import Sliding


@register_policy
@dataclass
class BreaksAtRefresh(Sliding):
    """Sliding window whose ``fail_at``-th refresh raises (0: never)."""

    name = "breaks_at_refresh"
    summary = "test only: a sliding window that raises at refresh number fail_at (0: never)"
    fail_at: int = 0

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == self.fail_at:
            raise RuntimeError("injected failure")
        return super().score_candidates(model, candidates)
