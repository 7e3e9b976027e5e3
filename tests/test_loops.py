"""Loops (``iterate``): nested loops run (epochs x batches), and what a loop may not do is a validation error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import check_file, plan_file
from orchestrator.plan.partition import loop_mode

NESTED = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 1}
    graph:
      - {name: w0, op: zeros, shape: [3], device: /cpu:0}
      - name: epochs
        iterate:
          steps: 3
          state: {w: w0}
          body:
            - {name: lr, op: fill, shape: [], value: 0.5, device: /cpu:0}
            - name: batches
              iterate:
                steps: 4
                window: 3
                state: {v: w}
                body:
                  - {name: x, op: random.uniform, shape: [3], seed: 1, device: /gpu:0}
                  - {name: g, op: mul, inputs: [x, lr], device: /gpu:0}
                  - {name: v1, op: add, inputs: [v, g], device: /cpu:0}
                  - {name: s1, op: sum, inputs: [v1], device: /cpu:0}
                update: {v: v1}
                metrics: {s: s1}
            - {name: w1, op: mul, inputs: [batches.v], scalar: 0.9, device: /cpu:0}
            - {name: m1, op: sum, inputs: [w1], device: /cpu:0}
          update: {w: w1}
          metrics: {m: m1}
    outputs:
      epochs.w: "-"
      epochs.m: "-"
    """


def _nested_reference() -> tuple[np.ndarray, np.ndarray]:
    """Epoch e, batch b draws with the step e x 4 + b: every batch of every epoch its own numbers."""
    w, per_epoch = np.zeros(3), []
    for epoch in range(3):
        v = w.copy()
        for batch in range(4):
            v = v + np.random.default_rng([1, epoch * 4 + batch]).uniform(0, 1, 3) * 0.5
        w = v * 0.9
        per_epoch.append(w.sum())
    return w, np.array(per_epoch)


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_loop_holding_a_loop_runs_step_by_step_and_its_inner_loop_in_windows(tmp_path: Path) -> None:
    plan = plan_file(_spec(tmp_path, NESTED))
    outer, inner = plan.spec.loops[1], plan.spec.loops[0]
    assert (outer.name, inner.name) == ("epochs", "epochs/batches")
    assert loop_mode(plan, outer, "partition")[0] == "nested"
    assert loop_mode(plan, inner, "partition")[0] == "gang"


@pytest.mark.cluster
@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_nested_loops_run_epochs_of_batches(tmp_path: Path, granularity: str) -> None:
    result = run_file(_spec(tmp_path, NESTED), echo=lambda _: None, granularity=granularity)
    w, per_epoch = _nested_reference()
    np.testing.assert_allclose(result.values["epochs.w"], w, rtol=1e-12)
    np.testing.assert_allclose(result.values["epochs.m"], per_epoch, rtol=1e-12)
    runs = {e["name"]: e["runs"] for e in result.report["ops"]}
    assert (runs["epochs/lr"], runs["epochs/w1"], runs["epochs/batches/x"]) == (3, 3, 12)
    assert result.report["loops"]["epochs"]["mode"].startswith("nested")


def _errors(tmp_path: Path, text: str) -> list[str]:
    return [f"{d.line}:{d.column}: {d.message} ({d.hint})" for d in check_file(_spec(tmp_path, text)).errors]


def test_an_update_of_another_shape_or_dtype_is_a_validation_error(tmp_path: Path) -> None:
    text = """\
        version: 1
        graph:
          - {name: w0, op: zeros, shape: [3]}
          - name: train
            iterate:
              steps: 5
              state: {w: w0}
              body:
                - {name: w1, op: cast, inputs: [w], dtype: float32}
              update: {w: w1}
        """
    assert _errors(tmp_path, text) == [
        "10:16: the update 'w1' of state 'w' in 'train' is [3] float32, but the state is [3] float64 (its initial "
        "value 'w0') (an update must keep its state's shape and dtype: reshape or cast it in the body)"]
    assert not _errors(tmp_path, text.replace("dtype: float32", "dtype: float64"))


def test_steps_have_an_upper_bound(tmp_path: Path) -> None:
    (error,) = _errors(tmp_path, """\
        version: 1
        graph:
          - {name: w0, op: zeros, shape: [3]}
          - name: train
            iterate:
              steps: 1000000000000
              state: {w: w0}
              body:
                - {name: w1, op: add, inputs: [w], scalar: 1}
              update: {w: w1}
        """)
    assert error.startswith("6:14: steps: 1,000,000,000,000 is more than the 10,000,000 a loop may run")
