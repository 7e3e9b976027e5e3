"""Replicate's combines equal the single-device result on uneven splits: mean weighs copies by their piece's rows.

Each spec computes every value twice, through a replicate and on one
device, and the run must give the same numbers both ways and NumPy's.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import check_file, plan_file
from orchestrator.report import plan_dict, plan_text


def quiet(_: str) -> None:
    pass


def _spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


SEVEN_ROWS = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 2}
    graph:
      - {name: x, op: constant, value: [0, 1, 2, 3, 4, 5, 6], device: /cpu:0}
      - name: towers
        replicate:
          devices: [/gpu:0, /gpu:1]
          split: {x: 0}
          body:
            - {name: m, op: mean, inputs: [x]}
          combine: {m: mean}
          combine_device: /cpu:0
    outputs:
      towers.m: "-"
    """


@pytest.mark.cluster
def test_mean_of_seven_rows_over_two_devices_is_the_batch_mean(tmp_path: Path) -> None:
    # pieces of 4 and 3 rows: means 1.5 and 5.0; unweighted that was 3.25
    result = run_file(_spec(tmp_path, SEVEN_ROWS), echo=quiet, output_dir=str(tmp_path / "out"))
    assert float(result.values["towers.m"]) == float(np.mean(np.arange(7.0))) == 3.0


# Every combine, on pieces of unequal rows, next to the same value computed on one device:
# 7 rows on 2 devices, 10 rows of 2 columns on 3 (4 + 3 + 3), a split along axis 1, and 2 rows
# on 3 devices (one piece empty: its mean of no rows is NaN and must weigh nothing).
EVERY_COMBINE = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 3}
    graph:
      - {name: x, op: constant, value: [0, 1, 2, 3, 4, 5, 6], device: /cpu:0}
      - {name: z, op: random.uniform, shape: [10, 2], seed: 3, device: /cpu:0}
      - {name: zt, op: transpose, inputs: [z], device: /cpu:0}
      - {name: few, op: constant, value: [[1.0, 2.0], [4.0, 8.0]], device: /cpu:0}
      - {name: k, op: constant, value: [1, 2, 3], dtype: int64, device: /cpu:0}
      - name: seven
        replicate:
          devices: [/gpu:0, /gpu:1]
          split: {x: 0}
          body:
            - {name: m, op: mean, inputs: [x]}
            - {name: s, op: sum, inputs: [x]}
            - {name: y, op: square, inputs: [x]}
          combine: {m: mean, s: add_n, y: concat}
          combine_device: /cpu:0
      - name: ten
        replicate:
          devices: /gpu:*
          split: {z: 0, zt: 1}
          body:
            - {name: m, op: mean, inputs: [z], axis: 0}
            - {name: mt, op: mean, inputs: [zt], axis: 1}
            - {name: s, op: sum, inputs: [z], axis: 0}
            - {name: y, op: mul, inputs: [z], scalar: 2.0}
          combine: {m: mean, mt: mean, s: add_n, y: concat}
          combine_device: /cpu:0
      - name: empty
        replicate:
          devices: /gpu:*
          split: {few: 0}
          body:
            - {name: m, op: mean, inputs: [few], axis: 0}
            - {name: s, op: sum, inputs: [few], axis: 0}
          combine: {m: mean, s: add_n}
          combine_device: /cpu:0
      - name: whole
        replicate:
          devices: [/gpu:0, /gpu:1]
          body:
            - {name: c, op: identity, inputs: [k]}
          combine: {c: mean}
      - {name: x_mean, op: mean, inputs: [x], device: /cpu:0}
      - {name: x_sum, op: sum, inputs: [x], device: /cpu:0}
      - {name: x_sq, op: square, inputs: [x], device: /cpu:0}
      - {name: z_mean, op: mean, inputs: [z], axis: 0, device: /cpu:0}
      - {name: zt_mean, op: mean, inputs: [zt], axis: 1, device: /cpu:0}
      - {name: z_sum, op: sum, inputs: [z], axis: 0, device: /cpu:0}
      - {name: z2, op: mul, inputs: [z], scalar: 2.0, device: /cpu:0}
      - {name: few_mean, op: mean, inputs: [few], axis: 0, device: /cpu:0}
      - {name: few_sum, op: sum, inputs: [few], axis: 0, device: /cpu:0}
    outputs:
      seven.m: "-"
      seven.s: "-"
      seven.y: "-"
      ten.m: "-"
      ten.mt: "-"
      ten.s: "-"
      ten.y: "-"
      empty.m: "-"
      empty.s: "-"
      whole.c: "-"
      x_mean: "-"
      x_sum: "-"
      x_sq: "-"
      z_mean: "-"
      zt_mean: "-"
      z_sum: "-"
      z2: "-"
      few_mean: "-"
      few_sum: "-"
    """

SINGLE_DEVICE = {"seven.m": "x_mean", "seven.s": "x_sum", "seven.y": "x_sq", "ten.m": "z_mean",
                 "ten.mt": "zt_mean", "ten.s": "z_sum", "ten.y": "z2", "empty.m": "few_mean", "empty.s": "few_sum"}


@pytest.mark.cluster
def test_every_combine_equals_the_single_device_result_on_uneven_splits(tmp_path: Path) -> None:
    spec = _spec(tmp_path, EVERY_COMBINE)
    result = run_file(spec, echo=quiet, output_dir=str(tmp_path / "out"))
    values = {name: np.asarray(v) for name, v in result.values.items()}
    z = np.random.default_rng([3, 0]).uniform(0.0, 1.0, size=(10, 2))
    numpy = {"x_mean": np.mean(np.arange(7.0)), "x_sum": 21.0, "x_sq": np.arange(7.0) ** 2,
             "z_mean": z.mean(0), "zt_mean": z.T.mean(1), "z_sum": z.sum(0), "z2": 2 * z,
             "few_mean": np.array([2.5, 5.0]), "few_sum": np.array([5.0, 10.0])}
    for combined, single in SINGLE_DEVICE.items():
        np.testing.assert_allclose(values[combined], values[single], rtol=1e-15, atol=0, err_msg=combined)
        np.testing.assert_allclose(values[single], numpy[single], rtol=1e-15, atol=0, err_msg=single)
    assert float(values["seven.m"]) == 3.0
    # copies of integers average as NumPy does, to float64, and the plan sized it so
    np.testing.assert_array_equal(values["whole.c"], np.array([1.0, 2.0, 3.0]))
    assert values["whole.c"].dtype == np.float64
    assert plan_file(spec).spec.values["whole.c"][0].dtype == "float64"


ITERATE = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 2}
    graph:
      - {name: x, op: constant, value: [0, 1, 2, 3, 4, 5, 6], device: /cpu:0}
      - {name: acc0, op: zeros, shape: [], device: /cpu:0}
      - name: train
        iterate:
          steps: 3
          window: 2
          state: {acc: acc0}
          body:
            - name: towers
              replicate:
                devices: [/gpu:0, /gpu:1]
                split: {x: 0}
                body:
                  - {name: m, op: mean, inputs: [x]}
                combine: {m: mean}
                combine_device: /cpu:0
            - {name: acc1, op: add, inputs: [acc, towers.m], device: /cpu:0}
          update: {acc: acc1}
          metrics: {m: towers.m}
    outputs:
      train.acc: "-"
      train.m: "-"
    """


@pytest.mark.cluster
@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_mean_combine_inside_a_loop_is_the_batch_mean_every_step(tmp_path: Path, granularity: str) -> None:
    result = run_file(_spec(tmp_path, ITERATE), echo=quiet, output_dir=str(tmp_path / "out"),
                      granularity=granularity)
    np.testing.assert_array_equal(np.asarray(result.values["train.m"]), [3.0, 3.0, 3.0])
    assert float(result.values["train.acc"]) == 9.0


def test_the_plan_shows_the_weights_in_text_and_json(tmp_path: Path) -> None:
    spec = _spec(tmp_path, EVERY_COMBINE)
    plan = plan_file(spec)
    text = plan_text(plan)
    assert "    weights 4/7, 3/7 (the rows of each copy's piece of seven/split/x)\n" in text
    assert "    weights 2/5, 3/10, 3/10 (the rows of each copy's piece of ten/split/z, ten/split/zt)\n" in text
    assert "    weights 1/2, 1/2, 0 (the rows of each copy's piece of empty/split/few)\n" in text
    assert "    weights 1/2, 1/2 (equal: nothing is split)\n" in text
    ops = {op["name"]: op for op in json.loads(json.dumps(plan_dict(plan)))["ops"]}
    assert ops["seven.m"]["weights"] == {"copies": [4 / 7, 3 / 7], "relative": [4, 3], "split": ["seven/split/x"]}
    assert ops["ten.mt"]["weights"]["relative"] == [4, 3, 3]
    assert ops["whole.c"]["weights"] == {"copies": [0.5, 0.5], "relative": [1, 1], "split": []}
    # add_n and concat have no weights: a sum of the pieces' sums, the pieces in order
    assert "weights" not in ops["seven.s"] and "weights" not in ops["seven.y"]
    assert "weights" not in ops["x_mean"]


def test_the_weights_are_in_the_record_the_run_reads(tmp_path: Path) -> None:
    spec = plan_file(_spec(tmp_path, ITERATE)).spec
    combine = spec.op("train/towers.m")
    assert combine.params == {"split": ["train/towers/split/x"], "weights": [4, 3]}


UNKNOWN_LENGTH = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 2}
    graph:
      - {name: x, op: load, path: x.npy, device: /cpu:0}
      - name: towers
        replicate:
          devices: [/gpu:0, /gpu:1]
          split: {x: 0}
          body:
            - {name: m, op: mean, inputs: [x]}
          combine: {m: mean}
    """

DIFFERENT_PIECES = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 2}
    graph:
      - {name: x, op: ones, shape: [7], device: /cpu:0}
      - {name: w, op: ones, shape: [10], device: /cpu:0}
      - name: towers
        replicate:
          devices: [/gpu:0, /gpu:1]
          split: {x: 0, w: 0}
          body:
            - {name: m, op: mean, inputs: [x]}
            - {name: s, op: sum, inputs: [w]}
          combine: {m: mean, s: add_n}
    """


def test_a_mean_whose_weights_cannot_be_known_is_an_error(tmp_path: Path) -> None:
    unknown = check_file(_spec(tmp_path, UNKNOWN_LENGTH, "unknown.yaml"))
    assert [(d.code, d.line, d.message) for d in unknown.errors] == [(
        "combine-weights", 13, "combine 'm' of 'towers' is a mean weighed by the rows of each copy's piece of 'x', "
        "whose length is not known before the run")]
    assert "shape: on a load" in unknown.errors[0].hint
    different = check_file(_spec(tmp_path, DIFFERENT_PIECES, "different.yaml"))
    assert [(d.code, d.message) for d in different.errors] == [(
        "combine-weights", "combine 'm' of 'towers' is a mean weighed by the rows of each copy's piece, but the "
        "split inputs are cut differently: 'x' into 4 + 3, 'w' into 5 + 5")]
    # the same splits with add_n alone are fine: a sum needs no weights
    fine = DIFFERENT_PIECES.replace("combine: {m: mean, s: add_n}", "combine: {m: add_n, s: add_n}")
    assert check_file(_spec(tmp_path, fine, "fine.yaml")).errors == ()
