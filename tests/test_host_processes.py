"""Both process layouts (``cluster.jobs.<job>.processes``): a worker process per device, or one per machine with
a thread per device thread, on the simulated backend and real Dask clusters on loopback.

The host layout must change nothing a user sees but the processes: the same values (the polyfit example's
loop, a data-parallel example), the same memory caps refusing the same op on its device, each op recorded and
logged on its own device, a killed process ending the run in one line that names every device it stood for,
and Ctrl-C leaving no process behind. That the devices really share a process is asked of the ops themselves
(a ``call`` that returns its process id).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from orchestrator.api import plan_file, run_file
from orchestrator.errors import OrchestratorError
from orchestrator.execute.starting import CAPPED, Progress
from orchestrator.runtime.backends import cuda_device_count

from test_lost_worker import LiveRun, busy, race_spec  # noqa: F401  (busy: a fixture)
from spec_helpers import polyfit_in
from waiting import gone

pytestmark = [pytest.mark.cluster]
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HOST = "/job:worker/replica:0/task:0"


def quiet(_: str) -> None:
    pass


def polyfit(tmp_path: Path, layout: str) -> Path:
    """The polyfit example with every job in ``layout`` (its functions beside it)."""
    return polyfit_in(tmp_path / layout, layout)


def towers(tmp_path: Path, layout: str) -> Path:
    folder = tmp_path / layout
    shutil.copytree(ROOT / "examples" / "data", folder / "data")
    text = (ROOT / "examples" / "towers.yaml").read_text()
    old = "localhost: {gpus: 4, gpu_memory: {limit: 32MiB}, memory_limit: 1GiB}"
    assert old in text
    (folder / "towers.yaml").write_text(text.replace(old, old[:-1] + f", processes: {layout}}}"))
    return folder / "towers.yaml"


@pytest.mark.parametrize("scheduler", ["local", "tcp://10.0.0.1:8786"])
def test_each_device_names_the_worker_standing_for_it(tmp_path: Path, scheduler: str) -> None:
    """``Cluster.standing_for``, which compile's process groups, the plan's loop words and the run's worker
    restrictions all read: a device of a ``device`` job its own worker; of a ``host`` job the machine's one
    process (embedded) or its task's (a cluster of one's own); an unknown name itself."""
    spec = polyfit_in(tmp_path, "host")
    text = spec.read_text().replace("ps: {tasks: 1, processes: host}", "ps: {tasks: 1, processes: device}")
    spec.write_text(text.replace("cluster:\n", f"cluster:\n  scheduler: {scheduler}\n", 1))
    cluster = plan_file(spec).spec.cluster
    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    host = "/host:local" if scheduler == "local" else HOST
    assert cluster.standing_for(ps) == ps
    assert {cluster.standing_for(f"{HOST}/device:{d}") for d in ("CPU:0", "GPU:0", "GPU:1")} == {host}
    assert cluster.standing_for("/job:nowhere/replica:0/task:0/device:GPU:9") == "/job:nowhere/replica:0/task:0/device:GPU:9"


def test_polyfit_loop_gives_equal_values_and_records_each_op_on_its_device_in_both_layouts(tmp_path: Path) -> None:
    results, recorded = {}, {}
    for layout in ("device", "host"):
        spec = polyfit(tmp_path, layout)
        results[layout] = run_file(spec, params={"steps": 60, "window": 20}, output_dir=str(spec.parent / "out"),
                                   echo=quiet, report_path=str(spec.parent / "run.json"))
        report = json.loads((spec.parent / "run.json").read_text())
        planned = {p.op: p.device_name for p in plan_file(spec, params={"steps": 60, "window": 20}).placements}
        ran = {entry["name"]: entry["worker"] for entry in report["ops"] if entry["worker"] is not None}
        assert ran and all(planned[name] == device for name, device in ran.items()), ran  # (states record nothing)
        assert set(ran.values()) == set(planned.values())
        assert report["loops"]["train"]["mode"].startswith("gang")
        assert report["transport"] == ("in-process" if layout == "host" else "links")
        recorded[layout] = set(ran)
    assert recorded["host"] == recorded["device"]
    assert results["host"].values.keys() == results["device"].values.keys()
    for name, value in results["device"].values.items():
        np.testing.assert_array_equal(np.asarray(results["host"].values[name]), np.asarray(value), err_msg=name)


PIDS = """\
version: 1
cluster: {{jobs: {{localhost: {{gpus: 2, processes: {layout}}}}}}}
graph:
  - {{name: a, op: call, fn: "pid_fns:pid", kernels: [cpu, gpu], output: {{shape: [1]}}, device: /cpu:0}}
  - {{name: b, op: call, fn: "pid_fns:pid", kernels: [cpu, gpu], output: {{shape: [1]}}, device: /gpu:0}}
  - {{name: c, op: call, fn: "pid_fns:pid", kernels: [cpu, gpu], output: {{shape: [1]}}, device: /gpu:1}}
outputs: {{a: "-", b: "-", c: "-"}}
"""
PID_FNS = "import os\nimport numpy as np\n\ndef pid(xp):\n    return np.array([float(os.getpid())])\n"


@pytest.mark.parametrize("layout", ["device", "host"])
def test_the_devices_of_a_host_share_one_process_and_log_their_own_names(tmp_path: Path, layout: str) -> None:
    (tmp_path / "pid_fns.py").write_text(PID_FNS)
    (tmp_path / "pids.yaml").write_text(PIDS.format(layout=layout))
    result = run_file(tmp_path / "pids.yaml", echo=quiet)
    pids = {float(np.asarray(result.values[name])[0]) for name in "abc"}
    assert len(pids) == (1 if layout == "host" else 3)
    spec = towers(tmp_path, layout)
    said: list[str] = []
    result = run_file(spec, output_dir=str(spec.parent / "out"), echo=said.append)
    logged = {m.group(1): m.group(2) for m in (re.search(r"Executing op \S+ \((\S+)\) in device (\S+)", line)
                                               for line in said) if m}
    planned = {p.op: p.device_name for p in plan_file(spec).placements}
    assert logged and all(planned[op] == device for op, device in logged.items()), said
    assert set(logged.values()) == set(planned.values())
    assert np.asarray(result.values["towers.s"]).shape == (2,)


def test_towers_give_equal_values_in_both_layouts(tmp_path: Path) -> None:
    values = {}
    for layout in ("device", "host"):
        spec = towers(tmp_path, layout)
        values[layout] = run_file(spec, output_dir=str(spec.parent / "out"), echo=quiet).values
    for name, value in values["device"].items():
        np.testing.assert_array_equal(np.asarray(values["host"][name]), np.asarray(value), err_msg=name)


CAPPED = """\
version: 1
cluster: {{jobs: {{localhost: {{gpus: 2, gpu_memory: {{limit: 1MiB}}, processes: {layout}}}}}}}
graph:
  - {{name: small, op: ones, shape: [1000], device: /gpu:0}}
  - {{name: big, op: ones, shape: [200000], device: /gpu:1}}
outputs: {{small: "-", big: "-"}}
"""


@pytest.mark.parametrize("layout", ["device", "host"])
def test_a_device_memory_cap_refuses_the_op_on_its_own_device_in_both_layouts(tmp_path: Path, layout: str) -> None:
    (tmp_path / "capped.yaml").write_text(CAPPED.format(layout=layout))
    with pytest.raises(OrchestratorError) as caught:
        run_file(tmp_path / "capped.yaml", echo=quiet)
    said = str(caught.value)
    assert "'big'" in said and "/job:localhost/replica:0/task:0/device:GPU:1" in said, said
    assert "GPU:0" not in said, said


def test_a_killed_host_process_ends_the_run_in_one_line_naming_its_devices(tmp_path: Path, busy: None) -> None:
    spec, marker = race_spec(tmp_path)
    text = spec.read_text().replace("worker: {tasks: 1, gpus: 2}", "worker: {tasks: 1, gpus: 2, processes: host}")
    assert "processes: host" in text
    spec.write_text(text)
    run = LiveRun([str(spec), "--output-dir", str(tmp_path / "out")], tmp_path)
    pid = run.worker_pid("/host:local")
    Path(f"{marker}.go").touch()
    run.wait_for(marker.exists, "GPU:0 in window 2")
    killed = run.kill_worker(pid)
    code, took = run.finish(killed)
    err = "".join(run.err)
    assert code == 1, err
    assert took < 30.0, f"the run ended {took:.1f} s after its process was killed"
    lines = err.splitlines()
    devices = ", ".join(f"{HOST}/device:{d}" for d in ("CPU:0", "GPU:0", "GPU:1"))
    assert len(lines) == 1 and lines[0].startswith(f"error: lost {devices}: its worker died"), err
    assert run.left() == [], "processes of the run were left behind"


def test_ctrl_c_in_the_host_layout_prints_one_line_and_leaves_no_process(tmp_path: Path) -> None:
    spec = polyfit(tmp_path, "host")
    proc = subprocess.Popen([str(BIN / "orchestrate"), "run", str(spec), "--set", "steps=100000", "--output-dir",
                             str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(tmp_path), start_new_session=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    while "dashboard" not in proc.stdout.readline():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    time.sleep(2.0)  # the loop under way
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err == "interrupted\n", err
    assert "Traceback" not in out
    assert gone(lambda: [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(p) == proc.pid]) \
        == []


def _pgid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return -1


WHERE_FNS = '''
import os
import numpy as np

def where(x, xp):
    """The CUDA device this op's array is on, and what the process sees (an op on a GPU gets a CuPy array)."""
    device = int(x.device.id) if hasattr(x, "device") and hasattr(x.device, "id") else -1
    return xp.asarray([float(device), float(len(os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")))])
'''
WHERE = """\
version: 1
cluster: {{jobs: {{localhost: {{visible_gpus: [0, 1], processes: {layout}}}}}}}
graph:
  - {{name: x, op: ones, shape: [4], device: /cpu:0}}
  - {{name: a, op: call, fn: "where_fns:where", kernels: [gpu], inputs: [x], output: {{shape: [2]}}, device: /gpu:0}}
  - {{name: b, op: call, fn: "where_fns:where", kernels: [gpu], inputs: [x], output: {{shape: [2]}}, device: /gpu:1}}
outputs: {{a: "-", b: "-"}}
"""


@pytest.mark.gpu
@pytest.mark.skipif(cuda_device_count() < 2, reason="needs two CUDA GPUs and CuPy")
@pytest.mark.parametrize("layout", ["device", "host"])
def test_one_process_drives_each_gpu_as_its_own_cupy_device(tmp_path: Path, layout: str) -> None:
    """host: both GPUs visible in the one process, each op's arrays on its own GPU (CuPy's current device set on
    the op's thread); device: each process sees its GPU as device 0."""
    (tmp_path / "where_fns.py").write_text(WHERE_FNS)
    (tmp_path / "where.yaml").write_text(WHERE.format(layout=layout))
    result = run_file(tmp_path / "where.yaml", echo=quiet, gpu_backend="cupy")
    a, b = (np.asarray(result.values[name]).tolist() for name in "ab")
    assert (a, b) == (([0.0, 2.0], [1.0, 2.0]) if layout == "host" else ([0.0, 2.0], [0.0, 2.0]))


@contextlib.contextmanager
def own_scheduler(tmp_path: Path) -> Iterator[tuple[str, Path, list[Any]]]:
    """A ``dask scheduler`` on loopback: its address, the logs' folder, and the processes started beside it (the
    caller adds its own), all stopped afterwards."""
    from test_remote import start_scheduler, stop_all

    logs = tmp_path / "logs"
    logs.mkdir()
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        yield address, logs, procs
    finally:
        stop_all(procs[1:] + procs[:1])


def test_orchestrate_worker_starts_one_process_per_task_and_the_loop_runs_on_them(tmp_path: Path) -> None:
    """On a cluster of one's own, ``processes: host`` is a process per task (named by it), as TF's workers: the
    polyfit loop runs across the two tasks' processes over links, its GPUs' values handed over by reference."""
    from test_remote import scheduler_workers, start_task, wait_started

    with own_scheduler(tmp_path) as (address, logs, procs):
        spec = polyfit(tmp_path, "host")
        spec.write_text(spec.read_text().replace("cluster:\n", f"cluster:\n  scheduler: {address}\n", 1))
        for job in ("ps", "worker"):
            procs.append(start_task(spec, job, 0, address, logs))
            assert len(wait_started(procs[-1], 1)) == 1
        assert set(scheduler_workers(address)) == {"/job:ps/replica:0/task:0", HOST}
        params = {"steps": 60, "window": 20}
        remote = run_file(spec, params=params, echo=quiet, output_dir=str(tmp_path / "remote"))
        ran = {entry["name"]: entry["worker"] for entry in remote.report["ops"] if entry["worker"] is not None}
        planned = {p.op: p.device_name for p in plan_file(spec, params=params).placements}
        assert ran and all(planned[name] == device for name, device in ran.items())
    embedded = run_file(polyfit(tmp_path / "embedded", "device"), params=params, echo=quiet,
                        output_dir=str(tmp_path / "embedded-out"))
    for name, value in embedded.values.items():
        np.testing.assert_array_equal(np.asarray(remote.values[name]), np.asarray(value), err_msg=name)


def test_a_second_task_of_a_local_host_spec_is_refused_with_the_way_to_a_process_per_task(tmp_path: Path) -> None:
    """The example as written (``processes: host``, ``scheduler: local``) names one process for every task of a
    machine: ``orchestrate worker`` for its second task cannot start that name again, and says what to set."""
    from test_remote import start_task, wait_started

    with own_scheduler(tmp_path) as (address, logs, procs):
        spec = polyfit(tmp_path, "host")
        procs.append(start_task(spec, "ps", 0, address, logs))
        assert len(wait_started(procs[-1], 1)) == 1
        second = start_task(spec, "worker", 0, address, logs, "--timeout", "2")
        procs.append(second)
        assert second.popen.wait(timeout=60) == 1
        said = [line for line in (second.stdout() + second.stderr()).splitlines() if line.startswith("error")]
        assert len(said) == 1, second.stdout() + second.stderr()
        assert "already has workers named /host:local" in said[0]
        assert "every such task is the one process /host:local of one machine" in said[0]
        assert "set the spec's cluster.scheduler to the scheduler's address" in said[0]


def test_dask_commands_print_one_worker_for_a_host_task(tmp_path: Path) -> None:
    import io

    from orchestrator.cli import run_cli

    spec = polyfit(tmp_path, "host")
    spec.write_text(spec.read_text().replace("cluster:\n", "cluster:\n  scheduler: tcp://10.0.0.1:8786\n", 1))
    out = io.StringIO()
    assert run_cli(["worker", str(spec), "--job", "worker", "--task", "0", "--scheduler", "tcp://10.0.0.1:8786",
                    "--dask-commands"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert f"--name {HOST} --nthreads 3 " in lines[0] and "CUDA_VISIBLE_DEVICES=0,1 " in lines[0], lines[0]
    for device in ("CPU:0", "GPU:0", "GPU:1"):
        assert f"device:{HOST}/device:{device}=1" in lines[0]
    assert f"task:{HOST}=3" in lines[0] and "GPU=2" in lines[0]


NAP_FNS = "import time\n\ndef nap(x, xp):\n    time.sleep(0.6)\n    return x + 1\n"
ANY_GPU = """\
version: 1
cluster: {{jobs: {{localhost: {{gpus: 2, processes: {layout}}}}}}}
graph:
  - {{name: x, op: ones, shape: [4], device: /cpu:0}}
  - {{name: a, op: call, fn: "nap_fns:nap", kernels: [cpu, gpu], inputs: [x], device: "/gpu:*"}}
  - {{name: b, op: call, fn: "nap_fns:nap", kernels: [cpu, gpu], inputs: [x], device: "/gpu:*"}}
outputs: {{a: "-", b: "-"}}
"""


@pytest.mark.parametrize("layout", ["device", "host"])
def test_ops_on_any_gpu_running_at_once_take_different_gpus(tmp_path: Path, layout: str) -> None:
    """Dask picks a GPU worker for a ``/gpu:*`` task; in one process the seat the fewest running tasks took."""
    (tmp_path / "nap_fns.py").write_text(NAP_FNS)
    (tmp_path / "any.yaml").write_text(ANY_GPU.format(layout=layout))
    result = run_file(tmp_path / "any.yaml", echo=quiet)
    ran = {entry["name"]: entry["worker"] for entry in result.report["ops"]}
    assert {ran["a"], ran["b"]} == {f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in (0, 1)}, ran
    np.testing.assert_array_equal(np.asarray(result.values["a"]), np.full(4, 2.0))


SLOW = """\
version: 1
cluster: {{jobs: {{localhost: {{gpus: 2, processes: {layout}}}}}}}
graph:
  - {{name: x, op: ones, shape: [4], device: /cpu:0}}
  - {{name: quick, op: call, fn: "slow_fns:nap", kernels: [cpu, gpu], inputs: [x], device: /gpu:0,
     params: {{seconds: 0.0}}}}
  - {{name: slow, op: call, fn: "slow_fns:nap", kernels: [cpu, gpu], inputs: [x], device: /gpu:1, timeout: 1,
     params: {{seconds: 30.0}}}}
outputs: {{quick: "-", slow: "-"}}
"""
SLOW_FNS = "import time\n\ndef nap(x, xp, seconds):\n    time.sleep(seconds)\n    return x\n"


@pytest.mark.parametrize("layout", ["device", "host"])
def test_an_op_timeout_fails_the_op_on_its_own_device_in_both_layouts(tmp_path: Path, layout: str) -> None:
    (tmp_path / "slow_fns.py").write_text(SLOW_FNS)
    (tmp_path / "slow.yaml").write_text(SLOW.format(layout=layout))
    began = time.monotonic()
    with pytest.raises(OrchestratorError) as caught:
        run_file(tmp_path / "slow.yaml", echo=quiet)
    said = str(caught.value)
    assert "op 'slow' on /job:localhost/replica:0/task:0/device:GPU:1 exceeded its timeout of 1 s" in said, said
    assert time.monotonic() - began < 25.0  # not the op's 30 s


def test_the_live_page_shows_every_device_of_a_host_process(tmp_path: Path) -> None:
    """Each device's heartbeat entry rides on its process's heartbeat (``seats``); the page lists each device."""
    from orchestrator.api import run_plan
    from orchestrator.execute.records import RunSettings
    from test_dashboard_page import page_from, state_of

    spec = polyfit(tmp_path, "host")
    plan = plan_file(spec, params={"steps": 400, "window": 100})
    said: list[str] = []
    seen: list[dict[str, object]] = []

    def progress(loop: str, done: int, steps: int) -> None:
        if seen or done < 200:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the heartbeats come every half second
            devices = state_of(page_from("\n".join(said)))["devices"]
            if set(devices) == {d.name for d in plan.spec.cluster.devices}:
                seen.append(devices)
                return
            time.sleep(0.1)
        raise AssertionError(f"the page never listed every device: {devices}")

    run_plan(plan, RunSettings(output_dir=str(tmp_path / "out"), progress=False, on_loop_progress=progress),
             said.append)
    assert seen
    gpu = f"{HOST}/device:GPU:1"
    assert seen[0][gpu]["memory"]["backend"] == "simulated" and seen[0][gpu]["memory"]["limit"] == 64 * 2 ** 20


# A gang loop whose window on `worker` waits every step for `ps`'s update. `ps` ends each step later than
# `worker` (its `nap`, after the update is sent), so `worker`'s window is done first, and its next window and
# the read-out of its metric (`pulled`) reach the process side by side. Dask orders a window's graph as
# worker's window, worker's metric, ps's window, ps's metric, and every window of one minute has one
# generation: so when the next window starts first, the metric, which waits for worker's seat, tops Dask's
# queue above ps's next window, which worker's window is waiting for. Dask's worker starts the top alone
# (`WorkerState._next_ready_task`), so without the host worker's own choice the loop stalls for good, within
# its first windows (seen every time on the 2-core machine).
STALL = """\
version: 1
name: stall
cluster:
  jobs:
    ps: {tasks: 1, processes: host}
    worker: {tasks: 1, processes: host}
graph:
  - {name: w0, op: variable, shape: [3], init: zeros, device: /job:ps/task:0/cpu:0}
  - name: train
    iterate:
      steps: 200
      window: 2
      state: {w: w0}
      body:
        - {name: g, op: call, fn: "stall_fns:pull", inputs: [w], output: {shape: [3]}, device: /job:worker/task:0/cpu:0}
        - {name: g_sum, op: sum, inputs: [g], device: /job:worker/task:0/cpu:0}
        - {name: w_next, op: add, inputs: [w, g], device: /job:ps/task:0/cpu:0}
        - {name: late, op: call, fn: "stall_fns:nap", inputs: [w_next], output: {shape: []},
           device: /job:ps/task:0/cpu:0}
      update: {w: w_next}
      metrics: {pulled: g_sum, late: late}
outputs:
  train.w: w.npy
"""
STALL_FNS = '''
import time

def pull(w, xp):
    return 1.0 - 0.5 * w  # w + pull(w) = 0.5 w + 1: w goes to 2

def nap(w, xp):
    with open("naps", "a") as steps:  # one byte a step: the test's mark of progress
        steps.write(".")
    time.sleep(0.02)  # after ps's update is sent: ps's window ends after worker's
    return xp.sum(w)
'''


def test_a_host_process_starts_a_free_device_s_window_behind_a_busy_device_s_metric(tmp_path: Path) -> None:
    """A task queued for a busy device never holds back another device's window (docs/clusters.md)."""
    (tmp_path / "stall_fns.py").write_text(STALL_FNS)
    (tmp_path / "stall.yaml").write_text(STALL)
    naps = tmp_path / "naps"
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen([str(BIN / "orchestrate"), "run", "stall.yaml", "--output-dir", "out"], cwd=tmp_path,
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    progress = Progress(quiet=40.0, cap=240.0)  # a step is 20 ms: 40 s without one is a stall, however busy
    while proc.poll() is None:
        progress.saw(naps.stat().st_size if naps.exists() else 0)
        verdict = progress.verdict()
        if verdict == CAPPED or (verdict and naps.exists()):  # (start-up is no step: it is not a stall)
            break
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the loop stalled after {naps.stat().st_size} of 200 steps")
    assert proc.returncode == 0, (tmp_path / "err.txt").read_text()
    assert naps.stat().st_size == 200
    np.testing.assert_allclose(np.load(tmp_path / "out" / "w.npy"), np.full(3, 2.0))
