"""The paper's method in one place: counter-causal surprise, computed over the cached keys and values with a
reversed mask (:mod:`.surprise`), and the two policies that evict by it (:mod:`.policy`)."""

from .policy import CounterCausal, CounterCausalFast, SurpriseScorer, smooth_scores

__all__ = ["CounterCausal", "CounterCausalFast", "SurpriseScorer", "smooth_scores"]
