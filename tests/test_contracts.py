"""The import contracts say something: each one breaks on the import it forbids, and only it.

``.importlinter`` states the design (docs/architecture.md, "Layers and contracts"), and a
contract that stays green whatever is imported states nothing. So for each contract of
issue 27 this test copies the package into a temporary folder, appends one forbidden import
to one module, runs import-linter there with the project's ``.importlinter``, and checks that
exactly the contracts named are broken; the unmodified copy keeps them all. A copy, not the
checkout: the checkout is never written to.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".importlinter"

# contract id -> (module file under orchestrator/, the import appended to it, the contracts it breaks)
INJECTIONS: dict[str, tuple[str, str, set[str]]] = {
    # report reads execute's records and nothing else of execute (issue 27: this import kept all green)
    "report-reads-execute-records": (
        "report/sweeps.py", "from ..execute.stopping import Judge", {"report-reads-execute-records"}),
    # execute's front leads on to compile, runtime and cache: report-renders-records breaks with it
    "report-reads-execute-records, the front": (
        "report/text.py", "from ..execute import run_plan",
        {"report-reads-execute-records", "report-renders-records"}),
    # execute reaches compile through its front or its records (issue 27: this import kept all green)
    "execute-uses-compile-front": (
        "execute/run.py", "from ..compile.builder import GraphBuilder", {"execute-uses-compile-front"}),
    "execute-uses-compile-front, key naming": (
        "execute/loops.py", "from ..compile.dask_keys import choose_task_names", {"execute-uses-compile-front"}),
    # compile runs nothing; the pipeline's layers say so too, hence two broken
    "compile-knows-no-execute": (
        "compile/graph.py", "from ..execute.records import RunReport",
        {"compile-knows-no-execute", "pipeline"}),
    # execute's layers: a lower part never reaches up, records reads no part...
    "execute-inside, upwards": (
        "execute/stopping.py", "from .loops import StagedRun", {"execute-inside"}),
    "execute-inside, records": (
        "execute/records.py", "from .searches import fatal_sweeps", {"execute-inside"}),
    # ...and the parts of one layer are independent of each other
    "execute-inside, siblings": (
        "execute/rules.py", "from .searches import with_sweeps", {"execute-inside"}),
    # the loops and the cluster side of execute keep apart, even where the layers would let them meet
    "execute-loops-know-no-cluster": (
        "execute/loops.py", "from .cluster import dask_settings", {"execute-loops-know-no-cluster"}),
    "execute-cluster-knows-no-loops": (
        "execute/connect.py", "from .training import TrainingLoop", {"execute-cluster-knows-no-loops"}),
}


def _contract_ids() -> dict[str, str]:
    """Each contract's name, as lint-imports prints it, to its id in ``.importlinter``: every contract
    whose type the installed import-linter has (``make test-lowest`` installs import-linter 2.1,
    which has no ``protected`` contracts; ``make lint`` checks them all)."""
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    prefix = "importlinter:contract:"
    return {parser[section]["name"]: section[len(prefix):]
            for section in parser.sections() if section.startswith(prefix)
            and importlib.util.find_spec(f"importlinter.contracts.{parser[section]['type']}") is not None}


def _broken(tree: Path) -> tuple[set[str], set[str]]:
    """Run import-linter on the package copy in ``tree``: the ids of the contracts kept and broken."""
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "10000", "NO_COLOR": "1"}
    ids = _contract_ids()
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                               "sys.exit(lint_imports_command())",
         "--config", str(tree / ".importlinter"), "--no-cache",
         *(argument for contract in ids.values() for argument in ("--contract", contract))],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert "Analyzed" in done.stdout, done.stdout + done.stderr
    kept, broken = set(), set()
    for name, contract in ids.items():
        line = re.search(rf"^{re.escape(name)} (KEPT|BROKEN)", done.stdout, re.M)
        assert line, f"contract {contract!r} not in the output:\n{done.stdout}"
        (kept if line.group(1) == "KEPT" else broken).add(contract)
    assert (done.returncode == 0) == (not broken), done.stdout
    return kept, broken


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "orchestrator", tmp_path / "orchestrator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CONFIG, tmp_path / ".importlinter")
    return tmp_path


def test_the_package_as_it_is_keeps_every_contract(tree: Path) -> None:
    kept, broken = _broken(tree)
    assert broken == set()
    assert {case.split(",")[0] for case in INJECTIONS} <= kept


@pytest.mark.parametrize("case", sorted(INJECTIONS))
def test_a_forbidden_import_breaks_exactly_its_contract(tree: Path, case: str) -> None:
    module, line, expected = INJECTIONS[case]
    path = tree / "orchestrator" / module
    text = path.read_text(encoding="utf-8")
    assert line not in text  # the import is forbidden, so the package must not have it yet
    path.write_text(text + f"\n{line}  # injected by tests/test_contracts.py\n", encoding="utf-8")
    _, broken = _broken(tree)
    assert broken == expected
