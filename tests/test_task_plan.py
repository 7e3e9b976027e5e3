"""The plan carries its tasks: partitions and loop modes are decided once, by planning, and read by the rest.

``orchestrator.plan.partition.plan_tasks`` fills ``plan.tasks``; memory, compile and
the renderers read it. Each test here hands one of them a plan whose task plan
was changed by hand and checks that it follows the plan rather than its own
judgement.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.api import plan_file
from orchestrator.compile import CompileOptions, compile_plan, stage_partitions
from orchestrator.plan.memory import plan_memory, schedule
from orchestrator.plan.records import LoopMode, Partition, Plan, TaskPlan
from orchestrator.plan.partition import partition, plan_tasks
from orchestrator.plan.place import place
from orchestrator.report import plan_json, plan_text

LOOPED = """\
    version: 1
    cluster: {jobs: {localhost: {gpus: 1}}}
    graph:
      - {name: w0, op: ones, shape: [2], device: /cpu:0}
      - {name: a, op: ones, shape: [2], device: /gpu:0}
      - {name: b, op: square, inputs: [a], device: /gpu:0}
      - name: train
        iterate:
          steps: 3
          window: 2
          state: {w: w0}
          body:
            - {name: g, op: mul, inputs: [w, b], device: /gpu:0}
            - {name: w1, op: sub, inputs: [w, g], device: /gpu:0}
            - {name: loss, op: sum, inputs: [w1], device: /gpu:0}
          update: {w: w1}
          metrics: {loss: loss}
      - {name: c, op: square, inputs: [train.w], device: /gpu:0}
      - {name: d, op: sum, inputs: [c], device: /gpu:0}
    outputs: {d: "-"}
    """


def _plan(tmp_path: Path, text: str = LOOPED) -> Plan:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return plan_file(path)


def _groups(parts: tuple[Partition, ...]) -> list[list[str]]:
    return [list(p.ops) for p in parts]


def _with_tasks(plan: Plan, **changes: object) -> Plan:
    return replace(plan, tasks=replace(plan.planned_tasks, **changes))


def test_the_plan_carries_the_partitions_of_each_scope(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    # the top level: what a run runs outside loops (a loop's exports are the driver's, not tasks)
    assert _groups(plan.partitions) == [["w0"], ["a", "b"], ["c", "d"]]
    assert plan.partitions == partition(plan, ["w0", "a", "b", "c", "d"])
    # one step of the loop: its body, without its state
    assert _groups(plan.loop_partitions["train"]) == [["train/g", "train/w1", "train/loss"]]
    assert plan.planned_tasks.home["train/w1"] is plan.loop_partitions["train"][0]
    assert "train/w" not in plan.planned_tasks.home and "train.w" not in plan.planned_tasks.home


def test_the_plan_carries_every_loop_mode_at_both_granularities(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    gang = plan.loop_mode("train")
    assert gang.mode == "gang" and gang.why.startswith("one task per device per window of 2 steps")
    assert plan.loop_mode("train", "op") == LoopMode("op", "a task per op per step (--granularity op)")
    retried = _plan(tmp_path, LOOPED.replace("op: sub, inputs: [w, g]", "op: sub, retries: 1, inputs: [w, g]"))
    assert retried.loop_mode("train").describe().startswith("partition: a task per device partition per step, "
                                                            "because ops have retries")


def test_a_plan_straight_from_place_has_no_tasks_and_says_so(tmp_path: Path) -> None:
    planned = _plan(tmp_path)
    placed = place(planned.spec)
    assert placed.tasks is None
    with pytest.raises(ValueError, match="tasks are not planned.*plan_tasks"):
        plan_memory(placed)
    with pytest.raises(ValueError, match="tasks are not planned"):
        compile_plan(placed, CompileOptions("t"))
    assert plan_tasks(placed).tasks == planned.tasks


def test_memory_follows_the_plans_partitions(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    ops = [(p.device, name) for p in plan.partitions for name in p.ops]
    alone = tuple(Partition(i, device, (name,)) for i, (device, name) in enumerate(ops))
    units = schedule(_with_tasks(plan, partitions=alone))
    assert ("a",) in units and ("b",) in units and ("a", "b") not in units
    # a loop's state and exports hold their values alone; every op is in exactly one unit
    assert ("train/w",) in units and ("train.w",) in units and ("train.loss",) in units
    assert sorted(n for unit in schedule(plan) for n in unit) == sorted(p.op for p in plan.placements)


def test_the_renderers_show_the_plans_loop_modes_and_partitions(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    modes = {g: {"train": LoopMode("partition", "a reason only the plan knows")} for g in ("partition", "op")}
    told = _with_tasks(plan, loop_modes=modes, partitions=plan.partitions[:1])
    assert "loop 'train': partition: a reason only the plan knows" in plan_text(told)
    assert "tasks: 1 device partition for 1 op outside loops" in plan_text(told)
    data = json.loads(plan_json(told))
    assert data["loops"] == {"train": {"mode": "partition", "why": "a reason only the plan knows"}}
    assert [p["ops"] for p in data["partitions"]] == [["w0"]]


def test_compile_follows_the_plans_partitions(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: a, op: ones, shape: [2], device: /gpu:0}
          - {name: b, op: square, inputs: [a], device: /gpu:0}
          - {name: c, op: sum, inputs: [b], device: /gpu:0}
        outputs: {c: "-"}
        """)
    assert len(compile_plan(plan, CompileOptions("t")).partition_ops) == 1
    split = (Partition(0, plan.partitions[0].device, ("a",)), Partition(1, plan.partitions[0].device, ("b", "c")))
    compiled = compile_plan(_with_tasks(plan, partitions=split), CompileOptions("t"))
    assert sorted(compiled.partition_ops.values()) == [("a",), ("b", "c")]


def test_a_stage_takes_its_part_of_each_planned_partition_and_cuts_where_asked(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert _groups(stage_partitions(plan, ["w0", "a", "b", "c", "d"])) == _groups(plan.partitions)
    assert _groups(stage_partitions(plan, ["b", "d"])) == [["b"], ["d"]]  # a and c came from the cache
    assert _groups(stage_partitions(plan, ["a", "b", "c", "d"], cut_after=["a"])) == [["a"], ["b"], ["c", "d"]]
    assert [p.index for p in stage_partitions(plan, ["a", "b", "c", "d"], cut_after=["a"])] == [0, 1, 2]
    # an op of no partition (a loop's state, compiled outside its loop) is a task alone
    assert _groups(stage_partitions(plan, ["train/w", "train/g"])) == [["train/w"], ["train/g"]]


def test_a_planned_task_plan_is_a_frozen_record(tmp_path: Path) -> None:
    tasks = _plan(tmp_path).planned_tasks
    assert isinstance(tasks, TaskPlan)
    with pytest.raises(AttributeError):
        tasks.partitions = ()  # type: ignore[misc]
