"""The rules the code's layout keeps (docs/architecture.md), checked on the source:
no import cycle, type-only and in-function imports included; no service imports
another service's package, and the gateway and `common` import none; modules stay
small enough to read at one sitting."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOT = REPO
PACKAGES = ("cli", "common", "gateway", "services")
SERVICES = ("admission", "runner", "journal", "delivery")

# Longer than this, a module holds more than one idea (split it).
MAX_LINES = 450
# Still longer, to be split: this list only shrinks.
LONG_MODULES: set[str] = set()
# Class names defined in two places, to be renamed: this list only shrinks.
SHARED_CLASS_NAMES: set[str] = set()


def source_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if path.name.endswith("_pb2.py") or path.name.endswith("_pb2_grpc.py"):
                continue
            if "templates" in parts or "migrations" in parts:  # a project's code, Alembic's
                continue
            yield path


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    name = "waybill." + ".".join(parts)
    return name.removesuffix(".__init__")


MODULES = {module_name(path): path for path in source_files()}


def imported(path: Path) -> set[str]:
    """Every module of ours `path` imports, wherever the import is: at the top, under
    `if TYPE_CHECKING:`, or inside a function (a lazy import is a dependency too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                found.add(whole if whole in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in MODULES}


GRAPH = {name: imported(path) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm,
    iterative: the graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_imports_itself_back() -> None:
    assert cycles(GRAPH) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def owner(module: str) -> str:
    """`admission`, `runner`... for a service's module, else its top package."""
    parts = module.split(".")
    return parts[2] if parts[1] == "services" and len(parts) > 2 else parts[1]


@pytest.mark.parametrize("package", [*SERVICES, "gateway", "common"])
def test_a_service_imports_no_other_service(package: str) -> None:
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if owner(module) == package
        for target in targets
        if owner(target) in SERVICES and owner(target) != package
    )
    assert crossing == []


def test_modules_stay_short() -> None:
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in MODULES.values()
        if path.relative_to(ROOT).parts[0] != "cli"  # a command's code, not a service's
    }
    too_long = sorted(path for path, lines in lengths.items() if lines > MAX_LINES)
    assert sorted(set(too_long) - LONG_MODULES) == [], "split these, or keep them short"
    assert sorted(LONG_MODULES - set(too_long)) == [], "short now: take them off the list"


def test_one_class_per_name() -> None:
    """A name a newcomer searches for leads to one class."""
    defined: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(name)
    shared = {cls for cls, where in defined.items() if len(where) > 1}
    assert sorted(shared - SHARED_CLASS_NAMES) == [], {c: defined[c] for c in shared}
    assert sorted(SHARED_CLASS_NAMES - shared) == [], "renamed: take them off the list"
