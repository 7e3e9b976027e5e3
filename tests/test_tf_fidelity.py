"""Where orchestrator follows TensorFlow's placer, and the few places it says it does not (issue 13).

Each case names the TF source it follows:

* merging nested device scopes is field by field (``DeviceSpecV2.make_merged_spec``,
  ``tensorflow/python/framework/device_spec.py``): the index is a field of its own and
  survives a change of type (``/gpu:1`` then ``/cpu`` asks for ``CPU:1``);
* ``*`` is where we differ: TF parses it as "no index" (``ops_test.py``
  ``testNestingWithDeviceStringWildcard``: GPU:7 then GPU:* stays GPU:7); here it asks
  for any GPU at run time, and like any index an inner string sets, it wins;
* soft placement relaxes only the device type and index (``Member::GetSoftDeviceName``,
  ``tensorflow/core/common_runtime/colocation_graph.cc``): a job, replica or task the
  cluster lacks fails all the same, in TF's words;
* an op with no kernel for any device type of the cluster fails first, with or without
  soft placement (``ColocationGraph::InitializeMember``: "No OpKernel was registered ...").

Also: cluster addresses that Dask could not dial are validation errors, and every
diagnostic of the placer and of the topology checks carries a hint.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from spec_helpers import plan_json, write

from orchestrator.api import check_file
from orchestrator.cli import run_cli
from orchestrator.devices import SOFT_KEEPS

LOCAL = "/job:localhost/replica:0/task:0/device:"


def ops(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["name"]: op for op in data["ops"]}


def rendered(path: Path) -> list[str]:
    """Every diagnostic as ``orchestrate validate`` prints it, without the file name."""
    return [d.render().removeprefix(f"{path}:") for d in check_file(path).diagnostics]


# ------------------------------------------------------------------- merging scopes


TYPE_CHANGE = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 2}
    placement: {soft: %s}
    graph:
      - scope: /gpu:1
        ops:
          - {name: x, op: load, path: x.npy, shape: [2], device: /cpu}
    """


def test_a_type_without_an_index_keeps_the_scopes_index_and_the_error_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, TYPE_CHANGE % "false")
    assert rendered(path) == [
        "9:62: graph[0].ops[0].device: Could not satisfy explicit device specification "
        f"'{LOCAL}CPU:1' for op 'x': the cluster has only CPU:0 on that task (the index 1 comes from GPU:1 in "
        "scope, kept when the type changed to CPU, as TF merges type and index separately: write /cpu:0)"]


def test_with_soft_placement_the_carried_index_falls_back_and_the_plan_says_why(tmp_path: Path) -> None:
    (x,) = plan_json(write(tmp_path, TYPE_CHANGE % "true"))["ops"]
    assert x["device"] == LOCAL + "CPU:0"
    assert x["soft_fallback"] == (f"Could not satisfy explicit device specification '{LOCAL}CPU:1' for op 'x': "
                                  "the cluster has only CPU:0 on that task")
    assert x["sources"]["device_index"] == "soft fallback"


def test_the_why_shows_an_index_kept_across_a_type_change(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2}
        graph:
          - scope: /cpu:0
            ops:
              - {name: g, op: ones, shape: [2], device: /device:GPU}
          - scope: /gpu:1
            ops:
              - {name: same, op: ones, shape: [2], device: /device:GPU}
        """)
    by_name = ops(plan_json(path))
    assert by_name["g"]["device"] == LOCAL + "GPU:0"
    assert by_name["g"]["sources"]["device_index"] == \
        "scope (kept across the type change from CPU to GPU, as in TF)"
    assert by_name["g"]["why"] == ("job, replica, task from default; type from op; "
                                   "index from scope (kept across the type change from CPU to GPU, as in TF)")
    # the same type: nothing to say
    assert (by_name["same"]["device"], by_name["same"]["sources"]["device_index"]) == (LOCAL + "GPU:1", "scope")


def test_a_rule_index_for_another_type_is_kept_as_tf_device_functions_merge(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2}
        placement:
          rules:
            - match: {op: ones}
              device: /gpu:1
        graph:
          - {name: a, op: ones, shape: [2], device: /device:CPU}
        """)
    (diag,) = check_file(path).errors
    assert diag.message.endswith(f"'{LOCAL}CPU:1' for op 'a': the cluster has only CPU:0 on that task")
    assert diag.hint.startswith("the index 1 comes from GPU:1 in rule 1, kept when the type changed to CPU")


ANY_IN_SCOPE = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 2}
    graph:
      - scope: /gpu:1
        ops:
          - {name: any, op: ones, shape: [2], device: /gpu:*}
          - {name: unset, op: ones, shape: [2], device: /gpu}
    """


def test_gpu_star_inside_a_gpu_scope_wins_and_the_why_says_tf_would_not(tmp_path: Path) -> None:
    by_name = ops(plan_json(write(tmp_path, ANY_IN_SCOPE)))
    assert by_name["any"]["device"] == LOCAL + "GPU:*"
    assert by_name["any"]["why"] == (
        "job, replica, task from default; type from op; index from op (its '*' overrides GPU:1 from scope; "
        "TF reads '*' as no index and would keep GPU:1)")
    # what TF gives for /gpu:* is written /gpu here: the scope's index
    assert (by_name["unset"]["device"], by_name["unset"]["sources"]["device_index"]) == (LOCAL + "GPU:1", "scope")


def test_orchestrate_plan_prints_the_merge_rule_in_the_why(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_cli(["plan", str(write(tmp_path, ANY_IN_SCOPE))], out=out) == 0
    assert (f"any: (Ones): {LOCAL}GPU:*  # job, replica, task from default; type from op; index from op (its '*' "
            "overrides GPU:1 from scope; TF reads '*' as no index and would keep GPU:1)") in out.getvalue().splitlines()


def test_any_cpu_is_the_tasks_cpu0_never_an_open_gpu_slot(tmp_path: Path) -> None:
    # CPU:* used to stay open, and the runtime asks Dask for a GPU for any '*' device
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2}
        graph:
          - {name: a, op: ones, shape: [2], device: /cpu:*}
          - scope: /gpu:*
            ops:
              - {name: b, op: ones, shape: [2], device: /cpu}
        """)
    by_name = ops(plan_json(path))
    assert by_name["a"]["device"] == by_name["b"]["device"] == LOCAL + "CPU:0"
    assert by_name["a"]["sources"]["device_index"] == "default (a task has one CPU, so CPU:* is CPU:0)"


# ------------------------------------------------------------------- soft placement keeps job, replica and task


SOFT_TASK = """\
    version: 1
    cluster:
      jobs:
        ps: {tasks: 2}
        worker: {tasks: 4}
    placement: {soft: %s}
    graph:
      - scope: /job:ps
        ops:
          - {name: v, op: ones, shape: [2], device: /task:3}
    """
AVAILABLE = ("[ /job:ps/replica:0/task:0/device:CPU:0, /job:ps/replica:0/task:1/device:CPU:0, "
             "/job:worker/replica:0/task:0/device:CPU:0, /job:worker/replica:0/task:1/device:CPU:0, "
             "/job:worker/replica:0/task:2/device:CPU:0, /job:worker/replica:0/task:3/device:CPU:0 ]")


@pytest.mark.parametrize("soft", [True, False])
def test_a_task_the_job_lacks_fails_in_tf_words_even_with_soft_placement(tmp_path: Path, soft: bool) -> None:
    path = write(tmp_path, SOFT_TASK % str(soft).lower())
    (diag,) = check_file(path).diagnostics
    assert diag.is_error and diag.code == "placement"
    assert diag.message == ("op 'v' was explicitly assigned to /job:ps/replica:0/task:3/device:CPU:0 but available "
                            f"devices are {AVAILABLE}. Make sure the device specification refers to a valid device.")
    assert diag.hint == "job 'ps' has tasks 0..1" + (f"; {SOFT_KEEPS}" if soft else "")
    assert (diag.line, diag.column) == (10, 49)  # the op's own device string


def test_a_long_device_list_is_cut_short(tmp_path: Path) -> None:
    path = write(tmp_path, (SOFT_TASK % "true").replace("worker: {tasks: 4}", "worker: {tasks: 40}"))
    (diag,) = check_file(path).errors
    assert ", ... (34 more) ]. Make sure" in diag.message


@pytest.mark.parametrize(("device", "message", "hint"), [
    ("/job:wroker", "device '/job:wroker' names job 'wroker', which the cluster does not have",
     f"did you mean 'worker'? {SOFT_KEEPS}"),
    ("/job:worker/task:5", "device '/job:worker/task:5' names task 5, but the job has 2 tasks",
     f"tasks are numbered 0..1; {SOFT_KEEPS}"),
    ("/job:worker/replica:1", "device '/job:worker/replica:1' names replica 1; only replica 0 exists",
     f"drop /replica:N; {SOFT_KEEPS}"),
])
def test_soft_placement_no_longer_turns_a_missing_job_task_or_replica_into_a_warning(
        tmp_path: Path, device: str, message: str, hint: str) -> None:
    path = write(tmp_path, f"""\
        version: 1
        cluster:
          jobs:
            worker: {{tasks: 2}}
        placement: {{soft: true}}
        graph:
          - {{name: a, op: ones, shape: [2], device: "{device}"}}
        """)
    (diag,) = check_file(path).diagnostics
    assert (diag.severity, diag.message, diag.hint) == ("error", message, hint)


def test_soft_placement_still_relaxes_the_device_type(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            ps: {tasks: 1}
        placement: {soft: true}
        graph:
          - {name: a, op: ones, shape: [2], device: /job:ps/gpu:0}
        """)
    (diag,) = check_file(path).diagnostics
    assert diag.severity == "warning"
    assert ops(plan_json(path))["a"]["device"] == "/job:ps/replica:0/task:0/device:CPU:0"


# ------------------------------------------------------------------- no kernel for any device of the cluster


NO_GPU = """\
    version: 1
    placement: {soft: %s}
    graph:
      - {name: g, op: call, fn: "mypkg.mod:f", kernels: [gpu]}
    """
NO_KERNEL = ("No OpKernel was registered to support Op 'Call' used by op 'g'. Registered devices: [CPU], "
             "Registered kernels: device='GPU'")
NO_KERNEL_HINT = ("the cluster has no GPU, and soft placement cannot make one: add gpus: N to a job, or declare "
                  "kernels: [cpu, gpu] if the function also runs on NumPy")


@pytest.mark.parametrize("soft", ["true", "false"])
def test_an_op_with_no_kernel_on_any_device_of_the_cluster_fails_in_tf_words(tmp_path: Path, soft: str) -> None:
    path = write(tmp_path, NO_GPU % soft)
    assert rendered(path) == [f"4:53: graph[0].kernels: {NO_KERNEL} ({NO_KERNEL_HINT})"]


def test_no_kernel_is_reported_once_for_all_copies_of_a_body(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {tasks: 2}
        graph:
          - {name: x, op: ones, shape: [4, 2], device: /cpu:0}
          - name: towers
            replicate:
              devices: [/task:0/cpu:0, /task:1/cpu:0]
              split: {x: 0}
              body:
                - {name: g, op: call, fn: "mypkg.mod:f", kernels: [gpu], inputs: [x]}
        """)
    (diag,) = check_file(path).diagnostics
    assert (diag.code, diag.path) == ("no-kernel", ("graph", 1, "replicate", "body", 0, "kernels"))
    assert diag.message.startswith("No OpKernel was registered to support Op 'Call' used by op 'towers/0/g'.")


# ------------------------------------------------------------------- addresses


def cluster_spec(tmp_path: Path, scheduler: str, tasks: str = "1") -> Path:
    tmp_path.mkdir(exist_ok=True)
    return write(tmp_path, f"""\
        version: 1
        cluster:
          scheduler: "{scheduler}"
          jobs:
            worker: {{tasks: {tasks}}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
        """)


@pytest.mark.parametrize("scheduler", ["local", "tcp://10.0.0.1:8786", "tls://sched.example.com:8786",
                                       "10.0.0.1:8786", "[::1]:8786", "tcp://[::1]:8786", "tcp://localhost:1"])
def test_scheduler_addresses_dask_can_dial_are_valid(tmp_path: Path, scheduler: str) -> None:
    assert check_file(cluster_spec(tmp_path, scheduler)).diagnostics == ()


@pytest.mark.parametrize(("scheduler", "problem", "hint"), [
    ("tcp://10.0.0.1", "has no port", "write tcp://10.0.0.1:8786, Dask's default scheduler port, or local for an "
                                      "embedded cluster"),
    ("10.0.0.1", "has no port", "write 10.0.0.1:8786, Dask's default scheduler port, or local for an embedded cluster"),
    ("tcp://h:http", "has port 'http', which is not a number", None),
    ("tcp://h:65536", "has port 65536, out of range 1..65535", None),
    ("tcp://:8786", "has an empty host", None),
    ("::1:8786", "is an IPv6 address without brackets", None),
    ("http://h:8786", "has an unknown protocol 'http'", "Dask's protocols are tcp, tls, ucx, ws, wss: write e.g. "
                                                       "tcp://host:port or tls://host:port, or local for an embedded "
                                                       "cluster"),
    ("", "is empty", None),
])
def test_a_scheduler_address_dask_cannot_dial_is_a_validation_error(
        tmp_path: Path, scheduler: str, problem: str, hint: str | None) -> None:
    path = cluster_spec(tmp_path, scheduler)
    (diag,) = check_file(path).diagnostics
    assert (diag.code, diag.path, diag.line, diag.column) == ("scheduler", ("cluster", "scheduler"), 3, 14)
    assert diag.message == f"scheduler address '{scheduler}' {problem}"
    assert diag.hint == (hint or "write local, or host:port such as tcp://10.0.0.1:8786; an IPv6 host goes in "
                                 "brackets: tcp://[::1]:8786")


def test_task_addresses_must_be_host_port(tmp_path: Path) -> None:
    path = cluster_spec(tmp_path, "local", '["w0:2222", "[::1]:2222", "w1", "w2:x", ":2222", "w3:0", "tcp://w4:1"]')
    assert [(d.path[-1], d.column, d.message, d.hint) for d in check_file(path).diagnostics] == [
        (2, 47, "address 'w1' of task 2 of job 'worker' has no port", "write w1:PORT, e.g. w1:2222"),
        (3, 53, "address 'w2:x' of task 3 of job 'worker' has port 'x', which is not a number",
         "write host:port, e.g. ps0.example.com:2222, or [::1]:2222 for an IPv6 host"),
        (4, 61, "address ':2222' of task 4 of job 'worker' has an empty host",
         "write host:port, e.g. ps0.example.com:2222, or [::1]:2222 for an IPv6 host"),
        (5, 70, "address 'w3:0' of task 5 of job 'worker' has port 0, out of range 1..65535",
         "write host:port, e.g. ps0.example.com:2222, or [::1]:2222 for an IPv6 host"),
        (6, 78, "address 'tcp://w4:1' of task 6 of job 'worker' has a protocol",
         "write w4:1: a task is host:port; the protocol belongs to cluster.scheduler"),
    ]


# ------------------------------------------------------------------- every diagnostic has a hint


ROOT = Path(__file__).resolve().parent.parent
# codes the placer (place.py) and the topology checks (validate/topology.py) emit
OWN_CODES = {"placement", "no-kernel", "device-job", "device-task", "device-type", "device-replica", "cluster-size",
             "gpus", "gpu-fraction", "gpu-memory", "rule-unknown-op", "round-robin", "strategy", "scheduler",
             "task-address"}


def test_every_placement_and_topology_diagnostic_has_a_hint(tmp_path: Path) -> None:
    texts = [TYPE_CHANGE % "false", TYPE_CHANGE % "true", ANY_IN_SCOPE, SOFT_TASK % "true", SOFT_TASK % "false",
             NO_GPU % "true", NO_GPU % "false"]
    paths = [write(tmp_path, text, f"t{i}.yaml") for i, text in enumerate(texts)]
    paths += [cluster_spec(tmp_path / str(i), scheduler, tasks) for i, (scheduler, tasks) in
              enumerate([("tcp://h", "1"), ("http://h:1", "1"), ("local", '["h", "h:x", "tcp://h:1"]')])]
    paths += sorted((ROOT / "specs" / "invalid").glob("*.yaml"))
    seen = set()
    for path in paths:
        for diag in check_file(path).diagnostics:
            if diag.code in OWN_CODES:
                seen.add(diag.code)
                assert diag.hint.strip(), diag.render()
    assert {"placement", "no-kernel", "device-job", "device-task", "scheduler", "task-address"} <= seen
