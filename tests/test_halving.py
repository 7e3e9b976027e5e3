"""Successive halving over a sweep's training loop, decided rung by rung on all copies together (issue 21)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import Checked, check_file

LRS = [0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.12, 0.16]
RUNGS = [5, 15, 25]
STEPS = 40
SPEC = """\
version: 1
name: halving
cluster: {jobs: {localhost: {gpus: 2, gpu_threads: 4}}}
graph:
  - scope: /cpu:0
    ops:
      - {name: X, op: random.normal, shape: [64, 3], seed: 1}
      - {name: true_w, op: constant, value: [1.5, -2.0, 0.5]}
      - {name: Xw, op: matmul, inputs: [X, true_w]}
      - {name: noise, op: random.normal, shape: [64], stddev: 0.1, seed: 2}
      - {name: y, op: add, inputs: [Xw, noise]}
      - {name: Xt, op: transpose, inputs: [X]}
      - {name: two_over_n, op: constant, value: 0.03125}
      - {name: Xt2, op: mul, inputs: [Xt, two_over_n]}
  - name: hp
    sweep:
      grid: {lr: LRS}
      spread: /gpu:*
      body:
        - {name: w0, op: zeros, shape: [3]}
        - name: train
          iterate:
            steps: STEPS
            window: 10
            state: {w: w0}
            body:
              - {name: pred, op: matmul, inputs: [X, w]}
              - {name: err, op: sub, inputs: [pred, y]}
              - {name: g0, op: matmul, inputs: [Xt2, err]}
              - {name: g, op: mul, inputs: [g0, lr]}
              - {name: w_next, op: sub, inputs: [w, g]}
              - {name: sq, op: mul, inputs: [err, err]}
              - {name: loss, op: mean, inputs: [sq]}
            update: {w: w_next}
            metrics: {loss: loss}
      HALVING
      gather: {w: train.w, losses: train.loss}
outputs:
  hp.w: "-"
  hp.losses: results/losses.npy
"""


def spec_text(halving: str = "halving: {metric: train.loss, rungs: RUNGS, keep: 0.5}") -> str:
    return SPEC.replace("HALVING", halving).replace("RUNGS", json.dumps(RUNGS)).replace("LRS", json.dumps(LRS)) \
        .replace("STEPS", str(STEPS))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def numpy_descent() -> tuple[np.ndarray, np.ndarray]:
    """Each learning rate's loss at every step and its weights after every step, in NumPy."""
    x = np.random.default_rng([1, 0]).normal(0.0, 1.0, (64, 3))
    y = x @ np.array([1.5, -2.0, 0.5]) + np.random.default_rng([2, 0]).normal(0.0, 0.1, 64)
    losses, weights = np.zeros((len(LRS), STEPS)), np.zeros((len(LRS), STEPS + 1, 3))
    for i, lr in enumerate(LRS):
        w = np.zeros(3)
        for step in range(STEPS):
            err = x @ w - y
            losses[i, step] = np.mean(err * err)
            w = w - (x.T * 0.03125 @ err) * lr
            weights[i, step + 1] = w
    return losses, weights


def numpy_halving(losses: np.ndarray) -> dict[int, int]:
    """Each copy's last step: at every rung the better half of those running go on."""
    running, stopped_at = list(range(len(LRS))), {}
    for rung in RUNGS:
        ranked = sorted(running, key=lambda i: (losses[i, rung - 1], i))
        kept = ranked[:max(1, int(len(ranked) * 0.5))]
        stopped_at.update({i: rung for i in ranked[len(kept):]})
        running = kept
    stopped_at.update({i: STEPS for i in running})
    return stopped_at


@pytest.mark.cluster
def test_halving_stops_the_worse_copies_at_each_rung_as_numpy_does(tmp_path: Path) -> None:
    report = tmp_path / "run.json"
    result = run_file(write(tmp_path, spec_text()), echo=lambda _: None, report_path=str(report))
    losses, weights = numpy_descent()
    stopped_at = numpy_halving(losses)
    assert sorted(stopped_at.values()) == [5, 5, 5, 5, 15, 15, 25, 40]
    sweep = json.loads(report.read_text())["sweeps"]["hp"]
    for copy in sweep["copies"]:
        i = copy["index"]
        if stopped_at[i] == STEPS:
            assert copy["status"] == "finished" and "stopped_at_step" not in copy
        else:
            assert copy["status"] == "stopped" and copy["stopped_at_step"] == stopped_at[i]
            assert copy["stop_reason"].startswith(f"halving: rung {RUNGS.index(stopped_at[i]) + 1} at step")
    # each copy's final state is its weights at the step it stopped; its series is NaN after it
    np.testing.assert_allclose(result.values["hp.w"], [weights[i, stopped_at[i]] for i in range(len(LRS))],
                               rtol=1e-10, atol=1e-14)
    gathered = np.load(tmp_path / "results" / "losses.npy")
    for i in range(len(LRS)):
        np.testing.assert_allclose(gathered[i, :stopped_at[i]], losses[i, :stopped_at[i]], rtol=1e-10)
        assert np.isnan(gathered[i, stopped_at[i]:]).all()
    table = sweep["rungs"]
    assert [r["step"] for r in table] == RUNGS and [len(r["copies"]) for r in table] == [8, 4, 2]
    for rung in table:
        for row in rung["copies"]:
            assert row["value"] == pytest.approx(losses[row["copy"], rung["step"] - 1], rel=1e-10)
            assert row["kept"] == (stopped_at[row["copy"]] > rung["step"])


@pytest.mark.cluster
def test_the_rungs_decide_the_same_on_a_cluster_and_in_one_process(tmp_path: Path) -> None:
    spec = write(tmp_path, spec_text())
    tables = []
    for sync in (False, True):
        report = tmp_path / f"run-{sync}.json"
        run_file(spec, echo=lambda _: None, report_path=str(report), sync=sync, output_dir=str(tmp_path / str(sync)))
        rungs = json.loads(report.read_text())["sweeps"]["hp"]["rungs"]
        tables.append([[(row["copy"], row["kept"]) for row in rung["copies"]] for rung in rungs])
    assert tables[0] == tables[1]


def checked(tmp_path: Path, halving: str, text: str | None = None) -> Checked:
    return check_file(write(tmp_path, text or spec_text(halving)))


def errors(result: Checked) -> list[str]:
    return [d.render() for d in result.errors]


def test_rungs_every_n_steps_or_growing_by_a_factor(tmp_path: Path) -> None:
    def rungs(halving: str) -> tuple[int, ...]:
        result = checked(tmp_path, halving)
        assert result.spec is not None, errors(result)
        found = result.spec.sweeps[0].halving
        assert found is not None
        return found.rungs
    assert rungs("halving: {metric: train.loss, every: 10}") == (10, 20, 30)
    assert rungs("halving: {metric: train.loss, factor: 3, min_steps: 2}") == (2, 6, 18)
    result = checked(tmp_path, "halving: {metric: train.loss, factor: 3, min_steps: 2}")
    assert result.spec is not None and result.spec.sweeps[0].halving is not None
    assert result.spec.sweeps[0].halving.keep == pytest.approx(1 / 3)
    assert result.spec.loops[0].window_starts() == (0, 2, 6, 10, 18, 20, 30)  # the windows end at the rungs


def test_halving_errors_name_the_line_and_what_the_body_makes(tmp_path: Path) -> None:
    said = errors(checked(tmp_path, "halving: {metric: train.los, every: 10}"))
    assert any(":36:25" in e and "metric 'los', which loop 'train' does not make" in e and "did you mean 'loss'" in e
               for e in said), said
    said = errors(checked(tmp_path, "halving: {metric: trian.loss, every: 10}"))
    assert any("its body has no loop 'trian'" in e and "did you mean 'train'" in e for e in said), said
    said = errors(checked(tmp_path, "halving: {metric: train.loss, rungs: [40, 50]}"))
    assert any("has no rung before step 40" in e for e in said), said
    said = errors(checked(tmp_path, "halving: {metric: train.loss, every: 10, keep: 1.5}"))
    assert any("keep" in e for e in said), said


def test_a_copy_loop_on_two_devices_cannot_be_halved(tmp_path: Path) -> None:
    text = spec_text("halving: {metric: train.loss, every: 10}").replace(
        "              - {name: loss, op: mean, inputs: [sq]}",
        "              - {name: loss, op: mean, inputs: [sq], device: /cpu:0}")
    said = errors(checked(tmp_path, "", text))
    assert any("runs on 2 devices" in e and "keep each copy's loop on one device" in e for e in said), said


@pytest.mark.cluster
def test_a_cached_halving_sweep_decides_again_on_resume(tmp_path: Path) -> None:
    spec = write(tmp_path, spec_text().replace("  - name: hp\n    sweep:", "  - name: hp\n    cache: true\n    sweep:"))
    tables = []
    for resume in (False, True):
        report = tmp_path / f"run-{resume}.json"
        run_file(spec, echo=lambda _: None, report_path=str(report), resume=resume)
        data = json.loads(report.read_text())
        tables.append(data["sweeps"]["hp"]["rungs"])
        ops = {o["name"]: o for o in data["ops"]}
        # where a copy stops depends on the others at each rung: its loop is never taken from the cache alone
        assert "a halving (or median) sweep decides its copies' loops together" in ops["hp/0/train.w"]["cache"]
    assert tables[0] == tables[1]
