"""The import graph of rulka/ (parsed, not executed): no import loops, and no role (server,
worker, trainer) importing another role. Function-level (lazy) imports count too: a loop hidden
in a function is still a loop."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "rulka"
ROLES = ("rulka.server", "rulka.worker", "rulka.trainer")


def module_files() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the rulka modules it imports. ``from pkg import sub`` counts as importing
    ``pkg.sub`` only (Python runs ``pkg/__init__`` first either way, but that is not a dependency
    of the importer on the package's other modules)."""
    files = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                subs = {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in files}
                deps.update(subs)
                if len(subs) < len(node.names):
                    deps.add(module)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def role_of(module: str) -> str | None:
    return next((r for r in ROLES if module == r or module.startswith(r + ".")), None)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports() -> None:
    graph = import_graph()
    assert "rulka.trainer.trainer" in graph["rulka.trainer.cli"]  # a function-level import counts
    assert "rulka.config.model" in graph["rulka.config.loader"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_loops() -> None:
    assert cycles(import_graph()) == []


def test_no_role_imports_another_role() -> None:
    crossing = [f"{m} -> {d}" for m, deps in import_graph().items() for d in deps
                if role_of(m) and role_of(d) and role_of(m) != role_of(d)]
    assert crossing == []


def test_shared_code_imports_no_role() -> None:
    """Only the command line (rulka.cli, ``rulka verify`` included) and the one-process mode
    (rulka.local) put roles together; everything else is shared by them."""
    composers = ("rulka.cli", "rulka.local")
    leaking = [f"{m} -> {d}" for m, deps in import_graph().items() for d in deps
               if role_of(d) and not role_of(m) and not m.startswith(composers) and m != "rulka"]
    assert leaking == []


def test_roles_stand_below_the_umbrella_command() -> None:
    """The umbrella ``rulka`` command launches the roles, so it stands above them: no module of a
    role imports ``rulka.cli``. What the roles and the umbrella share (run_main, setup_logging,
    priority, cores, following the launcher) is ``rulka.process``, which imports neither."""
    graph = import_graph()
    upward = [f"{m} -> {d}" for m, deps in graph.items() for d in deps
              if role_of(m) and (d == "rulka.cli" or d.startswith("rulka.cli."))]
    assert upward == []
    for role in ROLES:
        assert "rulka.process" in graph[f"{role}.cli"]
    assert not [d for d in graph["rulka.process"] if role_of(d) or d.startswith("rulka.cli")]
