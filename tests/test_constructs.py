"""Constructs: the registry, expansion of each construct, and bounds on what they expand to."""

from __future__ import annotations

import textwrap
from pathlib import Path

from orchestrator.api import check_file
from orchestrator.spec.constructs import CONSTRUCTS, construct_of, expand
from orchestrator.spec.load import load_text


def test_every_construct_is_registered_by_its_key_and_found_on_an_item() -> None:
    assert list(CONSTRUCTS) == ["scope", "replicate", "iterate", "sweep"]
    for key, construct in CONSTRUCTS.items():
        assert construct.key == key
        assert construct_of({key: {}, "name": "x"}) is construct
    assert construct_of({"name": "a", "op": "ones"}) is None


def test_each_construct_says_which_internal_ops_it_makes() -> None:
    made = {kind for construct in CONSTRUCTS.values() for kind in construct.internal_ops}
    assert made == {"mean_n", "state", "series", "select", "pick", "minibatch", "evaluations"}


def _expand(text: str):  # type: ignore[no-untyped-def]
    doc = load_text(textwrap.dedent(text))
    return expand(doc, doc.data["graph"], None)


def test_expansion_names_copies_and_exports_as_documented() -> None:
    expansion = _expand("""\
        version: 1
        graph:
          - {name: a, op: ones, shape: [4]}
          - name: towers
            replicate:
              devices: [/cpu:0, /cpu:0]
              split: {a: 0}
              body:
                - {name: c, op: square, inputs: [a]}
              combine: {c: concat}
          - name: train
            iterate:
              steps: 3
              state: {w: a}
              body:
                - {name: w2, op: mul, inputs: [w], scalar: 0.5}
              update: {w: w2}
              metrics: {m: w2}
        """)
    names = [op.name for op in expansion.ops]
    assert names == ["a", "towers/split/a", "towers/0/c", "towers/1/c", "towers.c", "train/w", "train/w2",
                     "train.w", "train.m"]
    assert [loop.name for loop in expansion.loops] == ["train"]
    assert expansion.loops[0].body == ("train/w", "train/w2")


def test_replicate_pattern_stays_inside_its_scope(tmp_path: Path) -> None:
    spec = tmp_path / "scoped.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        cluster:
          jobs:
            worker: {tasks: 2, gpus: 2}
        graph:
          - {name: x, op: ones, shape: [4]}
          - scope: /job:worker/task:1
            ops:
              - name: r
                replicate:
                  devices: /gpu:*
                  body:
                    - {name: y, op: square, inputs: [x]}
                  combine: {y: add_n}
        """))
    checked = check_file(spec)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.plan is not None
    devices = {p.op: p.device_name for p in checked.plan.placements}
    assert devices["r/0/y"] == "/job:worker/replica:0/task:1/device:GPU:0"
    assert devices["r/1/y"] == "/job:worker/replica:0/task:1/device:GPU:1"
    assert "r/2/y" not in devices


def test_a_scope_inside_a_body_keeps_the_body_as_the_group_of_its_ops() -> None:
    expansion = _expand("""\
        version: 1
        graph:
          - {name: a, op: ones, shape: [4]}
          - name: towers
            replicate:
              devices: [/cpu:0]
              body:
                - scope: /cpu:0
                  ops:
                    - {name: c, op: square, inputs: [a]}
        """)
    (copy,) = [op for op in expansion.ops if op.name == "towers/0/c"]
    assert copy.group == "towers"


def test_a_sweep_never_selects_a_copy_whose_metric_is_nan(tmp_path: Path) -> None:
    import pytest

    from orchestrator import run_file
    from orchestrator.errors import RunError

    spec = tmp_path / "sweep.yaml"
    body = """\
        version: 1
        graph:
          - {name: x, op: ones, shape: [3]}
          - name: hp
            sweep:
              param: lr
              values: VALUES
              body:
                - {name: loss, op: mul, inputs: [x, lr]}
                - {name: gap, op: sub, inputs: [lr], scalar: 1.0}
                - {name: one, op: div, inputs: [gap, gap]}      # 0 / 0 = NaN for lr = 1
                - {name: ones, op: mul, inputs: [loss, one]}
                - {name: total, op: sum, inputs: [ones]}
              select: {min: total}
        outputs: {hp.best: "-"}
        """
    spec.write_text(textwrap.dedent(body).replace("VALUES", "[1.0, 3.0, 2.0]"))
    assert float(run_file(spec, echo=lambda _: None).values["hp.best"]) == 2.0  # min() alone would keep NaN
    spec.write_text(textwrap.dedent(body).replace("VALUES", "[1.0]"))
    with pytest.raises(RunError, match="every copy's metric is NaN"):
        run_file(spec, echo=lambda _: None)
