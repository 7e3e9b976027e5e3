"""A sweep's rules on a validation loss: halving on an evaluation metric, and the median rule (issue 26.3, 26.6).

Each copy is the same gradient descent in NumPy, copy by copy: the decisions, where each copy stopped, its
final weights and its gathered validation table are checked against it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import check_file

LRS = [0.04, 0.002, 0.12, 0.005, 0.01, 0.16, 0.02, 0.08]  # not in order: the median's reference is copies 0-2
STEPS, EVERY = 40, 5
SPEC = """\
version: 1
name: rules
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
      - {name: Xv, op: random.normal, shape: [32, 3], seed: 3}
      - {name: Xvw, op: matmul, inputs: [Xv, true_w]}
      - {name: vnoise, op: random.normal, shape: [32], stddev: 0.1, seed: 4}
      - {name: yv, op: add, inputs: [Xvw, vnoise]}
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
            evaluate:
              every: EVERY
              body:
                - {name: vp, op: matmul, inputs: [Xv, w]}
                - {name: ve, op: sub, inputs: [vp, yv]}
                - {name: vs, op: mul, inputs: [ve, ve]}
                - {name: val, op: mean, inputs: [vs]}
              metrics: {val_loss: val}
      RULE
      gather: {w: train.w, vals: train.val_loss}
outputs:
  hp.w: results/w.npy
  hp.vals: results/vals.npy
"""


def spec_text(rule: str) -> str:
    return SPEC.replace("RULE", rule).replace("LRS", json.dumps(LRS)).replace("STEPS", str(STEPS)) \
        .replace("EVERY", str(EVERY))


def write(tmp_path: Path, rule: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(rule), encoding="utf-8")
    return path


def numpy_descent() -> tuple[np.ndarray, np.ndarray]:
    """Each copy's weights after every step, and its validation loss after every step, in NumPy."""
    x = np.random.default_rng([1, 0]).normal(0.0, 1.0, (64, 3))
    true_w = np.array([1.5, -2.0, 0.5])
    y = x @ true_w + np.random.default_rng([2, 0]).normal(0.0, 0.1, 64)
    xv = np.random.default_rng([3, 0]).normal(0.0, 1.0, (32, 3))
    yv = xv @ true_w + np.random.default_rng([4, 0]).normal(0.0, 0.1, 32)
    weights, vals = np.zeros((len(LRS), STEPS + 1, 3)), np.full((len(LRS), STEPS + 1), np.nan)
    for i, lr in enumerate(LRS):
        w = np.zeros(3)
        for step in range(1, STEPS + 1):
            err = x @ w - y
            w = w - (x.T * 0.03125 @ err) * lr
            weights[i, step] = w
            vals[i, step] = np.mean((xv @ w - yv) ** 2)
    return weights, vals


def check_copies(tmp_path: Path, report: dict, stopped_at: dict[int, int]) -> None:
    """Each copy's status, final weights and gathered validation table against NumPy's."""
    weights, vals = numpy_descent()
    for copy in report["sweeps"]["hp"]["copies"]:
        i = copy["index"]
        if stopped_at[i] == STEPS:
            assert copy["status"] == "finished" and "stopped_at_step" not in copy, copy
        else:
            assert copy["status"] == "stopped" and copy["stopped_at_step"] == stopped_at[i], copy
    np.testing.assert_allclose(np.load(tmp_path / "results" / "w.npy"),
                               [weights[i, stopped_at[i]] for i in range(len(LRS))], rtol=1e-10, atol=1e-14)
    tables = np.load(tmp_path / "results" / "vals.npy")  # (copy, evaluation, [step, value])
    for i in range(len(LRS)):
        np.testing.assert_array_equal(tables[i, :, 0], range(EVERY, STEPS + 1, EVERY))
        ran = tables[i, :, 0] <= stopped_at[i]
        np.testing.assert_allclose(tables[i, ran, 1], vals[i, tables[i, ran, 0].astype(int)], rtol=1e-10)
        assert np.isnan(tables[i, ~ran, 1]).all()  # a stopped copy's evaluations stop there: NaN after


def numpy_halving(vals: np.ndarray, rungs: list[int]) -> dict[int, int]:
    running, stopped_at = list(range(len(LRS))), {}
    for rung in rungs:
        ranked = sorted(running, key=lambda i: (vals[i, rung], i))
        kept = ranked[:max(1, len(ranked) // 2)]
        stopped_at.update({i: rung for i in ranked[len(kept):]})
        running = kept
    return {**stopped_at, **{i: STEPS for i in running}}


@pytest.mark.cluster
def test_halving_ranks_the_validation_loss_at_each_rung_as_numpy_does(tmp_path: Path) -> None:
    rungs = [10, 20, 30]
    report_path = tmp_path / "run.json"
    run_file(write(tmp_path, "halving: {metric: train.val_loss, rungs: [10, 20, 30], keep: 0.5}"),
             echo=lambda _: None, report_path=str(report_path), output_dir=str(tmp_path))
    report = json.loads(report_path.read_text())
    _, vals = numpy_descent()
    stopped_at = numpy_halving(vals, rungs)
    assert sorted(stopped_at.values()) == [10, 10, 10, 10, 20, 20, 30, 40]
    check_copies(tmp_path, report, stopped_at)
    table = report["sweeps"]["hp"]["rungs"]
    assert [r["step"] for r in table] == rungs and [len(r["copies"]) for r in table] == [8, 4, 2]
    for rung in table:  # the value each copy was ranked by: its validation loss at the rung, not its step loss
        for row in rung["copies"]:
            assert row["value"] == pytest.approx(vals[row["copy"], rung["step"]], rel=1e-10)
            assert row["kept"] == (stopped_at[row["copy"]] > rung["step"])
    copies = report["sweeps"]["hp"]["copies"]
    for halted in (c for c in copies if c["status"] == "stopped"):
        # a halted copy ran nothing past its rung: it stopped before every copy that went on past it
        later = [c for c in copies if stopped_at[c["index"]] > halted["stopped_at_step"]]
        assert all(halted["stop"] < c["stop"] for c in later), (halted, later)


def numpy_median(vals: np.ndarray, n_startup: int, steps: list[int]) -> tuple[dict[int, int], list[float]]:
    """Optuna's MedianPruner, decided on all copies at each step: a copy stops when its best validation loss
    so far is worse than the median of the first n_startup copies' at the step."""
    running, stopped_at, medians = list(range(len(LRS))), {}, []
    for step in steps:
        median = float(np.median([vals[i, step] for i in range(n_startup)]))
        medians.append(median)
        for i in [i for i in running if i >= n_startup]:
            best = min(vals[i, s] for s in range(EVERY, step + 1, EVERY))
            if best > median:
                stopped_at[i] = step
                running.remove(i)
    return {**stopped_at, **{i: STEPS for i in running}}, medians


@pytest.mark.cluster
def test_the_median_rule_stops_the_copies_worse_than_the_reference_median_as_numpy_does(tmp_path: Path) -> None:
    rule = "median: {metric: train.val_loss, n_startup: 3, warmup_steps: 10, every: 10}"
    tables = []
    for sync in (False, True):
        out = tmp_path / str(sync)
        out.mkdir()
        report_path = out / "run.json"
        run_file(write(out, rule), echo=lambda _: None, report_path=str(report_path), output_dir=str(out), sync=sync)
        report = json.loads(report_path.read_text())
        tables.append(report["sweeps"]["hp"]["median"])
    _, vals = numpy_descent()
    stopped_at, medians = numpy_median(vals, 3, [10, 20, 30])
    assert sorted(stopped_at.values()) == [10, 10, 10, 40, 40, 40, 40, 40], stopped_at
    check_copies(tmp_path / "True", report, stopped_at)
    # the same decisions on a cluster and in one process
    assert [[(r["copy"], r["kept"]) for r in d["copies"]] for d in tables[0]] == \
        [[(r["copy"], r["kept"]) for r in d["copies"]] for d in tables[1]]
    assert [d["step"] for d in tables[0]] == [10, 20, 30]
    for decision, median in zip(tables[0], medians):
        assert decision["median"] == pytest.approx(median, rel=1e-10)
        for row in decision["copies"]:
            assert row["reference"] == (row["copy"] < 3) and row["kept"] == (stopped_at[row["copy"]] > decision["step"])
            assert row["value"] == pytest.approx(vals[row["copy"], decision["step"]], rel=1e-10)
    rule_said = report["sweeps"]["hp"]["rule"]
    assert rule_said == {"kind": "median", "loop": "train", "metric": "val_loss", "mode": "min", "steps": [10, 20, 30],
                         "n_startup": 3, "warmup_steps": 10, "every": 10}
    stopped = next(c for c in report["sweeps"]["hp"]["copies"] if c["status"] == "stopped")
    assert stopped["stop_reason"].startswith("median: step 10, best val_loss ") and "of copies 0-2" in \
        stopped["stop_reason"]


def test_the_median_rule_decides_every_evaluation_by_default(tmp_path: Path) -> None:
    checked = check_file(write(tmp_path, "median: {metric: train.val_loss, n_startup: 3, warmup_steps: 10}"))
    assert checked.spec is not None, [d.render() for d in checked.errors]
    median = checked.spec.sweeps[0].median
    assert median is not None and median.every == EVERY and median.steps == (10, 15, 20, 25, 30, 35)
    loop = next(lp for lp in checked.spec.loops if lp.name == "hp/0/train")
    assert loop.rungs == median.steps  # the copies' windows end at the decision steps
    checked = check_file(write(tmp_path, "median: {metric: train.loss, n_startup: 3}"))  # a step metric: windows
    assert checked.spec is not None and checked.spec.sweeps[0].median is not None
    assert checked.spec.sweeps[0].median.steps == (10, 20, 30)


def test_a_halving_on_an_evaluation_metric_between_evaluations_is_refused_at_its_line(tmp_path: Path) -> None:
    said = [d.render() for d in check_file(write(tmp_path, "halving: {metric: train.val_loss, every: 3}")).errors]
    assert any(":48:48: " in e and "rungs 3, 6, 9, 12 fall between them" in e and "every: 5" in e
               for e in said), said
