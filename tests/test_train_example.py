"""examples/train.yaml equals the same training loop written in plain NumPy (issue 20).

The reference draws the same data with the example's own functions, takes the
same minibatches (epoch e's order is ``default_rng([seed, e]).permutation(rows)``;
step s takes batch ``s mod b`` of epoch ``s div b``), averages the two GPUs'
gradients weighted by their rows (which is the batch's gradient), and applies
the same early-stopping rule (Keras 3's EarlyStopping, judged each epoch);
the example must stop at the same step with the same weights and accuracy.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from orchestrator import run_file

pytestmark = pytest.mark.cluster
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ROWS, BATCH, EPOCHS, EVERY, PATIENCE, MIN_DELTA = 600, 64, 30, 10, 3, 0.001
PS, EVALUATOR = "/job:ps/replica:0/task:0/device:CPU:0", "/job:evaluator/replica:0/task:0/device:CPU:0"
GPU = "/job:worker/replica:0/task:0/device:GPU:"


def quiet(_: str) -> None:
    pass


def _fns() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_fns_reference", EXAMPLES / "train_fns.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Reference:
    w: np.ndarray  # the best evaluation's weights (restore_best)
    stopped_at: int
    best_step: int
    losses: list[float]  # each step's training loss
    table: list[tuple[int, float, float]]  # (step, validation loss, validation accuracy)


def reference(f: ModuleType) -> Reference:
    """The example's loop in NumPy, one process, no orchestrator."""
    x, y = f.clusters(np, n=ROWS, seed=1)
    xv, yv = f.clusters(np, n=300, seed=2)
    w, v = np.zeros((5, 3)), np.zeros((5, 3))
    per_epoch = -(-ROWS // BATCH)  # the last, partial batch is kept
    best = best_w = None
    best_step, wait, losses, table = 0, 0, [], []
    for step in range(per_epoch * EPOCHS):
        epoch, index = divmod(step, per_epoch)
        rows = np.random.default_rng([0, epoch]).permutation(ROWS)[index * BATCH:(index + 1) * BATCH]
        losses.append(float(f.loss(w, x[rows], y[rows], np)))
        w, v = f.sgd(w, v, f.grad(w, x[rows], y[rows], np), np, lr=0.05, momentum=0.9)
        if (step + 1) % EVERY:
            continue
        current = float(f.loss(w, xv, yv, np))
        table.append((step + 1, current, float(f.accuracy(w, xv, yv, np))))
        wait += 1  # Keras: raised first, reset by an improvement
        if best is None or current + MIN_DELTA < best:
            best, best_w, best_step, wait = current, w, step + 1, 0
        elif wait >= PATIENCE and len(table) > 1:
            break
    assert best_w is not None
    return Reference(best_w, step + 1, best_step, losses, table)


@pytest.fixture(scope="module")
def ref() -> Reference:
    return reference(_fns())


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("results"))
    return tmp_path / "examples" / "train.yaml"


def test_train_equals_numpy_and_stops_early(tmp_path: Path, ref: Reference) -> None:
    spec = _copy(tmp_path)
    result = run_file(spec, echo=quiet, report_path=str(tmp_path / "run.json"))
    loop = result.report["loops"]["fit"]
    assert (loop["stop_reason"], loop["stopped_at_step"], loop["resumed_from_step"]) == \
        ("early_stop", ref.stopped_at, 0)
    assert ref.best_step < ref.stopped_at < EPOCHS * 10  # it stopped before the last epoch, past its best
    w = np.asarray(result.values["fit.w"])
    np.testing.assert_allclose(w, ref.w, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.load(spec.parent / "results" / "train_w.npy"), w)

    losses = np.loadtxt(spec.parent / "results" / "train_loss.csv")
    np.testing.assert_allclose(losses, ref.losses, rtol=1e-12, atol=1e-14)
    table = np.loadtxt(spec.parent / "results" / "train_validation.csv", delimiter=",")
    np.testing.assert_allclose(table, ref.table, rtol=1e-12, atol=1e-14)
    accuracy = dict((step, acc) for step, _, acc in ref.table)[ref.best_step]
    assert float(_fns().accuracy(w, *_fns().clusters(np, n=300, seed=2), np)) == accuracy
    assert accuracy > 0.9  # 3 overlapping clusters: about the best a linear model does here

    ran = {e["name"]: e for e in json.loads((tmp_path / "run.json").read_text())["ops"]}
    assert ran["fit/towers/0/grad"]["worker"] == GPU + "0" and ran["fit/towers/1/grad"]["worker"] == GPU + "1"
    assert ran["fit/step"]["worker"] == PS and ran["w0"]["worker"] == PS
    assert ran["fit/eval/val_loss"]["worker"] == EVALUATOR
    # the window in flight when the loop stopped may have been evaluated too (its values are dropped)
    assert ran["fit/eval/val_loss"]["runs"] in (len(ref.table), len(ref.table) + 1)


def test_train_resumed_from_its_checkpoint_ends_the_same(tmp_path: Path, ref: Reference) -> None:
    """A second run with --resume starts at the newest checkpoint (every 50 steps; none at the stop)."""
    spec = _copy(tmp_path)
    first = run_file(spec, echo=quiet)
    saved = sorted(p.name for p in (spec.parent / "results" / "checkpoints" / "fit").iterdir())
    newest = (ref.stopped_at - 1) // 50 * 50
    assert [int(name.split("-")[1].split(".")[0]) for name in saved] == [newest - 50, newest]  # keep: 2
    said: list[str] = []
    again = run_file(spec, echo=said.append, resume=True)
    assert again.report["loops"]["fit"]["resumed_from_step"] == newest
    assert any(f"resumes from its checkpoint at step {newest}" in line for line in said)
    assert again.report["loops"]["fit"]["stopped_at_step"] == ref.stopped_at
    np.testing.assert_array_equal(again.values["fit.w"], first.values["fit.w"])
    np.testing.assert_array_equal(again.values["fit.loss"], first.values["fit.loss"])
    np.testing.assert_array_equal(again.values["validation"], first.values["validation"])
