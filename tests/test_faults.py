"""Faults end cleanly: a lost device worker in a loop, a lost scheduler, Ctrl-C to the process group, strangers
at a run's link sockets.

Everything is real: embedded clusters and `dask scheduler` / `orchestrate
worker` processes on loopback, workers killed with SIGKILL by the op they
run, SIGINT sent to a whole process group as a terminal sends it, local
connections to the workers' direct-link listeners.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_links import closed_by_peer, connect, head, raise_descriptor_limit
from test_remote import start_scheduler, start_task, stop_all, wait_started
from spec_helpers import polyfit_in
from waiting import gone

from orchestrator import run_file
from orchestrator.errors import RunError
from orchestrator.runtime.frames import HELLO
from orchestrator.runtime.links import Address

pytestmark = [pytest.mark.cluster, pytest.mark.faults]
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FAIL_WITHIN = 10.0  # seconds from a fault to the run's one-line error

# ``dies`` kills its own worker process the ``at``-th time it runs (counted in a file, so a
# restarted worker does not die again); ``nap`` sleeps after saying so.
KILLER = '''
import os, signal, time

def dies(x, xp, counter="", at=30):
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    with open(counter, "w") as f:
        f.write(str(n + 1))
    if n + 1 == at:
        with open(counter + ".killed", "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    return x + 1.0

def nap(x, xp, marker="", seconds=60.0):
    with open(marker, "w") as f:
        f.write(repr(time.time()))
    time.sleep(seconds)
    return x

def hold(x, xp, counter="", at=30, book="", go=""):
    # the ``at``-th time: write where this run's links listen, then wait until the test says go
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    with open(counter, "w") as f:
        f.write(str(n + 1))
    if n + 1 == at:
        import json
        from distributed import get_worker
        links = get_worker().orchestrator_runtime.links
        listening = {**links.book, "self": links.address}
        with open(book + ".tmp", "w") as f:
            json.dump({d: [a.host, a.port, a.local] for d, a in listening.items()}, f)
        os.replace(book + ".tmp", book)
        deadline = time.monotonic() + 120
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.05)
    return x + 1.0
'''

LOOP = """\
version: 1
cluster:
  jobs:
    localhost: {{gpus: 2}}
graph:
  - {{name: w0, op: variable, shape: [3], init: zeros, device: /cpu:0}}
  - name: train
    iterate:
      steps: 200
      window: 50
      state: {{w: w0}}
      body:
        - name: towers
          replicate:
            devices: [/gpu:0, /gpu:1]
            body:
              - {{name: g, op: add, inputs: [w], scalar: 1.0}}
            combine: {{g: mean}}
            combine_device: /cpu:0
        - {{name: k, op: call, fn: "killer:dies", inputs: [towers.g], device: /gpu:1, kernels: [cpu, gpu],
            params: {{counter: "{counter}", at: {at}}}{retries}}}
        - {{name: upd, op: mul, inputs: [k], scalar: 0.5, device: /cpu:0}}
      update: {{w: upd}}
outputs: {{train.w: "-"}}
"""


def quiet(_: str) -> None:
    pass


def loop_spec(tmp_path: Path, at: int, retries: int = 0) -> Path:
    (tmp_path / "killer.py").write_text(KILLER)
    spec = tmp_path / "loop.yaml"
    spec.write_text(LOOP.format(counter=tmp_path / "count", at=at, retries=f", retries: {retries}" if retries else ""))
    return spec


def expected_w() -> np.ndarray:
    w = np.zeros(3)
    for _ in range(200):
        w = ((w + 1.0) + 1.0) * 0.5
    return w


def worker_processes() -> set[int]:
    """Dask worker processes started by this process: spawned children, or children of its fork server."""
    table: dict[int, tuple[int, bytes]] = {}  # pid -> (parent pid, command line)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            table[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), (entry / "cmdline").read_bytes())
        except OSError:
            continue
    servers = {pid for pid, (parent, cmdline) in table.items()
               if parent == os.getpid() and b"multiprocessing.forkserver" in cmdline}
    return {pid for pid, (parent, cmdline) in table.items()
            if parent in servers or (parent == os.getpid() and b"spawn_main" in cmdline)}


@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_a_worker_lost_mid_loop_fails_the_run_within_seconds_naming_device_and_op(
        tmp_path: Path, granularity: str) -> None:
    """Once: a gang window waited 600 s for the dead device's values (110 s and more without a word)."""
    spec = loop_spec(tmp_path, at=30)
    with pytest.raises(RunError) as info:
        run_file(spec, echo=quiet, granularity=granularity, write_outputs=False)
    failed = time.time()
    killed = float((tmp_path / "count.killed").read_text())
    assert failed - killed < FAIL_WITHIN, f"the run failed {failed - killed:.1f} s after the worker died"
    message = str(info.value)
    assert "/job:localhost/replica:0/task:0/device:GPU:1" in message
    assert "train/k" in message and "its worker died" in message
    assert "\n" not in message
    assert gone(lambda: sorted(worker_processes())) == [], "worker processes were left behind"


def test_with_retries_a_worker_lost_mid_loop_is_survived_with_the_same_values(tmp_path: Path) -> None:
    spec = loop_spec(tmp_path, at=30, retries=1)
    result = run_file(spec, echo=quiet, write_outputs=False)
    assert (tmp_path / "count.killed").exists()
    np.testing.assert_allclose(result.values["train.w"], expected_w(), rtol=0, atol=0)


def test_a_lost_scheduler_is_said_at_once(tmp_path: Path) -> None:
    """Once: 30 s of silence (Dask's reconnect window), then 'op failed: FutureCancelledError'."""
    (tmp_path / "killer.py").write_text(KILLER)
    marker = tmp_path / "napping"
    spec = tmp_path / "nap.yaml"
    spec.write_text(textwrap.dedent(f"""\
        version: 1
        graph:
          - {{name: x, op: ones, shape: [2]}}
          - {{name: y, op: call, fn: "killer:nap", inputs: [x], params: {{marker: "{marker}"}}}}
        outputs: {{y: "-"}}
        """))
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        procs.append(start_task(spec, "localhost", 0, address, logs))
        wait_started(procs[-1], 1)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                run_file(spec, echo=quiet, scheduler=address, write_outputs=False)
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 240  # the run lives: it is still starting (a cap under pytest's 300 s)
        while not marker.exists() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"the op never started: {errors}"
        killed = time.monotonic()
        scheduler.popen.kill()
        thread.join(timeout=FAIL_WITHIN)
        assert not thread.is_alive(), f"the run still waits {FAIL_WITHIN:g} s after its scheduler died"
        took = time.monotonic() - killed
    finally:
        stop_all(procs)
    assert len(errors) == 1 and isinstance(errors[0], RunError), errors
    assert str(errors[0]).startswith(f"lost the connection to the Dask scheduler at {address}"), str(errors[0])
    assert took < FAIL_WITHIN


def _run_in_own_group(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(cwd),
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _group_left(pgid: int) -> list[int]:
    """The processes of the group still there once they stop going away (:func:`waiting.gone`)."""
    return gone(lambda: [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(p) == pgid])


def _pgid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return -1


def _wait_for_handlers(pid: int, cap: float = 120.0) -> None:
    """Until ``orchestrate`` catches SIGTERM: its first act, before it imports the CLI.

    Python catches SIGINT itself from its own startup, so SIGTERM says that ``main`` runs. A fixed sleep
    once sent the signal while a loaded machine was still starting the interpreter, before any code of ours.
    Waits while the process lives (it is still starting), ``cap`` s at most.
    """
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        try:
            caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                          if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            caught = "SigCgt: 0"
        if int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.002)
    raise AssertionError(f"orchestrate ended, or did not handle SIGTERM within {cap:g} s")


@pytest.mark.parametrize("when", ["importing", "starting", "looping"])
def test_ctrl_c_to_the_process_group_prints_one_line_and_leaves_no_process(tmp_path: Path, when: str) -> None:
    """SIGINT to the whole group, as a terminal sends it: once 136 lines with 8 worker tracebacks."""
    orchestrate = str(BIN / "orchestrate")
    spec = polyfit_in(tmp_path / "spec", "device")  # a process per device (the host layout's: test_host_processes)
    proc = _run_in_own_group([orchestrate, "run", str(spec), "--set", "steps=100000",
                              "--output-dir", str(tmp_path)], tmp_path)
    if when == "looping":  # the loop is under way once the dashboard line is out and a moment has passed
        assert proc.stdout is not None
        while "dashboard" not in proc.stdout.readline():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(2.0)
    elif when == "importing":  # still importing Dask (once: a traceback of the import under way)
        _wait_for_handlers(proc.pid)
    else:  # starting the cluster
        time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err == "interrupted\n", err
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    assert _group_left(proc.pid) == []


def test_loop_runs_end_without_dask_warnings(tmp_path: Path) -> None:
    """Once: 'Closing dangling stream' for each worker-to-worker stream at the end of every loop run (a process
    per device: the values go worker to worker)."""
    done = subprocess.run([str(BIN / "orchestrate"), "run", str(polyfit_in(tmp_path / "spec", "device")),
                           "--set", "steps=200", "--output-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "ran gang" in done.stdout
    assert "dangling" not in done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr


def high_water_rss(pid: int) -> int:
    """The most resident memory ``pid`` has had, in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def attack(address: Address, unix: bool) -> tuple[list[socket.socket], socket.socket]:
    """What a local stranger tries on one listener: sizes it declares and a wrong secret (each refused at once),
    and a hello that never ends (closed after the time limit)."""
    refused = []
    for first in (head(HELLO, 2**62), head(HELLO, 256 << 20) + b"s" * 32, head(HELLO, 64) + b"w" * 64):
        refused.append(connect(address, unix, while_=lambda: True))
        refused[-1].sendall(first)
    slow = connect(address, unix, while_=lambda: True)
    slow.sendall(head(HELLO, 64)[:7])
    return refused, slow


def test_strangers_at_a_runs_link_sockets_neither_end_it_nor_touch_its_values_nor_its_memory(
        tmp_path: Path) -> None:
    """Once: 2^62 declared ended the run (MemoryError), 1,100 connections ended it (select()), 256 MiB declared
    was allocated in each worker before the secret was checked."""
    raise_descriptor_limit(4096)
    spec = loop_spec(tmp_path, at=30)
    book, go = tmp_path / "book.json", tmp_path / "go"
    spec.write_text(spec.read_text().replace('"killer:dies"', '"killer:hold"').replace(
        "at: 30}", f'at: 30, book: "{book}", go: "{go}"}}'))
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(_run_or_error(spec)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not book.exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert book.exists(), f"the loop never reached step 30: {results}"
    # GPU:1 holds step 30 (in `hold`); CPU:0 and GPU:0 wait for values meanwhile, reading their links
    listening = {d: Address(host, port, local) for d, (host, port, local) in json.loads(book.read_text()).items()}
    workers = worker_processes()
    before = {pid: high_water_rss(pid) for pid in workers}
    at_once: list[socket.socket] = []
    later: list[socket.socket] = []
    try:
        try:
            for device, address in listening.items():
                for unix in (False, True):
                    refused, slow = attack(address, unix)
                    (later if device == "self" else at_once).extend(refused)
                    later.append(slow)
            cpu = listening["/job:localhost/replica:0/task:0/device:CPU:0"]
            later += [connect(cpu, unix=True, while_=thread.is_alive) for _ in range(1100)]
        except (OSError, AssertionError) as exc:  # the workers went away (or their backlog never drained)
            thread.join(timeout=60)
            pytest.fail(f"strangers could no longer connect ({exc!r}); the run: {results}")
        deadline = time.monotonic() + 30  # generous, for a busy machine
        while not all(closed_by_peer(s) for s in at_once) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        grown = {pid: high_water_rss(pid) - before[pid] for pid in workers}
        assert thread.is_alive(), f"the run ended while strangers called: {results}"
        assert max(grown.values()) < 100 << 20, f"workers' memory grew by {grown} bytes while strangers called"
        assert all(closed_by_peer(s) for s in at_once), "a stranger's refused stream is still open"
    finally:
        go.write_text("")
        thread.join(timeout=180)
        for sock in at_once + later:
            sock.close()
    assert len(results) == 1 and not isinstance(results[0], BaseException), results
    np.testing.assert_allclose(results[0].values["train.w"], expected_w(), rtol=0, atol=0)


def _run_or_error(spec: Path) -> Any:
    try:
        return run_file(spec, echo=quiet, write_outputs=False)
    except BaseException as exc:  # noqa: BLE001 - the test reads it
        return exc
