"""The documentation holds together: a short README with a short headline, links and anchors that resolve,
code that cites docs that exist, benchmark tables that are exactly what the harness's report prints, and
result numbers that are generated from the rows, never typed.

Fast and model-free. ``python tests/test_docs.py --write`` regenerates every generated section from the
result folders: the notebook's ``<!-- bench report ...: begin/end -->`` blocks, the results page's and the
README's ``<!-- results NAME: begin/end -->`` blocks, and the results page's lead chart.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
NOTEBOOK = DOCS / "notebook" / "readings.md"
RESULTS = DOCS / "results.md"
README_LIMIT = 12_000
HEADLINE_LINES = 8
GENERATED_PAGES = (RESULTS, README, DOCS / "policies.md")  # the pages with <!-- results NAME --> blocks
PAGE_LIMIT = 40_000  # the reader's pages: results.md and benchmarks.md
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
    return [README, *sorted(DOCS.rglob("*.md"))]


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
    from ccviz_bench.report import report_results
    from ccviz_bench.results import load_results

    return f"\n{report_results(load_results(ROOT / folder))}\n\n"


def test_benchmark_tables_are_the_report_of_the_committed_results():
    blocks = bench_reports(NOTEBOOK.read_text(encoding="utf-8"))
    assert DEFAULT_RESULTS in blocks, "docs/notebook/readings.md lost its <!-- bench report: begin --> ... end markers"
    for folder, body in blocks.items():
        assert (ROOT / folder).is_dir(), f"docs/notebook/readings.md reports {folder}, which does not exist"
        assert body == expected_report(folder), (
            f"the tables of {folder} in docs/notebook/readings.md are not what the report prints: "
            "run `python tests/test_docs.py --write` (never edit them by hand)"
        )


def write_reports() -> None:
    """Rewrite every generated block of docs/notebook/readings.md from its results folder."""
    text = NOTEBOOK.read_text(encoding="utf-8")

    def fill(match: re.Match) -> str:
        folder = match.group("folder")
        body = expected_report(folder.strip() or DEFAULT_RESULTS)
        return f"<!-- bench report{folder}: begin -->\n{body}<!-- bench report{folder}: end -->"

    NOTEBOOK.write_text(BLOCK.sub(fill, text), encoding="utf-8")


def digest_blocks() -> dict[str, str]:
    from ccviz_bench.digest import FOLDERS, PROSE_FOLDERS, blocks, load_digest

    return blocks(load_digest(ROOT, FOLDERS), load_digest(ROOT, PROSE_FOLDERS))


def digest_charts() -> dict[Path, str]:
    from ccviz_bench.digest import FOLDERS, charts, load_digest

    return charts(load_digest(ROOT, FOLDERS))


def test_results_and_headline_are_generated_from_the_rows():
    from ccviz_bench.digest import BLOCK as RESULTS_BLOCK
    from ccviz_bench.digest import filled

    generated = digest_blocks()
    for page in GENERATED_PAGES:
        text = page.read_text(encoding="utf-8")
        assert RESULTS_BLOCK.search(text), f"{page.name} lost its <!-- results NAME: begin --> ... end markers"
        assert text == filled(text, generated), (
            f"the results in {page.name} are not what the rows give: run `python tests/test_docs.py --write`"
        )
    for chart, svg in digest_charts().items():
        assert (ROOT / chart).read_text(encoding="utf-8") == svg, f"{chart} is not drawn from today's rows"


def _prose_outside_blocks(text: str) -> str:
    """``text`` without its generated blocks, code, comments, link targets, and names with digits (models, H2O)."""
    from ccviz_bench.digest import BLOCK as RESULTS_BLOCK

    text = RESULTS_BLOCK.sub("", text)
    for pattern in (FENCE, COMMENT, INLINE_CODE):
        text = pattern.sub("", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"SmolLM2-135M(?:-Instruct)?|Gemma 3 270M|H2O", "", text)


# What a measured result looks like in prose: a share, a multiple, a paired count, a p-value (not a threshold:
# "p < 0.05" is a rule), an AUC, "N of M".
RESULT_NUMBER = re.compile(
    r"\d+(?:\.\d+)?%|\b\d+(?:\.\d+)?x\b|\+\d+ / -\d+|\bp\s*(?:[=≤]\s*)?\d|\bAUC\s*\d|\b\d+ of \d+\b"
)
TYPED = "keeps 42% (+3 / -1, p 0.02) in 3 of 5, 1.5x <!-- results x: begin -->\n43%\n<!-- results x: end --> at J/4"


def test_no_result_number_is_typed_by_hand():
    """The results page has no number outside its generated blocks; the README and the policies page no
    measured result (settings and sizes stay: they are not measurements)."""
    assert RESULT_NUMBER.findall(_prose_outside_blocks(TYPED)) == ["42%", "+3 / -1", "p 0", "3 of 5", "1.5x"]
    assert re.findall(r"\S*\d\S*", _prose_outside_blocks(RESULTS.read_text(encoding="utf-8"))) == []
    for page in (README, DOCS / "policies.md"):
        found = RESULT_NUMBER.findall(_prose_outside_blocks(page.read_text(encoding="utf-8")))
        assert not found, f"{page.name} types measured results by hand: {found}; generate them or cite results.md"


def test_the_readers_pages_are_short_and_the_headline_too():
    from ccviz_bench.digest import BLOCK as RESULTS_BLOCK

    for page in (RESULTS, DOCS / "benchmarks.md"):
        assert len(page.read_text(encoding="utf-8").encode()) <= PAGE_LIMIT, f"{page.name} is over {PAGE_LIMIT} bytes"
    match = RESULTS_BLOCK.search(README.read_text(encoding="utf-8"))
    assert match and match.group("name") == "headline"
    lines = [line for line in match.group(0).splitlines()[1:-1] if line.strip()]
    assert len(lines) <= HEADLINE_LINES + 1, f"the README's headline has {len(lines) - 1} lines of text and a chart"


def write_results() -> None:
    """Rewrite the results page's and the README's generated blocks, and their charts, from the rows."""
    from ccviz_bench.digest import filled

    generated = digest_blocks()
    for page in GENERATED_PAGES:
        page.write_text(filled(page.read_text(encoding="utf-8"), generated), encoding="utf-8")
    for chart, svg in digest_charts().items():
        (ROOT / chart).write_text(svg, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_docs.py --write   (regenerates every generated section of the docs)")
    sys.path.insert(0, str(ROOT))
    write_reports()
    write_results()
    print("rewrote the generated sections of docs/notebook/readings.md, docs/results.md, README.md and the chart")
