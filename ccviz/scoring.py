"""The public name of counter-causal surprise for scripts and notebooks (docs/cli-and-api.md): the code lives
with its policies, in :mod:`ccviz.policies.counter_causal.surprise`."""

from .policies.counter_causal.surprise import (
    causal_pass,
    causal_weights_received,
    counter_causal_surprise,
    counter_causal_weights,
    surprise_from_cache,
)

__all__ = [
    "causal_pass",
    "causal_weights_received",
    "counter_causal_surprise",
    "counter_causal_weights",
    "surprise_from_cache",
]
