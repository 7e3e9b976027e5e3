"""Grid crossed with random draws, repeats of a space (Ray Tune's grid search with num_samples), and shapes
computed from parameters and a copy's values, so that copies of different sizes are planned by their own size."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

from orchestrator.api import Checked, check_file
from orchestrator.spec.constructs.shapes import ShapeExpressionError, evaluate

HEAD = """\
version: 1
params:
  classes: {type: integer, default: 10}
graph:
  - {name: x, op: ones, shape: [4, 8]}
"""


def check(tmp_path: Path, sweep: str) -> Checked:
    path = tmp_path / "spec.yaml"
    path.write_text(HEAD + textwrap.indent(textwrap.dedent(sweep), "  "), encoding="utf-8")
    return check_file(path)


def test_grid_with_random_draws_samples_at_every_grid_point_in_order(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        - name: hp
          sweep:
            grid: {width: [16, 32]}
            random: {seed: 5, samples: 3, params: {lr: {loguniform: [0.0001, 0.1]}, drop: {choice: [0.0, 0.5]}}}
            body: [{name: y, op: mul, inputs: [x, lr]}]
        """)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.spec is not None
    copies = checked.spec.sweeps[0].copies
    assert [c.values["width"] for c in copies] == [16, 16, 16, 32, 32, 32]
    # the draws are the seeded stream in order: point 0 takes draws 0-2, point 1 draws 3-5
    stream = random.Random(5)
    expected = []
    for _ in range(6):
        u_lr, u_drop = stream.random(), stream.random()
        expected.append((pytest.approx(10 ** (-4 + 3 * u_lr)), [0.0, 0.5][min(int(u_drop * 2), 1)]))
    assert [(c.values["lr"], c.values["drop"]) for c in copies] == expected
    assert len({c.id for c in copies}) == 6


def test_repeats_make_the_space_again_each_copy_told_its_repeat(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        - name: hp
          sweep:
            grid: {width: [16, 32]}
            repeats: 3
            body: [{name: n, op: random.normal, shape: [2], seed: "${copy.repeat}"}]
        """)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.spec is not None
    copies = checked.spec.sweeps[0].copies
    assert [(c.values["width"], c.values["repeat"]) for c in copies] == [
        (16, 0), (32, 0), (16, 1), (32, 1), (16, 2), (32, 2)]
    assert [checked.spec.op(f"hp/{i}/n").params["seed"] for i in range(6)] == [0, 0, 1, 1, 2, 2]
    assert checked.spec.op("hp/5/repeat").params["value"] == 2  # a number of the copy is a scalar op, as any


def test_repeats_over_random_draw_afresh_and_count_against_the_cap(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        - name: hp
          sweep:
            random: {seed: 1, samples: 2, params: {lr: {uniform: [0, 1]}}}
            repeats: 2
            body: [{name: y, op: mul, inputs: [x, lr]}]
        """)
    assert checked.spec is not None
    lrs = [c.values["lr"] for c in checked.spec.sweeps[0].copies]
    assert len(set(lrs)) == 4
    said = [d.render() for d in check(tmp_path, """\
        - name: hp
          sweep:
            param: k
            values: [1.0, 2.0]
            repeats: 15000
            body: [{name: y, op: mul, inputs: [x, k]}]
        """).errors]
    assert len(said) == 1 and "makes 30,000 copies" in said[0] and "sweep.values" in said[0], said


def test_a_parameter_named_repeat_beside_repeats_is_an_error(tmp_path: Path) -> None:
    said = [d.render() for d in check(tmp_path, """\
        - name: hp
          sweep:
            grid: {repeat: [1, 2]}
            repeats: 2
            body: [{name: y, op: mul, inputs: [x, repeat]}]
        """).errors]
    assert len(said) == 1 and "sweep.repeats" in said[0] and "has a parameter 'repeat' too" in said[0], said


def test_copies_of_different_widths_are_planned_with_their_own_shapes(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        - name: hp
          sweep:
            grid: {hidden: [16, 64]}
            body:
              - {name: w1, op: random.normal, shape: [8, "${copy.hidden} * 2"], seed: 1}
              - {name: w2, op: random.normal, shape: ["${copy.hidden} * 2", "${params.classes} // 2 + 1"], seed: 2}
              - {name: h, op: matmul, inputs: [x, w1]}
              - {name: o, op: matmul, inputs: [h, w2]}
            gather: {outs: o}
        """)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.spec is not None
    assert checked.spec.op("hp/0/w1").params["shape"] == [8, 32]
    assert checked.spec.op("hp/1/w2").params["shape"] == [128, 6]
    assert checked.spec.values["hp/1/o"][0].shape == (4, 6)
    assert checked.spec.values["hp/0/w2"][0].nbytes == 32 * 6 * 8
    assert checked.spec.values["hp/1/w2"][0].nbytes == 128 * 6 * 8


@pytest.mark.parametrize(("text", "problem"), [
    ("10 / 2", "divides with /"), ("3 - 5", "is -2; a dimension is zero or more"), ("4 // 0", "divides by zero"),
    ("2.5 * 2", "holds the fraction 2.5"), ("__import__('os')", "not whole-number arithmetic"),
    ("2 ** 9999", "not whole-number arithmetic"), ("1 +", "is not an arithmetic expression"),
    ("99999999999 * 99999999999", "larger than any dimension"),
])
def test_a_shape_expression_that_is_no_dimension_says_why(text: str, problem: str) -> None:
    with pytest.raises(ShapeExpressionError, match=problem.replace("(", r"\(").replace("*", r"\*")):
        evaluate(text)


def test_shape_expressions_compute_whole_numbers() -> None:
    assert [evaluate(t) for t in ("64 * 2", "(10 + 6) // 4", "17 % 5", " -2 + 10 ", "0")] == [128, 4, 2, 8, 0]


def test_a_bad_expression_is_an_error_at_its_dimension_with_the_parameter_named(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(HEAD + '  - {name: z, op: zeros, shape: [4, "${params.classes} / 2"]}\n', encoding="utf-8")
    said = [d.render() for d in check_file(path).errors]
    assert len(said) == 1, said
    assert ":6:" in said[0] and "graph[1].shape[1]: '10 / 2' divides with /" in said[0]
    assert "${params.classes} = 10, from its default" in said[0]
