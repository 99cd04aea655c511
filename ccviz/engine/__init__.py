"""The engine: cache-managed generation with a refresh every h processed tokens.

- :mod:`.config`: :class:`RunConfig`, every setting of a run, validated and serialised once;
- :mod:`.session`: :class:`CacheSession`, the managed cache driven step by step (feed, refresh);
- :mod:`.recorder`: the trace of a session, loadable at every moment;
- :mod:`.sampling`: greedy or seeded sampling;
- :mod:`.loop`: :func:`generate`, a prefill-then-decode loop over a session.

The method it implements is described in docs/method.md.
"""

from .callbacks import GenerationFailed, ProgressCallback, RefreshCallback, StopCheck
from .config import RunConfig
from .loop import PreparedRun, generate, prepare, run_generation
from .session import CacheSession

__all__ = [
    "CacheSession",
    "GenerationFailed",
    "PreparedRun",
    "ProgressCallback",
    "RefreshCallback",
    "RunConfig",
    "StopCheck",
    "generate",
    "prepare",
    "run_generation",
]
