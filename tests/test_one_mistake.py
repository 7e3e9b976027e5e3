"""One mistake, one error: a mistake in a sweep's body is written once, so it is reported once.

A sweep (or replicate) makes a copy of its body per value; a placement error in the body was found in every
copy and reported once per copy (56 identical errors for one missing ``kernels:``). And a memory plan made
again at another granularity (``run --granularity op``) added its findings a second time.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from orchestrator.api import check_file, plan_file
from orchestrator.cli import run_cli
from orchestrator.plan.memory import plan_memory

SEARCH = """\
version: 1
cluster:
  jobs: {localhost: {tasks: 1, gpus: 2, gpu_memory: {limit: 1MiB}}}
graph:
  - {name: x, op: ones, shape: [8]}
  - name: s
    sweep:
      grid: {k: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]}
      spread: /gpu:*
      body:
        - {name: w, op: call, fn: "m:fit", inputs: [x, k], output: {shape: [8]}}
        - {name: v, op: mul, inputs: [w, k]}
"""


def test_a_placement_mistake_in_a_sweeps_body_is_one_error_naming_the_copies(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SEARCH, encoding="utf-8")
    errors = check_file(path).errors
    assert len(errors) == 1, [e.render() for e in errors]
    assert "no supported kernel for GPU devices is available for op 's/0/w' (call) (and in 7 more copies of this op)" \
        in errors[0].message


def test_planning_memory_again_does_not_repeat_its_findings(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        cluster:
          jobs: {localhost: {tasks: 1, gpus: 1, gpu_memory: {limit: 1KiB}}}
        graph:
          - {name: a, op: call, fn: "m:f", kernels: [gpu], device: /gpu:0}
          - {name: b, op: ones, shape: [4], device: /gpu:0}
        """), encoding="utf-8")
    plan = plan_file(path)
    codes = [d.code for d in plan.diagnostics]
    assert codes == ["memory-unknown"], codes
    again = plan_memory(plan, "op")
    assert [d.code for d in again.diagnostics] == codes


def test_plan_says_a_validation_warning_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue saw ``plan`` print the validation warnings twice (once validating, once planning)."""
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        cluster: {jobs: {localhost: {gpus: 2}}}
        graph:
          - {name: x, op: ones, shape: [2]}
          - name: hp
            sweep:
              grid: {k: [1, 2]}
              devices: [/gpu:0, /gpu:1]
              body: [{name: y, op: mul, inputs: [x, k]}]
        """), encoding="utf-8")
    out = io.StringIO()
    assert run_cli(["plan", str(path)], out=out) == 0
    said = out.getvalue() + "".join(capsys.readouterr())
    assert said.count("devices: is now spread:") == 1, said
