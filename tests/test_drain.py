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

import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import test_remote
from test_remote import Proc, _command, start_scheduler, start_task, stop_all, wait_started

pytestmark = [pytest.mark.cluster, pytest.mark.faults]
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
              - {{name: g, op: call, fn: "drain_fns:grad", inputs: [w], params: {{marker: "{marker}", at: {at}}}}}
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


def write_spec(tmp_path: Path, run: str = "run: {on_device_lost: wait}\n", steps: int = STEPS) -> tuple[Path, Path]:
    (tmp_path / "drain_fns.py").write_text(FNS)
    marker = tmp_path / "marked"
    spec = tmp_path / "drain.yaml"
    spec.write_text(SPEC.format(steps=steps, window=WINDOW, marker=marker, at=AT, run=run))
    return spec, marker


def wait_for(predicate: object, what: str, procs: list[Proc], cap: float = CAP) -> None:
    """Until ``predicate()``, while every process in ``procs`` lives."""
    deadline = time.monotonic() + cap
    while not predicate():  # type: ignore[operator]
        for proc in procs:
            assert proc.popen.poll() is None, f"{proc.name} exited before {what}:\n{proc.stdout()}\n{proc.stderr()}"
        assert time.monotonic() < deadline, f"no {what} after {cap:g} s"
        time.sleep(0.1)


def start_run(spec: Path, address: str, tmp_path: Path, *extra: str) -> Proc:
    args = [*_command("orchestrate"), "run", str(spec), "--scheduler", address, "--no-progress",
            "--report", str(tmp_path / "report.json"), "--output-dir", str(tmp_path / "out"), *extra]
    return Proc.start("run", args, tmp_path / "logs")


@pytest.fixture
def waiting_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler waits for a drained device's new worker as long as a busy machine takes to start one
    (docs/clusters.md: longer than a worker takes to come back)."""
    monkeypatch.setitem(test_remote.SCHEDULER_ENV, "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT", "180s")


def test_sigterm_drains_a_worker_and_a_new_one_goes_on_with_nothing_redone(tmp_path: Path,
                                                                            waiting_scheduler: None) -> None:
    spec, marker = write_spec(tmp_path)
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        tasks = [start_task(spec, "worker", task, address, logs) for task in (0, 1)]
        procs += tasks
        for proc in tasks:
            wait_started(proc, 1)
        run = start_run(spec, address, tmp_path)
        procs.append(run)
        wait_for(marker.exists, "task 1 at its 45th step", procs)
        tasks[1].popen.send_signal(signal.SIGTERM)
        assert tasks[1].popen.wait(CAP) == 0, tasks[1].stderr()
        said = tasks[1].stdout()
        assert "draining /job:worker/replica:0/task:1: the run finishes the window in flight" in said, said
        assert "drained /job:worker/replica:0/task:1: the run let them go; retired through the scheduler" in said, said
        again = start_task(spec, "worker", 1, address, logs)
        procs.append(again)
        assert run.popen.wait(CAP) == 0, run.stdout() + run.stderr()
    finally:
        stop_all(procs)
    out = run.stdout()
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
    if loss["steps"] is not None:  # what it had queued or running: only the windows after the one read
        assert loss["steps"][0] >= step, (loss, step)
        assert loss["steps"][1] < step + 2 * WINDOW, (loss, step)
