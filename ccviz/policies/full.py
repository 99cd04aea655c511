from dataclasses import dataclass

from .base import Policy


@dataclass
class Full(Policy):
    """The reference ceiling: nothing is ever evicted."""

    name = "full"
    title = "Full cache"
    summary = "full cache, never evicts (the quality ceiling)"
    evicts = False
