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
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import jsonschema
import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.errors import NoWorkerError
from orchestrator.report.text import placement_summary
from test_remote import _command, start_scheduler, wait_started, Proc

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.recovery]
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
    print(f"largest difference of a step's loss: {float(np.max(np.abs(np.subtract(losses, whole_losses)))):.3g}")
    replanned = [loss for loss in killed.run_report.losses if loss.replan is not None]
    assert replanned and replanned[0].outcome == "re-planned without it"
    info = replanned[0].replan
    assert info is not None and info["diff"]["summary"]["removed"] >= 2 and info["seconds"] > 0
    assert 0 <= info["steps_redone"]["fit"] < 20 and info["resumed_from_step"]["fit"] in (20, 30)
    written = json.loads((tmp_path / "run.json").read_text())
    schema = json.loads((ROOT / "schemas" / "run-report.schema.json").read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(written)) == []
    summary = placement_summary(written)  # what `orchestrate run` prints at its end
    assert "re-planned without it (0 op(s) moved, 2 removed; loop 'fit' from step" in summary, summary


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


SLOW_FIT = '''
import os, time
from search_fns import fit as _fit, mse

def fit(x, y, lam, degree, xp, marker=""):
    if marker:  # says which process runs a copy (the test kills the task whose process it is), then takes a while
        open(os.path.join(marker, f"started-{os.getpid()}"), "w").close()
        time.sleep(0.5)
    return _fit(x, y, lam, degree, xp)
'''


def search_spec(tmp: Path, marker: Path) -> Path:
    """examples/search.yaml's sweep on 2 worker tasks of one simulated GPU each, its data on a host task."""
    text = (ROOT / "examples" / "search.yaml").read_text()
    text = text.replace("    localhost: {gpus: 2, gpu_threads: 4, gpu_memory: {limit: 2MiB}}",
                        "    host: {tasks: 1}\n    worker: {tasks: 2, gpus: 1, gpu_threads: 4, gpu_memory: {limit: 2MiB}}")
    text = text.replace("  - scope: /cpu:0", "  - scope: /job:host/task:0/cpu:0")
    text = text.replace("spread: /gpu:*", "spread: /job:worker/gpu:*")
    text = text.replace('fn: "search_fns:fit"', f'fn: "slow_search_fns:fit", params: {{marker: "{marker}"}}')
    text = text.replace('fn: "search_fns:mse"', 'fn: "slow_search_fns:mse"')
    text += "\nrun: {on_device_lost: replan, replan_after: 3}\n"
    spec = tmp / "search.yaml"
    spec.write_text(text)
    shutil.copy(ROOT / "examples" / "search_fns.py", tmp / "search_fns.py")
    (tmp / "slow_search_fns.py").write_text(SLOW_FIT)
    marker.mkdir(exist_ok=True)
    return spec


def test_a_searchs_copies_on_the_lost_gpu_move_to_the_other_and_the_results_are_equal(tasks: Tasks,
                                                                                      tmp_path: Path) -> None:
    marker = tmp_path / "markers"
    spec = search_spec(tmp_path, marker)
    for job, task, devices in (("host", 0, 1), ("worker", 0, 2), ("worker", 1, 2)):
        popen, proc = start_group(spec, job, task, tasks.address, tasks.logs)
        tasks.procs[(job, task)] = popen
        wait_started(proc, devices)
    whole = run_file(spec, scheduler=tasks.address, echo=lambda _: None, output_dir=str(tmp_path / "whole"))
    for old in marker.iterdir():
        old.unlink()
    group = tasks.procs[("worker", 1)].pid
    killed_at: list[float] = []

    def kill_when_a_copy_runs_there() -> None:  # (a copy of the sweep started in a process of worker task 1)
        while not killed_at:
            for seen in list(marker.iterdir()):
                try:
                    there = os.getpgid(int(seen.name.removeprefix("started-"))) == group
                except ProcessLookupError:
                    continue
                if there:
                    tasks.kill("worker", 1)
                    killed_at.append(time.monotonic())
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_when_a_copy_runs_there, daemon=True)
    watcher.start()
    said: list[str] = []
    killed = run_file(spec, scheduler=tasks.address, echo=said.append, output_dir=str(tmp_path / "killed"))
    assert killed_at, "no copy ran on worker task 1"
    text = "\n".join(said)
    assert "re-planning on the devices left" in text and "what changed from the full plan" in text
    gpu1 = "/job:worker/replica:0/task:1/device:GPU:0"
    moved = [slot for packing in killed.plan.packing for slot in packing.copies]
    assert moved and all(slot.device != gpu1 for slot in moved)  # every copy on the GPU left, within its caps
    assert [loss.outcome for loss in killed.run_report.losses if loss.device == gpu1] == ["re-planned without it"]
    for name in ("search_losses.npy", "search_weights.npy"):
        assert np.array_equal(np.load(tmp_path / "killed" / "results" / name),
                              np.load(tmp_path / "whole" / "results" / name)), name
    assert killed.values["poly.best"] == whole.values["poly.best"]


def test_a_device_that_comes_back_is_used_again_at_the_next_checkpoint(tasks: Tasks, tmp_path: Path) -> None:
    """replan both ways: worker task 1 killed at step 25, started again once the re-planned run has done 50 steps
    (the loop waits in its progress callback until the task serves); the run takes it up at its next checkpoint."""
    spec = train_spec(tmp_path)
    serve(tasks, spec)
    params = {"epochs": 12}  # 120 steps: the return is seen at the checkpoint of step 50 (the callback waits there)
    whole = run_file(spec, scheduler=tasks.address, echo=lambda _: None, params=params,
                     output_dir=str(tmp_path / "whole"))
    events: list[str] = []

    def progress(loop: str, done: int, steps: int) -> None:
        if not events and done >= 25:
            tasks.kill("worker", 1)
            events.append("killed")
        elif events == ["killed"] and done >= 50:
            popen, proc = start_group(spec, "worker", 1, tasks.address, tasks.logs)
            tasks.procs[("worker", 1)] = popen
            wait_started(proc, 2)
            events.append("started again")

    said: list[str] = []
    done = run_file(spec, scheduler=tasks.address, echo=said.append, on_loop_progress=progress, params=params,
                    output_dir=str(tmp_path / "back"))
    text = "\n".join(said)
    assert events == ["killed", "started again"]
    assert "re-planning on the devices left" in text and "(their workers joined again)" in text, text
    assert "the run goes on on the full plan" in text
    # the last plan is the full one: the towers on both GPUs again
    assert any(p.device_name.endswith("task:1/device:GPU:0") for p in done.plan.placements)
    info = [loss.replan for loss in done.run_report.losses if loss.replan is not None]
    assert info and all(i["back"]["step"] >= 50 and i["back"]["step"] % 10 == 0 for i in info), text
    assert all(i["resumed_from_step"]["fit"] in (20, 30) and 0 <= i["steps_redone"]["fit"] < 20 for i in info), info
    w, w_whole = (np.load(tmp_path / out / "results" / "train_w.npy") for out in ("back", "whole"))
    assert float(np.max(np.abs(w - w_whole))) <= TOLERANCE
    losses = [float(r[0]) for r in rows(tmp_path / "back" / "results" / "train_loss.csv")]
    whole_losses = [float(r[0]) for r in rows(tmp_path / "whole" / "results" / "train_loss.csv")]
    assert len(losses) == len(whole_losses) == 120 and np.allclose(losses, whole_losses, rtol=0, atol=TOLERANCE)
