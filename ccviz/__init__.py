"""ccviz: an interactive laboratory for KV-cache eviction (counter-causal surprise and its baselines)."""

__version__ = "0.1.0"

from .engine import GenerationFailed, generate  # noqa: E402
from .errors import CcvizError  # noqa: E402
from .models import LoadedModel, load_model  # noqa: E402
from .policies import POLICIES, Policy, make_policy  # noqa: E402
from .trace import Trace  # noqa: E402

__all__ = [
    "POLICIES",
    "CcvizError",
    "GenerationFailed",
    "LoadedModel",
    "Policy",
    "Trace",
    "__version__",
    "generate",
    "load_model",
    "make_policy",
]
