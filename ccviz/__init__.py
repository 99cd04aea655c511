"""ccviz: an interactive laboratory for KV-cache eviction (counter-causal surprise and its baselines)."""

__version__ = "0.1.0"

from .engine import CacheSession, GenerationFailed, RunConfig, generate, run_generation  # noqa: E402
from .errors import CcvizError  # noqa: E402
from .models import LoadedModel, load_model  # noqa: E402
from .policies import POLICIES, Policy, make_policy  # noqa: E402
from .trace import Trace  # noqa: E402

__all__ = [
    "POLICIES",
    "CacheSession",
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
    "run_generation",
]
