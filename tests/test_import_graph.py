"""The project's modules import one another without circles, and the record schema stands alone.

Every ``.py`` file under the project's packages is parsed with :mod:`ast`; each ``import`` and
``from … import`` statement — at module level or inside a function, relative ones resolved
against the file's package — is an edge to the project module it names (``from pkg import name``
is an edge to ``pkg.name`` where that is a module, else to ``pkg``). Imports under
``if TYPE_CHECKING:`` are left out: they name a type for annotations and never run. A circle
among these edges is a pair of modules that can only be read (and imported) together.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("edgeserve", "mm_preproc", "sim", "tui", "models")
# its subcommands are loaded by name through importlib, which this graph does not see
DYNAMIC = {"edgeserve.cli.main"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Module name → file; a C extension is known by its stub (``.pyi``) and imports nothing."""
    mods = {}
    for pkg in PACKAGES:
        for f in sorted([*(ROOT / pkg).rglob("*.py"), *(ROOT / pkg).rglob("*.pyi")]):
            if "tiny-qwen2-vl" in f.parts or (f.suffix == ".pyi" and f.with_suffix(".py").exists()):
                continue
            mods[module_name(f)] = f
    return mods


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` (the file ``path``) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in modules:  # a name inside a module: the module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    tree = ast.parse(path.read_text(), str(path))
    type_only = {id(n) for block in ast.walk(tree) if _is_type_checking_block(block)
                 for stmt in block.body for n in ast.walk(stmt)}  # type: ignore[attr-defined]
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                add(full if full in modules else origin)
    return found


def _is_type_checking_block(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``if typing.TYPE_CHECKING:``)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) if path.suffix == ".py" else set()
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` as ``[a, b, …, a]``, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt, BLACK) == GREY:
                return [*stack[stack.index(nxt):], nxt]
            if colour.get(nxt) == WHITE and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        colour[node] = BLACK
        return None

    for node in sorted(graph):
        if colour[node] == WHITE and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_every_kind_of_import(tmp_path):
    graph = import_graph()
    assert "sim.core.device" in graph["sim.core.simulation"]  # module level
    assert "sim.core.step_engine" in graph["sim.core.simulation"]  # inside a method
    assert graph["sim"] >= {"sim.native", "sim.core.simulation"}
    assert "mm_preproc._fastpatch" in graph["mm_preproc.patchify"]  # a C extension, by its stub
    f = tmp_path / "c.py"
    f.write_text("from . import b\nfrom ..x import y\n\ndef f():\n    from .b import name\n")
    modules = {"a.p.c": f, "a.p.b": f, "a.x": f, "a.x.y": f, "a.p": f}
    assert imports_of("a.p.c", f, modules) == {"a.p.b", "a.x.y"}  # relative, resolved
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    graph = import_graph()
    for name in DYNAMIC:
        graph[name] = set()
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_records_imports_nothing_of_the_project():
    assert import_graph()["edgeserve.records"] == set()


def test_simulator_layers_import_downward():
    """scenario ← core ← fit ← experiments: a layer imports only the layers below it."""
    order = ["scenario", "core", "fit", "experiments"]
    for name, targets in import_graph().items():
        parts = name.split(".")
        if parts[0] != "sim" or len(parts) < 3 or parts[1] not in order:
            continue
        for t in targets:
            tp = t.split(".")
            if tp[0] == "sim" and len(tp) >= 2 and tp[1] in order:
                assert order.index(tp[1]) <= order.index(parts[1]), f"{name} imports {t}"
            if tp == ["sim"]:
                raise AssertionError(f"{name} imports the package root sim")
