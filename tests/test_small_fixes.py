"""Regression tests for details found in review: strict summaries, annotation paths, file modes, scoped patterns."""

from __future__ import annotations

import io
import os
import stat
import textwrap
from pathlib import Path

from orchestrator.api import check_file
from orchestrator.atomic import write_text
from orchestrator.cli import run_cli

SOFT_WARNING = """\
version: 1
cluster:
  jobs:
    localhost: {}
placement:
  soft: true
graph:
  - {name: a, op: ones, shape: [2], device: /job:nowhere/cpu:0}
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


def test_atomic_write_gives_the_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "x.txt"
    write_text(target, "hello")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert target.read_text() == "hello"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]  # no temporary left behind


def test_replicate_pattern_stays_inside_its_scope(tmp_path: Path) -> None:
    spec = tmp_path / "scoped.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        cluster:
          jobs:
            worker: {tasks: 2, gpus: 2}
        graph:
          - {name: x, op: ones, shape: [4]}
          - scope: /job:worker/task:1
            ops:
              - name: r
                replicate:
                  devices: /gpu:*
                  body:
                    - {name: y, op: square, inputs: [x]}
                  combine: {y: add_n}
        """))
    checked = check_file(spec)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.plan is not None
    devices = {p.op: p.device_name for p in checked.plan.placements}
    assert devices["r/0/y"] == "/job:worker/replica:0/task:1/device:GPU:0"
    assert devices["r/1/y"] == "/job:worker/replica:0/task:1/device:GPU:1"
    assert "r/2/y" not in devices


def test_output_symlink_out_of_the_output_directory_is_refused(tmp_path: Path) -> None:
    import pytest

    from orchestrator.errors import RunError
    from orchestrator.execute.outputs import resolve_output

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "link").symlink_to(elsewhere)
    with pytest.raises(RunError, match="escapes the output directory"):
        resolve_output("link/x.npy", str(out), allow_outside=False)
    assert resolve_output("link/x.npy", str(out), allow_outside=True).endswith("link/x.npy")
    assert resolve_output("sub/x.npy", str(out), allow_outside=False) == str(out / "sub" / "x.npy")
