"""A partition's payload pickles as one program of columns, and reads back field for field.

Each op's fields are packed into columns (a field every op shares is kept
once), the wiring beside them, all in one bytes object the scheduler passes on
without reading it. Values that ``==`` calls equal but a kernel can tell apart
(1, 1.0 and True; 0.0 and -0.0; equal dicts of different types) must never be
merged into one; a value plain pickle cannot write falls back to the fields
as they are; a run in partitions computes what a run in tasks per op does.
"""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.runtime import OpTask, PartitionTask
from orchestrator.runtime.tasks import pack_ops, unpack_ops


def _ops() -> tuple[OpTask, ...]:
    """Every field in turn shared and varied, with values equal under ``==`` but of other types."""
    run = "3f9a0c1d2e4b"
    return (
        OpTask("a", "ones", {"shape": [4]}, 0, run=run),
        OpTask("b", "add", {"scalar": 1}, 1, run=run, step=1, timeout=0.0, outputs=1, retries=1),
        OpTask("c", "add", {"scalar": 1.0}, 1, run=run, step=True, timeout=-0.0, log=True, retries=True),
        OpTask("d", "add", {"scalar": True}, 1, run=run, step=1.0, input_keys=("x", "y"), base_dir="/data",
               outputs=2, input_index=(None, 1), copies="copy", stream=(0, 3), copies_of=(1, 2),
               retry_on=("OSError",)),
        OpTask("e", "call", {"fn": "m:f", "n": (1, 2)}, 2, run=run, timeout=2.5, copies="gather",
               input_index=(0, None), stream=(1,), copies_of=(0,), retries=2, retry_on=("OSError", "KeyError")),
    )


def _exactly(ops: tuple[OpTask, ...]) -> list[str]:
    # repr tells 1 from 1.0 from True, 0.0 from -0.0, a list from a tuple: == does not
    return [repr(op) for op in ops]


def test_ops_pack_into_columns_and_back_field_for_field() -> None:
    ops = _ops()
    assert _exactly(unpack_ops(pickle.loads(pickle.dumps(pack_ops(ops))))) == _exactly(ops)
    n, columns = pack_ops(ops)
    shared = {name for (same, _), name in zip(columns, OpTask.__dataclass_fields__) if same}
    assert n == 5 and shared == {"run"}  # every other field differs somewhere, if only in its type
    uniform = tuple(OpTask(f"c{i}", "add", {"scalar": 1.0}, 1, run="tok") for i in range(3))
    n, columns = pack_ops(uniform)
    assert [same for same, _ in columns].count(False) == 2  # name and params: the defaults are kept once
    assert _exactly(unpack_ops((n, columns))) == _exactly(uniform)
    assert unpack_ops(pack_ops(())) == ()


def test_a_partition_task_pickles_as_one_program_the_scheduler_passes_on_unread() -> None:
    ops = _ops()
    task = PartitionTask("a+4", ops, ((), ((0, -1),), ((1, -1),), ((2, -1),), ((3, 1), (5, 0))),
                         ((), (0,), (1,), (2,), (3, 5)), ((4, -1),), 0)
    data = pickle.dumps(task)
    passed_on = pickle.loads(data)
    assert pickle.dumps(passed_on) == data  # the scheduler's copy pickles again as it came...
    assert "ops" not in passed_on.__dict__  # ...without unpacking the ops
    assert passed_on == task and _exactly(passed_on.ops) == _exactly(ops)
    assert pickle.loads(data).n_args == 0  # any field, read first, unpacks them all

    # a thousand tiny ops: smaller than the same fields pickled op by op (the shared fields once)
    tiny = tuple(OpTask(f"c{i}", "add", {"scalar": 1.0}, 1, run="3f9a0c1d2e4b") for i in range(1000))
    wiring = (tuple(((i - 1, -1),) for i in range(1000)), tuple((i - 1,) for i in range(1000)), ((999, -1),), 0)
    big = PartitionTask("c0+999", tiny, *wiring)
    assert len(pickle.dumps(big)) < 0.8 * len(pickle.dumps(("c0+999", tiny, *wiring)))
    assert pickle.loads(pickle.dumps(big)) == big


def test_a_value_plain_pickle_cannot_write_falls_back_to_the_fields() -> None:
    op = OpTask("f", "call", {"fn": lambda x: x + 1}, 1, run="tok")
    task = PartitionTask("f", (op,), (((0, -1),),), ((),), ((1, -1),), 1)
    again = cloudpickle.loads(cloudpickle.dumps(task))  # as Dask's serializer would, after pickle refuses
    assert again.ops[0].params["fn"](2) == 3 and again.inputs == task.inputs


@pytest.mark.cluster
def test_a_run_in_partitions_computes_what_a_run_in_tasks_does(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: a, op: ones, shape: [4], device: /gpu:0}
          - {name: b, op: add, inputs: [a], scalar: 1, device: /gpu:0}
          - {name: c, op: add, inputs: [b], scalar: 1.5, device: /gpu:0, timeout: 60}
          - {name: d, op: mul, inputs: [c], scalar: -0.0, device: /gpu:0}
          - {name: e, op: add, inputs: [c, d], device: /gpu:0}
          - {name: f, op: sub, inputs: [e, b], device: /cpu:0}
          - {name: g, op: sum, inputs: [f], device: /cpu:0}
        outputs: {e: "-", g: "-"}
        """))
    runs = {g: run_file(spec, echo=lambda _: None, granularity=g) for g in ("partition", "op")}
    for result in runs.values():
        np.testing.assert_array_equal(result.values["e"], np.full(4, 3.5))
        assert np.signbit(result.values["e"]).sum() == 0 and result.values["g"] == 6.0
    assert runs["partition"].report["totals"]["tasks"] < runs["op"].report["totals"]["tasks"]
