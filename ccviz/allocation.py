"""The allocation check at its old path, for :mod:`ccviz.engine.config` and :mod:`ccviz.bench.specs`; the
budget's split over layers and KV heads lives in :mod:`ccviz.engine.allocation`."""

from .engine.allocation import check_allocation

__all__ = ["check_allocation"]
