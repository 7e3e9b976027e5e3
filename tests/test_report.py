"""Diagnostic renderers: text summaries, GitHub annotations (more in test_validate and test_plan_cli)."""

from __future__ import annotations

import io
from pathlib import Path

from orchestrator.cli import run_cli


SOFT_WARNING = """\
version: 1
cluster:
  jobs:
    localhost: {}
placement:
  soft: true
graph:
  - {name: a, op: ones, shape: [2], device: /gpu:0}
"""



def test_strict_summary_counts_warnings_as_failures(tmp_path: Path) -> None:
    spec = tmp_path / "soft.yaml"
    spec.write_text(SOFT_WARNING)
    out = io.StringIO()
    assert run_cli(["validate", str(spec)], out=out) == 0
    assert out.getvalue().splitlines()[-1] == "1 file checked: all valid, 1 warning"
    out = io.StringIO()
    assert run_cli(["validate", "--strict", str(spec)], out=out) == 1
    assert out.getvalue().splitlines()[-1] == "1 file checked: 1 invalid, 1 warning (--strict: they fail)"


def test_github_title_uses_the_yaml_path_form(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("version: 1\ngraph:\n  - {name: a, op: ones, shape: [2]}\n  - {name: c, op: add, inputs: [a, bb]}\n")
    out = io.StringIO()
    assert run_cli(["validate", "--format", "github", str(spec)], out=out) == 1
    assert "title=unknown-input at graph[1].inputs[1]::" in out.getvalue()


