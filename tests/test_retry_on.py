"""``run.retry_on``: the exception types worth retrying; any other fails its op at once.

Real runs on the embedded Dask cluster: an op that fails twice with one
exception type, then succeeds. Its attempts are counted in a file (they
run in the worker's process).
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli import run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.recovery]

FNS = '''
def flaky(x, xp, counter="", fails=2):
    with open(counter, "a") as f:
        f.write("x\\n")
    n = len(open(counter).read().split())
    if n <= fails:
        raise ConnectionResetError(f"transient failure {n}")
    return x * 2.0
'''

SPEC = """\
version: 1
run: {{retries: 2{retry_on}}}
graph:
  - {{name: a, op: ones, shape: [3]}}
  - {{name: b, op: call, fn: "flaky_fns:flaky", inputs: [a], params: {{counter: "{counter}"}}}}
outputs: {{b: b.npy}}
"""


def run(tmp_path: Path, retry_on: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, int, str]:
    """(exit code, attempts, stderr) of the spec's run with ``run.retry_on: retry_on`` ("": none)."""
    (tmp_path / "flaky_fns.py").write_text(FNS)
    counter = tmp_path / "attempts"
    spec = tmp_path / "flaky.yaml"
    spec.write_text(SPEC.format(retry_on=f", retry_on: {retry_on}" if retry_on else "", counter=counter))
    code = run_cli(["run", str(spec), "--output-dir", str(tmp_path / "out"), "--report", str(tmp_path / "r.json"),
                    "--no-progress"], out=io.StringIO())
    return code, len(counter.read_text().split()), capsys.readouterr().err


@pytest.mark.parametrize("listed", ["[ConnectionResetError]", "[ConnectionError]", "[builtins.OSError]"])
def test_an_exception_of_a_listed_type_is_retried_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           listed: str) -> None:
    """Its class, a base class, or a base by module.Name: run again on its worker, up to its retries."""
    code, attempts, err = run(tmp_path, listed, capsys)
    assert code == 0, err
    assert attempts == 3
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "b.npy"), np.full(3, 2.0))
    ops = {op["name"]: op for op in json.loads((tmp_path / "r.json").read_text())["ops"]}
    assert ops["b"]["retries"] == 2, ops["b"]


def test_an_exception_of_a_type_not_listed_fails_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """retries: 2 would run it again twice (as it does without retry_on, below); a type not listed fails now."""
    code, attempts, err = run(tmp_path, "[TimeoutError, KeyError]", capsys)
    assert code == 1
    assert attempts == 1, "an exception retry_on does not list was retried"
    first = err.splitlines()[0]
    assert first == ("error: op 'b' failed on /job:localhost/replica:0/task:0/device:CPU:0: ConnectionResetError: "
                     "transient failure 1 (not retried: run.retry_on lists TimeoutError, KeyError)"), err
    assert "Traceback" not in err


def test_without_retry_on_every_exception_is_retried(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, attempts, err = run(tmp_path, "", capsys)
    assert code == 0, err
    assert attempts == 3


# --------------------------------------------------------------------------- run.recover_on_exit_codes

DYING = '''
import os

def dies(x, xp, counter=""):
    with open(counter, "a") as f:
        f.write("x\\n")
    if len(open(counter).read().split()) == 1:  # its first run: the worker's process exits with code 3
        os._exit(3)
    return x * 2.0
'''

DYING_SPEC = """\
version: 1
run: {{retries: 1, recover_on_exit_codes: {codes}}}
graph:
  - {{name: a, op: ones, shape: [3]}}
  - {{name: b, op: call, fn: "dying_fns:dies", inputs: [a], params: {{counter: "{counter}"}}}}
outputs: {{b: b.npy}}
"""


def run_dying(tmp_path: Path, codes: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, int, str, str]:
    """(exit code, attempts, stdout, stderr) of a run whose op's worker process exits with code 3 once."""
    (tmp_path / "dying_fns.py").write_text(DYING)
    counter = tmp_path / "attempts"
    spec = tmp_path / "dying.yaml"
    spec.write_text(DYING_SPEC.format(codes=codes, counter=counter))
    out = io.StringIO()
    code = run_cli(["run", str(spec), "--output-dir", str(tmp_path / "out"), "--no-progress"], out=out)
    return code, len(counter.read_text().split()), out.getvalue(), capsys.readouterr().err


def test_a_worker_exit_code_listed_is_recovered_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, attempts, out, err = run_dying(tmp_path, "[3]", capsys)
    assert code == 0, out + err
    assert attempts == 2  # the restarted worker ran it again
    assert "/job:localhost/replica:0/task:0/device:CPU:0's worker was lost and restarted; Dask redid its work " \
           "(retries: 1)" in out, out
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "b.npy"), np.full(3, 2.0))


def test_a_worker_exit_code_not_listed_ends_the_run_in_one_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """retries: 1 would have the worker restarted and the op run again; exit code 3 is not listed: the run ends."""
    code, attempts, out, err = run_dying(tmp_path, "[4, -9]", capsys)
    assert code == 1
    assert attempts == 1, "an exit recover_on_exit_codes does not list was recovered from"
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: lost /job:localhost/replica:0/task:0/device:CPU:0: its worker's process "
                               "(process "), err
    assert lines[0].endswith(") exited with code 3, which run.recover_on_exit_codes does not list (4, -9): "
                             "not recovered from"), err
    assert not (tmp_path / "out" / "b.npy").exists()


def test_an_exit_not_listed_holds_its_restart_until_the_run_ends_on_a_cluster_that_outlives_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On `orchestrate worker`'s cluster: the nanny restarts the worker only once the failed run has let it go
    (so Dask never ran the op again), and the device is back for the next run, which recovers code 3."""
    from test_remote import scheduler_workers, start_scheduler, start_task, stop_all, wait_started

    (tmp_path / "dying_fns.py").write_text(DYING)
    counter = tmp_path / "attempts"
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        def run_with(codes: str, name: str) -> tuple[int, str]:
            spec = tmp_path / f"{name}.yaml"
            spec.write_text(DYING_SPEC.format(codes=codes, counter=counter))
            out = io.StringIO()
            code = run_cli(["run", str(spec), "--scheduler", address, "--output-dir", str(tmp_path / name),
                            "--no-progress"], out=out)
            return code, out.getvalue() + capsys.readouterr().err

        first_spec = tmp_path / "held.yaml"
        first_spec.write_text(DYING_SPEC.format(codes="[4]", counter=counter))
        procs.append(start_task(first_spec, "localhost", 0, address, logs))
        wait_started(procs[-1], 1)
        code, said = run_with("[4]", "held")
        assert code == 1, said
        assert "exited with code 3, which run.recover_on_exit_codes does not list (4)" in said, said
        assert len(counter.read_text().split()) == 1, "the op ran again before the run ended"
        deadline = time.monotonic() + 60
        while not scheduler_workers(address) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert scheduler_workers(address), "the held worker was not restarted once the run ended"
        counter.write_text("")
        code, said = run_with("[3]", "recovered")
        assert code == 0, said
        assert len(counter.read_text().split()) == 2, said
    finally:
        stop_all(procs[1:] + procs[:1])


def test_a_nanny_holds_the_restart_of_an_exit_not_listed_until_the_watch_lets_go() -> None:
    """Dask's nanny restarts a worker process at once; with the plugin, an exit code not listed waits for the run
    (ExitWatch.close), so Dask cannot hand the lost worker's tasks to a new process before the run decides."""
    from distributed import Client, LocalCluster

    from orchestrator.execute.exits import ExitWatch

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        watch = ExitWatch(client, [4], restart_held=True)
        client.submit(os._exit, 3, pure=False)
        deadline = time.monotonic() + 60
        while not watch.holding and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(watch.heard.values())[0][0] == 3, watch.heard
        time.sleep(3.0)  # a restart takes well under a second here when nothing holds it
        assert client.scheduler_info()["workers"] == {}, "the nanny restarted a process whose exit is not listed"
        watch.close()
        client.wait_for_workers(1, timeout=60)
