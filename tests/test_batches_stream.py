"""Batches across epochs (tf.data's repeat, then batch) and shuffle once (reshuffle_each_iteration=False),
on a real cluster, against the same training written in NumPy; and data-parallel towers whose last batch of
the run is partial, weighed by each tower's rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from orchestrator import run_file
from test_training import BATCH_LOOP, DATA_PARALLEL, data, grad_step, mse, quiet, target, write_spec

LOOPS = {  # name: (size, epochs, shuffle, drop) over 100 rows, across epochs
    "stream": (32, 3, "true", False),   # 300 rows: 10 batches, the last of 12 rows; batches 3, 6 span epochs
    "dropped": (32, 3, "true", True),   # 9 full batches, the last 12 rows dropped
    "once": (30, 2, "once", False),     # one order for both epochs: 200 rows, 7 batches, the last of 20
    "big": (150, 2, "true", False),     # a batch larger than the data: 2 batches of 150 and 50
}


def stream_rows(step: int, n: int, size: int, epochs: int, seed: int, shuffle: str) -> np.ndarray:
    """Step ``step``'s rows of the epochs one after another, epoch e in the order default_rng([seed, e])
    (``once``: epoch 0's order every time)."""
    orders = [np.random.default_rng([seed, 0 if shuffle == "once" else e]).permutation(n) for e in range(epochs)]
    stream = np.concatenate(orders)
    return stream[step * size:(step + 1) * size]


def test_batches_across_epochs_and_shuffle_once_equal_numpy(tmp_path: Path) -> None:
    loops = "".join(BATCH_LOOP.format(name=name, size=size, epochs=epochs, extra=f"seed: 4, shuffle: {shuffle}, "
                                      f"across_epochs: true, last: {'drop' if drop else 'keep'}")
                    for name, (size, epochs, shuffle, drop) in LOOPS.items())
    spec = write_spec(tmp_path, "st", "version: 1\nname: st\ngraph:\n"
                      "  - {name: X, op: call, fn: \"FNS:data\", params: {n: 100}, output: {shape: [100, 3]}}\n"
                      "  - {name: Y, op: call, fn: \"FNS:target\", inputs: [X], output: {shape: [100]}}\n"
                      "  - {name: w0, op: variable, shape: [3], init: zeros}\n"
                      + loops + "outputs:\n" + "".join(f"  {n}.w: {n}_w.npy\n  {n}.loss: {n}_loss.csv\n" for n in LOOPS))
    result = run_file(spec, echo=quiet, write_outputs=False, report_path=str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    x_all = data(100)
    y_all = target(x_all)
    for name, (size, epochs, shuffle, drop) in LOOPS.items():
        steps = epochs * 100 // size if drop else -(-epochs * 100 // size)
        assert report["loops"][name]["stopped_at_step"] == steps, name
        w, losses = np.zeros(3), []
        for s in range(steps):
            rows = stream_rows(s, 100, size, epochs, 4, shuffle)
            assert len(rows) == size or (s == steps - 1 and not drop), (name, s)
            losses.append(mse(w, x_all[rows], y_all[rows]))
            w = grad_step(w, x_all[rows], y_all[rows])
        np.testing.assert_array_equal(result.values[f"{name}.w"], w, err_msg=name)
        np.testing.assert_array_equal(np.asarray(result.values[f"{name}.loss"], dtype=float), losses, err_msg=name)
    # the stream really crosses epochs (batch 3: rows 96-99 of epoch 0's order, then 28 of epoch 1's), and once
    # really is one order (its batch 3 takes epoch 0's first rows again)
    first = np.random.default_rng([4, 0]).permutation(100)
    crossing = stream_rows(3, 100, 32, 3, 4, "true")
    np.testing.assert_array_equal(crossing[:4], first[96:])
    assert not np.array_equal(crossing[4:], first[:28])
    np.testing.assert_array_equal(stream_rows(3, 100, 32, 3, 4, "once")[4:], first[:28])


def test_data_parallel_towers_weigh_the_runs_partial_last_batch(tmp_path: Path) -> None:
    """99 rows x 3 epochs across epochs in batches of 32: 9 full batches and a last one of 9 rows, split 5 + 4
    over the two towers; the mean weighs them 5:4, so the result is single-device gradient descent."""
    text = DATA_PARALLEL.replace("size: 32, epochs: 3, seed: 5}", "size: 32, epochs: 3, seed: 5, across_epochs: true}")
    spec = write_spec(tmp_path, "dps", text)
    result = run_file(spec, echo=quiet, write_outputs=False, report_path=str(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text())["loops"]["train"]["stopped_at_step"] == 10
    x_all = data(99)
    y_all = target(x_all)
    w = np.zeros(3)
    for s in range(10):
        rows = stream_rows(s, 99, 32, 3, 5, "true")
        assert len(rows) == (9 if s == 9 else 32)
        w = grad_step(w, x_all[rows], y_all[rows])
    np.testing.assert_allclose(result.values["train.w"], w, rtol=1e-12, atol=1e-15)


EVERY_EPOCHS = """\
version: 1
name: ee
graph:
  - {name: X, op: call, fn: "FNS:data", params: {n: 100}, output: {shape: [100, 3]}}
  - {name: Y, op: call, fn: "FNS:target", inputs: [X], output: {shape: [100]}}
  - {name: w0, op: variable, shape: [3], init: zeros}
  - name: fit
    iterate:
      window: 4
      state: {w: w0}
      batches: {data: {x: X, y: Y}, size: 25, epochs: 5, seed: 2}
      body:
        - {name: w1, op: call, fn: "FNS:grad_step", inputs: [w, x, y], output: {shape: [3]}}
      update: {w: w1}
      evaluate:
        every: {epochs: 2}
        body: [{name: v, op: call, fn: "FNS:mse", inputs: [w, X, Y], output: {shape: []}}]
        metrics: {val: v}
      checkpoint: {every: {epochs: 1}, keep: 10}
outputs:
  fit.val: val.csv
"""


def test_every_in_epochs_evaluates_and_checkpoints_at_epoch_ends(tmp_path: Path) -> None:
    """100 rows in batches of 25: an epoch is 4 steps; every 2 epochs evaluates at steps 8, 16 and the last (20),
    a checkpoint every epoch is written at 4, 8, 12, 16."""
    from orchestrator.api import check_file

    spec = write_spec(tmp_path, "ee", EVERY_EPOCHS)
    checked = check_file(spec)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.spec is not None
    loop = checked.spec.loops[0]
    assert (loop.steps, loop.evaluation.every if loop.evaluation else 0, loop.checkpoint.every if loop.checkpoint else 0) \
        == (20, 8, 4)
    result = run_file(spec, echo=quiet, write_outputs=False)
    x_all = data(100)
    y_all = target(x_all)
    w, expected = np.zeros(3), []
    for s in range(20):
        rows = np.random.default_rng([2, s // 4]).permutation(100)[(s % 4) * 25:(s % 4 + 1) * 25]
        w = grad_step(w, x_all[rows], y_all[rows])
        if s + 1 in (8, 16, 20):
            expected.append([s + 1, mse(w, x_all, y_all)])
    np.testing.assert_allclose(np.asarray(result.values["fit.val"]), expected, rtol=1e-12)
    folder = tmp_path / ".orchestrate" / "cache" / "checkpoints" / "ee" / "fit"
    # not at 20: the loop evaluates there only because it is its last step, which a longer run would not
    assert sorted(int(p.stem.rsplit("-", 1)[1]) for p in folder.glob("*.npz")) == [4, 8, 12, 16]


def test_every_in_epochs_needs_batches_and_whole_steps(tmp_path: Path) -> None:
    from orchestrator.api import check_file

    no_batches = EVERY_EPOCHS.replace("      batches: {data: {x: X, y: Y}, size: 25, epochs: 5, seed: 2}\n",
                                      "      steps: 20\n").replace("inputs: [w, x, y]", "inputs: [w, X, Y]")
    said = [d.render() for d in check_file(write_spec(tmp_path, "nb", no_batches)).errors]
    assert len(said) == 1 and "evaluate.every: every: {epochs: N} counts the epochs of 'fit''s batches" in said[0], said
    uneven = EVERY_EPOCHS.replace("size: 25, epochs: 5, seed: 2}", "size: 30, epochs: 5, seed: 2, across_epochs: true}")
    said = [d.render() for d in check_file(write_spec(tmp_path, "ue", uneven)).errors]
    assert len(said) == 1 and "an epoch of 100 rows is 3.33333 batches of 30" in said[0], said
