"""The engine: cache-managed generation with a refresh every h processed tokens.

- :mod:`.config`: :class:`RunConfig`, every setting of a run, validated and serialised once;
- :mod:`.session`: :class:`CacheSession`, the managed cache driven step by step (feed, refresh);
- :mod:`.survivors`: who survives a refresh, every keep rule in one place (the rank cut, whole units,
  each layer's and KV head's own under a per-layer allocation);
- :mod:`.units`, :mod:`.allocation`: what a unit (word, sentence) is, and the budget per layer;
- :mod:`.recorder`: the trace of a session, loadable at every moment;
- :mod:`.reads`: the last layer's attention of each newest query over the cache, for ``record_reads``
  (what each generated token read) and the benchmarks' reading probe;
- :mod:`.sampling`: greedy or seeded sampling;
- :mod:`.loop`: :func:`generate`, a prefill-then-decode loop over a session.

The method it implements is described in docs/method.md.
"""

from .callbacks import GenerationFailed, Listeners, ProgressCallback, RefreshCallback, StopCheck
from .config import RunConfig
from .loop import PreparedRun, generate, prepare, run_generation
from .session import CacheSession

__all__ = [
    "CacheSession",
    "GenerationFailed",
    "Listeners",
    "PreparedRun",
    "ProgressCallback",
    "RefreshCallback",
    "RunConfig",
    "StopCheck",
    "generate",
    "prepare",
    "run_generation",
]
