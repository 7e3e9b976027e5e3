"""The devices of one process run a loop window in one thread (``runtime.together``), and the client reads a
gang window's metrics from the window's own result where its carried states are small (``compile.gang``).

In one process (``processes: host``) every device's op of a window runs on one thread, interleaved in the step's
order, with each device's values and records as before; where only some of a window's devices share a process,
those run together and the others are reached over the links as before. The devices of one
process run a window as one Dask task (``runtime.groups``).
"""

from __future__ import annotations

import shutil
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from orchestrator.api import plan_file, run_file
from orchestrator.compile import CompileOptions, compile_gang_prep, compile_gang_window, loop_start
from orchestrator.compile.gang import DIRECT_READ_BYTES, _small
from orchestrator.compile.records import Located
from orchestrator.errors import OrchestratorError
from orchestrator.spec.refs import OpRef

LOOP = """\
version: 1
cluster:
  jobs:
{jobs}
graph:
  - {{name: w0, op: variable, shape: [{size}], init: zeros, device: {ps}}}
  - name: train
    iterate:
      steps: 40
      window: 10
      state: {{w: w0}}
      body:
        - {{name: a, op: call, fn: "mark_fns:half", inputs: [w], params: {{tag: a}}, kernels: [cpu, gpu],
           output: {{shape: [{size}]}}, device: {gpu}:0}}
        - {{name: b, op: call, fn: "mark_fns:half", inputs: [w], params: {{tag: b}}, kernels: [cpu, gpu],
           output: {{shape: [{size}]}}, device: {gpu}:1}}
        - {{name: w_next, op: call, fn: "mark_fns:plus", inputs: [a, b], kernels: [cpu, gpu],
           output: {{shape: [{size}]}}, device: {ps}}}
        - {{name: total, op: call, fn: "mark_fns:total", inputs: [w_next], kernels: [cpu, gpu],
           output: {{shape: []}}, device: {ps}}}
      update: {{w: w_next}}
      metrics: {{total: total}}
outputs:
  train.w: "-"
  train.total: "-"
"""
MARK_FNS = '''
import os
import shutil
import threading


def _mark(tag):
    with open("threads", "a") as out:
        out.write(f"{os.getpid()} {threading.get_ident()} {tag}\\n")


def half(w, xp, tag):
    _mark(tag)
    return 0.5 * w + 0.5  # a + b = w + 1: after n steps every element is n


def plus(a, b, xp):
    _mark("w_next")
    return a + b


def total(w, xp):
    _mark("total")
    return xp.sum(w)
'''
ONE_HOST = "    localhost: {gpus: 2, processes: host}"
PS_APART = "    ps: {tasks: 1}\n    worker: {tasks: 1, gpus: 2, processes: host}"


def quiet(_: str) -> None:
    pass


def write(tmp_path: Path, jobs: str, ps: str, gpu: str, size: int = 3) -> Path:
    (tmp_path / "mark_fns.py").write_text(MARK_FNS)
    spec = tmp_path / "loop.yaml"
    spec.write_text(LOOP.format(jobs=jobs, ps=ps, gpu=gpu, size=size))
    return spec


def marks(tmp_path: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split()) for line in (tmp_path / "threads").read_text().splitlines()]  # type: ignore[misc]


def check_values(result: object, size: int = 3) -> None:
    values = result.values  # type: ignore[attr-defined]
    np.testing.assert_array_equal(np.asarray(values["train.w"]), np.full(size, 40.0))
    np.testing.assert_array_equal(np.asarray(values["train.total"]), size * np.arange(1.0, 41.0))


@pytest.mark.cluster
def test_every_device_of_one_process_runs_its_window_ops_on_one_thread_in_the_step_order(tmp_path: Path) -> None:
    spec = write(tmp_path, ONE_HOST, "/cpu:0", "/gpu")
    check_values(run_file(spec, echo=quiet))
    seen = marks(tmp_path)
    assert len(seen) == 160 and len({pid for pid, _, _ in seen}) == 1
    for window in range(4):  # 10 steps of 4 calls each: one thread, the ops in the step's order
        part = seen[window * 40:(window + 1) * 40]
        assert len({thread for _, thread, _ in part}) == 1, part
        assert [tag for _, _, tag in part] == ["a", "b", "w_next", "total"] * 10


@pytest.mark.cluster
def test_devices_sharing_a_process_run_together_and_reach_a_device_elsewhere_over_the_links(tmp_path: Path) -> None:
    """The worker task's two GPUs share a process (one thread a window); the ps device has its own."""
    spec = write(tmp_path, PS_APART, "/job:ps/task:0/cpu:0", "/job:worker/task:0/gpu")
    check_values(run_file(spec, echo=quiet))
    by_pid: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for pid, thread, tag in marks(tmp_path):
        by_pid[pid].append((thread, tag))
    assert len(by_pid) == 2
    gpus = next(rows for rows in by_pid.values() if rows[0][1] in "ab")
    assert len(gpus) == 80
    for window in range(4):
        part = gpus[window * 20:(window + 1) * 20]
        assert len({thread for thread, _ in part}) == 1, part
        assert [tag for _, tag in part] == ["a", "b"] * 10


COUNTING = """
from orchestrator.runtime import exchange

if not hasattr(exchange.Mailbox.put, "counted"):  # count the values put into any mailbox of this process
    _put = exchange.Mailbox.put

    def put(self, items):
        with open({path!r}, "a") as out:
            out.write(f"{len(items)}\\n")
        return _put(self, items)

    put.counted = True
    exchange.Mailbox.put = put
"""


@pytest.mark.cluster
def test_values_between_devices_of_one_thread_are_handed_over_without_a_mailbox(tmp_path: Path) -> None:
    """In one process every value of the window (w to a and b, a and b to w_next) passes by the thread's
    hand-over table; with the ps apart, only the values crossing to or from it go through a mailbox."""
    spec = write(tmp_path, ONE_HOST, "/cpu:0", "/gpu")
    counting = COUNTING.replace("{path!r}", repr(str(tmp_path / "mailbox")))  # (put runs outside the spec folder)
    (tmp_path / "mark_fns.py").write_text(counting + MARK_FNS)
    result = run_file(spec, echo=quiet)
    check_values(result)
    assert not (tmp_path / "mailbox").exists(), (tmp_path / "mailbox").read_text()
    assert result.report["totals"]["bytes_exchanged"] == 0  # nothing left the process
    spec = write(tmp_path, PS_APART, "/job:ps/task:0/cpu:0", "/job:worker/task:0/gpu")
    (tmp_path / "mark_fns.py").write_text(counting + MARK_FNS)
    result = run_file(spec, echo=quiet)
    check_values(result)
    assert (tmp_path / "mailbox").exists()  # the ps's w into the GPUs' process, a and b into the ps's
    # w to each GPU and a and b to the ps, 3 float64 each, at each of the 40 steps, but the first step's w,
    # moved to the GPUs before the loop
    assert result.report["totals"]["bytes_exchanged"] == 4 * 24 * 40 - 2 * 24


@pytest.mark.cluster
def test_a_process_per_device_gives_the_same_values(tmp_path: Path) -> None:
    spec = write(tmp_path, ONE_HOST.replace("host", "device"), "/cpu:0", "/gpu")
    check_values(run_file(spec, echo=quiet))
    assert len({pid for pid, _, _ in marks(tmp_path)}) == 3


def test_the_client_reads_a_window_s_own_result_only_where_its_carried_states_are_small(tmp_path: Path) -> None:
    """Otherwise each window would bring its states to the client: a metric gets a getter task, as before."""
    small = plan_file(write(tmp_path, ONE_HOST, "/cpu:0", "/gpu"))
    assert _small(small, [OpRef("train/w_next")])
    size = DIRECT_READ_BYTES // 8 + 1  # float64 elements: one past the limit
    large = plan_file(write(tmp_path, ONE_HOST, "/cpu:0", "/gpu", size=size))
    assert not _small(large, [OpRef("train/w_next")])


@pytest.mark.cluster
def test_a_loop_with_large_states_reads_its_metrics_through_getters_with_the_same_values(tmp_path: Path) -> None:
    size = DIRECT_READ_BYTES // 8 + 1
    spec = write(tmp_path, ONE_HOST, "/cpu:0", "/gpu", size=size)
    check_values(run_file(spec, echo=quiet), size)


# ------------------------------------------------------------------ one task per process


def window_tasks(tmp_path: Path, jobs: str, ps: str, gpu: str) -> dict[str, tuple[object, dict[str, float]]]:
    """The first window's Dask tasks of the loop spec: key -> (its callable's name, its resources)."""
    plan = plan_file(write(tmp_path, jobs, ps, gpu))
    loop, options = plan.spec.loop("train"), CompileOptions("t", str(tmp_path))
    start = loop_start(plan, loop, {"w0": Located("w0-key", plan.placement("w0").device)})
    window = compile_gang_window(plan, loop, 0, compile_gang_prep(plan, loop, start, options)[1], options)
    return {key: (window.graph.tasks[key].func.__name__, dict(window.graph.resources[key]))
            for key in window.graph.gang}


def test_the_devices_of_one_process_run_a_window_as_one_task_asking_for_all_their_resources(tmp_path: Path) -> None:
    one = window_tasks(tmp_path, ONE_HOST, "/cpu:0", "/gpu")
    assert len(one) == 1
    ((key, (fn, resources)),) = one.items()
    assert fn == "run_group" and "GPU:0+GPU:1+CPU:0" in key, key  # the devices in the step's order
    assert sorted(resources) == sorted(f"device:/job:localhost/replica:0/task:0/device:{d}"
                                       for d in ("CPU:0", "GPU:0", "GPU:1")), resources
    apart = window_tasks(tmp_path, PS_APART, "/job:ps/task:0/cpu:0", "/job:worker/task:0/gpu")
    assert sorted(fn for fn, _ in apart.values()) == ["run_group", "run_window"], apart
    per_device = window_tasks(tmp_path, ONE_HOST.replace("host", "device"), "/cpu:0", "/gpu")
    assert [fn for fn, _ in per_device.values()] == ["run_window"] * 3, per_device


@pytest.mark.cluster
def test_a_training_loop_with_evaluations_early_stop_and_checkpoints_writes_the_same_files_in_one_process(
        tmp_path: Path) -> None:
    """examples/train.yaml (an evaluator task, early stopping, checkpoints) with every job in one process."""
    root = Path(__file__).resolve().parent.parent / "examples"
    text = (root / "train.yaml").read_text()
    jobs = ["ps: {tasks: 1", "worker: {tasks: 1, gpus: 2, gpu_memory: {limit: 64MiB}", "evaluator: {tasks: 1"]
    written, saved = {}, {}
    for layout in ("device", "host"):
        folder = tmp_path / layout
        shutil.copytree(root / "data", folder / "data")
        shutil.copy(root / "train_fns.py", folder)
        spec = text
        for job in jobs:
            assert job + "}" in spec
            spec = spec.replace(job + "}", f"{job}, processes: {layout}}}")
        (folder / "train.yaml").write_text(spec)
        run_file(folder / "train.yaml", output_dir=str(folder / "out"), echo=quiet)
        results = folder / "out" / "results"
        written[layout] = {path.relative_to(results): path.read_bytes() for path in sorted(results.rglob("*"))
                           if path.is_file() and "checkpoints" not in path.parts}
        saved[layout] = [dict(np.load(path)) for path in sorted((results / "checkpoints").rglob("*.npz"))]
    assert written["device"] and written["host"] == written["device"]
    assert saved["device"] and len(saved["host"]) == len(saved["device"])  # (their names carry the spec's digest)
    for host, device in zip(saved["host"], saved["device"]):
        assert host.keys() == device.keys()
        for name in set(device) - {"header"}:  # (the header says when it was written)
            np.testing.assert_array_equal(host[name], device[name], err_msg=name)


FAILING_FNS = MARK_FNS + '''

def flaky(w, xp, tag):
    if w[0] >= 3.0:  # the fourth step
        raise ValueError("the fourth step fails")
    return half(w, xp, tag)


def sleepy(w, xp, tag):
    if w[0] >= 3.0:
        import time
        time.sleep(30.0)
    return half(w, xp, tag)
'''


@pytest.mark.cluster
@pytest.mark.parametrize("fn, extra, said", [
    ("flaky", "", "ValueError: the fourth step fails"),
    ("sleepy", ", timeout: 1", "exceeded its timeout of 1 s"),
])
def test_an_op_that_fails_in_a_window_run_in_one_thread_names_itself_and_its_device(
        tmp_path: Path, fn: str, extra: str, said: str) -> None:
    spec = write(tmp_path, ONE_HOST, "/cpu:0", "/gpu")
    (tmp_path / "mark_fns.py").write_text(FAILING_FNS)
    text = spec.read_text()
    old = 'fn: "mark_fns:half", inputs: [w], params: {tag: b}, kernels: [cpu, gpu],'
    assert old in text
    spec.write_text(text.replace(old, old.replace("half", fn).replace("[cpu, gpu],", f"[cpu, gpu]{extra},")))
    began = time.monotonic()
    with pytest.raises(OrchestratorError) as caught:
        run_file(spec, echo=quiet)
    message = str(caught.value)
    assert "'train/b'" in message and "/job:localhost/replica:0/task:0/device:GPU:1" in message, message
    assert said in message, message
    assert time.monotonic() - began < 25.0  # not the sleeping op's 30 s
