"""`orchestrate run` end to end: real embedded Dask clusters on loopback, simulated GPUs.

Every spec in specs/valid runs and its values are compared with NumPy computed
directly; every op must have run on the device its plan named (the runner
verifies it from events the workers log, and we check the report again).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.cli import run_cli
from orchestrator.errors import DeviceOutOfMemory, NoWorkerError, OpFailedError, OpTimeoutError, RunError

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parent.parent
VALID = ROOT / "specs" / "valid"

A = np.array([[1, 2, 3], [4, 5, 6]], dtype=float)
B = np.array([[1, 2], [3, 4], [5, 6]], dtype=float)


def _uniform(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    # the catalog draws on the host with PCG64 seeded by [seed, step]
    return np.random.default_rng([seed, 0]).uniform(0.0, 1.0, size=shape)


EXPECTED: dict[str, Callable[[], dict[str, np.ndarray]]] = {
    "matmul.yaml": lambda: {"c": A @ B},
    "cpu_pinning.yaml": lambda: {"c": A @ B},
    "towers.yaml": lambda: {"towers.c": 4 * (A @ B)},
    "towers_gpu23.yaml": lambda: {"towers.c": 2 * (A @ B)},
    "round_robin.yaml": lambda: {"s": np.array(3.0), "p1": np.array(6.0), "p2": np.array(9.0)},
    "pin_across_jobs.yaml": lambda: {"total": np.array((_uniform(7, (64, 32)) @ np.ones((32, 8))).sum())},
    "variables_on_cpu.yaml": lambda: {"y": np.ones((3, 2)) @ np.array([[1.0, 2.0], [3.0, 4.0]]) + 0.5},
    "virtual_gpus.yaml": lambda: {"c": np.full((4, 4), 6.0)},
    "soft_placement.yaml": lambda: {"y": 1.0 + np.arange(4.0).reshape(2, 2)},
    "pipeline.yaml": lambda: {"mean": (((2.0 * (_uniform(1, (64, 16)) - 0.5)) @ np.ones((16, 4))) ** 2).sum(0) / 64},
}


def quiet(_: str) -> None:
    pass


def test_every_valid_spec_has_expected_values() -> None:
    names = sorted(p.name for p in VALID.glob("*.yaml"))
    missing = [n for n in names if n not in EXPECTED]
    assert not missing, f"add NumPy expectations for {missing}"


@pytest.mark.parametrize("granularity", ["partition", "op"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_valid_spec_values_and_placement(name: str, granularity: str, tmp_path: Path) -> None:
    result = run_file(VALID / name, output_dir=str(tmp_path), echo=quiet, report_path=str(tmp_path / "run.json"),
                      granularity=granularity)
    for ref, expected in EXPECTED[name]().items():
        np.testing.assert_allclose(np.asarray(result.values[ref]), expected, rtol=1e-12)
    report = json.loads((tmp_path / "run.json").read_text())
    plan = plan_file(VALID / name)
    planned = {p.op: p.device_name for p in plan.placements}
    ran = {entry["name"]: entry["worker"] for entry in report["ops"]}
    assert ran == planned
    assert all(entry["runs"] == 1 and entry["output_bytes"] is not None for entry in report["ops"])
    assert result.backend == "simulated" and report["granularity"] == granularity


def test_round_robin_runs_each_op_on_its_planned_device(tmp_path: Path) -> None:
    result = run_file(VALID / "round_robin.yaml", output_dir=str(tmp_path), echo=quiet)
    ran = {e["name"]: e["worker"] for e in result.report["ops"]}
    assert ran["v1"] == ran["v3"] == ran["v5"] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert ran["v2"] == ran["v4"] == "/job:ps/replica:0/task:1/device:CPU:0"
    assert ran["s"] == "/job:worker/replica:0/task:0/device:GPU:0"
    assert ran["p1"] == "/job:worker/replica:0/task:0/device:GPU:1"
    assert ran["p2"] == "/job:worker/replica:0/task:1/device:GPU:1"


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


USER_MODULE = '''
import os, time
import numpy as np

def grow(x, xp, n=0):
    return xp.ones((n,), dtype="float64")

def env(x, xp, name=""):
    return xp.asarray(float(os.environ.get(name, "-1") or "-1"))

def first_visible(x, xp):
    return xp.asarray(float(os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]))

def slow(x, xp, marker="", seconds=3.0):
    if marker and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(seconds)
    return x * 2

def sleepy(x, xp, seconds=5.0, marker=""):
    if marker:
        with open(marker, "w") as f:
            f.write(repr(time.time()))
    time.sleep(seconds)
    return x

def broken(x, xp):
    values = {"a": 1}
    return values["missing"]
'''


def test_gpu_oom_at_run_time_keeps_earlier_outputs(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    (tmp_path / "out").mkdir()
    before = np.arange(3.0)
    np.save(tmp_path / "out" / "x.npy", before)
    spec = _write(tmp_path / "oom.yaml", """
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1, gpu_memory: {limit: 1MiB}}
        graph:
          - {name: x, op: ones, shape: [4], device: /cpu:0}
          - {name: big, op: call, fn: "usermod:grow", kernels: [cpu, gpu], inputs: [x], params: {n: 500000},
             device: /gpu:0}
        outputs:
          x: out/x.npy
          big: out/big.npy
        """)
    with pytest.raises(DeviceOutOfMemory) as info:
        run_file(spec, echo=quiet)
    message = str(info.value)
    assert "op 'big'" in message and "/job:localhost/replica:0/task:0/device:GPU:0" in message
    assert "limit is 1.0 MiB" in message
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "x.npy"), before)
    assert not (tmp_path / "out" / "big.npy").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["x.npy"]


def test_worker_env_threads_and_visible_gpus(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    spec = _write(tmp_path / "env.yaml", """
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2, cpu_threads: 2}
        graph:
          - {name: x, op: ones, shape: [1], device: /cpu:0}
          - {name: threads, op: call, fn: "usermod:env", inputs: [x], params: {name: OMP_NUM_THREADS}, device: /cpu:0}
          - {name: gpu1, op: call, fn: "usermod:first_visible", kernels: [cpu, gpu], inputs: [x], device: /gpu:1}
        outputs: {threads: "-", gpu1: "-"}
        """)
    result = run_file(spec, echo=quiet)
    assert float(result.values["threads"]) == 2.0
    assert float(result.values["gpu1"]) == 1.0  # GPU:1's worker sees physical GPU 1 first


def test_missing_device_fails_fast(tmp_path: Path) -> None:
    """A remote cluster lacking a device: the run fails naming it, well within 10 s."""

    from orchestrator.execute.cluster import EmbeddedCluster

    plan = plan_file(VALID / "matmul.yaml")
    cpu_only = tuple(d for d in plan.spec.cluster.devices if not d.is_gpu)
    cluster = EmbeddedCluster(plan.spec.cluster, None, devices=cpu_only).start()
    try:
        started = time.monotonic()
        with pytest.raises(NoWorkerError) as info:
            run_file(VALID / "matmul.yaml", scheduler=cluster.scheduler_address, wait_for_workers=2.0,
                     echo=quiet, write_outputs=False)
        assert time.monotonic() - started < 10
        assert "/job:localhost/replica:0/task:0/device:GPU:0" in str(info.value)
    finally:
        cluster.close()


@pytest.mark.faults
@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_killed_worker_is_retried(tmp_path: Path, granularity: str) -> None:
    """With retries: 1, a worker killed in the middle of a task (at partition granularity, the
    middle of a partition of three ops) comes back under its name and the task runs again."""
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    marker = tmp_path / "pid.txt"
    spec = _write(tmp_path / "kill.yaml", f"""
        version: 1
        cluster:
          jobs:
            localhost: {{gpus: 1}}
        graph:
          - {{name: x, op: fill, shape: [3], value: 21.0, device: /cpu:0}}
          - {{name: w, op: mul, inputs: [x], scalar: 1.0, device: /gpu:0, retries: 1}}
          - {{name: y, op: call, fn: "usermod:slow", kernels: [cpu, gpu], inputs: [w], device: /gpu:0,
              retries: 1, params: {{marker: "{marker}", seconds: 30}}}}
          - {{name: z, op: add, inputs: [y], scalar: 0.0, device: /gpu:0, retries: 1}}
        outputs: {{z: "-"}}
        """)

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text():
                os.kill(int(marker.read_text()), signal.SIGKILL)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    result = run_file(spec, echo=quiet, granularity=granularity)
    thread.join(timeout=1)
    assert marker.exists()
    np.testing.assert_array_equal(result.values["z"], np.full(3, 42.0))
    assert result.report["ops"][2]["worker"] == "/job:localhost/replica:0/task:0/device:GPU:0"
    if granularity == "partition":  # w, y and z were one task: all three ran again on the restarted worker
        assert result.report["totals"]["tasks"] < 4


def test_timeout_and_user_error_name_the_op(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    spec = _write(tmp_path / "slow.yaml", """
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: nap, op: call, fn: "usermod:sleepy", inputs: [x], timeout: 0.5, params: {seconds: 5}}
        """)
    with pytest.raises(OpTimeoutError, match=r"op 'nap' on /job:localhost/replica:0/task:0/device:CPU:0 exceeded"):
        run_file(spec, echo=quiet)
    spec = _write(tmp_path / "broken.yaml", """
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: oops, op: call, fn: "usermod:broken", inputs: [x]}
        """)
    with pytest.raises(OpFailedError) as info:
        run_file(spec, echo=quiet)
    text = str(info.value)
    assert "op 'oops' failed on /job:localhost/replica:0/task:0/device:CPU:0: KeyError: 'missing'" in text
    assert "usermod.py:" in text and "return values[\"missing\"]" in text


@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_a_timeout_fails_the_run_soon_after_its_limit(tmp_path: Path, granularity: str) -> None:
    """The op sleeps 20 s with a 0.5 s timeout: the run fails soon after 0.5 s (it once waited for the sleep)."""
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    marker = tmp_path / "started"
    spec = _write(tmp_path / "slow.yaml", f"""
        version: 1
        graph:
          - {{name: x, op: ones, shape: [2]}}
          - {{name: nap, op: call, fn: "usermod:sleepy", inputs: [x], timeout: 0.5,
              params: {{seconds: 20, marker: "{marker}"}}}}
        """)
    with pytest.raises(OpTimeoutError):
        run_file(spec, echo=quiet, granularity=granularity)
    late = time.time() - float(marker.read_text()) - 0.5
    assert late < 1.5, f"failed {late:.2f} s after the limit"  # measured 0.2-0.4 s; slack for a loaded machine


def test_missing_module_is_a_clear_error(tmp_path: Path) -> None:
    spec = _write(tmp_path / "nomod.yaml", """
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: f, op: call, fn: "no_such_module_abc:fn", inputs: [x]}
        outputs: {f: out.npy}
        """)
    with pytest.raises(OpFailedError, match=r"op 'f' failed .*cannot import module 'no_such_module_abc'"):
        run_file(spec, echo=quiet)
    assert not (tmp_path / "out.npy").exists()


def test_cli_run_writes_outputs_report_and_performance_report(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "quickstart.yaml", tmp_path / "quickstart.yaml")
    out = io.StringIO()
    code = run_cli(["run", str(tmp_path / "quickstart.yaml"), "--report", str(tmp_path / "run.json"),
                    "--performance-report", str(tmp_path / "perf.html"), "--no-progress"], out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "Executing op MatMul (towers/1/c) in device /job:localhost/replica:0/task:0/device:GPU:1" in text
    assert "dashboard: http://127.0.0.1:" in text
    assert "(task stream grouped by op name: 6 ops, at most 64)" in text
    assert "placement summary:" in text and "placement verified against the plan" in text
    np.testing.assert_allclose(np.load(tmp_path / "results" / "quickstart.npy"), 0.5 * 2 * (A @ B))
    report = json.loads((tmp_path / "run.json").read_text())
    assert {"name", "op", "planned_device", "worker", "start", "duration", "output_bytes", "retries"} <= set(
        report["ops"][0])
    assert report["totals"]["ops"] == 6
    assert report["task_names"]["naming"] == "op" and report["phases_seconds"]["compute"] > 0
    # start-up apart from compute: the embedded cluster's start is neither hidden nor left out
    startup = report["startup_seconds"]
    assert startup == pytest.approx(report["phases_seconds"]["connect"] + report["phases_seconds"]["prepare workers"])
    # (a tenth of a second or so: worker processes are forked from a server that has imported what they need)
    assert startup > 0.01 and report["elapsed_seconds"] < startup + report["phases_seconds"]["compute"] + 5
    summary = next(line for line in text.splitlines() if "Dask task" in line)
    assert f"in {report['elapsed_seconds']:.2f} s after {startup:.2f} s of start-up (cluster and device workers);" \
        in summary
    assert any(d["peak_bytes_seen"] for d in report["devices"] if "GPU" in d["device"])
    assert "<html" in (tmp_path / "perf.html").read_text()[:2000].lower()


def test_cli_run_invalid_spec_exits_1_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _write(tmp_path / "bad.yaml", """
        version: 1
        graph:
          - {name: c, op: matmul, inputs: [a, b]}
        """)
    assert run_cli(["run", str(spec)], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert "input 'a' of op 'c' is not defined" in err and "Traceback" not in err


def test_dashboard_serves_status_page() -> None:
    from distributed import Client

    from orchestrator.execute.cluster import EmbeddedCluster

    plan = plan_file(VALID / "matmul.yaml")
    cluster = EmbeddedCluster(plan.spec.cluster, ":0").start()
    try:
        with Client(cluster, set_as_default=False) as client:
            link = client.dashboard_link
            assert link.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(link, timeout=30) as response:
                assert response.status == 200
                assert b"Dask" in response.read()
    finally:
        cluster.close()


def test_run_error_translation_is_a_run_error() -> None:
    assert issubclass(NoWorkerError, RunError) and issubclass(DeviceOutOfMemory, RunError)
