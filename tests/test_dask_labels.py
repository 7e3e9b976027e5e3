"""Dask's own pages tell a loop's devices apart: each device's window is its own group, named by loop and device.

Dask names a task's group by ``key_split`` of its key; the task stream's hover, the progress bars and
the "Groups" view show that name, and the progress bars cut a name longer than 15 characters to its
first 12. These tests read the names with Dask's own functions (``key_split``, ``progress_quads``) and,
on a real cluster, from the scheduler's task prefixes and groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dask.utils import key_split
from distributed.diagnostics.progress_stream import progress_quads

from orchestrator.api import plan_file
from orchestrator.compile import CompileOptions, compile_gang_prep, compile_gang_window, compile_plan, loop_start
from orchestrator.compile.dask_keys import SHOWN_WIDTH, device_label
from orchestrator.devices import DeviceSpec
from orchestrator.execute.records import RunSettings
from orchestrator.execute.run import run_plan
from orchestrator.plan.records import Plan

ROOT = Path(__file__).resolve().parent.parent


def _shown(names: list[str]) -> list[str]:
    """The names Dask's progress bars show for these groups (its own cut of long names)."""
    quads = progress_quads({"all": {n: 1 for n in names}, "memory": {}, "erred": {}, "released": {},
                            "processing": {}, "queued": {}})
    return list(quads["show-name"])


def _windows(plan: Plan, naming: str) -> dict[int, dict[str, str]]:
    """The keys of the first two gang windows of the plan's first loop: window start -> device -> key."""
    options = CompileOptions("3f9a0c1d2e4b", base_dir=str(ROOT / "examples"), task_names=naming)  # type: ignore[arg-type]
    loop = plan.spec.loops[0]
    names = [p.op for p in plan.placements]
    before = names[:min(names.index(n) for n in loop.body if n in names)]
    top = compile_plan(plan, options, only=before)
    _, state = compile_gang_prep(plan, loop, loop_start(plan, loop, top.values), options)
    return {start: dict(compile_gang_window(plan, loop, start, state, options, first=True).devices)
            for start in (0, loop.window)}


@pytest.mark.parametrize("naming", ["op", "kind"])
def test_each_gpu_of_the_train_example_is_a_group_of_its_own(naming: str) -> None:
    plan = plan_file(ROOT / "examples" / "train.yaml")
    loop = plan.spec.loops[0]
    assert plan.loop_mode(loop.name).mode == "gang"
    windows = _windows(plan, naming)
    gpu0, gpu1 = (DeviceSpec.parse(f"/job:worker/replica:0/task:0/device:GPU:{i}").to_string() for i in (0, 1))
    for start, keys in windows.items():
        steps = f"steps {start}-{start + loop.window - 1}"
        for device, key in keys.items():
            label = device_label(plan, DeviceSpec.parse(device))
            assert label in key_split(key)  # the group names the device ...
            assert (loop.name if naming == "op" else "window") in key_split(key)  # ... and the loop (kind: window)
            assert steps in key and steps not in key_split(key)  # the key names the steps; the group does not
        assert key_split(keys[gpu0]) != key_split(keys[gpu1])
        assert key_split(keys[gpu0]).replace("GPU:0", "GPU:1") == key_split(keys[gpu1])
        prefixes = sorted({key_split(k) for k in keys.values()})
        assert len(prefixes) == len(keys) and len(set(_shown(prefixes))) == len(prefixes)  # no two bars alike
    # every window of the loop on a device shares its group: a prefix per loop and device, not per window
    assert {key_split(k) for k in windows[0].values()} == {key_split(k) for k in windows[loop.window].values()}
    assert len({k for keys in windows.values() for k in keys.values()}) == 2 * len(windows[0])  # keys unique


def test_the_groups_of_the_train_example_read_as_the_docs_show() -> None:
    plan = plan_file(ROOT / "examples" / "train.yaml")
    assert sorted(key_split(k) for k in _windows(plan, "op")[0].values()) == \
        ["fit·GPU:0", "fit·GPU:1", "fit·ps/0/CPU:0"]
    assert sorted(key_split(k) for k in _windows(plan, "kind")[0].values()) == \
        ["ps/0/CPU:0·window", "window·GPU:0", "window·GPU:1"]


SPEC = """\
version: 1
cluster:
  jobs:
    trainer: {tasks: 1, gpus: 2}
graph:
  - {name: x0, op: zeros, shape: [4], device: /job:trainer/task:0/cpu:0}
  - name: LOOP
    iterate:
      steps: 6
      window: 3
      state: {x: x0}
      body:
        - {name: a, op: add, inputs: [x], scalar: 1.0, device: /job:trainer/gpu:0}
        - {name: b, op: add, inputs: [a], scalar: 1.0, device: /job:trainer/gpu:1}
      update: {x: b}
outputs:
  LOOP.x: "-"
"""


@pytest.mark.parametrize("loop", ["fit", "long-loop-name"])
def test_a_loops_windows_are_told_apart_by_device_however_the_loop_is_named(loop: str, tmp_path: Path) -> None:
    (tmp_path / "loop.yaml").write_text(SPEC.replace("LOOP", loop))
    plan = plan_file(tmp_path / "loop.yaml")
    options = CompileOptions("3f9a0c1d2e4b")
    spec_loop = plan.spec.loops[0]
    _, state = compile_gang_prep(plan, spec_loop, loop_start(plan, spec_loop, compile_plan(plan, options, only=["x0"]).values), options)
    keys = compile_gang_window(plan, spec_loop, 0, state, options).devices
    prefixes = [key_split(k) for k in keys.values()]
    # a hyphen in the loop's name would end Dask's prefix at the loop's first word, and both GPUs would share it
    assert len(set(prefixes)) == 2 and len(set(_shown(prefixes))) == 2
    assert all(len(p) <= SHOWN_WIDTH or p.startswith("GPU:") for p in prefixes)


def _watch_groups(dask_scheduler: Any) -> None:
    """On the scheduler: a plugin noting the name of every task group a task passes through."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Groups(SchedulerPlugin):
        def __init__(self) -> None:
            self.seen: set[str] = set()

        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            task = dask_scheduler.tasks.get(key)
            if task is not None:
                self.seen.add(task.group.name)

    dask_scheduler.add_plugin(Groups(), name="test-groups")


@pytest.mark.cluster
def test_the_scheduler_groups_a_real_loop_by_loop_and_device(tmp_path: Path) -> None:
    """A short loop on two GPUs of an embedded cluster: the scheduler's prefixes and groups are the names above."""
    from distributed import Client

    from orchestrator.execute.cluster import EmbeddedCluster

    (tmp_path / "loop.yaml").write_text(SPEC.replace("LOOP", "fit"))
    plan = plan_file(tmp_path / "loop.yaml")
    assert plan.loop_mode("fit").mode == "gang"
    cluster = EmbeddedCluster(plan.spec.cluster, None).start()
    try:
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            client.run_on_scheduler(_watch_groups)  # a group is forgotten with its last task: note them as they go
        result = run_plan(plan, RunSettings(scheduler=cluster.scheduler_address, write_outputs=False,
                                            progress=False), lambda _: None)
        assert result.values["fit.x"].tolist() == [12.0] * 4
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            prefixes, groups = client.run_on_scheduler(
                lambda dask_scheduler: (list(dask_scheduler.task_prefixes),
                                        list(dask_scheduler.plugins["test-groups"].seen)))
        assert {"fit·GPU:0", "fit·GPU:1"} <= set(prefixes)
        assert not any("steps" in p for p in prefixes)  # two windows per device, one prefix each
        window_groups = [g for g in groups if g.startswith("fit·")]
        assert sorted(set(window_groups)) == ["fit·GPU:0", "fit·GPU:1"]
    finally:
        cluster.close()
