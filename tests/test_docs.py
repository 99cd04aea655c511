"""The documentation holds together: a short README, links and anchors that resolve, code that cites
docs that exist, and benchmark tables that are exactly what the harness's report prints.

Fast and model-free. ``python tests/test_docs.py --write`` regenerates the generated sections of
docs/benchmarks.md (between the ``<!-- bench report ...: begin/end -->`` markers) from the result folders.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks.md"
README_LIMIT = 12_000
DEFAULT_RESULTS = "bench/results"

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
CITATION = re.compile(r"docs/[A-Za-z0-9_./-]+\.md(?:#[A-Za-z0-9_-]+)?")
# A generated block names its results folder (relative to the repository) unless it is the published one.
BLOCK = re.compile(
    r"<!-- bench report(?P<folder>(?: [^\s:]+)?): begin -->\n(?P<body>.*?)<!-- bench report(?P=folder): end -->", re.S
)


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The text with code blocks, inline code and HTML comments removed (links there are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", COMMENT.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lowercased, punctuation other than '-' and '_'
    dropped, each space turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file; repeated headings get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(FENCE.sub("", COMMENT.sub("", path.read_text(encoding="utf-8")))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_target(source: Path, target: str, base: Path) -> str | None:
    """Why ``target`` (a relative path with an optional #anchor, as written in ``source``) does not resolve."""
    path_part, _, anchor = target.partition("#")
    path = (base / path_part).resolve() if path_part else source
    if not path.exists():
        return f"{source.relative_to(ROOT)}: {target}: no such file"
    if anchor:
        if path.suffix != ".md":
            return f"{source.relative_to(ROOT)}: {target}: anchors are checked in markdown files only"
        if anchor not in anchors(path):
            return f"{source.relative_to(ROOT)}: {target}: no heading with anchor #{anchor} in {path.relative_to(ROOT)}"
    return None


def test_readme_is_short():
    size = len(README.read_text(encoding="utf-8"))
    assert size <= README_LIMIT, (
        f"README.md has {size} characters; keep it under {README_LIMIT} and move detail into docs/"
    )


def test_slugs_follow_github():
    assert slug("Trace format (schema_version 1)") == "trace-format-schema_version-1"
    assert slug("Follow-up: four sinks frozen for every policy") == "follow-up-four-sinks-frozen-for-every-policy"
    assert slug("The README's screenshots") == "the-readmes-screenshots"
    assert slug("Step by step: `RunConfig` and CacheSession") == "step-by-step-runconfig-and-cachesession"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_images_resolve(path):
    problems = []
    for match in LINK.finditer(_prose(path.read_text(encoding="utf-8"))):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        problem = broken_target(path, target, path.parent)
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)


def test_docs_cited_in_code_exist():
    sources = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "ccviz").rglob("*.py"))]
    problems = []
    for source in sources:
        for citation in CITATION.findall(source.read_text(encoding="utf-8")):
            problem = broken_target(source, citation, ROOT)
            if problem:
                problems.append(problem)
    assert not problems, "\n".join(problems)


def bench_reports(text: str) -> dict[str, str]:
    """Results folder -> the generated text between its markers in ``text``."""
    return {(match.group("folder").strip() or DEFAULT_RESULTS): match.group("body") for match in BLOCK.finditer(text)}


def expected_report(folder: str) -> str:
    """What ``python -m ccviz bench report --out FOLDER`` prints for the tables (without redrawing charts),
    set off by blank lines so the markers never join a table."""
    from ccviz.bench.report import report_results
    from ccviz.bench.results import load_results

    return f"\n{report_results(load_results(ROOT / folder))}\n\n"


def test_benchmark_tables_are_the_report_of_the_committed_results():
    blocks = bench_reports(BENCHMARKS.read_text(encoding="utf-8"))
    assert DEFAULT_RESULTS in blocks, "docs/benchmarks.md lost its <!-- bench report: begin --> ... end markers"
    for folder, body in blocks.items():
        assert (ROOT / folder).is_dir(), f"docs/benchmarks.md reports {folder}, which does not exist"
        assert body == expected_report(folder), (
            f"the tables of {folder} in docs/benchmarks.md are not what the report prints: "
            "run `python tests/test_docs.py --write` (never edit them by hand)"
        )


def write_reports() -> None:
    """Rewrite every generated block of docs/benchmarks.md from its results folder."""
    text = BENCHMARKS.read_text(encoding="utf-8")

    def fill(match: re.Match) -> str:
        folder = match.group("folder")
        body = expected_report(folder.strip() or DEFAULT_RESULTS)
        return f"<!-- bench report{folder}: begin -->\n{body}<!-- bench report{folder}: end -->"

    BENCHMARKS.write_text(BLOCK.sub(fill, text), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(
            "usage: python tests/test_docs.py --write   (regenerates the bench report sections of docs/benchmarks.md)"
        )
    sys.path.insert(0, str(ROOT))
    write_reports()
    print(f"rewrote the generated sections of {BENCHMARKS.relative_to(ROOT)}")
