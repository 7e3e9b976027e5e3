"""How Dask keys are named (the dashboard's groups), the compact op payload, and the run's phase timings."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from dask.utils import key_split

from orchestrator.api import plan_file
from orchestrator.compile import CompileOptions, compile_plan
from orchestrator.runtime.backends import DeviceConfig
from orchestrator.execute.run import Runner, run_plan
from orchestrator.execute.records import RunSettings
from orchestrator.execute.plugin import DeviceRuntimePlugin
from orchestrator.runtime import OpTask
from orchestrator.compile.dask_keys import OP_PREFIX_LIMIT, KeyNamer, choose_task_names, kind_label


def _chain_plan(tmp_path: Path, n_ops: int):  # type: ignore[no-untyped-def]
    lines = ["version: 1", "cluster:", "  jobs:", "    worker: {tasks: 2}", "graph:",
             "  - {name: c0, op: ones, shape: [3], device: /job:worker/task:0/cpu:0}"]
    lines += [f"  - {{name: c{i}, op: add, inputs: [c{i - 1}], scalar: 1.0, "
              f"device: /job:worker/task:{i % 2}/cpu:0}}" for i in range(1, n_ops)]
    lines += ["outputs:", f"  c{n_ops - 1}: \"-\""]
    spec = tmp_path / f"chain{n_ops}.yaml"
    spec.write_text("\n".join(lines) + "\n")
    return plan_file(spec)


def test_auto_names_by_op_up_to_the_limit_and_by_kind_above(tmp_path: Path) -> None:
    small, big = _chain_plan(tmp_path, OP_PREFIX_LIMIT), _chain_plan(tmp_path, OP_PREFIX_LIMIT + 1)
    assert choose_task_names(small)[0] == "op"
    naming, why = choose_task_names(big)
    assert naming == "kind" and f"{OP_PREFIX_LIMIT + 1} ops" in why
    # an explicit policy wins either way
    assert choose_task_names(big, "op")[0] == "op" and choose_task_names(small, "kind")[0] == "kind"
    with pytest.raises(ValueError, match="unknown task naming 'ops'"):
        choose_task_names(small, "ops")


def test_dask_groups_keys_by_op_name_or_by_kind(tmp_path: Path) -> None:
    plan = _chain_plan(tmp_path, 5)
    by_op = compile_plan(plan, CompileOptions("3f9a0c1d2e4b", task_names="op", granularity="op"))
    by_kind = compile_plan(plan, CompileOptions("3f9a0c1d2e4b", task_names="kind", granularity="op"))
    # key_split is what the dashboard's task stream and Dask's per-prefix state group by
    assert sorted(key_split(k) for k in by_op.tasks) == ["c0", "c1", "c2", "c3", "c4"]
    assert sorted({key_split(k) for k in by_kind.tasks}) == ["add", "ones"]
    # the op's name is still in its key, and each key still belongs to its op
    assert by_kind.key_owner == {k: k.rsplit("-", 1)[1] for k in by_kind.tasks if "[" not in k}


def test_kind_names_of_helpers_and_calls_share_one_group_each() -> None:
    names = KeyNamer("kind")
    assert key_split(names.helper("move", "x@w/0/GPU:0", "-9ab3c2d1e0f7-3")) == "move"
    assert key_split(names.helper("done", "x", "-9ab3c2d1e0f7")) == "done"
    assert key_split(names.op("grad", "call", {"fn": "polyfit_fns:grad"}, "-9ab3c2d1e0f7-12")) == "grad"
    assert kind_label("call", {"fn": "pkg.mod:fit"}) == "fit" and kind_label("matmul", {}) == "matmul"
    assert KeyNamer("op").helper("move", "x@w/0/GPU:0", "-tok-3") == "move(x@w/0/GPU:0)-tok-3"


def test_a_failing_op_is_named_by_its_own_key_not_a_longer_prefix(tmp_path: Path) -> None:
    plan = _chain_plan(tmp_path, 12)
    runner = Runner(plan, RunSettings(), lambda _: None)
    runner.key_owner = {"add-tok-c1": "c1", "add-tok-c11": "c11"}
    error = runner.translate(RuntimeError("task add-tok-c11 failed"))
    assert "op 'c11'" in str(error)


def test_op_payload_pickles_compactly_and_round_trips() -> None:
    tiny = OpTask("towers/1/c", "add", {"scalar": 1.0}, 1, run="3f9a0c1d2e4b", step=7)
    full = OpTask("fit", "call", {"fn": "m:f"}, 2, run="3f9a0c1d2e4b", step=3, input_keys=("x", "y"),
                  timeout=2.5, log=True, base_dir="/data", outputs=2, input_index=(None, 1))
    for task in (tiny, full):
        assert pickle.loads(pickle.dumps(task)) == task
    # field names are not pickled: a tiny op's payload stays near its values' size
    assert len(pickle.dumps(tiny)) < 160


def test_device_runtime_plugin_is_named_by_its_devices() -> None:
    a = DeviceRuntimePlugin({"w0": DeviceConfig("w0", "GPU", "simulated", 1 << 20)})
    same = DeviceRuntimePlugin({"w0": DeviceConfig("w0", "GPU", "simulated", 1 << 20)})
    other = DeviceRuntimePlugin({"w0": DeviceConfig("w0", "GPU", "simulated", 2 << 20)})
    assert a.plugin_name() == same.plugin_name() != other.plugin_name()
    assert a.plugin_name().startswith("orchestrator-runtime-")


@pytest.mark.cluster
def test_run_groups_tasks_on_the_scheduler_as_the_policy_says(tmp_path: Path) -> None:
    """The scheduler's task prefixes (the dashboard's groups) follow the naming; the report says which."""
    from distributed import Client

    from orchestrator.execute.cluster import EmbeddedCluster

    plan = _chain_plan(tmp_path, OP_PREFIX_LIMIT + 6)
    cluster = EmbeddedCluster(plan.spec.cluster, None).start()
    try:
        # a runtime plugin only sets up the workers its spec names: another spec's workers are left alone
        task0, task1 = (d.name for d in plan.spec.cluster.devices)
        foreign = DeviceRuntimePlugin({task0: DeviceConfig(task0, "CPU", "host")})
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            client.register_plugin(foreign, name=foreign.plugin_name())
            has_runtime = client.run(lambda dask_worker: (str(dask_worker.name),
                                                          hasattr(dask_worker, "orchestrator_runtime")))
        assert sorted(has_runtime.values()) == sorted([(task0, True), (task1, False)])

        settings = RunSettings(scheduler=cluster.scheduler_address, write_outputs=False, progress=False)
        result = run_plan(plan, settings, lambda _: None)
        assert result.report["task_names"]["naming"] == "kind"
        assert float(result.values[f"c{OP_PREFIX_LIMIT + 5}"][0]) == OP_PREFIX_LIMIT + 6.0
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            prefixes = set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))
        assert {"add", "ones"} <= prefixes and not {"c1", "c2"} & prefixes
        phases = result.report["phases_seconds"]
        assert set(phases) == {"connect", "prepare workers", "compile", "submit", "compute", "collect records"}
        assert all(seconds >= 0 for seconds in phases.values())

        forced = run_plan(plan, RunSettings(scheduler=cluster.scheduler_address, write_outputs=False,
                                            progress=False, task_names="op"), lambda _: None)
        assert forced.report["task_names"]["naming"] == "op"
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            prefixes = set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))
        assert {"c1", "c2"} <= prefixes
    finally:
        cluster.close()



LOOP = """\
version: 1
cluster:
  jobs:
    localhost: {gpus: 1}
graph:
  - {name: x0, op: zeros, shape: [4], device: /cpu:0}
  - {name: inc, op: ones, shape: [4], device: /cpu:0}
  - name: loop
    iterate:
      steps: 7
      window: 3
      state: {x: x0}
      body:
        - {name: x_next, op: add, inputs: [x, inc], device: /gpu:0}
      update: {x: x_next}
outputs:
  loop.x: "-"
"""


@pytest.mark.cluster
def test_a_loop_with_moves_runs_under_kind_names(tmp_path: Path) -> None:
    """Staged windows, a value moved to the GPU once and reused every step, all keys named by kind."""
    (tmp_path / "loop.yaml").write_text(LOOP)
    result = run_plan(plan_file(tmp_path / "loop.yaml"), RunSettings(write_outputs=False, progress=False,
                                                                     task_names="kind"), lambda _: None)
    assert result.report["task_names"]["naming"] == "kind"
    assert result.values["loop.x"].tolist() == [7.0] * 4
    # x0 crosses to the GPU once (step 0), inc once for all 7 steps: kind names keep moves shared
    assert result.report["totals"]["moves"] == 2


def test_partition_and_window_keys_name_their_ops_readably() -> None:
    namer = KeyNamer("op")
    assert key_split(namer.partition("towers/0/x+2", "random.uniform", {}, "-3f9a0c1d2e4b")) == "towers/0/x+2"
    assert key_split(namer.window("train", "GPU:1", (100, 199), "-3f9a0c1d2e4b-L0w100")) == "train·GPU:1"
    by_kind = KeyNamer("kind")
    assert key_split(by_kind.partition("fit+2", "call", {"fn": "mod:grad"}, "-3f9a0c1d2e4b")) == "grad"
    assert key_split(by_kind.window("train", "GPU:1", (100, 199), "-3f9a0c1d2e4b-L0w100")) == "window·GPU:1"


@pytest.mark.cluster
def test_the_dashboard_groups_partitions_and_windows_by_their_ops(tmp_path: Path) -> None:
    from distributed import Client

    from orchestrator.execute.cluster import EmbeddedCluster

    root = Path(__file__).resolve().parent.parent
    plan = plan_file(root / "specs" / "valid" / "pipeline.yaml")
    cluster = EmbeddedCluster(plan.spec.cluster, None).start()
    try:
        run_plan(plan, RunSettings(scheduler=cluster.scheduler_address, write_outputs=False, progress=False),
                 lambda _: None)
        (tmp_path / "loop.yaml").write_text(LOOP)  # the same cluster: one GPU
        loop = plan_file(tmp_path / "loop.yaml")
        run_plan(loop, RunSettings(scheduler=cluster.scheduler_address, write_outputs=False, progress=False),
                 lambda _: None)
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            prefixes = set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))
        assert {"x+2", "w", "y+2", "mean"} <= prefixes
        assert "loop·GPU:0" in prefixes
    finally:
        cluster.close()
