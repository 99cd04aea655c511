"""The limits of the app's runs, each read from one environment variable, so a lab can size them to its machine.

The defaults keep a 2-core machine answering in seconds and a day of classroom use within a few
hundred MB. A badly set variable is reported as a one-line error where the limit is used (the page shows it),
never as a crash at import (see :func:`ccviz.envvars.env_int`). The trace loader's own size limit,
``CCVIZ_MAX_TRACE_MB``, lives with the trace format (:mod:`ccviz.trace`).
"""

from __future__ import annotations

from ..envvars import env_int

MAX_TOKENS_ENV = "CCVIZ_MAX_TOKENS"
DEFAULT_MAX_TOKENS = (
    4096  # prompt + new tokens per run: bounds one run's time (SmolLM2 decodes ~25 tokens/s on 2 cores)
)
RESULT_CACHE_ENV = "CCVIZ_RESULT_CACHE"
DEFAULT_RESULT_CACHE = 32  # finished results kept per process; a trace of a 4k-token run is a few MB
ABANDON_ENV = "CCVIZ_ABANDON_SECONDS"
DEFAULT_ABANDON_SECONDS = 10  # a closed tab's run is stopped this long after its connection went


def max_tokens() -> int:
    """Prompt plus new tokens allowed in one run (``$CCVIZ_MAX_TOKENS``)."""
    return env_int(MAX_TOKENS_ENV, DEFAULT_MAX_TOKENS)


def result_cache_size() -> int:
    """Finished results kept per process (``$CCVIZ_RESULT_CACHE`` entries)."""
    return env_int(RESULT_CACHE_ENV, DEFAULT_RESULT_CACHE)


def abandon_seconds() -> int:
    """How long a run outlives its disconnected browser session (``$CCVIZ_ABANDON_SECONDS``; 0 = at once)."""
    return env_int(ABANDON_ENV, DEFAULT_ABANDON_SECONDS, minimum=0)
