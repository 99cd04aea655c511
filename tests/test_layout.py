"""The architecture, checked from the source: the engine's private names stay inside it, no imports go in circles, and
no module imports a layer above it."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "ccviz" / "engine"
SOURCES = sorted(
    path for folder in ("ccviz", "ccviz_bench", "pages", "scripts", "tests") for path in (ROOT / folder).rglob("*.py")
) + [ROOT / "app.py"]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _engine_private_names() -> set[str]:
    """Every private function, class, method and attribute the engine's modules define."""
    names = set()
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _private(node.id):
                names.add(node.id)
    return names


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import in the file, at any depth (lazy imports count too)."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((module, [alias.name for alias in node.names]))
    return found


def test_no_module_outside_the_engine_touches_a_private_engine_name():
    private = _engine_private_names()
    assert "_forward" in private and "_loop" in private  # the check sees what it guards
    offences = []
    for path in SOURCES:
        if ENGINE in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for module, names in _imports(path):
            if module == "ccviz.engine" or module.startswith("ccviz.engine."):
                offences += [
                    f"{path.relative_to(ROOT)}: imports {name} from {module}" for name in names if _private(name)
                ]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private:
                owner = node.value.id if isinstance(node.value, ast.Name) else ""
                if owner not in ("self", "cls"):
                    offences.append(f"{path.relative_to(ROOT)}:{node.lineno}: uses .{node.attr}")
    assert not offences, "\n".join(offences)


PACKAGES = ("ccviz", "ccviz_bench")  # the app's package and the benchmark harness that consumes it


def _graph() -> dict[str, set[str]]:
    """Module -> the ccviz (and harness) modules it imports (a package's ``__init__`` is the package's name)."""
    modules = {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for module, names in _imports(path):
            # "from .x import y" imports module x, or module x.y when y is a submodule
            submodules = {f"{module}.{n}" for n in names} & modules.keys()
            targets |= submodules or ({module} & modules.keys())
        graph[name] = targets - {name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import cycle met in a depth-first walk, written a -> b -> a."""
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target, [*stack, target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_import_cycles_between_ccviz_modules():
    graph = _graph()
    assert "ccviz.engine.session" in graph["ccviz.engine"]  # the walk sees the package's imports
    cycles = find_cycles(graph)
    assert not cycles, "\n".join(cycles)


def test_the_cycle_check_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == ["a -> b -> c -> a"]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


# ----- layers: what may import what --------------------------------------------------------------

# Each room of ccviz and the layer it sits in, bottom first. A module imports its own layer or the ones
# below, never one above (docs/architecture.md#layers).
LAYERS = {
    "errors": 0,
    "references": 0,
    "fields": 0,
    "choices": 0,
    "envvars": 0,
    "version": 0,
    "prompts": 0,
    "models": 0,
    "capture": 1,
    "cache": 1,
    "phrases": 1,
    "cases": 1,
    "policies": 2,
    "scoring": 2,  # the public name of counter-causal surprise, kept in policies/counter_causal/
    "plugins": 2,
    "engine": 3,
    "trace": 3,
    "explain": 4,
    "signals": 4,
    "figures": 5,
    "ccviz_bench": 5,  # the benchmark harness: consumes the core; only the CLI and the Benchmarks page import it
    "worker": 5,
    "ui": 6,
    "cli": 7,
    "__main__": 7,
    "ccviz": 7,
}
# Rooms of one layer that must still not reach each other.
FORBIDDEN = {
    ("worker", "ui"),
    ("worker", "ccviz_bench"),
    ("worker", "figures"),
    ("figures", "worker"),
    ("figures", "ccviz_bench"),
}
HARNESS_FRONT_ENDS = {"ccviz.cli", "ccviz.ui.bench_views"}  # the CLI's bench command and the Benchmarks page


def _room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "ccviz_bench":
        return "ccviz_bench"
    return parts[1] if len(parts) > 1 else "ccviz"


def test_only_the_cli_and_the_benchmarks_page_import_the_harness():
    graph = _graph()
    importers = {
        m for m, targets in graph.items() if m.startswith("ccviz.") and any(_room(t) == "ccviz_bench" for t in targets)
    }
    assert importers <= HARNESS_FRONT_ENDS, sorted(importers - HARNESS_FRONT_ENDS)
    assert "ccviz.ui.bench_views" in importers  # the walk sees the page's imports of the harness


def test_every_room_of_ccviz_has_a_layer():
    rooms = {_room(name) for name in _graph()}
    assert rooms <= LAYERS.keys(), sorted(rooms - LAYERS.keys())


def test_no_module_imports_a_layer_above_it():
    offences = []
    for module, targets in _graph().items():
        room = _room(module)
        for target in targets:
            other = _room(target)
            if LAYERS[other] > LAYERS[room] or (room, other) in FORBIDDEN:
                offences.append(
                    f"{module} ({room}, layer {LAYERS[room]}) imports {target} ({other}, layer {LAYERS[other]})"
                )
    assert not offences, "\n".join(offences)


def test_the_layer_check_finds_a_planted_upward_import(monkeypatch):
    planted = {**_graph(), "ccviz.engine.session": {"ccviz.ui.views"}, "ccviz.worker.tasks": {"ccviz.worker.jobs"}}
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda: planted)
    with pytest.raises(AssertionError, match="ccviz.engine.session .* imports ccviz.ui.views"):
        test_no_module_imports_a_layer_above_it()


def test_streamlit_is_imported_by_the_ui_and_the_pages_alone():
    offences = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "ccviz").rglob("*.py")
        if "ui" not in path.relative_to(ROOT / "ccviz").parts[:1]
        and any(module.split(".")[0] == "streamlit" for module, _ in _imports(path))
    ]
    assert not offences, offences


def test_no_test_module_imports_another_test_module():
    """Shared helpers live in the support modules (app_support, engine_support, references, conftest)."""
    offences = [
        f"{path.name} imports {module}"
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        for module, _ in _imports(path)
        if module.split(".")[0].startswith("test_")
    ]
    assert not offences, offences
