"""The command line as a process: stop signals unwind quietly, leaving no temporary files and no tracebacks."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))



def _stop_while_writing(tmp_path: Path, sig: int) -> tuple[int, str, Path]:
    """Run a spec whose CSV output takes seconds to write; send ``sig`` once its temporary file exists."""
    spec = write(tmp_path / "slow_write.yaml", """\
        version: 1
        graph:
          - {name: a, op: random.uniform, shape: [3000000], seed: 1}
        outputs:
          a: out/a.csv
        """)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.csv").write_text("yesterday's table\n")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(spec)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not leftovers(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert leftovers(out), "the output was never being written"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err, out


@pytest.mark.cluster
@pytest.mark.faults
@pytest.mark.parametrize("sig, code, word", [(15, 143, "terminated"), (2, 130, "interrupted")])
def test_a_stop_signal_while_writing_leaves_no_temporary_file(tmp_path: Path, sig: int, code: int, word: str) -> None:
    """SIGTERM (timeout, Slurm, Kubernetes) and Ctrl-C in the middle of writing an output: the old file
    stays, the temporary file goes, one line says why, no traceback."""
    returncode, err, out = _stop_while_writing(tmp_path, sig)
    assert returncode == code, err
    assert err.strip().splitlines()[-1] == word and "Traceback" not in err, err
    assert leftovers(out) == []
    assert (out / "a.csv").read_text() == "yesterday's table\n"



@pytest.mark.cluster
@pytest.mark.faults
def test_ctrl_c_during_a_running_call_exits_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "sleepy.py").write_text(
        "import time\n"
        "def nap(x, xp, marker=''):\n"
        "    open(marker, 'w').close()\n"
        "    time.sleep(30)\n"
        "    return x\n", encoding="utf-8")
    marker = tmp_path / "started"
    spec = write(tmp_path / "nap.yaml", f"""\
        version: 1
        graph:
          - {{name: a, op: ones, shape: [3]}}
          - {{name: n, op: call, fn: "sleepy:nap", inputs: [a], params: {{marker: "{marker}"}}}}
        outputs: {{n: out.npy}}
        """)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(spec)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the call never started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip() == "interrupted", err
    assert not (tmp_path / "out.npy").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", ["run", "worker"])
def test_a_refused_connection_says_refused_at_once(tmp_path: Path, command: str) -> None:
    """Nothing listens at the scheduler's address: the run (or worker launcher) says so within seconds,
    instead of Dask's "Timed out" after 30."""
    spec = write(tmp_path / "spec.yaml", """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2]}
        """)
    address = f"tcp://127.0.0.1:{_free_port()}"
    extra = ["--job", "localhost", "--task", "0"] if command == "worker" else []
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "orchestrator", command, str(spec), "--scheduler", address, *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "connection refused" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert time.monotonic() - started < 15  # Python, Dask's import and the refusal; not a 30-second wait


@pytest.mark.parametrize(("command", "address", "expected"), [
    ("run", "tcp://127.0.0.1", "error: scheduler address 'tcp://127.0.0.1' has no port (write tcp://127.0.0.1:8786, "
                               "Dask's default scheduler port, or local for an embedded cluster)"),
    ("worker", "foo bar:1", "error: scheduler address 'foo bar:1' contains a space (write local, or host:port such "
                            "as tcp://10.0.0.1:8786; an IPv6 host goes in brackets: tcp://[::1]:8786)"),
    ("run", "udp://h:1", "error: scheduler address 'udp://h:1' has an unknown protocol 'udp'"),
])
def test_a_bad_scheduler_option_is_one_line_not_dasks_traceback(tmp_path: Path, command: str, address: str,
                                                                 expected: str) -> None:
    """--scheduler is checked as the spec's cluster.scheduler is (it once gave 'internal error: ValueError')."""
    spec = write(tmp_path / "spec.yaml", """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2]}
        """)
    extra = ["--job", "localhost", "--task", "0"] if command == "worker" else []
    done = subprocess.run([sys.executable, "-m", "orchestrator", command, str(spec), "--scheduler", address, *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith(expected) and len(done.stderr.strip().splitlines()) == 1, done.stderr
