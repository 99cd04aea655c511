"""The budget rule of every benchmark: a budget <= 1 is a share of the document's tokens, above 1 a fixed J.

Written once so that the harness (what J a cell runs at), its tables and charts (how a budget is
labelled) and the app (the needle generator's J) can never disagree about what a budget means.
"""

from __future__ import annotations

from ..errors import CcvizError


def is_share(budget: float) -> bool:
    """Whether ``budget`` is a share of the document (at most 1) rather than a fixed J."""
    return budget <= 1


def cache_size_for(budget: float, doc_tokens: int) -> int:
    """J for a budget: ``budget`` x the document's tokens (at least 1) for a share, else the fixed J itself."""
    return max(1, round(budget * doc_tokens)) if is_share(budget) else int(budget)


def check_budget(budget: float) -> None:
    """Refuse a budget above 1 that is not whole: a fixed J counts tokens."""
    if not is_share(budget) and not float(budget).is_integer():
        raise CcvizError(f"a budget is a share of the document (at most 1) or a whole J, got {budget}")


def budget_text(budget: float, share: str = "J={:.0%}", fixed: str = "J={:d}") -> str:
    """``budget`` in words: the ``share`` template for a share of the document, ``fixed`` (given the whole J)
    otherwise, e.g. ``J=25%`` or ``J=512``."""
    return share.format(budget) if is_share(budget) else fixed.format(int(budget))
