"""Every example runs on an embedded cluster with simulated GPUs and its numbers match NumPy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file

pytestmark = pytest.mark.cluster
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
A = np.array([[1, 2, 3], [4, 5, 6]], dtype=float)
B = np.array([[1, 2], [3, 4], [5, 6]], dtype=float)


def quiet(_: str) -> None:
    pass


def _rng(*seed: int) -> np.random.Generator:
    return np.random.default_rng(list(seed))


def _ran_as_planned(result, path: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    plan = plan_file(path)
    ran = {e["name"]: e["worker"] for e in result.report["ops"] if e["worker"] is not None}
    for name, worker in ran.items():
        assert plan.placement(name).device_name == worker, name
    return ran


@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_quickstart(tmp_path: Path, granularity: str) -> None:
    result = run_file(EXAMPLES / "quickstart.yaml", output_dir=str(tmp_path), echo=quiet,
                      granularity=granularity)
    np.testing.assert_array_equal(result.values["towers.c"], 2 * (A @ B))
    np.testing.assert_array_equal(np.load(tmp_path / "results" / "quickstart.npy"), A @ B)
    ran = _ran_as_planned(result, EXAMPLES / "quickstart.yaml")
    assert ran["towers/0/c"].endswith("GPU:0") and ran["towers/1/c"].endswith("GPU:1")


@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_make_parallel_equals_a_plus_b(tmp_path: Path, granularity: str) -> None:
    result = run_file(EXAMPLES / "make_parallel.yaml", output_dir=str(tmp_path), echo=quiet,
                      granularity=granularity)
    a = _rng(1, 0).uniform(0, 1, (1000, 100))
    b = _rng(2, 0).uniform(0, 1, (1000, 100))
    np.testing.assert_array_equal(np.load(tmp_path / "results" / "make_parallel.npy"), a + b)
    ran = _ran_as_planned(result, EXAMPLES / "make_parallel.yaml")
    assert {ran["par/0/c"], ran["par/1/c"]} == {
        "/job:localhost/replica:0/task:0/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:1"}


@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_towers_load_split_broadcast_and_save(tmp_path: Path, granularity: str) -> None:
    result = run_file(EXAMPLES / "towers.yaml", output_dir=str(tmp_path), echo=quiet,
                      granularity=granularity)
    points = np.loadtxt(EXAMPLES / "data" / "points.csv", delimiter=",", skiprows=1)
    w = np.array([[1.0, 0.5], [-1.0, 2.0], [0.25, 0.0]])
    np.testing.assert_allclose(result.values["towers.s"], (points @ w).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(np.load(tmp_path / "results" / "towers.npz")["value"], points @ w, rtol=1e-12)
    np.testing.assert_allclose(np.load(tmp_path / "results" / "towers_checkpoint.npy"), points @ w, rtol=1e-12)
    shapes = [e["output_bytes"] for e in result.report["ops"] if e["name"].endswith("/y")]
    assert shapes == [3 * 2 * 8, 3 * 2 * 8, 2 * 2 * 8, 2 * 2 * 8]  # 10 rows split 3, 3, 2, 2
    _ran_as_planned(result, EXAMPLES / "towers.yaml")


@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_sweep_selects_the_best_ridge_model(tmp_path: Path, granularity: str) -> None:
    result = run_file(EXAMPLES / "sweep.yaml", output_dir=str(tmp_path), echo=quiet,
                      granularity=granularity)
    true_w = _rng(10, 0).normal(0, 1, 25)
    X, Xv = _rng(1, 0).normal(0, 1, (40, 25)), _rng(3, 0).normal(0, 1, (200, 25))
    y = X @ true_w + _rng(2, 0).normal(0, 2.0, 40)
    yv = Xv @ true_w + _rng(4, 0).normal(0, 2.0, 200)
    fits = {lam: np.linalg.solve(X.T @ X + lam * np.eye(25), X.T @ y) for lam in (0.01, 1.0, 10.0, 100.0)}
    losses = {lam: float(np.mean((Xv @ w - yv) ** 2)) for lam, w in fits.items()}
    best = min(losses, key=losses.__getitem__)
    assert float(result.values["ridge.best"]) == best
    assert float(result.values["ridge.loss"]) == pytest.approx(losses[best], rel=1e-10)
    np.testing.assert_allclose(np.load(tmp_path / "results" / "ridge_w.npy"), fits[best], rtol=1e-9)
    ran = _ran_as_planned(result, EXAMPLES / "sweep.yaml")
    assert len({ran[f"ridge/{i}/w"] for i in range(4)}) == 4  # one model per GPU


@pytest.mark.timeout(900)  # ~2 minutes on an idle 2-core machine; more when it is shared
def test_polyfit_data_parallel_adam(tmp_path: Path) -> None:
    """2000 steps, two GPUs of 50 fresh samples each, gradients averaged on the ps task, Adam."""
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("results"))
    spec = tmp_path / "examples" / "polyfit.yaml"
    result = run_file(spec, echo=quiet, report_path=str(tmp_path / "run.json"))
    # as the example says (processes: host), its three devices are one worker process: one task a window
    assert result.report["loops"]["train"]["mode"] == ("gang: one task per window of 100 steps (3 devices in one "
                                                       "worker process), values handed over within it")
    assert result.report["transport"] == "in-process"
    w = np.asarray(result.values["train.w"])
    assert np.all(np.abs(w - [5.0, 0.0, 3.0]) < 0.05), w

    # the same computation in NumPy alone, drawing the same batches
    ref, m, v = np.zeros(3), np.zeros(3), np.zeros(3)
    for step in range(2000):
        grads = []
        for copy in range(2):
            x = _rng(7, copy, step).uniform(-10.0, 10.0, 50)
            features = np.stack([x * x, x, np.ones_like(x)], axis=1)
            grads.append(2.0 / 50 * features.T @ (features @ ref - (5 * x * x + 3)))
        g = np.mean(grads, axis=0)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        t = step + 1
        ref = ref - 0.1 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(w, ref, rtol=1e-9, atol=1e-12)

    losses = np.loadtxt(tmp_path / "examples" / "results" / "polyfit_loss.csv")
    assert losses.shape == (2000,) and losses[-1] < losses[0] / 1000
    report = json.loads((tmp_path / "run.json").read_text())
    ran = {e["name"]: e for e in report["ops"]}
    assert ran["train/towers/0/grad"]["worker"] == "/job:worker/replica:0/task:0/device:GPU:0"
    assert ran["train/towers/1/grad"]["worker"] == "/job:worker/replica:0/task:0/device:GPU:1"
    assert ran["train/step"]["worker"] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert ran["train/step"]["runs"] == 2000
    assert ran["w0"]["worker"] == "/job:ps/replica:0/task:0/device:CPU:0"


def test_polyfit_is_the_same_at_both_granularities(tmp_path: Path) -> None:
    """200 steps in windows of 50: values, placements and per-op records equal with a task per op and
    with gang windows (one task a window for the example's one worker process)."""
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("results"))
    spec = tmp_path / "examples" / "polyfit.yaml"
    runs = {g: run_file(spec, echo=quiet, granularity=g, params={"steps": "200", "window": 50})
            for g in ("op", "partition")}
    by_op, by_partition = runs["op"], runs["partition"]
    np.testing.assert_array_equal(by_op.values["train.w"], by_partition.values["train.w"])
    np.testing.assert_array_equal(by_op.values["train.loss"], by_partition.values["train.loss"])

    def records(result) -> dict[str, tuple[object, ...]]:  # type: ignore[no-untyped-def]
        return {e["name"]: (e["planned_device"], e["worker"], e["runs"], e["output_bytes"], e.get("note"))
                for e in result.report["ops"]}

    assert records(by_op) == records(by_partition)
    assert by_partition.report["loops"]["train"]["mode"].startswith("gang")
    # 3 devices x 4 windows, the loop's preparation and the ops outside the loop: a few dozen tasks, not 2,600
    assert by_partition.report["totals"]["tasks"] < 40 < 2000 < by_op.report["totals"]["tasks"]
