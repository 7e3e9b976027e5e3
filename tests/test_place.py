"""Tests of orchestrator.plan.place: where every op runs and why, in TensorFlow's terms.

Plans are made the way users make them: ``orchestrate plan FILE --format json``
run in-process, or the Python API (``check_file`` / ``plan_file``), on the
seed specs in ``specs/valid`` and on small specs written to ``tmp_path``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from spec_helpers import plan_json, write

from orchestrator.api import check_file, plan_file
from orchestrator.cli import run_cli

ROOT = Path(__file__).resolve().parent.parent
VALID = ROOT / "specs" / "valid"

LOCAL = "/job:localhost/replica:0/task:0/device:"
CPU0, GPU0, GPU1, GPU2, GPU3 = (LOCAL + d for d in ("CPU:0", "GPU:0", "GPU:1", "GPU:2", "GPU:3"))


def ops(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["name"]: op for op in data["ops"]}


def devices(data: dict[str, Any]) -> dict[str, str]:
    return {op["name"]: op["device"] for op in data["ops"]}


def errors(path: Path) -> list[str]:
    return [d.message for d in check_file(path).errors]


# ------------------------------------------------------------------- seed specs


def test_matmul_unpinned_goes_to_gpu0_and_its_inputs_cross_from_the_cpu() -> None:
    data = plan_json(VALID / "matmul.yaml")
    assert devices(data) == {"a": CPU0, "b": CPU0, "c": GPU0}
    c = ops(data)["c"]
    assert c["sources"] == {"job": "default", "replica": "default", "task": "default",
                            "device_type": "default", "device_index": "default"}
    assert ops(data)["a"]["sources"]["device_type"] == "op"
    assert c["transfers"] == [{"input": "a", "from": CPU0, "to": GPU0, "bytes": 48},
                              {"input": "b", "from": CPU0, "to": GPU0, "bytes": 48}]
    assert c["out_bytes"] == 32


def test_round_robin_spreads_variables_over_ps_tasks_in_graph_order() -> None:
    data = plan_json(VALID / "round_robin.yaml")
    placed = devices(data)
    assert [placed[f"v{i}"] for i in range(1, 6)] == [
        f"/job:ps/replica:0/task:{t}/device:CPU:0" for t in (0, 1, 0, 1, 0)]
    assert placed["s"] == "/job:worker/replica:0/task:0/device:GPU:0"
    assert placed["p1"] == "/job:worker/replica:0/task:0/device:GPU:1"
    assert placed["p2"] == "/job:worker/replica:0/task:1/device:GPU:1"


def test_round_robin_records_the_source_of_every_field() -> None:
    by_name = ops(plan_json(VALID / "round_robin.yaml"))
    assert by_name["v1"]["sources"] == {"job": "rule 1", "replica": "default", "task": "rule 1 (round_robin)",
                                        "device_type": "default", "device_index": "default"}
    assert by_name["s"]["sources"]["job"] == "placement.default"
    assert by_name["s"]["sources"]["task"] == "default"
    assert by_name["p1"]["sources"]["device_index"] == "scope"
    assert by_name["p1"]["sources"]["task"] == "default"
    assert by_name["p2"]["sources"] == {"job": "placement.default", "replica": "default", "task": "scope",
                                        "device_type": "scope", "device_index": "scope"}
    assert by_name["v1"]["why"] == "job from rule 1; replica, device from default; task from rule 1 (round_robin)"


BY_BYTES = """\
    version: 1
    cluster:
      jobs:
        ps: {tasks: 2}
        worker: {gpus: 1}
    placement:
      rules:
        - match: {op: variable}
          round_robin: /job:ps
          by: %s
    graph:
      - {name: big, op: variable, shape: [100]}      # 800 B
      - {name: small1, op: variable, shape: [10]}    # 80 B
      - {name: small2, op: variable, shape: [10]}    # 80 B
      - {name: mid, op: variable, shape: [50]}       # 400 B
      - {name: huge, op: variable, shape: [300]}     # 2400 B
      - {name: last, op: variable, shape: [10]}      # 80 B
      - {name: total, op: concat, inputs: [big, small1, small2, mid, huge, last]}
    """
VARIABLES = ("big", "small1", "small2", "mid", "huge", "last")


def ps_tasks(data: dict[str, Any]) -> list[int]:
    placed = devices(data)
    return [int(placed[v].split("/task:")[1].split("/")[0]) for v in VARIABLES]


def test_round_robin_by_bytes_gives_each_variable_to_the_lightest_task(tmp_path: Path) -> None:
    data = plan_json(write(tmp_path, BY_BYTES % "bytes"))
    # loads after each: 0:800 | 1:80 | 1:160 | 1:560 | 1:2960 (560 < 800) | 0:880 (800 < 2960)
    assert ps_tasks(data) == [0, 1, 1, 1, 1, 0]
    assert ops(data)["mid"]["sources"]["task"] == "rule 1 (round_robin by bytes)"
    assert devices(data)["total"] == "/job:worker/replica:0/task:0/device:GPU:0"


def test_round_robin_by_count_ignores_sizes(tmp_path: Path) -> None:
    assert ps_tasks(plan_json(write(tmp_path, BY_BYTES % "count"))) == [0, 1, 0, 1, 0, 1]


def test_round_robin_skips_ops_pinned_to_another_job_or_a_task(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            ps: {tasks: 2}
            worker: {tasks: 1}
        placement:
          rules:
            - match: {op: variable}
              round_robin: /job:ps
        graph:
          - {name: v1, op: variable, value: 1.0}
          - {name: local, op: variable, value: 2.0, device: /job:worker}
          - {name: pinned, op: variable, value: 3.0, device: /task:1}
          - {name: v2, op: variable, value: 4.0}
        """)
    data = plan_json(path)
    assert devices(data) == {"v1": "/job:ps/replica:0/task:0/device:CPU:0",
                             "local": "/job:worker/replica:0/task:0/device:CPU:0",
                             "pinned": "/job:ps/replica:0/task:1/device:CPU:0",
                             "v2": "/job:ps/replica:0/task:1/device:CPU:0"}
    assert (ops(data)["pinned"]["sources"]["job"], ops(data)["pinned"]["sources"]["task"]) == ("rule 1", "op")


def test_rule_sends_variables_to_the_cpu_and_the_rest_to_gpu0() -> None:
    data = plan_json(VALID / "variables_on_cpu.yaml")
    assert devices(data) == {"w": CPU0, "b": CPU0, "x": GPU0, "xw": GPU0, "y": GPU0}
    assert ops(data)["w"]["sources"]["device_type"] == "rule 1"
    assert ops(data)["x"]["sources"]["device_type"] == "default"


def test_towers_run_on_four_gpus_and_are_summed_on_the_cpu() -> None:
    data = plan_json(VALID / "towers.yaml")
    placed = devices(data)
    assert [placed[f"towers/{i}/c"] for i in range(4)] == [GPU0, GPU1, GPU2, GPU3]
    assert placed["towers.c"] == CPU0
    combine = ops(data)["towers.c"]
    assert combine["sources"]["device_type"] == "replicate 'towers' combine_device"
    assert ops(data)["towers/2/c"]["sources"]["device_index"] == "replicate 'towers'"
    assert [(t["from"], t["bytes"]) for t in combine["transfers"]] == [(GPU0, 32), (GPU1, 32), (GPU2, 32), (GPU3, 32)]


def test_towers_pinned_to_gpu2_and_gpu3_only() -> None:
    data = plan_json(VALID / "towers_gpu23.yaml")
    assert devices(data) == {"a": CPU0, "b": CPU0, "towers/0/c": GPU2, "towers/1/c": GPU3, "towers.c": CPU0}
    assert [d["device"] for d in data["devices"]] == [CPU0, GPU2, GPU3]


def test_make_parallel_splits_next_to_the_value_and_runs_a_copy_per_gpu() -> None:
    data = plan_json(VALID.parent.parent / "examples" / "make_parallel.yaml")
    placed = devices(data)
    assert (placed["par/0/c"], placed["par/1/c"]) == (GPU0, GPU1)
    assert placed["par/split/a"] == placed["par.c"] == CPU0
    assert set(ops(data)["par/split/a"]["sources"].values()) == {"colocated with 'a'"}
    assert [t["input"] for t in ops(data)["par/1/c"]["transfers"]] == ["par/split/a:1", "par/split/b:1"]


def test_virtual_gpus_make_two_logical_devices_of_one_physical_gpu() -> None:
    data = plan_json(VALID / "virtual_gpus.yaml")
    assert data["cluster"]["devices"] == [CPU0, GPU0, GPU1]
    assert devices(data) == {"a": GPU0, "b": GPU1, "c": GPU1}
    assert {d["device"]: d["limit_bytes"] for d in data["devices"]} == {GPU0: 2**30, GPU1: 2**30}
    plan = plan_file(VALID / "virtual_gpus.yaml")
    assert [d.physical_gpu for d in plan.spec.cluster.devices if d.is_gpu] == [0, 0]


def test_cross_job_pins_keep_their_fields() -> None:
    data = plan_json(VALID / "pin_across_jobs.yaml")
    assert devices(data) == {"x": "/job:ps/replica:0/task:0/device:CPU:0", "w": "/job:ps/replica:0/task:0/device:CPU:0",
                             "y": "/job:worker/replica:0/task:0/device:GPU:0",
                             "total": "/job:ps/replica:0/task:0/device:CPU:0"}
    assert ops(data)["y"]["sources"]["replica"] == "default"


def test_scope_pins_everything_inside_to_the_cpu() -> None:
    data = plan_json(VALID / "cpu_pinning.yaml")
    assert devices(data) == {"a": CPU0, "b": CPU0, "c": CPU0, "d": GPU0}
    assert ops(data)["c"]["sources"]["device_type"] == "scope"


# ------------------------------------------------------------------- strict and soft placement


SOFT = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 2}
    placement:
      soft: %s
    graph:
      - {name: x, op: ones, shape: [2, 2], device: /device:GPU:2}
    """
LOAD_ON_GPU = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 1}
    placement:
      soft: %s
    graph:
      - {name: data, op: load, path: data/x.npy, device: /gpu:0}
    """
GPU2_MESSAGE = ("Could not satisfy explicit device specification '/job:localhost/replica:0/task:0/device:GPU:2' "
                "for op 'x': the cluster has GPU:0..GPU:1 on that task")
LOAD_MESSAGE = ("Could not satisfy explicit device specification '/job:localhost/replica:0/task:0/device:GPU:0' "
                "because no supported kernel for GPU devices is available for op 'data' (load)")


def test_missing_gpu_index_fails_strict_in_tf_words(tmp_path: Path) -> None:
    path = write(tmp_path, SOFT % "false")
    (diag,) = check_file(path).errors
    assert diag.message == GPU2_MESSAGE
    assert (diag.code, diag.path, diag.line) == ("placement", ("graph", 0, "device"), 8)


def test_missing_gpu_index_falls_back_to_gpu0_when_soft(tmp_path: Path) -> None:
    data = plan_json(write(tmp_path, SOFT % "true"))
    (x,) = data["ops"]
    assert x["device"] == GPU0
    assert x["soft_fallback"] == GPU2_MESSAGE
    assert x["sources"]["device_type"] == "op"
    assert x["sources"]["device_index"] == "soft fallback"
    assert x["why"].endswith("; soft placement: " + GPU2_MESSAGE)
    assert data["diagnostics"] == []


def test_cpu_only_op_on_a_gpu_fails_strict(tmp_path: Path) -> None:
    assert errors(write(tmp_path, LOAD_ON_GPU % "false")) == [LOAD_MESSAGE]


def test_cpu_only_op_on_a_gpu_falls_back_to_the_cpu_when_soft(tmp_path: Path) -> None:
    (data,) = plan_json(write(tmp_path, LOAD_ON_GPU % "true"))["ops"]
    assert data["device"] == CPU0
    assert data["soft_fallback"] == LOAD_MESSAGE
    assert (data["sources"]["device_type"], data["sources"]["device_index"]) == ("soft fallback", "soft fallback")


def test_seed_soft_placement_spec_records_both_fallbacks() -> None:
    data = plan_json(VALID / "soft_placement.yaml")
    assert devices(data) == {"x": GPU0, "data": CPU0, "y": GPU0}
    by_name = ops(data)
    assert by_name["x"]["soft_fallback"] == GPU2_MESSAGE
    assert "no supported kernel for GPU devices" in by_name["data"]["soft_fallback"]
    assert by_name["y"]["soft_fallback"] is None


def test_soft_placement_with_no_usable_device_is_still_an_error(tmp_path: Path) -> None:
    # GPU-only, pinned to a job without GPUs: the fallback (that task's CPU:0) has no kernel either
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            ps: {tasks: 1}
            worker: {gpus: 1}
        placement: {soft: true}
        graph:
          - {name: g, op: call, fn: mypkg.mod:f, kernels: [gpu], device: /job:ps}
        """)
    (diag,) = check_file(path).errors
    assert diag.message.startswith("Could not satisfy explicit device specification "
                                   "'/job:ps/replica:0/task:0/device:CPU:0' because no supported kernel for CPU")
    assert diag.message.endswith("; soft placement cannot fall back: it is on the fallback device already")
    assert diag.hint == "give op 'g' a kernel for a device its task has, or pin it to a task that has a GPU"


# ------------------------------------------------------------------- any GPU, defaults and their order


def test_any_gpu_stays_open_in_the_plan(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            worker: {tasks: 2, gpus: 2}
        placement:
          rules:
            - match: {tags: [heavy]}
              device: /gpu:*
        graph:
          - {name: a, op: ones, shape: [2], device: /gpu:*}
          - {name: b, op: square, inputs: [a], tags: [heavy]}
          - {name: c, op: square, inputs: [b], device: /task:1/gpu:*}
        """)
    data = plan_json(path)
    assert devices(data) == {"a": "/job:worker/replica:0/task:0/device:GPU:*",
                             "b": "/job:worker/replica:0/task:0/device:GPU:*",
                             "c": "/job:worker/replica:0/task:1/device:GPU:*"}
    assert all(d.endswith("device:GPU:*") for d in devices(data).values())
    assert ops(data)["b"]["sources"]["device_index"] == "rule 1"
    assert ops(data)["b"]["transfers"] == []
    assert [t["bytes"] for t in ops(data)["c"]["transfers"]] == [16]


PRECEDENCE = """\
    version: 1
    cluster:
      jobs:
        ps: {tasks: 2}
        worker: {tasks: 2, gpus: 2}
    placement:
      default: /job:worker/task:1
      rules:
        - match: {name: "r_*"}
          device: /job:ps/task:0/cpu:0
    graph:
      - {name: plain, op: ones, shape: [2]}
      - {name: typed, op: ones, shape: [2], device: /device:GPU}
      - {name: r_rule, op: ones, shape: [2]}
      - scope: /task:1
        ops:
          - {name: r_scoped, op: ones, shape: [2]}
      - {name: r_own, op: ones, shape: [2], device: /job:worker/gpu:1}
      - scope: /gpu:1
        ops:
          - {name: kept_index, op: ones, shape: [2], device: /device:GPU}
          - {name: new_type, op: ones, shape: [2], device: /device:CPU:0}
    """


def test_scope_beats_rule_beats_default_beats_tf_default(tmp_path: Path) -> None:
    data = plan_json(write(tmp_path, PRECEDENCE))
    assert devices(data) == {
        "plain": "/job:worker/replica:0/task:1/device:GPU:0",
        "typed": "/job:worker/replica:0/task:1/device:GPU:0",
        "r_rule": "/job:ps/replica:0/task:0/device:CPU:0",
        "r_scoped": "/job:ps/replica:0/task:1/device:CPU:0",
        "r_own": "/job:worker/replica:0/task:0/device:GPU:1",
        "kept_index": "/job:worker/replica:0/task:1/device:GPU:1",
        "new_type": "/job:worker/replica:0/task:1/device:CPU:0",
    }
    src = {name: op["sources"] for name, op in ops(data).items()}
    assert src["plain"] == {"job": "placement.default", "replica": "default", "task": "placement.default",
                            "device_type": "default", "device_index": "default"}
    # a type without an index: index 0 from TF's default
    assert (src["typed"]["device_type"], src["typed"]["device_index"]) == ("op", "default")
    # the rule beats placement.default's task 1
    assert src["r_rule"]["task"] == "rule 1"
    # the scope's task beats the rule's; the rule still fills job and device
    assert (src["r_scoped"]["task"], src["r_scoped"]["job"], src["r_scoped"]["device_type"]) == \
        ("scope", "rule 1", "rule 1")
    # the op's own job and device beat the rule's; the rule fills only the task it left unset
    assert (src["r_own"]["job"], src["r_own"]["device_index"], src["r_own"]["task"]) == ("op", "op", "rule 1")
    # a same-type pin without an index keeps the scope's index, and says so
    assert (src["kept_index"]["device_type"], src["kept_index"]["device_index"]) == ("op", "scope")
    # a pin with both fields overrides both (a type change without an index: tests/test_tf_fidelity.py)
    assert (src["new_type"]["device_type"], src["new_type"]["device_index"]) == ("op", "op")


def test_default_device_type_without_index_takes_index_0_from_tf_default(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            worker: {gpus: 2}
        placement:
          default: /device:GPU
        graph:
          - {name: a, op: ones, shape: [2]}
          - {name: b, op: load, path: x.npy, device: /cpu:0}
        """)
    by_name = ops(plan_json(path))
    assert by_name["a"]["device"] == "/job:worker/replica:0/task:0/device:GPU:0"
    assert (by_name["a"]["sources"]["device_type"], by_name["a"]["sources"]["device_index"]) == \
        ("placement.default", "default")
    assert by_name["b"]["device"] == "/job:worker/replica:0/task:0/device:CPU:0"


def test_tf_default_is_the_cpu_for_cpu_only_ops_and_gpu_less_jobs(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            ps: {tasks: 1}
            worker: {gpus: 1}
        graph:
          - {name: data, op: load, path: x.npy}
          - {name: ps_side, op: ones, shape: [2], device: /job:ps}
          - {name: gpu_side, op: ones, shape: [2]}
        """)
    assert devices(plan_json(path)) == {"data": "/job:worker/replica:0/task:0/device:CPU:0",
                                        "ps_side": "/job:ps/replica:0/task:0/device:CPU:0",
                                        "gpu_side": "/job:worker/replica:0/task:0/device:GPU:0"}


def test_an_input_read_twice_moves_once(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1}
        graph:
          - {name: a, op: ones, shape: [4], device: /cpu:0}
          - {name: b, op: add, inputs: [a, a]}
        """)
    (transfer,) = ops(plan_json(path))["b"]["transfers"]
    assert transfer == {"input": "a", "from": CPU0, "to": GPU0, "bytes": 32}


# ------------------------------------------------------------------- determinism and size


@pytest.mark.parametrize("name", sorted(p.name for p in VALID.glob("*.yaml")))
def test_every_seed_spec_plans_identically_twice(name: str) -> None:
    first, second = io.StringIO(), io.StringIO()
    assert run_cli(["plan", str(VALID / name), "--format", "json"], out=first) == 0
    assert run_cli(["plan", str(VALID / name), "--format", "json"], out=second) == 0
    assert first.getvalue() == second.getvalue()
    assert not [d for d in json.loads(first.getvalue())["diagnostics"] if d["severity"] == "error"]


def test_plan_file_matches_the_cli_json() -> None:
    plan = plan_file(VALID / "round_robin.yaml")
    data = plan_json(VALID / "round_robin.yaml")
    assert [(p.op, p.device_name, p.why()) for p in plan.placements] == \
        [(op["name"], op["device"], op["why"]) for op in data["ops"]]


def generated_spec(blocks: int) -> str:
    """A chain of ``blocks`` replicates over 4 GPUs: 10 ops each (split, 4 x 2 body ops, combine)."""
    lines = ["version: 1", "name: generated", "cluster:", "  jobs:", "    localhost: {gpus: 4}", "graph:",
             "  - {name: r0.z, op: ones, shape: [64, 8], device: /cpu:0}"]
    for i in range(1, blocks + 1):
        lines += [f"  - name: r{i}", "    replicate:", "      devices: /gpu:*",
                  f"      split: {{r{i - 1}.z: 0}}", "      body:",
                  f"        - {{name: y, op: mul, inputs: [r{i - 1}.z], scalar: 2}}",
                  "        - {name: z, op: square, inputs: [y]}",
                  "      combine: {z: concat}", "      combine_device: /cpu:0"]
    lines += ["outputs:", f"  r{blocks}.z: \"-\""]
    return "\n".join(lines) + "\n"


def test_a_generated_2000_op_spec_with_replicates_plans(tmp_path: Path) -> None:
    path = tmp_path / "generated.yaml"
    path.write_text(generated_spec(200), encoding="utf-8")
    plan = plan_file(path)
    assert len(plan.placements) == 2001
    by_op = {p.op: p.device_name for p in plan.placements}
    assert [by_op[f"r200/{i}/z"] for i in range(4)] == [GPU0, GPU1, GPU2, GPU3]
    assert by_op["r200/split/r199.z"] == by_op["r200.z"] == CPU0
    assert [m.device for m in plan.memory] == [CPU0, GPU0, GPU1, GPU2, GPU3]
