"""Training loops (issue 20): checkpoints and --resume, evaluations, early stopping, stop_when, minibatches.

Everything is real: specs written as YAML files, embedded Dask clusters on
loopback, ``orchestrate run`` subprocesses stopped with SIGTERM, a worker
killed with SIGKILL by the op it runs. Values are compared with plain NumPy
computing the same steps (a linear regression by gradient descent), and
early stopping with a small transcription of Keras 3's
``EarlyStopping.on_epoch_end`` run over the evaluation values the run
itself reports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.errors import RunError

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# The user functions of every spec here (written beside it as fns_<tag>.py: one module name per test).
FNS = '''
import os, signal, time
import numpy as np

TABLE = {table}

def data(xp, n=100, seed=0):
    return xp.asarray(np.random.default_rng(seed).normal(size=(n, 3)))

def target(x, xp):
    return x @ xp.asarray([1.0, -2.0, 0.5]) + 0.3

def grad_step(w, x, y, xp, lr=0.1, nap=0.0):
    if nap:
        time.sleep(nap)
    err = x @ w - y
    return w - lr * (x.T @ err) / x.shape[0]

def mse(w, x, y, xp):
    err = x @ w - y
    return xp.mean(err * err)

def grad(w, x, y, xp):
    err = x @ w - y
    return (x.T @ err) / x.shape[0]

def apply(w, g, xp, lr=0.1):
    return w - lr * g

def score(t, xp):
    # an evaluation value chosen per step (TABLE[k] after step 2(k+1)): ties, small gains, late gains
    return xp.asarray(TABLE[int(t) // 2 - 1])

def dies(w, xp, counter="", at=30):
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    with open(counter, "w") as f:
        f.write(str(n + 1))
    if n + 1 == at:
        with open(counter + ".killed", "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    return w
'''

# evaluation k (after step 2(k+1)) of the early-stopping specs
TABLE = [1.0, 0.8, 0.8, 0.7995, 0.6, 0.65, 0.6, 0.5995, 0.61, 0.3, 0.35, 0.3, 0.31, 0.32, 0.33, 0.34]


def quiet(_: str) -> None:
    pass


def write_spec(tmp_path: Path, tag: str, text: str) -> Path:
    (tmp_path / f"fns_{tag}.py").write_text(FNS.format(table=TABLE))
    spec = tmp_path / f"{tag}.yaml"
    spec.write_text(textwrap.dedent(text).replace("FNS", f"fns_{tag}"))
    return spec


# ------------------------------------------------------------------- NumPy references


def data(n: int = 100, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3))


def target(x: np.ndarray) -> np.ndarray:
    return np.asarray(x @ np.asarray([1.0, -2.0, 0.5]) + 0.3)


def mse(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    err = x @ w - y
    return float(np.mean(err * err))


def grad_step(w: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float = 0.1) -> np.ndarray:
    return np.asarray(w - lr * (x.T @ (x @ w - y)) / x.shape[0])


def batch_rows(step: int, n: int, size: int, seed: int, shuffle: bool = True, drop: bool = False) -> np.ndarray:
    """Step ``step``'s rows: batch s mod b of epoch s div b, epoch e ordered by default_rng([seed, e])."""
    per_epoch = n // size if drop else -(-n // size)
    epoch, index = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
    return order[index * size:min((index + 1) * size, n)]


def reference_minibatch(steps: int, n: int, size: int, seed: int, shuffle: bool = True, drop: bool = False,
                        lr: float = 0.1) -> tuple[np.ndarray, list[float]]:
    """The final w and the per-step loss (of w before the step, on the step's batch)."""
    x_all, w, losses = data(n), np.zeros(3), []
    y_all = target(x_all)
    for s in range(steps):
        rows = batch_rows(s, n, size, seed, shuffle, drop)
        losses.append(mse(w, x_all[rows], y_all[rows]))
        w = grad_step(w, x_all[rows], y_all[rows], lr)
    return w, losses


def keras_early_stopping(values: list[float], *, patience: int, min_delta: float = 0.0, mode: str = "min",
                         baseline: float | None = None, start_from: int = 0,
                         tie_is_gain: bool = False) -> tuple[int | None, int | None]:
    """Keras 3's EarlyStopping.on_epoch_end over ``values`` (one per epoch): (stopped epoch or None, best epoch).

    Transcribed from keras/src/callbacks/early_stopping.py: best starts as None (any first value improves),
    ``_is_improvement`` is ``monitor_op(value - min_delta, reference)`` with min_delta negated for ``min``.
    """
    delta = -min_delta if mode == "min" else min_delta

    def is_improvement(value: float, reference: float | None) -> bool:
        if reference is None:
            return True
        if mode == "min":
            return value - delta < reference or (tie_is_gain and value - delta == reference)
        return value - delta > reference

    best, best_epoch, wait = None, None, 0
    for epoch, current in enumerate(values):
        if epoch < start_from:
            continue
        wait += 1
        if is_improvement(current, best):
            best, best_epoch = current, epoch
            if baseline is None or is_improvement(current, baseline):
                wait = 0
            continue
        if wait >= patience and epoch > 0:
            return epoch, best_epoch
    return None, best_epoch


def read_csv(path: Path) -> np.ndarray:
    return np.loadtxt(path, delimiter=",", ndmin=1)


# ------------------------------------------------------------------- early stopping and stop_when

STOPPING_LOOP = """\
  - name: {name}
    iterate:
      steps: 32
      window: 4
      state: {{w: w0, t: t0}}
      body:
        - {{name: loss, op: call, fn: "FNS:mse", inputs: [w, X, Y], output: {{shape: []}}}}
        - {{name: w1, op: call, fn: "FNS:grad_step", inputs: [w, X, Y], output: {{shape: [3]}}}}
        - {{name: t1, op: add, inputs: [t], scalar: 1.0}}
      update: {{w: w1, t: t1}}
      metrics: {{loss: loss}}
      evaluate:
        every: 2
        body:
          - {{name: s, op: call, fn: "FNS:score", inputs: [t], output: {{shape: []}}}}
          - {{name: v, op: call, fn: "FNS:mse", inputs: [w, Xv, Yv], output: {{shape: []}}}}
          - {{name: n, op: mul, inputs: [s], scalar: -1.0}}
        metrics: {{val: s, vloss: v, nval: n}}
      {rule}
"""

STOPPING_RULES = {
    "plain": "early_stop: {metric: val, patience: 3, min_delta: 0.001, restore_best: true}",
    "base": "early_stop: {metric: val, patience: 3, min_delta: 0.001, baseline: 0.7}",
    "late": "early_stop: {metric: val, patience: 3, min_delta: 0.001, start_from: 5}",
    "nodelta": "early_stop: {metric: val, patience: 3}",
    "maxed": "early_stop: {metric: nval, mode: max, patience: 3, min_delta: 0.001}",  # the table negated
    "cond": "stop_when: {metric: val, below: 0.62}",
}


def stopping_spec(tmp_path: Path, tag: str, loops: str, outputs: str) -> Path:
    return write_spec(tmp_path, tag, f"version: 1\nname: {tag}\ngraph:\n"
                      "  - {name: X, op: call, fn: \"FNS:data\", params: {n: 60}, output: {shape: [60, 3]}}\n"
                      "  - {name: Y, op: call, fn: \"FNS:target\", inputs: [X], output: {shape: [60]}}\n"
                      "  - {name: Xv, op: call, fn: \"FNS:data\", params: {n: 20, seed: 1}, output: {shape: [20, 3]}}\n"
                      "  - {name: Yv, op: call, fn: \"FNS:target\", inputs: [Xv], output: {shape: [20]}}\n"
                      "  - {name: w0, op: variable, shape: [3], init: zeros}\n"
                      "  - {name: t0, op: variable, shape: [], init: zeros}\n"
                      + loops + "outputs:\n" + outputs)


@pytest.fixture(scope="module")
def stopping(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One run of four loops, each with its own rule, over the same evaluation values."""
    tmp_path = tmp_path_factory.mktemp("stopping")
    loops = "".join(STOPPING_LOOP.format(name=name, rule=rule) for name, rule in STOPPING_RULES.items())
    outputs = "".join(f"  {n}.w: {n}_w.npy\n  {n}.loss: {n}_loss.csv\n  {n}.val: {n}_val.csv\n"
                      f"  {n}.vloss: {n}_vloss.csv\n" for n in STOPPING_RULES)
    spec = stopping_spec(tmp_path, "stop", loops, outputs)
    result = run_file(spec, echo=quiet, report_path=str(tmp_path / "r.json"))
    return tmp_path, result


def full_batch_reference(steps: int) -> tuple[list[np.ndarray], list[float], list[float]]:
    """w after each step 0..steps, the loss before each step, the validation loss after each step (index = step)."""
    x, xv = data(60), data(20, seed=1)
    y, yv = target(x), target(xv)
    ws, losses = [np.zeros(3)], []
    for _ in range(steps):
        losses.append(mse(ws[-1], x, y))
        ws.append(grad_step(ws[-1], x, y))
    return ws, losses, [mse(w, xv, yv) for w in ws]


@pytest.mark.parametrize("name, rule", [
    ("plain", {}),
    ("nodelta", {"min_delta": 0.0}),
    ("base", {"baseline": 0.7}),
    ("late", {"start_from": 5}),
    ("maxed", {"mode": "max"}),
])
def test_early_stopping_stops_where_keras_would(stopping: tuple[Path, Any], name: str, rule: dict[str, Any]) -> None:
    out, result = stopping
    report = json.loads((out / "r.json").read_text())
    val = read_csv(out / f"{name}_val.csv").reshape(-1, 2)
    vloss = read_csv(out / f"{name}_vloss.csv").reshape(-1, 2)
    loss = read_csv(out / f"{name}_loss.csv")
    # the evaluation values the run reports are what NumPy computes (every 2 steps: the table, the val. loss)
    ws, losses, vlosses = full_batch_reference(32)
    steps = [int(s) for s in val[:, 0]]
    assert steps == list(range(2, 2 * len(steps) + 1, 2))
    assert val[:, 1].tolist() == TABLE[:len(steps)]
    assert vloss[:, 0].tolist() == val[:, 0].tolist()
    np.testing.assert_allclose(vloss[:, 1], [vlosses[s] for s in steps], rtol=1e-12)
    # Keras, evaluation by evaluation, over the full table: where it stops, and the run stops there
    values = [-v for v in TABLE] if rule.get("mode") == "max" else TABLE
    stopped, best = keras_early_stopping(values, patience=3, **{"min_delta": 0.001, **rule})
    assert stopped is not None
    expected_step = 2 * (stopped + 1)
    assert steps[-1] == expected_step, (name, steps)
    assert report["loops"][name]["stopped_at_step"] == expected_step
    assert report["loops"][name]["stop_reason"] == "early_stop"
    assert result.values[f"{name}.loss"].shape[0] == expected_step  # the step metric ends there too
    assert len(loss) == expected_step
    np.testing.assert_allclose(loss, losses[:expected_step], rtol=1e-12)
    if name == "plain":  # restore_best: the best evaluation's state, not the last step's
        assert best is not None and 2 * (best + 1) != expected_step
        np.testing.assert_allclose(np.load(out / "plain_w.npy"), ws[2 * (best + 1)], rtol=1e-12)
        assert not np.allclose(ws[2 * (best + 1)], ws[expected_step])
    else:
        np.testing.assert_allclose(np.load(out / f"{name}_w.npy"), ws[expected_step], rtol=1e-12)


def test_the_rules_are_told_apart_by_the_table() -> None:
    """The table is one where a tie counted as a gain, a min_delta ignored, no baseline or no start_from
    would each stop elsewhere: the run's stopping steps above pin down every one of them."""
    def stop(**rule: Any) -> int | None:
        return keras_early_stopping(TABLE, patience=3, **rule)[0]

    plain = stop(min_delta=0.001)
    assert keras_early_stopping([-v for v in TABLE], patience=3, min_delta=0.001, mode="max")[0] != \
        keras_early_stopping([-v for v in TABLE], patience=3, min_delta=0.001, mode="min")[0]  # mode counts
    assert plain != stop()                                   # min_delta counts
    assert stop() != stop(tie_is_gain=True)                  # a tie is not an improvement
    assert plain != stop(min_delta=0.001, baseline=0.7)      # the baseline counts
    assert plain != stop(min_delta=0.001, start_from=5)      # start_from counts


def test_stop_when_stops_at_the_first_evaluation_below_the_bound(stopping: tuple[Path, Any]) -> None:
    out, result = stopping
    report = json.loads((out / "r.json").read_text())
    first = next(k for k, v in enumerate(TABLE) if v < 0.62)
    step = 2 * (first + 1)
    assert report["loops"]["cond"]["stop_reason"] == "condition"
    assert report["loops"]["cond"]["stopped_at_step"] == step
    val = read_csv(out / "cond_val.csv").reshape(-1, 2)
    assert val[-1].tolist() == [step, TABLE[first]] and len(val) == first + 1
    assert len(read_csv(out / "cond_loss.csv")) == step
    ws, _, _ = full_batch_reference(32)
    np.testing.assert_allclose(np.load(out / "cond_w.npy"), ws[step], rtol=1e-12)


# ------------------------------------------------------------------- minibatches

BATCH_LOOP = """\
  - name: {name}
    iterate:
      window: 5
      state: {{w: w0}}
      batches: {{data: {{x: X, y: Y}}, size: {size}, epochs: {epochs}, {extra}}}
      body:
        - {{name: loss, op: call, fn: "FNS:mse", inputs: [w, x, y], output: {{shape: []}}}}
        - {{name: w1, op: call, fn: "FNS:grad_step", inputs: [w, x, y], output: {{shape: [3]}}}}
      update: {{w: w1}}
      metrics: {{loss: loss}}
"""

BATCHED = {  # name: (size, epochs, seed, shuffle, drop) over 100 rows
    "keep": (32, 3, 3, True, False),   # 4 batches an epoch, the last of 4 rows: 12 steps
    "drop": (32, 3, 3, True, True),    # 3 batches an epoch: 9 steps
    "inorder": (30, 2, 0, False, False),  # no shuffle: 4 batches an epoch, the last of 10 rows: 8 steps
}


def test_minibatches_on_one_device_equal_numpy(tmp_path: Path) -> None:
    loops = "".join(BATCH_LOOP.format(
        name=name, size=size, epochs=epochs,
        extra=f"seed: {seed}, shuffle: {str(shuffle).lower()}, last: {'drop' if drop else 'keep'}")
        for name, (size, epochs, seed, shuffle, drop) in BATCHED.items())
    spec = write_spec(tmp_path, "mb", "version: 1\nname: mb\ngraph:\n"
                      "  - {name: X, op: call, fn: \"FNS:data\", params: {n: 100}, output: {shape: [100, 3]}}\n"
                      "  - {name: Y, op: call, fn: \"FNS:target\", inputs: [X], output: {shape: [100]}}\n"
                      "  - {name: w0, op: variable, shape: [3], init: zeros}\n"
                      + loops + "outputs:\n"
                      + "".join(f"  {n}.w: {n}_w.npy\n  {n}.loss: {n}_loss.csv\n" for n in BATCHED))
    result = run_file(spec, echo=quiet, write_outputs=False, report_path=str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    for name, (size, epochs, seed, shuffle, drop) in BATCHED.items():
        steps = epochs * (100 // size if drop else -(-100 // size))
        assert report["loops"][name]["stopped_at_step"] == steps, name  # steps follow from epochs
        w, losses = reference_minibatch(steps, 100, size, seed, shuffle, drop)
        np.testing.assert_array_equal(result.values[f"{name}.w"], w, err_msg=name)
        np.testing.assert_array_equal(np.asarray(result.values[f"{name}.loss"], dtype=float), losses, err_msg=name)
    # the order really is per epoch and seeded: another epoch's order, or another seed, is another result
    assert not np.array_equal(reference_minibatch(12, 100, 32, 4)[0], result.values["keep.w"])
    assert not np.array_equal(batch_rows(0, 100, 32, 3), batch_rows(4, 100, 32, 3))


DATA_PARALLEL = """\
version: 1
name: dp
cluster:
  jobs:
    ps: {tasks: 1}
    worker: {tasks: 1, gpus: 2}
placement:
  default: /job:worker
graph:
  - {name: X, op: call, fn: "FNS:data", params: {n: 99}, output: {shape: [99, 3]}, device: /job:ps/task:0/cpu:0}
  - {name: Y, op: call, fn: "FNS:target", inputs: [X], output: {shape: [99]}, device: /job:ps/task:0/cpu:0}
  - {name: w0, op: variable, shape: [3], init: zeros, device: /job:ps/task:0/cpu:0}
  - name: train
    iterate:
      window: 5
      state: {w: w0}
      batches: {data: {x: X, y: Y}, size: 32, epochs: 3, seed: 5}
      body:
        - name: towers
          replicate:
            devices: [/job:worker/gpu:0, /job:worker/gpu:1]
            split: {x: 0, y: 0}
            body:
              - {name: g, op: call, fn: "FNS:grad", inputs: [w, x, y], kernels: [cpu, gpu], output: {shape: [3]}}
            combine: {g: mean}
            combine_device: /job:ps/task:0/cpu:0
        - {name: w1, op: call, fn: "FNS:apply", inputs: [w, towers.g], output: {shape: [3]},
           device: /job:ps/task:0/cpu:0}
      update: {w: w1}
outputs:
  train.w: "-"
"""


def test_data_parallel_minibatches_with_an_uneven_last_batch_equal_one_device(tmp_path: Path) -> None:
    """99 rows in batches of 32: each epoch's last batch has 3 rows, split 2 + 1 over the two devices;
    the mean combine weighs the halves 2:1, so the result is single-device gradient descent."""
    spec = write_spec(tmp_path, "dp", DATA_PARALLEL)
    result = run_file(spec, echo=quiet, write_outputs=False, report_path=str(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text())["loops"]["train"]["stopped_at_step"] == 12
    x_all = data(99)
    y_all = target(x_all)
    w, unweighted = np.zeros(3), np.zeros(3)
    for s in range(12):
        rows = batch_rows(s, 99, 32, 5)
        w = grad_step(w, x_all[rows], y_all[rows])
        halves = np.array_split(rows, 2)  # what an unweighted mean of the two towers would give
        g = np.mean([(x_all[h].T @ (x_all[h] @ unweighted - y_all[h])) / len(h) for h in halves], axis=0)
        unweighted = unweighted - 0.1 * g
    np.testing.assert_allclose(result.values["train.w"], w, rtol=1e-12, atol=1e-15)
    assert not np.allclose(unweighted, w, rtol=1e-6)


# ------------------------------------------------------------------- checkpoints and --resume

CHECKPOINTED = """\
version: 1
name: ck
graph:
  - {{name: X, op: call, fn: "FNS:data", params: {{n: 100}}, output: {{shape: [100, 3]}}}}
  - {{name: Y, op: call, fn: "FNS:target", inputs: [X], output: {{shape: [100]}}}}
  - {{name: Xv, op: call, fn: "FNS:data", params: {{n: 40, seed: 1}}, output: {{shape: [40, 3]}}}}
  - {{name: Yv, op: call, fn: "FNS:target", inputs: [Xv], output: {{shape: [40]}}}}
  - {{name: w0, op: variable, shape: [3], init: zeros}}
  - name: train
    iterate:
      window: 5
      state: {{w: w0}}
      batches: {{data: {{x: X, y: Y}}, size: 25, epochs: {epochs}, seed: 7}}
      body:
        - {{name: loss, op: call, fn: "FNS:mse", inputs: [w, x, y], output: {{shape: []}}}}
        - {{name: w1, op: call, fn: "FNS:grad_step", inputs: [w, x, y], output: {{shape: [3]}},
           params: {{lr: {lr}, nap: {nap}}}}}
        - {{name: w2, op: call, fn: "FNS:dies", inputs: [w1], output: {{shape: [3]}},
           params: {{counter: "{counter}", at: {at}}}}}
      update: {{w: w2}}
      metrics: {{loss: loss}}
      evaluate:
        every: 10
        body:
          - {{name: v, op: call, fn: "FNS:mse", inputs: [w, Xv, Yv], output: {{shape: []}}}}
        metrics: {{val: v}}
      early_stop: {{metric: val, patience: 3, min_delta: 0.0}}
      checkpoint: {{every: 10, keep: 3}}
outputs:
  train.w: w.npy
  train.loss: loss.csv
  train.val: val.csv
"""


def checkpointed(tmp_path: Path, *, epochs: int = 10, lr: float = 0.05, nap: float = 0.0, at: int = 0) -> Path:
    text = CHECKPOINTED.format(epochs=epochs, lr=lr, nap=nap, counter=tmp_path / "count", at=at)
    return write_spec(tmp_path, "ck", text)


def checkpoint_files(spec: Path) -> list[Path]:
    folder = spec.parent / ".orchestrate" / "cache" / "checkpoints" / "ck" / "train"
    return sorted(folder.glob("*.npz")) if folder.is_dir() else []


def step_of(path: Path) -> int:
    return int(path.stem.rsplit("-", 1)[1])


def same_files(a: Path, b: Path, names: tuple[str, ...] = ("w.npy", "loss.csv", "val.csv")) -> None:
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _group_left(pgid: int, within: float) -> list[str]:
    deadline = time.monotonic() + within
    while True:
        left = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    left.append(proc.name)
            except (OSError, ValueError, IndexError):
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.mark.faults
def test_sigterm_midway_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    spec = checkpointed(tmp_path, epochs=20, nap=0.02)  # 80 steps of 20 ms: SIGTERM lands midway
    proc = subprocess.Popen([str(BIN / "orchestrate"), "run", str(spec), "--no-progress",
                             "--output-dir", str(tmp_path / "killed")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
                            start_new_session=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not checkpoint_files(spec):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and proc.returncode == 143, (proc.returncode, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err
    assert _group_left(proc.pid, within=5.0) == []
    assert not (tmp_path / "killed" / "w.npy").exists()
    steps = [step_of(p) for p in checkpoint_files(spec)]
    assert 0 < max(steps) < 80, steps

    done = subprocess.run([str(BIN / "orchestrate"), "run", str(spec), "--no-progress", "--resume",
                           "--report", str(tmp_path / "r.json"), "--output-dir", str(tmp_path / "resumed")],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    loop = json.loads((tmp_path / "r.json").read_text())["loops"]["train"]
    assert loop["resumed_from_step"] == max(steps) > 0
    assert f"resumes from its checkpoint at step {max(steps)}" in done.stdout

    run_file(spec, echo=quiet, use_cache=False, cache_dir=str(tmp_path / "elsewhere"),
             output_dir=str(tmp_path / "whole"))
    same_files(tmp_path / "resumed", tmp_path / "whole")
    assert loop["stopped_at_step"] == len(read_csv(tmp_path / "whole" / "loss.csv"))


@pytest.mark.faults
def test_a_worker_killed_mid_loop_fails_the_run_and_resume_finishes_it(tmp_path: Path) -> None:
    spec = checkpointed(tmp_path, epochs=15, nap=0.01, at=45)  # 60 steps; the 45th step's worker dies
    with pytest.raises(RunError):
        run_file(spec, echo=quiet, output_dir=str(tmp_path / "killed"))
    assert (tmp_path / "count.killed").exists()
    steps = [step_of(p) for p in checkpoint_files(spec)]
    assert steps and 0 < max(steps) < 45, steps
    said: list[str] = []
    run_file(spec, echo=said.append, resume=True, output_dir=str(tmp_path / "resumed"),
             report_path=str(tmp_path / "r.json"))
    loop = json.loads((tmp_path / "r.json").read_text())["loops"]["train"]
    assert loop["resumed_from_step"] == max(steps), said
    run_file(spec, echo=quiet, use_cache=False, cache_dir=str(tmp_path / "elsewhere"),
             output_dir=str(tmp_path / "whole"))
    same_files(tmp_path / "resumed", tmp_path / "whole")
    w, losses = reference_minibatch(len(read_csv(tmp_path / "whole" / "loss.csv")), 100, 25, 7, lr=0.05)
    np.testing.assert_array_equal(np.load(tmp_path / "whole" / "w.npy"), w)


def test_a_corrupted_checkpoint_is_skipped_and_another_revisions_is_not_used(tmp_path: Path) -> None:
    spec = checkpointed(tmp_path, epochs=10)  # 40 steps: checkpoints at 10, 20, 30 and the last, 40 (keep 3)
    run_file(spec, echo=quiet, output_dir=str(tmp_path / "first"))
    files = checkpoint_files(spec)
    assert [step_of(p) for p in files] == [20, 30, 40]
    newest = files[-1]
    raw = bytearray(newest.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 8] = bytes(b ^ 0xFF for b in raw[middle:middle + 8])
    newest.write_bytes(bytes(raw))

    said: list[str] = []
    run_file(spec, echo=said.append, resume=True, output_dir=str(tmp_path / "again"),
             report_path=str(tmp_path / "r.json"))
    warnings = [line for line in said if line.startswith("warning:")]
    assert any(str(newest) in line and "not used" in line for line in warnings), said
    assert json.loads((tmp_path / "r.json").read_text())["loops"]["train"]["resumed_from_step"] == 30
    same_files(tmp_path / "again", tmp_path / "first")

    # another revision of the loop: a body param changed
    spec.write_text(spec.read_text().replace("lr: 0.05", "lr: 0.04"))
    said.clear()
    run_file(spec, echo=said.append, resume=True, output_dir=str(tmp_path / "revised"),
             report_path=str(tmp_path / "r2.json"))
    assert json.loads((tmp_path / "r2.json").read_text())["loops"]["train"]["resumed_from_step"] == 0
    why = [line for line in said if "starts from step 0" in line]
    assert len(why) == 1 and "another revision" in why[0], said
    assert "body op 'w1' changed" in why[0], why  # what changed
    w, _ = reference_minibatch(40, 100, 25, 7, lr=0.04)
    np.testing.assert_array_equal(np.load(tmp_path / "revised" / "w.npy"), w)


def test_the_progress_line_shows_steps_rate_and_latest_metrics(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from orchestrator.cli import run_cli

    spec = checkpointed(tmp_path, epochs=10, nap=0.005)  # 40 steps, windows of 5, evaluations every 10
    code = run_cli(["run", str(spec), "--progress", "--no-cache", "--output-dir", str(tmp_path / "out")],
                   out=io.StringIO())
    assert code == 0
    printed = capsys.readouterr().out
    shown = [part.strip() for part in printed.replace("\n", "\r").split("\r") if part.strip().startswith("train:")]
    assert shown, printed
    val = read_csv(tmp_path / "out" / "val.csv").reshape(-1, 2)
    loss = read_csv(tmp_path / "out" / "loss.csv")
    last = shown[-1]
    assert last.startswith("train: step 40/40, "), shown
    assert " steps/s" in last
    assert f"loss {loss[-1]:.4g}" in last and f"val {val[-1, 1]:.4g}" in last, last
    steps = [int(line.split("step ", 1)[1].split("/", 1)[0]) for line in shown]
    assert steps == sorted(steps) and len(set(steps)) > 2, shown  # one line rewritten as windows are read
    at_20 = next(line for line in shown if line.startswith("train: step 20/40"))
    assert f"val {val[1, 1]:.4g}" in at_20, at_20  # the evaluation of step 20 shown with that window


# ------------------------------------------------------------------- bad input (specs/invalid/201-209)

TRAINING_CORPUS = {  # file: (code, words the message or hint has)
    "201-early-stop-metric-not-made": ("loop-stopping", "did you mean 'val_loss'?"),
    "202-batch-larger-than-data": ("batches-size", "larger than the data (40 rows)"),
    "203-batched-rows-differ": ("batches-rows", "'x' has 40, 'y' has 30"),
    "204-steps-not-matching-epochs": ("batches-steps", "leave steps out"),
    "205-stop-when-without-bound": ("loop-stopping", "give below: X or above: X"),
    "206-early-stop-without-evaluate": ("loop-stopping", "the loop has none"),
    "207-checkpoint-every-past-steps": ("loop-every", "would never be written"),
    "208-checkpoint-on-inner-loop": ("loop-training", "belongs to the outermost loop"),
    "209-evaluate-every-cuts-windows": ("loop-every", "the windows are cut at every evaluate step"),
}


@pytest.mark.parametrize("name", TRAINING_CORPUS)
def test_bad_training_input_is_said_at_file_line_col_with_a_hint(name: str) -> None:
    from orchestrator import check_file

    path = ROOT / "specs" / "invalid" / f"{name}.yaml"
    expect = path.read_text().splitlines()[0].removeprefix("# expect: ")
    checked = check_file(path, display_name=f"{name}.yaml")
    (diagnostic,) = checked.diagnostics
    code, words = TRAINING_CORPUS[name]
    assert diagnostic.code == code
    assert diagnostic.hint.strip()
    assert words in diagnostic.render()
    assert diagnostic.render() == f"{name}.yaml:{expect}"
    assert diagnostic.is_error == (name != "209-evaluate-every-cuts-windows")


def test_an_every_that_does_not_divide_the_window_cuts_the_windows(tmp_path: Path) -> None:
    """The warning's claim, run: evaluations every 3 steps in windows of 5 see every 3rd step's states."""
    spec = write_spec(tmp_path, "cut", """\
        version: 1
        graph:
          - {name: w0, op: zeros, shape: []}
          - name: train
            iterate:
              steps: 20
              window: 5
              state: {w: w0}
              body:
                - {name: w1, op: add, inputs: [w], scalar: 1}
              update: {w: w1}
              evaluate:
                every: 3
                body:
                  - {name: v, op: mul, inputs: [w], scalar: 1.0}
                metrics: {seen: v}
        outputs: {train.seen: seen.csv}
        """)
    run_file(spec, echo=quiet)
    seen = read_csv(tmp_path / "seen.csv").reshape(-1, 2)
    assert seen[:, 0].tolist() == [3, 6, 9, 12, 15, 18, 20]
    assert seen[:, 1].tolist() == seen[:, 0].tolist()  # the state after that step


# ------------------------------------------------------------------- resuming a loop that stops early


def resumable_stopping(tmp_path: Path) -> Path:
    """The 'plain' early-stopping loop (stops at 16, best at 10) with checkpoints at 4, 8 and 12."""
    loop = STOPPING_LOOP.format(name="plain", rule=STOPPING_RULES["plain"] + "\n      checkpoint: {every: 4, keep: 5}")
    return stopping_spec(tmp_path, "rs", loop, "  plain.w: w.npy\n  plain.val: val.csv\n  plain.loss: loss.csv\n")


def test_resume_carries_the_early_stopping_state(tmp_path: Path) -> None:
    """Resumed at step 12 (one evaluation waited since the best at 10), the loop stops at 16 as the
    uninterrupted run did: without the judge's best and wait restored it would run on to step 26."""
    spec = resumable_stopping(tmp_path)
    run_file(spec, echo=quiet, output_dir=str(tmp_path / "whole"))
    assert [step_of(p) for p in sorted((tmp_path / ".orchestrate/cache/checkpoints/rs/plain").glob("*.npz"))] == \
        [4, 8, 12]
    run_file(spec, echo=quiet, resume=True, output_dir=str(tmp_path / "resumed"), report_path=str(tmp_path / "r.json"))
    loop = json.loads((tmp_path / "r.json").read_text())["loops"]["plain"]
    assert (loop["resumed_from_step"], loop["stopped_at_step"], loop["stop_reason"]) == (12, 16, "early_stop")
    same_files(tmp_path / "resumed", tmp_path / "whole", ("val.csv", "loss.csv"))
    fresh = keras_early_stopping(TABLE[6:], patience=3, min_delta=0.001)[0]  # a judge that forgot
    assert fresh is not None and 2 * (6 + fresh + 1) != 16


def test_resume_with_restore_best_outputs_the_best_state_from_before_the_checkpoint(tmp_path: Path) -> None:
    spec = resumable_stopping(tmp_path)
    run_file(spec, echo=quiet, output_dir=str(tmp_path / "whole"))
    run_file(spec, echo=quiet, resume=True, output_dir=str(tmp_path / "resumed"), report_path=str(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text())["loops"]["plain"]["resumed_from_step"] == 12
    ws, _, _ = full_batch_reference(32)
    np.testing.assert_allclose(np.load(tmp_path / "whole" / "w.npy"), ws[10], rtol=1e-12)  # best: step 10
    same_files(tmp_path / "resumed", tmp_path / "whole", ("w.npy",))
