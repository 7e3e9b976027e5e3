"""A normal (non-editable) install works: the wheel ships every package and the schema, and runs.

Remote workers and containers install with ``pip install .``; a package the
wheel leaves out only shows there, as ``ModuleNotFoundError`` at run time.
The wheel is built here without build isolation (offline) and installed
with ``--no-deps`` into a folder of its own, which is put first on the path:
its ``orchestrator`` is the one imported, by this process's children and by
the Dask worker processes they spawn, while the dependencies come from the
test environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("orchestrator-*.whl")
    return built


def _packages_in_tree() -> set[str]:
    return {str(init.parent.relative_to(ROOT)).replace(os.sep, ".")
            for init in (ROOT / "orchestrator").rglob("__init__.py")}


def test_the_wheel_ships_every_package_and_the_schema_once(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in _packages_in_tree():
        assert f"{package.replace('.', '/')}/__init__.py" in names, f"the wheel lacks {package}"
    schemas = sorted(n for n in names if n.endswith(".schema.json"))
    published = ["run-report.schema.json", "spec.schema.json"]  # the run report's and the spec's
    assert schemas == [f"orchestrator/schemas/{name}" for name in published]
    for name in published:
        shipped = zipfile.ZipFile(wheel).read(f"orchestrator/schemas/{name}")
        assert shipped == (ROOT / "schemas" / name).read_bytes()
    # the repository keeps it once: no second copy (or link) inside the package
    assert not list((ROOT / "orchestrator").rglob("*.schema.json"))


@pytest.mark.cluster
def test_the_installed_wheel_runs_the_quickstart_and_prints_worker_commands(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                           "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    work = tmp_path / "work"
    work.mkdir()

    def orchestrate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=240)

    where = subprocess.run([sys.executable, "-c", "import orchestrator.execute.run as m; print(m.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr
    ran = orchestrate("run", str(ROOT / "examples" / "quickstart.yaml"), "--output-dir", str(work))
    assert ran.returncode == 0, ran.stderr
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=float)
    b = np.array([[1, 2], [3, 4], [5, 6]], dtype=float)
    np.testing.assert_array_equal(np.load(work / "results" / "quickstart.npy"), a @ b)
    commands = orchestrate("worker", str(ROOT / "examples" / "towers.yaml"), "--job", "localhost", "--task", "0",
                           "--dask-commands")
    assert commands.returncode == 0, commands.stderr
    assert "dask worker" in commands.stdout and "--name /job:localhost/replica:0/task:0/device:GPU:0" in commands.stdout


def test_no_stray_files_at_the_repository_root() -> None:
    """Files a stray shell redirect made (named after a diagnostic) were once committed here."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    at_root = [name for name in listed.stdout.splitlines() if "/" not in name]
    odd = [name for name in at_root if not all(c.isalnum() or c in "._-" for c in name.strip('"'))]
    assert not odd, f"stray files at the repository root: {odd}"
