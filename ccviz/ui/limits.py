"""The app's upload limit, read from one environment variable (the runs' own limits are the scheduler's:
:mod:`ccviz.worker.limits`)."""

from __future__ import annotations

from ..envvars import env_int

MAX_UPLOAD_ENV = "CCVIZ_MAX_UPLOAD_KB"
DEFAULT_MAX_UPLOAD_KB = 512  # a document this size is ~130k tokens: far over the token limit anyway


def max_upload_bytes() -> int:
    """Largest document upload, in bytes (``$CCVIZ_MAX_UPLOAD_KB`` kilobytes)."""
    return 1024 * env_int(MAX_UPLOAD_ENV, DEFAULT_MAX_UPLOAD_KB)
