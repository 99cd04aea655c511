"""The project speaks of itself alone: no text of the tree points at its issue tracker, at reviews of its work or
at the tools of the machines it is built on. A reader of the code, the docs or the app cannot follow such a
pointer; git history may keep them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READ = ["README.md", "app.py", "docs", "ccviz", "pages", "tests", "scripts"]
SUFFIXES = {".md", ".py", ".sh", ".toml", ".txt", ".json"}
POINTERS = re.compile(
    "|".join(
        [
            r"\bissues? #?\d+",  # a tracker's numbers
            r"\bthe issue\b",  # "the wording", "when the issue was filed"
            r"\b(?:the|its) review\b",  # a review of the work, as if the reader had it
            "farm" + r"-(?:bench|studio)",  # the tools of our machines
        ]
    ),
    re.IGNORECASE,
)


def _texts() -> list[Path]:
    found = []
    for name in READ:
        path = ROOT / name
        found += [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES]
    here = Path(__file__).resolve()  # the one file that must spell them
    return [path for path in found if path.is_file() and "__pycache__" not in path.parts and path != here]


def test_no_text_points_outside_the_project():
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}"
        for path in _texts()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
        for match in POINTERS.finditer(line)
    ]
    assert not hits, "\n".join(hits)


def test_the_pattern_finds_what_it_is_for():
    pointing = ["as issue 11 asks", "Issue #25 reported", "the issue's wording", "its review adds", "farm" + "-bench"]
    for text in pointing:
        assert POINTERS.search(text), text
    for text in ["review the budget", "Dr. Lee reviewed the scan", "an issue with the lock", "issued 3 keys"]:
        assert not POINTERS.search(text), text
