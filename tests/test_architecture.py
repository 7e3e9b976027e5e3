"""The package's shape: imports go down the layers, with no cycle, and compile needs no distributed.

docs/architecture.md: cli -> api -> report -> execute -> compile | cache ->
runtime -> plan -> spec -> ops -> the base. ``make lint`` checks the layer,
independence and home contracts with import-linter; this test checks the one
property every contract relies on — the import graph of ``orchestrator/``
has no cycle — by reading every module's imports with ``ast`` (imports
inside functions included: a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports (``from . import x`` resolves to the submodule when it is one)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # ``from pkg import sub`` depends on the submodule; ``from pkg import name`` on pkg itself
            targets = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in modules else prefix
                       for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {name: _imports(path, name, modules) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 30  # the walk really found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_compile_imports_without_distributed() -> None:
    """The compiler is a pure stage: importing it (and compiling a plan) loads no ``distributed``."""
    code = (
        "import sys\n"
        "import orchestrator.compile as c\n"
        "from orchestrator.api import plan_file\n"
        "plan = plan_file(sys.argv[1])\n"
        "graph = c.compile_plan(plan, c.CompileOptions('tok'))\n"
        "assert graph.tasks, 'nothing compiled'\n"
        "print(sorted(m for m in sys.modules if m == 'distributed' or m.startswith('distributed.')))\n"
    )
    spec = PACKAGE.parent / "examples" / "quickstart.yaml"
    done = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_only_execute_imports_distributed_and_only_the_cupy_backend_imports_cupy() -> None:
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for module in found:
                top = module.split(".")[0]
                if top == "distributed":
                    assert name.startswith("orchestrator.execute"), f"{name} imports {module}"
                if top == "cupy":
                    assert name == "orchestrator.runtime.backends.cupy", f"{name} imports {module}"
                if top == "yaml":
                    assert name == "orchestrator.spec.load.pyyaml", f"{name} imports {module}"
                if top == "jsonschema":
                    assert name == "orchestrator.jsonschemas", f"{name} imports {module}"
                if top == "rich":  # the terminal's progress view (lazily imported: a lazy import counts)
                    assert name == "orchestrator.cli.progress", f"{name} imports {module}"
                if top == "threadpoolctl":  # the workers' BLAS threads
                    assert name == "orchestrator.execute.processes", f"{name} imports {module}"


def _names_imported(path: Path, name: str, source: str) -> set[str]:
    """The names ``path`` imports from the package module ``source`` (``from .partition import x``)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)] if node.level else []
            module = ".".join(base + [node.module]) if node.level and node.module else (node.module or "")
            if module == source:
                found |= {alias.name for alias in node.names}
    return found


def test_partitions_and_loop_modes_are_decided_once_by_planning() -> None:
    """The plan carries them: memory, compile and the renderers read ``plan.partitions`` and
    ``plan.loop_mode``; only the planning stage (and the API composing it) calls the deciders."""
    graph = import_graph()
    assert "orchestrator.compile" not in graph["orchestrator.report"]  # report reads the plan, not the compiler
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    deciders = {"partition", "loop_mode", "gang_blocker", "plan_tasks"}
    callers = {name: sorted(_names_imported(path, name, "orchestrator.plan.partition") & deciders)
               for name, path in files.items()}
    assert {name: used for name, used in callers.items() if used} == {"orchestrator.api": ["plan_tasks"]}


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    """The house's size rule: a reader holds a module, or a function, in one view."""
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > 400:
            too_long.append(f"{path.relative_to(PACKAGE)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 60:
                    too_long.append(f"{path.relative_to(PACKAGE)}: {node.name} is {length} lines")
    assert too_long == []


def test_the_package_lists_as_the_pipeline() -> None:
    """The top of the tree: a package per stage, the entry points, the registries and the base; nothing loose."""
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert entries == sorted([
        "__init__.py", "__main__.py", "entry.py", "cli", "api.py",  # how users come in
        "spec", "plan", "compile", "execute", "runtime", "report", "cache",  # the stages
        "ops", "formats.py", "strategies.py", "backend_registry.py",  # what the spec language names
        "tracking",  # the metric sinks (--tensorboard, --mlflow) execute feeds
        "devices.py", "errors.py", "atomic.py", "perf.py", "paths.py", "jsonschemas.py",  # the base
    ])
