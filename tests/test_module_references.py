"""Every module the package's docstrings and the docs cite exists, and so does what they cite in it.

Modules move and split; a docstring that still says ``orchestrator.plan.strategies`` or
``:mod:`.partitions``` sends the reader to nothing. This test finds the citations and
resolves each against the package as it is:

* Sphinx roles in docstrings (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ...): an
  absolute target (``orchestrator.x.y``), one relative to the module's package (``.x``),
  a stage-rooted one (``plan.records.Plan``) or a bare name of the module or its classes;
* dotted names rooted at the package or one of its top-level modules (``execute.loops``,
  ``orchestrator.spec.scopes``, ``builder``-free: ``compile.builder.thread_slots``), in
  docstrings and in docs/*.md: the longest prefix that is a module must exist,
  and the rest must be attributes of it. ``plan.x`` and ``spec.x`` may also be the field
  of a ``Plan`` or ``Spec`` value (``plan.partitions``), as the docs write them;
* paths of the package's files (``spec/scopes.py``, ``entry.py``) must be files (a bare
  ``name.py`` only where ``name`` is one of the package's top-level names: ``yaml.py`` is not ours).

A file name such as ``run.json`` or ``spec.yaml`` is a file the user has, not a module.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

from orchestrator.plan.records import Plan
from orchestrator.spec.records import Spec

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "orchestrator"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
TOPS = sorted({name.split(".")[1] for name in FILES if name.count(".") >= 1} - {"__main__"}, key=len, reverse=True)
# files a user has or the run writes, named like modules: never citations
USER_FILES = ("json", "yaml", "yml", "md", "html", "npz", "svg", "png", "txt", "csv", "toml", "sarif", "lock", "dot")
# plan.x and spec.x in prose are often the field of a value of that record
VALUES = {"plan": Plan, "spec": Spec}

DOTTED = re.compile(r"(?<![\w./:-])((?:orchestrator\.)?(?:%s)(?:\.[A-Za-z_]\w*)+)(?![\w/-])" % "|".join(TOPS))
PATH = re.compile(r"(?<![\w./-])((?:orchestrator/|(?:{0})/)(?:\w+/)*\w+\.py|(?:{0})\.py)\b".format("|".join(TOPS)))
ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`~?([^`<>]+?)`")


def _resolves(name: str) -> bool:
    """``name`` (absolute) is a module of the package, or an attribute chain of one."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in FILES:
            break
    else:
        return False
    target: object = importlib.import_module(".".join(parts[:end]))
    for attribute in parts[end:]:
        if not hasattr(target, attribute):
            fields = getattr(target, "__dataclass_fields__", {})
            if attribute not in fields:
                return False
            return len(parts) == end + parts[end:].index(attribute) + 1  # a field ends the chain
        target = getattr(target, attribute)
    return True


def _dotted_ok(ref: str) -> bool:
    if ref.rsplit(".", 1)[1] in (*USER_FILES, "py"):  # a file; PATH checks the package's own
        return True
    name = ref if ref.startswith("orchestrator.") else "orchestrator." + ref
    if _resolves(name):
        return True
    head, _, rest = ref.partition(".")
    record = VALUES.get(head)
    return record is not None and (hasattr(record, rest.split(".")[0])
                                   or rest.split(".")[0] in record.__dataclass_fields__)


def _path_ok(ref: str) -> bool:
    relative = ref.removeprefix("orchestrator/")
    return (PACKAGE / relative).is_file()


def _role_ok(target: str, module: str, classes: list[str]) -> bool:
    is_package = FILES[module].name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    if target.startswith("orchestrator."):
        return _resolves(target)
    if target.startswith("."):
        return _resolves(package + target) or _resolves(module + target)
    head = target.split(".")[0]
    if "." in target and head not in TOPS:
        try:
            importlib.import_module(head)  # another library's name (``dask.delayed``): not ours to check
            return True
        except ImportError:
            pass
    candidates = [f"{module}.{target}", f"{package}.{target}", f"orchestrator.{target}"]
    candidates += [f"{module}.{cls}.{target}" for cls in classes]
    return any(_resolves(candidate) for candidate in candidates)


def _docstrings() -> Iterator[tuple[str, str, str, list[str]]]:
    """(where, module, docstring, the classes whose members a bare name may be) for every docstring."""
    for module, path in sorted(FILES.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node, clean=False)
                if text:
                    yield f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", module, text, classes


def _prose_problems(where: str, text: str) -> list[str]:
    found = [f"{where}: {ref}" for ref in DOTTED.findall(text) if not _dotted_ok(ref)]
    return found + [f"{where}: {ref}" for ref in PATH.findall(text) if not _path_ok(ref)]


def test_every_module_a_docstring_cites_exists() -> None:
    problems: list[str] = []
    for where, module, text, classes in _docstrings():
        problems += [f"{where}: {target}" for target in ROLE.findall(text) if not _role_ok(target.strip(), module, classes)]
        problems += _prose_problems(where, ROLE.sub("", text))
    assert problems == []


def test_every_module_the_docs_cite_exists() -> None:
    """docs/architecture.md above all, and every other page: a ``python`` block is an example of
    the user's code (a backend of theirs), not a citation."""
    problems: list[str] = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        example = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                example = line.strip() == "```python"
            elif not example:
                problems += _prose_problems(f"docs/{page.name}:{number}", line)
    assert problems == []


def test_every_stage_package_opens_with_the_stage_it_is() -> None:
    """The numbered stages of docs/architecture.md's tree (``spec/ 1. file -> Spec``) open with
    "Stage N, "; the cache and the command line with where they stand beside them."""
    tree = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    numbers = dict(re.findall(r"^  (\w+)/\s+(\d)\. ", tree, re.M))
    assert set(numbers) == {"spec", "plan", "compile", "execute", "runtime", "report"}
    openings = {"cache": "Beside the stages, ", "cli": "Above the stages, ",
                **{stage: f"Stage {number}, " for stage, number in numbers.items()}}
    wrong = {}
    for stage, opening in openings.items():
        doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text(encoding="utf-8"))) or ""
        if not doc.startswith(opening):
            wrong[stage] = doc.splitlines()[0] if doc else "(no docstring)"
    assert wrong == {}


def test_the_checker_finds_what_is_gone() -> None:
    assert not _dotted_ok("orchestrator.plan.strategies")  # moved to orchestrator.strategies
    assert not _dotted_ok("execute.nowhere")
    assert not _dotted_ok("compile.builder.no_such_function")
    assert not _role_ok(".partitions", "orchestrator.runtime", [])
    assert not _path_ok("cli.py")  # cli is a package
    assert _dotted_ok("orchestrator.strategies.STRATEGIES") and _dotted_ok("spec.scopes")
    assert _dotted_ok("plan.packing") and _dotted_ok("run.json") and _path_ok("spec/scopes.py")
    assert _role_ok(".device", "orchestrator.runtime", []) and _role_ok("~orchestrator.plan.records.Plan".lstrip("~"),
                                                                        "orchestrator.runtime", [])
