"""The compiled Dask graph: pins, transfers, control edges, tuple outputs, key names."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from dask.task_spec import Task

from orchestrator.api import plan_file
from orchestrator.spec.records import OpRef, Output
from orchestrator.compile import CompileOptions, compile_plan
from orchestrator.runtime import OpTask

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
GPU1 = "/job:localhost/replica:0/task:0/device:GPU:1"


def _plan(tmp_path: Path, graph: str, gpus: int = 2):  # type: ignore[no-untyped-def]
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"version: 1\ncluster:\n  jobs:\n    localhost: {{gpus: {gpus}}}\ngraph:\n"
                    + textwrap.indent(textwrap.dedent(graph), "  "))
    return plan_file(spec)


def _payload(task: Task) -> OpTask:
    return next(arg for arg in task.args if isinstance(arg, OpTask))


def test_every_op_is_one_task_pinned_by_identity_resource_and_named_by_op(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: a, op: ones, shape: [2], device: /cpu:0}
        - {name: b, op: square, inputs: [a], device: /gpu:1}
        - {name: c, op: square, inputs: [a], device: /gpu:*}
        """)
    graph = compile_plan(plan, CompileOptions("tok123", granularity="op"))
    assert graph.resources["a-tok123"] == {f"device:{CPU}": 1}
    assert graph.resources["b-tok123"] == {f"device:{GPU1}": 1}
    assert graph.resources["c-tok123"] == {"GPU": 1, "task:/job:localhost/replica:0/task:0": 1}
    layer = next(iter(graph.graph.layers.values()))
    assert layer.annotations["resources"]("b-tok123") == {f"device:{GPU1}": 1}
    assert layer.annotations["resources"]("unknown") == {}  # never None: the scheduler asserts


def test_a_value_moves_once_per_consuming_device(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: a, op: ones, shape: [4], device: /cpu:0}
        - {name: b1, op: square, inputs: [a], device: /gpu:0}
        - {name: b2, op: square, inputs: [a], device: /gpu:0}
        - {name: b3, op: add, inputs: [a, a], device: /gpu:0}
        - {name: c1, op: square, inputs: [a], device: /gpu:1}
        """)
    graph = compile_plan(plan, CompileOptions("t", granularity="op"))
    moves = [k for k in graph.tasks if k.startswith("move(")]
    assert moves == ["move(a@localhost/0/GPU:0)-t-0"]  # three readers on GPU:0 share one move
    for name in ("b1", "b2", "b3"):
        assert graph.tasks[f"{name}-t"].dependencies == {moves[0]}
    assert graph.tasks["c1-t"].dependencies == {"a-t"}  # a single reader fetches it directly
    assert graph.transfers == 2


def test_control_edge_depends_on_a_token_on_the_producers_device(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: big, op: ones, shape: [1000], device: /gpu:0}
        - {name: later, op: ones, shape: [2], device: /cpu:0, after: [big]}
        """)
    graph = compile_plan(plan, CompileOptions("t", granularity="op"))
    assert graph.tasks["later-t"].dependencies == {"done(big)-t"}
    assert graph.resources["done(big)-t"] == {f"device:{GPU0}": 1}
    assert graph.tasks["done(big)-t"].dependencies == {"big-t"}


def test_tuple_outputs_are_read_in_place_and_cut_out_only_to_cross(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: x, op: ones, shape: [4], device: /cpu:0}
        - {name: s, op: split, inputs: [x], num: 2, device: /cpu:0}
        - {name: here, op: square, inputs: ["s:0"], device: /cpu:0}
        - {name: there, op: square, inputs: ["s:1"], device: /gpu:0}
        """)
    graph = compile_plan(plan, CompileOptions("t", granularity="op"))
    here, there = graph.tasks["here-t"], graph.tasks["there-t"]
    assert here.dependencies == {"s-t"} and _payload(here).input_index == (0,)
    assert there.dependencies == {"s-t[1]"} and _payload(there).input_index == ()
    assert graph.resources["s-t[1]"] == {f"device:{CPU}": 1}  # cut out beside the tuple
    assert "s-t[0]" not in graph.tasks


def test_one_options_record_carries_what_every_graph_of_a_run_shares(tmp_path: Path) -> None:
    """compile_plan takes the run's CompileOptions, as the window compilers do: nothing is unpacked on the way."""
    with pytest.raises(ValueError, match="unknown granularity 'ops' \\(choose one of partition, op\\)"):
        CompileOptions("t", granularity="ops")
    plan = _plan(tmp_path, """\
        - {name: a, op: ones, shape: [2], device: /gpu:0}
        - {name: b, op: square, inputs: [a], device: /gpu:0}
        """)
    plan = replace(plan, spec=replace(plan.spec, outputs=(Output(OpRef("b"), "-", ()),)))
    on_host = compile_plan(plan, CompileOptions("t", host_outputs=True))
    in_place = compile_plan(plan, CompileOptions("t"))
    assert in_place.output_keys == {"b": "a+1-t"}  # the partition's own key: nothing to copy
    key = on_host.output_keys["b"]
    assert key != "a+1-t" and on_host.tasks[key].dependencies == {"a+1-t"}
    assert on_host.resources[key] == {f"device:{GPU0}": 1}  # copied to the host on the GPU's worker
    assert compile_plan(plan, CompileOptions("t", task_names="kind")).output_keys == {"b": "ones-t-a+1"}
    by_op = compile_plan(plan, CompileOptions("t", out_dir=str(tmp_path), granularity="op"))
    assert sorted(by_op.tasks) == ["a-t", "b-t"]
