"""The package's shape, read from its source with `ast` (nothing is imported or run):

(a) only kompute_dml/runtime/ imports kp, so everything that touches Vulkan has one owner;
(b) the import graph of kompute_dml has no cycle: imports point one way (ops -> runtime,
    device -> ops and runtime), so any module can be read, and imported, on its own;
(c) no module is over 400 lines.

Imports under `if TYPE_CHECKING:` are type annotations only and never run, so they are no
edges; imports inside functions run (late) and are edges like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "kompute_dml"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
MAX_LINES = 400

# Modules still over MAX_LINES, owned by other work in progress (each entry: why it is here).
# Expected to be empty; the lead removes an entry once its module is split.
LINE_LIMIT_EXCEPTIONS: dict[str, str] = {}

# Import edges (importer, imported) still forming a cycle, owned by other work in progress.
# Expected to be empty.
CYCLE_EXCEPTIONS: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement except those in the body of `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _imported_names(module: str) -> list[str]:
    """Fully qualified names of the modules `module` imports (absolute, any package)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    package = module if _is_package(module) else module.rpartition(".")[0]
    names: list[str] = []
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
            continue
        if node.level:
            base_parts = package.split(".")
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        # `from pkg import sub` imports the submodule pkg.sub where there is one; any other
        # name is read from pkg itself
        subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
        names.extend(subs)
        if len(subs) < len(node.names):
            names.append(base)
    return names


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _edges(module: str) -> set[str]:
    """The kompute_dml modules that importing `module` runs: each imported module, and the
    packages above it that are not packages above `module` itself (those are already being
    imported when `module` runs)."""
    own = set(_ancestors(module))
    out: set[str] = set()
    for name in _imported_names(module):
        if name not in MODULES:
            continue
        out.add(name)
        out.update(a for a in _ancestors(name) if a in MODULES and a not in own)
    out.discard(module)
    return out


def test_only_the_runtime_imports_kp():
    offenders = sorted(
        m for m in MODULES if not (m == f"{PACKAGE}.runtime" or m.startswith(f"{PACKAGE}.runtime."))
        and any(n == "kp" or n.startswith("kp.") for n in _imported_names(m))
    )
    assert offenders == [], f"only {PACKAGE}/runtime/ may import kp; also imported by {offenders}"


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_import_graph_has_no_cycle():
    graph = {m: {n for n in _edges(m) if (m, n) not in CYCLE_EXCEPTIONS} for m in MODULES}
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_cycle_finder_finds_a_cycle():
    """The check above can fail: a three-module circle is reported, a chain is not."""
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_runtime_sits_below_the_operators():
    """ops -> runtime, never the other way; device -> ops and runtime, never the other way."""
    runtime = {m for m in MODULES if m.startswith(f"{PACKAGE}.runtime")}
    for m in sorted(runtime):
        above = sorted(n for n in _edges(m) if n.startswith((f"{PACKAGE}.ops", f"{PACKAGE}.device", f"{PACKAGE}.memory",
                                                           f"{PACKAGE}.functional")) or n == PACKAGE)
        assert above == [], f"{m} imports {above}: the runtime must not depend on what is built on it"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_length(module):
    lines = len(MODULES[module].read_text().splitlines())
    if module in LINE_LIMIT_EXCEPTIONS:
        pytest.skip(f"{module}: {lines} lines, listed in LINE_LIMIT_EXCEPTIONS ({LINE_LIMIT_EXCEPTIONS[module]})")
    assert lines <= MAX_LINES, f"{MODULES[module]} has {lines} lines (at most {MAX_LINES}): split it"


def test_exceptions_are_still_needed():
    """An allow-list entry that no longer applies is removed, not kept."""
    for module in LINE_LIMIT_EXCEPTIONS:
        assert module in MODULES and len(MODULES[module].read_text().splitlines()) > MAX_LINES, module
    for importer, imported in CYCLE_EXCEPTIONS:
        assert imported in _edges(importer), (importer, imported)


def test_every_package_is_installed():
    """pyproject.toml lists the packages setuptools installs: every package of kompute_dml is there
    (an editable install finds a missing one by path; a wheel would lack it)."""
    import tomllib

    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {m for m in MODULES if _is_package(m)}
    assert sorted(packages - listed) == []
