"""Settings that would give a silently wrong run are refused at validation, at their line and column.

``.nan`` and ``.inf`` are data, never settings (``spec.validate.numbers``); a loop's steps from its epochs
are bounded as ``steps:`` is; a metric that is not one number where one number is ranked or recorded (an
evaluation metric, a sweep's ``select``) is an error before the run, not a failure after every copy trained.
Real files, the real loader and validator (``api.check_file``); the invalid corpus holds one spec of each.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.api import check_file

LOOP = """\
version: 1
params:
  md: {{type: number, default: 0.001}}
graph:
  - {{name: w0, op: zeros, shape: [2]}}
  - {{name: target, op: ones, shape: [2]}}
  - name: fit
    iterate:
      steps: 20
      state: {{w: w0}}
      evaluate: {{every: 2, body: [{{name: gap, op: sub, inputs: [w, target]}}, {{name: err, op: sum, inputs: [gap]}}],
                 metrics: {{val: {metric}}}}}
      early_stop: {{metric: val, patience: 2, min_delta: {min_delta}, restore_best: true}}
      body:
        - {{name: w_next, op: add, inputs: [w], scalar: 0.1}}
      update: {{w: w_next}}
"""


def _check(tmp_path: Path, text: str, params: dict[str, str] | None = None) -> list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return [d.render() for d in check_file(path, params=params).diagnostics if d.is_error]


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_min_delta_that_is_not_finite_is_refused_at_its_place(tmp_path: Path, value: str) -> None:
    errors = _check(tmp_path, LOOP.format(metric="err", min_delta=value))
    assert len(errors) == 1, errors
    assert ":13:" in errors[0] and "early_stop.min_delta: must be a finite number, got " + value in errors[0]
    assert "leave min_delta out for its default" in errors[0]


def test_a_nan_given_by_set_is_refused_and_its_origin_named(tmp_path: Path) -> None:
    errors = _check(tmp_path, LOOP.format(metric="err", min_delta='"${params.md}"'), {"md": ".nan"})
    assert len(errors) == 1, errors
    assert "must be a finite number, got .nan" in errors[0] and "--set md=.nan" in errors[0]


def test_the_same_spec_with_finite_settings_is_valid(tmp_path: Path) -> None:
    assert _check(tmp_path, LOOP.format(metric="err", min_delta="0.001")) == []


def test_nan_and_inf_stay_allowed_as_an_ops_data(tmp_path: Path) -> None:
    text = """\
        version: 1
        graph:
          - {name: holes, op: fill, shape: [3], value: .nan}
          - {name: clipped, op: add, inputs: [holes], scalar: .inf}
          - {name: c, op: constant, value: [1.0, .nan, -.inf]}
          - {name: f, op: call, fn: "m:f", params: {eps: .inf, fill: .nan}, output: {shape: [3]}}
        """
    assert _check(tmp_path, text) == []


def test_halving_and_space_settings_must_be_finite(tmp_path: Path) -> None:
    text = """\
        version: 1
        graph:
          - name: s
            sweep:
              random: {seed: 1, samples: 4, params: {lr: {uniform: [.nan, 1]}}}
              halving: {metric: fit.loss, min_steps: 2, factor: .inf, keep: .nan}
              body:
                - {name: c, op: constant, value: 1.0}
        """
    errors = _check(tmp_path, text)
    assert [e.split(": ")[1] for e in errors] == [
        "graph[0].sweep.random.params.lr.uniform[0]", "graph[0].sweep.halving.factor", "graph[0].sweep.halving.keep"]


def test_epochs_that_make_more_steps_than_a_loop_may_run_are_refused(tmp_path: Path) -> None:
    text = """\
        version: 1
        graph:
          - {name: data, op: ones, shape: [100, 2]}
          - {name: w0, op: zeros, shape: [2]}
          - name: fit
            iterate:
              state: {w: w0}
              batches: {data: {x: data}, size: 10, epochs: 10000000000000}
              body:
                - {name: s, op: sum, inputs: [x], axis: 0}
                - {name: w_next, op: add, inputs: [w, s]}
              update: {w: w_next}
        """
    errors = _check(tmp_path, text)
    assert len(errors) == 1, errors
    assert "batches.epochs: 10,000,000,000,000 epoch(s) of 10 batch(es) are 100,000,000,000,000 steps" in errors[0]


def test_an_evaluation_metric_that_is_an_array_is_refused(tmp_path: Path) -> None:
    errors = _check(tmp_path, LOOP.format(metric="gap", min_delta="0.001"))
    assert len(errors) == 1, errors
    assert "evaluate.metrics.val: evaluation metric 'val' of 'fit' is 'gap', of shape [2]" in errors[0]


def test_select_on_a_metric_series_is_refused_before_any_copy_trains(tmp_path: Path) -> None:
    text = """\
        version: 1
        graph:
          - name: s
            sweep:
              param: k
              values: [1.0, 2.0]
              body:
                - name: t
                  iterate:
                    steps: 4
                    state: {w: k}
                    body: [{name: w2, op: add, inputs: [w], scalar: 1.0}]
                    update: {w: w2}
                    metrics: {m: w2}
              select: {min: t.m}
        """
    errors = _check(tmp_path, text)
    assert len(errors) == 1, errors
    assert ":15:" in errors[0] and "select ranks the copies by one number each, but the metric is of shape [4]" \
        in errors[0]


def test_a_search_over_the_copies_cap_is_refused_before_its_copies_are_made(tmp_path: Path) -> None:
    """Two sweeps of 12,000 copies each: the second passes the spec's 20,000 and is refused at its values."""
    values = ", ".join(f"{i}.5" for i in range(12_000))
    body = "body: [{name: y, op: mul, inputs: [x, k]}]"
    text = f"""\
version: 1
graph:
  - {{name: x, op: ones, shape: [2]}}
  - {{name: a, sweep: {{param: k, values: [{values}], {body}}}}}
  - {{name: b, sweep: {{param: k, values: [{values}], {body}}}}}
"""
    errors = _check(tmp_path, text)
    assert len(errors) == 1, errors
    assert ":5:" in errors[0] and "sweep 'b' makes 12,000 copies; a spec's sweeps make at most 20,000 in all " \
        "(12,000 copies made before it)" in errors[0]
