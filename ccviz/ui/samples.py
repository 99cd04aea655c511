"""The sample documents shipped in ``assets/samples`` (listed, with their key phrase, question and expected answer,
in index.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "assets" / "samples"


@dataclass(frozen=True)
class Sample:
    title: str
    text: str
    key_phrase: str  # the fact to track on the Compare page
    chat: bool
    max_new_tokens: int
    question: str | None = None  # asked apart from the document (the Question box); None: the sample has none
    answer: str | None = None  # the expected answer (the Expected answer box): the run's verdict looks for it
    cache_size: int | None = None  # the J it demonstrates at (scripts/samples.py measured it there)
    models: tuple[str, ...] | None = None  # the models it was measured to demonstrate on; None: not measured

    def label(self, model: str) -> str:
        """Its title in the sample menu, marked when it was measured to demonstrate on other models only."""
        if self.models is None or model in self.models:
            return self.title
        return f"{self.title} (demonstrates on {', '.join(self.models) or 'no model'})"


def landing_sample(samples: list[Sample], model: str) -> Sample | None:
    """The sample a newcomer on ``model`` finds loaded: the first measured to demonstrate there (its question
    answered by the full cache, its policies split at its budget), so the first run shows eviction changing an
    answer. None when no sample was measured to demonstrate on ``model``."""
    return next((s for s in samples if s.cache_size is not None and s.models and model in s.models), None)


def load_samples(folder: Path = SAMPLES_DIR) -> list[Sample]:
    """Every sample listed in ``folder/index.json``, in its order."""
    entries = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    return [
        Sample(
            title=entry["title"],
            text=(folder / entry["file"]).read_text(encoding="utf-8"),
            key_phrase=entry["key_phrase"],
            chat=bool(entry["chat"]),
            max_new_tokens=int(entry["max_new_tokens"]),
            question=entry.get("question"),
            answer=entry.get("answer"),
            cache_size=entry.get("cache_size"),
            models=None if entry.get("models") is None else tuple(entry["models"]),
        )
        for entry in entries
    ]
