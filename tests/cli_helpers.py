"""What the tests of hostile input and of outputs share: the repository's paths, the CLI in-process, writing specs."""

from __future__ import annotations

import io
import textwrap
import time
from glob import glob
from pathlib import Path

import pytest

from orchestrator.api import Checked, check_file
from orchestrator.cli import run_cli

ROOT = Path(__file__).resolve().parent.parent
INVALID = sorted(glob("specs/invalid/*.yaml", root_dir=ROOT))
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
HANG = 5.0  # seconds: generous; a refusal that takes longer is a hang, not slowness


@pytest.fixture
def at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def strict_file(path: str) -> bool:
    """Files whose point is a warning say ``# strict: true`` in their header."""
    for line in (ROOT / path).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            return False
        if line.strip() == "# strict: true":
            return True
    return False


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    code = run_cli(argv, out=out)
    captured = capsys.readouterr()
    return code, out.getvalue() + captured.out, captured.err


def timed_check(path: Path | str) -> tuple[Checked, float]:
    start = time.perf_counter()
    checked = check_file(path)
    return checked, time.perf_counter() - start


def codes(checked: Checked) -> list[str]:
    return [d.code for d in checked.diagnostics]


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path
