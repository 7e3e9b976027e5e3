"""Worker processes are forked from a server that has imported what they need (execute/processes.py).

A fork inherits what a spawned worker set afresh: these check that each
worker still gets its device's environment, that NumPy's BLAS (loaded by the
server with one thread) runs with its device's threads, that SIGINT stays
blocked, that a worker its nanny restarts is forked again just so, and that
``orchestrate run`` leaves nothing behind holding its output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import plan_file
from orchestrator.execute import processes
from orchestrator.execute.cluster import EmbeddedCluster, dask_settings

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]
ROOT = Path(__file__).resolve().parent.parent
SPEC = """\
version: 1
cluster:
  jobs:
    localhost: {gpus: 2, cpu_threads: 2}
graph:
  - {name: a, op: ones, shape: [2], device: /cpu:0}
"""


def probe() -> dict[str, Any]:
    """What a worker process sees (run on each worker by ``client.run``; imports inside: it travels by value)."""
    import os

    import numpy  # noqa: F401  (its BLAS is what is probed)
    from threadpoolctl import threadpool_info

    def blas_threads() -> int | None:
        """The thread count each BLAS loaded reports (threadpoolctl asks the library's own getter)."""
        counts = {int(pool["num_threads"]) for pool in threadpool_info() if pool["user_api"] == "blas"}
        return counts.pop() if len(counts) == 1 else None

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().decode(errors="replace")
    with open("/proc/self/status") as f:
        blocked = int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)
    import dask

    return {"parent": parent, "pid": os.getpid(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "omp": os.environ.get("OMP_NUM_THREADS"), "blas": blas_threads(), "sigint_blocked": bool(blocked & 2),
            "safe_path": os.environ.get("PYTHONSAFEPATH"),
            "profiler": dask.config.get("distributed.worker.profile.enabled"),
            "stealing": dask.config.get("distributed.scheduler.work-stealing")}


def by_name(client: Any) -> dict[str, dict[str, Any]]:
    names = {address: str(w["name"]) for address, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    return {names[address].rpartition("/")[2]: seen for address, seen in client.run(probe).items()}


def check(seen: dict[str, dict[str, Any]]) -> None:
    assert set(seen) == {"device:CPU:0", "device:GPU:0", "device:GPU:1"}
    for name, worker in seen.items():
        assert "multiprocessing.forkserver" in worker["parent"], f"{name} was not forked from the server"
        assert worker["sigint_blocked"], f"{name} would die of a Ctrl-C to the process group"
        assert worker["safe_path"] == os.environ.get("PYTHONSAFEPATH", ""), "the server's safe path leaked"
        # Dask's profiler kept the task thread's frames (and a GPU's values) past their step: off on devices,
        # and only that key of the worker's configuration changed
        assert worker["profiler"] is False and worker["stealing"] is not None
    assert seen["device:CPU:0"]["omp"] == "2" and seen["device:GPU:0"]["omp"] == "1"
    assert (seen["device:GPU:0"]["cuda"], seen["device:GPU:1"]["cuda"], seen["device:CPU:0"]["cuda"]) == ("0,1", "1,0", "")
    if seen["device:CPU:0"]["blas"] is None:
        pytest.skip("NumPy has no BLAS threadpoolctl knows")
    # the server loaded the BLAS with one thread; each worker set its device's (once: 1 everywhere)
    assert seen["device:CPU:0"]["blas"] == 2
    assert seen["device:GPU:0"]["blas"] == seen["device:GPU:1"]["blas"] == 1


@pytest.mark.skipif(not processes.available(), reason="no forkserver here: workers are spawned")
def test_workers_are_forked_with_their_devices_environment_threads_and_sigint_blocked(tmp_path: Path) -> None:
    from distributed import Client

    (tmp_path / "spec.yaml").write_text(SPEC)
    cluster = EmbeddedCluster(plan_file(tmp_path / "spec.yaml").spec.cluster, None).start()
    try:
        with Client(cluster, set_as_default=False) as client:
            check(by_name(client))
    finally:
        cluster.close()


@pytest.mark.skipif(not processes.available(), reason="no forkserver here: workers are spawned")
def test_a_worker_its_nanny_restarts_is_forked_again_with_the_same_environment(tmp_path: Path) -> None:
    from distributed import Client

    (tmp_path / "spec.yaml").write_text(SPEC)
    cluster = EmbeddedCluster(plan_file(tmp_path / "spec.yaml").spec.cluster, None).start()
    try:
        # as during a run (scheduler_config): the nanny reads the start method when it restarts its worker
        with dask_settings(processes.start_method()), Client(cluster, set_as_default=False) as client:
            killed = by_name(client)["device:CPU:0"]["pid"]
            os.kill(killed, 9)
            deadline = time.monotonic() + 60
            while True:
                try:
                    seen = by_name(client)
                except Exception:  # the scheduler has not yet noticed the worker is gone
                    seen = {}
                if set(seen) == {"device:CPU:0", "device:GPU:0", "device:GPU:1"} and \
                        seen["device:CPU:0"]["pid"] != killed:
                    break
                assert time.monotonic() < deadline, "the nanny did not restart its worker"
                time.sleep(0.2)
            check(seen)
    finally:
        cluster.close()


def test_run_leaves_nothing_holding_its_output_and_its_workers_import_nothing_from_its_directory(
        tmp_path: Path) -> None:
    """The fork server holds the output too: it ends with the run, so a pipe reading the run ends with it.
    It runs ``python -c``, which would put the working directory first on its path: a ``msgpack`` there
    (imported by distributed) must not be what the workers run."""
    (tmp_path / "msgpack").mkdir()
    (tmp_path / "msgpack" / "__init__.py").write_text(
        f"open({str(tmp_path / 'shadowed')!r}, 'w').close()\nraise ImportError('not the real msgpack')\n")
    process = subprocess.Popen([str(Path(sys.executable).parent / "orchestrate"), "run",
                                str(ROOT / "examples" / "quickstart.yaml"), "--output-dir", str(tmp_path), "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               start_new_session=True)
    out, err = process.communicate(timeout=120)  # returns once every holder of the pipes has closed them
    assert process.returncode == 0, err
    assert "placement summary:" in out  # flushed before the process left
    assert err == ""
    assert not (tmp_path / "shadowed").exists(), "the fork server imported a module from the working directory"
    deadline = time.monotonic() + 5
    while _in_group(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _in_group(process.pid) == []


def _in_group(pgid: int) -> list[str]:
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                left.append(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return left


FOREIGN = """\
import multiprocessing, os, sys
from multiprocessing import forkserver
from orchestrator.api import plan_file
from orchestrator.execute.cluster import EmbeddedCluster

def started_by():
    with open("/proc/self/cmdline", "rb") as own, open(f"/proc/{os.getppid()}/cmdline", "rb") as parent:
        return ("spawned" if b"spawn_main" in own.read() else "?") + \
            (" by a fork server" if b"forkserver" in parent.read() else "")

if __name__ == "__main__":
    multiprocessing.get_context("forkserver")
    forkserver.ensure_running()  # another part of the program started one: not ours to fork workers from
    from distributed import Client
    cluster = EmbeddedCluster(plan_file(sys.argv[1]).spec.cluster, None).start()
    with Client(cluster, set_as_default=False) as client:
        print(sorted(set(client.run(started_by).values())))
    cluster.close()
"""


@pytest.mark.skipif(not processes.available(), reason="no forkserver here")
def test_a_fork_server_started_elsewhere_in_the_program_is_not_used(tmp_path: Path) -> None:
    """It may let SIGINT reach what it forks, and preloads what its starter chose: the workers are spawned."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "foreign.py").write_text(FOREIGN)
    done = subprocess.run([sys.executable, str(tmp_path / "foreign.py"), str(tmp_path / "spec.yaml")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['spawned']", done.stdout
