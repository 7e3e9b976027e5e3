"""Drain on notice: SIGTERM to an `orchestrate worker` of a running loop finishes the window, checkpoints, leaves.

Everything is real: a `dask scheduler`, one `orchestrate worker` per task of
a 2-task job on loopback, and `orchestrate run --scheduler` in a process of
its own. The loop's two towers run one on each task; the test SIGTERMs task
1's launcher mid-loop (its op writes a marker at a step), and with
``run.on_device_lost: wait`` starts a new one for the task: the run
finishes, its values equal the closed form of an uninterrupted run, and
its report shows the drain (the window finished, the checkpoint written
there) and that nothing the drained worker had finished was computed again.
Waits watch the processes, not tight clocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import test_remote
from test_remote import Proc, _command, start_scheduler, start_task, stop_all, wait_started

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import netns  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.recovery]
STEPS, WINDOW, AT = 160, 20, 45  # task 1 marks its 45th step: the notice comes mid-loop, mid-window
CAP = 240.0  # a run still going this long hangs

FNS = '''
import os, time

calls = {"n": 0}

def grad(w, xp, marker="", at=0, pause=0.02):
    calls["n"] += 1
    if marker and calls["n"] == at:
        open(marker, "w").close()
    time.sleep(pause)
    return w * 0.5 + 1.0
'''

SPEC = """\
version: 1
cluster:
  jobs:
    worker: {{tasks: 2}}
graph:
  - {{name: w0, op: variable, shape: [3], init: zeros, device: /job:worker/task:0/cpu:0}}
  - name: train
    iterate:
      steps: {steps}
      window: {window}
      state: {{w: w0}}
      checkpoint: {{every: {steps}}}
      body:
        - name: towers
          replicate:
            devices: [/job:worker/task:0/cpu:0, /job:worker/task:1/cpu:0]
            body:
              - {{name: g, op: call, fn: "drain_fns:grad", inputs: [w], params: {{marker: "{marker}", at: {at}, pause: {pause}}}}}
            combine: {{g: mean}}
            combine_device: /job:worker/task:0/cpu:0
        - {{name: upd, op: mul, inputs: [towers.g], scalar: 0.5, device: /job:worker/task:0/cpu:0}}
      update: {{w: upd}}
{run}outputs: {{train.w: w.npy}}
"""
DRAINED = "/job:worker/replica:0/task:1/device:CPU:0"


def expected(steps: int) -> np.ndarray:
    w = np.zeros(3)
    for _ in range(steps):  # each step: both towers give w/2 + 1, their mean halved
        w = (w * 0.5 + 1.0) * 0.5
    return w


def write_spec(tmp_path: Path, run: str = "run: {on_device_lost: wait}\n", at: int = AT,
               pause: float = 0.02) -> tuple[Path, Path]:
    """The spec (its step ``pause`` s long on each tower), and the marker task 1's tower writes at step ``at``."""
    (tmp_path / "drain_fns.py").write_text(FNS)
    marker = tmp_path / "marked"
    spec = tmp_path / "drain.yaml"
    spec.write_text(SPEC.format(steps=STEPS, window=WINDOW, marker=marker, at=at, pause=pause, run=run))
    return spec, marker


def wait_for(predicate: object, what: str, procs: list[Proc], cap: float = CAP) -> None:
    """Until ``predicate()``, while every process in ``procs`` lives."""
    deadline = time.monotonic() + cap
    while not predicate():  # type: ignore[operator]
        for proc in procs:
            assert proc.popen.poll() is None, f"{proc.name} exited before {what}:\n{proc.stdout()}\n{proc.stderr()}"
        assert time.monotonic() < deadline, f"no {what} after {cap:g} s"
        time.sleep(0.1)


def run_args(spec: Path, address: str, tmp_path: Path, *extra: str) -> list[str]:
    return ["run", str(spec), "--scheduler", address, "--no-progress", "--report", str(tmp_path / "report.json"),
            "--output-dir", str(tmp_path / "out"), *extra]


def start_run(spec: Path, address: str, tmp_path: Path, *extra: str, name: str = "run") -> Proc:
    return Proc.start(name, [*_command("orchestrate"), *run_args(spec, address, tmp_path, *extra)], tmp_path / "logs")


def check_drained_and_equal(tmp_path: Path, out: str) -> None:
    """The values of an uninterrupted run; the report's drain (the window finished, its checkpoint), and its loss
    (nothing the drained worker finished was computed again)."""
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "w.npy"), expected(STEPS))
    report = json.loads((tmp_path / "report.json").read_text())
    [drain] = report["drains"]
    assert drain["device"] == DRAINED and drain["loops"] == ["train"], drain
    step = drain["step"]
    assert step % WINDOW == 0 and AT - WINDOW <= step <= STEPS, drain  # the window in flight at the notice
    assert drain["checkpoint"].endswith(f"-{step:010d}.npz") and Path(drain["checkpoint"]).exists(), drain
    assert f"{DRAINED} may leave after step {step} of loop 'train', checkpoint {drain['checkpoint']}" in out, out
    [loss] = report["losses"]
    assert loss["device"] == DRAINED and loss["outcome"] == "restarted; redone", loss
    assert loss["values"] == 0, loss  # nothing it had finished was computed again: its values moved away
    assert drain["redone"] == loss["steps"], (drain, loss)
    if loss["steps"] is not None:  # what it had queued or running: only the windows after the one read
        assert loss["steps"][0] >= step, (loss, step)
        assert loss["steps"][1] < step + 2 * WINDOW, (loss, step)


@pytest.fixture
def waiting_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler waits for a drained device's new worker as long as a busy machine takes to start one
    (docs/clusters.md: longer than a worker takes to come back)."""
    monkeypatch.setitem(test_remote.SCHEDULER_ENV, "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT", "180s")


@dataclass
class Notice:
    """A run of the two-task spec, task 1's launcher sent SIGTERM once its marker says the loop is under way."""

    procs: list[Proc]  # everything started: stopped at the end, whatever happened
    tasks: list[Proc]
    run: Proc
    address: str
    logs: Path


@contextlib.contextmanager
def noticed(tmp_path: Path, spec: Path, marker: Path, *task1_args: str) -> Iterator[Notice]:
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        tasks = [start_task(spec, "worker", 0, address, logs), start_task(spec, "worker", 1, address, logs,
                                                                         *task1_args)]
        procs += tasks
        for proc in tasks:
            wait_started(proc, 1)
        run = start_run(spec, address, tmp_path)
        procs.append(run)
        wait_for(marker.exists, "task 1 under way", procs)
        tasks[1].popen.send_signal(signal.SIGTERM)
        yield Notice(procs, tasks, run, address, logs)
    finally:
        stop_all(procs)


def test_sigterm_drains_a_worker_and_a_new_one_goes_on_with_nothing_redone(tmp_path: Path,
                                                                            waiting_scheduler: None) -> None:
    spec, marker = write_spec(tmp_path)
    with noticed(tmp_path, spec, marker) as n:
        assert n.tasks[1].popen.wait(CAP) == 0, n.tasks[1].stderr()
        said = n.tasks[1].stdout()
        assert "draining /job:worker/replica:0/task:1: the run finishes the window in flight" in said, said
        assert "drained /job:worker/replica:0/task:1: the run let them go; retired through the scheduler" in said, said
        n.procs.append(start_task(spec, "worker", 1, n.address, n.logs))
        assert n.run.popen.wait(CAP) == 0, n.run.stdout() + n.run.stderr()
    check_drained_and_equal(tmp_path, n.run.stdout())


def one_line_error(run: Proc) -> str:
    assert run.popen.wait(CAP) == 1, run.stdout() + run.stderr()
    err = run.stderr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {DRAINED} was drained on notice"), err
    assert "Traceback" not in err + run.stdout()
    return lines[0]


def test_with_on_device_lost_fail_a_drain_ends_the_run_naming_the_checkpoint_to_resume_from(
        tmp_path: Path, waiting_scheduler: None) -> None:
    """The window in flight finishes, its checkpoint is written, the run ends in one line; ``--resume`` from it
    with a new worker of the task gives the values of an uninterrupted run."""
    spec, marker = write_spec(tmp_path, run="")
    with noticed(tmp_path, spec, marker) as n:
        line = one_line_error(n.run)
        assert n.tasks[1].popen.wait(CAP) == 0, n.tasks[1].stderr()
        step = int(line.split("its checkpoint at step ")[1].split()[0])
        checkpoint = line.split(" is ")[1].split(": run again with --resume")[0]
        assert step % WINDOW == 0 and Path(checkpoint).exists(), line
        n.procs.append(start_task(spec, "worker", 1, n.address, n.logs))
        marker.unlink()
        resumed = start_run(spec, n.address, tmp_path, "--resume", name="resumed")
        n.procs.append(resumed)
        assert resumed.popen.wait(CAP) == 0, resumed.stdout() + resumed.stderr()
    assert f"loop 'train' resumes from its checkpoint at step {step}" in resumed.stdout()
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "w.npy"), expected(STEPS))


def test_a_drain_past_its_deadline_leaves_anyway(tmp_path: Path) -> None:
    """Each step takes 1 s, a window 20 s: the run cannot read the window in flight within the worker's 2 s
    --drain-timeout. The worker leaves at its deadline (no hang), the run ends in one line saying so."""
    spec, marker = write_spec(tmp_path, run="", at=2, pause=1.0)
    with noticed(tmp_path, spec, marker, "--drain-timeout", "2") as n:
        assert n.tasks[1].popen.wait(CAP) == 0, n.tasks[1].stderr()
        said = n.tasks[1].stdout()
        assert "drained /job:worker/replica:0/task:1: the run did not let 1 device(s) go within 2 s" in said, said
        line = one_line_error(n.run)
    assert "left at its deadline, before the window in flight there was finished and checkpointed" in line, line
    assert "may leave" not in n.run.stdout()


# --------------------------------------------------------------------------- across two hosts (B7's namespaces)

WHY_NOT = netns.unavailable()


@pytest.fixture(scope="module")
def hosts() -> Iterator[netns.Hosts]:
    with netns.Hosts(tag="b7d") as made:  # (not the benchmark's nor test_hosts_netns's: all may run at once)
        yield made


@pytest.mark.skipif(WHY_NOT is not None, reason=f"two network namespaces: {WHY_NOT}")
def test_a_drain_across_two_hosts(hosts: netns.Hosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Task 0 (and the scheduler, and the run) on host A, task 1 on host B across the veth: SIGTERM on B, a new
    worker of task 1 on B; the run finishes, equal, nothing finished there computed again."""
    monkeypatch.setitem(netns.SCHEDULER_ENV, "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT", "180s")
    spec, marker = write_spec(tmp_path)
    logs = str(tmp_path / "logs")
    with netns.Cluster(hosts, str(spec), {("worker", 0): 0, ("worker", 1): 1}, logs) as cluster:
        client = subprocess.Popen([*hosts.prefix(0), *netns.command("orchestrate"),
                                   *run_args(spec, cluster.address, tmp_path)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=netns.child_env(), start_new_session=True)
        try:
            deadline = time.monotonic() + CAP
            while not marker.exists():
                assert client.poll() is None, client.communicate()[0]
                assert time.monotonic() < deadline, "task 1 never reached its 45th step"
                time.sleep(0.1)
            drained = cluster.procs[2]  # (the scheduler, task 0, task 1)
            drained.popen.send_signal(signal.SIGTERM)
            assert drained.popen.wait(CAP) == 0, drained.text()
            assert "the run let them go; retired through the scheduler" in drained.text(), drained.text()
            again = netns.Proc.start(hosts, 1, "worker1-again", [
                *netns.command("orchestrate"), "worker", str(spec), "--job", "worker", "--task", "1",
                "--scheduler", cluster.address, "--host", netns.ADDRESSES[1], "--timeout", "60"], logs)
            cluster.procs.append(again)
            out, _ = client.communicate(timeout=CAP)
        finally:
            if client.poll() is None:
                os.killpg(client.pid, signal.SIGKILL)
                client.wait(10)
    assert client.returncode == 0, out
    assert "serving 1 device worker" in again.text() and netns.ADDRESSES[1] in again.text(), again.text()
    check_drained_and_equal(tmp_path, out)
