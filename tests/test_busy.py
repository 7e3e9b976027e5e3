"""A busy machine is not a fault: starts are waited for while they show progress, not for a fixed time.

Real processes: a ``dask scheduler``, ``orchestrate worker`` and ``dask worker``
processes whose worker start is slowed by a Dask preload (busy on the CPU, as
a start beside other work is, or asleep, as a stuck one is), and the run made
through the CLI. ``make test-busy`` runs these beside two busy loops.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_remote import Proc, _command, start_scheduler, start_task, stop_all, wait_started

from orchestrator.cli import run_cli
from orchestrator.execute.starting import CAPPED, QUIET, Progress, cpu_seconds, descendants

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

# A worker start that takes SLOW_SECONDS after its process is up: on the CPU (busy) or asleep (stuck);
# it says when it begins with a marker file.
SLOW = '''
import os, time

def dask_setup(worker):
    open(os.environ["SLOW_MARKER"], "a").close()
    end = time.monotonic() + float(os.environ["SLOW_SECONDS"])
    if os.environ["SLOW_MODE"] == "busy":
        while time.monotonic() < end:
            pass
    else:
        time.sleep(max(0.0, end - time.monotonic()))
'''

SPEC = """\
version: 1
graph:
  - {name: a, op: fill, shape: [2], value: 1.5}
outputs: {a: "-"}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_wait_goes_on_while_its_mark_grows_and_ends_after_a_quiet_spell_or_the_cap() -> None:
    clock = Clock()
    progress = Progress(quiet=3.0, clock=clock)
    assert progress.cap == 30.0
    progress.saw(1.0)  # the first reading is no progress
    clock.now = 2.9
    assert progress.verdict() == ""
    clock.now = 3.1
    assert progress.verdict() == QUIET
    progress.saw(1.0)  # the same mark again: still nothing
    assert progress.verdict() == QUIET
    progress.saw(1.5)
    assert progress.verdict() == ""
    for step in range(1, 40):  # always progress, never done: the cap ends it
        clock.now = 3.1 + step
        progress.saw(1.5 + step)
        if clock.now > 30.0:
            assert progress.verdict() == CAPPED
            break
        assert progress.verdict() == ""
    else:
        raise AssertionError("the cap never ended the wait")
    unknown = Progress(quiet=1.0, clock=clock)
    clock.now += 5.0
    unknown.seen()  # a sign of life that is not a number
    assert unknown.verdict() == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_cpu_seconds_grow_for_a_process_at_work_and_not_for_one_asleep() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    asleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert {busy.pid, asleep.pid} <= set(descendants(os.getpid()))
        time.sleep(1.0)  # let the sleeper finish starting
        first = {p.pid: cpu_seconds([p.pid]) for p in (busy, asleep)}
        time.sleep(1.0)
        second = {p.pid: cpu_seconds([p.pid]) for p in (busy, asleep)}
    finally:
        for proc in (busy, asleep):
            proc.kill()
            proc.wait()
    assert second[busy.pid] > first[busy.pid]  # type: ignore[operator]
    assert second[asleep.pid] == first[asleep.pid]


def _slow_env(tmp_path: Path, mode: str, seconds: float) -> tuple[dict[str, str], Path]:
    (tmp_path / "slow.py").write_text(SLOW)
    marker = tmp_path / f"slow-{mode}"
    return {"SLOW_MARKER": str(marker), "SLOW_MODE": mode, "SLOW_SECONDS": str(seconds)}, marker


def test_run_waits_for_a_worker_the_scheduler_sees_starting(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`run --scheduler --wait-for-workers 2` while a `dask worker` takes 8 s more to start: it waits, and runs.
    Before, it gave up after 2 s although the scheduler saw the worker's nanny starting it."""
    spec = tmp_path / "one.yaml"
    spec.write_text(SPEC)
    env, marker = _slow_env(tmp_path, "asleep", 8.0)
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        out = io.StringIO()
        assert run_cli(["worker", str(spec), "--job", "localhost", "--task", "0", "--scheduler", address,
                        "--dask-commands"], out=out) == 0
        command = out.getvalue().strip().replace(" dask worker ", f" {' '.join(_command('dask'))} worker ", 1)
        procs.append(Proc.start("dask-worker", ["sh", "-c", f"exec env {command} --host 127.0.0.1 --preload "
                                                f"{tmp_path / 'slow.py'}"], logs, env))
        procs[-1].wait_for(lambda _: marker.exists(), "worker start")  # its nanny is with the scheduler now
        out = io.StringIO()
        code = run_cli(["run", str(spec), "--scheduler", address, "--wait-for-workers", "2", "--no-progress"],
                       out=out)
        assert code == 0, out.getvalue() + capsys.readouterr().err
        assert "a =\n[1.5 1.5]" in out.getvalue()
    finally:
        stop_all(procs[1:] + procs[:1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_orchestrate_worker_waits_for_a_start_at_work_and_gives_up_on_one_asleep(tmp_path: Path) -> None:
    """`orchestrate worker --timeout 3`: a worker process busy starting for 12 s is waited for (it shows
    progress: CPU time); one asleep in its start fails it after 3 s of no progress, in one line.
    Before, both had timeout + 30 s in all, whatever they did."""
    spec = tmp_path / "one.yaml"
    spec.write_text(SPEC)
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    preload = {"DASK_DISTRIBUTED__WORKER__PRELOAD": f'["{tmp_path / "slow.py"}"]'}
    try:
        env, marker = _slow_env(tmp_path, "busy", 12.0)
        procs.append(start_task(spec, "localhost", 0, address, logs, "--timeout", "3", env={**env, **preload}))
        wait_started(procs[-1], 1)
        assert marker.exists()
        assert procs[-1].stop() == 0, procs[-1].stderr()

        env, marker = _slow_env(tmp_path, "asleep", 120.0)
        stuck = start_task(spec, "localhost", 0, address, logs, "--timeout", "3", env={**env, **preload})
        procs.append(stuck)
        stuck.wait_for(lambda p: p.popen.poll() is not None, "exit")
        assert marker.exists()
        assert stuck.popen.returncode == 1
        err = stuck.stderr()
        assert err.splitlines() == [
            "error: cannot start the workers of /job:localhost/replica:0/task:0: TimeoutError: the workers did "
            "not start: their processes made no progress (used no CPU) for 3 s (run with --debug to see Dask's "
            "log)"], err
    finally:
        stop_all(procs[1:] + procs[:1])


def test_the_busy_suite_names_what_it_runs() -> None:
    """`make test-busy` runs the tests marked `faults` but `recovery`, and CI runs the `recovery` ones as a
    suite of their own; both markers are declared (pytest -m would run none) and every recovery test is a
    fault test (so that the two suites together are the faults)."""
    root = Path(__file__).resolve().parent.parent
    pyproject = (root / "pyproject.toml").read_text()
    assert '"faults:' in pyproject and '"recovery:' in pyproject
    makefile = (root / "Makefile").read_text()
    assert "test-busy:" in makefile and 'BUSY_TESTS ?= -m "faults and not recovery"' in makefile
    assert 'TESTS ?= -m "not faults"' in makefile  # make test leaves the faults to the two busy suites
    assert 'make test-busy BUSY_TESTS="-m recovery"' in (root / ".ci" / "run").read_text()
    for path in root.glob("tests/test_*.py"):
        text = path.read_text()
        if "pytest.mark.recovery" in text:
            assert "pytest.mark.faults" in text, path
