"""``run.on_device_lost: replan``: a device worker killed for good mid-run, the run re-plans and finishes.

Everything is real: a `dask scheduler` subprocess and one `orchestrate worker` per task, each in a
session of its own, so that SIGKILL to its process group takes the task's device workers and their
nannies at once (nothing restarts them: the device is gone for good). The run is made from this process
through the API; its loop progress callback kills the task at a window boundary past the first
checkpoint, so the kill lands mid-loop every time, busy machine or not. The waits watch progress (the
helpers of tests/test_remote.py), never a tight clock.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.errors import NoWorkerError
from test_remote import _command, start_scheduler, wait_started, Proc

pytestmark = [pytest.mark.cluster, pytest.mark.faults]
ROOT = Path(__file__).resolve().parent.parent
# a step on 1 tower against a step on 2: the weighted mean of the towers' gradients is the batch's mean up to
# rounding. Measured: the largest difference of the final weights was 4.4e-16 (test a prints it); 1e-9 leaves room.
TOLERANCE = 1e-9


def train_spec(tmp: Path, extra_run: str = "", pin: str = "") -> Path:
    """examples/train.yaml on 2 worker tasks of one simulated GPU each (the towers replicate over
    /job:worker/gpu:*), replan after 3 s, a checkpoint every 10 steps, 8 epochs (80 steps)."""
    text = (ROOT / "examples" / "train.yaml").read_text()
    text = text.replace("worker: {tasks: 1, gpus: 2, gpu_memory: {limit: 64MiB}}",
                        "worker: {tasks: 2, gpus: 1, gpu_memory: {limit: 64MiB}}")
    text = text.replace("devices: [/job:worker/gpu:0, /job:worker/gpu:1]", "devices: /job:worker/gpu:*")
    text = text.replace("checkpoint: {every: 50, keep: 2, path: results/checkpoints}",
                        "checkpoint: {every: 10, keep: 2, path: results/checkpoints}")
    text = text.replace("epochs: {type: integer, default: 30", "epochs: {type: integer, default: 8")
    text = text.replace("patience: {type: integer, default: 3", "patience: {type: integer, default: 100")
    if pin:  # an op of the loop pinned to the device that will be lost
        text = text.replace('          output: {shape: [5, 3], dtype: float64}\n          device: /job:ps/task:0/cpu:0',
                            f'          output: {{shape: [5, 3], dtype: float64}}\n          device: {pin}')
    text += f"\nrun: {{on_device_lost: replan, replan_after: 3{extra_run}}}\n"
    spec = tmp / "train.yaml"
    spec.write_text(text)
    shutil.copy(ROOT / "examples" / "train_fns.py", tmp / "train_fns.py")
    return spec


@dataclass
class Tasks:
    address: str
    logs: Path
    scheduler: Proc
    procs: dict[tuple[str, int], subprocess.Popen[bytes]] = field(default_factory=dict)

    def kill(self, job: str, task: int) -> None:
        """SIGKILL to the task's whole process group: its `orchestrate worker`, nannies and workers."""
        popen = self.procs[(job, task)]
        os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(30)


def start_group(spec: Path, job: str, task: int, address: str, logs: Path) -> tuple[subprocess.Popen[bytes], Proc]:
    args = [*_command("orchestrate"), "worker", str(spec), "--job", job, "--task", str(task),
            "--scheduler", address, "--host", "127.0.0.1", "--timeout", "30"]
    name = f"{job}{task}-{time.monotonic_ns()}"
    out, err = logs / f"{name}.out", logs / f"{name}.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        popen = subprocess.Popen(args, stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=str(ROOT))
    return popen, Proc(name, popen, out, err)


@pytest.fixture
def tasks(tmp_path: Path) -> Iterator[Tasks]:
    """The scheduler and an `orchestrate worker` per task of the train spec: ps 0, worker 0 and 1, evaluator 0."""
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    cluster = Tasks(address, logs, scheduler)
    try:
        yield cluster
    finally:
        for popen in cluster.procs.values():
            if popen.poll() is None:
                os.killpg(popen.pid, signal.SIGTERM)
        for popen in cluster.procs.values():
            try:
                popen.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(10)
        scheduler.stop()


def serve(cluster: Tasks, spec: Path) -> None:
    for job, task, devices in (("ps", 0, 1), ("worker", 0, 2), ("worker", 1, 2), ("evaluator", 0, 1)):
        popen, proc = start_group(spec, job, task, cluster.address, cluster.logs)
        cluster.procs[(job, task)] = popen
        wait_started(proc, devices)


def killer(cluster: Tasks, at: int) -> tuple[list[int], object]:
    """A loop progress callback that kills worker task 1 once the loop has done ``at`` steps."""
    seen: list[int] = []

    def progress(loop: str, done: int, steps: int) -> None:
        seen.append(done)
        if done >= at and ("worker", 1) in cluster.procs and cluster.procs[("worker", 1)].poll() is None:
            cluster.kill("worker", 1)
    return seen, progress


def rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_a_lost_gpu_task_is_replanned_and_the_loop_finishes_from_its_checkpoint(tasks: Tasks, tmp_path: Path) -> None:
    spec = train_spec(tmp_path)
    serve(tasks, spec)
    lines: list[str] = []
    whole = run_file(spec, scheduler=tasks.address, echo=lines.append, output_dir=str(tmp_path / "whole"))
    assert whole.run_report.losses == ()
    _, progress = killer(tasks, 25)
    said: list[str] = []
    killed = run_file(spec, scheduler=tasks.address, echo=said.append, on_loop_progress=progress,
                      output_dir=str(tmp_path / "killed"), report_path=str(tmp_path / "run.json"))
    text = "\n".join(said)
    assert "/job:worker/replica:0/task:1/device:GPU:0" in text and "re-planning on the devices left" in text
    assert "what changed from the full plan" in text and "fit/towers/1/grad" in text  # the plan diff, printed
    assert "resumed from step 20" in text or "resumed from step 30" in text
    # the re-plan's towers: one, on the GPU left
    assert not any(p.device_name.endswith("task:1/device:GPU:0") for p in killed.plan.placements)
    w, w_whole = np.load(tmp_path / "killed" / "results" / "train_w.npy"), np.load(tmp_path / "whole" / "results" / "train_w.npy")
    difference = float(np.max(np.abs(w - w_whole)))
    print(f"largest difference of the final weights, 1 tower after the loss against 2 throughout: {difference:.3g}")
    assert difference <= TOLERANCE
    losses = [float(r[0]) for r in rows(tmp_path / "killed" / "results" / "train_loss.csv")]
    whole_losses = [float(r[0]) for r in rows(tmp_path / "whole" / "results" / "train_loss.csv")]
    assert len(losses) == len(whole_losses) == 80 and np.allclose(losses, whole_losses, rtol=0, atol=TOLERANCE)
    replanned = [loss for loss in killed.run_report.losses if loss.replan is not None]
    assert replanned and replanned[0].outcome == "re-planned without it"
    info = replanned[0].replan
    assert info is not None and info["diff"]["summary"]["removed"] >= 2 and info["seconds"] > 0
    assert 0 <= info["steps_redone"]["fit"] < 20 and info["resumed_from_step"]["fit"] in (20, 30)


def test_an_op_pinned_to_the_lost_device_fails_the_run_in_one_line(tasks: Tasks, tmp_path: Path) -> None:
    spec = train_spec(tmp_path, pin="/job:worker/task:1/cpu:0")
    serve(tasks, spec)
    _, progress = killer(tasks, 15)
    said: list[str] = []
    started = time.monotonic()
    with pytest.raises(NoWorkerError) as failed:
        run_file(spec, scheduler=tasks.address, echo=said.append, on_loop_progress=progress,
                 output_dir=str(tmp_path / "out"))
    message = str(failed.value)
    assert len(message.splitlines()) == 1 and "op 'fit/step'" in message and "does not hold" in message, message
    assert "which this plan is without" in message
    assert time.monotonic() - started < 240  # (no hang: the bound is pytest's, not a speed goal)
    assert not (tmp_path / "out" / "results" / "train_w.npy").exists()
