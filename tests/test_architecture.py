"""The package's shape, read from its source with `ast` (nothing is imported or run):

(a) only kompute_dml/runtime/ imports kp, so everything that touches Vulkan has one owner;
(b) the import graph of kompute_dml has no cycle: imports point one way (ops -> runtime,
    device -> ops and runtime), so any module can be read, and imported, on its own;
(c) no module is over 400 lines;
(d) core/ sits at the bottom, and the top level stays a dozen entries.

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


ABOVE_RUNTIME = ("ops", "device", "functional", "onnx_backend", "cli", "bench")


def test_runtime_sits_below_the_operators():
    """ops -> runtime, never the other way; device -> ops and runtime, never the other way."""
    runtime = {m for m in MODULES if m.startswith(f"{PACKAGE}.runtime")}
    for m in sorted(runtime):
        above = sorted(n for n in _edges(m) if n.startswith(tuple(f"{PACKAGE}.{p}" for p in ABOVE_RUNTIME)) or n == PACKAGE)
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


def test_core_is_the_floor():
    """kompute_dml/core/ (types, errors, descriptions, the input rule, support tables) imports
    nothing else of the package: every other layer may use it."""
    for m in sorted(m for m in MODULES if m.startswith(f"{PACKAGE}.core")):
        above = sorted(n for n in _edges(m) if n.startswith(f"{PACKAGE}.") and not n.startswith(f"{PACKAGE}.core"))
        assert above == [], f"{m} imports {above}: core sits below everything"


def test_top_level_is_small():
    """The top level shows the architecture: a dozen entries or fewer (packages and modules)."""
    entries = sorted(p.name for p in ROOT.iterdir()
                     if p.name != "__pycache__" and (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())))
    assert len(entries) <= 12, entries


def _all_edges(module: str) -> set[str]:
    """_edges with the imports under `if TYPE_CHECKING:` too."""
    package = module if _is_package(module) else module.rpartition(".")[0]
    out = set(_edges(module))
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    return {n for n in out if n in MODULES and n != module}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


# Annotation-only imports (under `if TYPE_CHECKING:`) that close a circle: the lower module names
# a type of the module above it in a signature. Harmless at run time (they never run); listed so
# that a reader sees every circle, and so that a new one is a decision, not an accident.
_B = f"{PACKAGE}.onnx_backend"
# fusions.py's pattern modules: each checks chains against the prepared model (BackendRep) and runs
# them on a NodeContext, as fusions.Pattern's check and run are typed
_PATTERNS = tuple(m.rsplit(".", 1)[1] for m in MODULES if m.startswith(f"{_B}.fusion_") and m != f"{_B}.fusion_match")
TYPE_ONLY_CIRCLES = {
    (f"{PACKAGE}.device.memory", f"{PACKAGE}.device.device"): "a Buffer names the Device that owns it",
    (f"{PACKAGE}.device.recording", f"{PACKAGE}.device.device"): "a Recording names the Device it records on",
    (f"{PACKAGE}.ops", f"{PACKAGE}.device.device"): "compile_operator takes a Device",
    (f"{PACKAGE}.ops.gemm_coop", f"{PACKAGE}.ops.gemm"): "the tensor-core plan takes GEMM's descriptor",
    (f"{PACKAGE}.runtime.memory", f"{PACKAGE}.runtime.engine"): "DeviceMemory names its Engine",
    (f"{PACKAGE}.runtime.memory", f"{PACKAGE}.runtime.staging"): "DeviceMemory names the staging it reads through",
    (f"{PACKAGE}.runtime.staging", f"{PACKAGE}.runtime.memory"): "staging copies name DeviceMemory",
    (f"{PACKAGE}.runtime.deferred_writes", f"{PACKAGE}.runtime.memory"): "deferred copies name DeviceMemory",
    (f"{PACKAGE}.runtime.deferred_writes", f"{PACKAGE}.runtime.staging"): "deferred copies fill the staging slots",
    # the prepared model's parts are built by BackendRep's passes and take it as their argument
    **{(f"{_B}.{m}", f"{_B}.rep"): "built from the prepared model (BackendRep)"
       for m in ("cache_padding", "context", "device_graph", "fallback", "feeds", *_PATTERNS, "fusion_match", "fusions", "plan_context",
                 "product_groups", "step_reuse", "transfers")},
    (f"{_B}.step_reuse", f"{_B}.plan_context"): "a step is repeated through the plan's context",
    # handlers are typed by the context protocol that the executors implement
    **{(f"{_B}.{m}", f"{_B}.context"): "handlers take a NodeContext"
       for m in (*_PATTERNS, "fusions", "half_precision", "product_groups",
                 # handlers.py and the handler modules some module on a circle imports by name (handlers.py
                 # finds every handler module's table at import: edges this static graph does not see)
                 "handlers", "handlers_activation", "handlers_conv", "handlers_integer", "handlers_math", "handlers_nn",
                 "handlers_pool", "handlers_values")},
    (f"{_B}.transfers", f"{_B}.run_state"): "value transfers write the run's RunState",
}


def test_type_only_circles_are_listed():
    graph = {m: _all_edges(m) for m in MODULES}
    found = {(a, b) for a in MODULES for b in graph[a] - _edges(a)
             if _reaches(graph, b, a)}
    assert sorted(found) == sorted(TYPE_ONLY_CIRCLES)
