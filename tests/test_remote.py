"""Remote clusters: `dask scheduler` + `orchestrate worker` processes on 127.0.0.1, `run --scheduler`, TLS.

Everything is real: a `dask scheduler` subprocess, one `orchestrate worker`
subprocess per task (each starting one Dask worker process per device), and
the run made from this process through the CLI or the API. Subprocesses are
always stopped in `finally`/fixture teardown; ports are chosen by the OS
(`--port 0` and a scheduler file).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.cli import run_cli
from orchestrator.errors import RunError
from orchestrator.execute.cluster import worker_options

pytestmark = [pytest.mark.cluster, pytest.mark.faults]
ROOT = Path(__file__).resolve().parent.parent
ROUND_ROBIN = ROOT / "specs" / "valid" / "round_robin.yaml"
BIN = Path(sys.executable).parent
# Starting processes are waited for while they are alive and have not said they are up: a loaded 2-core
# machine (load 8 to 11) once took more than the 60 s a clock gave them. A start that is stuck ends itself
# (`orchestrate worker` gives up once its processes make no progress for --timeout seconds: 30 below); the
# cap is for a process that does neither, and stays under pytest's 300 s per test, fixtures included.
START_CAP = 240.0

# the scheduler settings docs/clusters.md recommends, as environment variables
SCHEDULER_ENV = {
    "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": "5s",
    "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
    "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "2",
}

EXPECTED_PLACEMENT = {
    "v1": "/job:ps/replica:0/task:0/device:CPU:0",
    "v2": "/job:ps/replica:0/task:1/device:CPU:0",
    "v3": "/job:ps/replica:0/task:0/device:CPU:0",
    "v4": "/job:ps/replica:0/task:1/device:CPU:0",
    "v5": "/job:ps/replica:0/task:0/device:CPU:0",
    "s": "/job:worker/replica:0/task:0/device:GPU:0",
    "p1": "/job:worker/replica:0/task:0/device:GPU:1",
    "p2": "/job:worker/replica:0/task:1/device:GPU:1",
}


def quiet(_: str) -> None:
    pass


def _command(name: str) -> list[str]:
    """The installed console script beside this Python (the venv's), else the module."""
    script = BIN / name
    if script.exists():
        return [str(script)]
    if name == "orchestrate":
        return [sys.executable, "-c", "from orchestrator.entry import main; main()"]
    return [sys.executable, "-m", "dask"]


# --------------------------------------------------------------------------- processes


@dataclass
class Proc:
    """A subprocess whose stdout and stderr go to files (no pipe can fill up and block it)."""

    name: str
    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    @classmethod
    def start(cls, name: str, args: Sequence[str], logs: Path, env: dict[str, str] | None = None) -> Proc:
        logs.mkdir(parents=True, exist_ok=True)
        out, err = logs / f"{name}.out", logs / f"{name}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            popen = subprocess.Popen(list(args), stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, cwd=str(ROOT))
        return cls(name, popen, out, err)

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def wait_for(self, predicate: Any, what: str, cap: float = START_CAP) -> None:
        """Until ``predicate(self)``, while the process lives (it is still starting), for at most ``cap`` s."""
        deadline = time.monotonic() + cap
        while not predicate(self):
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.popen.returncode} before {what}:\n"
                                     f"{self.stdout()}\n{self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: alive but no {what} after {cap:g} s:\n{self.stdout()}\n"
                                     f"{self.stderr()}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send ``sig``; kill after ``timeout``; the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        return self.popen.returncode


def start_scheduler(logs: Path, name: str = "scheduler", tls: Certs | None = None) -> tuple[Proc, str]:
    """`dask scheduler` on 127.0.0.1, a free port, no dashboard; returns it and its address."""
    file = logs / f"{name}.json"
    args = [*_command("dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--dashboard-address", "127.0.0.1:0",
            "--scheduler-file", str(file)]
    if tls is not None:
        args += ["--protocol", "tls", "--tls-ca-file", str(tls.ca), "--tls-cert", str(tls.cert),
                 "--tls-key", str(tls.key)]
    proc = Proc.start(name, args, logs, SCHEDULER_ENV)
    proc.wait_for(lambda p: file.exists() and "address" in file.read_text(errors="replace"), "scheduler file")
    return proc, json.loads(file.read_text())["address"]


def start_task(spec: Path, job: str, task: int, address: str, logs: Path, *extra: str,
               env: dict[str, str] | None = None) -> Proc:
    args = [*_command("orchestrate"), "worker", str(spec), "--job", job, "--task", str(task),
            "--scheduler", address, "--host", "127.0.0.1", "--timeout", "30", *extra]
    return Proc.start(f"{job}{task}-{time.monotonic_ns()}", args, logs, env)


def started_lines(proc: Proc) -> list[str]:
    return [line for line in proc.stdout().splitlines() if line.startswith("started ")]


def wait_started(proc: Proc, devices: int) -> list[str]:
    proc.wait_for(lambda p: len(started_lines(p)) >= devices and "serving" in p.stdout(), f"{devices} workers")
    return started_lines(proc)


def stop_all(procs: Sequence[Proc]) -> None:
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.stop(signal.SIGKILL, timeout=20)


def scheduler_workers(address: str, security: Any = None) -> dict[str, dict[str, Any]]:
    """Worker name -> identity (with its address), as the scheduler lists them."""
    from distributed import Client

    with Client(address, timeout=20, security=security, set_as_default=False) as client:
        info = client.scheduler_info(n_workers=-1)["workers"]
    return {str(w["name"]): {**w, "address": addr} for addr, w in info.items()}


# --------------------------------------------------------------------------- round_robin on a remote cluster


@dataclass
class Remote:
    address: str
    logs: Path
    scheduler: Proc
    tasks: dict[tuple[str, int], Proc] = field(default_factory=dict)
    devices: dict[tuple[str, int], int] = field(default_factory=dict)

    def all_procs(self) -> list[Proc]:
        return [*self.tasks.values(), self.scheduler]


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remote]:
    """`dask scheduler` and one `orchestrate worker` per task round_robin.yaml uses (ps 0, 1; worker 0, 1)."""
    logs = tmp_path_factory.mktemp("remote")
    scheduler, address = start_scheduler(logs)
    cluster = Remote(address, logs, scheduler)
    try:
        spec = plan_file(ROUND_ROBIN).spec
        for job in spec.cluster.jobs:
            for task in range(job.tasks):
                cluster.devices[(job.name, task)] = 1 + job.logical_gpus
                cluster.tasks[(job.name, task)] = start_task(ROUND_ROBIN, job.name, task, address, logs)
        for key, proc in cluster.tasks.items():
            wait_started(proc, cluster.devices[key])
        yield cluster
    finally:
        stop_all(cluster.all_procs())


def test_run_on_orchestrate_workers_matches_the_embedded_cluster(remote: Remote, tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_cli(["run", str(ROUND_ROBIN), "--scheduler", remote.address, "--report", str(tmp_path / "run.json"),
                    "--output-dir", str(tmp_path), "--no-progress", "--wait-for-workers", "30"], out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "on a remote Dask cluster" in text and "placement verified against the plan" in text
    assert "s =\n3." in text and "p1 =\n6." in text and "p2 =\n9." in text
    report = json.loads((tmp_path / "run.json").read_text())
    ran = {entry["name"]: entry["worker"] for entry in report["ops"]}
    assert ran == EXPECTED_PLACEMENT == {p.op: p.device_name for p in plan_file(ROUND_ROBIN).placements}


def test_orchestrate_worker_starts_the_embedded_clusters_workers(remote: Remote) -> None:
    """Same names, resources, threads, memory limits and visible GPUs as EmbeddedCluster's worker_options."""
    from distributed import Client

    cluster = plan_file(ROUND_ROBIN).spec.cluster
    workers = scheduler_workers(remote.address)
    assert set(workers) == {d.name for d in cluster.devices}
    for (job, task), proc in remote.tasks.items():  # one line per device: name and address
        lines = started_lines(proc)
        names = [d.name for d in cluster.devices if d.spec.job == job and d.spec.task == task]
        assert lines == [f"started {name} at {workers[name]['address']}" for name in names]
    with Client(remote.address, timeout=20, set_as_default=False) as client:
        env = client.run(lambda: {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")})
        scheduler_timeout = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.no_workers_timeout)
    for device in cluster.devices:
        expected = worker_options(cluster, device)
        seen = workers[device.name]
        assert seen["resources"] == expected["resources"]
        assert seen["nthreads"] == expected["nthreads"]
        assert (seen["memory_limit"] or 0) == expected["memory_limit"]
        assert env[seen["address"]] == {k: expected["env"][k] for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}
    # the documented environment variable reaches a `dask scheduler` started by hand
    assert scheduler_timeout == 5.0


def test_missing_task_fails_then_a_restarted_task_keeps_its_ops(remote: Remote, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Identity resources, not addresses: a task restarted between two runs still receives its ops."""
    from distributed import Client

    gpu1 = "/job:worker/replica:0/task:1/device:GPU:1"
    first = run_file(ROUND_ROBIN, scheduler=remote.address, echo=quiet, write_outputs=False)
    assert first.report["ops"][-1]["worker"] == gpu1
    before = scheduler_workers(remote.address)[gpu1]["address"]

    # kill worker task 1 hard: its worker processes follow their parent
    old = remote.tasks[("worker", 1)]
    old.stop(signal.SIGKILL)
    deadline = time.monotonic() + 30
    while gpu1 in scheduler_workers(remote.address):
        assert time.monotonic() < deadline, "the scheduler still lists the killed task's workers"
        time.sleep(0.2)

    started = time.monotonic()
    code = run_cli(["run", str(ROUND_ROBIN), "--scheduler", remote.address, "--wait-for-workers", "2",
                    "--no-progress"], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 1
    assert time.monotonic() - started < 15
    assert f"no worker offers 1 device(s) the plan uses: {gpu1}" in err
    assert f"--job worker --task 1 --scheduler {remote.address}" in err and "Traceback" not in err

    # restart it by hand: a new process, the same names
    new = start_task(ROUND_ROBIN, "worker", 1, remote.address, remote.logs)
    remote.tasks[("worker", 1)] = new
    wait_started(new, 3)
    after = scheduler_workers(remote.address)[gpu1]["address"]
    assert after != before
    # the device runtime plugin is named by the cluster's devices: runs share one, none pile up on the
    # scheduler, and the restarted task received it from the scheduler when it joined, before any run
    with Client(remote.address, timeout=20, set_as_default=False) as client:
        plugins = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.worker_plugins))
        ready = client.run(lambda dask_worker: hasattr(dask_worker, "orchestrator_runtime"), workers=[after])
    assert len([p for p in plugins if p.startswith("orchestrator-")]) == 1, plugins
    assert ready == {after: True}

    second = run_file(ROUND_ROBIN, scheduler=remote.address, echo=quiet, write_outputs=False)
    assert {e["name"]: e["worker"] for e in second.report["ops"]} == EXPECTED_PLACEMENT
    assert float(second.values["p2"]) == 9.0
    with Client(remote.address, timeout=20, set_as_default=False) as client:
        plugins_after = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.worker_plugins))
    assert plugins_after == plugins
    # the restarted worker (new address, same name) received the second run's device runtime
    with Client(remote.address, timeout=20, set_as_default=False) as client:
        backend = client.run(lambda dask_worker: dask_worker.orchestrator_runtime.backend.name, workers=[after])
    assert backend == {after: "simulated"}


def test_signals_stop_orchestrate_worker_cleanly(remote: Remote) -> None:
    """SIGINT (Ctrl-C) and SIGTERM: workers closed, exit code 0, no traceback. Runs last: it stops tasks."""
    for (key, sig) in ((("ps", 1), signal.SIGINT), (("worker", 0), signal.SIGTERM)):
        proc = remote.tasks[key]
        assert proc.stop(sig, timeout=30) == 0, proc.stderr()
        assert f"stopping the workers of /job:{key[0]}/replica:0/task:{key[1]} ({signal.Signals(sig).name})" \
            in proc.stdout()
        assert "Traceback" not in proc.stderr()
    names = set(scheduler_workers(remote.address))
    assert not any(n.startswith(("/job:ps/replica:0/task:1/", "/job:worker/replica:0/task:0/")) for n in names)
    assert "/job:ps/replica:0/task:0/device:CPU:0" in names


# --------------------------------------------------------------------------- usage


@pytest.fixture
def spec_copy(tmp_path: Path) -> Path:
    target = tmp_path / "round_robin.yaml"
    shutil.copy(ROUND_ROBIN, target)
    return target


def test_worker_usage_errors(spec_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def worker(*args: str) -> tuple[int, str]:
        code = run_cli(["worker", str(spec_copy), "--scheduler", "tcp://127.0.0.1:1", *args], out=io.StringIO())
        return code, capsys.readouterr().err

    code, err = worker("--job", "wroker", "--task", "0")
    assert code == 2 and "no job 'wroker' (jobs: ps, worker); did you mean 'worker'?" in err
    code, err = worker("--job", "ps", "--task", "2")
    assert code == 2 and "job 'ps' has 2 tasks; --task must be 0..1, got 2" in err
    code, err = worker("--job", "worker", "--task", "0", "--gpus", "3")
    assert code == 2 and "--gpus must list 2 distinct GPUs, got 3" in err
    code, err = worker("--job", "worker", "--task", "0", "--gpus", "a,b")
    assert code == 2 and "expected GPU indices like 0,1" in err
    code, err = worker("--job", "worker", "--task", "0", "--tls-cert", "x.pem")
    assert code == 2 and "--tls-cert needs --tls-ca-file and --tls-key too" in err

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ngraph:\n  - {name: c, op: matmul, inputs: [a, b]}\n")
    code = run_cli(["worker", str(bad), "--job", "localhost", "--task", "0", "--scheduler", "tcp://x:1"],
                   out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 1 and f"{bad}:3:" in err and "input 'a' of op 'c' is not defined" in err

    code = run_cli(["worker", str(spec_copy), "--job", "ps", "--task", "0"], out=io.StringIO())
    assert code == 2 and "--scheduler ADDRESS is required" in capsys.readouterr().err


def test_worker_fails_when_the_scheduler_cannot_be_reached(spec_copy: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    code = run_cli(["worker", str(spec_copy), "--job", "ps", "--task", "0", "--scheduler",
                    f"tcp://127.0.0.1:{port}", "--timeout", "1"], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 1 and time.monotonic() - started < 15
    assert f"error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}: connection refused" in err
    assert "Traceback" not in err


def test_dask_commands_print_the_equivalent_dask_worker(spec_copy: Path) -> None:
    out = io.StringIO()
    code = run_cli(["worker", str(spec_copy), "--job", "worker", "--task", "1", "--scheduler", "tcp://h:8786",
                    "--gpus", "2,3", "--dask-commands"], out=out)
    lines = out.getvalue().splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0] == ("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1 "
                        "CUDA_VISIBLE_DEVICES='' dask worker tcp://h:8786 "
                        "--name /job:worker/replica:0/task:1/device:CPU:0 --nthreads 1 --memory-limit 0 "
                        "--resources device:/job:worker/replica:0/task:1/device:CPU:0=1,"
                        "task:/job:worker/replica:0/task:1=1 --no-dashboard")
    assert lines[2].startswith("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1 "
                               "CUDA_VISIBLE_DEVICES=3,2 dask worker tcp://h:8786 "
                               "--name /job:worker/replica:0/task:1/device:GPU:1 ")
    assert lines[2].endswith("--resources device:/job:worker/replica:0/task:1/device:GPU:1=1,"
                             "task:/job:worker/replica:0/task:1=1,GPU=1 --no-dashboard")


def test_dask_worker_started_by_hand_serves_a_task(tmp_path: Path) -> None:
    """The printed `dask worker` commands (docs/clusters.md: dask-jobqueue, dask-cuda) are enough to run."""
    spec = tmp_path / "small.yaml"
    spec.write_text(textwrap.dedent("""
        version: 1
        cluster:
          jobs:
            worker: {gpus: 1, memory_limit: 1GiB}
        graph:
          - {name: a, op: fill, shape: [2], value: 1.5, device: /cpu:0}
          - {name: b, op: mul, inputs: [a], scalar: 2}
        outputs: {b: "-"}
        """))
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs)
    procs = [scheduler]
    try:
        out = io.StringIO()
        assert run_cli(["worker", str(spec), "--job", "worker", "--task", "0", "--scheduler", address,
                        "--dask-commands"], out=out) == 0
        for i, line in enumerate(out.getvalue().splitlines()):
            command = line.replace(" dask worker ", f" {' '.join(_command('dask'))} worker ", 1)
            procs.append(Proc.start(f"dask-worker-{i}", ["sh", "-c", f"exec env {command} --host 127.0.0.1"], logs))
        for proc in procs[1:]:  # (dask worker says so in its log)
            proc.wait_for(lambda p: "Registered to:" in p.stderr(), "registration with the scheduler")
        result = run_file(spec, scheduler=address, echo=quiet, write_outputs=False)
        np.testing.assert_array_equal(result.values["b"], np.full(2, 3.0))
        assert result.report["ops"][1]["worker"] == "/job:worker/replica:0/task:0/device:GPU:0"
        assert result.report["devices"][1]["backend"] == "simulated"
    finally:
        stop_all(procs[1:] + procs[:1])


def test_run_refuses_mismatched_tls_and_scheme(tmp_path: Path) -> None:
    with pytest.raises(RunError, match=r"needs TLS: give cluster.tls in the spec or --tls-ca-file"):
        run_file(ROUND_ROBIN, scheduler="tls://127.0.0.1:1", echo=quiet, write_outputs=False)
    with pytest.raises(RunError, match=r"cannot connect to the Dask scheduler at tcp://127.0.0.1:1"):
        run_file(ROUND_ROBIN, scheduler="tcp://127.0.0.1:1", echo=quiet, write_outputs=False, wait_for_workers=1)


# --------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def make_certs(directory: Path, name: str) -> Certs:
    """A self-signed CA and a certificate for 127.0.0.1/localhost signed by it (openssl, EC P-256)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (directory / f"{name}-{part}" for part in
                                  ("ca.key", "ca.pem", "node.key", "node.csr", "node.pem"))
    ext = directory / f"{name}-ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n"
                   "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        ["openssl", "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
         "-subj", f"/CN={name} test CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost"],
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-out", str(cert), "-days", "2", "-extfile", str(ext)],
    ]
    for step in steps:
        subprocess.run(step, check=True, capture_output=True, timeout=60)
    return Certs(ca, cert, key)


TLS_SPEC = """
    version: 1
    cluster:
      tls: {ca_file: certs/good-ca.pem, cert: certs/good-node.pem, key: certs/good-node.key}
      jobs:
        worker: {gpus: 1}
    graph:
      - {name: a, op: fill, shape: [3], value: 2.0, device: /cpu:0}
      - {name: b, op: square, inputs: [a]}
    outputs: {b: "-"}
    """


def test_tls_scheduler_workers_and_client(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from distributed import Client, Security

    good = make_certs(tmp_path / "certs", "good")
    other = make_certs(tmp_path / "certs", "other")  # a CA the cluster does not trust
    spec = tmp_path / "tls.yaml"
    spec.write_text(textwrap.dedent(TLS_SPEC))
    logs = tmp_path / "logs"
    scheduler, address = start_scheduler(logs, tls=good)
    procs = [scheduler]
    try:
        assert address.startswith("tls://127.0.0.1:")
        # cluster.tls in the spec (paths relative to it) is used by orchestrate worker
        procs.append(start_task(spec, "worker", 0, address, logs))
        lines = wait_started(procs[-1], 2)
        assert all(" at tls://127.0.0.1:" in line for line in lines)

        out = io.StringIO()
        code = run_cli(["run", str(spec), "--scheduler", address, "--no-progress"], out=out)
        assert code == 0, out.getvalue() + capsys.readouterr().err
        assert "b =\n[4. 4. 4.]" in out.getvalue()

        # the scheduler refuses a TLS client without a certificate (it trusts the CA, but shows none) ...
        started = time.monotonic()
        host, port = address.removeprefix("tls://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(good.ca))
        context.check_hostname = False
        with socket.create_connection((host, int(port)), timeout=10) as raw, \
                pytest.raises((ssl.SSLError, ConnectionError)), context.wrap_socket(raw) as conn:
            conn.sendall(b"\0" * 8)
            assert conn.recv(1) != b""  # TLS 1.3: the refusal arrives on the first read
        # ... and a Dask client whose certificate another CA signed
        intruder = Security(tls_ca_file=str(other.ca), tls_client_cert=str(other.cert),
                            tls_client_key=str(other.key), require_encryption=True)
        with pytest.raises((OSError, TimeoutError)):
            Client(address, timeout=3, security=intruder, set_as_default=False)
        assert time.monotonic() - started < 20
        # ... also through orchestrate: the flags override the spec's files
        code = run_cli(["run", str(spec), "--scheduler", address, "--wait-for-workers", "3", "--tls-ca-file",
                        str(other.ca), "--tls-cert", str(other.cert), "--tls-key", str(other.key)], out=io.StringIO())
        err = capsys.readouterr().err
        assert code == 1 and f"cannot connect to the Dask scheduler at {address} within 3 s" in err
        # and a worker with the wrong certificates cannot join
        code = run_cli(["worker", str(spec), "--job", "worker", "--task", "0", "--scheduler", address, "--timeout",
                        "2", "--tls-ca-file", str(other.ca), "--tls-cert", str(other.cert), "--tls-key",
                        str(other.key)], out=io.StringIO())
        assert code == 1 and f"cannot reach the Dask scheduler at {address}" in capsys.readouterr().err
    finally:
        stop_all(procs[1:] + procs[:1])


def test_embedded_cluster_uses_tls_when_the_spec_has_it(tmp_path: Path) -> None:
    from distributed import Client

    from orchestrator.execute.cluster import EmbeddedCluster
    from orchestrator.execute.security import security_for

    make_certs(tmp_path / "certs", "good")
    spec = tmp_path / "tls.yaml"
    spec.write_text(textwrap.dedent(TLS_SPEC))
    result = run_file(spec, echo=quiet, write_outputs=False)
    np.testing.assert_array_equal(result.values["b"], np.full(3, 4.0))

    plan = plan_file(spec)
    security = security_for(plan.spec.cluster.tls, str(tmp_path))
    cpu_only = tuple(d for d in plan.spec.cluster.devices if not d.is_gpu)
    cluster = EmbeddedCluster(plan.spec.cluster, None, devices=cpu_only, security=security).start()
    try:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        with Client(cluster, set_as_default=False) as client:
            assert all(a.startswith("tls://") for a in client.scheduler_info()["workers"])
        with pytest.raises((OSError, TimeoutError)):  # plain TCP to the TLS port
            Client(cluster.scheduler_address.replace("tls://", "tcp://"), timeout=2, set_as_default=False)
    finally:
        cluster.close()
