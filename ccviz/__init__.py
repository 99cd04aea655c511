"""ccviz: an interactive laboratory for KV-cache eviction (counter-causal surprise and its baselines)."""

from .cache import Candidates
from .engine import CacheSession, GenerationFailed, RunConfig, generate, run_generation
from .errors import CcvizError
from .models import LoadedModel, load_model
from .policies import POLICIES, Policy, make_policy, register_policy
from .trace import Trace
from .version import __version__

__all__ = [
    "POLICIES",
    "CacheSession",
    "Candidates",
    "CcvizError",
    "GenerationFailed",
    "LoadedModel",
    "Policy",
    "RunConfig",
    "Trace",
    "__version__",
    "generate",
    "load_model",
    "make_policy",
    "register_policy",
    "run_generation",
]
